"""Per-character surprisal −ln p(xᵢ | x₀ … xᵢ₋₁) in nats (textbook notes §7, exercise 7.5).

Read as :mod:`charrnn.models.evaluate` scores a text, so the mean over the scored characters (all but the
first) is ``eval-perplexity``'s nats/char. Rows come one batch of streams at a time, in bounded memory."""

from __future__ import annotations

import dataclasses
import heapq
import html
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from charrnn.analysis.neurons import text_page
from charrnn.data.vocab import Vocab
from charrnn.models.devices import EVAL_CHUNK
from charrnn.models.evaluate import eval_mode, scored_chunks, stream_layout
from charrnn.models.model import CharRNN
from charrnn.utils.terminal import heat, html_text, visible_char

SURPRISAL_STREAMS = 16  # streams read at once (see surprisals)
CONTEXT_BEFORE = 40  # characters of context shown before a surprising position
CONTEXT_AFTER = 12  # and after it


@dataclass(frozen=True)
class CharSurprisal:
    """One scored character."""

    index: int  # its position in the text (characters, counting from 0)
    char: str  # the character
    nats: float  # −ln p(char | the text before it)
    top: tuple[tuple[str, float], ...]  # the model's most likely characters at this point, with probabilities

    def to_dict(self) -> dict:
        return {"index": self.index, "char": self.char, "nats": self.nats,
                "top": [[char, probability] for char, probability in self.top]}


@dataclass(frozen=True)
class SurprisingPosition:
    """A character among the most surprising, in its context."""

    row: CharSurprisal  # the character and its scores
    before: str  # up to CONTEXT_BEFORE characters before it
    after: str  # up to CONTEXT_AFTER characters after it

    def to_dict(self) -> dict:
        return {**self.row.to_dict(), "before": self.before, "after": self.after}


@torch.no_grad()
def surprisals(model: CharRNN, vocab: Vocab, text: str, top_k: int, skip_unknown: bool = False,
               single_stream: bool = False) -> Iterator[CharSurprisal]:
    """Every character of ``text`` after the first read, in order. Characters outside the vocabulary are
    dropped with ``skip_unknown`` (as by ``eval-perplexity --skip-unknown``), else an error before any row."""
    ids = vocab.encode(text, skip_unknown=skip_unknown).long()
    # The positions in the text that the model reads: all (a range, no memory), or those it knows.
    positions = [i for i, char in enumerate(text) if char in vocab] if skip_unknown else range(len(text))
    if len(ids) < 2:
        return
    # The streams of scoring, fewer at once: only a batch's first stream is told as it is read, the
    # others wait in memory for it. The scores are the same, batch by batch.
    layout = dataclasses.replace(stream_layout(model, len(ids), single_stream),
                                 streams_at_once=SURPRISAL_STREAMS)
    chars = vocab.chars

    def rows(*scored: torch.Tensor) -> Iterator[CharSurprisal]:
        """Rows of the scores, a block at a time: as Python lists they take far more memory than tensors."""
        for start in range(0, len(scored[0]), EVAL_CHUNK):
            block = (part[start : start + EVAL_CHUNK].tolist() for part in scored)
            for target, surprise, guesses, probabilities in zip(*block, strict=True):
                index = positions[target]
                yield CharSurprisal(index, text[index], surprise,
                                    tuple((chars[guess], probability)
                                          for guess, probability in zip(guesses, probabilities, strict=True)))

    with eval_mode(model):
        for batch in layout.batches():
            waiting: list[tuple[torch.Tensor, ...]] = []
            for chunk in scored_chunks(model, ids, layout, batch):
                log_probs = F.log_softmax(chunk.logits.float(), dim=-1)  # (b, T, V)
                nats = -log_probs.gather(2, chunk.targets.unsqueeze(2)).squeeze(2)  # (b, T)
                best_log_probs, best_ids = torch.topk(log_probs, min(top_k, len(vocab)), dim=-1)  # (b, T, K)
                scored = (chunk.positions, nats, best_ids.int(), best_log_probs.exp())
                kept = chunk.positions[0] >= 0
                yield from rows(*(part[0][kept].cpu() for part in scored))
                later = chunk.positions[1:] >= 0
                waiting.append(tuple(part[1:][later].cpu() for part in scored))
            if len(batch) > 1:
                where, *scores = (torch.cat(parts) for parts in zip(*waiting, strict=True))
                order = torch.argsort(where)
                yield from rows(where[order], *(part[order] for part in scores))


def most_surprising(rows: Iterable[CharSurprisal], count: int, text: str) -> list[SurprisingPosition]:
    """The ``count`` rows of highest surprisal, highest first, with context (one pass, bounded memory)."""
    kept = heapq.nlargest(count, rows, key=lambda row: (row.nats, -row.index))
    return [SurprisingPosition(row, text[max(0, row.index - CONTEXT_BEFORE) : row.index],
                               text[row.index + 1 : row.index + 1 + CONTEXT_AFTER]) for row in kept]


def surprisal_page(text: str, rows: Iterable[CharSurprisal], title: str) -> str:
    """A standalone page (no script) of ``text`` shaded by surprisal, each character's scores on hover."""
    scored = {row.index: row for row in rows}
    spans = []
    for index, char in enumerate(text):
        row = scored.get(index)
        shown = html_text(char) if char != "\n" else "⏎\n"
        if row is None:
            spans.append(f'<span class="unscored" title="not scored">{shown}</span>')
            continue
        red, green, blue = heat(row.nats)
        guesses = "  ".join(f"{visible_char(guess)} {probability:.1%}" for guess, probability in row.top)
        tip = html.escape(f"{row.nats:.2f} nats (p = {math.exp(-row.nats):.2%})\n"
                          f"guesses: {guesses}", quote=True)
        spans.append(f'<span style="background:rgb({red},{green},{blue})" title="{tip}">{shown}</span>')
    scores = list(scored.values())
    mean = sum(row.nats for row in scores) / len(scores) if scores else float("nan")
    legend = "".join(f'<span style="background:rgb{heat(level)}">&nbsp;{level:g}&nbsp;</span>'
                     for level in (0, 1, 2, 3, 4, 5, 6))
    return text_page(title, "body{font-family:sans-serif;margin:2em;max-width:60em}pre{font-size:15px;"
                            "line-height:1.5;white-space:pre-wrap}pre span:hover{outline:1px solid #333}"
                            ".unscored{color:#888}.legend span{font-family:monospace;font-size:12px}",
                     f"<p>{len(scores):,} characters scored, {mean:.4f} nats/char on average. Each "
                     f"character is shaded by its surprisal, −ln p, given the text before it; hover one for "
                     f"its value and the model's guesses there.</p>\n"
                     f'<p class="legend">nats: {legend} and beyond</p>\n',
                     "".join(spans))
