"""A model folder: a trained model in the form others load (docs/model-folder.md).

``model.safetensors`` holds the weights (loading them runs no code), ``config.json`` the model's shape and
what its training recorded, ``vocab.json`` the characters in id order and ``README.md`` a model card."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from charrnn import __version__
from charrnn.errors import CharrnnError, OptionConflict, first_line
from charrnn.models.layernorm import EPSILON
from charrnn.training.model_card import model_card
from charrnn.utils.files import (
    folder_in_the_way,
    json_text,
    parse_json,
    read_regular,
    reason,
    refuse_writing_in_shipped,
    replace_folder,
    same_file,
    within_folder,
)

WEIGHTS, CONFIG, VOCAB, CARD = "model.safetensors", "config.json", "vocab.json", "README.md"
FOLDER_FILES = (WEIGHTS, CONFIG, VOCAB, CARD)
FOLDER_FORMAT, FOLDER_VERSION = "charrnn-model", 1
# The checkpoint fields config.json keeps: how the weights were made, never the state to resume from.
RECORDED_FIELDS = ("run_id", "corpus", "train_config", "step", "epoch", "progress_epochs", "elapsed_s",
                   "best", "best_val_loss", "best_is_average", "machine")
GATE_ORDER = {"lstm": "i f g o", "gru": "r z n", "rnn": "one", "esn": "one"}
NORMED_GATE_ORDER = {**GATE_ORDER, "gru": "z r n"}


def is_model_folder(path: Path) -> bool:
    """Whether ``path`` is a folder that holds a model folder's weights or vocabulary."""
    return Path(path).is_dir() and any(os.path.lexists(Path(path) / name) for name in (WEIGHTS, VOCAB))


def read_folder_config(path: Path) -> dict[str, Any] | None:
    """Model folder ``path``'s config.json; None when charrnn did not write it or it cannot be read."""
    try:
        config = parse_json(read_regular(Path(path) / CONFIG))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) and config.get("format") == FOLDER_FORMAT else None


def written_by_charrnn(path: Path) -> bool:
    """Whether folder ``path`` holds only a model folder's files, its config.json charrnn's: one that an
    export may replace."""
    try:
        names = {entry.name for entry in Path(path).iterdir()}
    except OSError:
        return False
    return names <= set(FOLDER_FILES) and read_folder_config(path) is not None


def _sampler_notes(model_config: dict[str, Any]) -> dict[str, Any]:
    """What a reader in another language needs beyond the shapes: how the tensors are read."""
    normed = bool(model_config.get("layer_norm"))
    notes = {"initial_state": "zeros", "tensor_names": "PyTorch's nn.LSTM, nn.GRU and nn.RNN names",
             "gate_order": (NORMED_GATE_ORDER if normed else GATE_ORDER).get(model_config.get("cell"))}
    return notes | ({"layer_norm_epsilon": EPSILON} if normed else {})


def folder_files(payload: dict[str, Any], name: str, path_shown: str,
                 float32: bool = False) -> dict[str, bytes]:
    """The files of the model folder for a checked checkpoint ``payload``: float32 weights with
    ``float32``, else the checkpoint's own. ``name`` titles the card; ``path_shown`` is its commands'."""
    from safetensors.torch import save

    state = {key: (value.float() if float32 else value).contiguous() for key, value in
             payload["model_state"].items()}
    dtype = str(next(iter(state.values())).dtype).removeprefix("torch.")
    config = {"format": FOLDER_FORMAT, "format_version": FOLDER_VERSION, "charrnn_version": __version__,
              "model_config": payload["model_config"], "weights_dtype": dtype,
              "sampler": _sampler_notes(payload["model_config"]),
              **{key: payload[key] for key in RECORDED_FIELDS if payload.get(key) is not None}}
    card = model_card(config, sum(value.numel() for value in state.values()), name, path_shown)
    return {WEIGHTS: save(state, metadata={"format": "pt"}), CONFIG: json_text(config, indent=2).encode(),
            VOCAB: json_text(payload["vocab"], ensure_ascii=True).encode(), CARD: card.encode("utf-8")}


def write_model_folder(payload: dict[str, Any], target: Path, name: str, float32: bool = False,
                       shown: str | None = None) -> int:
    """Write the model folder of ``payload`` at ``target`` atomically (an empty folder, or one an export
    wrote, gives way; ``shown``: how its card names it, default ``target``); return the weights' size."""
    files = folder_files(payload, name, shown or str(target), float32)
    replace_folder(target, files, written_by_charrnn)
    return len(files[WEIGHTS])


def check_folder_output(target: Path, named: str, source: Path) -> None:
    """Refuse, before any work, a model folder's output ``target`` (given by option ``named``) that has no
    parent directory, is in the shipped models' folder, holds the checkpoint ``source`` it is made from, or
    holds anything but a model folder charrnn wrote."""
    if not target.parent.is_dir():
        raise CharrnnError(f"{named} {target}: there is no directory {target.parent}")
    refuse_writing_in_shipped(target, named, "folder")
    if within_folder(source, target):
        relation = "is" if same_file(source, target) else "holds"
        raise OptionConflict(f"{named} {target} {relation} {source}, the checkpoint read: writing the folder "
                             f"would replace it; choose another folder")
    folder_in_the_way(target, written_by_charrnn, named)


def read_model_folder(folder: Path) -> dict[str, Any]:
    """A model folder as a checkpoint's dict (its weights and record, no training state), not yet
    checked: :func:`~charrnn.training.checkpoint.load_checkpoint` checks it and names the file at fault."""
    config = _json(folder / CONFIG)
    if not isinstance(config, dict) or config.get("format") != FOLDER_FORMAT:
        raise CharrnnError(f"{folder / CONFIG} is not a charrnn model folder's config (its format is not "
                           f"{FOLDER_FORMAT!r})")
    if config.get("format_version") != FOLDER_VERSION:
        raise CharrnnError(f"{folder / CONFIG}: format version {config.get('format_version')!r}; this "
                           f"charrnn reads version {FOLDER_VERSION}")
    if "model_config" not in config:
        raise CharrnnError(f"{folder / CONFIG} lacks model_config")
    from safetensors import SafetensorError
    from safetensors.torch import load

    weights = folder / WEIGHTS
    try:
        state = load(_bytes(weights))
    except (SafetensorError, ValueError, RuntimeError, TypeError) as exc:
        raise CharrnnError(f"{weights} is not a readable safetensors file ({first_line(exc)})") from None
    from charrnn.training.checkpoint import FORMAT_VERSION

    recorded = {key: config[key] for key in RECORDED_FIELDS if key in config}
    return {"format_version": FORMAT_VERSION, "model_config": config["model_config"],
            "vocab": _json(folder / VOCAB), "model_state": state, **recorded}


def file_at_fault(folder: Path, problem: str) -> Path:
    """The file of ``folder`` that a problem :func:`validate_payload` found (it names the field) is in."""
    field = re.match(r"[a-z_]*", problem).group()
    if field in ("model_state", "training_weights"):
        return folder / WEIGHTS
    return folder / VOCAB if field == "vocab" else folder / CONFIG


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
