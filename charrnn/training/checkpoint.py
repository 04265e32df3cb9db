"""Checkpoints: plain dicts of Python values and CPU tensors, written atomically (docs/long-runs.md).

Nothing else is pickled, so a checkpoint loads with ``weights_only=True`` (no code runs) on any machine;
:func:`load_checkpoint` checks every field (:class:`Checkpoint`) before anything is allocated."""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, BinaryIO

import torch

from charrnn.config import ModelConfig, TrainConfig, expected_type, field_types
from charrnn.data.corpus import CorpusInfo, corpus_path, scan_corpus
from charrnn.data.vocab import Vocab
from charrnn.errors import CharrnnError, first_line, short_repr
from charrnn.generation.trained import TrainedModel
from charrnn.models.evaluate import EvalResult
from charrnn.models.model import CharRNN, state_shapes
from charrnn.models.pretrained import naming_what_hides_shipped, resolve_shipped
from charrnn.training.model_folder import (
    file_at_fault,
    is_model_folder,
    read_model_folder,
    weights_dtype,
    weights_score,
)
from charrnn.utils.files import reason, replace_file

FORMAT_VERSION = 1
Number = int | float
REQUIRED, RESUMES = "required", "resumes"  # in every checkpoint (a model folder's too); what resuming needs


def _part(*roles: str, non_negative: bool = False) -> Any:
    return field(default=None, metadata={"roles": roles, "non_negative": non_negative})


@dataclass
class Checkpoint:
    """The one schema of a checkpoint: each field it may hold, its type and its part (docs/long-runs.md).
    A checkpoint is a plain dict of these fields, so that it loads with ``weights_only=True``:
    :func:`save_checkpoint` writes one, :func:`load_checkpoint` reads one and checks every field against
    this. Dataclass-typed fields are checked field by field."""

    format_version: int = _part(REQUIRED)
    model_config: ModelConfig = _part(REQUIRED)
    vocab: list[str] = _part(REQUIRED)  # the characters in id order
    vocab_digest: str = _part()
    model_state: dict = _part(REQUIRED)  # the weights: the averaged ones in an averaged best.pt
    corpus: CorpusInfo = _part(RESUMES)
    run_id: str = _part()  # the run that wrote it (config.json carries the same)
    train_config: TrainConfig = _part(RESUMES)
    optimizer_state: dict = _part(RESUMES)
    step: int = _part(RESUMES, non_negative=True)
    epoch: int = _part(RESUMES, non_negative=True)  # completed passes over the training split
    epoch_step: int = _part(RESUMES, non_negative=True)  # the next step within the epoch
    progress_epochs: Number = _part(RESUMES, non_negative=True)
    best: EvalResult | None = _part()  # the run's best validation score when saved
    latest_eval: EvalResult | None = _part()  # the last validation result, with its step
    skipped_steps: int = _part(non_negative=True)
    elapsed_s: Number = _part(RESUMES, non_negative=True)
    machine: str = _part()  # the processor or GPU it trained on
    score: EvalResult | None = _part()  # a model folder's: the validation score of its own weights
    carried_state: list[torch.Tensor] = _part(RESUMES)  # the hidden state of every stream
    rng: dict = _part(RESUMES)  # Python's, torch's and CUDA's generator states
    best_is_average: bool = _part()  # model_state holds the averaged weights
    weight_average: dict | None = _part()  # with averaging: its weights and how many updates they hold
    training_weights: dict = _part()  # an averaged best.pt's trained weights, which resuming continues


RESUME_FIELDS = tuple(spec.name for spec in fields(Checkpoint) if RESUMES in spec.metadata["roles"])
WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # what a CPU computes with


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
    replace_file(path, lambda handle: _torch_save(payload, handle))


class _KeepingWriteErrors:
    """A file for torch.save that keeps the OSError a write raised (a full disk, a file-size limit):
    torch turns it into a RuntimeError that no longer says why."""

    def __init__(self, handle: BinaryIO):
        self.handle = handle
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.handle.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.handle.flush()


def _torch_save(payload: dict[str, Any], handle: BinaryIO) -> None:
    """``torch.save``, raising the OSError of a failed write as such, so the caller names its cause."""
    writer = _KeepingWriteErrors(handle)
    try:
        torch.save(payload, writer)
    except RuntimeError:
        if writer.error is not None:
            raise writer.error from None
        raise


def saved_by_torch(path: Path) -> bool:
    """Whether ``path`` begins as torch.save's files do (its zip, or a legacy pickle): a cheap look, no
    promise that it loads."""
    with open(path, "rb") as handle:
        magic = handle.read(4)
    return magic[:4] == b"PK\x03\x04" or magic[:1] == b"\x80"


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint (or a model folder) safely onto the CPU and check it; any problem is a one-line
    :class:`CharrnnError`."""
    path = Path(path)
    if is_model_folder(path):
        payload = {"format_version": FORMAT_VERSION, **read_model_folder(path)}
        try:
            validate_payload(payload)
        except CharrnnError as exc:
            raise CharrnnError(f"{file_at_fault(path, str(exc))}: {exc}") from None
        return payload
    if path.is_symlink() and not path.exists():
        raise CharrnnError(f"checkpoint {path} is a link to {os.readlink(path)}, which leads to no file")
    if not path.is_file():
        if path.exists():  # a pipe, a device or a socket: there, but nothing a checkpoint can be read from
            raise CharrnnError(f"checkpoint {path} is not a regular file (a pipe or a device); give a "
                               f"checkpoint file or a run directory")
        raise CharrnnError(f"checkpoint {path} does not exist (charrnn train writes one; shakespeare names "
                           f"the model that comes with charrnn)")
    try:
        written = saved_by_torch(path)
    except OSError as exc:
        raise CharrnnError(f"cannot read checkpoint {path}: {exc.strerror or exc}") from None
    if not written:
        raise CharrnnError(f"{path} is not a charrnn checkpoint (not a file that torch.save wrote)")
    try:
        with warnings.catch_warnings():
            # Foreign files make torch warn before failing; the error below says all a user needs.
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt, truncated or unsafe files
        raise CharrnnError(f"{path} is not a readable charrnn checkpoint ({first_line(exc)})") from None
    if not isinstance(payload, dict) or not {"model_config", "vocab", "model_state"} <= payload.keys():
        raise CharrnnError(f"{path} is not a charrnn checkpoint (missing model, config or vocabulary)")
    try:
        validate_payload(payload)
    except CharrnnError as exc:
        raise CharrnnError(f"{path} is not a valid charrnn checkpoint: {exc}") from None
    return payload


def checkpoint_in(path: Path, name: str = "best.pt") -> Path:
    """``path`` itself (a file or a model folder), for a run directory its checkpoint ``name`` (best.pt,
    or last.pt to resume), or the model shipped under the name ``path`` gives
    (:mod:`charrnn.models.pretrained`)."""
    path = resolve_shipped(Path(path))
    if not path.is_dir() or is_model_folder(path):
        return path
    with naming_what_hides_shipped(path):
        return file_in_run_directory(path, name)


def file_in_run_directory(path: Path, name: str) -> Path:
    """Checkpoint ``name`` of run directory ``path``, or an error naming the checkpoints it does hold."""
    try:
        found = (path / name).is_file()
        held = [] if found else sorted(p.name for p in path.glob("*.pt") if p.is_file())
    except OSError as exc:
        raise CharrnnError(f"cannot read run directory {path}: {reason(exc)}") from None
    if not found:
        suggestion = "last.pt" if "last.pt" in held else held[-1] if held else None
        step = (f"give one of its checkpoints, such as {path / suggestion}" if suggestion
                else "give a checkpoint file or a run directory that holds one")
        raise CharrnnError(f"{path} is a directory without a {name}; {step}")
    return path / name


def _describe(value: Any) -> str:
    return f"{short_repr(value)} (a {type(value).__name__})"


def _check_type(value: Any, hint: Any, where: str) -> None:
    """Refuse a stored ``value`` that is not of type ``hint`` (:func:`charrnn.config.expected_type`)."""
    expected = expected_type(value, hint)
    if expected is not None:
        raise CharrnnError(f"{where} is {_describe(value)}; expected {expected}")


def check_record(cls: type, values: dict[str, Any], where: str, build: bool = True) -> Any:
    """Check the type of each field of dataclass ``cls`` in a checkpoint's dict; with ``build``, construct
    it, which checks ranges too. Unknown keys are ignored (a newer charrnn may add some); a missing field
    takes its default, or is an error without one."""
    hints = field_types(cls)
    for spec in fields(cls):
        if spec.name not in values:
            if spec.default is MISSING and spec.default_factory is MISSING:
                raise CharrnnError(f"{where}.{spec.name} is missing")
            continue
        _check_type(values[spec.name], hints[spec.name], f"{where}.{spec.name}")
    if not build:
        return None
    try:
        return cls(**{spec.name: values[spec.name] for spec in fields(cls) if spec.name in values})
    except (CharrnnError, ValueError, TypeError) as exc:
        raise CharrnnError(f"{where}: {exc}") from None


def validate_payload(payload: dict[str, Any]) -> ModelConfig:
    """Check every field of a checkpoint's dict; return its model configuration. Tensor shapes are checked
    before any model is built, so a small file that declares a huge model costs nothing."""
    hints = field_types(Checkpoint)
    for spec in fields(Checkpoint):
        name = spec.name
        if name not in payload:
            if REQUIRED in spec.metadata["roles"]:
                raise CharrnnError(f"{name} is missing")
            continue
        value = payload[name]
        _check_type(value, hints[name], name)
        if spec.metadata["non_negative"] and not (math.isfinite(value) and value >= 0):
            raise CharrnnError(f"{name} is {value}; expected 0 or more")
    if payload["format_version"] != FORMAT_VERSION:
        raise CharrnnError(f"format version {payload['format_version']}; this charrnn reads version "
                           f"{FORMAT_VERSION}")
    config = check_record(ModelConfig, payload["model_config"], "model_config")
    if "corpus" in payload:
        check_record(CorpusInfo, payload["corpus"], "corpus")
    for name in ("best", "latest_eval", "score"):
        if payload.get(name) is not None:
            check_record(EvalResult, payload[name], name)
    if payload.get("latest_eval") is not None:
        _check_type(payload["latest_eval"].get("step"), int, "latest_eval.step")
    if "train_config" in payload:
        # Types only: whether its precision suits this machine is a question for resuming, not loading.
        check_record(TrainConfig, payload["train_config"], "train_config", build=False)
    vocab = _vocab(payload, config)
    if "vocab_digest" in payload and payload["vocab_digest"] != vocab.digest():
        raise CharrnnError("vocab does not match vocab_digest: the vocabulary was changed after training")
    _check_state(payload["model_state"], config)
    if "training_weights" in payload:
        _check_state(payload["training_weights"], config, "training_weights")
    if payload.get("weight_average") is not None:
        average = payload["weight_average"]
        if not isinstance(average.get("weights"), dict) or not isinstance(average.get("updates"), int):
            raise CharrnnError("weight_average must hold weights (a dict) and updates (a whole number)")
        _check_state(average["weights"], config, "weight_average")
    return config


def _vocab(payload: dict[str, Any], config: ModelConfig) -> Vocab:
    try:
        vocab = Vocab.from_list(payload["vocab"])
    except CharrnnError as exc:
        raise CharrnnError(f"vocab: {exc}") from None
    if len(vocab) != config.vocab_size:
        raise CharrnnError(f"vocab has {len(vocab)} characters; model_config.vocab_size is "
                           f"{config.vocab_size}")
    return vocab


def _check_state(state: dict[str, Any], config: ModelConfig, label: str = "model_state") -> None:
    expected = state_shapes(config)
    for name, shape in expected.items():
        if name not in state:
            raise CharrnnError(f"{label} lacks {name}, which model_config needs")
        tensor = state[name]
        if not isinstance(tensor, torch.Tensor):
            raise CharrnnError(f"{label}[{name!r}] is {_describe(tensor)}; expected a tensor")
        if tuple(tensor.shape) != shape:
            raise CharrnnError(f"{label}[{name!r}] has shape {tuple(tensor.shape)}; model_config "
                               f"declares {shape}")
        if tensor.dtype not in WEIGHT_DTYPES:
            raise CharrnnError(f"{label}[{name!r}] holds {tensor.dtype} values; expected float16, bfloat16, "
                               f"float32 or float64")
        if not bool(torch.isfinite(tensor).all()):
            raise CharrnnError(f"{label}[{name!r}] holds non-finite values (NaN or infinity)")
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        raise CharrnnError(f"{label} has {unexpected[0]!r}, which model_config does not declare")


def load_named_checkpoint(path: Path) -> dict[str, Any]:
    """:func:`load_checkpoint` for a reader that takes a shipped model's name (not a resume): an error
    says when a local thing of that name hides the shipped model."""
    with naming_what_hides_shipped(path):
        return load_checkpoint(path)


def load_model(path: Path, device: str = "cpu") -> TrainedModel:
    """Rebuild the model and vocabulary stored in a checkpoint, ready for inference."""
    payload = load_named_checkpoint(path)
    network = CharRNN(ModelConfig.from_dict(payload["model_config"]), initialise_weights=False)
    network.load_state_dict(payload["model_state"])
    network.to(device).eval()
    return TrainedModel(network, Vocab.from_list(payload["vocab"]), payload, path)


def corpus_status(corpus: dict[str, Any] | None) -> str:
    """Whether a checkpoint's training corpus is still where it was, unchanged."""
    if corpus is None:
        return "not recorded"
    try:
        path = corpus_path(corpus)
    except CharrnnError:
        return "missing"
    try:
        return "present, unchanged" if scan_corpus(path).sha256 == corpus["sha256"] else "present, changed"
    except CharrnnError as exc:
        return f"unreadable ({exc})"


def describe_checkpoint(payload: dict[str, Any], path: Path) -> dict[str, Any]:
    """What a (validated) checkpoint read from ``path`` holds, for ``charrnn info``: plain JSON-ready
    values."""
    vocab = payload["vocab"]
    corpus = payload.get("corpus")
    return {
        "format_version": payload["format_version"],
        "run_id": payload.get("run_id"),
        "model": payload["model_config"],
        "parameters": sum(tensor.numel() for tensor in payload["model_state"].values()),
        "weights_dtype": weights_dtype(payload["model_state"]),
        "score": weights_score(payload, path),
        "vocab_size": len(vocab),
        "vocab": "".join(vocab),
        "step": payload.get("step"),
        "epoch": payload.get("progress_epochs"),
        "best": payload.get("best"),
        "best_is_average": bool(payload.get("best_is_average")),
        "latest_eval": payload.get("latest_eval"),
        "corpus": None if corpus is None else {**corpus, "status": corpus_status(corpus)},
        "training": payload.get("train_config"),
        "machine": payload.get("machine"),
        "resumable": all(name in payload for name in ("optimizer_state", "rng", "carried_state")),
    }
