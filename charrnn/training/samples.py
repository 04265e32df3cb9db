"""Samples recorded while training: ``samples.jsonl``, the text improving step by step.

Every row has the same prime, temperature and seed, so rows differ only by what the model has learnt;
sampling has its own generator, so a run with samples ends with the weights of one without."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from charrnn.config import SampleConfig, TrainConfig, expected_type, field_types
from charrnn.data.vocab import UnknownCharactersError, Vocab, describe_chars
from charrnn.errors import CharrnnError, option, short_repr
from charrnn.generation.sample import default_warmup, generate
from charrnn.models.model import CharRNN
from charrnn.utils.files import json_text, parse_json, read_log

SAMPLES_NAME = "samples.jsonl"


@dataclass(frozen=True)
class SampleRecord:
    """One row of ``samples.jsonl``."""

    step: int  # optimiser steps done when the sample was drawn
    epoch: float  # passes over the training split done, fractional
    seconds: float  # wall time of the run so far
    val_loss: float | None  # validation nats/char at this step, when it was evaluated then
    prime: str  # the text the sample starts from (not repeated in ``text``)
    temperature: float  # the sampling temperature
    seed: int  # the sampling seed
    text: str  # the generated characters

    def to_json(self) -> str:
        return json_text(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> SampleRecord:
        """Parse one row; a ValueError says it is not a recorded sample."""
        try:
            row = parse_json(line)
        except ValueError:
            row = None
        hints = field_types(cls)
        if not isinstance(row, dict) or set(row) != set(hints):
            raise ValueError(f"is not a recorded sample (one JSON object with {', '.join(hints)})")
        for name, hint in hints.items():
            expected = expected_type(row[name], hint)
            if expected is not None:
                raise ValueError(f"is not a recorded sample: {name} is {short_repr(row[name])}, not "
                                 f"{expected}")
        return cls(**row)


def check_sample_prime(config: TrainConfig, vocab: Vocab) -> None:
    """Refuse, before training, a sample prime with characters the model cannot read."""
    try:
        vocab.encode(config.sample_prime)
    except UnknownCharactersError as exc:
        unknown = describe_chars(exc.unknown)
        raise CharrnnError(f"{option('sample_prime')} has characters the corpus does not: "
                           f"{unknown}") from None


def draw_sample(model: CharRNN, vocab: Vocab, config: TrainConfig, step: int, epoch: float, seconds: float,
                val_loss: float | None, stopped: Callable[[], bool] = lambda: False) -> SampleRecord | None:
    """Generate the run's recorded sample from ``model`` as it is now, and restore its mode. ``stopped``
    is asked after each character: a stop mid-sample abandons it (None), so the run stops at once."""
    decoding = SampleConfig(length=config.sample_length, temperature=config.sample_temperature,
                            seed=config.sample_seed)
    was_training = model.training
    pieces = []
    try:
        for chars in generate(model, vocab, decoding, config.sample_prime):
            if stopped():
                return None
            pieces.append(chars[0])
    finally:
        model.train(was_training)
    text = "".join(pieces)
    prime = config.sample_prime or default_warmup(vocab)  # what an empty prime reads: a newline
    return SampleRecord(step, round(epoch, 4), round(seconds, 3), val_loss, prime,
                        config.sample_temperature, config.sample_seed, text)


def read_samples(run_dir: Path) -> list[SampleRecord]:
    """The samples a run recorded, oldest first; a malformed row is an error naming its line."""
    path = Path(run_dir) / SAMPLES_NAME
    if not os.path.lexists(path):
        raise CharrnnError(f"{run_dir} has no {SAMPLES_NAME}: record samples as a run goes with charrnn "
                           f"train --sample-every N (sample_every in Python) or --save-epochs")
    return read_log(path, SampleRecord.from_json)
