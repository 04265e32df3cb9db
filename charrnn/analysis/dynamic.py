"""Dynamic evaluation (Krause et al. 2018; docs/techniques.md): the model learns from the text it scores.

Each segment is scored, then one gradient step taken on it, normalised by the training split's RMS gradient:
θ ← θ + λ·r⊙(θ₀ − θ) − η·g/(RMS + ε), r = RMS / mean(RMS) clipped at 1/λ. The model given never changes."""

from __future__ import annotations

import contextlib
import copy

import torch
import torch.nn.functional as F

from charrnn.config import DynamicConfig
from charrnn.data.corpus import StreamBatches, checkpoint_split
from charrnn.errors import CharrnnError, option
from charrnn.generation.trained import TrainedModel
from charrnn.models.evaluate import EvalResult
from charrnn.models.model import CharRNN, detach_state

EPSILON = 2e-5  # keeps the normalised step finite for weights whose gradient was ~0 in training
STATISTICS_CHARS = 200_000  # training characters whose gradients give the per-weight scale
STATISTICS_STREAMS = 32  # streams read in parallel while measuring them


def _eval_mode_gradients(device: torch.device) -> contextlib.AbstractContextManager:
    """For gradients in eval mode: cuDNN's recurrent kernels give them only in training mode, so on a GPU
    cuDNN is off (for the whole process) until the block ends; elsewhere nothing changes."""
    return torch.backends.cudnn.flags(enabled=False) if device.type == "cuda" else contextlib.nullcontext()


def gradient_rms(model: CharRNN, train_ids: torch.Tensor, segment_len: int,
                 max_chars: int = STATISTICS_CHARS) -> list[torch.Tensor]:
    """The root-mean-square gradient of each trainable weight (shaped like it) over the first ``max_chars``
    of ``train_ids``, read as streams of ``segment_len``-character segments in eval mode, state carried."""
    streams = max(1, min(STATISTICS_STREAMS, (min(len(train_ids), max_chars) - 1) // segment_len))
    if len(train_ids) < streams * segment_len + 1:
        raise CharrnnError(f"the training split has {len(train_ids)} characters; gradient statistics need "
                           f"more than one segment of {segment_len} (lower {option('segment_len')})")
    work = copy.deepcopy(model).eval()
    params = [p for p in work.parameters() if p.requires_grad]
    squares = [torch.zeros_like(p) for p in params]
    batches = StreamBatches(train_ids[: max_chars + 1], streams, segment_len)
    device = params[0].device
    state = None
    with _eval_mode_gradients(device):
        for index in range(len(batches)):
            inputs, targets = (t.long().to(device) for t in batches[index])  # (B, T) each
            work.zero_grad(set_to_none=True)
            logits, state = work(inputs, state)
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).backward()
            state = detach_state(state)
            for square, param in zip(squares, params, strict=True):
                square += param.grad.detach() ** 2
    return [torch.sqrt(square / len(batches)) for square in squares]


def dynamic_evaluate(model: CharRNN, ids: torch.Tensor, rms: list[torch.Tensor],
                     config: DynamicConfig) -> EvalResult:
    """Score ``ids[1:]`` given everything before, adapting a copy of ``model`` after each segment.
    ids: (N,) integer ids, N ≥ 2 (callers check it). ``rms`` is :func:`gradient_rms` of the same model."""
    work = copy.deepcopy(model).eval()
    params = [p for p in work.parameters() if p.requires_grad]
    trained = [p.detach().clone() for p in params]
    mean_rms = torch.stack([r.mean() for r in rms]).mean()
    # Per weight: pulled back faster where training gradients were larger; never past θ₀.
    pull = [(config.decay * r / mean_rms).clamp(max=1.0) if config.decay > 0 else torch.zeros_like(r)
            for r in rms]
    step_scale = [config.learning_rate / (r + EPSILON) for r in rms]
    device = params[0].device
    total = torch.zeros((), dtype=torch.float64, device=device)
    state = None
    with _eval_mode_gradients(device):
        for start in range(0, len(ids) - 1, config.segment_len):
            end = min(start + config.segment_len, len(ids) - 1)
            inputs = ids[start:end].long().to(device).unsqueeze(0)  # (1, T)
            targets = ids[start + 1 : end + 1].long().to(device)  # (T,)
            work.zero_grad(set_to_none=True)
            logits, state = work(inputs, state)  # (1, T, V)
            state = detach_state(state)  # the next segment's gradient stops at this boundary
            losses = F.cross_entropy(logits[0], targets, reduction="none")  # (T,)
            total += losses.detach().sum().double()  # scored before the model learns from it
            if config.learning_rate == 0:
                continue
            losses.mean().backward()
            with torch.no_grad():
                for param, origin, rate, scale in zip(params, trained, pull, step_scale, strict=True):
                    param.add_(rate * (origin - param) - scale * param.grad)
    return EvalResult.from_total(float(total), len(ids) - 1)


def checkpoint_dynamic_score(loaded: TrainedModel, ids: torch.Tensor, config: DynamicConfig) -> EvalResult:
    """Dynamic evaluation of ``ids``, its step sizes from the checkpoint's own (unchanged) training split."""
    try:
        train_ids = checkpoint_split(loaded.payload.get("corpus"), loaded.vocab).train
    except CharrnnError as exc:
        raise CharrnnError(f"dynamic evaluation scales its steps by gradients on the training split: {exc}"
                           ) from None
    rms = gradient_rms(loaded.network, train_ids, config.segment_len)
    return dynamic_evaluate(loaded.network, ids, rms, config)
