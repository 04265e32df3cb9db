"""A model folder: a trained model in the form others load (docs/model-folder.md).

``model.safetensors`` holds the weights (loading them runs no code), ``config.json`` the model's shape and
what its training recorded, ``vocab.json`` the characters in id order and ``README.md`` a model card."""

from __future__ import annotations

import math
import os
import re
import shlex
from pathlib import Path, PurePath
from typing import Any

from charrnn.config import VERSION
from charrnn.errors import CharrnnError, OptionConflict, first_line
from charrnn.models.layernorm import EPSILON
from charrnn.models.pretrained import refuse_writing_in_shipped
from charrnn.utils.files import (
    folder_in_the_way,
    json_text,
    parse_json,
    read_json_object,
    read_regular,
    real_path,
    reason,
    replace_folder,
    same_file,
    within_folder,
)
from charrnn.utils.terminal import markdown_text

# A run directory's checkpoints: a folder that holds one stays a run directory, never a model folder.
CHECKPOINT_NAMES = ("last.pt", "best.pt")
WEIGHTS, CONFIG, VOCAB, CARD = "model.safetensors", "config.json", "vocab.json", "README.md"
FOLDER_FILES = (WEIGHTS, CONFIG, VOCAB, CARD)
FOLDER_FORMAT, FOLDER_VERSION = "charrnn-model", 1
# The checkpoint fields config.json keeps: how the weights were made, never the state to resume from.
RECORDED_FIELDS = ("run_id", "corpus", "train_config", "step", "epoch", "progress_epochs", "elapsed_s",
                   "best", "best_is_average", "latest_eval", "machine", "score")
SCORES = ("best", "latest_eval", "score")  # evaluation records: JSON has no infinity, so one is written null
GATE_ORDER = {"lstm": "i f g o", "gru": "r z n", "rnn": "one", "esn": "one"}
NORMED_GATE_ORDER = {**GATE_ORDER, "gru": "z r n"}


def is_model_folder(path: Path) -> bool:
    """Whether ``path`` is a folder that holds a model folder's weights or charrnn's config, and no run's
    checkpoint (a run directory stays one, whatever is copied into it)."""
    folder = Path(path)
    if not folder.is_dir() or any(os.path.lexists(folder / name) for name in CHECKPOINT_NAMES):
        return False
    return os.path.lexists(folder / WEIGHTS) or read_folder_config(folder) is not None


def read_folder_config(path: Path) -> dict[str, Any] | None:
    """Model folder ``path``'s config.json; None when charrnn did not write it or it cannot be read."""
    config = read_json_object(Path(path) / CONFIG)
    return config if config is not None and config.get("format") == FOLDER_FORMAT else None


def not_exported(path: Path) -> list[str]:
    """What in folder ``path`` an export did not write (none: an export may replace it): names of no model
    folder's file, or else its config.json when that is not charrnn's."""
    try:
        foreign = sorted(entry.name for entry in Path(path).iterdir() if entry.name not in FOLDER_FILES)
    except OSError:
        return [str(path)]
    return foreign or ([] if read_folder_config(path) is not None else [CONFIG])


def weights_score(payload: dict[str, Any], source: Path) -> dict[str, Any] | None:
    """The validation score of the very weights in ``payload`` (read from ``source``), where one was
    recorded: a folder's own, a best.pt's (or a weights-only file's) best, or an evaluation at its step."""
    if "score" in payload:
        return payload["score"]
    if source.name == "best.pt" or "optimizer_state" not in payload:
        return payload.get("best")
    latest = payload.get("latest_eval")
    if latest and latest.get("step") == payload.get("step"):
        return {key: value for key, value in latest.items() if key != "step"}
    return None


def _json_ready(record: Any) -> Any:
    """An evaluation record as JSON keeps it: none at all when its score is not a finite number."""
    finite = isinstance(record, dict) and isinstance(record.get("nats_per_char"), int | float) and \
        math.isfinite(record["nats_per_char"])
    return record if finite else None


def _sampler_notes(model_config: dict[str, Any]) -> dict[str, Any]:
    """What a reader in another language needs beyond the shapes: how the tensors are read."""
    normed = bool(model_config.get("layer_norm"))
    notes = {"initial_state": "zeros", "tensor_names": "PyTorch's nn.LSTM, nn.GRU and nn.RNN names",
             "gate_order": (NORMED_GATE_ORDER if normed else GATE_ORDER).get(model_config.get("cell"))}
    return notes | ({"layer_norm_epsilon": EPSILON} if normed else {})


def weights_dtype(state: dict[str, Any]) -> str:
    """The tensors' dtype (``float16``), or each of them when they differ (``mixed: float16, float32``)."""
    dtypes = sorted({str(value.dtype).removeprefix("torch.") for value in state.values()})
    return dtypes[0] if len(dtypes) == 1 else f"mixed: {', '.join(dtypes)}"


def folder_files(payload: dict[str, Any], source: Path, name: str, path_shown: str,
                 float32: bool = False) -> dict[str, bytes]:
    """The files of the model folder for the checked checkpoint ``payload`` read from ``source``: float32
    weights with ``float32``, else its own. ``name`` titles the card; ``path_shown`` is its commands'."""
    from safetensors.torch import save

    state = {key: (value.float() if float32 else value).contiguous() for key, value in
             payload["model_state"].items()}
    recorded = {**payload, "score": weights_score(payload, source)}
    recorded |= {key: _json_ready(recorded.get(key)) for key in SCORES}
    config = {"format": FOLDER_FORMAT, "format_version": FOLDER_VERSION, "charrnn_version": VERSION,
              "model_config": payload["model_config"], "weights_dtype": weights_dtype(state),
              "sampler": _sampler_notes(payload["model_config"]),
              **{key: recorded[key] for key in RECORDED_FIELDS if recorded.get(key) is not None}}
    card = model_card(config, sum(value.numel() for value in state.values()), name, path_shown)
    return {WEIGHTS: save(state, metadata={"format": "pt"}), CONFIG: json_text(config, indent=2).encode(),
            VOCAB: json_text(payload["vocab"], ensure_ascii=True).encode(), CARD: card.encode("utf-8")}


def write_model_folder(payload: dict[str, Any], source: Path, target: Path, name: str, float32: bool = False,
                       shown: str | None = None) -> int:
    """Write the model folder of ``payload`` (read from ``source``) at ``target`` atomically (an empty
    folder, or one an export wrote, gives way; ``shown``: how its card names it, default the folder's
    name); return the weights' size in bytes."""
    shown = shown or (target.name if not target.name.startswith("-") else f"./{target.name}")
    files = folder_files(payload, source, name, shown, float32)
    replace_folder(target, files, not_exported)
    return len(files[WEIGHTS])


def refuse_writing_in_a_model_folder(target: Path, named: str, what: str) -> None:
    """Refuse an output ``target`` (given by option ``named``, a ``what``) inside a model folder, through
    links too: such a folder holds its own files alone."""
    for place in dict.fromkeys([Path(target), real_path(target)]):
        folder = next((parent for parent in place.parents if read_folder_config(parent) is not None), None)
        if folder is not None:
            raise OptionConflict(f"{named} {target} is inside the model folder {folder}, which holds its own "
                                 f"files alone; choose another {what}")


def check_folder_output(target: Path, named: str, source: Path) -> None:
    """Refuse, before any work, a model folder's output ``target`` (given by option ``named``) that has no
    parent directory, is in the shipped models' folder, holds the checkpoint ``source`` it is made from, or
    holds anything but a model folder charrnn wrote."""
    if not target.parent.is_dir():
        raise CharrnnError(f"{named} {target}: there is no directory {target.parent}")
    refuse_writing_in_shipped(target, named, "folder")
    refuse_writing_in_a_model_folder(target, named, "folder")
    if within_folder(source, target):
        relation = "is" if same_file(source, target) else "holds"
        raise OptionConflict(f"{named} {target} {relation} {source}, the checkpoint read: writing the folder "
                             f"would replace it; choose another folder")
    folder_in_the_way(target, not_exported, named)


def read_model_folder(folder: Path) -> dict[str, Any]:
    """A model folder as a checkpoint's dict (its weights and record; no training state, no format
    version), not yet checked: :func:`~charrnn.training.checkpoint.load_checkpoint` checks it and names the
    file at fault."""
    config = _json(folder / CONFIG)
    if not isinstance(config, dict) or config.get("format") != FOLDER_FORMAT:
        raise CharrnnError(f"{folder / CONFIG} is not a charrnn model folder's config (its format is not "
                           f"{FOLDER_FORMAT!r})")
    version = config.get("format_version")
    if type(version) is not int or version != FOLDER_VERSION:
        raise CharrnnError(f"{folder / CONFIG}: format version {version!r}; this charrnn reads version "
                           f"{FOLDER_VERSION}")
    if "model_config" not in config:
        raise CharrnnError(f"{folder / CONFIG} lacks model_config")
    from safetensors import SafetensorError
    from safetensors.torch import load

    weights = folder / WEIGHTS
    try:
        state = load(_bytes(weights))
    except (SafetensorError, ValueError, RuntimeError, TypeError) as exc:
        raise CharrnnError(f"{weights} is not a readable safetensors file ({first_line(exc)})") from None
    recorded = {"score": None} | {key: config[key] for key in RECORDED_FIELDS if key in config}
    for key in SCORES:  # an infinite perplexity was written null
        if isinstance(recorded.get(key), dict) and recorded[key].get("perplexity", 0) is None:
            recorded[key] = {**recorded[key], "perplexity": math.inf}
    return {"model_config": config["model_config"],
            "vocab": _json(folder / VOCAB), "model_state": state, **recorded}


def file_at_fault(folder: Path, problem: str) -> str:
    """Where in ``folder`` a problem :func:`validate_payload` found (it names the field) lies: one file,
    or two that do not match (a problem that cites model_config)."""
    field = re.match(r"[a-z_]*", problem).group()
    file = WEIGHTS if field in ("model_state", "training_weights") else VOCAB if field == "vocab" else CONFIG
    if file != CONFIG and "model_config" in problem:
        return f"{folder / file} does not match {folder / CONFIG}"
    return str(folder / file)


def _bytes(path: Path) -> bytes:
    if not os.path.lexists(path):
        raise CharrnnError(f"{path} is missing: a model folder holds {', '.join(FOLDER_FILES[:3])}")
    try:
        return read_regular(path)
    except OSError as exc:
        raise CharrnnError(f"cannot read {path}: {reason(exc)}") from None


def _json(path: Path) -> Any:
    try:
        return parse_json(_bytes(path).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CharrnnError(f"{path} is not JSON ({first_line(exc)})") from None


# ---------------------------------------------------------------------------- the model card
# README.md: what the model is, what it scores on which text, and how it was made.

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
