"""A model folder's README.md: what the model is, what it scores on which text, and how it was made."""

from __future__ import annotations

import math
import shlex
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


def _scores(config: dict[str, Any]) -> list[str]:
    best, corpus = config.get("best"), config.get("corpus")
    if not best:
        return ["No validation score was recorded."]
    held_out = (f"the last {corpus['chars'] - corpus['split_point']:,} characters of "
                f"{markdown_text(corpus['name'])}" if corpus else "its validation split")
    perplexity = "∞" if math.isinf(best["perplexity"]) else f"{best['perplexity']:.3f}"
    averaged = " (averaged weights)" if config.get("best_is_average") else ""
    return ["| text | characters scored | nats/char | bits/char | perplexity |",
            "|---|---|---|---|---|",
            f"| validation: {held_out}{averaged} | {best['chars']:,} | {best['nats_per_char']:.4f} | "
            f"{best['bits_per_char']:.4f} | {perplexity} |"]


def _training(config: dict[str, Any], weights: str) -> list[str]:
    corpus, train = config.get("corpus"), config.get("train_config") or {}
    rows = {
        "corpus": (f"{markdown_text(corpus['name'])}, {corpus['chars']:,} characters, sha256 "
                   f"`{corpus['sha256']}`" if corpus else NOT_RECORDED),
        "validation split": (f"characters {corpus['split_point']:,} to the end ({corpus['val_frac']:g} held "
                             f"out)" if corpus else NOT_RECORDED),
        "steps": f"{config['step']:,}" if "step" in config else NOT_RECORDED,
        "passes over the training split": (f"{config['progress_epochs']:.2f}" if "progress_epochs" in config
                                           else NOT_RECORDED),
        "wall time": f"{config['elapsed_s']:,.0f} s" if "elapsed_s" in config else NOT_RECORDED,
        "machine": markdown_text(config.get("machine") or NOT_RECORDED),
        "batch × sequence": (f"{train['batch_size']} × {train['seq_len']}" if "batch_size" in train
                             else NOT_RECORDED),
        "weights": f"{weights} in model.safetensors",
        "charrnn": config["charrnn_version"],
    }
    return ["| | |", "|---|---|", *(f"| {key} | {value} |" for key, value in rows.items())]


def model_card(config: dict[str, Any], parameters: int, name: str, folder: str) -> str:
    """The card of a model folder whose config.json holds ``config``, named ``name``, at ``folder``."""
    model, quoted = config["model_config"], shlex.quote(folder)
    lines = [
        "---", "library_name: charrnn", "pipeline_tag: text-generation",
        f"tags: [character-level, {model['cell']}, charrnn]", "---", "",
        f"# {markdown_text(name)}", "", _shape(model, parameters), "",
        "## Scores", "", *_scores(config), "",
        "## Training", "", *_training(config, config["weights_dtype"]), "",
        "## Use", "", "```bash",
        f"charrnn sample {quoted} --temperature 0.8 --length 300",
        f"charrnn eval-perplexity {quoted} held_out.txt",
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
