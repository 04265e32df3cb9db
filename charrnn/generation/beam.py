"""Beam search (textbook notes §4; docs/techniques.md): the B most probable continuations of a prime.

Beams advance as one batch. With no end symbol, a beam that ``stop_at`` ends keeps its score and competes as
is. ``no_repeat`` N drops candidates completing a run of N that their beam's text (prime included) holds."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from charrnn.config import DEFAULT_LENGTH_PENALTY, SampleConfig
from charrnn.data.vocab import Vocab
from charrnn.generation.sample import ban_repeats, banned_ids, extend_tail, warm_state
from charrnn.models.model import CharRNN
from charrnn.models.stepper import make_stepper


@dataclass(frozen=True)
class Beam:
    text: str  # the generated continuation, without the prime
    log_prob: float  # total natural-log probability of ``text`` given the prime
    stopped: bool  # ended by the stop string before reaching the length limit


def length_normaliser(lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    """Wu et al. (2016)'s ``((5 + n) / 6) ** alpha`` for beams of ``n`` generated characters."""
    return ((5.0 + lengths.double()) / 6.0) ** alpha


def beams_for(model: CharRNN, vocab: Vocab, prime: str, config: SampleConfig) -> list[Beam]:
    """:func:`beam_search` with ``config``'s settings (its beam width, which must be set)."""
    assert config.beam_width is not None
    penalty = DEFAULT_LENGTH_PENALTY if config.length_penalty is None else config.length_penalty
    return beam_search(model, vocab, prime, config.beam_width, config.length, config.stop_at, penalty,
                       config.min_length, config.no_repeat)


@torch.no_grad()
def beam_search(model: CharRNN, vocab: Vocab, prime: str, width: int, length: int, stop_at: str | None = None,
                length_penalty: float = 0.0, min_length: int = 0, no_repeat: int | None = None) -> list[Beam]:
    """The ``width`` likeliest continuations of ``prime``, best first, by float64 log-probability over
    :func:`length_normaliser` (only beams ``stop_at`` ended, never before ``min_length``, are shorter)."""
    current, state = warm_state(model, vocab, prime, batch=1)  # (1,), state of one beam; model in eval mode
    device, vocab_size = current.device, len(vocab)
    stepper = make_stepper(model)
    layers = stepper.unstack(state)
    scores = torch.zeros(1, dtype=torch.float64, device=device)  # (n,)
    stopped = torch.zeros(1, dtype=torch.bool, device=device)  # (n,)
    lengths = torch.zeros(1, dtype=torch.long, device=device)  # (n,) characters generated
    tails = [""]  # last len(stop_at) generated characters of each beam
    texts = [prime]  # with no_repeat: each beam's whole text, prime included
    # Per step, each beam's parent and symbol (-1 after a stop): texts are read back once at the end, so a
    # step's cost does not grow with the text, and without a stop string it never waits for the device.
    history: list[tuple[torch.Tensor, torch.Tensor]] = []
    for _ in range(length):
        logits, layers = stepper.step_layers(current, layers)  # (n, V)
        candidates = scores.unsqueeze(1) + torch.log_softmax(logits.double(), dim=-1)  # (n, V)
        if stop_at:
            # A stopped beam offers exactly one candidate: itself, unchanged (column 0 stands in).
            candidates[stopped] = float("-inf")
            candidates[stopped, 0] = scores[stopped]
        if no_repeat is not None:
            running = [True] * len(texts) if not stop_at else (~stopped).tolist()
            candidates = ban_repeats(candidates, [banned_ids(text, no_repeat, vocab) if grows else []
                                                  for text, grows in zip(texts, running, strict=True)])
        # A banned candidate is none: never kept, even where fewer than ``width`` remain.
        keep = min(width, candidates.numel() if no_repeat is None else int(torch.isfinite(candidates).sum()))
        if stop_at and length_penalty:
            # A running beam grows by one character, a stopped one keeps its length.
            grown = lengths + (~stopped).long()  # (n,)
            ranks = candidates / length_normaliser(grown, length_penalty).unsqueeze(1)
            _, flat = torch.topk(ranks.view(-1), keep)
            scores = candidates.view(-1)[flat]
        else:
            grown = lengths + 1
            scores, flat = torch.topk(candidates.view(-1), keep)
        parents, symbols = flat // vocab_size, flat % vocab_size
        lengths = grown[parents]
        layers = [tuple(s.index_select(0, parents) for s in layer) for layer in layers]  # row i: parents[i]
        current = symbols
        if stop_at:
            stopped = stopped[parents]
            symbols = symbols.masked_fill(stopped, -1)
            current = symbols.clamp(min=0)
            new_tails = []
            beam_lengths = lengths.tolist()  # one read-back per step, not one per beam
            for i, (parent, symbol) in enumerate(zip(parents.tolist(), symbols.tolist(), strict=True)):
                tail = tails[parent]
                if symbol >= 0:
                    tail, reached = extend_tail(tail, vocab.chars[symbol], stop_at)
                    stopped[i] = reached and beam_lengths[i] >= min_length
                new_tails.append(tail)
            tails = new_tails
        if no_repeat is not None:
            texts = [texts[parent] + (vocab.chars[symbol] if symbol >= 0 else "")
                     for parent, symbol in zip(parents.tolist(), symbols.tolist(), strict=True)]
        history.append((parents, symbols))
        if stop_at and bool(stopped.all()):
            break
    # The symbols of each final beam, by following the parents back from the end.
    rows = torch.arange(len(scores), device=device)
    columns = []
    for parents, symbols in reversed(history):
        columns.append(symbols[rows])
        rows = parents[rows]
    tokens = torch.stack(columns[::-1], dim=1).tolist() if columns else [[] for _ in range(len(scores))]
    if not stop_at:
        stopped = torch.zeros(len(scores), dtype=torch.bool)
    return [Beam(text=vocab.decode([t for t in row if t >= 0]), log_prob=float(score), stopped=bool(done))
            for row, score, done in zip(tokens, scores.tolist(), stopped.tolist(), strict=True)]
