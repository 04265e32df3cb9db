"""A trained model: the network, its vocabulary and the checkpoint it came from, as one object that
writes and scores text (torch-rnn's ``LanguageModel``). :func:`charrnn.training.checkpoint.load_model`
makes one; :class:`charrnn.api.Model` is one, with the checks a caller's options need.

Importing this module imports no torch (the command line refuses a bad option before it does); the
network's modules are imported when the model first writes or scores.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from charrnn.config import SampleConfig
from charrnn.errors import ConfigError

if TYPE_CHECKING:  # torch is imported when a model is made, not when charrnn.api is
    import torch

    from charrnn.data.vocab import Vocab
    from charrnn.models.evaluate import EvalResult
    from charrnn.models.model import CharRNN


@dataclass(frozen=True)
class Written:
    """What :meth:`TrainedModel.write` wrote: texts after the prime (the prime not included)."""

    texts: list[str]  # one per sample, or per beam, best first
    log_probs: list[float] | None = None  # beam search: each beam's total log-probability
    stopped: list[bool] | None = None  # beam search: whether each beam ended at stop_at


@dataclass
class TrainedModel:
    """A network ready to write and score text (textbook notes §3, §4)."""

    network: CharRNN  # in eval mode, on the device it was loaded to
    vocab: Vocab  # the vocabulary it was trained with
    payload: dict[str, Any]  # the whole checkpoint: step, corpus, configurations, ...
    checkpoint: Path | None = None  # the file it was loaded from

    def write(self, prime: str, config: SampleConfig) -> Written:
        """``config.num_samples`` texts of ``config.length`` characters after ``prime``: sampled, greedy,
        or the most probable beams (fewer when fewer distinct continuations exist)."""
        from charrnn.generation.beam import beams_for
        from charrnn.generation.sample import collect_samples, generate

        self.check_fits(config)
        if config.beam_width is not None:
            beams = beams_for(self.network, self.vocab, prime, config)[: config.num_samples]
            return Written([beam.text for beam in beams], [beam.log_prob for beam in beams],
                           [beam.stopped for beam in beams])
        texts = collect_samples(generate(self.network, self.vocab, config, prime), "", config.num_samples)
        return Written(texts)

    def characters(self, prime: str, config: SampleConfig) -> Iterator[str]:
        """One sampled text after ``prime``, character by character (the prime is checked and read before
        this returns); the same characters :meth:`write` gives for one sample."""
        from charrnn.generation.sample import generate

        self.check_fits(config)
        return (step[0] for step in generate(self.network, self.vocab, config, prime))

    def score(self, ids: torch.Tensor, single_stream: bool = False) -> EvalResult:
        """Nats/char of the text ``ids`` ((N,) int64), as many streams or as one
        (:mod:`charrnn.models.evaluate`)."""
        from charrnn.models.evaluate import evaluate

        return evaluate(self.network, ids, single_stream)

    def check_fits(self, config: SampleConfig) -> None:
        """Refuse what cannot work before any generation: a stop string this model can never write, or
        more texts at once than memory holds."""
        from charrnn.models.devices import check_generation_fits

        if config.stop_at is not None:
            never = self.vocab.outside(Counter(config.stop_at))
            if never:
                raise ConfigError(f"holds {', '.join(map(repr, never))}, which this model never writes: it "
                                  f"would end nothing", "stop_at")
        rows, option = ((config.beam_width, "beam_width") if config.beam_width
                        else (config.num_samples, "num_samples"))
        device = str(next(self.network.parameters()).device)
        check_generation_fits(rows, config.length, self.network.config, device, option)
