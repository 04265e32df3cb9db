"""How much of a generated text is copied from a reference, and how much of it is spelled right.

Known words (spelled exactly), the longest verbatim copy and the share of characters in copies of at least
COPY_MIN_CHARS (docs/guide.md). Windows are hashed (two moduli) and binary-searched in the reference's."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from charrnn.config import COPY_MIN_CHARS
from charrnn.data.vocab import code_points

WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")
MODULI = (2_147_483_629, 2_147_483_587)  # two primes below 2**31: products stay inside int64
BASE = 1_000_003


@dataclass(frozen=True)
class Memorisation:
    known_word_fraction: float | None  # None when the text has no words
    longest_copied_chars: int  # length of the longest substring also in the reference
    longest_copied_line: int | None  # 1-based line of the reference where it starts
    longest_copied_passage: str  # the passage itself
    copied_fraction: float  # share of characters inside copies of >= COPY_MIN_CHARS characters


def _powers(base: int, modulus: int, count: int) -> torch.Tensor:
    """``base**k mod modulus`` for k in 0 .. count-1, by doubling (log count vector steps)."""
    powers = torch.ones(1, dtype=torch.int64)
    step = base % modulus
    while len(powers) < count:
        powers = torch.cat([powers, powers * step % modulus])
        step = step * step % modulus
    return powers[:count]


class WindowHashes:
    """Hashes of every window of one text, any length: with ``S[k] = sum_{j<k} s[j] * B^-j (mod p)``,
    ``s[i:i+L]`` hashes to ``(S[i+L] - S[i]) * B^i (mod p)``, which depends on its content only."""

    def __init__(self, text: str):
        points = code_points(text).to(torch.int64)  # (n,)
        self.length = len(points)
        self.prefix: list[torch.Tensor] = []  # per modulus, (n + 1,)
        self.powers: list[torch.Tensor] = []  # per modulus, B^i for i in 0 .. n
        for modulus in MODULI:
            inverse = pow(BASE, modulus - 2, modulus)
            scaled = points * _powers(inverse, modulus, self.length) % modulus  # each < 2**31
            prefix = torch.zeros(self.length + 1, dtype=torch.int64)
            prefix[1:] = torch.cumsum(scaled, 0) % modulus  # sums < n * 2**31: no overflow below 2**32 chars
            self.prefix.append(prefix)
            self.powers.append(_powers(BASE, modulus, self.length + 1))

    def keys(self, window: int) -> torch.Tensor:
        """One int64 key per window of ``window`` characters: ``(n - window + 1,)``."""
        count = self.length - window + 1
        if count <= 0:
            return torch.empty(0, dtype=torch.int64)
        first, second = ((prefix[window:window + count] - prefix[:count]) % modulus * powers[:count] % modulus
                         for modulus, prefix, powers in zip(MODULI, self.prefix, self.powers, strict=True))
        return first * MODULI[1] + second  # < 2**62


class Reference:
    """A reference text, ready for look-ups: its words, and sorted window hashes per length."""

    def __init__(self, text: str):
        self.text = text
        self.words = frozenset(WORD.findall(text))
        self._hashes = WindowHashes(text)
        self._sorted: dict[int, torch.Tensor] = {}

    def contains(self, keys: torch.Tensor, window: int) -> torch.Tensor:
        """Which of ``keys`` (windows of ``window`` characters) occur in the reference: ``(k,) bool``."""
        if window not in self._sorted:
            self._sorted[window] = torch.sort(self._hashes.keys(window)).values
        table = self._sorted[window]
        if not len(table) or not len(keys):
            return torch.zeros(len(keys), dtype=torch.bool)
        where = torch.searchsorted(table, keys).clamp(max=len(table) - 1)
        return table[where] == keys

    def line_of(self, passage: str) -> int | None:
        """1-based line where ``passage`` first starts in the reference; None if it does not occur."""
        position = self.text.find(passage)
        return None if position < 0 else self.text.count("\n", 0, position) + 1


def known_word_fraction(text: str, reference: Reference) -> float | None:
    words = WORD.findall(text)
    return sum(word in reference.words for word in words) / len(words) if words else None


def longest_copy(text: str, reference: Reference, hashes: WindowHashes) -> tuple[int, str, int | None]:
    """Length, first instance and reference line (or None) of ``text``'s longest copy from the reference."""
    # Invariant: a copy of length `low` exists, and none is longer than `high`.
    low, high = 0, min(len(text), len(reference.text))
    found_at = 0
    while low < high:
        middle = (low + high + 1) // 2
        hits = reference.contains(hashes.keys(middle), middle)
        if bool(hits.any()):
            low, found_at = middle, int(torch.nonzero(hits)[0])
        else:
            high = middle - 1
    while True:  # a hash collision could fake a match: confirm it, falling back to shorter lengths if needed
        passage = text[found_at:found_at + low]
        line = reference.line_of(passage) if low else None
        if line is not None or not low:
            return low, passage, line
        low -= 1
        hits = reference.contains(hashes.keys(low), low)
        found_at = int(torch.nonzero(hits)[0]) if bool(hits.any()) else 0


def copied_fraction(text: str, reference: Reference, min_chars: int = COPY_MIN_CHARS,
                    hashes: WindowHashes | None = None) -> float:
    """Share of ``text``'s characters inside a substring of ``min_chars`` or more found in the reference: a
    union of ``min_chars`` windows, each matching one's characters marked. ``hashes``: ``text``'s."""
    hashes = WindowHashes(text) if hashes is None else hashes
    hits = reference.contains(hashes.keys(min_chars), min_chars)
    if not bool(hits.any()):
        return 0.0
    starts = torch.zeros(len(text) + 1, dtype=torch.int32)
    starts[: len(hits)] += hits.int()
    starts[min_chars: min_chars + len(hits)] -= hits.int()
    covered = torch.cumsum(starts, 0)[: len(text)] > 0
    return float(covered.float().mean())


def measure(generated: str, reference: Reference) -> Memorisation:
    """The three figures for ``generated`` (the text after the prime) against ``reference``."""
    hashes = WindowHashes(generated)  # once, for both look-ups
    length, passage, line = longest_copy(generated, reference, hashes)
    return Memorisation(known_word_fraction(generated, reference), length, line, passage,
                        copied_fraction(generated, reference, hashes=hashes))
