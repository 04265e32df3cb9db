"""A run directory's one source of truth: ``manifest.json``, the list of its saved states (docs/files.md).

It is replaced whole after each checkpoint is in place. :func:`saved_steps` trusts neither it nor the files
alone, and never takes a file it cannot read to mean "nothing newer"."""

from __future__ import annotations

import os
import stat
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from charrnn.errors import CharrnnError
from charrnn.utils.files import file_sha256, parse_json, read_regular, reason, same_file, write_json

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1
CHECKPOINT_NAMES = ("last.pt", "best.pt")
EPOCH_CHECKPOINT_GLOB = "epoch*-val*.pt"
ROLES = {"last.pt": "last", "best.pt": "best"}


@dataclass(frozen=True)
class SavedState:
    """One checkpoint of the run, as it was saved."""

    step: int  # optimiser steps the checkpoint holds
    role: str  # last, best or epoch
    sha256: str  # hex digest of the file's bytes
    bytes: int  # the file's size


@dataclass
class Manifest:
    run_id: str | None  # the run that saved these states (config.json carries the same)
    states: dict[str, SavedState] = field(default_factory=dict)  # file name in the directory -> state

    def to_dict(self) -> dict[str, Any]:
        return {"format": MANIFEST_FORMAT, "run_id": self.run_id,
                "states": {name: asdict(state) for name, state in sorted(self.states.items())}}


def record_saved(out_dir: Path, manifest: Manifest, name: str, step: int) -> None:
    """Add the checkpoint just saved as ``out_dir/name`` to ``manifest`` and replace the manifest file."""
    path = out_dir / name
    try:
        state = SavedState(step, ROLES.get(name, "epoch"), file_sha256(path), path.stat().st_size)
    except OSError as exc:
        raise CharrnnError(f"cannot read back {path} after saving it: {reason(exc)}") from None
    manifest.states[name] = state
    write_json(out_dir / MANIFEST_NAME, manifest.to_dict())


def read_manifest(out_dir: Path) -> Manifest | None:
    """The manifest of ``out_dir``; None without one (a run from before manifests). One that cannot be
    read or parsed is a :class:`CharrnnError`, never taken for an absent one."""
    path = Path(out_dir) / MANIFEST_NAME
    try:
        text = read_regular(path).decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        why = reason(exc) if isinstance(exc, OSError) else "not UTF-8"
        raise CharrnnError(f"cannot read the run's manifest {path}: {why}") from None
    try:
        value = parse_json(text)
        states = {name: SavedState(**entry) for name, entry in value["states"].items()}
        if value.get("format") != MANIFEST_FORMAT or any(
                not isinstance(state.step, int) or isinstance(state.step, bool) for state in states.values()):
            raise ValueError
        return Manifest(value.get("run_id"), states)
    except (ValueError, TypeError, KeyError, AttributeError):
        raise CharrnnError(f"the run's manifest {path} is damaged (not a charrnn manifest); it is what tells "
                           f"which saved state is newest") from None


def checkpoint_files(out_dir: Path) -> list[Path]:
    """The checkpoints in ``out_dir`` under names a run saves: last.pt, best.pt and epoch checkpoints."""
    out_dir = Path(out_dir)
    return [*(out_dir / name for name in CHECKPOINT_NAMES if (out_dir / name).exists()
              or (out_dir / name).is_symlink()), *sorted(out_dir.glob(EPOCH_CHECKPOINT_GLOB))]


def read_header(path: Path) -> dict[str, Any] | None:
    """A checkpoint's plain values, read without loading its tensors; None when it cannot be read."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block torch.load
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # any unreadable file: the caller decides what "unreadable" means
        return None
    return payload if isinstance(payload, dict) else None


def _step_and_run(path: Path) -> tuple[int, str | None] | None:
    """A checkpoint's step and run id, read without loading its tensors; None if it cannot be read."""
    payload = read_header(path)
    step = payload.get("step") if payload is not None else None
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    return step, payload.get("run_id")


@dataclass(frozen=True)
class Newest:
    step: int  # the newest step saved in the directory
    name: str  # the file that holds (or held) it


@dataclass(frozen=True)
class SavedSteps:
    """What a run directory says about its saved states."""

    newest: Newest | None  # the newest state known, from the manifest or a readable file
    unreadable: tuple[Path, ...]  # checkpoint files the manifest does not vouch for and that cannot be read


def saved_steps(out_dir: Path, run_id: str | None, ignore: Path | None = None) -> SavedSteps:
    """The states saved in ``out_dir`` by run ``run_id`` (not another run's), cross-checking manifest and
    files. ``ignore``: a file not to count (the checkpoint being resumed)."""
    out_dir = Path(out_dir)
    manifest = read_manifest(out_dir)
    vouched = manifest.states if manifest is not None else {}
    candidates: list[Newest] = []
    # The manifest's record of the file being resumed counts too, unless the file is still that state:
    # a newer last.pt replaced by an older copy is newer work lost, not nothing newer.
    inside = ignore is not None and ignore.parent.resolve() == out_dir.resolve()
    still_recorded = inside and ignore.name in vouched and _matches(ignore, vouched[ignore.name])
    if manifest is not None and (run_id is None or manifest.run_id in (None, run_id)):
        candidates += [Newest(state.step, name) for name, state in vouched.items()
                       if not (still_recorded and name == ignore.name)]
    unreadable = []
    for path in checkpoint_files(out_dir):
        if ignore is not None and same_file(path, ignore):
            continue
        known = vouched.get(path.name)
        if known is not None and _matches(path, known):
            continue
        header = _step_and_run(path)
        if header is None:
            unreadable.append(path)
        elif run_id is None or header[1] in (None, run_id):
            candidates.append(Newest(header[0], path.name))
    # On a tie, name another file than the one resumed: "last.pt was saved at step 24", not "best.pt".
    resumed = ignore.name if inside else None
    newest = max(candidates, key=lambda each: (each.step, each.name != resumed), default=None)
    return SavedSteps(newest, tuple(unreadable))


def newest_state_file(out_dir: Path, run_id: str | None) -> Path | None:
    """The checkpoint file in ``out_dir`` that holds run ``run_id``'s newest state (last.pt on a tie),
    read from the files themselves: the one a resume of the directory continues. None if none is
    readable."""
    ranked = []
    for path in checkpoint_files(out_dir):
        header = _step_and_run(path)
        if header is not None and (run_id is None or header[1] in (None, run_id)):
            ranked.append(((header[0], path.name == "last.pt"), path))
    return max(ranked, key=lambda each: each[0], default=(None, None))[1]


def _matches(path: Path, state: SavedState) -> bool:
    try:
        return path.stat().st_size == state.bytes and file_sha256(path) == state.sha256
    except OSError:
        return False


