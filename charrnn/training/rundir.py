"""The run directory (docs/files.md): its files, who may write them, which saved state is newest (each
checkpoint's own header: run id, step), when an old run gives way to a new one, and where a resumed run writes
(docs/long-runs.md). One run at a time: ``flock`` on ``.charrnn.lock``, released however the process ends."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, ClassVar

import torch

from charrnn.config import record_problem
from charrnn.data.corpus import corpus_location
from charrnn.errors import CharrnnError, OptionConflict, option, short_repr
from charrnn.models.pretrained import refuse_writing_in_model_folders, resolve_shipped
from charrnn.training.checkpoint import (
    CHECKPOINT_NAMES,
    file_in_run_directory,
    is_model_folder,
    save_checkpoint,
)
from charrnn.utils.files import (
    TEMPORARY_GLOB,
    TEMPORARY_PREFIX,
    append_line,
    json_object_or_why,
    json_text,
    parse_json,
    read_folder_config,
    read_json_object,
    read_log,
    real_path,
    reason,
    remove_stale_temporaries,
    replace_text,
    same_file,
    stat_or_none,
    within_folder,
    write_json,
)

EPOCH_CHECKPOINT_GLOB = "epoch*-val*.pt"  # the loop names them epoch0005-val1.6123.pt: in epoch order, scored
SAMPLES_NAME, LOSSES_NAME, LOCK_NAME = "samples.jsonl", "losses.jsonl", ".charrnn.lock"
# The one list of the files a run writes (with the lock, the names a run directory keeps for its own), in
# the order an older run's go (RunDirectory): config.json first, so a failure part-way leaves leftovers that
# name no run (no --resume takes them for one; the next --overwrite removes them); its checkpoints last.
RUN_FILES = ("config.json", SAMPLES_NAME, LOSSES_NAME, "metrics.jsonl", *reversed(CHECKPOINT_NAMES))
RESERVED = (*RUN_FILES, LOCK_NAME)


def checkpoint_bytes(parameters: int, averaging: bool = False) -> int:
    """At most a checkpoint's bytes: float32 weights, Adam's moments, ``averaging``'s average, a margin."""
    return (4 if averaging else 3) * 4 * parameters + (1 << 20)


# ---------------------------------------------------------------------------- the saved states
def checkpoint_files(out_dir: Path) -> list[Path]:
    """The checkpoints in ``out_dir`` under names a run saves: last.pt, best.pt and epoch checkpoints."""
    return [*(out_dir / name for name in CHECKPOINT_NAMES if os.path.lexists(out_dir / name)),
            *sorted(out_dir.glob(EPOCH_CHECKPOINT_GLOB))]


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


def saved_steps(out_dir: Path, run_id: str | None,
                ignore: Path | None = None) -> tuple[tuple[int, Path] | None, list[Path]]:
    """From the checkpoints' headers in ``out_dir`` but ``ignore``: run ``run_id``'s (None: any run's) newest
    (step, file; last.pt on a tie), None without one, and the checkpoint files whose step cannot be read."""
    ranked, unreadable = [], []
    for path in checkpoint_files(out_dir):
        if ignore is not None and same_file(path, ignore):
            continue
        header = read_header(path) or {}
        if not isinstance(step := header.get("step"), int) or isinstance(step, bool):
            unreadable.append(path)
        elif run_id is None or header.get("run_id") == run_id:
            ranked.append(((step, path.name == "last.pt"), path))
    best = max(ranked, key=lambda each: each[0], default=None)
    return None if best is None else (best[0][0], best[1]), unreadable


# ---------------------------------------------------------------------------- checks before anything runs
def check_out_dir(out_dir: Path, overwrite: bool = False, reads: dict[str, Any] | None = None) -> None:
    """Every check of a run's directory, reading only, before anything slow: refuse a file, a model folder, a
    run (unless ``overwrite``), a folder at a run file, or writing over ``reads``."""
    if reads is not None:
        refuse_writing_over_reads(out_dir, "out_dir", reads, run_directory=True)
    if (info := stat_or_none(out_dir, f"cannot use the run directory {out_dir}")) is None:
        return
    if not stat.S_ISDIR(info.st_mode):
        raise CharrnnError(f"{option('out_dir')} {out_dir} is a file, not a directory; choose a directory "
                           f"for the run")
    if is_model_folder(out_dir):
        raise CharrnnError(f"{option('out_dir')} {out_dir} is a model folder, not a run directory; choose "
                           f"another directory for the run")
    existing = [name for name in RUN_FILES if (out_dir / name).exists()]
    existing += sorted(path.name for path in out_dir.glob(EPOCH_CHECKPOINT_GLOB))[:3]  # a few, for messages
    if existing and not overwrite:
        # Advise --resume only for a last.pt that reads as a checkpoint: anything else would fail in turn.
        last = out_dir / "last.pt"
        resume = f"continue it with {option('resume')} {last}, " if read_header(last) is not None else ""
        raise CharrnnError(
            f"{option('out_dir')} {out_dir} already holds a training run ({', '.join(existing)}); "
            f"{resume}pass {option('overwrite')} to replace it, or choose another {option('out_dir')}")
    for name in RESERVED:
        if (out_dir / name).is_dir() and not (out_dir / name).is_symlink():
            raise CharrnnError(f"{out_dir / name} is a directory where the run keeps its {name}; move it "
                               f"away or choose another {option('out_dir')}")


def resume_checkpoint(path: Path) -> Path:
    """What ``--resume PATH`` continues: a checkpoint, or a run directory's newest state; no model folder."""
    given = Path(path)
    path = resolve_shipped(given)
    if is_model_folder(path):
        raise CharrnnError(f"{given} is a model folder: it holds weights only, so it cannot be resumed; "
                           f"fine-tune it with {option('init_from')} {given}")
    if not path.is_dir():
        return path
    newest = saved_steps(path, (read_json_object(path / "config.json") or {}).get("run_id"))[0]
    return newest[1] if newest is not None else file_in_run_directory(path, "last.pt")


def belongs_to(out_dir: Path, payload: dict[str, Any]) -> bool:
    """Whether ``out_dir`` is the run that wrote checkpoint ``payload``: its config.json has its ``run_id``;
    without one (a run stopped before writing it), every checkpoint there has, and there is no log."""
    run_id = payload.get("run_id")
    if not os.path.lexists(out_dir / "config.json"):
        headers = [read_header(path) or {} for path in checkpoint_files(out_dir)]
        ours = bool(headers) and all(header.get("run_id") == run_id for header in headers)
        return run_id is not None and ours and not os.path.lexists(out_dir / "metrics.jsonl")
    return run_id is not None and (read_json_object(out_dir / "config.json") or {}).get("run_id") == run_id


def resume_target(checkpoint: Path, payload: dict[str, Any], out_dir: Path | None,
                  overwrite: bool = False) -> tuple[Path, bool]:
    """Where a resumed run may write, and whether it branches there (any ``out_dir`` but its own)."""
    own_dir = checkpoint.parent
    if out_dir is not None and not (out_dir.exists() and out_dir.resolve() == own_dir.resolve()):
        return out_dir, True  # a branch, its directory made when the run starts (held_run_directory)
    if overwrite:
        raise OptionConflict(f"{option('overwrite')} with {option('resume')} replaces nothing in the run's "
                             f"own directory; give it with {option('out_dir')} NEW_DIR to replace a run "
                             f"there")
    if not belongs_to(own_dir, payload):
        why = json_object_or_why(own_dir / "config.json")[1] or "belongs to another run"
        raise CharrnnError(f"{own_dir} is not the run that wrote {checkpoint.name} (its config.json {why}), "
                           f"so resuming there could overwrite its files; continue it elsewhere with "
                           f"{option('out_dir')} NEW_DIR")
    branch = f"branch from it with {option('resume')} {checkpoint} {option('out_dir')} NEW_DIR"
    newest, unreadable = saved_steps(own_dir, payload["run_id"], ignore=checkpoint)  # belongs_to: it has one
    if newest is not None and newest[0] > payload["step"]:
        step, file = newest
        raise CharrnnError(f"{own_dir} has newer results ({file.name} was saved at step {step:,}; "
                           f"{checkpoint.name} is at step {payload['step']:,}), which resuming here would "
                           f"replace; resume the newest with {option('resume')} {own_dir}, or {branch}")
    if unreadable:
        raise CharrnnError(
            f"cannot tell whether {unreadable[0]} holds newer results than {checkpoint.name}: it "
            f"cannot be read as a checkpoint, and resuming in {own_dir} would replace it; {branch}")
    return own_dir, False


# ---------------------------------------------------------------------------- outputs against inputs
def refuse_writing_over_reads(target: Path, name: str, reads: dict[str, Any],
                              run_directory: bool = False) -> None:
    """Refuse ``target`` (option ``name``; a ``run_directory``'s files) as anything in ``reads`` (option →
    paths, or None) by path or link, inside a corpus directory read, at a run's names or in shipped models."""
    what = "run directory" if run_directory else "file"
    refuse_writing_in_model_folders(target, option(name), what)
    writes = [target]
    if run_directory:  # with its epoch checkpoints and the temporaries of ended processes it clears away
        writes = [target / reserved for reserved in RESERVED]
        if target.is_dir():
            writes += sorted(target.glob(EPOCH_CHECKPOINT_GLOB)) + sorted(target.glob(TEMPORARY_GLOB))
    corpora_of: dict[Path, Path | None] = {}  # each checkpoint's corpus, its header read once
    for read_name, given in reads.items():
        given = given if isinstance(given, list | tuple) else [given]
        for path in [Path(each) for each in given if each is not None]:
            read = f"{option(read_name)} {path}"
            parts = _stands_for(path, corpora_of)
            for file, part in parts.items():
                if (replaced := next((write for write in writes if same_file(write, file)), None)) is None:
                    continue
                shown = read if file == path else f"{file}, {part.format(read)}"
                if run_directory:
                    raise OptionConflict(f"{option(name)} {target} would replace {replaced}, which is "
                                         f"{shown}: choose another {what}")
                raise OptionConflict(f"{option(name)} {target} is {shown}: writing it would destroy what is "
                                     f"read; choose another {what}")
            corpora = [file for file, part in parts.items() if part == CORPUS and file.is_dir()]
            inside = next((corpus for corpus in corpora if within_folder(target, corpus)), None)
            if inside is not None:
                whose = "" if inside == path else f" that {read} was trained on"
                raise OptionConflict(f"{option(name)} {target} is inside the corpus directory "
                                     f"{inside}{whose}: writing there would change what is read; choose "
                                     f"another {what}")
    if not run_directory:  # nor a file, through any link, at a name a run directory keeps for its own files
        for landing in dict.fromkeys([target, real_path(target)]):
            kept = (landing.suffix == ".pt" or landing.name in RESERVED
                    or landing.name.startswith(TEMPORARY_PREFIX))
            if kept and any((landing.parent / reserved).exists() for reserved in RESERVED):
                raise OptionConflict(f"{option(name)} {target} would be {landing}, a name the run directory "
                                     f"{landing.parent} keeps for its own files; choose another file")


CORPUS = "the corpus {} was trained on"  # the part a checkpoint's corpus plays in what it stands for


def _stands_for(path: Path, corpora_of: dict[Path, Path | None]) -> dict[Path, str]:
    """What reading ``path`` reads, each file with the part it plays (a phrase about "{}"): a checkpoint's or
    run's files and corpora (cached in ``corpora_of``), or a corpus directory's (:data:`CORPUS`) texts."""
    folder = path if path.is_dir() else path.parent if path.suffix == ".pt" else None
    neighbours = sorted(folder.iterdir()) if folder is not None and folder.is_dir() else []
    if is_model_folder(path):
        corpus = _trained_on(read_folder_config(path))
        return {path: "{}", **{file: "in the model folder {}" for file in neighbours},
                **({corpus: CORPUS} if corpus is not None else {})}
    run_files = [file for file in neighbours if file.suffix == ".pt" or file.name in RUN_FILES]
    if path.is_dir() and not run_files:
        return {path: CORPUS, **{text: "a text of {}" for text in sorted(path.rglob("*.txt"))}}
    parts = {path: "{}", **{file: "in the run directory of {}" for file in run_files if file != path}}
    for file in run_files:
        if file not in corpora_of:
            corpora_of[file] = _trained_on(read_header(file)) if file.suffix == ".pt" else None
        if corpora_of[file] is not None:
            parts.setdefault(corpora_of[file], CORPUS)
    return parts


def _trained_on(header: dict[str, Any] | None) -> Path | None:
    """The corpus a checkpoint's header or a model folder's config names; None if it names none."""
    corpus = (header or {}).get("corpus")
    path = corpus.get("path") if isinstance(corpus, dict) else None
    if not isinstance(path, str) or not path:
        return None
    # Where it would be read: for a corpus recorded elsewhere, the data directory's copy of its dataset.
    return corpus_location(corpus) if isinstance(corpus.get("sha256"), str) else Path(path)


# ---------------------------------------------------------------------------- the lock
PID_RECORD_BYTES = 20  # the PID, space-padded, and a newline
LARGEST_LOCK_BYTES = 64  # anything larger at the lock's name is not a charrnn lock


@contextlib.contextmanager
def run_lock(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir/.charrnn.lock`` for a ``with`` block, its PID in it for a competitor's message."""
    path = Path(out_dir) / LOCK_NAME
    while True:
        try:
            # O_NOFOLLOW: a link planted at the lock's name is refused, never followed into a file
            fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o666)
        except OSError as exc:
            raise CharrnnError(f"cannot create the run lock {path}: {reason(exc)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, PID_RECORD_BYTES, 0).decode("ascii", "replace").strip()
            os.close(fd)
            who = f" (PID {holder})" if holder.isdigit() else ""
            raise CharrnnError(f"another training{who} is writing to {path.parent} and holds its lock "
                               f"{path}; wait for it or choose another {option('out_dir')}") from None
        # The holder before us may have removed the file while we waited to lock it: a lock
        # on that removed file guards nothing, so start again on the file now at the path.
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                break
        os.close(fd)
    info = os.fstat(fd)
    # A run lock's file is empty, or holds what a run lock writes: a process id and a newline.
    lock_file = stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_size <= LARGEST_LOCK_BYTES
    record = os.pread(fd, info.st_size, 0) if lock_file else b""
    if not lock_file or (info.st_size and not (record.endswith(b"\n") and record.strip().isdigit())):
        os.close(fd)
        raise CharrnnError(f"{path} is not a charrnn run lock (another file, or a link to one, has its "
                           f"name); move it away or choose another {option('out_dir')}")
    try:
        os.pwrite(fd, f"{os.getpid():<{PID_RECORD_BYTES - 1}}\n".encode("ascii"), 0)
    except OSError as exc:
        os.close(fd)
        raise CharrnnError(f"cannot write the run lock {path}: {reason(exc)}") from None
    try:
        yield
    finally:
        # Removed while still locked, so no competitor can lock the file after it is gone. A lock
        # file that cannot be removed is harmless: the next run takes it over.
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        os.close(fd)


# ---------------------------------------------------------------------------- the run's writes
@contextlib.contextmanager
def held_run_directory(out_dir: Path, overwrite: bool = False, writer: bool = True) -> Iterator[None]:
    """Check, create and lock the run directory for the ``with`` block (``writer``: rank 0 alone)."""
    if not writer:
        yield
        return
    check_out_dir(out_dir, overwrite)  # again: another run may have written here since the plan was made
    created = [path for path in (out_dir, *out_dir.parents) if not os.path.lexists(path)]
    try:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CharrnnError(f"cannot write to {option('out_dir')} {out_dir}: {reason(exc)}") from None
        with run_lock(out_dir):
            remove_stale_temporaries(out_dir)
            yield
    except BaseException:
        for path in created:
            try:
                path.rmdir()  # only ever an empty directory
            except OSError:
                break
        raise


@dataclass
class RunDirectory:
    """One run's directory, written only by :meth:`save` and :meth:`log`: a fresh run retires an older run's
    files as it first writes; a resumed run drops log rows past its step, a branch takes its source's."""

    path: Path  # the directory
    config_record: dict[str, Any]  # config.json: model, train, corpus, run_id, world_size, budget
    fresh: bool  # a new run (or an overwrite, or a branch): an older run's files give way to it
    resumed_at: int | None = None  # the step a resumed run (in place or a branch) continues from
    branch_from: Path | None = None  # a branch: the run directory whose log rows it starts with
    written: set[str] = field(default_factory=set)  # the files this run has written so far
    space_needed: int = 0  # bytes the run's checkpoints take (checkpoint_bytes): refused at once without them
    kept_rows: dict[str, list[str]] = field(init=False, default_factory=dict)  # log -> rows a resume keeps

    def __post_init__(self) -> None:
        if (free := shutil.disk_usage(self.path).free) < self.space_needed:  # best, last and a temporary
            raise CharrnnError(f"only {free / 2**20:,.1f} MiB free under {option('out_dir')} {self.path}; a "
                               f"run needs about {self.space_needed / 2**20:,.1f} MiB for its checkpoints")
        source = self.branch_from if self.fresh else self.path
        if self.resumed_at is not None and source is not None:  # read now: a damaged log stops no run midway
            self.kept_rows = {cls.LOG: rows_up_to(source / cls.LOG, self.resumed_at, cls)
                              for cls in (EvaluationRecord, LossRecord, SampleRecord)}

    def save(self, name: str, payload: dict[str, Any]) -> None:
        """Save checkpoint ``name``; its header says which run and step it holds."""
        self._retire_older_run()
        save_checkpoint(self.path / name, payload)
        self._wrote(name)

    def log(self, *records: EvaluationRecord | LossRecord | SampleRecord) -> None:
        """Add rows to their log in one write (one kind of record); this run's first rows settle its start."""
        name, line = records[0].LOG, "\n".join(map(_row_json, records))
        self._retire_older_run()
        if name in self.written or not (self.fresh or self.resumed_at is not None):
            append_line(self.path / name, line)
        else:
            replace_text(self.path / name, "\n".join([*self.kept_rows.get(name, []), line]) + "\n")
        self._wrote(name)

    def epoch_checkpoints(self) -> list[Path]:
        """The epoch checkpoints this run has written, in epoch order."""
        return sorted(self.path / name for name in self.written if fnmatch(name, EPOCH_CHECKPOINT_GLOB))

    def _retire_older_run(self) -> None:
        """Before a fresh run's first write, an older run's files go, in :data:`RUN_FILES`'s order."""
        if not self.fresh or self.written:
            return
        *logs, best, last = (self.path / name for name in RUN_FILES)
        for path in [*logs, *sorted(self.path.glob(EPOCH_CHECKPOINT_GLOB)), best, last]:
            try:
                if path.is_symlink() or path.is_file():
                    path.unlink()
            except OSError as exc:
                raise CharrnnError(f"cannot remove {path} of the run {option('overwrite')} replaces: "
                                   f"{reason(exc)}") from None

    def _wrote(self, name: str) -> None:
        """After each write; after the first, config.json: it never stands without a state or a log."""
        if not self.written:
            self.written.add(name)
            write_json(self.path / "config.json", self.config_record)
        self.written |= {name, "config.json"}


def read_row(cls: type, line: str) -> Any:
    """One row of a run's log as record ``cls``; else a ValueError saying why, for its reader to report."""
    row = None
    with contextlib.suppress(ValueError):
        row = parse_json(line)
    if not isinstance(row, dict):
        raise ValueError(f"is not {cls.KIND} (one JSON object)")
    if (problem := record_problem(cls, row)) is not None:
        name, expected = problem
        raise ValueError(f"is not {cls.KIND}: it lacks {name}" if expected is None else
                         f"is not {cls.KIND}: {name} is {short_repr(row[name])}, not {expected}")
    return cls(**{spec.name: row[spec.name] for spec in fields(cls) if spec.name in row})


def _row_json(record: Any) -> str:
    """A record as its log's line: every field, but an evaluation's occasional ones only when set."""
    occasional = ("epoch_checkpoint", "averaged_val_loss", "val_chars")
    return json_text({key: value for key, value in asdict(record).items()
                      if value is not None or key not in occasional}, ensure_ascii=False)


@dataclass(frozen=True)
class EvaluationRecord:
    """One line of ``metrics.jsonl``: a validation pass during training."""

    KIND: ClassVar[str] = "an evaluation record"
    LOG: ClassVar[str] = "metrics.jsonl"
    step: int | float  # optimiser steps done (a hand-made log may hold another number)
    epoch: float  # passes over the training split done, fractional
    val_loss: float | None  # validation nats/char (None if not finite)
    elapsed_s: float  # wall time of the run so far
    train_loss: float | None = None  # mean training loss since the previous evaluation (None: none finite)
    val_bits_per_char: float | None = None  # the same in bits
    learning_rate: float | None = None  # the learning rate at this step
    chars_per_s: float | None = None  # training throughput since the previous evaluation
    epoch_checkpoint: str | None = None  # the epoch checkpoint written with this evaluation, if any
    averaged_val_loss: float | None = None  # validation nats/char of the averaged weights, when kept
    val_chars: int | None = None  # validation characters scored, when only the split's start was


def read_metrics(run_dir: Path) -> list[EvaluationRecord]:
    """The evaluation records of one run, oldest first; a malformed line is an error naming it."""
    path = Path(run_dir) / "metrics.jsonl"
    if not os.path.lexists(path):
        raise CharrnnError(f"{run_dir} is not a run directory (no metrics.jsonl)")
    if not (records := read_log(path, lambda line: read_row(EvaluationRecord, line))):
        raise CharrnnError(f"{path} has no evaluations yet; plot it after the run's first evaluation")
    return records


@dataclass(frozen=True)
class LossRecord:
    """A row of ``losses.jsonl``: training loss per hundredth of the run (a curve despite few evaluations)."""

    KIND: ClassVar[str] = "a training loss record"
    LOG: ClassVar[str] = LOSSES_NAME
    step: int  # optimiser steps done
    epoch: float  # passes over the training split done, fractional
    elapsed_s: float  # wall time of the run so far
    train_loss: float  # mean training loss (nats/char) of the finite steps since the previous row


def read_losses(run_dir: Path) -> list[LossRecord]:
    """The training losses a run logged, oldest first (none for a run without ``losses.jsonl``)."""
    path = Path(run_dir) / LOSSES_NAME
    return read_log(path, lambda line: read_row(LossRecord, line)) if os.path.lexists(path) else []


def rows_up_to(path: Path, step: int, cls: type) -> list[str]:
    """Log ``path``'s rows up to ``step`` (none without it); a non-``cls`` row is refused, never dropped."""
    if not os.path.lexists(path):
        return []
    rows = read_log(path, lambda line: (line, read_row(cls, line).step))  # a FIFO there is refused
    return [line for line, row_step in rows if row_step <= step]


@dataclass(frozen=True)
class SampleRecord:
    """One row of ``samples.jsonl``."""

    KIND: ClassVar[str] = "a recorded sample"
    LOG: ClassVar[str] = SAMPLES_NAME
    step: int  # optimiser steps done when the sample was drawn
    epoch: float  # passes over the training split done, fractional
    seconds: float  # wall time of the run so far
    val_loss: float | None  # validation nats/char at this step, when it was evaluated then
    prime: str  # the text the sample starts from (not repeated in ``text``)
    temperature: float  # the sampling temperature
    seed: int  # the sampling seed
    text: str  # the generated characters


def read_samples(run_dir: Path) -> list[SampleRecord]:
    """The samples a run recorded, oldest first; a malformed row is an error naming its line."""
    path = Path(run_dir) / SAMPLES_NAME
    if not os.path.lexists(path):
        raise CharrnnError(f"{run_dir} has no {SAMPLES_NAME}: record samples as a run goes with charrnn "
                           f"train --sample-every N (sample_every in Python) or --save-epochs")
    return read_log(path, lambda line: read_row(SampleRecord, line))
