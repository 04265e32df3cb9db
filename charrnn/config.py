"""Typed configuration for the model, training and sampling, with every default and range check. Each
dataclass round-trips through plain dicts (``asdict`` / ``from_dict``): checkpoints hold only JSON values."""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
import re
import types
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args

from charrnn.errors import CharrnnError, ConfigError, ConfigTypeError, OptionConflict, option, short_repr
from charrnn.utils.hardware import CPU_BF16_ENV, check_threads, cpu_has_native_bf16
from charrnn.utils.terminal import require_valid_text

VERSION = "0.1.0"  # charrnn's release, as pyproject.toml gives it
CellType = Literal["lstm", "gru", "rnn", "esn"]
CELL_TYPES: tuple[str, ...] = get_args(CellType)
INIT_SCHEMES: tuple[str, ...] = ("pytorch", "textbook", "orthogonal", "esn")
RNN_ACTIVATIONS: tuple[str, ...] = ("tanh", "relu")
CLIP_MODES: tuple[str, ...] = ("norm", "value")
OPTIMIZERS: tuple[str, ...] = ("adamw", "muon")
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16")
DEFAULT_EPOCHS = 10.0  # how long a run lasts when no stopping criterion is given
DEFAULT_EVAL_EVERY = 1000  # steps between validation passes of a run without a time budget
# How a text is scored (charrnn.models.evaluate; docs/performance.md, "Scoring a text"): slices of EVAL_SLICE
# predicted characters, each its own stream after EVAL_WARMUP characters of warm-up, EVAL_STREAMS at once.
EVAL_SLICE = 8192
EVAL_WARMUP = 512
EVAL_STREAMS = 128
# The validation split: the corpus's tail val_frac, at most VAL_MAX_CHARS characters (docs/performance.md,
# "How much text is held out").
VAL_MAX_CHARS = 300_000
INSPECT_FEATURES: tuple[str, ...] = ("quotes", "line-position", "indent")  # what inspect --rank tracks
INSPECT_TOP = 10  # how many units inspect --rank lists unless told
EXPORT_FORMATS = ("page", "safetensors")  # export writes a web page that generates text, or a model folder
COPY_MIN_CHARS = 32  # a copied passage at least this long counts towards copied_fraction
MAX_FORGET_BIAS = 1e3  # the gate is saturated far below this; beyond float32 it would overflow
MAX_SPECTRAL_RADIUS = 1e3  # far beyond any useful reservoir; huge radii overflow the weights to infinity
REGULARISATION_RATES = ("dropout", "weight_drop", "input_dropout", "embed_dropout")  # probabilities in [0, 1)
# What a fine-tuning run may set afresh: the rest of the model is the checkpoint's.
REGULARISATION_FIELDS = (*REGULARISATION_RATES, "locked_dropout")
MAX_LAYERS = 128  # far deeper than any character model needs; a very deep nn.LSTM takes minutes to build
# Wider than any machine can train, yet small enough that torch can compute each weight matrix's size.
MAX_WIDTH = 2**24
MAX_LEARNING_RATE = 1e3  # far above any useful rate; larger ones overflow float32 updates
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed accepts


def split_point(num_chars: int, val_frac: float, val_max_chars: int | None = None) -> int:
    """First validation index: the tail ``val_frac``, at most ``val_max_chars``; as nanoGPT splits."""
    point = int(num_chars * (1.0 - val_frac))
    return point if val_max_chars is None else max(point, num_chars - val_max_chars)


def partial_eval_chars(eval_chars: int | None, val_chars: int) -> int | None:
    """TrainConfig.eval_chars when it scores only the split's start (below ``val_chars``); None: all."""
    return eval_chars if eval_chars is not None and eval_chars < val_chars else None


def require(condition: bool, field: str, problem: str) -> None:
    """Raise a :class:`ConfigError` about ``field`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(problem, field)


def require_at_least(config: object, minimum: int, *fields: str) -> None:
    """Each of ``fields`` of ``config`` that is set is a whole number of at least ``minimum``."""
    for name in fields:
        value = getattr(config, name)
        require(value is None or value >= minimum, name, f"must be at least {minimum}")


def check_seed(seed: int | None, name: str = "seed") -> None:
    require(seed is None or SEED_RANGE[0] <= seed <= SEED_RANGE[1], name,
            f"must be between {SEED_RANGE[0]} and {SEED_RANGE[1]} (64 bits)")


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """Each field of dataclass ``cls`` and its type, resolved once: every record built or read checks them."""
    return typing.get_type_hints(cls)


def expected_type(value: Any, hint: Any) -> str | None:
    """What ``hint`` asks for in words ("a whole number") when ``value`` is not of that type, else None."""
    # A whole number past 64 bits is no count charrnn writes, and would overflow a float.
    if type(value) is int and abs(value) >= 2**64 and _matches(0, hint):
        return "a number of at most 64 bits"
    return None if _matches(value, hint) else _named(hint)


def record_problem(cls: type, values: dict[str, Any]) -> tuple[str, str | None] | None:
    """The first field of ``cls`` that the record ``values`` lacks (no default) or holds with another type:
    its name and the type expected (None: missing); None when all are right. Unknown keys are ignored."""
    hints = field_types(cls)
    for spec in fields(cls):
        if spec.name not in values:
            if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
                return spec.name, None
            continue
        if (expected := expected_type(values[spec.name], hints[spec.name])) is not None:
            return spec.name, expected
    return None


def describe(value: Any) -> str:
    """A stored value as an error shows it: its short form and its type."""
    kind = type(value).__name__
    return f"{short_repr(value)} ({'an' if kind[0] in 'aeiou' else 'a'} {kind})"


def check_type(value: Any, hint: Any, where: str) -> None:
    """Refuse a stored ``value`` that is not of type ``hint`` (:func:`expected_type`)."""
    if (expected := expected_type(value, hint)) is not None:
        raise CharrnnError(f"{where} is {describe(value)}; expected {expected}")


def check_record(cls: type, values: dict[str, Any], where: str, extra: tuple[str, ...] = ()) -> Any:
    """Build ``cls`` from a checkpoint's dict ``values``, naming the field at fault. A key it does not know
    (beyond ``extra``) is refused: a newer charrnn's may mean what this cannot."""
    if not isinstance(values, dict):
        raise CharrnnError(f"{where} is {describe(values)}; expected a {cls.__name__} record")
    if (problem := record_problem(cls, values)) is not None:
        name, expected = problem
        if expected is None:
            raise CharrnnError(f"{where}.{name} is missing")
        raise CharrnnError(f"{where}.{name} is {describe(values[name])}; expected {expected}")
    known = {spec.name for spec in fields(cls)}
    if unknown := sorted(str(key) for key in values.keys() - known - set(extra)):
        raise CharrnnError(f"{where} has {unknown[0]!r}, which this charrnn does not know (a newer "
                           f"charrnn's?)")
    try:
        return cls(**{name: values[name] for name in known if name in values})
    except ConfigError as exc:  # in the record's words, not those of an option the user never gave
        said = f"{where}.{exc.field} {exc.problem}" if exc.field else f"{where}: {exc.problem}"
        raise CharrnnError(said) from None
    except (CharrnnError, ValueError, TypeError) as exc:
        raise CharrnnError(f"{where}: {exc}") from None


def _matches(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in args)
    if origin is Literal:
        return isinstance(value, str) and value in args
    if origin is list:
        return isinstance(value, list | tuple) and all(_matches(item, args[0]) for item in value)
    if hint is type(None):
        return value is None
    if hint in (int, float):
        kind = numbers.Integral if hint is int else numbers.Real
        return isinstance(value, kind) and not isinstance(value, bool)
    if dataclasses.is_dataclass(hint):
        return isinstance(value, dict)  # a record as stored: its fields are checked one by one
    return isinstance(value, hint)


def _named(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        names = [_named(arg) for arg in args]
        if "a number" in names and "a whole number" in names:  # a number may be whole
            names.remove("a whole number")
        return " or ".join(names)
    if origin is Literal:
        return f"one of {', '.join(args)}"
    if origin is list:
        return f"a list of {_named(args[0]).removeprefix('a ')}s"
    names = {bool: "True or False", int: "a whole number", float: "a number", str: "a string",
             dict: "a mapping", type(None): "None"}
    if hint in names:
        return names[hint]
    article = "an" if hint.__name__[0] in "AEIOUaeiou" else "a"
    return f"{article} {hint.__name__}{' record' if dataclasses.is_dataclass(hint) else ''}"


def checked(value: Any, hint: Any, name: str) -> Any:
    """``value`` as a field of type ``hint`` (5 → 5.0 for a float). Another type is a ConfigTypeError; a NaN
    or infinite float, or a string not among a choice's values, a ConfigError."""
    declared, (origin, args) = hint, (typing.get_origin(hint), typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        # the one arm the value has the type of (the first, where a whole number is also a number)
        hint = next((arg for arg in args if arg is not type(None) and _matches(value, arg)), None)
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is None or not _matches(value, hint):
        expected = _named(declared)
        if typing.get_origin(declared) is Literal and isinstance(value, str):
            raise ConfigError(f"must be {expected}", name)
        shown = repr(value)  # the value too, when short
        kind = f"{type(value).__name__} {shown}" if len(shown) <= 40 else type(value).__name__
        raise ConfigTypeError(f"must be {expected}, not {kind}", name)
    if origin is list:
        return [checked(item, args[0], name) for item in value]
    if hint is int:
        return int(value)
    if hint is float:
        if not math.isfinite(value):
            raise ConfigError("must be a finite number", name)
        return float(value)
    if isinstance(value, str):  # a subclass (numpy's str_) would not survive a checkpoint's safe loading
        return str(value)
    return value


def check_field_types(config: Any) -> None:
    """Check every field of dataclass ``config`` by its annotation, storing what :func:`checked` gives."""
    for name, hint in field_types(type(config)).items():
        object.__setattr__(config, name, checked(getattr(config, name), hint, name))


def setting(default: Any = dataclasses.MISSING, about: str = "", *,
            factory: Callable[[], Any] | None = None) -> Any:
    """An option's field: its default (or ``factory``) and ``about``, what it means (--help shows it)."""
    given = {"default": default} if factory is None else {"default_factory": factory}
    return field(**given, metadata={"about": about})


def field_help(cls: type, name: str) -> str:
    """What field ``name`` of configuration ``cls`` means, as a sentence (for --help)."""
    text = cls.__dataclass_fields__[name].metadata["about"]
    first = text[:1].upper() if text[:1].isascii() else text[:1]
    return first + text[1:] + ("" if text.endswith(".") else ".")


class _DictMixin:
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, values: dict[str, Any]):
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in values.items() if k in known})


@dataclass(frozen=True)
class ModelConfig(_DictMixin):
    vocab_size: int = setting(about="number of distinct code points the model reads and predicts")
    cell: CellType = setting("lstm", "the recurrent cell: lstm, gru, rnn (Elman) or esn (a frozen random "
                                    "reservoir)")
    num_layers: int = setting(2, "stacked recurrent layers")
    hidden_size: int = setting(256, "units per recurrent layer (H)")
    embed_size: int = setting(64, "size of the character embedding fed to layer 1")
    dropout: float = setting(0.0, "dropout between layers and before the output layer")
    rnn_activation: str = setting("tanh", "the vanilla RNN's nonlinearity: tanh or relu")
    forget_bias: float | None = setting(None, "LSTM: start the effective forget-gate bias b_ih + b_hh "
                                             "here; none keeps PyTorch's small random biases, which "
                                             "learned faster in 100-second runs")
    init: str = setting("pytorch", "weight initialisation: pytorch, textbook, orthogonal or esn")
    spectral_radius: float = setting(2.5, "echo-state reservoir (esn cell or init): largest |eigenvalue|")
    recurrent_density: float = setting(1.0, "echo-state reservoir: fraction of recurrent weights that are "
                                           "non-zero")
    layer_norm: bool = setting(False, "layer-normalise each gate's pre-activation (and the LSTM cell state)")
    weight_drop: float = setting(0.0, "DropConnect on the recurrent matrices W_hh, one mask per training "
                                     "segment")
    locked_dropout: bool = setting(False, "dropout masks drawn once per segment and reused at every time "
                                         "step")
    input_dropout: float = setting(0.0, "dropout on the embedded characters fed to the first layer")
    embed_dropout: float = setting(0.0, "drop whole characters from the embedding, one draw per segment")
    skip_connections: bool = setting(False, "the input feeds every layer, and every layer the output "
                                           "(Graves 2013)")

    def __post_init__(self) -> None:
        check_field_types(self)
        require(self.rnn_activation in RNN_ACTIVATIONS, "rnn_activation",
                f"must be one of {', '.join(RNN_ACTIVATIONS)}")
        if self.rnn_activation != "tanh" and self.cell != "rnn":
            raise OptionConflict(f"{option('rnn_activation')} applies to {option('cell')} rnn only (an esn "
                                 f"reservoir is tanh)")
        if self.layer_norm and self.cell == "esn":
            raise OptionConflict(f"{option('layer_norm')} does not apply to {option('cell')} esn (its "
                                 f"reservoir is plain tanh)")
        require(self.init in INIT_SCHEMES, "init", f"must be one of {', '.join(INIT_SCHEMES)}")
        require(abs(self.forget_bias or 0.0) <= MAX_FORGET_BIAS, "forget_bias",
                f"must be within ±{MAX_FORGET_BIAS:g} (the gate saturates long before)")
        require(0 < self.spectral_radius <= MAX_SPECTRAL_RADIUS, "spectral_radius",
                f"must be in (0, {MAX_SPECTRAL_RADIUS:g}]: larger radii overflow the recurrent weights")
        require(0.0 < self.recurrent_density <= 1.0, "recurrent_density", "must be in (0, 1]")
        require_at_least(self, 1, "vocab_size", "num_layers", "hidden_size", "embed_size")
        require(self.num_layers <= MAX_LAYERS, "num_layers",
                f"must be at most {MAX_LAYERS} (a deeper stack takes minutes just to build)")
        for name in ("hidden_size", "embed_size"):
            require(getattr(self, name) <= MAX_WIDTH, name,
                    f"must be at most {MAX_WIDTH:,} (no machine holds a model that wide)")
        for name in REGULARISATION_RATES:
            require(0.0 <= getattr(self, name) < 1.0, name, "must be in [0, 1)")
        if self.skip_connections and (self.cell == "esn" or self.layer_norm):
            raise OptionConflict(f"{option('skip_connections')} applies to the fused lstm, gru and rnn "
                                 f"cells, not to {option('cell')} esn or {option('layer_norm')}")
        if self.weight_drop and self.cell == "esn":
            raise OptionConflict(f"{option('weight_drop')} does not apply to {option('cell')} esn (its "
                                 f"reservoir is not trained)")


@dataclass
class TrainConfig(_DictMixin):
    out_dir: str = setting(about="run directory: last.pt, best.pt, metrics.jsonl, config.json")
    val_frac: float = setting(0.1, "contiguous tail of the corpus held out for validation")
    val_max_chars: int | None = setting(VAL_MAX_CHARS, "the most characters held out for validation (none: "
                                                      "all of val_frac)")
    batch_size: int = setting(16, "parallel BPTT streams (B)")
    seq_len: int = setting(50, "characters per truncated-BPTT segment (T)")
    learning_rate: float = setting(3e-3, "peak AdamW learning rate")
    min_lr_ratio: float = setting(0.1, "the cosine schedule decays to learning_rate * this")
    warmup_steps: int = setting(50, "linear warm-up from 0 to the peak learning rate")
    weight_decay: float = setting(0.0, "decoupled (AdamW) weight decay")
    optimizer: str = setting("adamw", "adamw on every parameter; muon: Muon on the recurrent layers' weight "
                                     "matrices, AdamW on the rest")
    muon_lr: float = setting(0.04, "peak Muon learning rate (with optimizer muon)")
    ema_decay: float = setting(0.0, "keep a moving average of the weights with this decay (e.g. 0.999; 0: "
                                   "off); each evaluation scores it too, and best.pt holds it when it "
                                   "scores better")
    clip: float = setting(5.0, "clipping threshold; 0 turns clipping off")
    clip_mode: str = setting("norm", "how to clip: norm rescales all gradients by their norm, value clamps "
                                    "each")
    max_bad_steps: int = setting(10, "stop after this many consecutive steps with a non-finite loss or "
                                    "gradient")
    epochs: float | None = setting(None, "stop after this many passes (DEFAULT_EPOCHS if no limit is set)")
    max_steps: int | None = setting(None, "stop after this many optimiser steps")
    time_budget: float | None = setting(None, "stop after this many wall-clock seconds")
    save_epochs: list[int] = setting(factory=list, about="keep a checkpoint at the end of these epochs")
    eval_every: int | None = setting(None, "steps between validation passes; None: see evaluation_interval")
    eval_chars: int | None = setting(None, "validation characters (from the split's start) that every "
                                          "evaluation scores (none: the whole split)")
    save_every: int = setting(1000, "steps between writes of last.pt")
    sample_every: int | None = setting(None, "steps between samples recorded in samples.jsonl (and at "
                                            "every epoch checkpoint); None: at epoch checkpoints only")
    sample_length: int = setting(200, "characters in each recorded sample")
    sample_prime: str = setting("", "the text every recorded sample starts from (\"\": a newline, as at a "
                                   "text's start)")
    sample_temperature: float = setting(0.8, "the temperature of every recorded sample")
    sample_seed: int = setting(0, "the seed of every recorded sample: the same each time, so the rows "
                                 "compare")
    seed: int = setting(1337, "seeds torch and Python's RNG for initialisation and dropout")
    device: str = setting("cpu", "torch device the run uses (resolved, never \"auto\")")
    precision: str = setting("auto", "fp32; bf16: bfloat16 autocast of the training forward pass; auto: "
                                    "bf16 where it was measured faster, chosen again each time the run "
                                    "starts (models.devices.resolve_precision)")
    init_from: str | None = setting(None, "checkpoint whose weights this run started from (fine-tuning)")

    def __post_init__(self) -> None:
        check_field_types(self)
        require(0.0 < self.val_frac < 1.0, "val_frac", "must be strictly between 0 and 1")
        require_at_least(self, 1, "batch_size", "seq_len", "eval_every", "save_every", "max_bad_steps",
                         "max_steps", "sample_every", "sample_length", "eval_chars", "val_max_chars")
        require(self.sample_temperature > 0, "sample_temperature", "must be positive")
        check_seed(self.sample_seed, "sample_seed")
        require_valid_text(self.sample_prime, "sample_prime")
        require_at_least(self, 0, "warmup_steps")
        require(0 < self.learning_rate <= MAX_LEARNING_RATE, "learning_rate",
                f"must be positive and at most {MAX_LEARNING_RATE:g}")
        require(0.0 <= self.min_lr_ratio <= 1.0, "min_lr_ratio", "must be in [0, 1]")
        require(self.weight_decay >= 0, "weight_decay", "must be 0 or positive")
        require(0.0 <= self.ema_decay < 1.0, "ema_decay", "must be in [0, 1) (0 turns averaging off)")
        require(self.clip >= 0, "clip", "must be 0 (off) or positive")
        require(self.clip_mode in CLIP_MODES, "clip_mode", f"must be one of {', '.join(CLIP_MODES)}")
        require(self.optimizer in OPTIMIZERS, "optimizer", f"must be one of {', '.join(OPTIMIZERS)}")
        require(0 < self.muon_lr <= 1, "muon_lr", "must be positive and at most 1")
        for name in ("epochs", "time_budget"):
            require(getattr(self, name) is None or getattr(self, name) > 0, name, "must be positive")
        require(self.precision in PRECISIONS, "precision", f"must be one of {', '.join(PRECISIONS)}")
        if self.precision == "bf16" and not (self.device.startswith("cuda") or
                                             (self.device == "cpu" and cpu_has_native_bf16())):
            forced = f" ({CPU_BF16_ENV}=0 says this one has none)" if os.environ.get(CPU_BF16_ENV) else ""
            raise ConfigError(f"{option('precision')} bf16 needs a CUDA device or a CPU with native bfloat16 "
                              f"(AVX512-BF16 or AMX){forced}; train in fp32 here")
        require(all(epoch >= 1 for epoch in self.save_epochs), "save_epochs",
                "must list whole epochs of 1 or more")
        check_seed(self.seed)
        self.save_epochs = sorted(set(self.save_epochs))
        if self.epochs is None and self.max_steps is None and self.time_budget is None:
            self.epochs = DEFAULT_EPOCHS

    @property
    def evaluation_interval(self) -> int | None:
        """Steps between validation passes (None: a time-budgeted run plans them by time, plan_budget_end)."""
        if self.eval_every is not None:
            return self.eval_every
        return None if self.time_budget is not None else DEFAULT_EVAL_EVERY


SURPRISAL_TOP = 5  # guesses listed for each character by inspect --surprisal
DEFAULT_LENGTH_PENALTY = 1.0  # lower lets the earliest stop win, higher endless loops (docs/techniques.md)
DECODING_CHOICES = ("temperature", "top_k", "top_p", "seed")  # what beam search and greedy decoding never use


# How a sampling setting is written as text (an option, an exported page's address): a whole number
# (an optional sign, then digits), or a finite decimal number (1e-3 too; never nan or inf).
SETTING_GRAMMARS = {"whole": r"[-+]?[0-9]+", "decimal": r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?"}


@dataclass(frozen=True)
class SettingRule:
    """What a sampling setting accepts; the command line, the API and the exported page all check by it."""

    grammar: str  # a key of SETTING_GRAMMARS: what its text must look like, surrounding spaces aside
    low: int | float  # the smallest value allowed (or, with low_open, the bound it must exceed)
    high: int | float | None  # the largest value allowed; None: no bound
    low_open: bool  # low itself is refused
    refusal: str  # the refusal, after the setting's name
    greedy_hint: bool = False  # the refusal ends by pointing to greedy decoding

    def refused(self, greedy: str) -> str:
        """The refusal, naming the greedy option as ``greedy`` (each door spells it its own way)."""
        hint = f" (for the most likely character every time, use {greedy})" if self.greedy_hint else ""
        return self.refusal + hint

    def to_dict(self) -> dict[str, Any]:
        """For the exported page; whole-number bounds as text (BigInt: a JS number is inexact past 2**53)."""
        whole = self.grammar == "whole"
        high = str(self.high) if whole and self.high is not None else self.high
        return {"pattern": SETTING_GRAMMARS[self.grammar], "whole": whole, "low": str(self.low) if whole else
                self.low, "high": high, "low_open": self.low_open, "refusal": self.refused("greedy")}


SAMPLING_RULES: dict[str, SettingRule] = {
    "length": SettingRule("whole", 0, None, False, "must be a whole number of 0 or more"),
    "temperature": SettingRule("decimal", 0.0, None, True, "must be a number greater than 0",
                               greedy_hint=True),
    "top_k": SettingRule("whole", 1, None, False, "must be a whole number of at least 1"),
    "top_p": SettingRule("decimal", 0.0, 1.0, True, "must be a number in (0, 1]"),
    "seed": SettingRule("whole", SEED_RANGE[0], SEED_RANGE[1], False,
                        f"must be a whole number between {SEED_RANGE[0]} and {SEED_RANGE[1]} (64 bits)"),
    "no_repeat": SettingRule("whole", 2, None, False, "must be a whole number of at least 2"),
}


def check_setting(name: str, value: int | float) -> None:
    """Refuse a sampling setting's value outside its :data:`SAMPLING_RULES` range (or not finite)."""
    rule = SAMPLING_RULES[name]
    inside = math.isfinite(value) and (value > rule.low if rule.low_open else value >= rule.low) and (
        rule.high is None or value <= rule.high)
    require(inside, name, rule.refused(option("greedy")))


def read_setting(name: str, text: str) -> int | float:
    """A sampling setting written as text (an option's value), read and checked by its rule."""
    rule = SAMPLING_RULES[name]
    if re.fullmatch(SETTING_GRAMMARS[rule.grammar], text.strip()) is None:
        raise ConfigError(rule.refused(option("greedy")), name)
    value = int(text) if rule.grammar == "whole" else float(text)
    check_setting(name, value)
    return value


@dataclass(frozen=True)
class SampleConfig(_DictMixin):
    """How to decode: sampling, greedy or beam search (textbook notes §4); what it would ignore is refused."""

    length: int = setting(1000, "characters to generate after the prime")
    temperature: float | None = setting(None, "divide the logits by this (> 0); lower is more conservative")
    top_k: int | None = setting(None, "keep only the k most likely characters")
    top_p: float | None = setting(None, "keep the smallest set whose probability reaches p")
    greedy: bool = setting(False, "always take the most likely character")
    num_samples: int = setting(1, "independent samples, generated together (with beam search: the best "
                                 "beams)")
    seed: int | None = setting(None, "the same seed gives the same text; without one, a seed is drawn and "
                                    "reported")
    stop_at: str | None = setting(None, "end a sample after this string first appears in its generated text")
    min_length: int = setting(0, "the stop string ends no sample shorter than this many generated characters")
    beam_width: int | None = setting(None, "beam search (deterministic), keeping this many continuations")
    length_penalty: float | None = setting(None, "beam search with a stop string: rank beams by "
                                                "log-probability / ((5 + n) / 6) ** this, n their length "
                                                "(0: by total log-probability)")
    no_repeat: int | None = setting(None, "never complete a run of this many characters that the text "
                                         "(prime included) already holds, which ends loops (16 measured "
                                         "best; every decoding, and --interactive)")

    def __post_init__(self) -> None:
        check_field_types(self)
        for name in SAMPLING_RULES:
            if getattr(self, name) is not None:
                check_setting(name, getattr(self, name))
        require_at_least(self, 0, "min_length")
        require_at_least(self, 1, "num_samples", "beam_width")
        require(self.length_penalty is None or self.length_penalty >= 0, "length_penalty",
                "must be 0 or more")
        require(self.stop_at != "", "stop_at", "must not be empty (an empty string would end nothing)")
        if self.stop_at is not None:
            require_valid_text(self.stop_at, "stop_at")
        deterministic = "beam_width" if self.beam_width is not None else "greedy" if self.greedy else None
        if deterministic is not None:
            ignored = [name for name in DECODING_CHOICES if getattr(self, name) is not None]
            if self.beam_width is not None and self.greedy:
                ignored.insert(0, "greedy")
            if ignored:
                raise OptionConflict(f"{option(deterministic)} is deterministic; "
                                     f"{', '.join(option(name) for name in ignored)} does not apply")
        if self.length_penalty is not None and self.beam_width is None:
            raise OptionConflict(f"{option('length_penalty')} ranks beams: it goes with "
                                 f"{option('beam_width')}")
        if self.min_length > self.length:
            raise OptionConflict(f"{option('min_length')} {self.min_length} is longer than the whole text "
                                 f"({option('length')} {self.length}): the stop string could never act")
        # Without a stop string every text runs to its full length: these would change nothing.
        stopping = {"min_length": self.min_length > 0, "length_penalty": self.length_penalty is not None}
        for name, given in stopping.items():
            if given and self.stop_at is None:
                raise OptionConflict(f"{option(name)} matters only for texts that a stop string ends: it "
                                     f"goes with {option('stop_at')}")
        if self.beam_width is not None and self.num_samples > self.beam_width:
            raise OptionConflict(f"{option('num_samples')} {self.num_samples} exceeds {option('beam_width')} "
                                 f"{self.beam_width}")
        if self.beam_width is None and self.greedy and self.num_samples > 1:
            raise OptionConflict(f"{option('greedy')} gives one text; {option('num_samples')} "
                                 f"{self.num_samples} would repeat it (use {option('beam_width')} for "
                                 f"several deterministic texts)")

    @property
    def deterministic(self) -> bool:
        """Greedy decoding and beam search: the same text every time, with no seed."""
        return self.greedy or self.beam_width is not None

    @property
    def softmax_temperature(self) -> float:
        return 1.0 if self.temperature is None else self.temperature


@dataclass(frozen=True)
class DynamicConfig(_DictMixin):
    """Dynamic evaluation; defaults tuned on tiny Shakespeare (docs/techniques.md, "Dynamic evaluation")."""

    learning_rate: float = setting(1e-4, "η: size of the RMS-normalised step taken after each segment")
    decay: float = setting(1e-3, "λ: how far each step pulls the weights back towards the trained ones")
    segment_len: int = setting(50, "characters scored between two updates")

    def __post_init__(self) -> None:
        check_field_types(self)
        require(0 <= self.learning_rate <= MAX_LEARNING_RATE, "learning_rate",
                f"must be 0 (the static score) or positive, and at most {MAX_LEARNING_RATE:g}")
        require(self.decay >= 0, "decay", "must be 0 or positive")
        require_at_least(self, 1, "segment_len")


@dataclass(frozen=True)
class InspectConfig(_DictMixin):
    """What ``inspect`` looks at (see :mod:`charrnn.analysis.neurons`)."""

    unit: int | None = setting(None, "colour the text by this unit of the layer, counting from 0")
    layer: int | None = setting(None, "the unit's layer, counting from 0")
    state: str = setting("h", "the hidden state (h) or the LSTM's cell state (c)")
    rank: str | None = setting(None, "list the units that best track this feature of the text")
    top: int | None = setting(None, "how many units the ranking lists")
    max_chars: int = setting(3000, "read at most this many characters of the text")

    def __post_init__(self) -> None:
        check_field_types(self)
        require_at_least(self, 0, "unit", "layer")
        require_at_least(self, 1, "top", "max_chars")
        require(self.state in ("h", "c"), "state", "must be h (hidden state) or c (LSTM cell state)")
        require(self.rank is None or self.rank in INSPECT_FEATURES, "rank",
                f"must be one of {', '.join(INSPECT_FEATURES)}")
        if self.unit is None and self.rank is None:
            raise OptionConflict(f"give {option('unit')} to colour the text, or {option('rank')} to find "
                                 f"units")
        if self.layer is not None and self.unit is None:
            raise OptionConflict(f"{option('layer')} picks the layer of {option('unit')}: it goes with it")
        if self.top is not None and self.rank is None:
            raise OptionConflict(f"{option('top')} says how many units {option('rank')} lists: it goes with "
                                 f"it")

    @property
    def layer_index(self) -> int:
        return self.layer or 0

    @property
    def units_listed(self) -> int:
        return INSPECT_TOP if self.top is None else self.top


COMPARE_LENGTH = 300  # compare samples shorter texts than sample, one per checkpoint
COMPARE_SEED = 1  # compare's seed when none is given: the same for every checkpoint, and every time


# ---------------------------------------------------------------------------- a training request
# What the user asked for, checked as it is made: before any download, checkpoint or corpus is read, and
# before torch is imported (docs/how-it-works.md).

SAMPLE_SETTINGS = ("sample_length", "sample_prime", "sample_temperature", "sample_seed")
MODEL_FIELDS = frozenset(f.name for f in fields(ModelConfig))
TRAIN_FIELDS = frozenset(f.name for f in fields(TrainConfig))
NOT_OPTIONS = frozenset({"vocab_size", "out_dir", "device", "init_from"})  # set by the request or the corpus
OPTION_FIELDS = (MODEL_FIELDS | TRAIN_FIELDS) - NOT_OPTIONS


@dataclass
class TrainingRequest:
    """What the user asked for. Only the options they gave: the plan fills in the rest."""

    corpus: Path | None  # a UTF-8 file or a directory of *.txt; None when resuming from the saved path
    options: dict[str, Any] = field(default_factory=dict)  # ModelConfig and TrainConfig fields given
    out_dir: Path | None = None  # run directory; None: checkpoints/<corpus name>, or the resumed run's
    overwrite: bool = False  # replace a run already in out_dir
    resume: Path | None = None  # continue the run that wrote this checkpoint (or run directory's last.pt)
    init_from: Path | None = None  # fine-tune from this checkpoint's weights (or run directory's best.pt)
    extend_vocab: bool = False  # with init_from: add the corpus's new characters to the vocabulary
    device: str = "cpu"  # the torch device; "auto" until the plan resolves it
    corpus_name: str | None = None  # the run's corpus name; None: the corpus file's stem
    data_dir: Path | None = None  # where the built-in corpus is kept, for a run given no corpus
    threads: int | None = None  # CPU threads; None: the cores no other program is busy on (utils.threads)

    def __post_init__(self) -> None:
        """The checks that need nothing but the request itself (cheap: made before any download)."""
        if unknown := sorted(set(self.options) - OPTION_FIELDS):
            raise ConfigError(f"unknown training option {unknown[0]!r}; the options are the fields of "
                              f"ModelConfig and TrainConfig except {', '.join(sorted(NOT_OPTIONS))}")
        check_threads(self.threads)
        if self.init_from is not None and self.resume is not None:
            raise OptionConflict(f"{option('init_from')} starts a new run and {option('resume')} continues "
                                 f"one: give one of them")
        if self.extend_vocab and self.init_from is None:
            raise OptionConflict(f"{option('extend_vocab')} goes with {option('init_from')}")
        if self.data_dir is not None and (self.corpus is not None or self.resume is not None):
            raise OptionConflict(f"{option('data_dir')} keeps the built-in corpus, used only when no corpus "
                                 f"is given")
        # Each value is checked by its dataclass now, before a download, a checkpoint or a corpus is read.
        model_options, train_options = split_options(self.options)
        model = ModelConfig(vocab_size=1, **model_options)
        # "auto" may yet mean a GPU: what needs the device itself is checked again once the plan resolves it.
        device = "cuda" if self.device == "auto" else self.device
        config = TrainConfig(out_dir=".", device=device, **train_options)
        _refuse_ignored(self.options, model, config)
        if self.resume is None and config.sample_every is None and not config.save_epochs:
            for name in SAMPLE_SETTINGS:
                if name in self.options:
                    raise OptionConflict(f"{option(name)} shapes the samples recorded while training: it "
                                         f"goes with {option('sample_every')} (or {option('save_epochs')})")


def _refuse_ignored(given: dict[str, Any], model: ModelConfig, config: TrainConfig) -> None:
    """Refuse an option the rest makes do nothing (a resume: checked with the default cell; the plan: its)."""
    if "rnn_activation" in given and model.cell != "rnn":
        raise OptionConflict(f"{option('rnn_activation')} is the nonlinearity of {option('cell')} rnn; "
                             f"{model.cell} has its own")
    if "init" in given and model.cell == "esn" and model.init != "esn":
        raise OptionConflict(f"{option('cell')} esn draws its reservoir with the esn scheme: "
                             f"{option('init')} {model.init} does not apply")
    if given.get("skip_connections") and model.num_layers == 1:
        raise OptionConflict(f"{option('skip_connections')} links the layers of a stack: one layer "
                             f"({option('num_layers')} 1) has none to link")
    if "forget_bias" in given and model.cell != "lstm":
        raise OptionConflict(f"{option('forget_bias')} sets the LSTM's forget gate; {option('cell')} "
                             f"{model.cell} has none")
    if config.optimizer == "muon" and model.cell == "esn":
        raise OptionConflict(f"{option('optimizer')} muon steps the recurrent matrices, which "
                             f"{option('cell')} esn keeps as drawn")
    esn = model.cell == "esn" or model.init == "esn"
    for name in ("spectral_radius", "recurrent_density"):
        if name in given and not esn:
            raise OptionConflict(f"{option(name)} shapes an echo-state reservoir: it goes with "
                                 f"{option('cell')} esn or {option('init')} esn")
    no_dropout = model.dropout == model.input_dropout == 0 and config.time_budget is None  # budgets pick one
    if given.get("locked_dropout") and no_dropout:
        raise OptionConflict(f"{option('locked_dropout')} locks the dropout masks across time: with "
                             f"{option('dropout')} 0 and {option('input_dropout')} 0 there is no dropout to "
                             f"lock")
    if "clip_mode" in given and config.clip == 0:
        raise OptionConflict(f"{option('clip_mode')} does nothing with {option('clip')} 0 (clipping off)")


def split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The options that are ModelConfig fields, and those that are TrainConfig fields (new dicts)."""
    return ({k: v for k, v in options.items() if k in MODEL_FIELDS},
            {k: v for k, v in options.items() if k in TRAIN_FIELDS})
