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

import json
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

from charrnn.config import ModelConfig
from charrnn.errors import CharrnnError
from charrnn.model import CharRNN
from charrnn.vocab import Vocab

FORMAT_VERSION = 1
REQUIRED_KEYS = ("format_version", "model_config", "vocab", "model_state")


@contextmanager
def replacing(path: Path, failure: Callable[[OSError], str]) -> Iterator[str]:
    """Yield the name of an empty temporary sibling of ``path``; when the block succeeds, fsync it
    and rename it over ``path``.

    On any failure the temporary file is removed and any previous ``path`` is left as
    it was; an ``OSError`` (a full disk, say) becomes a :class:`CharrnnError` whose
    message is ``failure(error)``.
    """
    tmp_name = None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        yield tmp_name
        with open(tmp_name, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException as exc:
        if tmp_name is not None:
            Path(tmp_name).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise CharrnnError(failure(exc)) from None
        raise


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write ``path`` through a temporary sibling, fsync it, then rename it into place.

    A failure (a full disk, say) leaves any previous ``path`` untouched and no
    temporary file behind, and is reported as a :class:`CharrnnError`.
    """
    path = Path(path)
    with replacing(path, lambda exc: f"could not write {path}: {exc.strerror or exc}; "
                                     f"any previous {path.name} is intact") as tmp_name:
        with open(tmp_name, "wb") as handle:
            write(handle)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def write_json(path: Path, value: Any) -> None:
    atomic_write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def append_line(path: Path, line: str) -> None:
    """Add one line to a text file atomically: the file is rewritten whole, never half-appended."""
    existing = path.read_bytes() if path.exists() else b""
    atomic_write(path, lambda handle: handle.write(existing + line.encode("utf-8") + b"\n"))


def remove_stale_temporaries(directory: Path) -> None:
    """Delete the temporary files of atomic writes that a killed process left behind.

    Call only while holding the directory's run lock, so no live writer owns them.
    """
    for leftover in Path(directory).glob(".*.tmp"):
        leftover.unlink(missing_ok=True)


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
