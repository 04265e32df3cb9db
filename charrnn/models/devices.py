"""Where a model runs: resolving ``--device``, bfloat16 autocast, and whether a model fits."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import torch

from charrnn.config import ModelConfig
from charrnn.errors import CharrnnError, option
from charrnn.models.model import parameter_count
from charrnn.utils.hardware import available_host_memory, cpu_has_native_bf16

TRAINING_BYTES_PER_PARAMETER = 16  # float32 weights, gradients and Adam's two moments
EVAL_CHUNK = 4096  # most time steps in one forward call of an evaluation pass (charrnn.models.evaluate)
EVAL_CALL_CHARS = 2**14  # most characters (batch × steps) in one forward call of an evaluation
EVAL_LOGITS = 2**22  # most logits (characters × vocabulary) one forward call of an evaluation produces


def resolve_device(name: str) -> str:
    """Turn ``auto`` into ``cuda`` when a GPU is present, else ``cpu``; check explicit choices."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise CharrnnError(f"{option('device')} cuda was requested but no CUDA GPU is available")
    if name == "mps" and not torch.backends.mps.is_available():
        raise CharrnnError(f"{option('device')} mps was requested but MPS is not available")
    return name


BF16_LARGEST_HIDDEN = 768  # the widest LSTM that "auto" trains in bf16 (wider ones did not learn in it)


def resolve_precision(precision: str, device: str, model_config: ModelConfig) -> str:
    """``auto`` → ``bf16`` where measured faster (docs/performance.md): an LSTM the fused kernel runs, up
    to :data:`BF16_LARGEST_HIDDEN` wide, on a CPU with native bfloat16 (AVX512-BF16 or AMX); else ``fp32``."""
    if precision != "auto":
        return precision
    fast = device == "cpu" and _fused_lstm(model_config) and not too_wide_for_bf16(model_config)
    return "bf16" if fast and cpu_has_native_bf16() else "fp32"


def _fused_lstm(model_config: ModelConfig) -> bool:
    return model_config.cell == "lstm" and not model_config.layer_norm


def too_wide_for_bf16(model_config: ModelConfig) -> bool:
    """Whether this is an LSTM wider than :data:`BF16_LARGEST_HIDDEN`: such LSTMs did not learn in bf16."""
    return _fused_lstm(model_config) and model_config.hidden_size > BF16_LARGEST_HIDDEN


def precision_warning(precision: str, model_config: ModelConfig) -> str | None:
    """A warning when bf16 is asked for an LSTM too wide for it (:func:`too_wide_for_bf16`); else None."""
    if precision != "bf16" or not too_wide_for_bf16(model_config):
        return None
    shape = f"{model_config.num_layers}×{model_config.hidden_size}"
    return (f"warning: {option('precision')} bf16 trains a {shape} LSTM, and LSTMs wider than "
            f"{BF16_LARGEST_HIDDEN} did not learn in bf16 (a 2×1024 stayed at the loss of single-character "
            f"frequencies); {option('precision')} auto trains them in fp32")


@contextmanager
def autocast(device: torch.device, precision: str) -> Iterator[None]:
    """bfloat16 autocast of the training forward pass for ``precision == "bf16"``, a no-op for fp32; weights,
    optimiser state and loss stay float32 (checkpoints alike). Where oneDNN lacks a bfloat16 LSTM kernel (no
    AVX512-BF16 or AMX, but ``CHARRNN_CPU_BF16=1``), torch's own kernels run: slower, never wrong."""
    enabled = precision == "bf16"
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=enabled):
        if not (enabled and device.type == "cpu" and not _onednn_has_bf16_lstm()):
            yield
            return
        onednn = torch.backends.mkldnn.enabled
        torch.backends.mkldnn.enabled = False
        try:
            yield
        finally:
            torch.backends.mkldnn.enabled = onednn


@cache
def _onednn_has_bf16_lstm() -> bool:
    """Whether oneDNN can build its bfloat16 LSTM kernel on this processor: one tiny forward pass tells."""
    try:  # the random numbers of the run are not drawn on: a resumed run stays exact
        with torch.random.fork_rng(devices=[]), torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            torch.nn.LSTM(1, 1)(torch.zeros(1, 1, 1))
    except RuntimeError:
        return False
    return True


def _available(device_name: str) -> int | None:
    device = torch.device(device_name)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return available_host_memory() if device.type == "cpu" else None


def check_generation_fits(rows: int, length: int, model_config: ModelConfig, device_name: str,
                          count_option: str, length_option: str = "length") -> None:
    """Refuse, before allocating, ``rows`` texts at once (samples or beams) that cannot fit."""
    per_row = 4 * (4 * model_config.vocab_size + 8 * model_config.num_layers * model_config.hidden_size)
    needed = rows * (per_row + 16 * length)
    available = _available(device_name)
    if available is not None and needed > available:
        what = "a text of" if rows == 1 else f"{rows:,} texts at once, each of"
        lower = option(length_option) if rows == 1 else f"{option(count_option)} or {option(length_option)}"
        raise CharrnnError(f"generating {what} {length:,} characters needs about {needed / 2**30:,.1f} GiB; "
                           f"{device_name} has {available / 2**30:,.1f} GiB available. Lower {lower}")


def training_bytes(model_config: ModelConfig, batch_size: int, seq_len: int) -> tuple[int, int]:
    """Rough peak memory of a training run: (weights, gradients and Adam's moments; activations).
    A step keeps logits with softmax and gradient (3 floats each), about ten floats per unit, layer and
    character (gates, states, masks) and the embedded inputs; an evaluation call's logits count if larger."""
    characters = batch_size * seq_len
    step = 4 * characters * (3 * model_config.vocab_size
                             + 10 * model_config.num_layers * model_config.hidden_size
                             + 2 * model_config.embed_size)
    # An evaluation's forward call: its logits with their log-softmax, and per character the states.
    chars = max(1, min(EVAL_CALL_CHARS, EVAL_LOGITS // model_config.vocab_size))
    evaluation = 4 * chars * (2 * model_config.vocab_size + 4 * model_config.hidden_size)
    return parameter_count(model_config) * TRAINING_BYTES_PER_PARAMETER, max(step, evaluation)


def check_model_fits(model_config: ModelConfig, device_name: str, batch_size: int = 1,
                     seq_len: int = 1) -> None:
    """Refuse, before allocating, a run whose model state and activations cannot fit; name what to lower."""
    state, activations = training_bytes(model_config, batch_size, seq_len)
    available = _available(device_name)
    if available is None or state + activations <= available:
        return
    # Lowering the batch helps only where the model fits with the smallest one (1 × 1 characters).
    smallest = training_bytes(model_config, 1, 1)[1]
    if state + smallest <= available:
        raise CharrnnError(
            f"a training step needs about {activations / 2**30:,.1f} GiB of activations ({batch_size:,} × "
            f"{seq_len:,} characters, each with {model_config.vocab_size:,} vocabulary scores) on top of "
            f"{state / 2**30:,.1f} GiB for the model; {device_name} has {available / 2**30:,.1f} GiB "
            f"available. Lower {option('batch_size')} or {option('seq_len')}")
    # Activations past what the device holds would refuse the smaller model next: both are named at once.
    batch = f", and lower {option('batch_size')} or {option('seq_len')}" \
        if activations > max(available, smallest) else ""
    count = parameter_count(model_config)
    raise CharrnnError(f"the model has {count:,} parameters, and training it needs about "
                       f"{state / 2**30:,.1f} GiB (weights, gradients and Adam's moments) and "
                       f"{activations / 2**30:,.1f} GiB of activations; {device_name} has "
                       f"{available / 2**30:,.1f} GiB available. Choose a smaller {option('hidden_size')}, "
                       f"{option('embed_size')} or {option('num_layers')}{batch}")
