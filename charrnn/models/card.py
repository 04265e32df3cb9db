"""A model folder's card, its README.md (docs/model-folder.md): what the model is, what it scores on which
text, and how it was made. Every recorded text is escaped for where it lands: Markdown text (markdown_text), a
code span, a fenced block, a shell word."""

from __future__ import annotations

import math
import re
from pathlib import PurePath
from typing import Any

from charrnn.utils.terminal import markdown_text, one_line, shell_word

NOT_RECORDED = "not recorded"


def _longest_backtick_run(text: str) -> int:
    return max(map(len, re.findall("`+", text)), default=0)


def _code_span(text: str, in_table: bool = False) -> str:
    """``text`` as a Markdown code span on one line (hidden characters as escapes), between more backticks
    than any run inside; in a table, its pipes escaped, which GitHub reads as cell breaks even in code."""
    text = one_line(text)
    fence = "`" * (_longest_backtick_run(text) + 1)
    padded = f" {text} " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else text
    return f"{fence}{padded.replace('|', chr(92) + '|') if in_table else padded}{fence}"


def _scores(config: dict[str, Any], folder: str) -> list[str]:
    score, best, corpus = config.get("score"), config.get("best"), config.get("corpus")
    if not score:
        run_best = (f" The run's best evaluation, of its best.pt's weights, scored "
                    f"{best['nats_per_char']:.4f} nats/char." if best else "")
        return [f"These weights were not scored when they were saved.{run_best} "
                f"{_code_span(f'charrnn eval-perplexity {folder}')} scores them on their validation split, "
                f"with the corpus at hand."]
    held = corpus["chars"] - corpus["split_point"] if corpus else None
    part = f"the first {score['chars'] + 1:,} of " if held and score["chars"] < held - 1 else ""
    held_out = (f"{part}the last {held:,} characters of {markdown_text(corpus['name'])}" if corpus
                else "its validation split")
    infinite = score["perplexity"] is None or math.isinf(score["perplexity"])
    perplexity = "∞" if infinite else f"{score['perplexity']:.3f}"
    return ["| text | characters scored | nats/char | bits/char | perplexity |", "|---|---|---|---|---|",
            f"| validation: {held_out} | {score['chars']:,} | {score['nats_per_char']:.4f} | "
            f"{score['bits_per_char']:.4f} | {perplexity} |"]


def _training(config: dict[str, Any]) -> list[str]:
    corpus, train = config.get("corpus"), config.get("train_config") or {}
    home = f" ({markdown_text(corpus['path'])})" if corpus and corpus["path"].startswith("https://") else ""
    # A fine-tune's source without the machine's folders: a checkpoint file with its run's name.
    source = PurePath(train.get("init_from") or "")
    source_name = "/".join(source.parts[-2:] if source.suffix == ".pt" else source.parts[-1:])
    rows = {
        "corpus": (f"{markdown_text(corpus['name'])}{home}, {corpus['chars']:,} characters, sha256 "
                   f"{_code_span(corpus['sha256'], in_table=True)}" if corpus else NOT_RECORDED),
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
        **({"fine-tuned from": markdown_text(source_name)} if train.get("init_from") else {}),
        "weights": f"{config['weights_dtype']} in model.safetensors", "charrnn": config["charrnn_version"],
    }
    return ["| | |", "|---|---|", *(f"| {key} | {value} |" for key, value in rows.items())]


def model_card(config: dict[str, Any], parameters: int, name: str, folder: str) -> str:
    """The card of a model folder whose config.json holds ``config``, named ``name``, at ``folder``."""
    model, quoted = config["model_config"], shell_word(folder)
    extras = [f"embedding {model['embed_size']}"]
    extras += ["skip connections"] if model.get("skip_connections") else []
    extras += ["layer normalisation"] if model.get("layer_norm") else []
    cell = model["cell"].upper() + (f" ({model['rnn_activation']})" if model["cell"] == "rnn" else "")
    shape = (f"A character-level {model['num_layers']}-layer {cell} of {model['hidden_size']} units "
             f"({', '.join(extras)}): {parameters:,} parameters, {model['vocab_size']} characters.")
    commands = [f"charrnn sample {quoted} --temperature 0.8 --length 300",
                f"charrnn eval-perplexity {quoted}   # its validation split, with the corpus at hand; or add "
                f"a text",
                f"charrnn train my_text.txt --init-from {quoted} --extend-vocab --time-budget 300"]
    fence = "`" * max(3, _longest_backtick_run("\n".join(commands)) + 1)  # longer than any run inside
    lines = [
        "---", "library_name: charrnn", "pipeline_tag: text-generation",
        f"tags: [character-level, {model['cell']}, charrnn]", "---", "",
        f"# {markdown_text(name)}", "", shape, "",
        "## Scores", "", *_scores(config, quoted), "", "## Training", "", *_training(config), "",
        "## Use", "", f"From the directory that holds {_code_span(folder)} (elsewhere, give its path):", "",
        f"{fence}bash", *commands, fence, "",
        "The prime must use characters the model knows (vocab.json). A fine-tune keeps the model's shape.",
        "", "## Files", "",
        "- `model.safetensors`: the weights, under PyTorch's names (`rnn.weight_ih_l0`, ...).",
        "- `config.json`: the model's shape, how a reader steps it (`sampler`), and what training recorded.",
        "- `vocab.json`: the characters, in id order.", "",
        "The folder holds no optimiser state: it samples, scores and fine-tunes, but cannot be resumed.",
    ]
    return "\n".join(lines) + "\n"
