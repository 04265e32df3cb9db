"""A trained model on disk: a checkpoint is a plain dict of Python values and CPU tensors, written atomically
(docs/long-runs.md), that loads with ``weights_only=True`` (no code runs), every field checked
(:class:`Checkpoint`) before anything is allocated. A model folder (docs/model-folder.md), the form others
load (safetensors weights, config, vocabulary, card), loads as one without training state."""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, BinaryIO

import torch

from charrnn.config import (
    VERSION,
    ModelConfig,
    TrainConfig,
    check_record,
    check_type,
    describe,
    expected_type,
    field_types,
)
from charrnn.data.corpus import CorpusInfo, corpus_path, scan_corpus
from charrnn.data.vocab import Vocab
from charrnn.errors import CharrnnError, OptionConflict, first_line, short_repr
from charrnn.generation.trained import TrainedModel
from charrnn.models.card import model_card
from charrnn.models.evaluate import EvalResult
from charrnn.models.layernorm import EPSILON
from charrnn.models.model import CharRNN, parameter_count, state_shapes
from charrnn.models.pretrained import SHIPPED_MODELS, refuse_writing_in_model_folders, resolve_shipped
from charrnn.utils.files import (
    JSON_OBJECT_MOST_BYTES,
    MODEL_FOLDER_FORMAT,
    FileTooLarge,
    folder_in_the_way,
    json_text,
    opened_in_folder,
    parse_json,
    read_at_most,
    read_folder_config,
    reason,
    replace_file,
    replace_folder,
    same_file,
    settle_folder,
    within_folder,
)
from charrnn.utils.hardware import available_host_memory

FORMAT_VERSION = 1
# In every checkpoint (a model folder's too); what resuming needs; what a model folder's config.json keeps
# of how its weights were made (never the state to resume from).
REQUIRED, RESUMES, RECORDED = "required", "resumes", "recorded"


def _part(*roles: str, non_negative: bool = False) -> Any:
    return field(default=None, metadata={"roles": roles, "non_negative": non_negative})


@dataclass
class Checkpoint:
    """The one schema of a checkpoint's dict: each field, its type and its part (docs/long-runs.md)."""

    format_version: int = _part(REQUIRED)
    model_config: ModelConfig = _part(REQUIRED)
    vocab: list[str] = _part(REQUIRED)  # the characters in id order
    vocab_digest: str = _part()
    model_state: dict = _part(REQUIRED)  # the weights: the averaged ones in an averaged best.pt
    corpus: CorpusInfo = _part(RESUMES, RECORDED)
    run_id: str = _part(RECORDED)  # the run that wrote it (config.json carries the same)
    train_config: TrainConfig = _part(RESUMES, RECORDED)
    optimizer_state: dict = _part(RESUMES)
    step: int = _part(RESUMES, RECORDED, non_negative=True)
    epoch: int = _part(RESUMES, RECORDED, non_negative=True)  # completed passes over the training split
    epoch_step: int = _part(RESUMES, non_negative=True)  # the next step within the epoch
    progress_epochs: int | float = _part(RESUMES, RECORDED, non_negative=True)
    best: EvalResult | None = _part(RECORDED)  # the run's best validation score when saved
    latest_eval: EvalResult | None = _part(RECORDED)  # the last validation result, with its step
    skipped_steps: int = _part(non_negative=True)
    elapsed_s: int | float = _part(RESUMES, RECORDED, non_negative=True)
    machine: str = _part(RECORDED)  # the processor or GPU it trained on
    score: EvalResult | None = _part(RECORDED)  # a model folder's: the validation score of its own weights
    carried_state: list[torch.Tensor] = _part(RESUMES)  # the hidden state of every stream
    rng: dict = _part(RESUMES)  # Python's, torch's and CUDA's generator states
    best_is_average: bool = _part(RECORDED)  # model_state holds the averaged weights
    weight_average: dict | None = _part()  # with averaging: its weights and how many updates they hold
    training_weights: dict = _part()  # an averaged best.pt's trained weights, which resuming continues


RESUME_FIELDS, RECORDED_FIELDS = (tuple(spec.name for spec in fields(Checkpoint)
                                        if role in spec.metadata["roles"]) for role in (RESUMES, RECORDED))
WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # what a CPU computes with


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    return type(value)(map(_to_cpu, value)) if isinstance(value, list | tuple) else value


class _KeepingWriteErrors:
    """A file for torch.save that keeps the OSError a write raised (a full disk, a file-size limit):
    torch turns it into a RuntimeError that no longer says why."""

    def __init__(self, handle: BinaryIO):
        self.handle, self.flush = handle, handle.flush
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.handle.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def save(self, payload: dict[str, Any]) -> None:
        try:
            torch.save(payload, self)
        except RuntimeError:
            if self.error is not None:
                raise self.error from None
            raise


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Save ``payload`` atomically, tensors moved to the CPU; a failed write raises its own OSError."""
    payload = {"format_version": FORMAT_VERSION, **_to_cpu(payload)}
    replace_file(path, lambda handle: _KeepingWriteErrors(handle).save(payload))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load and check a checkpoint or model folder safely on the CPU; a problem is a one-line CharrnnError."""
    path = Path(path)
    if is_model_folder(path):
        return read_model_folder(path)
    if path.is_symlink() and not path.exists():
        raise CharrnnError(f"checkpoint {path} is a link to {os.readlink(path)}, which leads to no file")
    if not path.is_file():
        if path.exists():  # a pipe, a device or a socket: there, but nothing a checkpoint can be read from
            raise CharrnnError(f"checkpoint {path} is not a regular file (a pipe or a device); give a "
                               f"checkpoint file or a run directory")
        raise CharrnnError(f"checkpoint {path} does not exist (charrnn train writes one; shakespeare names "
                           f"the model that comes with charrnn)")
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)  # torch.save's files begin as a zip or a pickle does: a cheap look
    except OSError as exc:
        raise CharrnnError(f"cannot read checkpoint {path}: {exc.strerror or exc}") from None
    if magic != b"PK\x03\x04" and magic[:1] != b"\x80":
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


@contextmanager
def naming_what_hides_shipped(path: Path) -> Iterator[None]:
    """An error about ``path`` (``shakespeare``, or a file in it) says so when what is here hides a shipped
    model of that name: the user may have meant it. Only for readers (the shipped model cannot be resumed)."""
    try:
        yield
    except CharrnnError as exc:
        given = Path(path)
        first = given.parts[0] if given.parts and not given.is_absolute() else None
        if first not in SHIPPED_MODELS or not os.path.lexists(first):
            raise
        raise CharrnnError(f"{exc}; that {first} hides charrnn's own model of that name: rename it, or "
                           f"run from another directory") from None


def checkpoint_in(path: Path, name: str = "best.pt") -> Path:
    """``path`` itself (a file or model folder), a run directory's checkpoint ``name``, or a shipped model."""
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


def validate_payload(payload: dict[str, Any], values: bool = True) -> ModelConfig:
    """Check every field of a checkpoint's dict, shapes before any model is built (a small file declaring a
    huge model costs nothing); return its model config. Without ``values``, weights may be meta tensors."""
    for spec in fields(Checkpoint):
        name = spec.name
        if name not in payload:
            if REQUIRED in spec.metadata["roles"]:
                raise CharrnnError(f"{name} is missing")
            continue
        value = payload[name]
        check_type(value, field_types(Checkpoint)[name], name)
        if spec.metadata["non_negative"] and not (math.isfinite(value) and value >= 0):
            raise CharrnnError(f"{name} is {value}; expected 0 or more")
    if payload["format_version"] != FORMAT_VERSION:
        raise CharrnnError(f"format version {payload['format_version']}; this charrnn reads version "
                           f"{FORMAT_VERSION}")
    # Whether train_config's precision suits this machine is a question for resuming, not for reading it.
    if isinstance(payload.get("train_config"), dict):
        payload = {**payload, "train_config": {**payload["train_config"], "precision": "auto"}}
    records = {"model_config": ModelConfig, "corpus": CorpusInfo, **dict.fromkeys(SCORES, EvalResult),
               "train_config": TrainConfig}
    built = {name: check_record(record, payload[name], name, ("step",) if name == "latest_eval" else ())
             for name, record in records.items() if payload.get(name) is not None}
    config = built["model_config"]
    if payload.get("latest_eval") is not None:
        check_type(payload["latest_eval"].get("step"), int, "latest_eval.step")
    _check_records_agree(payload, built)
    try:
        vocab = Vocab.from_list(payload["vocab"])
    except CharrnnError as exc:
        raise CharrnnError(f"vocab: {exc}") from None
    if len(vocab) != config.vocab_size:
        raise CharrnnError(f"vocab has {len(vocab)} characters; model_config.vocab_size is "
                           f"{config.vocab_size}")
    if "vocab_digest" in payload and payload["vocab_digest"] != vocab.digest():
        raise CharrnnError("vocab does not match vocab_digest: the vocabulary was changed after training")
    _check_state(payload["model_state"], config, values=values)
    if "training_weights" in payload:
        _check_state(payload["training_weights"], config, "training_weights")
    if (average := payload.get("weight_average")) is not None:
        updates = average.get("updates")
        if not isinstance(average.get("weights"), dict) or expected_type(updates, int) or updates < 0:
            raise CharrnnError("weight_average must hold weights (a dict) and updates (a whole number, 0 or "
                               "more)")
        _check_state(average["weights"], config, "weight_average")
    return config


def _check_records_agree(payload: dict[str, Any], built: dict[str, Any]) -> None:
    """Refuse records that cannot be true: scores that belie their nats, counts past the step, corpora, ..."""
    for name in SCORES:
        if (score := built.get(name)) is None or (name == "latest_eval" and math.isnan(score.nats_per_char)):
            continue  # a diverged run's last evaluation was NaN
        own = EvalResult.from_total(score.nats_per_char, 1)  # its nats in bits and perplexity
        if not (0 <= score.nats_per_char < math.inf or name == "latest_eval") or score.chars < 0 or not (
                math.isclose(score.bits_per_char, own.bits_per_char)
                and math.isclose(score.perplexity, own.perplexity)):
            raise CharrnnError(f"{name} is no score: {score.nats_per_char!r} nats/char, "
                               f"{score.bits_per_char!r} bits/char and perplexity {score.perplexity!r} over "
                               f"{score.chars!r} characters")
    step = payload.get("step")
    counts = {"latest_eval.step": (payload.get("latest_eval") or {}).get("step"),
              "skipped_steps": payload.get("skipped_steps"),
              "weight_average.updates": (payload.get("weight_average") or {}).get("updates")}
    for name, count in counts.items():
        if step is not None and isinstance(count, int) and not 0 <= count <= step:
            raise CharrnnError(f"{name} is {count:,}; the checkpoint is at step {step:,}")
    if (corpus := built.get("corpus")) is not None:
        if (not 0 <= corpus.split_point <= corpus.chars or not 0 < corpus.val_frac < 1
                or not re.fullmatch(r"[0-9a-f]{64}", corpus.sha256)):
            raise CharrnnError(f"corpus splits {corpus.chars!r} characters at {corpus.split_point!r} "
                               f"(validation fraction {corpus.val_frac!r}), sha256 "
                               f"{short_repr(corpus.sha256)}: no text's record")
    if (train := built.get("train_config")) is not None and "weight_average" in payload:
        if (train.ema_decay > 0) != (payload["weight_average"] is not None):
            raise CharrnnError(f"weight_average is {'missing' if train.ema_decay > 0 else 'there'}; "
                               f"train_config.ema_decay is {train.ema_decay:g}")
    if "training_weights" in payload and not payload.get("best_is_average"):
        raise CharrnnError("training_weights are there, but best_is_average is not true")


def _check_state(state: dict[str, Any], config: ModelConfig, label: str = "model_state",
                 values: bool = True) -> None:
    """Names, shapes and dtypes of ``state`` against ``config``; with ``values``, its values finite too."""
    expected = state_shapes(config)
    for name, shape in expected.items():
        if name not in state:
            raise CharrnnError(f"{label} lacks {name}, which model_config needs")
        if not isinstance(tensor := state[name], torch.Tensor):
            raise CharrnnError(f"{label}[{name!r}] is {describe(tensor)}; expected a tensor")
        if tuple(tensor.shape) != shape:
            raise CharrnnError(f"{label}[{name!r}] has shape {tuple(tensor.shape)}; model_config "
                               f"declares {shape}")
        if tensor.dtype not in WEIGHT_DTYPES:
            raise CharrnnError(f"{label}[{name!r}] holds {tensor.dtype} values; expected float16, bfloat16, "
                               f"float32 or float64")
        if values and not bool(torch.isfinite(tensor).all()):
            raise CharrnnError(f"{label}[{name!r}] holds non-finite values (NaN or infinity)")
    if unexpected := sorted(set(state) - set(expected)):
        raise CharrnnError(f"{label} has {unexpected[0]!r}, which model_config does not declare")


def load_model(path: Path, device: str = "cpu") -> TrainedModel:
    """Rebuild the model and vocabulary stored in a checkpoint, ready for inference."""
    with naming_what_hides_shipped(path):
        payload = load_checkpoint(path)
    network = CharRNN(ModelConfig.from_dict(payload["model_config"]), initialise_weights=False)
    network.load_state_dict(payload["model_state"])
    network.to(device).eval()
    return TrainedModel(network, Vocab.from_list(payload["vocab"]), payload, path)


def corpus_status(corpus: dict[str, Any]) -> str:
    """Whether a checkpoint's training corpus is still where it was, unchanged."""
    try:
        path = corpus_path(corpus)
    except CharrnnError:
        return "missing"
    try:
        return "present, unchanged" if scan_corpus(path).sha256 == corpus["sha256"] else "present, changed"
    except CharrnnError as exc:
        return f"unreadable ({exc})"


def describe_checkpoint(path: Path) -> dict[str, Any]:
    """What checkpoint ``path`` holds (read as :func:`load_model` reads it), for ``charrnn info``, as JSON."""
    with naming_what_hides_shipped(path):
        payload = load_checkpoint(path)
    vocab, corpus, state = payload["vocab"], payload.get("corpus"), payload["model_state"]
    return {"format_version": payload["format_version"], "run_id": payload.get("run_id"),
            "model": payload["model_config"], "parameters": sum(tensor.numel() for tensor in state.values()),
            "weights_dtype": weights_dtype(state), "score": weights_score(payload, path),
            "vocab_size": len(vocab), "vocab": "".join(vocab), "step": payload.get("step"),
            "epoch": payload.get("progress_epochs"), "best": payload.get("best"),
            "best_is_average": bool(payload.get("best_is_average")),
            "latest_eval": payload.get("latest_eval"),
            "corpus": None if corpus is None else {**corpus, "status": corpus_status(corpus)},
            "training": payload.get("train_config"), "machine": payload.get("machine"),
            "resumable": all(name in payload for name in RESUME_FIELDS)}


# ---------------------------------------------------------------------------- model folders
# A run directory's checkpoints: a folder that holds one stays a run directory, never a model folder.
CHECKPOINT_NAMES = ("last.pt", "best.pt")
WEIGHTS, CONFIG, VOCAB, CARD = "model.safetensors", "config.json", "vocab.json", "README.md"
FOLDER_FILES = (WEIGHTS, CONFIG, VOCAB, CARD)
FOLDER_FORMAT, FOLDER_VERSION = MODEL_FOLDER_FORMAT, 1
SCORES = ("best", "latest_eval", "score")  # evaluation records: JSON has no infinity, so one is written null
GATE_ORDER = {"lstm": "i f g o", "gru": "r z n", "rnn": "one", "esn": "one"}
NORMED_GATE_ORDER = {**GATE_ORDER, "gru": "z r n"}


def is_model_folder(path: Path) -> bool:
    """Whether ``path`` holds a model folder's weights or charrnn's config and no run's checkpoint; what an
    export killed at that name left is settled first, so the name holds a whole folder."""
    folder = Path(path)
    settle_folder(folder)
    return (folder.is_dir() and not any(os.path.lexists(folder / name) for name in CHECKPOINT_NAMES)
            and (os.path.lexists(folder / WEIGHTS) or read_folder_config(folder) is not None))


def not_exported(path: Path) -> list[str]:
    """What in folder ``path`` an export did not write: foreign names, or its config.json if not charrnn's."""
    try:
        foreign = sorted(entry.name for entry in Path(path).iterdir() if entry.name not in FOLDER_FILES)
    except OSError:
        return [str(path)]
    return foreign or ([] if read_folder_config(path) is not None else [CONFIG])


def weights_score(payload: dict[str, Any], source: Path) -> dict[str, Any] | None:
    """The recorded validation score of the very weights in ``payload`` (read from ``source``), if any."""
    if "score" in payload:
        return payload["score"]
    if source.name == "best.pt" or "optimizer_state" not in payload:
        return payload.get("best")
    if (latest := payload.get("latest_eval")) and latest.get("step") == payload.get("step"):
        return {key: value for key, value in latest.items() if key != "step"}
    return None


def weights_dtype(state: dict[str, Any]) -> str:
    """The tensors' dtype (``float16``), or each of them when they differ (``mixed: float16, float32``)."""
    dtypes = sorted({str(value.dtype).removeprefix("torch.") for value in state.values()})
    return dtypes[0] if len(dtypes) == 1 else f"mixed: {', '.join(dtypes)}"


def how_read(model: dict[str, Any], state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """What a reader in another language needs beyond a folder's shapes: its dtype, how to step it."""
    normed = bool(model.get("layer_norm"))
    sampler = {"initial_state": "zeros", "tensor_names": "PyTorch's nn.LSTM, nn.GRU and nn.RNN names",
               "gate_order": (NORMED_GATE_ORDER if normed else GATE_ORDER).get(model.get("cell"))}
    return {"weights_dtype": weights_dtype(state),
            "sampler": sampler | ({"layer_norm_epsilon": EPSILON} if normed else {})}


def write_model_folder(payload: dict[str, Any], source: Path, target: Path, name: str, float32: bool = False,
                       shown: str | None = None) -> int:
    """Write checked ``payload``'s model folder at ``target`` atomically, over an empty folder or an export;
    ``name`` titles its card, ``shown`` names it in the card's commands. Returns the weights' bytes."""
    from safetensors.torch import save

    shown = shown or target.name
    model = payload["model_config"]
    state = {key: (value.float() if float32 else value).contiguous() for key, value in
             payload["model_state"].items()}
    recorded = {**payload, "score": weights_score(payload, source)}
    # An evaluation record whose score is not a finite number is left out (JSON has no infinity).
    recorded |= {key: None for key in SCORES
                 if recorded.get(key) is not None and not math.isfinite(recorded[key]["nats_per_char"])}
    config = {"format": FOLDER_FORMAT, "format_version": FOLDER_VERSION, "charrnn_version": VERSION,
              "model_config": model, **how_read(model, state),
              **{key: recorded[key] for key in RECORDED_FIELDS if recorded.get(key) is not None}}
    card = model_card(config, sum(value.numel() for value in state.values()), name, shown)
    weights = save(state, metadata={"format": "pt"})
    replace_folder(target, {WEIGHTS: weights, CONFIG: json_text(config, indent=2).encode(),
                            VOCAB: json_text(payload["vocab"], ensure_ascii=True).encode(),
                            CARD: card.encode("utf-8")}, not_exported)
    return len(weights)


def check_folder_output(target: Path, named: str, source: Path) -> None:
    """Refuse, before any work, ``target`` (option ``named``) as checkpoint ``source``'s model folder."""
    if not target.parent.is_dir():
        raise CharrnnError(f"{named} {target}: there is no directory {target.parent}")
    refuse_writing_in_model_folders(target, named, "folder")
    if within_folder(source, target):
        relation = "is" if same_file(source, target) else "holds"
        raise OptionConflict(f"{named} {target} {relation} {source}, the checkpoint read: writing the folder "
                             f"would replace it; choose another folder")
    settle_folder(target)
    folder_in_the_way(target, not_exported, named)


# Sizes past which a folder's file is refused unread: nothing charrnn writes comes near them.
VOCAB_ENTRY_MOST_BYTES = 32  # one character as JSON ("\ud83d\ude00" is 14 bytes), its comma and indent
CODE_POINTS = 0x110000  # no vocabulary holds more distinct characters
WEIGHTS_HEADER_MOST_BYTES = 2**20  # a few hundred bytes per tensor
# safetensors' dtype names, as torch names them (those not among WEIGHT_DTYPES are refused by name).
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
                      "BF16": torch.bfloat16, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
                      "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                      "U8": torch.uint8, "BOOL": torch.bool}


def read_model_folder(folder: Path) -> dict[str, Any]:
    """A model folder as a checked checkpoint's dict (no training state); errors name the file at fault.
    Its files are read as one view of one folder, and all is checked before any weights are read."""
    folder = Path(folder)
    try:
        with opened_in_folder(folder, FOLDER_FILES[:3]) as handles:
            return _read_opened_folder(folder, handles)
    except FileNotFoundError as exc:
        files = ", ".join(FOLDER_FILES[:3])
        raise CharrnnError(f"{exc.filename} is missing: a model folder holds {files}") from None
    except OSError as exc:
        raise CharrnnError(f"cannot read {exc.filename or folder}: {reason(exc)}") from None


def _read_opened_folder(folder: Path, handles: dict[str, BinaryIO]) -> dict[str, Any]:
    from safetensors import SafetensorError
    from safetensors.torch import load

    config = _json(handles[CONFIG], folder / CONFIG, JSON_OBJECT_MOST_BYTES)
    if not isinstance(config, dict) or config.get("format") != FOLDER_FORMAT:
        raise CharrnnError(f"{folder / CONFIG} is not a charrnn model folder's config (its format is not "
                           f"{FOLDER_FORMAT!r})")
    if type(version := config.get("format_version")) is not int or version != FOLDER_VERSION:
        raise CharrnnError(f"{folder / CONFIG}: format version {version!r}; this charrnn reads version "
                           f"{FOLDER_VERSION}")
    if "model_config" not in config:
        raise CharrnnError(f"{folder / CONFIG} lacks model_config")
    if not isinstance(written_by := config.get("charrnn_version"), str):
        raise CharrnnError(f"{folder / CONFIG}'s charrnn_version is {describe(written_by)}; expected a "
                           f"string")
    with _naming_the_file(folder):
        model = check_record(ModelConfig, config["model_config"], "model_config")
    vocab = _json(handles[VOCAB], folder / VOCAB, VOCAB_ENTRY_MOST_BYTES * min(model.vocab_size, CODE_POINTS)
                  + 1024)
    recorded = {"score": None} | {key: config[key] for key in RECORDED_FIELDS if key in config}
    for key in SCORES:  # an infinite perplexity was written null
        if isinstance(recorded.get(key), dict) and recorded[key].get("perplexity", 0) is None:
            recorded[key] = {**recorded[key], "perplexity": math.inf}
    weights = folder / WEIGHTS
    layout = _safetensors_layout(handles[WEIGHTS], weights)
    payload = {"format_version": FORMAT_VERSION, "model_config": config["model_config"], "vocab": vocab,
               "model_state": {name: torch.empty(shape, dtype=dtype, device="meta")
                               for name, (shape, dtype) in layout.items()}, **recorded}
    with _naming_the_file(folder):
        validate_payload(payload, values=False)
    for key, value in how_read(config["model_config"], payload["model_state"]).items():
        if config.get(key) != value:  # what another reader would go by
            raise CharrnnError(f"{folder / CONFIG}'s {key} is {short_repr(config.get(key), 60)}; "
                               f"{folder / WEIGHTS} and its model_config are read with "
                               f"{short_repr(value, 60)}")
    # Refused without the memory for the file, its tensors and the float32 model built from them.
    parameters, available = parameter_count(model), available_host_memory()
    needed = 2 * os.fstat(handles[WEIGHTS].fileno()).st_size + 4 * parameters
    if available is not None and needed > available:
        raise CharrnnError(f"{weights} holds {parameters:,} parameters: loading them needs about "
                           f"{needed / 2**30:,.1f} GiB of memory; this machine has {available / 2**30:,.1f} "
                           f"GiB available")
    handles[WEIGHTS].seek(0)
    try:
        payload["model_state"] = load(read_at_most(handles[WEIGHTS], None))
    except OSError as exc:
        raise CharrnnError(f"cannot read {weights}: {reason(exc)}") from None
    except (SafetensorError, ValueError, RuntimeError, TypeError) as exc:
        raise CharrnnError(f"{weights} is not a readable safetensors file ({first_line(exc)})") from None
    with _naming_the_file(folder):
        _check_state(payload["model_state"], model)
    return payload


@contextmanager
def _naming_the_file(folder: Path) -> Iterator[None]:
    """A checkpoint field's problem as that of the folder's file holding it (or two, citing model_config)."""
    try:
        yield
    except CharrnnError as exc:
        problem, field = str(exc), re.match(r"[a-z_]*", str(exc)).group()
        file = {"model_state": WEIGHTS, "training_weights": WEIGHTS, "vocab": VOCAB}.get(field, CONFIG)
        mismatch = file != CONFIG and "model_config" in problem
        at_fault = f"{folder / file} does not match {folder / CONFIG}" if mismatch else str(folder / file)
        raise CharrnnError(f"{at_fault}: {problem}") from None


def _json(handle: BinaryIO, path: Path, most_bytes: int) -> Any:
    try:
        return parse_json(read_at_most(handle, most_bytes).decode("utf-8"))
    except FileTooLarge as exc:
        raise CharrnnError(f"{path} is refused unread: {exc}") from None
    except OSError as exc:
        raise CharrnnError(f"cannot read {path}: {reason(exc)}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise CharrnnError(f"{path} is not JSON ({first_line(exc)})") from None


def _safetensors_layout(handle: BinaryIO, path: Path) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Each tensor's name, shape and dtype in safetensors file ``handle`` (at ``path``), from its header."""

    def unreadable(why: str) -> CharrnnError:
        return CharrnnError(f"{path} is not a readable safetensors file ({why})")

    def counts(value: Any) -> bool:  # a shape, or a pair of offsets: whole numbers of 0 or more
        return isinstance(value, list) and all(type(item) is int and item >= 0 for item in value)

    size = os.fstat(handle.fileno()).st_size
    length = int.from_bytes(prefix, "little") if len(prefix := handle.read(8)) == 8 else None
    if length is None or length > min(WEIGHTS_HEADER_MOST_BYTES, size - 8):
        said = "no header length" if length is None else f"a header of {length:,} bytes"
        raise unreadable(f"it declares {said} in {size:,} bytes; a header takes at most "
                         f"{WEIGHTS_HEADER_MOST_BYTES:,}")
    try:
        header = parse_json(handle.read(length).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise unreadable(f"its header is not JSON: {first_line(exc)}") from None
    if not isinstance(header, dict):
        raise unreadable("its header is not a JSON object")
    data_bytes, layout, spans = size - 8 - length, {}, []
    for name, entry in header.items():
        if name == "__metadata__":  # strings to strings, or the safetensors reader refuses it in its words
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise unreadable("its header's __metadata__ is not a map of strings")
            continue
        entry = entry if isinstance(entry, dict) else {}
        shape, offsets, named = entry.get("shape"), entry.get("data_offsets"), entry.get("dtype")
        if (dtype := SAFETENSORS_DTYPES.get(named) if isinstance(named, str) else None) is None:
            raise unreadable(f"its header's {name!r} is not a tensor of a dtype charrnn knows ({named!r})")
        if not counts(shape) or not counts(offsets) or len(offsets) != 2:
            raise unreadable(f"its header's {name!r} has no whole-number shape and two data offsets")
        begin, end = offsets
        if end > data_bytes:
            raise unreadable(f"tensor {name!r} ends at byte {end:,} of its data, past the file's end: it "
                             f"holds {data_bytes:,} bytes of tensors")
        if (any(dim > data_bytes for dim in shape) or not begin <= end
                or end - begin != math.prod(shape) * dtype.itemsize):
            raise unreadable(f"tensor {name!r}: its offsets do not hold its shape {tuple(shape)}")
        layout[name] = (tuple(shape), dtype)
        spans.append((begin, end))
    filled = 0
    for begin, end in sorted(spans):
        if begin != filled:
            raise unreadable("its tensors overlap or leave gaps")
        filled = end
    if filled != data_bytes:
        raise unreadable(f"its header declares {filled:,} bytes of tensors; the file holds {data_bytes:,}")
    return layout
