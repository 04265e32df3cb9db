"""A trained model: network, vocabulary and checkpoint as one object that writes and scores text (torch-rnn's
``LanguageModel``). :func:`charrnn.training.checkpoint.load_model` makes one; charrnn.api.Model is one.
Importing this module imports no torch, so the command line refuses a bad option first; torch comes when the
model first writes or scores."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from charrnn.config import SampleConfig
from charrnn.errors import ConfigError, ConfigTypeError, OptionConflict, option

if TYPE_CHECKING:  # torch is imported when a model is made, not when charrnn.api is
    import torch

    from charrnn.data.vocab import Vocab
    from charrnn.models.evaluate import EvalResult
    from charrnn.models.model import CharRNN


T = TypeVar("T")
_END = object()  # what next() gives an iterator that has ended, in TrainedModel.paced


def refuse_several_texts_in_a_stream(config: SampleConfig) -> None:
    """A stream delivers one text as it is generated: beam search and several samples are refused."""
    if config.beam_width is not None or config.num_samples != 1:
        raise OptionConflict(f"a stream is one sampled text: {option('beam_width')} and "
                             f"{option('num_samples')} need sample()")


@dataclass(frozen=True)
class Written:
    """What :meth:`TrainedModel.write` wrote: texts after the prime (the prime not included)."""

    texts: list[str]  # one per sample, or per beam, best first
    seed: int | None  # the seed that draws these texts again (None: greedy or beam search)
    log_probs: list[float] | None = None  # beam search: each beam's total log-probability
    stopped: list[bool] | None = None  # beam search: whether each beam ended at stop_at


@dataclass
class TrainedModel:
    """A network ready to write and score text (textbook notes §3, §4)."""

    network: CharRNN  # in eval mode, on the device it was loaded to
    vocab: Vocab  # the vocabulary it was trained with
    payload: dict[str, Any]  # the whole checkpoint: step, corpus, configurations, ...
    checkpoint: Path | None = None  # the file it was loaded from
    threads: int | None = None  # torch's CPU threads for this model's work; None: whatever is set

    @contextmanager
    def computing(self) -> Iterator[None]:
        """Run the block with this model's threads, then restore the count (torch's count is process-wide)."""
        if self.threads is None:
            yield
            return
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def paced(self, items: Iterator[T]) -> Iterator[T]:
        """``items``, each computed with this model's threads (:meth:`computing`) as it is asked for."""
        while True:
            with self.computing():
                item = next(items, _END)
            if item is _END:
                return
            yield item

    def write(self, prime: str, config: SampleConfig) -> Written:
        """``config.num_samples`` texts of ``config.length`` characters after ``prime``: sampled (seeded),
        greedy, or the likeliest beams (fewer if fewer exist). A stop string it never writes ends nothing."""
        from charrnn.generation.beam import beams_for
        from charrnn.generation.sample import collect_samples, generate

        config = seeded(config)
        self._check_memory(config)
        with self.computing():
            if config.beam_width is not None:
                beams = beams_for(self.network, self.vocab, prime, config)[: config.num_samples]
                return Written([beam.text for beam in beams], None, [beam.log_prob for beam in beams],
                               [beam.stopped for beam in beams])
            texts = collect_samples(generate(self.network, self.vocab, config, prime), "", config.num_samples)
        return Written(texts, config.seed)

    def characters(self, prime: str, config: SampleConfig) -> Iterator[str]:
        """One sampled (or greedy) text after ``prime``, character by character, as :meth:`write` gives it
        for the same seed (which ``config`` must hold); the prime is checked before this returns."""
        from charrnn.generation.sample import generate

        refuse_several_texts_in_a_stream(config)
        if config.seed is None and not config.deterministic:
            raise ConfigError("a streamed sample needs a seed, so that its text can be drawn again", "seed")
        self._check_memory(config)
        return self.paced(step[0] for step in generate(self.network, self.vocab, config, prime))

    def score(self, ids: torch.Tensor, single_stream: bool = False) -> EvalResult:
        """Nats/char of the text ``ids`` ((N,) integer character ids of this vocabulary), as many streams
        or as one (:mod:`charrnn.models.evaluate`)."""
        import torch

        from charrnn.models.evaluate import evaluate

        if not (isinstance(ids, torch.Tensor) and ids.dim() == 1 and not ids.is_floating_point()
                and not ids.is_complex() and ids.dtype is not torch.bool):
            raise ConfigTypeError("must be a 1-D tensor of character ids (vocab.encode(text)); perplexity() "
                                  "scores a text", "ids")
        # The corpus cache's uint16 and uint32 ids (valid as encoded) have no min or max in torch; a whole
        # int64 copy of a large corpus would take 8 bytes a character, so the ids are scored as they are.
        wide_cache = ids.dtype in (torch.uint16, torch.uint32)
        if len(ids) and not wide_cache and not 0 <= int(ids.min()) <= int(ids.max()) < len(self.vocab):
            raise ConfigError(f"must hold ids from 0 to {len(self.vocab) - 1}, this model's vocabulary",
                              "ids")
        with self.computing():
            return evaluate(self.network, ids, single_stream)

    def _check_memory(self, config: SampleConfig) -> None:
        """Refuse, before any generation, more texts at once than memory holds."""
        from charrnn.models.devices import check_generation_fits

        rows, count_option = ((config.beam_width, "beam_width") if config.beam_width
                              else (config.num_samples, "num_samples"))
        device = str(next(self.network.parameters()).device)
        check_generation_fits(rows, config.length, self.network.config, device, count_option)


def seeded(config: SampleConfig) -> SampleConfig:
    """``config``, with a freshly drawn seed when it samples and has none (the same object otherwise)."""
    if config.seed is not None or config.deterministic:
        return config
    return SampleConfig(**{**config.to_dict(), "seed": secrets.randbits(63)})
