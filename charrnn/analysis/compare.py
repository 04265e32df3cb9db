"""Side-by-side comparison of checkpoints: the textbook's 5 / 50 / 500-epoch experiment.

Each is scored and sampled with the same prime, seed and decoding, so differences come from the weights alone.
A problem of one checkpoint (a prime character it never saw) goes in its entry and stops nothing."""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from charrnn.analysis.dynamic import checkpoint_dynamic_score
from charrnn.analysis.memorisation import Reference, measure
from charrnn.config import COPY_MIN_CHARS, DynamicConfig, SampleConfig
from charrnn.data.corpus import checkpoint_validation_ids, corpus_path, read_corpus
from charrnn.data.vocab import UnknownCharactersError
from charrnn.errors import CharrnnError, option
from charrnn.generation.trained import TrainedModel
from charrnn.models.evaluate import require_scorable
from charrnn.models.pretrained import run_name
from charrnn.training.checkpoint import load_model
from charrnn.utils.terminal import checkpoint_labels, format_epoch, format_score, markdown_text, shown


@dataclass(frozen=True)
class CompareSettings:
    prime: str  # every sample starts from this text
    sample: SampleConfig  # length, temperature, seed, beam width, ... shared by all checkpoints
    text: str | None = None  # score this text instead of each checkpoint's validation split
    text_name: str | None = None  # where ``text`` came from, for the report
    against: str | None = None  # memorisation reference: TRAINING_SPLIT, a file's path, or None for none
    dynamic: DynamicConfig | None = None  # also score by dynamic evaluation, with these settings
    single_stream: bool = False  # score as one stream (the exact definition) instead of many
    skip_unknown: bool = False  # drop characters of ``text`` outside a checkpoint's vocabulary


@dataclass(frozen=True)
class CheckpointReport:
    checkpoint: str  # path as given
    run: str  # the run directory's name
    epoch: float | None  # passes over the training split when it was saved
    step: int | None  # optimiser steps when it was saved
    vocab_size: int  # symbols in its vocabulary
    scored_on: str  # "validation split" or the shared text's name
    nats_per_char: float | None  # None when it could not be scored (see error)
    bits_per_char: float | None
    perplexity: float | None
    chars: int | None  # characters scored
    sample: str | None  # prime + generated text; None when it could not be sampled
    log_prob: float | None  # total log-probability of the beam (beam search only)
    error: str | None  # why a score or sample is missing
    memorisation: dict[str, Any] | None = None  # asdict(Memorisation) of the generated text, if asked
    against: str | None = None  # what the memorisation figures were measured against
    dynamic: dict[str, Any] | None = None  # EvalResult.to_dict() of dynamic evaluation, if asked

    def missing(self, settings: CompareSettings) -> list[str]:
        """What was asked of this checkpoint and is not in its report."""
        wanted = {"score": self.nats_per_char, "sample": self.sample}
        if settings.dynamic is not None:
            wanted["dynamic score"] = self.dynamic
        if settings.against is not None:
            wanted["memorisation figures"] = self.memorisation
        return [what for what, value in wanted.items() if value is None]


def _score(loaded: TrainedModel, settings: CompareSettings
           ) -> tuple[dict[str, Any], str | None, torch.Tensor | None]:
    """The scores on the shared text or the validation split, a note when they are those stored at training
    time (the corpus gone or changed) rather than measured, and the ids measured on (None then)."""
    if settings.text is not None:
        try:
            ids = loaded.vocab.encode(settings.text, skip_unknown=settings.skip_unknown)
        except UnknownCharactersError as exc:
            raise UnknownCharactersError(exc.unknown, f"{option('skip_unknown')} drops them") from None
        dropped = settings.skip_unknown and len(ids) < len(settings.text)
        require_scorable(len(ids), f"the {option('text_file')} text", dropped)
        return loaded.score(ids, settings.single_stream).to_dict(), None, ids
    try:
        ids = checkpoint_validation_ids(loaded.payload.get("corpus"), loaded.vocab)
        return loaded.score(ids, settings.single_stream).to_dict(), None, ids
    except CharrnnError as exc:
        from charrnn.training.checkpoint import weights_score

        stored = weights_score(loaded.payload, loaded.checkpoint) or loaded.payload.get("latest_eval")
        if stored is None:
            raise CharrnnError(f"{exc}; give {option('text_file')} FILE to score every checkpoint on one "
                               f"text") from None
        step = stored.get("step", loaded.payload.get("step"))
        when = "" if step == loaded.payload.get("step") else f", from step {step:,}"
        scores = {key: stored[key] for key in ("nats_per_char", "bits_per_char", "perplexity", "chars")}
        return scores, f"validation score stored at training time{when} (the corpus cannot be re-read)", None


TRAINING_SPLIT = "train"  # --against value meaning each checkpoint's own training split


class References:
    """Memorisation references, read and indexed once however many checkpoints share them."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], tuple[Reference, str]] = {}

    def for_checkpoint(self, loaded: TrainedModel, against: str) -> tuple[Reference, str]:
        """The reference ``against`` names for this checkpoint, and a name for it in reports."""
        if against != TRAINING_SPLIT:
            key = ("file", against)
            if key not in self._cache:
                self._cache[key] = (Reference(read_corpus(Path(against))), against)
            return self._cache[key]
        if (corpus := loaded.payload.get("corpus")) is None:
            raise CharrnnError(f"the checkpoint records no training corpus; give {option('against')} FILE")
        key = ("train", corpus["sha256"])
        if key not in self._cache:
            try:
                path = corpus_path(corpus)
            except CharrnnError as exc:
                raise CharrnnError(f"{exc}; give {option('against')} FILE") from None
            text = read_corpus(path)
            # The recorded hash is of the corpus's UTF-8 bytes: the text just read, encoded again.
            if hashlib.sha256(text.encode("utf-8")).hexdigest() != corpus["sha256"]:
                raise CharrnnError(f"the training corpus {path} has changed since training; give "
                                   f"{option('against')} FILE")
            self._cache[key] = (Reference(text[: corpus["split_point"]]), f"training split of {path}")
        return self._cache[key]


def compare_checkpoint(loaded: TrainedModel, path: Path, settings: CompareSettings,
                       references: References | None = None) -> CheckpointReport:
    """Score and sample one loaded checkpoint; problems are reported in the entry, not raised."""
    payload = loaded.payload
    errors = []
    score: dict[str, Any] = {"nats_per_char": None, "bits_per_char": None, "perplexity": None, "chars": None}
    ids = None
    try:
        score, stored_note, ids = _score(loaded, settings)
        if stored_note:
            errors.append(stored_note)
    except CharrnnError as exc:
        errors.append(f"not scored: {exc}")
    dynamic = None
    if settings.dynamic is not None and ids is not None:
        try:
            dynamic = checkpoint_dynamic_score(loaded, ids, settings.dynamic).to_dict()
        except CharrnnError as exc:
            errors.append(f"no dynamic score: {exc}")
    sample, log_prob = None, None
    try:
        written = loaded.write(settings.prime, settings.sample)
        sample = settings.prime + written.texts[0]
        log_prob = None if written.log_probs is None else written.log_probs[0]
    except CharrnnError as exc:
        errors.append(f"no sample: {exc}")
    memorisation, against = None, None
    if settings.against is not None and sample is not None:
        try:
            reference, against = (references or References()).for_checkpoint(loaded, settings.against)
            memorisation = asdict(measure(sample[len(settings.prime):], reference))
        except CharrnnError as exc:
            errors.append(f"no memorisation figures: {exc}")
    return CheckpointReport(
        checkpoint=str(path), run=run_name(Path(path)), step=payload.get("step"),
        epoch=payload.get("progress_epochs", payload.get("epoch")), vocab_size=len(loaded.vocab),
        scored_on=settings.text_name or "validation split", sample=sample, log_prob=log_prob,
        error="; ".join(errors) or None, memorisation=memorisation, against=against, dynamic=dynamic, **score)


def vocabulary_note(reports: list[CheckpointReport], vocabularies: list[tuple[str, ...]]) -> str | None:
    """A sentence saying how vocabularies differ, or None when they are all the same."""
    if len(set(vocabularies)) <= 1:
        return None
    union = set().union(*vocabularies)
    parts = []
    for label, vocab in zip(checkpoint_labels(reports), vocabularies, strict=True):
        missing = sorted(union - set(vocab))
        shown = "".join(missing[:12]) + ("…" if len(missing) > 12 else "")
        parts.append(f"{label}: {len(vocab)} symbols"
                     + (f", lacks {len(missing)} ({shown!r})" if missing else ""))
    return "the checkpoints have different vocabularies: " + "; ".join(parts)


def compare_checkpoints(paths: list[Path], settings: CompareSettings,
                        device: str = "cpu") -> tuple[list[CheckpointReport], str | None]:
    """Reports in the order given, a note when vocabularies differ; all load first: a bad path fails now."""
    loaded = [load_model(path, device) for path in paths]
    references = References()
    reports = [compare_checkpoint(model, path, settings, references)
               for model, path in zip(loaded, paths, strict=True)]
    return reports, vocabulary_note(reports, [model.vocab.chars for model in loaded])


def _fenced(text: str) -> list[str]:
    """``text`` as a Markdown code block, its fence longer than any run of backticks inside it."""
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return [f"{fence}text", text, fence]


def describe_decoding(settings: CompareSettings) -> str:
    """How the samples were drawn, in words: beam search, greedy, or the sampling settings."""
    sample = settings.sample
    if sample.beam_width is not None:
        return f"beam search, width {sample.beam_width}"
    if sample.greedy:
        return "greedy"
    parts = [f"temperature {sample.softmax_temperature:g}"]
    parts += [f"top-k {sample.top_k}"] if sample.top_k is not None else []
    parts += [f"top-p {sample.top_p:g}"] if sample.top_p is not None else []
    return ", ".join([*parts, f"seed {sample.seed}"])


def _memorisation_cells(figures: dict[str, Any] | None) -> str:
    if figures is None:
        return " n/a | n/a | n/a |"
    known = figures["known_word_fraction"]
    known_text = "n/a" if known is None else f"{known:.1%}"
    line = f" (line {figures['longest_copied_line']:,})" if figures["longest_copied_line"] else ""
    return f" {known_text} | {figures['longest_copied_chars']}{line} | {figures['copied_fraction']:.1%} |"


def to_markdown(reports: list[CheckpointReport], settings: CompareSettings, note: str | None) -> str:
    """The comparison as a Markdown document: a table of scores, then each sample."""
    decoding = describe_decoding(settings)
    lines = ["# Checkpoint comparison", "",
             f"Prime {markdown_text(repr(settings.prime))}, {settings.sample.length} characters, {decoding}; "
             f"scored on {markdown_text(reports[0].scored_on if reports else 'validation split')}.", ""]
    if note:
        lines += [f"Note: {markdown_text(note)}.", ""]
    header = "| checkpoint | run | epoch | steps | nats/char | bits/char | perplexity | chars scored |"
    rule = "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    if (dynamic := settings.dynamic) is not None:
        lines += [f"Dynamic evaluation: lr {dynamic.learning_rate:g}, decay {dynamic.decay:g}, "
                  f"segments of {dynamic.segment_len}.", ""]
        header, rule = header + " dynamic nats/char |", rule + " ---: |"
    if memorised := any(r.memorisation is not None for r in reports):
        references = list(dict.fromkeys(r.against for r in reports if r.against))
        against = references[0] if len(references) == 1 else "each checkpoint's own training split"
        the = "the " if against.startswith("training split") else ""
        lines += [f"Memorisation measured against {the}{markdown_text(against)}.", ""]
        header += f" known words | longest copy (chars) | copied (runs ≥ {COPY_MIN_CHARS}) |"
        rule += " ---: | ---: | ---: |"
    lines += [header, rule]
    labels = checkpoint_labels(reports)
    for r, label in zip(reports, labels, strict=True):
        cells = " | ".join([format_epoch(r.epoch), str(r.step), format_score(r.nats_per_char),
                            format_score(r.bits_per_char), format_score(r.perplexity, 3),
                            "n/a" if r.chars is None else f"{r.chars:,}"])
        row = f"| {markdown_text(label)} | {markdown_text(r.run)} | {cells} |"
        if dynamic is not None:
            row += f" {format_score(r.dynamic['nats_per_char'] if r.dynamic else None)} |"
        if memorised:
            row += _memorisation_cells(r.memorisation)
        lines.append(row)
    for r, label in zip(reports, labels, strict=True):
        lines += ["", f"## {markdown_text(label)}", ""]
        if r.error:
            lines += [f"*{markdown_text(r.error)}*", ""]
        if r.sample is not None:
            lines += _fenced(shown(r.sample))
        if r.memorisation is not None and r.memorisation["longest_copied_chars"]:
            passage = shown(r.memorisation["longest_copied_passage"])
            lines += ["", f"Longest copied passage, {len(passage)} characters, from line "
                          f"{r.memorisation['longest_copied_line']:,} of the reference:", "",
                      *_fenced(passage)]
    return "\n".join(lines) + "\n"
