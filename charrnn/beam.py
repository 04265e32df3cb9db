"""Beam search (textbook notes §4): the B most probable continuations of a prime.

Every step extends each surviving beam by every symbol, scores each candidate by
its total log-probability, and keeps the best B. All beams advance as one batch
through :class:`~charrnn.model.Stepper`; after each selection the recurrent state
(h, and c for the LSTM) is reordered to follow the surviving beams. Plain text has
no end symbol, so beams run to ``length`` characters unless ``stop_at`` ends one:
a stopped beam keeps its score, stops growing, and competes with the rest as is.

With B = 1 this is greedy decoding. Like a very low temperature, beam search
favours safe, high-frequency continuations and often falls into repetition.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from charrnn.errors import CharrnnError
from charrnn.model import CharRNN, Layers
from charrnn.sample import extend_tail, warm_state
from charrnn.vocab import Vocab


@dataclass(frozen=True)
class Beam:
    text: str  # the generated continuation, without the prime
    log_prob: float  # total natural-log probability of ``text`` given the prime
    stopped: bool  # ended by the stop string before reaching the length limit


def _reorder(layers: Layers, parents: torch.Tensor) -> Layers:
    """Make row i of every layer's state the state of beam ``parents[i]``."""
    return [tuple(s.index_select(0, parents) for s in layer) for layer in layers]


@torch.no_grad()
def beam_search(
    model: CharRNN, vocab: Vocab, prime: str, width: int, length: int, stop_at: str | None = None
) -> list[Beam]:
    """The ``width`` most probable continuations of ``prime``, best first.

    Scores are summed in float64 so long beams keep their ranking exact enough to
    compare with a rescoring of the text.
    """
    if width < 1:
        raise CharrnnError("beam width must be at least 1")
    if length < 0:
        raise CharrnnError("length must be 0 or more")
    model.eval()
    current, state = warm_state(model, vocab, prime, batch=1)  # (1,), state of one beam
    device = current.device
    vocab_size = len(vocab)
    stepper = model.stepper()
    layers = stepper.unstack(state)
    scores = torch.zeros(1, dtype=torch.float64, device=device)  # (n,)
    tokens = torch.empty(1, 0, dtype=torch.long, device=device)  # (n, t); -1 after a stop
    stopped = torch.zeros(1, dtype=torch.bool, device=device)  # (n,)
    tails = [""]  # last len(stop_at) generated characters of each beam
    for _ in range(length):
        if bool(stopped.all()):
            break
        logits, layers = stepper.advance(current, layers)  # (n, V)
        candidates = scores.unsqueeze(1) + torch.log_softmax(logits.double(), dim=-1)  # (n, V)
        # A stopped beam offers exactly one candidate: itself, unchanged (column 0 stands in).
        candidates[stopped] = float("-inf")
        candidates[stopped, 0] = scores[stopped]
        keep = min(width, candidates.numel())
        scores, flat = torch.topk(candidates.view(-1), keep)
        parents, symbols = flat // vocab_size, flat % vocab_size
        was_stopped = stopped[parents]
        symbols = symbols.masked_fill(was_stopped, -1)
        tokens = torch.cat([tokens[parents], symbols.unsqueeze(1)], dim=1)
        layers = _reorder(layers, parents)
        current = symbols.clamp(min=0)
        stopped = was_stopped.clone()
        if stop_at:
            new_tails = []
            for i, (parent, symbol) in enumerate(zip(parents.tolist(), symbols.tolist(), strict=True)):
                tail = tails[parent]
                if symbol >= 0:
                    tail, reached = extend_tail(tail, vocab.chars[symbol], stop_at)
                    stopped[i] = reached
                new_tails.append(tail)
            tails = new_tails
    return [
        Beam(text=vocab.decode([t for t in row if t >= 0]), log_prob=float(score), stopped=bool(done))
        for row, score, done in zip(tokens.tolist(), scores.tolist(), stopped.tolist(), strict=True)
    ]
