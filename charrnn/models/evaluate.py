"""Held-out NLL, bits/char and perplexity of a text's N − 1 predicted characters (textbook notes §5).
By default they are cut into :data:`EVAL_SLICE` slices, each read from a zero state after an unscored warm-up
of :data:`EVAL_WARMUP`, :data:`EVAL_STREAMS` per batch; ``single_stream`` reads the text in order, the state
carried: the exact score, which the default lands close to (docs/performance.md, "Scoring a text")."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from charrnn.config import EVAL_SLICE, EVAL_STREAMS, EVAL_WARMUP
from charrnn.errors import CharrnnError
from charrnn.models.devices import EVAL_CALL_CHARS, EVAL_CHUNK, EVAL_LOGITS
from charrnn.models.model import CharRNN, State


@dataclass(frozen=True)
class EvalResult:
    nats_per_char: float  # mean NLL of each predicted character, natural log
    bits_per_char: float  # nats_per_char / ln 2
    perplexity: float  # exp(nats_per_char)
    chars: int  # number of characters predicted and scored

    @classmethod
    def from_total(cls, total_nll: float, chars: int) -> EvalResult:
        nats = total_nll / chars
        overflows = nats > math.log(sys.float_info.max)  # exp saturates to infinity instead of raising
        return cls(nats, nats / math.log(2), math.inf if overflows else math.exp(nats), chars)

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True)
class StreamLayout:
    """How a text's predicted characters are cut into streams (see the module docstring)."""

    scored: int  # predicted characters: the text's length minus one
    slice_chars: int  # predicted characters each stream scores (the last stream may score fewer)
    warmup: int  # characters each stream reads before its slice, unscored
    streams_at_once: int  # streams run as one batch

    @classmethod
    def for_text(cls, length: int, single_stream: bool = False) -> StreamLayout:
        """The layout of a text of ``length`` characters (at least 2): many streams, or one."""
        if length < 2:
            raise CharrnnError("need at least 2 characters to score (the first has no context)")
        slicing = (length - 1, 0, 1) if single_stream else (EVAL_SLICE, EVAL_WARMUP, EVAL_STREAMS)
        return cls(length - 1, *slicing)

    @property
    def streams(self) -> int:
        return -(-self.scored // self.slice_chars)

    @property
    def positions(self) -> int:
        """Characters the model reads in all, warm-ups included: the pass's cost."""
        return self.scored + (self.streams - 1) * self.warmup

    def steps(self, batch: range) -> tuple[int, int]:
        """The time steps one batch runs: (warm-up, scored). The warm-up is skipped for the text's first
        stream alone (it starts at the text's start); the scored steps stop at the text's end."""
        warmup = 0 if batch.stop == 1 else self.warmup
        return warmup, min(self.slice_chars, self.scored - batch.start * self.slice_chars)

    def batches(self) -> Iterator[range]:
        """The streams (by index) of each batch, in the text's order."""
        for first in range(0, self.streams, self.streams_at_once):
            yield range(first, min(first + self.streams_at_once, self.streams))


def stream_layout(model: CharRNN, length: int, single_stream: bool = False) -> StreamLayout:
    """How ``model`` scores a text of ``length`` characters: many streams unless asked for one. An echo-state
    reservoir is chaotic and never forgets its start, so it is always read as one (docs/performance.md)."""
    return StreamLayout.for_text(length, single_stream or model.config.cell == "esn")


@dataclass(frozen=True)
class ScoredChunk:
    """Part of a batch of streams: the logits of the predicted characters it scores."""

    positions: torch.Tensor  # (b, T) int64: each target's index in the text; -1 past the text's end
    logits: torch.Tensor  # (b, T, V) the model's scores for each target
    targets: torch.Tensor  # (b, T) int64 target ids (0 past the text's end)


def _chunk_len(rows: int, vocab_size: int) -> int:
    """Time steps per forward call, within EVAL_CHUNK, EVAL_CALL_CHARS characters and EVAL_LOGITS logits."""
    return max(1, min(EVAL_CHUNK, EVAL_CALL_CHARS // rows, EVAL_LOGITS // (rows * vocab_size)))


def scored_chunks(model: CharRNN, ids: torch.Tensor, layout: StreamLayout,
                  batch: range) -> Iterator[ScoredChunk]:
    """The logits of one batch of streams' scored characters, chunk by chunk in time, in the caller's grad and
    model mode. ids: (N,) integer ids, N = ``layout.scored + 1``; ``batch``: from ``layout.batches()``."""
    device = next(model.parameters()).device
    width, warmup, first, rows = layout.slice_chars, layout.warmup, batch.start, len(batch)
    run_warmup, scored_steps = layout.steps(batch)
    # Stream k reads text[k·S − W, (k+1)·S) and predicts text[k·S − W + 1, (k+1)·S]; the ids before the
    # text's start (stream 0's warm-up) and past its end are padding, never scored.
    begin, end = first * width - warmup, (first + rows) * width + 1
    # Kept in the ids' own dtype (one stream may be the whole text); each chunk is widened as it is read.
    window = ids[max(begin, 0) : min(end, len(ids))]
    if begin < 0 or end > len(ids):
        window = torch.cat([window.new_zeros(max(0, -begin)), window,
                            window.new_zeros(max(0, end - len(ids)))])
    streams = window.unfold(0, warmup + width + 1, width)  # (b, W + S + 1), a view

    def columns(start: int, stop: int) -> torch.Tensor:
        return streams[:, start:stop].long().to(device)  # (b, stop - start)

    step = _chunk_len(rows, model.config.vocab_size)
    state: State | None = None
    for start in range(warmup - run_warmup, warmup, step):
        stop = min(start + step, warmup)
        _, state = model(columns(start, stop), state)
    if state is not None and first == 0:  # the text's first stream starts at its start, from zeros
        state = tuple(part.clone() for part in state)
        for part in state:
            part[:, 0] = 0
    starts = torch.arange(first, first + rows, device=device).unsqueeze(1) * width + 1  # (b, 1)
    for start in range(warmup, warmup + scored_steps, step):
        stop = min(start + step, warmup + scored_steps)
        logits, state = model(columns(start, stop), state)
        positions = starts + torch.arange(start - warmup, stop - warmup, device=device)  # (b, T)
        positions = positions.masked_fill(positions > layout.scored, -1)
        yield ScoredChunk(positions, logits, columns(start + 1, stop + 1))


@contextmanager
def eval_mode(model: CharRNN) -> Iterator[None]:
    """Run the block with ``model`` in eval mode, its mode restored after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def layout_nll(model: CharRNN, ids: torch.Tensor, layout: StreamLayout) -> tuple[float, int]:
    """Summed NLL (nats) of ``ids[1:]`` given the text before each, and how many were scored, with the streams
    laid out as given; in eval mode and float32 (the mode restored). ids: (N,) integer ids, N >= 2."""
    device = next(model.parameters()).device
    total = torch.zeros((), dtype=torch.float64, device=device)
    with eval_mode(model), torch.autocast(device_type=device.type, enabled=False):
        for batch in layout.batches():
            for chunk in scored_chunks(model, ids, layout, batch):
                losses = F.cross_entropy(chunk.logits.flatten(0, 1).float(), chunk.targets.flatten(),
                                         reduction="none").view_as(chunk.targets).double()  # (b, T)
                total += losses.masked_fill(chunk.positions < 0, 0.0).sum()
    return float(total), layout.scored


def require_scorable(chars: int, named: str, known: bool = False) -> None:
    """Refuse text ``named`` of under 2 characters (``known``: that the model knows): nothing to score."""
    if chars < 2:
        raise CharrnnError(f"{named} holds {chars} "
                           f"character{'' if chars == 1 else 's'}{' the model knows' if known else ''}; "
                           f"scoring needs at least 2 (the first has no context)")


def evaluate(model: CharRNN, ids: torch.Tensor, single_stream: bool = False) -> EvalResult:
    """NLL per character, bits per character and perplexity of ``ids`` under ``model``."""
    return EvalResult.from_total(*layout_nll(model, ids, stream_layout(model, len(ids), single_stream)))


SCORING_PROBE_STEPS = 64  # time steps of the batch timed to predict a pass's cost
SCORING_PROBE_REPEATS = 3  # timings of them, the fastest kept: a shared machine only ever slows one down


@torch.no_grad()
def scoring_seconds(model: CharRNN, ids: torch.Tensor, clock: Callable[[], float],
                    single_stream: bool = False) -> float:
    """Seconds scoring all of ``ids`` would take here: a few steps of its first batch's width, timed after an
    untimed run of them (allocation, first kernels), scaled to the pass; a text no longer is scored whole."""
    layout = stream_layout(model, len(ids), single_stream)
    rows = len(next(layout.batches()))
    steps = min(SCORING_PROBE_STEPS, _chunk_len(rows, model.config.vocab_size))
    if rows * steps + 1 >= len(ids):
        started = clock()
        evaluate(model, ids, single_stream)
        return clock() - started
    device = next(model.parameters()).device
    inputs = ids[: rows * steps].long().view(rows, steps).to(device)  # (b, T)
    targets = ids[1 : rows * steps + 1].long().view(rows, steps).to(device)  # (b, T)
    timings = []
    with eval_mode(model):
        model(inputs)
        for _ in range(SCORING_PROBE_REPEATS):
            started = clock()
            logits, _ = model(inputs)
            F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum").item()
            timings.append(clock() - started)
    return min(timings) * layout.positions / (rows * steps)
