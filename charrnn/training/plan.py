"""What a run will be, decided and checked before anything is trained or written (what cannot run is refused):
:func:`plan_training` makes the one complete :class:`TrainingPlan` every caller gets, unchanged after."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from charrnn.config import (
    REGULARISATION_FIELDS,
    SAMPLE_SETTINGS,
    ModelConfig,
    TrainConfig,
    TrainingRequest,
    partial_eval_chars,
    split_options,
)
from charrnn.data.corpus import CorpusInfo, Split, StreamBatches, corpus_name, encode_corpus, split_ids
from charrnn.data.datasets import DEFAULT_DATASET, dataset_path, fetch
from charrnn.data.vocab import UnknownCharactersError, Vocab, describe_chars
from charrnn.errors import CharrnnError, OptionConflict, TrainingInterrupted, option, options_spelled
from charrnn.generation.trained import TrainedModel
from charrnn.models.devices import (
    check_generation_fits,
    check_model_fits,
    precision_warning,
    resolve_precision,
)
from charrnn.models.evaluate import EvalResult
from charrnn.training.budget import BudgetDecision, plan_budget, plan_budget_end
from charrnn.training.checkpoint import RESUME_FIELDS, checkpoint_in, load_checkpoint, load_model
from charrnn.training.distributed import ProcessGroup
from charrnn.training.loop import TrainingLoop
from charrnn.training.observer import TrainObserver
from charrnn.training.rundir import (
    RunDirectory,
    belongs_to,
    check_out_dir,
    checkpoint_bytes,
    held_run_directory,
    resume_checkpoint,
    resume_target,
)
from charrnn.training.schedule import (
    BudgetEnding,
    RunAlreadyFinished,
    Schedule,
    StopReason,
    planned_steps,
    schedule_warnings,
    stop_reason,
)
from charrnn.training.state import TrainingRun, check_resumable
from charrnn.utils.files import read_json_object
from charrnn.utils.hardware import ThreadChoice
from charrnn.utils.interrupt import GracefulStop

# What a resumed run may change; anything else would not fit the checkpoint's weights or place in the data.
RESUME_MAY_CHANGE = ("epochs", "max_steps", "time_budget", "learning_rate", "muon_lr", "min_lr_ratio",
                     "warmup_steps", "clip", "clip_mode", "max_bad_steps", "save_epochs", "eval_every",
                     "save_every", "device", "precision", "sample_every", *SAMPLE_SETTINGS)


@dataclass(frozen=True)
class Sources:
    """The checkpoint a request continues or fine-tunes from, found and loaded once (:func:`read_sources`)."""

    resume: Path | None = None  # the checkpoint a resumed run continues
    resume_payload: dict[str, Any] | None = None  # its contents
    init_from: Path | None = None  # the checkpoint a fine-tune starts from
    init_model: TrainedModel | None = None  # its model


def read_sources(request: TrainingRequest) -> Sources:
    """Load, once per request, the checkpoint ``request`` resumes (its newest state) or fine-tunes from."""
    if request.resume is not None:
        path = resume_checkpoint(request.resume)
        return Sources(resume=path, resume_payload=load_checkpoint(path))
    if request.init_from is not None:
        path = checkpoint_in(request.init_from, "best.pt")
        return Sources(init_from=path, init_model=load_model(path))
    return Sources()


@dataclass(frozen=True)
class FineTuneFacts:
    """Where a fine-tune starts, for the user."""

    checkpoint: Path  # the checkpoint whose weights it starts from
    vocab_before: int  # that checkpoint's vocabulary size (the run's is larger with extend_vocab)
    model_before: ModelConfig  # that checkpoint's model (the run may change its regularisation)


@dataclass(frozen=True)
class ResumeFacts:
    """What continuing a checkpoint means for this run."""

    checkpoint: Path  # the checkpoint continued
    step: int  # its step
    epoch: float  # its fractional epoch
    changes: list[tuple[str, Any, Any]]  # (field, saved value, new value) for each option changed
    branch: bool  # True: the run continues in a new directory (out_dir), leaving the original as it is


@dataclass
class TrainResult:
    """What a run did (:func:`charrnn.api.train`); ``to_dict()`` is ``charrnn train --json``."""

    out_dir: Path  # where checkpoints and logs were written
    steps: int  # optimiser steps done
    epoch: float  # passes over the training split done
    best: EvalResult  # the evaluation that produced best.pt (the lowest validation loss)
    best_is_average: bool  # whether best.pt holds the averaged weights (TrainConfig.ema_decay)
    elapsed_s: float  # wall time of the loop, evaluations included
    stop_reason: StopReason  # which criterion ended the run
    skipped_steps: int  # steps skipped for non-finite values
    epoch_checkpoints: list[Path]  # the save_epochs checkpoints this call wrote
    model_config: ModelConfig | None = None  # the model trained
    config: TrainConfig | None = None  # how it was trained, every default and budget choice filled in
    budget: Any = None  # charrnn.training.plan.BudgetDecision: what a time budget chose, if one was given
    earlier_budget: dict[str, Any] | None = None  # a resumed run's budget, as config.json has it
    rank: int = 0  # this process's rank under torchrun; rank 0 alone wrote the run and reports it
    threads: ThreadChoice | None = None  # the CPU threads it ran with, and why (None: torch's own)
    trained_s: float | None = None  # elapsed_s when training stopped, before the final evaluation and saves
    earlier_s: float = 0.0  # of elapsed_s, the wall time of a resumed run's earlier sessions

    def to_dict(self) -> dict[str, Any]:
        with options_spelled(str):  # a record reads the same from either door
            stopped = str(self.stop_reason)
        return {"stopped": stopped, "steps": self.steps, "epoch": self.epoch, "elapsed_s": self.elapsed_s,
                "trained_s": self.trained_s, "earlier_s": self.earlier_s, "best": self.best.to_dict(),
                "best_is_average": self.best_is_average, "skipped_steps": self.skipped_steps,
                "out_dir": str(self.out_dir), "best_checkpoint": str(self.out_dir / "best.pt"),
                "last_checkpoint": str(self.out_dir / "last.pt"),
                "epoch_checkpoints": [str(path) for path in self.epoch_checkpoints],
                "model": None if self.model_config is None else self.model_config.to_dict(),
                "training": None if self.config is None else self.config.to_dict(),
                "budget": self.earlier_budget if self.budget is None else self.budget.to_dict(),
                "threads": None if self.threads is None else asdict(self.threads)}


@dataclass
class TrainingPlan:
    """A complete, checked run: :meth:`run` trains it."""

    model_config: ModelConfig
    config: TrainConfig
    vocab: Vocab
    ids: torch.Tensor  # (N,) the encoded corpus
    corpus: CorpusInfo
    overwrite: bool = False  # an existing run in config.out_dir may be replaced
    resume_from: dict[str, Any] | None = None  # the checkpoint payload a resumed run continues
    resume: ResumeFacts | None = None  # what resuming means, for the user
    branch_from: Path | None = None  # a branch: the checkpoint's own run, whose logs it starts with
    initial_weights: dict[str, torch.Tensor] | None = None  # a fine-tuned run's starting weights
    fine_tune: FineTuneFacts | None = None  # where a fine-tune starts, for the user
    budget: BudgetDecision | None = None  # what the time budget chose, when one was given
    earlier_budget: dict[str, Any] | None = None  # a resumed run's: what its budget weighed (config.json)
    ending: BudgetEnding | None = None  # a time budget's end, and its evaluations during training
    threads: ThreadChoice | None = None  # the CPU threads it runs with, and why (None: torch's default)
    started: float | None = None  # when training was asked for (a time.perf_counter() reading; None: at run)

    @property
    def precision(self) -> str:
        """What ``config.precision`` resolves to on its device for this model: fp32 or bf16."""
        return resolve_precision(self.config.precision, self.config.device, self.model_config)

    @property
    def branches(self) -> bool:
        """Whether it resumes into a new run of its own (a branch), with a new run id and best."""
        return self.resume is not None and self.resume.branch

    def run(self, observer: TrainObserver | None = None, stop: GracefulStop | None = None,
            group: ProcessGroup | None = None, clock: Callable[[], float] = time.perf_counter) -> TrainResult:
        """Train this plan into ``config.out_dir`` (a :class:`TrainingLoop`); on a signal from ``stop`` the
        step finishes, ``last.pt`` is written and TrainingInterrupted raised. Every torchrun rank calls it."""
        config, resume_from = self.config, self.resume_from
        group = group if group is not None else ProcessGroup()
        observer = observer if observer is not None and group.is_main else TrainObserver()
        out_dir = Path(config.out_dir)
        split = split_ids(self.ids, self.corpus.split_point)
        # The ids stay in host memory (memory-mapped from the corpus cache); each step moves one batch.
        batches = StreamBatches(split.train, config.batch_size, config.seq_len)
        with held_run_directory(out_dir, self.overwrite or resume_from is not None, writer=group.is_main):
            run = TrainingRun(self.model_config, config, self.vocab, self.corpus, batches,
                              self.initial_weights, group)
            if resume_from is not None:
                run.restore(resume_from)
            if self.branches:
                run.run_id, run.best = uuid.uuid4().hex, None
            run_dir = self._open_run_directory(run) if group.is_main else None
            steps = planned_steps(config, len(batches))
            for message in (*schedule_warnings(config, len(batches), steps),
                            precision_warning(config.precision, self.model_config)):
                if message:
                    observer.on_message(message)
            observer.on_start(run.model, self.model_config, config, self.corpus, len(batches), steps,
                              run.step)
            for message in self.ending.messages if self.ending is not None else ():
                observer.on_message(message)
            begun = clock() if self.started is None else self.started
            start = begun - (resume_from["elapsed_s"] if resume_from else 0.0)
            loop = TrainingLoop(run, split.val, observer, stop, run_dir, Schedule(config, self.ending), start,
                                clock, self.threads)
            try:
                reason, trained_s, elapsed_s = loop.run_until_stopped()
            except BaseException:
                observer.on_end(completed=False)
                raise
            observer.on_end(completed=not reason.interrupted)
        if reason.interrupted:
            raise TrainingInterrupted(reason.signal_name, out_dir / "last.pt", run.step, loop.trained_out)
        best, best_is_average = group.from_main((run.best, run.best_is_average))
        return TrainResult(
            out_dir=out_dir, steps=run.step, epoch=run.epoch, best=best, best_is_average=best_is_average,
            elapsed_s=elapsed_s, trained_s=trained_s, skipped_steps=run.skipped, config=config,
            stop_reason=reason, epoch_checkpoints=run_dir.epoch_checkpoints() if run_dir is not None else [],
            model_config=self.model_config, budget=self.budget, earlier_budget=self.earlier_budget,
            rank=group.rank, threads=self.threads,
            earlier_s=resume_from["elapsed_s"] if resume_from else 0.0)

    def _open_run_directory(self, run: TrainingRun) -> RunDirectory:
        """The run directory, with its config.json: fresh for a new run or a branch, else continued."""
        parameters = sum(p.numel() for p in run.model.parameters())
        budget = self.earlier_budget if self.budget is None else self.budget.to_dict()
        return RunDirectory(Path(self.config.out_dir), {
            "run_id": run.run_id, "model": self.model_config.to_dict(), "train": self.config.to_dict(),
            "corpus": self.corpus.to_dict(), "world_size": run.group.world_size, "budget": budget,
        }, fresh=self.resume_from is None or self.branches, branch_from=self.branch_from,
            resumed_at=self.resume_from["step"] if self.resume_from is not None else None,
            space_needed=3 * checkpoint_bytes(parameters, averaging=run.average is not None))


def plan_training(request: TrainingRequest, group: ProcessGroup | None = None, started: float | None = None,
                  finish_s: float = 0.0, sources: Sources | None = None, threads: ThreadChoice | None = None,
                  say: Callable[[str], None] = lambda message: None) -> TrainingPlan:
    """Decide the run ``request`` asks for whole, writing nothing; a time budget runs from ``started``
    (perf_counter), keeping ``finish_s`` for the caller; ranks take rank 0's figures; ``say``: downloads."""
    group = group if group is not None else ProcessGroup()
    sources = sources if sources is not None else read_sources(request)
    decided = _decide(request, sources, group, started, finish_s, say)
    config, model_config, vocab = decided["config"], decided["model_config"], decided["vocab"]
    if "muon_lr" in request.options and config.optimizer != "muon":  # a resume's optimiser is the run's
        raise OptionConflict(f"{option('muon_lr')} is Muon's rate: it goes with {option('optimizer')} muon")
    # Refused before any write or measurement: a validation split too short to score, a model or a recorded
    # sample too large for memory, a sample prime the model cannot read, a corpus too short for one batch.
    split = _scorable_split(decided["ids"], decided["corpus"])
    check_model_fits(model_config, config.device, config.batch_size, config.seq_len)
    try:
        vocab.encode(config.sample_prime)
    except UnknownCharactersError as exc:
        raise CharrnnError(f"{option('sample_prime')} has characters the corpus does not: "
                           f"{describe_chars(exc.unknown)}") from None
    if config.sample_every is not None or config.save_epochs:
        check_generation_fits(1, config.sample_length, model_config, config.device, "num_samples",
                              "sample_length")
    steps_per_epoch = len(StreamBatches(split.train, config.batch_size, config.seq_len))
    if (resume_from := decided.get("resume_from")) is not None:
        check_resumable(resume_from, model_config, config, steps_per_epoch)
    chosen_before = decided.pop("chosen_before", None)  # a resumed run's: what its budget chose, not the user
    ending = None if config.time_budget is None else plan_budget_end(
        model_config, config, vocab, split.val, group, time.perf_counter, finish_s, started,
        resume_from, decided.get("budget"), chosen_before)
    return TrainingPlan(**decided, ending=ending, started=started, threads=threads)


def _decide(request: TrainingRequest, sources: Sources, group: ProcessGroup, started: float | None,
            finish_s: float, say: Callable[[str], None]) -> dict[str, Any]:
    """The plan's fields for a new run, a fine-tune or a resumed run, before its checks and a budget's end."""
    model_options, train_options = split_options(request.options)
    if sources.resume is not None:
        return _plan_resume(request, sources, model_options, train_options)
    builtin = request.corpus is None  # tiny Shakespeare, downloaded once and verified
    name = request.corpus_name or (DEFAULT_DATASET if builtin else corpus_name(request.corpus))
    corpus = dataset_path(DEFAULT_DATASET, request.data_dir) if builtin else request.corpus
    config = TrainConfig(**{**train_options, "out_dir": str(request.out_dir or Path("checkpoints") / name),
                            "device": request.device,
                            "init_from": request.init_from and str(request.init_from)})
    reads = {"corpus": corpus, "init_from": sources.init_from}
    check_out_dir(Path(config.out_dir), request.overwrite, reads)  # before a download or any measuring
    if builtin:
        dataset = fetch(DEFAULT_DATASET, request.data_dir)
        verb = "downloaded and verified" if dataset.downloaded else "verified cached copy of"
        say(f"{verb} {dataset.name}: {dataset.path} ({dataset.chars:,} characters)")
    source, source_path = sources.init_model, sources.init_from
    if source is None or source_path is None:
        encoded = encode_corpus(corpus, name, config.val_frac, val_max_chars=config.val_max_chars)
        model_config, budget = ModelConfig(vocab_size=len(encoded.vocab), **model_options), None
        if config.time_budget is not None and (model_config.cell != "lstm" or model_config.layer_norm):
            budget = _unplanned(config, model_config, f"the scaling rule covers plain LSTMs, so this "
                                f"{model_config.cell}{' with layer norm' if model_config.layer_norm else ''} "
                                f"keeps the plain defaults")
        elif config.time_budget is not None:  # it chooses the fields the user left unset
            # What the caller needs after training is, like what went before it, not there to train.
            begun = (time.perf_counter() if started is None else started) - finish_s
            split = _scorable_split(encoded.ids, encoded.info)  # refused before the shapes are timed
            budget = plan_budget(config.time_budget, {**model_options, **train_options}, config,
                                 encoded.vocab, encoded.info, split.train, split.val, group, started=begun)
            chosen_model, chosen_train = split_options(budget.chosen)
            config = replace(config, **chosen_train)
            model_config = ModelConfig(vocab_size=len(encoded.vocab), **{**model_options, **chosen_model})
        return dict(model_config=model_config, config=config, vocab=encoded.vocab, ids=encoded.ids,
                    corpus=encoded.info, overwrite=request.overwrite, budget=budget)
    try:
        encoded = encode_corpus(corpus, name, config.val_frac, source.vocab, request.extend_vocab,
                                val_max_chars=config.val_max_chars)
    except UnknownCharactersError as exc:
        raise CharrnnError(f"{corpus}: {exc}; pass {option('extend_vocab')} to add them") from None
    model_config = fine_tune_config(source.network.config, model_options, len(encoded.vocab))
    # The checkpoint fixed the shape, and the rule predicts training from scratch: nothing to plan.
    budget = None if config.time_budget is None else _unplanned(
        config, model_config, "a fine-tune keeps its checkpoint's shape and regularisation, and every "
                              "other setting not given keeps its plain default")
    return dict(model_config=model_config, config=config, vocab=encoded.vocab, ids=encoded.ids,
                corpus=encoded.info, overwrite=request.overwrite, initial_weights=source.network.state_dict(),
                fine_tune=FineTuneFacts(source_path, len(source.vocab), source.network.config), budget=budget)


def _unplanned(config: TrainConfig, model: ModelConfig, because: str) -> BudgetDecision:
    """A time budget that only stops the run, ``because`` (told the user): all else keeps plain defaults."""
    device = config.device.split(":")[0]
    return BudgetDecision(config.time_budget, device, resolve_precision(config.precision, device, model),
                          planned=False, chosen={}, unplanned_because=because)


def _scorable_split(ids: torch.Tensor, corpus: CorpusInfo) -> Split:
    """The corpus's split, when its validation split has the 2 characters scoring needs."""
    split = split_ids(ids, corpus.split_point)
    if len(split.val) < 2:
        raise CharrnnError(
            f"the validation split has {len(split.val)} character(s); it needs at least 2 (use a longer "
            f"corpus, a larger {option('val_frac')} or a larger {option('val_max_chars')})")
    return split


def fine_tune_config(source: ModelConfig, model_options: dict[str, Any], vocab_size: int) -> ModelConfig:
    """The checkpoint's model, with a larger vocabulary if extended; only its regularisation may change
    (REGULARISATION_FIELDS), kept unless given: its dropout fine-tunes better (docs/shipped-model.md)."""
    values = source.to_dict() | {"vocab_size": vocab_size}
    for key, value in model_options.items():
        if value == values[key]:
            continue
        if key not in REGULARISATION_FIELDS:
            raise OptionConflict(f"{option(key)} {value!r} contradicts the {option('init_from')} checkpoint "
                                 f"({option(key)} {values[key]!r}); fine-tuning keeps the model's shape")
        values[key] = value
    return ModelConfig(**values)


def resume_config(payload: dict[str, Any], model_options: dict[str, Any], train_options: dict[str, Any],
                  out_dir: Path | None = None) -> tuple[ModelConfig, TrainConfig, list[tuple[str, Any, Any]]]:
    """The configuration a resumed run continues with (into ``out_dir``, default the checkpoint's own), and
    (field, old, new) for each option changed (:data:`RESUME_MAY_CHANGE`); a run at its limits is refused."""
    model_config = ModelConfig.from_dict(payload["model_config"])
    for key, value in model_options.items():
        if getattr(model_config, key) != value:
            raise OptionConflict(f"{option(key)} {value!r} contradicts the checkpoint ({option(key)} "
                                 f"{getattr(model_config, key)!r}); a resumed run keeps its model")
    saved, corpus = dict(payload["train_config"]), payload["corpus"]
    # eval_chars past the split's end means the whole split, as none does
    whole = corpus["chars"] - corpus["split_point"] - 1
    saved["eval_chars"] = partial_eval_chars(saved.get("eval_chars"), whole)
    changes = []
    for key, value in train_options.items():
        value = partial_eval_chars(value, whole) if key == "eval_chars" else value
        if saved.get(key) == value:
            continue
        if key not in RESUME_MAY_CHANGE:
            may_change = ", ".join(option(name) for name in RESUME_MAY_CHANGE if name != "device")
            given, kept = ("none" if shown is None else repr(shown) for shown in (value, saved.get(key)))
            raise OptionConflict(f"{option(key)} {given} contradicts the checkpoint ({option(key)} {kept}); "
                                 f"resuming may change only {may_change} and the device")
        changes.append((key, saved.get(key), value))
        saved[key] = value
    config = TrainConfig.from_dict(saved if out_dir is None else {**saved, "out_dir": str(out_dir)})
    if finished := stop_reason(config, payload["step"], payload["progress_epochs"], payload["elapsed_s"]):
        raise RunAlreadyFinished(finished)
    return model_config, config, changes


def _plan_resume(request: TrainingRequest, sources: Sources, model_options: dict[str, Any],
                 train_options: dict[str, Any]) -> dict[str, Any]:
    checkpoint, payload = sources.resume, sources.resume_payload
    if missing := [name for name in RESUME_FIELDS if name not in payload]:
        raise CharrnnError(f"{checkpoint} cannot be resumed (it holds no training state: {missing[0]} "
                           f"is missing)")
    out_dir, branch = resume_target(checkpoint, payload, request.out_dir, request.overwrite)
    model_config, config, changes = resume_config(payload, model_options,
                                                  {**train_options, "device": request.device}, out_dir)
    saved_corpus = payload["corpus"]
    corpus = request.corpus or Path(saved_corpus["path"])
    check_out_dir(out_dir, request.overwrite or not branch, {"corpus": corpus})
    # The checkpoint's own vocabulary encodes the ids (a fine-tune's may differ from the corpus's).
    vocab = Vocab.from_list(payload["vocab"])
    # The run keeps the split it was trained with, whatever the rule for new runs has become.
    encoded = encode_corpus(corpus, saved_corpus["name"], config.val_frac, vocab,
                            expected_sha256=saved_corpus["sha256"], split_at=saved_corpus["split_point"])
    branch_from = checkpoint.parent if branch and belongs_to(checkpoint.parent, payload) else None
    source = branch_from if branch else Path(config.out_dir)  # a resumed run keeps what its budget weighed
    earlier = (read_json_object(source / "config.json") or {}).get("budget") if source else None
    chosen = earlier.get("chosen") if isinstance(earlier, dict) else None
    return dict(model_config=model_config, config=config, vocab=vocab, ids=encoded.ids, corpus=encoded.info,
                resume_from=payload,
                resume=ResumeFacts(checkpoint, payload["step"], payload["progress_epochs"], changes, branch),
                branch_from=branch_from, earlier_budget=earlier, chosen_before={
                    key: value for key, value in (chosen if isinstance(chosen, dict) else {}).items()
                    if key not in train_options})
