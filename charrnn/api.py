"""The Python API: load a checkpoint to sample and score text, and train from Python.

    >>> from charrnn import load
    >>> model = load("checkpoints/tinyshakespeare/best.pt")   # a checkpoint or a run directory
    >>> text = model.sample("ROMEO:", length=200, temperature=0.8, seed=1)   # prime included
    >>> score = model.perplexity("some held-out text")   # .nats_per_char, .bits_per_char, ...

and ``charrnn.train("my_corpus.txt", hidden_size=128, epochs=5, out_dir="runs/mine")``.

These are the command line's own code paths, with the same checks: options are
the fields of :class:`~charrnn.config.ModelConfig`, :class:`~charrnn.config.TrainConfig`
and :class:`~charrnn.config.SampleConfig`, validated by those dataclasses, and a
training run is planned by :mod:`charrnn.training.plan`. Failures raise
:class:`~charrnn.errors.CharrnnError` with the message the command line prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

from charrnn.config import SampleConfig
from charrnn.data.vocab import Vocab
from charrnn.generation.sample import collect_samples, generate
from charrnn.models.devices import resolve_device
from charrnn.models.evaluate import EvalResult, evaluate
from charrnn.models.model import CharRNN
from charrnn.training.checkpoint import checkpoint_in, load_model
from charrnn.training.loop import TrainObserver, TrainResult
from charrnn.training.plan import TrainingRequest, plan_training


@dataclass
class Model:
    """A trained model and its vocabulary, ready to generate and score text."""

    network: CharRNN  # the network, in eval mode
    vocab: Vocab  # the characters it reads and writes
    checkpoint: Path  # the file it was loaded from
    payload: dict[str, Any]  # the whole checkpoint: step, corpus, configurations, ...

    def sample(self, prime: str = "", length: int = 1000, temperature: float = 1.0, *,
               seed: int | None = None, **options: Any) -> str:
        """Generate ``length`` characters after ``prime``; the text returned starts with the prime.

        ``options`` are the other fields of :class:`~charrnn.config.SampleConfig`
        (``top_k``, ``top_p``, ``greedy``, ``stop_at``, ``min_length``). The same
        seed gives the same text; without one, each call draws its own.
        """
        config = SampleConfig(length=length, temperature=temperature, seed=seed, **options)
        return collect_samples(generate(self.network, self.vocab, config, prime), prime, 1)[0]

    def perplexity(self, text: str) -> EvalResult:
        """Score ``text`` as one stream: ``.nats_per_char``, ``.bits_per_char``, ``.perplexity``, ``.chars``.

        A character outside the vocabulary is an error that names it.
        """
        return evaluate(self.network, self.vocab.encode(text).long())


def load(path: str | PathLike[str], device: str = "cpu") -> Model:
    """Load a checkpoint, or a run directory's best.pt, for sampling and scoring on ``device``."""
    checkpoint = checkpoint_in(Path(path), "best.pt")
    loaded = load_model(checkpoint, resolve_device(device))
    return Model(loaded.model, loaded.vocab, checkpoint, loaded.payload)


def train(corpus: str | PathLike[str] | None = None, *, out_dir: str | PathLike[str] | None = None,
          overwrite: bool = False, resume: str | PathLike[str] | None = None,
          init_from: str | PathLike[str] | None = None, extend_vocab: bool = False, device: str = "auto",
          observer: TrainObserver | None = None, **options: Any) -> TrainResult:
    """Train on ``corpus`` (a UTF-8 file or a directory of *.txt), as ``charrnn train`` does.

    ``options`` are fields of :class:`~charrnn.config.ModelConfig` and
    :class:`~charrnn.config.TrainConfig` (``hidden_size=128``, ``epochs=5``,
    ``time_budget=120``, ...); those not given take the same defaults as on the
    command line, time-budget shapes included. ``resume`` continues the run that
    wrote a checkpoint (``corpus`` may then be left out); ``init_from`` fine-tunes
    from one. ``observer`` receives progress (see :class:`~charrnn.training.loop.TrainObserver`).
    """
    request = TrainingRequest(
        corpus=_path(corpus), options=options, out_dir=_path(out_dir), overwrite=overwrite,
        resume=_path(resume), init_from=_path(init_from), extend_vocab=extend_vocab,
        device=resolve_device(device),
    )
    return plan_training(request).run(observer)


def _path(value: str | PathLike[str] | None) -> Path | None:
    return None if value is None else Path(value)
