"""Writing with the model: a text built character by character, by a person or the model, undoable exactly.

A :class:`WritingSession` keeps the state and scores after every character, so an undo restores them without
re-reading. It offers the likeliest next characters at temperature 1 (as ``inspect --surprisal`` does)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from charrnn.config import SampleConfig, checked
from charrnn.data.vocab import Vocab
from charrnn.errors import CharrnnError, ConfigError
from charrnn.generation.sample import ban_repeats, banned_ids, choose_next, make_generator, warm_state
from charrnn.models.model import CharRNN
from charrnn.models.stepper import Layers, make_stepper

WORD_ENDS = " \n\t.,;:!?"  # where "the rest of the word" ends
MAX_CONTINUATION = 500  # characters the model writes at most for one "rest of the word or line"


@dataclass(frozen=True)
class Guess:
    char: str  # a character the model might write next
    probability: float  # its probability at this point (temperature 1)


@dataclass(frozen=True)
class _Point:
    char: str  # the character written to reach this point ("" for the start)
    logits: torch.Tensor  # (1, V) scores of the next character
    layers: Layers  # the recurrent state after it


class WritingSession:
    """A text being written after ``prime``; see the module docstring."""

    def __init__(self, model: CharRNN, vocab: Vocab, prime: str, temperature: float, seed: int,
                 no_repeat: int | None = None):
        self.vocab, self.prime = vocab, prime
        self.stepper = make_stepper(model)
        self.decoding = SampleConfig(temperature=temperature, seed=seed, no_repeat=no_repeat)
        self.generator = make_generator(seed)
        current, state = warm_state(model, vocab, prime, 1)
        logits, layers = self.stepper.step_layers(current, self.stepper.unstack(state))
        self.points = [_Point("", logits, layers)]

    @property
    def written(self) -> str:
        """What was written after the prime."""
        return "".join(point.char for point in self.points)

    @property
    def text(self) -> str:
        return self.prime + self.written

    def guesses(self, count: int) -> list[Guess]:
        """The ``count`` likeliest next characters, likeliest first."""
        if checked(count, int, "count") < 1:
            raise ConfigError("must be at least 1", "count")
        probabilities = torch.softmax(self.points[-1].logits[0].float(), dim=-1)
        best = torch.topk(probabilities, min(count, len(self.vocab)))
        return [Guess(self.vocab.chars[index], probability)
                for index, probability in zip(best.indices.tolist(), best.values.tolist(), strict=True)]

    def write(self, char: str) -> None:
        """Add ``char`` (one character the model knows) to the text."""
        if len(checked(char, str, "char")) != 1:
            raise ConfigError(f"must be one character, not {len(char)}", "char")
        if char not in self.vocab:
            raise CharrnnError(f"the model never saw {char!r}")
        self._advance(self.vocab.encode(char).long())

    def _advance(self, ids: torch.Tensor) -> None:
        logits, layers = self.stepper.step_layers(ids, self.points[-1].layers)
        self.points.append(_Point(self.vocab.chars[int(ids[0])], logits, layers))

    def undo(self) -> bool:
        """Take back the last character written (never the prime); False when there is none."""
        if undone := len(self.points) > 1:
            self.points.pop()
        return undone

    def continue_to(self, ends: str = WORD_ENDS) -> str:
        """Let the model write at the session's temperature until it writes one of ``ends`` (included; by
        default the end of the word) or :data:`MAX_CONTINUATION` characters; return what it wrote."""
        if not checked(ends, str, "ends"):
            raise ConfigError("must name at least one character to stop at", "ends")
        wrote = []
        for _ in range(MAX_CONTINUATION):
            logits = self.points[-1].logits  # (1, V)
            if self.decoding.no_repeat is not None:  # read from the text as it is: an undo takes runs back
                logits = ban_repeats(logits, [banned_ids(self.text, self.decoding.no_repeat, self.vocab)])
            self._advance(choose_next(logits, self.decoding, self.generator))  # (1,)
            wrote.append(self.points[-1].char)
            if wrote[-1] in ends:
                break
        return "".join(wrote)
