"""The run directory: its files, who may write them, and when an old run gives way to a new one.

An old run goes, whole, only with ``overwrite`` and only when the new run first writes. A checkpoint resumes
in place only in the run that wrote it, with nothing newer there; else it branches (docs/long-runs.md)."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from charrnn.errors import CharrnnError, OptionConflict, option, short_repr
from charrnn.models.pretrained import resolve_shipped
from charrnn.training.checkpoint import file_in_run_directory, save_checkpoint, saved_by_torch
from charrnn.training.manifest import (
    EPOCH_CHECKPOINT_GLOB,
    MANIFEST_NAME,
    Manifest,
    checkpoint_files,
    newest_state_file,
    read_header,
    read_manifest,
    record_saved,
    saved_steps,
)
from charrnn.training.model_folder import is_model_folder
from charrnn.training.runlock import LOCK_NAME, RunLock
from charrnn.training.samples import SAMPLES_NAME, SampleRecord
from charrnn.utils.files import (
    append_line,
    json_text,
    parse_json,
    read_json_object,
    read_log,
    reason,
    remove_stale_temporaries,
    replace_text,
    stat_or_none,
    write_json,
)

RUN_FILES = ("last.pt", "best.pt", "metrics.jsonl", "config.json", MANIFEST_NAME, SAMPLES_NAME)


def new_run_id() -> str:
    return uuid.uuid4().hex


def epoch_checkpoint_name(epoch: int, val_loss: float) -> str:
    """``epoch0005-val1.6123.pt``: sorts by epoch and says what it holds."""
    return f"epoch{epoch:04d}-val{val_loss:.4f}.pt"


def checkpoint_bytes(parameters: int, averaging: bool = False) -> int:
    """At most what one checkpoint of ``parameters`` takes on disk: float32 weights, Adam's two moments, a
    margin and, with ``averaging``, the average (an averaged best.pt also holds the trained weights)."""
    copies = 4 if averaging else 3
    return copies * 4 * parameters + (1 << 20)


def check_free_space(out_dir: Path, needed: int) -> None:
    """Refuse to start when the disk cannot hold the checkpoints a run writes (best, last and a temporary)."""
    free = shutil.disk_usage(out_dir).free
    if free < needed:
        raise CharrnnError(
            f"only {free / 2**20:,.1f} MiB free under {option('out_dir')} {out_dir}; a run needs about "
            f"{needed / 2**20:,.1f} MiB for its checkpoints"
        )


def existing_run_files(out_dir: Path) -> list[str]:
    """The names of a run's files in ``out_dir`` (a few epoch checkpoints at most, for messages)."""
    existing = [name for name in RUN_FILES if (out_dir / name).exists()]
    return existing + sorted(path.name for path in out_dir.glob(EPOCH_CHECKPOINT_GLOB))[:3]


def check_out_dir(out_dir: Path, overwrite: bool = False) -> None:
    """Refuse, reading only, a run directory that is a file or holds a run (unless ``overwrite``)."""
    info = stat_or_none(out_dir, f"cannot use the run directory {out_dir}")
    if info is not None and not stat.S_ISDIR(info.st_mode):
        raise CharrnnError(f"{option('out_dir')} {out_dir} is a file, not a directory; choose a directory "
                           f"for the run")
    if info is not None and is_model_folder(out_dir):
        raise CharrnnError(f"{option('out_dir')} {out_dir} is a model folder, not a run directory; choose "
                           f"another directory for the run")
    existing = existing_run_files(out_dir) if info is not None else []
    if existing and not overwrite:
        # Advise --resume only for a last.pt that torch wrote: anything else would fail in turn.
        last = out_dir / "last.pt"
        resume = f"continue it with {option('resume')} {last}, " if _resumable(last) else ""
        raise CharrnnError(
            f"{option('out_dir')} {out_dir} already holds a training run ({', '.join(existing)}); "
            f"{resume}pass {option('overwrite')} to replace it, or choose another {option('out_dir')}"
        )


def _resumable(last: Path) -> bool:
    try:
        return last.is_file() and saved_by_torch(last)
    except OSError:
        return False


def prepare_out_dir(out_dir: Path, overwrite: bool = False) -> list[Path]:
    """Check, create and prove writable the run directory before any training time is spent; return the
    directories it created, innermost first."""
    check_out_dir(out_dir, overwrite)
    created = [path for path in (out_dir, *out_dir.parents) if not os.path.lexists(path)]
    for name in (*RUN_FILES, LOCK_NAME):
        if (out_dir / name).is_dir() and not (out_dir / name).is_symlink():
            raise CharrnnError(f"{out_dir / name} is a directory where the run keeps its {name}; move it "
                               f"away or choose another {option('out_dir')}")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".charrnn-{os.getpid()}-write-test.tmp"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise CharrnnError(f"cannot write to {option('out_dir')} {out_dir}: {reason(exc)}") from None
    return created


@contextlib.contextmanager
def held_run_directory(out_dir: Path, overwrite: bool = False, writer: bool = True) -> Iterator[None]:
    """Check, create and lock the run directory for the ``with`` block (``writer``: rank 0 alone under
    torchrun) and clear its stale temporaries. If the run fails, the empty directories this made are
    removed again: a run refused before it wrote anything leaves no trace."""
    if not writer:
        yield
        return
    created = prepare_out_dir(out_dir, overwrite)
    try:
        with RunLock(out_dir):
            remove_stale_temporaries(out_dir)
            yield
    except BaseException:
        for path in created:
            try:
                path.rmdir()  # only ever an empty directory
            except OSError:
                break
        raise


def resume_checkpoint(path: Path) -> Path:
    """What ``--resume PATH`` continues: a checkpoint file or a run directory's newest saved state (usually
    last.pt). A model folder, the shipped model included, is refused before its weights are read."""
    given = Path(path)
    path = resolve_shipped(given)
    if is_model_folder(path):
        raise CharrnnError(f"{given} is a model folder: it holds weights only, so it cannot be resumed; "
                           f"fine-tune it with {option('init_from')} {given}")
    if not path.is_dir():
        return path
    config = read_json_object(path / "config.json")
    newest = newest_state_file(path, config.get("run_id") if config else None)
    return newest if newest is not None else file_in_run_directory(path, "last.pt")


def belongs_to(out_dir: Path, payload: dict[str, Any]) -> bool:
    """Whether ``out_dir`` is the run that wrote checkpoint ``payload``: its config.json carries the same
    ``run_id`` (before run ids: the same model and corpus). Without a config.json (a new run stopped before
    writing it), every checkpoint there must be readable and carry that ``run_id``, with no log beside."""
    if not (out_dir / "config.json").exists() and not (out_dir / "config.json").is_symlink():
        run_id = payload.get("run_id")
        headers = [read_header(path) for path in checkpoint_files(out_dir)]
        return run_id is not None and bool(headers) and all(
            header is not None and header.get("run_id") == run_id for header in headers
        ) and not (out_dir / "metrics.jsonl").exists() and not (out_dir / MANIFEST_NAME).exists()
    config = read_json_object(out_dir / "config.json")
    if config is None:
        return False
    if "run_id" in payload or "run_id" in config:
        return config.get("run_id") == payload.get("run_id")
    corpus = config.get("corpus")
    return (config.get("model") == payload["model_config"] and isinstance(corpus, dict)
            and corpus.get("sha256") == payload.get("corpus", {}).get("sha256"))


@dataclass(frozen=True)
class ResumeTarget:
    out_dir: Path  # where the resumed run writes
    branch: bool  # True: a new directory, starting from the checkpoint's history


def resume_target(checkpoint: Path, payload: dict[str, Any], out_dir: Path | None,
                  overwrite: bool = False) -> ResumeTarget:
    """Where a resumed run may write: ``out_dir`` None (or the checkpoint's own directory) continues in
    place; any other is a branch, refused if it holds a run unless ``overwrite``."""
    own_dir = checkpoint.parent
    if out_dir is not None and out_dir.exists() and out_dir.resolve() == own_dir.resolve():
        out_dir = None
    if out_dir is not None:
        check_out_dir(out_dir, overwrite)  # made when the run starts (held_run_directory), not before
        return ResumeTarget(out_dir, branch=True)
    if overwrite:
        raise OptionConflict(f"{option('overwrite')} with {option('resume')} replaces nothing in the run's "
                             f"own directory; give it with {option('out_dir')} NEW_DIR to replace a run "
                             f"there")
    if not belongs_to(own_dir, payload):
        raise CharrnnError(
            f"{own_dir} is not the run that wrote {checkpoint.name} (its config.json is missing or belongs "
            f"to another run), so resuming there could overwrite its files; continue it elsewhere with "
            f"{option('out_dir')} NEW_DIR"
        )
    branch = f"branch from it with {option('resume')} {checkpoint} {option('out_dir')} NEW_DIR"
    try:
        saved = saved_steps(own_dir, payload.get("run_id"), ignore=checkpoint)
    except CharrnnError as exc:
        raise CharrnnError(f"{exc}, so resuming in {own_dir} could replace newer results; {branch}") from None
    if saved.newest is not None and saved.newest.step > payload["step"]:
        newest = own_dir / saved.newest.name
        if read_header(newest) is None:  # gone, or damaged: resuming the run directory cannot reach it
            state = "is missing" if not newest.exists() and not newest.is_symlink() else "cannot be read"
            raise CharrnnError(
                f"{newest} {state}: the run's manifest records it at step {saved.newest.step:,}, and "
                f"resuming in {own_dir} from {checkpoint.name} (step {payload['step']:,}) would go back over "
                f"that work; put it back, or {branch}")
        raise CharrnnError(
            f"{own_dir} has newer results ({saved.newest.name} was saved at step {saved.newest.step:,}; "
            f"{checkpoint.name} is at step {payload['step']:,}), which resuming here would replace; resume "
            f"the newest with {option('resume')} {own_dir}, or {branch}")
    if saved.unreadable:
        raise CharrnnError(
            f"cannot tell whether {saved.unreadable[0]} holds newer results than {checkpoint.name}: it "
            f"cannot be read as a checkpoint, and resuming in {own_dir} would replace it; {branch}")
    return ResumeTarget(own_dir, branch=False)


@dataclass
class RunDirectory:
    """One run's directory, written only through :meth:`save`, :meth:`append_metrics` and
    :meth:`append_sample`. A fresh run retires the older run's files just before its first write, so the
    directory never holds two runs' records. Logs hold one row per step: a resumed run drops the rows past
    its step; a branch starts with its source's rows up to it."""

    path: Path  # the directory
    config_record: dict[str, Any]  # what config.json holds: model, train, corpus, run_id, world_size
    fresh: bool  # a new run (or an overwrite, or a branch): an older run's files give way to it
    resumed_at: int | None = None  # the step a resumed run (in place or a branch) continues from
    branch_from: Path | None = None  # a branch: the run directory whose log rows it starts with
    written: set[str] = field(default_factory=set)  # the files this run has written so far
    manifest: Manifest | None = None  # the saved states; read from the directory when resuming in place
    space_needed: int = 0  # bytes the run's checkpoints take (checkpoint_bytes): refused at once without them
    kept_rows: dict[str, list[str]] = field(init=False, default_factory=dict)  # log -> rows a resume keeps

    def __post_init__(self) -> None:
        check_free_space(self.path, self.space_needed)
        source = self.branch_from if self.fresh else self.path
        if self.resumed_at is not None and source is not None:  # read now: a damaged log stops no run midway
            readers = {"metrics.jsonl": EvaluationRecord.from_json, SAMPLES_NAME: SampleRecord.from_json}
            self.kept_rows = {name: rows_up_to(source / name, self.resumed_at, read) for name, read in
                              readers.items()}
        if self.manifest is None:
            run_id = self.config_record.get("run_id")
            kept = None if self.fresh else read_manifest(self.path)
            self.manifest = kept if kept is not None and kept.run_id == run_id else Manifest(run_id)

    def save(self, name: str, payload: dict[str, Any]) -> None:
        """Save checkpoint ``name``, then record it in the manifest: it never names a state not on disk."""
        self._retire_older_run()
        save_checkpoint(self.path / name, payload)
        self._wrote(name)
        record_saved(self.path, self.manifest, name, payload["step"])

    def append_metrics(self, record: EvaluationRecord) -> None:
        self._append_row("metrics.jsonl", record.to_json())

    def append_sample(self, record: SampleRecord) -> None:
        self._append_row(SAMPLES_NAME, record.to_json())

    def _append_row(self, name: str, line: str) -> None:
        """Add one row to log ``name``; its first row of this run settles what the log starts with."""
        path = self.path / name
        self._retire_older_run()
        if name in self.written or not (self.fresh or self.resumed_at is not None):
            append_line(path, line)
        else:
            replace_text(path, "".join(f"{row}\n" for row in [*self.kept_rows.get(name, []), line]))
        self._wrote(name)

    def epoch_checkpoints(self) -> list[Path]:
        """The epoch checkpoints this run has written, in epoch order."""
        return sorted(self.path / name for name in self.written if fnmatch(name, EPOCH_CHECKPOINT_GLOB))

    def _retire_older_run(self) -> None:
        """Before this run's first write (fresh runs): every file of an older run goes."""
        if self.fresh and not self.written:
            retire_run(self.path)

    def _wrote(self, name: str) -> None:
        """After each write; after the first, config.json: it never stands without a state or a log."""
        first = not self.written
        self.written.add(name)
        if first:
            write_json(self.path / "config.json", self.config_record)
            self.written.add("config.json")


# The order an older run's files go in: config.json first, so a failure part-way leaves leftovers that name
# no run (no --resume takes them for one; the next --overwrite removes them).
RETIRE_FIRST = ("config.json", MANIFEST_NAME, SAMPLES_NAME, "metrics.jsonl")
RETIRE_LAST = ("best.pt", "last.pt")


def retire_run(out_dir: Path) -> None:
    """Remove every file of the run in ``out_dir`` before a new run writes there; other files stay."""
    doomed = [*(out_dir / name for name in RETIRE_FIRST), *sorted(out_dir.glob(EPOCH_CHECKPOINT_GLOB)),
              *(out_dir / name for name in RETIRE_LAST)]
    for path in doomed:
        try:
            if path.is_symlink() or path.is_file():
                path.unlink()
        except OSError as exc:
            raise CharrnnError(f"cannot remove {path} of the run {option('overwrite')} replaces: "
                               f"{reason(exc)}") from None


@dataclass(frozen=True)
class EvaluationRecord:
    """One line of ``metrics.jsonl``: a validation pass during training."""

    step: int | None  # optimiser steps done (None only in hand-made logs)
    epoch: float  # passes over the training split done, fractional
    train_loss: float | None  # mean training loss since the previous evaluation (None if none was finite)
    val_loss: float | None  # validation nats/char (None if not finite)
    val_bits_per_char: float | None  # the same in bits
    learning_rate: float | None  # the learning rate at this step
    chars_per_s: float | None  # training throughput since the previous evaluation
    elapsed_s: float  # wall time of the run so far
    epoch_checkpoint: str | None = None  # the epoch checkpoint written with this evaluation, if any
    averaged_val_loss: float | None = None  # validation nats/char of the averaged weights, when kept
    val_chars: int | None = None  # validation characters scored, when only the split's start was

    def to_json(self) -> str:
        record = asdict(self)
        for optional in ("epoch_checkpoint", "averaged_val_loss", "val_chars"):
            if record[optional] is None:
                del record[optional]
        return json_text(record)

    @classmethod
    def from_json(cls, line: str) -> EvaluationRecord:
        """Parse one line; a ValueError says what is wrong with it."""
        try:
            record = parse_json(line)
        except ValueError:
            raise ValueError("is not JSON") from None
        if not isinstance(record, dict):
            raise ValueError("is not an evaluation record (a JSON object)")
        for key in ("epoch", "elapsed_s", "val_loss", "train_loss", "averaged_val_loss", "val_chars"):
            value = record.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise ValueError(f": {key} is {short_repr(value)}, not a number")
            if value is None and key in ("epoch", "elapsed_s"):  # a non-finite loss is logged as null
                raise ValueError(f"lacks {key}")
        if "val_loss" not in record:
            raise ValueError("lacks val_loss")
        step = record.get("step")
        return cls(**{f.name: record.get(f.name) for f in fields(cls)}
                   | {"step": step if isinstance(step, int) and not isinstance(step, bool) else None})


def read_metrics(run_dir: Path) -> list[EvaluationRecord]:
    """The evaluation records of one run, oldest first; a malformed line is an error naming it."""
    path = Path(run_dir) / "metrics.jsonl"
    if not os.path.lexists(path):
        raise CharrnnError(f"{run_dir} is not a run directory (no metrics.jsonl)")
    records = read_log(path, EvaluationRecord.from_json)
    if not records:
        raise CharrnnError(f"{path} has no evaluations yet; plot it after the run's first evaluation")
    return records


def rows_up_to(path: Path, step: int, read_row: Callable[[str], Any]) -> list[str]:
    """The rows of log ``path`` up to ``step``, as they are (a row whose step is not a whole number is kept
    too); no regular file there holds none. A row ``read_row`` refuses is refused, naming its line:
    keeping only what could be read would lose the rest."""
    if not path.is_file():
        return []
    rows = read_log(path, lambda line: (line, read_row(line).step))
    return [line for line, row_step in rows if row_step is None or row_step <= step]
