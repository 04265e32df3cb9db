"""Checkpoints: plain dicts of Python values and CPU tensors, written atomically.

A checkpoint never pickles a module or a class, so it loads with
``torch.load(..., weights_only=True)``, which cannot run code hidden in a file,
and it loads on a CPU-only machine whatever device trained it. Writes go to a
temporary file in the same directory, are flushed to disk, then renamed over the
target, so a crash mid-save leaves the previous file intact.

Keys: ``format_version``, ``model_config``, ``train_config``, ``vocab`` (list of
characters), ``model_state``, ``optimizer_state``, ``step``, ``epoch``,
``epoch_step``, ``progress_epochs`` (fractional), ``best_val_loss``, ``corpus`` (path,
characters, hash, split point).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from charrnn.config import ModelConfig
from charrnn.errors import CharrnnError
from charrnn.files import atomic_write
from charrnn.model import CharRNN
from charrnn.vocab import Vocab

FORMAT_VERSION = 1
REQUIRED_KEYS = ("format_version", "model_config", "vocab", "model_state")


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_to_cpu(v) for v in value)
    return value


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Save ``payload`` (see module docstring) atomically, tensors moved to the CPU."""
    payload = {"format_version": FORMAT_VERSION, **_to_cpu(payload)}
    atomic_write(path, lambda handle: torch.save(payload, handle))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint safely onto the CPU; any problem becomes a one-line :class:`CharrnnError`."""
    path = Path(path)
    if not path.is_file():
        raise CharrnnError(f"checkpoint {path} does not exist")
    try:
        with warnings.catch_warnings():
            # Foreign files make torch warn about pickle protocols before failing; the
            # error below says all a user needs.
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt, truncated or unsafe files
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CharrnnError(
            f"{path} is not a readable charrnn checkpoint ({first_line[:160]})"
        ) from None
    if not isinstance(payload, dict) or any(key not in payload for key in REQUIRED_KEYS):
        raise CharrnnError(f"{path} is not a charrnn checkpoint (missing model, config or vocabulary)")
    version = payload["format_version"]
    if version != FORMAT_VERSION:
        raise CharrnnError(
            f"{path} has checkpoint format version {version}; this charrnn reads version "
            f"{FORMAT_VERSION}"
        )
    return payload


@dataclass
class LoadedModel:
    model: CharRNN  # in eval mode, on the requested device
    vocab: Vocab  # the vocabulary the model was trained with
    payload: dict[str, Any]  # the whole checkpoint, for metadata (step, corpus, ...)


def load_model(path: Path, device: str = "cpu") -> LoadedModel:
    """Rebuild the model and vocabulary stored in a checkpoint, ready for inference."""
    payload = load_checkpoint(path)
    try:
        config = ModelConfig.from_dict(payload["model_config"])
        vocab = Vocab.from_list(payload["vocab"])
        model = CharRNN(config)
        model.load_state_dict(payload["model_state"])
    except (CharrnnError, TypeError, KeyError, RuntimeError) as exc:
        raise CharrnnError(f"{path} holds an inconsistent checkpoint: {str(exc).splitlines()[0]}") from None
    if len(vocab) != config.vocab_size:
        raise CharrnnError(f"{path} holds an inconsistent checkpoint: vocabulary size mismatch")
    model.to(device).eval()
    return LoadedModel(model=model, vocab=vocab, payload=payload)
