"""A model folder's README.md: what the model is, what it scores on which text, and how it was made."""

from __future__ import annotations

import math
import shlex
from pathlib import PurePath
from typing import Any

from charrnn.utils.text import markdown_text

NOT_RECORDED = "not recorded"


def _shape(model: dict[str, Any], parameters: int) -> str:
    extras = [f"embedding {model['embed_size']}"]
    extras += ["skip connections"] if model.get("skip_connections") else []
    extras += ["layer normalisation"] if model.get("layer_norm") else []
    cell = model["cell"].upper() + (f" ({model['rnn_activation']})" if model["cell"] == "rnn" else "")
    return (f"A character-level {model['num_layers']}-layer {cell} of {model['hidden_size']} units "
            f"({', '.join(extras)}): {parameters:,} parameters, {model['vocab_size']} characters.")


def _scores(config: dict[str, Any], folder: str) -> list[str]:
    score, best, corpus = config.get("score"), config.get("best"), config.get("corpus")
    if not score:
        run_best = (f" The run's best evaluation, of its best.pt's weights, scored "
                    f"{best['nats_per_char']:.4f} nats/char." if best else "")
        return [f"These weights were not scored when they were saved.{run_best} `charrnn eval-perplexity "
                f"{folder}` scores them on their validation split, with the corpus at hand."]
    held = corpus["chars"] - corpus["split_point"] if corpus else None
    part = f"the first {score['chars'] + 1:,} of " if held and score["chars"] < held - 1 else ""
    held_out = (f"{part}the last {held:,} characters of {markdown_text(corpus['name'])}" if corpus
                else "its validation split")
    perplexity = "∞" if score["perplexity"] is None or math.isinf(score["perplexity"]) else \
        f"{score['perplexity']:.3f}"
    return ["| text | characters scored | nats/char | bits/char | perplexity |",
            "|---|---|---|---|---|",
            f"| validation: {held_out} | {score['chars']:,} | {score['nats_per_char']:.4f} | "
            f"{score['bits_per_char']:.4f} | {perplexity} |"]


def _training(config: dict[str, Any], weights: str) -> list[str]:
    corpus, train = config.get("corpus"), config.get("train_config") or {}
    home = f" ({corpus['path']})" if corpus and corpus["path"].startswith("https://") else ""
    rows = {
        "corpus": (f"{markdown_text(corpus['name'])}{home}, {corpus['chars']:,} characters, sha256 "
                   f"`{corpus['sha256']}`" if corpus else NOT_RECORDED),
        "validation split": (f"characters {corpus['split_point']:,} to the end, "
                             f"{1 - corpus['split_point'] / corpus['chars']:.1%} of the corpus" if corpus
                             else NOT_RECORDED),
        "steps": f"{config['step']:,}" if "step" in config else NOT_RECORDED,
        "passes over the training split": (f"{config['progress_epochs']:.2f}" if "progress_epochs" in config
                                           else NOT_RECORDED),
        "wall time": f"{config['elapsed_s']:,.0f} s" if "elapsed_s" in config else NOT_RECORDED,
        "machine": markdown_text(config.get("machine") or NOT_RECORDED),
        "batch × sequence": (f"{train['batch_size']} × {train['seq_len']}" if "batch_size" in train
                             else NOT_RECORDED),
        **({"fine-tuned from": markdown_text(_last_parts(train["init_from"]))} if train.get("init_from")
           else {}),
        "weights": f"{weights} in model.safetensors",
        "charrnn": config["charrnn_version"],
    }
    return ["| | |", "|---|---|", *(f"| {key} | {value} |" for key, value in rows.items())]


def _last_parts(path: str) -> str:
    """A path as a card names it without the machine's folders: a checkpoint file with its run's name."""
    parts = PurePath(path).parts
    return "/".join(parts[-2:] if PurePath(path).suffix == ".pt" else parts[-1:])


def model_card(config: dict[str, Any], parameters: int, name: str, folder: str) -> str:
    """The card of a model folder whose config.json holds ``config``, named ``name``, at ``folder``."""
    model, quoted = config["model_config"], shlex.quote(folder)
    lines = [
        "---", "library_name: charrnn", "pipeline_tag: text-generation",
        f"tags: [character-level, {model['cell']}, charrnn]", "---", "",
        f"# {markdown_text(name)}", "", _shape(model, parameters), "",
        "## Scores", "", *_scores(config, quoted), "",
        "## Training", "", *_training(config, config["weights_dtype"]), "",
        "## Use", "", "```bash",
        f"charrnn sample {quoted} --temperature 0.8 --length 300",
        f"charrnn eval-perplexity {quoted}   # its validation split, with the corpus at hand; or add a text",
        f"charrnn train my_text.txt --init-from {quoted} --extend-vocab --time-budget 300",
        "```", "",
        "The prime must use characters the model knows (vocab.json). A fine-tune keeps the model's shape.",
        "",
        "## Files", "",
        "- `model.safetensors`: the weights, under PyTorch's names (`rnn.weight_ih_l0`, ...).",
        "- `config.json`: the model's shape, how a reader steps it (`sampler`), and what training recorded.",
        "- `vocab.json`: the characters, in id order.",
        "",
        "The folder holds no optimiser state: it samples, scores and fine-tunes, but cannot be resumed.",
    ]
    return "\n".join(lines) + "\n"
