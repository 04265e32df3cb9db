"""The Python API, and the command line's only way into the library: each command calls one function
here (or a :class:`Model` method) and renders its typed result (``--json``: its ``to_dict()``). Options
are checked before any work; a refusal is a :class:`~charrnn.errors.ConfigError` (a ``TypeError`` too
for a wrong type) naming the parameter as written. Other failures raise ``CharrnnError``."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from charrnn.config import (
    COMPARE_LENGTH,
    COMPARE_SEED,
    EXPORT_FORMATS,
    SURPRISAL_TOP,
    DynamicConfig,
    InspectConfig,
    SampleConfig,
    checked,
)
from charrnn.data.datasets import DATASETS, DEFAULT_DATASET, Dataset, fetch
from charrnn.errors import CharrnnError, ConfigError, ConfigTypeError, OptionConflict, option
from charrnn.generation.trained import TrainedModel, refuse_several_texts_in_a_stream, seeded
from charrnn.models.pretrained import resolve_shipped, run_name
from charrnn.training.observer import TrainObserver
from charrnn.utils.hardware import check_threads, use_threads
from charrnn.utils.terminal import counted, markdown_text, one_line, require_valid_text

if TYPE_CHECKING:  # torch is imported only once the options are checked and there is work to do
    from charrnn.models.evaluate import EvalResult
    from charrnn.training.plan import TrainResult

PathArg = str | PathLike[str]


def _path(value: PathArg | None, name: str) -> Path | None:
    """A path parameter (None, a string or a path-like); an empty one (quietly ".") is refused by name."""
    if value is None:
        return None
    try:
        text = os.fspath(value) if isinstance(value, str | PathLike) else None
    except TypeError:
        text = None
    if not isinstance(text, str):  # bytes, or a path-like whose __fspath__ returns something else
        raise ConfigTypeError(f"must be a path (a string or a pathlib.Path), not {type(value).__name__}",
                              name)
    if not text:
        raise ConfigError("must not be empty", name)
    if "\0" in text:
        raise ConfigError("must not hold a NUL character", name)
    return Path(text)


def _text_file(value: PathArg | None, name: str) -> Path | None:
    """A path parameter that names a text file to read: it must exist and not be a directory."""
    path = _path(value, name)
    if path is not None and path.is_dir():
        raise ConfigError(f"must be a text file, not a directory ({path})", name)
    if path is not None and not path.exists():
        raise CharrnnError(f"{option(name)} {path} does not exist")
    return path


def _require_path(value: PathArg, name: str) -> Path:
    if (path := _path(value, name)) is None:
        raise ConfigTypeError("must be a path (a string or a pathlib.Path), not None", name)
    return path


def _one_text(text: str | None, file: PathArg | None) -> str:
    """The text to look at: ``text`` itself or the contents of ``file``, exactly one of them."""
    path = _text_file(file, "file")
    if (text is None) == (path is None):
        raise OptionConflict(f"give one of {option('text')} and {option('file')}")
    return _read_text(path) if path is not None else require_valid_text(checked(text, str, "text"), "text")


def _read_text(path: Path) -> str:
    from charrnn.data.corpus import read_corpus

    return read_corpus(path)


def check_output(output: PathArg, name: str, inputs: dict[str, Any]) -> Path:
    """Refuse, before any work, an output that cannot be written or would destroy one of the ``inputs``."""
    target = _require_path(output, name)
    if target.is_dir() or str(output).endswith(("/", os.sep)):
        raise ConfigError(f"must name a file, not a directory ({target})", name)
    if not target.parent.is_dir():
        raise CharrnnError(f"{option(name)} {target}: there is no directory {target.parent}")
    from charrnn.training.rundir import refuse_writing_over_reads

    reads = {key: [_require_path(each, key) for each in (given if isinstance(given, list | tuple)
                                                         else [given])
                   if each is not None and not (key == "against" and each == "train")]  # train: a keyword
             for key, given in (inputs or {}).items()}
    for key in {"checkpoint", "checkpoints"} & reads.keys():  # a checkpoint may be the shipped model's name
        reads[key] = [resolve_shipped(path) for path in reads[key]]
    refuse_writing_over_reads(target, name, reads)
    return target


# DynamicConfig's fields as the functions that score take them (its learning rate is not training's)
DYNAMIC_PARAMETERS = {"learning_rate": "dynamic_lr", "decay": "dynamic_decay", "segment_len": "segment_len"}


def dynamic_settings(dynamic: bool | DynamicConfig, learning_rate: float | None = None,
                     decay: float | None = None, segment_len: int | None = None) -> DynamicConfig | None:
    """Dynamic evaluation's settings, or None when it is off; settings without ``dynamic`` are refused."""
    given = {key: value for key, value in zip(DYNAMIC_PARAMETERS, (learning_rate, decay, segment_len),
                                              strict=True) if value is not None}
    if isinstance(dynamic, DynamicConfig) and given:
        raise OptionConflict(f"give the dynamic settings in {option('dynamic')} or as parameters, not both")
    if isinstance(dynamic, DynamicConfig):
        return dynamic
    if not isinstance(dynamic, bool):
        raise ConfigTypeError(f"must be True, False or a DynamicConfig, not {type(dynamic).__name__}",
                              "dynamic")
    if given and not dynamic:
        first = DYNAMIC_PARAMETERS[next(iter(given))]
        raise OptionConflict(f"{option(first)} is a setting of dynamic evaluation: it goes with "
                             f"{option('dynamic')}")
    if not dynamic:
        return None
    try:
        return DynamicConfig(**given)
    except ConfigError as exc:  # named as the caller named it; a wrong type stays a TypeError
        raise type(exc)(exc.problem, DYNAMIC_PARAMETERS.get(exc.field, exc.field)) from None


# --------------------------------------------------------------------------- results


def _plain(path: PathArg | None) -> str | None:
    """A path as JSON holds it."""
    return None if path is None else str(path)


@dataclass(frozen=True)
class Samples:
    """Texts generated by :meth:`Model.sample`; each starts with the prime."""

    texts: list[str]  # one per sample (or beam, best first)
    seed: int | None  # the seed that draws these texts again (None: greedy or beam search)
    seed_drawn: bool  # True when no seed was given and this one was drawn
    log_probs: list[float] | None = None  # beam search: each beam's total log-probability
    stopped: list[bool] | None = None  # beam search: whether each beam ended at stop_at
    notes: list[str] = field(default_factory=list)  # what the caller should know (fewer beams than asked)
    checkpoint: Path | None = None  # the checkpoint that wrote them

    @property
    def text(self) -> str:
        """The first (for beams, the best) text."""
        return self.texts[0]

    def __str__(self) -> str:
        return self.text

    def records(self) -> list[dict[str, Any]]:
        """A JSON-ready record per text: the text; for beams, its log-probability and whether it stopped."""
        if self.log_probs is None or self.stopped is None:
            return [{"text": text} for text in self.texts]
        return [{"text": text, "log_prob": log_prob, "stopped": stopped}
                for text, log_prob, stopped in zip(self.texts, self.log_probs, self.stopped, strict=True)]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "checkpoint": _plain(self.checkpoint)}


@dataclass
class SampleStream:
    """One sample, delivered as it is generated: iterate for the characters after the prime."""

    prime: str  # the text the model was warmed with
    seed: int | None  # as in :class:`Samples`
    seed_drawn: bool
    chars: Iterator[str]  # the generated characters, one at a time
    checkpoint: Path | None = None  # the checkpoint that writes them

    def __iter__(self) -> Iterator[str]:
        return self.chars


@dataclass(frozen=True)
class TextScore:
    """How well a model predicts a text (:meth:`Model.perplexity`)."""

    text: str  # what was scored: a file's path, "text", or the checkpoint's validation split
    score: EvalResult  # nats/char, bits/char, perplexity and characters scored
    skipped: dict[str, int]  # characters outside the vocabulary that were dropped (skip_unknown)
    dynamic: EvalResult | None  # the score under dynamic evaluation, when asked for
    dynamic_settings: DynamicConfig | None  # its settings
    seconds: float  # wall time of the scoring
    checkpoint: Path | None = None  # the checkpoint scored

    @property
    def notes(self) -> list[str]:
        """What the caller should know: the characters skipped."""
        if not self.skipped:
            return []
        from charrnn.data.vocab import describe_chars

        return [f"skipped {counted(sum(self.skipped.values()), 'character')} outside the vocabulary: "
                f"{describe_chars(self.skipped)}"]

    def __getattr__(self, name: str) -> Any:
        """``nats_per_char``, ``bits_per_char``, ``perplexity`` and ``chars``: the score's."""
        if name in ("nats_per_char", "bits_per_char", "perplexity", "chars"):
            return getattr(self.score, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {"text": self.text, **self.score.to_dict(), "seconds": self.seconds,
                                  "checkpoint": _plain(self.checkpoint)}
        if self.skipped:
            record["skipped"] = self.skipped
        if self.dynamic is not None and self.dynamic_settings is not None:
            record["dynamic"] = {**self.dynamic.to_dict(), **self.dynamic_settings.to_dict()}
        return record


@dataclass(frozen=True)
class Inspection:
    """A unit's activations over a text, and the units that best track a feature (:meth:`Model.inspect`)."""

    text: str  # the text read (at most max_chars of it)
    layer: int  # the layer looked at
    unit: int | None  # the unit coloured, if one was asked for
    state: str  # "h" (hidden state) or "c" (LSTM cell state)
    values: list[float] | None  # the unit's value after each character (with unit)
    scale: float  # the magnitude shown as full colour
    feature: str | None  # the feature units were ranked by (with rank)
    ranking: list[tuple[int, int, float]] | None  # (layer, unit, correlation), best first (with rank)
    checkpoint: Path | None = None  # the checkpoint looked at

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "checkpoint": _plain(self.checkpoint)}

    def to_html(self) -> str:
        """The coloured text as one self-contained page (with ``unit``)."""
        from charrnn.analysis.neurons import html_page

        if self.values is None:
            raise OptionConflict(f"a page shows one unit's values: give {option('unit')}")
        where = "" if self.checkpoint is None else f"{run_name(self.checkpoint)}/{self.checkpoint.name}: "
        state = "cell state" if self.state == "c" else "hidden state"
        title = f"{where}layer {self.layer}, unit {self.unit}, {state}"
        return html_page(self.text, self.values, self.scale, title)


# ---------------------------------------------------------------------------- a model
# Each request is checked once, before any model is loaded, by a function here that returns the arguments of
# the Model method that does the work: Model.sample checks then works; sample() checks, loads, then works.


def _decoding(prime: str | None, length: int | None, temperature: float | None, prime_file: PathArg | None,
              options: dict[str, Any], stream: bool = False) -> tuple[SampleConfig, str]:
    """A request for text: the decoding settings (``stream``: one text, as generated) and the prime."""
    lengths = {} if length is None else {"length": length}
    config = SampleConfig(temperature=temperature, **_known(options, SampleConfig), **lengths)
    if stream:
        refuse_several_texts_in_a_stream(config)
    if prime is not None:
        checked(prime, str, "prime")
    path = _text_file(prime_file, "prime_file")
    if prime is not None and path is not None:
        raise OptionConflict(f"give {option('prime')} or {option('prime_file')}, not both")
    return config, _read_text(path) if path is not None else require_valid_text(prime or "", "prime")


def _writing_request(prime: str | None, temperature: float | None, seed: int | None, no_repeat: int | None,
                     prime_file: PathArg | None, unused: dict[str, Any]) -> tuple[SampleConfig, str]:
    if unused:
        raise OptionConflict(f"writing interactively takes a prime, a temperature, a seed and the no-repeat "
                             f"rule: {option(sorted(unused)[0])} does not apply")
    return _decoding(prime, None, temperature, prime_file, {"seed": seed, "no_repeat": no_repeat})


def _scoring(text: str | None, file: PathArg | None, skip_unknown: bool, dynamic: bool | DynamicConfig,
             dynamic_lr: float | None, dynamic_decay: float | None, segment_len: int | None,
             single_stream: bool) -> tuple[str | None, Path | None, bool, DynamicConfig | None, bool]:
    settings = dynamic_settings(dynamic, dynamic_lr, dynamic_decay, segment_len)
    checked(skip_unknown, bool, "skip_unknown")
    checked(single_stream, bool, "single_stream")
    if text is not None:
        require_valid_text(checked(text, str, "text"), "text")
    path = _text_file(file, "file")
    if text is not None and path is not None:
        raise OptionConflict(f"give {option('text')} or {option('file')}, not both")
    if skip_unknown and text is None and path is None:
        raise OptionConflict(f"{option('skip_unknown')} goes with a text to score: the validation split "
                             f"holds only the model's own characters")
    return text, path, skip_unknown, settings, single_stream


def _looking(text: str | None, file: PathArg | None, options: dict[str, Any]) -> tuple[str, InspectConfig]:
    config = InspectConfig(**_known(options, InspectConfig))
    return _one_text(text, file)[: config.max_chars], config


def _surprising(text: str | None, file: PathArg | None, top: int, skip_unknown: bool, max_chars: int | None,
                single_stream: bool) -> tuple[str, str, int, bool, bool]:
    if checked(top, int, "top") < 1:
        raise ConfigError("must be at least 1", "top")
    if max_chars is not None and checked(max_chars, int, "max_chars") < 2:
        raise ConfigError("must be at least 2 (the first character is never scored)", "max_chars")
    checked(skip_unknown, bool, "skip_unknown")
    checked(single_stream, bool, "single_stream")
    source = "the text" if file is None else str(file)
    return _one_text(text, file)[:max_chars], source, top, skip_unknown, single_stream


class Model(TrainedModel):
    """A trained model, ready to generate and score text with every option checked first."""

    def sample(self, prime: str | None = None, length: int | None = None, temperature: float | None = None,
               *, prime_file: PathArg | None = None, **options: Any) -> Samples:
        """Generate ``length`` characters after ``prime`` (or ``prime_file``'s); options: SampleConfig's."""
        return self._sample(*_decoding(prime, length, temperature, prime_file, options))

    def _sample(self, config: SampleConfig, prime: str) -> Samples:
        self._refuse_an_unwritable_stop(config)
        written = self.write(prime, config)
        notes = []
        if len(written.texts) < config.num_samples:
            notes.append(f"only {counted(len(written.texts), 'distinct continuation')} of {config.length} "
                         f"characters exist over this model's {len(self.vocab)}-symbol vocabulary; returning "
                         f"{len(written.texts)}")
        drawn = config.seed is None and written.seed is not None
        return Samples([prime + text for text in written.texts], written.seed, drawn, written.log_probs,
                       written.stopped, notes, self.checkpoint)

    def stream(self, prime: str | None = None, length: int | None = None, temperature: float | None = None,
               *, prime_file: PathArg | None = None, **options: Any) -> SampleStream:
        """One sample, character by character, as :meth:`sample` would generate it (same seed, same text)."""
        return self._stream(*_decoding(prime, length, temperature, prime_file, options, stream=True))

    def _stream(self, config: SampleConfig, prime: str) -> SampleStream:
        self._refuse_an_unwritable_stop(config)
        drawn = seeded(config)
        return SampleStream(prime, drawn.seed, drawn is not config, self.characters(prime, drawn),
                            self.checkpoint)

    def _refuse_an_unwritable_stop(self, config: SampleConfig) -> None:
        """Refuse a stop string this model never writes (``compare``, across vocabularies, lets it be)."""
        if never := self.vocab.outside(Counter(config.stop_at or "")):
            raise ConfigError(f"holds {', '.join(map(repr, never))}, which this model never writes: it would "
                              f"end nothing", "stop_at")

    def perplexity(self, text: str | None = None, *, file: PathArg | None = None, skip_unknown: bool = False,
                   dynamic: bool | DynamicConfig = False, dynamic_lr: float | None = None,
                   dynamic_decay: float | None = None, segment_len: int | None = None,
                   single_stream: bool = False) -> TextScore:
        """Score ``text``, ``file``'s text, or (with neither) the checkpoint's validation split, as many
        warmed streams (``single_stream``: as one); ``dynamic`` also scores by dynamic evaluation."""
        return self._perplexity(*_scoring(text, file, skip_unknown, dynamic, dynamic_lr, dynamic_decay,
                                          segment_len, single_stream))

    def _perplexity(self, text: str | None, file: Path | None, skip_unknown: bool,
                    dynamic: DynamicConfig | None, single_stream: bool) -> TextScore:
        from charrnn.data.corpus import cached_ids, checkpoint_validation_ids, corpus_path, scan_corpus
        from charrnn.models.evaluate import require_scorable

        skipped: dict[str, int] = {}
        if file is not None:
            scan = scan_corpus(file)
            skipped = _unknown(self.vocab.outside(scan.char_counts()), skip_unknown)
            ids = cached_ids(scan, self.vocab, skip_unknown=True)
            source = str(file)
        elif text is not None:
            skipped = _unknown(self.vocab.outside(Counter(text)), skip_unknown)
            ids = self.vocab.encode(text, skip_unknown=True).long()
            source = "text"
        else:
            corpus = self.payload.get("corpus")
            try:
                ids = checkpoint_validation_ids(corpus, self.vocab)
            except CharrnnError as exc:
                raise CharrnnError(f"{exc}; give a text to score instead") from None
            source = f"validation split of {corpus_path(corpus)}"  # the copy read, where it was elsewhere
        require_scorable(len(ids), "the text" if text is not None else source, bool(skipped))
        started = time.perf_counter()
        score = self.score(ids, single_stream)
        adapted = None
        if dynamic is not None:
            from charrnn.analysis.dynamic import checkpoint_dynamic_score

            with self.computing():
                adapted = checkpoint_dynamic_score(self, ids, dynamic)
        return TextScore(source, score, skipped, adapted, dynamic, time.perf_counter() - started,
                         self.checkpoint)

    def inspect(self, text: str | None = None, *, file: PathArg | None = None, **options: Any) -> Inspection:
        """Colour ``text`` (or ``file``) by a unit and/or rank units by a feature (InspectConfig)."""
        return self._inspect(*_looking(text, file, options))

    def _inspect(self, text: str, asked: InspectConfig) -> Inspection:
        from charrnn.analysis.neurons import activations, rank_units, text_feature
        from charrnn.data.vocab import UnknownCharactersError

        model = self.network.config
        if asked.layer_index >= model.num_layers:
            raise ConfigError(f"must be below {model.num_layers}: the model has layers 0 to "
                              f"{model.num_layers - 1}", "layer")
        if asked.unit is not None and asked.unit >= model.hidden_size:
            raise ConfigError(f"must be below {model.hidden_size}: layers have units 0 to "
                              f"{model.hidden_size - 1}", "unit")
        with self.computing():
            try:
                acts = activations(self.network, self.vocab, text, asked.state)
            except UnknownCharactersError as exc:
                raise CharrnnError(f"{exc} in the text to inspect") from None
            ranking = None if asked.rank is None else \
                rank_units(acts, text_feature(text, asked.rank), asked.units_listed)
        values = acts[:, asked.layer_index, asked.unit].tolist() if asked.unit is not None else None
        scale = 1.0 if asked.state == "h" or not values else max(1e-6, max(abs(v) for v in values))
        return Inspection(text, asked.layer_index, asked.unit, asked.state, values, scale, asked.rank,
                          ranking, self.checkpoint)

    def writing(self, prime: str | None = None, *, temperature: float | None = None, seed: int | None = None,
                no_repeat: int | None = None, prime_file: PathArg | None = None, **unused: Any) -> Any:
        """A :class:`~charrnn.generation.writing.WritingSession`: a text after ``prime`` written character by
        character by a person or the model, undoable; other decoding settings than these are refused."""
        return self._writing(*_writing_request(prime, temperature, seed, no_repeat, prime_file, unused))

    def _writing(self, config: SampleConfig, prime: str) -> Any:
        from charrnn.generation.writing import WritingSession

        config = seeded(config)
        return WritingSession(self.network, self.vocab, prime, config.softmax_temperature, config.seed,
                              config.no_repeat)

    def surprisal(self, text: str | None = None, *, file: PathArg | None = None, top: int = SURPRISAL_TOP,
                  skip_unknown: bool = False, max_chars: int | None = None,
                  single_stream: bool = False) -> Surprisal:
        """Each character's surprisal in ``text`` (or ``file``) and the ``top`` guesses there; their mean is
        :meth:`perplexity`'s nats/char. ``max_chars`` reads only the start."""
        return self._surprisal(*_surprising(text, file, top, skip_unknown, max_chars, single_stream))

    def _surprisal(self, whole: str, source: str, top: int, skip_unknown: bool,
                   single_stream: bool) -> Surprisal:
        from charrnn.data.vocab import describe_chars
        from charrnn.models.evaluate import require_scorable

        outside = self.vocab.outside(Counter(whole))
        if outside and not skip_unknown:
            raise CharrnnError(f"the text has characters the model never saw: {describe_chars(outside)}; "
                               f"pass {option('skip_unknown')} to drop them")
        kept = len(whole) - sum(outside.values()) if skip_unknown else len(whole)
        require_scorable(kept, source, skip_unknown and bool(outside))
        return Surprisal(self, whole, top, skip_unknown, single_stream)


@dataclass(frozen=True)
class Surprisal:
    """Per-character surprisal (:meth:`Model.surprisal`): a row per character after the first, per pass."""

    model: Model  # the model that reads the text
    text: str  # the text (at most max_chars of it)
    top: int  # how many guesses each row lists
    skip_unknown: bool  # characters outside the vocabulary are dropped instead of refused
    single_stream: bool = False  # read as one stream (the exact definition) instead of many

    def __iter__(self) -> Iterator[Any]:
        from charrnn.analysis.surprisal import surprisals

        return self.model.paced(surprisals(self.model.network, self.model.vocab, self.text, self.top,
                                           self.skip_unknown, self.single_stream))

    def most_surprising(self, count: int) -> list[Any]:
        """The ``count`` most surprising characters, highest first, each in its context."""
        from charrnn.analysis.surprisal import most_surprising

        return most_surprising(self, self.check_count(count), self.text)

    @staticmethod
    def check_count(count: int) -> int:
        if checked(count, int, "most_surprising") < 1:
            raise ConfigError("must be at least 1", "most_surprising")
        return count

    def to_html(self, title: str | None = None, rows: list[Any] | None = None) -> str:
        """A standalone page of the text shaded by surprisal (``rows``: this text's, if already computed)."""
        from charrnn.analysis.surprisal import surprisal_page

        return surprisal_page(self.text, self if rows is None else rows,
                              title or f"Surprisal under {self.model.checkpoint.name}")


def _known(options: dict[str, Any], config: type) -> dict[str, Any]:
    """``options``, when each is a field of ``config``; an unknown one is refused by name."""
    if unknown := sorted(set(options) - set(config.__dataclass_fields__)):
        raise ConfigTypeError(f"unknown option {unknown[0]!r}; the options are "
                              f"{', '.join(config.__dataclass_fields__)}")
    return options


def _unknown(outside: dict[str, int], skip_unknown: bool) -> dict[str, int]:
    """The characters outside the vocabulary, when they may be skipped; an error naming them otherwise."""
    from charrnn.data.vocab import UnknownCharactersError

    if outside and not skip_unknown:
        raise UnknownCharactersError(outside, f"use {option('skip_unknown')} to score the rest")
    return outside


def load(path: PathArg, device: str = "cpu", threads: int | None = None) -> Model:
    """Load a checkpoint, or a run directory's best.pt, on ``device`` (``auto``: a GPU if any)."""
    return _load(path, device, "path", threads)


def _load(path: PathArg, device: str, name: str, threads: int | None = None) -> Model:
    """:func:`load`, the path named as the caller names it; ``threads`` set before the checkpoint is read."""
    choice = use_threads(threads)
    from charrnn.models.devices import resolve_device
    from charrnn.training.checkpoint import checkpoint_in, load_model

    checkpoint = checkpoint_in(_require_path(path, name), "best.pt")
    loaded = load_model(checkpoint, resolve_device(_one_of(device, DEVICES, "device")))
    return Model(loaded.network, loaded.vocab, loaded.payload, checkpoint,
                 threads=choice.count if choice is not None else None)


DEVICES = ("auto", "cpu", "cuda", "mps")  # auto: cuda when a GPU is present, else cpu


def _one_of(value: Any, choices: Sequence[str], name: str) -> str:
    if checked(value, str, name) not in choices:
        raise ConfigError(f"must be one of {', '.join(choices)}, not {value!r}", name)
    return value


# ------------------------------------------------------- one call per command, checked first


def sample(checkpoint: PathArg, prime: str | None = None, length: int | None = None,
           temperature: float | None = None, *, prime_file: PathArg | None = None, device: str = "cpu",
           threads: int | None = None, **options: Any) -> Samples:
    """``load(checkpoint, device, threads).sample(...)``, every option checked once, before the load."""
    request = _decoding(prime, length, temperature, prime_file, options)
    return _load(checkpoint, device, "checkpoint", threads)._sample(*request)


def stream(checkpoint: PathArg, prime: str | None = None, length: int | None = None,
           temperature: float | None = None, *, prime_file: PathArg | None = None, device: str = "cpu",
           threads: int | None = None, **options: Any) -> SampleStream:
    """``load(checkpoint, device, threads).stream(...)``, every option checked once, before the load."""
    request = _decoding(prime, length, temperature, prime_file, options, stream=True)
    return _load(checkpoint, device, "checkpoint", threads)._stream(*request)


def perplexity(checkpoint: PathArg, text: str | None = None, *, file: PathArg | None = None,
               skip_unknown: bool = False, dynamic: bool | DynamicConfig = False,
               dynamic_lr: float | None = None, dynamic_decay: float | None = None,
               segment_len: int | None = None, single_stream: bool = False,
               device: str = "auto", threads: int | None = None) -> TextScore:
    """``load(checkpoint, device, threads).perplexity(...)``, every option checked once, before the load."""
    request = _scoring(text, file, skip_unknown, dynamic, dynamic_lr, dynamic_decay, segment_len,
                       single_stream)
    return _load(checkpoint, device, "checkpoint", threads)._perplexity(*request)


def inspect(checkpoint: PathArg, text: str | None = None, *, file: PathArg | None = None, device: str = "cpu",
            threads: int | None = None, **options: Any) -> Inspection:
    """``load(checkpoint, device, threads).inspect(...)``, every option checked once, before the load."""
    request = _looking(text, file, options)
    return _load(checkpoint, device, "checkpoint", threads)._inspect(*request)


def writing(checkpoint: PathArg, prime: str | None = None, *, temperature: float | None = None,
            seed: int | None = None, no_repeat: int | None = None, prime_file: PathArg | None = None,
            device: str = "cpu", threads: int | None = None, **unused: Any) -> Any:
    """``load(checkpoint, device, threads).writing(...)``, every option checked once, before the load."""
    request = _writing_request(prime, temperature, seed, no_repeat, prime_file, unused)
    return _load(checkpoint, device, "checkpoint", threads)._writing(*request)


# ----------------------------------------------------------------- whole-checkpoint work


def info(checkpoint: PathArg) -> CheckpointInfo:
    """What a checkpoint (or a run directory's best.pt) holds, without building the model."""
    from charrnn.training.checkpoint import checkpoint_in, describe_checkpoint

    path = checkpoint_in(_require_path(checkpoint, "checkpoint"), "best.pt")
    return CheckpointInfo(path, describe_checkpoint(path))


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint's model, vocabulary, progress, corpus and training options (:func:`info`)."""

    checkpoint: Path  # the file described
    facts: dict[str, Any]  # JSON-ready: format_version, model, parameters, vocab, step, epoch, corpus, ...

    def to_dict(self) -> dict[str, Any]:
        return {"checkpoint": str(self.checkpoint), **self.facts}


@dataclass(frozen=True)
class Comparison:
    """Checkpoints scored and sampled alike (:func:`compare`)."""

    reports: list[Any]  # charrnn.analysis.compare.CheckpointReport, one per checkpoint, in order
    settings: Any  # charrnn.analysis.compare.CompareSettings: prime, decoding, text, reference
    note: str | None  # how the vocabularies differ, when they do
    checkpoints: list[Path]  # the files compared (a run directory stands for its best.pt)

    def to_dict(self) -> list[dict[str, Any]]:
        return [asdict(report) for report in self.reports]

    @property
    def failures(self) -> list[tuple[Path, list[str]]]:
        """Each checkpoint that lacks something asked of it, with what it lacks; its report says why."""
        return [(path, lacking) for path, report in zip(self.checkpoints, self.reports, strict=True)
                if (lacking := report.missing(self.settings))]

    def to_markdown(self) -> str:
        from charrnn.analysis.compare import to_markdown

        return to_markdown(self.reports, self.settings, self.note)


def compare(checkpoints: Sequence[PathArg], *, prime: str | None = None, prime_file: PathArg | None = None,
            length: int = COMPARE_LENGTH, text_file: PathArg | None = None, against: str | None = None,
            dynamic: bool | DynamicConfig = False, dynamic_lr: float | None = None,
            dynamic_decay: float | None = None, segment_len: int | None = None, single_stream: bool = False,
            skip_unknown: bool = False, device: str = "cpu", threads: int | None = None,
            **sampling: Any) -> Comparison:
    """Score every checkpoint (own validation split, or ``text_file``) and sample each alike (seed
    ``COMPARE_SEED`` unless given); ``against`` measures copying. One failure does not stop the rest."""
    if isinstance(checkpoints, str | PathLike):
        raise ConfigTypeError("must be a list of paths, not one path", "checkpoints")
    if not (paths := [_require_path(path, "checkpoints") for path in checkpoints]):
        raise ConfigError("must name at least one checkpoint", "checkpoints")
    for name in ("num_samples", "min_length", "length_penalty"):
        if name in sampling:
            raise OptionConflict(f"compare draws one text per checkpoint: {option(name)} does not apply")
    decoding, prime_text = _decoding(prime, length, sampling.pop("temperature", None), prime_file, sampling)
    if decoding.seed is None and not decoding.deterministic:
        decoding = SampleConfig(**{**decoding.to_dict(), "seed": COMPARE_SEED})
    settings_dynamic = dynamic_settings(dynamic, dynamic_lr, dynamic_decay, segment_len)
    checked(single_stream, bool, "single_stream")
    checked(skip_unknown, bool, "skip_unknown")
    check_threads(threads)
    if skip_unknown and text_file is None:
        raise OptionConflict(f"{option('skip_unknown')} goes with {option('text_file')}: each validation "
                             f"split holds only its own model's characters")
    if against is not None and not isinstance(against, str | PathLike):
        raise ConfigTypeError(f"must be 'train' or a path, not {type(against).__name__}", "against")
    text_path = _text_file(text_file, "text_file")
    from charrnn.analysis.compare import TRAINING_SPLIT, CompareSettings, compare_checkpoints
    from charrnn.models.devices import resolve_device
    from charrnn.training.checkpoint import checkpoint_in

    text = _read_text(text_path) if text_path is not None else None
    if against is not None and str(against) != TRAINING_SPLIT:
        # A missing or unreadable reference fails now, not per checkpoint.
        _read_text(_text_file(against, "against"))
    settings = CompareSettings(prime=prime_text, sample=decoding, text=text, text_name=_plain(text_path),
                               against=_plain(against), dynamic=settings_dynamic, single_stream=single_stream,
                               skip_unknown=skip_unknown)
    resolved = [checkpoint_in(path, "best.pt") for path in paths]
    use_threads(threads)
    device = resolve_device(_one_of(device, DEVICES, "device"))
    reports, note = compare_checkpoints(resolved, settings, device)
    return Comparison(reports, settings, note, resolved)


@dataclass(frozen=True)
class Evolution:
    """The samples a run recorded while training (:func:`evolution`), oldest first."""

    run_dir: Path  # the run directory read
    rows: list[Any]  # charrnn.training.rundir.SampleRecord: step, epoch, seconds, val_loss, prime, text...

    def to_dict(self) -> dict[str, Any]:
        return {"run_dir": str(self.run_dir), "samples": [asdict(row) for row in self.rows]}

    def to_markdown(self) -> str:
        """A table of step, epoch, validation loss and text, escaped for Markdown."""
        lines = [f"# Samples while training: {markdown_text(str(self.run_dir.name or self.run_dir))}", "",
                 f"{EVOLUTION_VAL_NOTE}.", "",
                 "| step | epoch | val nats/char | sample |", "|---:|---:|---:|---|"]
        for row in self.rows:
            loss = "" if row.val_loss is None else f"{row.val_loss:.4f}"
            lines.append(f"| {row.step:,} | {row.epoch:g} | {loss} | {markdown_text(row.prime + row.text)} |")
        return "\n".join(lines) + "\n"


# The samples are drawn from the weights being trained, so their scores are those weights' own.
EVOLUTION_VAL_NOTE = ("val nats/char: the validation score of the weights that wrote the sample, the trained "
                      "ones; best.pt may hold their average, which scores apart")


def evolution(run_dir: PathArg, **unused: Any) -> Evolution:
    """The samples ``run_dir`` recorded while training, with validation losses; compare's settings refused."""
    if unused:
        raise OptionConflict(f"the evolution shows the samples recorded while training: "
                             f"{option(sorted(unused)[0])} does not apply")
    directory = _require_path(run_dir, "run_dir")
    if not directory.is_dir():
        raise CharrnnError(f"{directory} is not a run directory")
    from charrnn.training.rundir import read_samples

    return Evolution(directory, read_samples(directory))


def surprisal(checkpoint: PathArg, text: str | None = None, *, file: PathArg | None = None,
              top: int = SURPRISAL_TOP, skip_unknown: bool = False, max_chars: int | None = None,
              single_stream: bool = False, device: str = "cpu", threads: int | None = None,
              **unused: Any) -> Surprisal:
    """``load(checkpoint, device, threads).surprisal(...)``; :func:`inspect`'s unit settings are refused."""
    if unused:
        raise OptionConflict(f"surprisal scores every character: {option(sorted(unused)[0])} does not apply")
    request = _surprising(text, file, top, skip_unknown, max_chars, single_stream)
    return _load(checkpoint, device, "checkpoint", threads)._surprisal(*request)


@dataclass(frozen=True)
class Exported:
    """A model written by :func:`export`: a web page, or a model folder."""

    path: Path  # the page or the folder written
    format: str  # page or safetensors
    size: int  # the page's bytes, or the folder's weights file's
    parameters: int  # the model's parameters
    encoding: str  # how the weights are stored
    checkpoint: Path  # the checkpoint exported

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path), "checkpoint": str(self.checkpoint)}


def export(checkpoint: PathArg, output: PathArg, *, format: str = "page", title: str | None = None,
           prime: str = "", float32: bool = False, threads: int | None = None) -> Exported:
    """Write ``checkpoint``'s model as one self-contained HTML page that generates text in a browser, or
    with ``format="safetensors"`` as a model folder (``float32``: float32 weights)."""
    _one_of(format, EXPORT_FORMATS, "format")
    if title is not None:
        require_valid_text(checked(title, str, "title"), "title")
    require_valid_text(checked(prime, str, "prime"), "prime")
    checked(float32, bool, "float32")
    check_threads(threads)
    page_only = [name for name, given in (("title", title is not None), ("prime", prime != "")) if given]
    if format == "safetensors" and page_only:
        raise OptionConflict(f"{option(page_only[0])} is the page's: a model folder has no "
                             f"{'title' if page_only[0] == 'title' else 'prime box'}")
    if format == "page" and float32:
        raise OptionConflict(f"{option('float32')} is a model folder's: the page always stores float32")
    folder = format == "safetensors"
    if folder:  # every refusal made before the checkpoint is loaded
        from charrnn.training.checkpoint import check_folder_output, weights_dtype, write_model_folder

        target = _require_path(output, "output")
        check_folder_output(target, option("output"),
                            resolve_shipped(_require_path(checkpoint, "checkpoint")))
    else:
        target = check_output(output, "output", {"checkpoint": checkpoint})
    model = _load(checkpoint, "cpu", "checkpoint", threads)
    name = run_name(model.checkpoint) or model.checkpoint.stem
    if folder:
        size = write_model_folder(model.payload, model.checkpoint, target, name, float32)
        encoding = f"{'float32' if float32 else weights_dtype(model.payload['model_state'])} safetensors"
    else:
        from charrnn.generation.webpage import ENCODING, export_page
        from charrnn.utils.files import atomic_write_text

        if unknown := model.vocab.outside(Counter(prime)):
            raise CharrnnError(f"the prime has characters the model never saw: "
                               f"{', '.join(map(repr, unknown))}")
        shape = model.network.config
        about = (f"A character-level {shape.num_layers}×{shape.hidden_size} {shape.cell.upper()} trained for "
                 f"{model.payload.get('step', 0):,} steps, generating text in this page.")
        page = export_page(model.network, model.vocab, title or f"charrnn: {one_line(name)}", about, prime)
        atomic_write_text(target, page)
        size, encoding = len(page.encode("utf-8")), ENCODING
    parameters = sum(p.numel() for p in model.network.parameters())
    return Exported(target, format, size, parameters, encoding, model.checkpoint)


def plot(run_dirs: Sequence[PathArg], output: PathArg = "curves.png") -> Path:
    """Draw the loss curves of ``run_dirs`` into ``output`` (suffix: format); needs matplotlib."""
    if isinstance(run_dirs, str | PathLike):
        raise ConfigTypeError("must be a list of run directories, not one path", "run_dirs")
    if not (directories := [_require_path(path, "run_dirs") for path in run_dirs]):
        raise ConfigError("must name at least one run directory", "run_dirs")
    target = check_output(output, "output", {"run_dirs": directories})
    from charrnn.analysis.plot import plot_runs

    plot_runs(directories, target)
    return target


def get_dataset(name: str = DEFAULT_DATASET, data_dir: PathArg | None = None, force: bool = False) -> Dataset:
    """Fetch and verify ``name`` in ``data_dir`` ($CHARRNN_DATA_DIR or ./data); ``force`` sets one aside."""
    _one_of(name, sorted(DATASETS), "name")
    checked(force, bool, "force")
    return fetch(name, _path(data_dir, "data_dir"), force)


# ---------------------------------------------------------------------------- training


def end_torchrun_worker(exit_code: int) -> None:
    """Under torchrun with several processes, end this one at once with ``exit_code``; otherwise return."""
    if os.environ.get("WORLD_SIZE", "1") == "1":  # checked first: plain commands never import torch here
        return
    from charrnn.training.distributed import end_process, world_size_from_environment

    if world_size_from_environment() > 1:
        end_process(exit_code)


def train(corpus: PathArg | None = None, *, out_dir: PathArg | None = None, overwrite: bool = False,
          resume: PathArg | None = None, init_from: PathArg | None = None, extend_vocab: bool = False,
          device: str = "auto", threads: int | None = None, data_dir: PathArg | None = None,
          observer: TrainObserver | None = None, started: float | None = None, finish_s: float = 0.0,
          **options: Any) -> TrainResult:
    """Train on ``corpus`` (default: tiny Shakespeare); ``options``: ModelConfig and TrainConfig fields. A
    time budget counts from ``started`` (a perf_counter reading), keeping ``finish_s`` for the caller.
    Ctrl-C saves last.pt and raises ``TrainingInterrupted``. Under torchrun every process calls this."""
    from charrnn.config import TrainingRequest

    # A time budget counts from here: loading and planning are inside it.
    called = time.perf_counter()
    if started is not None:
        if checked(started, float, "started") > called:  # checked: a finite number
            raise ConfigError("must be an earlier time.perf_counter() reading", "started")
        called = started
    if checked(finish_s, float, "finish_s") < 0:
        raise ConfigError("must be 0 or more seconds", "finish_s")
    request = TrainingRequest(
        corpus=_path(corpus, "corpus"), options=options, out_dir=_path(out_dir, "out_dir"),
        overwrite=checked(overwrite, bool, "overwrite"), resume=_path(resume, "resume"),
        init_from=_path(init_from, "init_from"), extend_vocab=checked(extend_vocab, bool, "extend_vocab"),
        device=_one_of(device, DEVICES, "device"), data_dir=_path(data_dir, "data_dir"), threads=threads,
    )  # every option checked as it is made, before torch, a download, a checkpoint or a corpus
    for what in ("resume", "init_from", "corpus"):
        given = getattr(request, what)
        if given is not None and what != "corpus":
            given = resolve_shipped(given)
        if given is not None and not os.path.lexists(given):  # a broken link is reported where it is read
            hint = " (shakespeare names the model that comes with charrnn)" if what == "init_from" else ""
            raise CharrnnError(f"{option(what)} {given} does not exist{hint}")
    if observer is not None and not isinstance(observer, TrainObserver):
        raise ConfigTypeError(f"must be a charrnn.api.TrainObserver, not {type(observer).__name__}",
                              "observer")

    from charrnn.models.devices import resolve_device
    from charrnn.training.distributed import join_from_environment, leave, local_processes
    from charrnn.training.plan import plan_training, read_sources
    from charrnn.utils.interrupt import GracefulStop

    observer = observer if observer is not None else TrainObserver()
    group, request.device = join_from_environment(resolve_device(request.device))
    threads = use_threads(request.threads, processes=local_processes(group))
    say = observer.on_message if group.is_main else lambda text: None
    try:
        if group.world_size > 1:
            say(f"training with {group.world_size} processes (DistributedDataParallel, "
                f"{'nccl' if request.device.startswith('cuda') else 'gloo'})")
        sources = read_sources(request)
        for given, found in ((request.resume, sources.resume), (request.init_from, sources.init_from)):
            if given is not None and found != given:
                say(f"using {found}")
        plan = plan_training(request, group, called, finish_s, sources, threads, say)
        if group.is_main:
            observer.on_plan(plan)
        with GracefulStop() as stop:
            result = plan.run(observer, stop, group)
    finally:
        leave(group)
    return result


