"""The vocabulary: Unicode code points <-> integer ids; "é", "語" and "🙂" are one symbol each.

Built from a text, ids follow code-point order; extended for fine-tuning, every existing id stays and
new characters are appended. Encoding is one vectorised table lookup per character either way."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from charrnn.errors import CharrnnError
from charrnn.utils.terminal import counted


def code_points(text: str) -> torch.Tensor:
    """Return the code points of ``text`` as a ``(len(text),) int32`` tensor."""
    if not text:
        return torch.empty(0, dtype=torch.int32)
    return torch.frombuffer(bytearray(text.encode("utf-32-le")), dtype=torch.int32)


def id_dtype(vocab_size: int) -> torch.dtype:
    """The smallest integer dtype that holds ids ``0 .. vocab_size - 1``: uint8, uint16 or uint32."""
    return torch.uint8 if vocab_size <= 1 << 8 else torch.uint16 if vocab_size <= 1 << 16 else torch.uint32


def describe_chars(chars: dict[str, int], limit: int = 10) -> str:
    """Name characters with their counts, e.g. ``'é' (U+00E9) ×3``, most frequent first."""
    ordered = sorted(chars.items(), key=lambda item: (-item[1], item[0]))
    shown = ", ".join(f"{c!r} (U+{ord(c):04X}) ×{n}" for c, n in ordered[:limit])
    more = len(ordered) - limit
    return shown + (f" and {more} more" if more > 0 else "")


class UnknownCharactersError(CharrnnError):
    """The text holds characters the vocabulary does not."""

    def __init__(self, unknown: dict[str, int], hint: str | None = None):
        """``hint``: what would avoid the error, naming options by :func:`~charrnn.errors.option`."""
        self.unknown = unknown
        total = sum(unknown.values())
        super().__init__(f"{counted(total, 'character')} of {counted(len(unknown), 'kind')} are not in the "
                         f"model's vocabulary: {describe_chars(unknown)}" + (f" ({hint})" if hint else ""))


@dataclass(frozen=True)
class Vocab:
    """An ordered set of characters; ``chars[i]`` is the symbol with id ``i``."""

    chars: tuple[str, ...]
    _index: dict[str, int] = field(init=False, repr=False, compare=False)
    _table: torch.Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.chars:
            raise CharrnnError("a vocabulary needs at least one character")
        if any(not isinstance(c, str) or len(c) != 1 for c in self.chars):
            raise CharrnnError("every vocabulary entry must be exactly one code point")
        if surrogates := [c for c in self.chars if "\ud800" <= c <= "\udfff"]:
            raise CharrnnError(f"vocabulary entry {surrogates[0]!r} is a lone surrogate, not a character")
        if len(set(self.chars)) != len(self.chars):
            raise CharrnnError("vocabulary entries must be unique")
        object.__setattr__(self, "_index", {c: i for i, c in enumerate(self.chars)})
        # id of each code point up to the largest in the vocabulary, -1 where there is none
        points = code_points("".join(self.chars))
        table = torch.full((int(points.max()) + 1,), -1, dtype=torch.int32)
        table[points.long()] = torch.arange(len(self.chars), dtype=torch.int32)
        object.__setattr__(self, "_table", table)

    @classmethod
    def from_text(cls, text: str) -> Vocab:
        return cls(tuple(sorted(set(text))))

    def extended(self, chars) -> Vocab:
        """This vocabulary with ``chars`` it lacks appended (sorted): every existing id is kept."""
        return Vocab(self.chars + tuple(sorted(set(chars) - self._index.keys())))

    def __len__(self) -> int:
        return len(self.chars)

    def id_of(self, char: str) -> int:
        """The id of ``char``, which must be in the vocabulary."""
        return self._index[char]

    def __contains__(self, char: str) -> bool:
        return char in self._index

    @property
    def id_dtype(self) -> torch.dtype:
        """The smallest integer dtype that holds every id (saves memory on big corpora)."""
        return id_dtype(len(self))

    def digest(self) -> str:
        """SHA-256 of the characters in id order: equal digests, equal vocabularies."""
        return hashlib.sha256("".join(self.chars).encode("utf-8")).hexdigest()

    def lookup(self, points: torch.Tensor) -> torch.Tensor:
        """Ids of code points ``(N,)`` (any integer dtype) as ``(N,) int32``, -1 for characters not here."""
        points = points.to(torch.int32)
        beyond = points >= len(self._table)
        if bool(beyond.any()):
            return self._table.index_select(0, points.masked_fill(beyond, 0)).masked_fill_(beyond, -1)
        return self._table.index_select(0, points)

    def outside(self, counts: Mapping[str, int]) -> dict[str, int]:
        """The characters of ``counts`` (character → occurrences) that the vocabulary lacks."""
        return {char: count for char, count in counts.items() if char not in self._index}

    def encode(self, text: str, skip_unknown: bool = False) -> torch.Tensor:
        """Map ``text`` to ids, ``(len(text),)`` of :attr:`id_dtype`; ``skip_unknown`` drops unknown ones."""
        ids = self.lookup(code_points(text))
        found = ids >= 0
        if not bool(found.all()):
            if not skip_unknown:
                raise UnknownCharactersError(self.outside(Counter(text)))
            ids = ids[found]
        return ids.to(self.id_dtype)

    def decode(self, ids) -> str:
        """Map an iterable of ids (ints or a 1-D tensor) back to text."""
        return "".join(self.chars[i] for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids))

    def to_list(self) -> list[str]:
        """The plain-list form stored in checkpoints."""
        return list(self.chars)

    @classmethod
    def from_list(cls, chars: list[str]) -> Vocab:
        return cls(tuple(chars))
