"""Held-out negative log-likelihood, bits per character and perplexity (textbook notes §5).

The text is scored as one stream: chunks of ``chunk_len`` characters run through
the model in order with the recurrent state carried from each chunk to the next,
so every character is predicted from the whole text before it, exactly as if the
model had read it in one pass. The summed NLL is divided by the number of
predicted characters (``len(text) - 1``: the first character has no context).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from charrnn.errors import CharrnnError
from charrnn.models.devices import EVAL_CHUNK
from charrnn.models.model import CharRNN


def perplexity(nats_per_char: float) -> float:
    """``exp(nats_per_char)``, saturating to infinity where it would overflow a float (above ~709)."""
    try:
        return math.exp(nats_per_char)
    except OverflowError:
        return math.inf


@dataclass(frozen=True)
class EvalResult:
    nats_per_char: float  # mean NLL of each predicted character, natural log
    bits_per_char: float  # nats_per_char / ln 2
    perplexity: float  # exp(nats_per_char)
    chars: int  # number of characters predicted and scored

    @classmethod
    def from_total(cls, total_nll: float, chars: int) -> EvalResult:
        nats = total_nll / chars
        return cls(nats, nats / math.log(2), perplexity(nats), chars)

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


@torch.no_grad()
def total_nll(model: CharRNN, ids: torch.Tensor, chunk_len: int = EVAL_CHUNK) -> tuple[float, int]:
    """Summed NLL (nats) of ``ids[1:]`` given everything before, and how many were scored.

    ids: (N,) integer ids, N >= 2. Runs in eval mode and restores the model's mode.
    """
    return prefix_and_total_nll(model, ids, chunk_len)[1]


@torch.no_grad()
def prefix_and_total_nll(model: CharRNN, ids: torch.Tensor, chunk_len: int = EVAL_CHUNK,
                         prefix: int | None = None) -> tuple[tuple[float, int], tuple[float, int]]:
    """(summed NLL, characters scored) of the first ``prefix`` predicted characters, and of all of
    ``ids[1:]``, in one pass: the prefix's figures are exactly what scoring ``ids[:prefix + 1]`` alone
    gives, since a stream's early predictions never see its later text.

    ids: (N,) integer ids, N >= 2; ``prefix`` (default: all) is clipped to [1, N - 1].
    """
    if len(ids) < 2:
        raise CharrnnError("need at least 2 characters to score (the first has no context)")
    scored = len(ids) - 1
    prefix = scored if prefix is None else max(1, min(prefix, scored))
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    state = None
    total = torch.zeros((), dtype=torch.float64, device=device)
    prefix_total = total
    try:
        start = 0
        while start < scored:
            # A chunk never straddles the prefix's end, so its sum is read between two chunks.
            end = min(start + chunk_len, scored if start >= prefix else prefix)
            inputs = ids[start:end].long().to(device).unsqueeze(0)  # (1, T)
            targets = ids[start + 1 : end + 1].long().to(device)  # (T,)
            logits, state = model(inputs, state)  # (1, T, V)
            total = total + F.cross_entropy(logits[0], targets, reduction="sum").double()
            if end == prefix:
                prefix_total = total
            start = end
    finally:
        model.train(was_training)
    return (float(prefix_total), prefix), (float(total), scored)


def evaluate(model: CharRNN, ids: torch.Tensor, chunk_len: int = EVAL_CHUNK) -> EvalResult:
    """NLL per character, bits per character and perplexity of ``ids`` under ``model``."""
    total, chars = total_nll(model, ids, chunk_len)
    return EvalResult.from_total(total, chars)


def evaluate_with_prefix(model: CharRNN, ids: torch.Tensor, prefix: int,
                         chunk_len: int = EVAL_CHUNK) -> tuple[EvalResult, EvalResult]:
    """The scores of the first ``prefix`` predicted characters and of all of ``ids``, in one pass."""
    (prefix_total, prefix_chars), (total, chars) = prefix_and_total_nll(model, ids, chunk_len, prefix)
    return EvalResult.from_total(prefix_total, prefix_chars), EvalResult.from_total(total, chars)
