"""The training loop: step, evaluate and save, stop; and :func:`train`, which sets it up.

The loop follows the plan's :class:`~charrnn.training.schedule.Schedule`, writes through
:mod:`charrnn.training.rundir`, and reports only through a :class:`TrainObserver`: it never prints."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from charrnn.config import ModelConfig, SampleConfig, TrainConfig
from charrnn.data.corpus import StreamBatches, scored_validation, split_ids
from charrnn.data.vocab import Vocab
from charrnn.errors import CharrnnError, TrainingInterrupted, option, options_spelled
from charrnn.generation.sample import default_warmup, generate
from charrnn.models.devices import precision_warning
from charrnn.models.evaluate import EvalResult, evaluate
from charrnn.models.model import CharRNN
from charrnn.training.distributed import ProcessGroup
from charrnn.training.observer import StepReport, TrainObserver
from charrnn.training.rundir import (
    EvaluationRecord,
    RunDirectory,
    SampleRecord,
    checkpoint_bytes,
    epoch_checkpoint_name,
    held_run_directory,
    new_run_id,
)
from charrnn.training.schedule import Schedule, StopReason, planned_steps
from charrnn.training.state import TrainingRun
from charrnn.utils.interrupt import GracefulStop, StopRequested
from charrnn.utils.threads import LoadWatch, ThreadChoice

if TYPE_CHECKING:  # the plan is made above the engine, and imports it
    from charrnn.training.plan import TrainingPlan


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
    rank: int = 0  # this process's rank under torchrun; rank 0 alone wrote the run and reports it
    threads: ThreadChoice | None = None  # the CPU threads it ran with, and why (None: torch's own)
    trained_s: float | None = None  # elapsed_s when training stopped, before the final evaluation and saves

    def to_dict(self) -> dict[str, Any]:
        with options_spelled(str):  # a record reads the same from either door
            stopped = str(self.stop_reason)
        return {
            "stopped": stopped, "steps": self.steps, "epoch": self.epoch,
            "elapsed_s": self.elapsed_s, "trained_s": self.trained_s, "best": self.best.to_dict(),
            "best_is_average": self.best_is_average,
            "skipped_steps": self.skipped_steps, "out_dir": str(self.out_dir),
            "best_checkpoint": str(self.out_dir / "best.pt"),
            "last_checkpoint": str(self.out_dir / "last.pt"),
            "epoch_checkpoints": [str(path) for path in self.epoch_checkpoints],
            "model": None if self.model_config is None else self.model_config.to_dict(),
            "training": None if self.config is None else self.config.to_dict(),
            "budget": None if self.budget is None else self.budget.to_dict(),
            "threads": None if self.threads is None else dataclasses.asdict(self.threads),
        }


# Every-N-steps schedules, and what an N beyond the run's end means (None when left at its default:
# a default interval longer than a short run is no surprise).
SCHEDULES = {"eval_every": "it evaluates only at the end", "save_every": "last.pt is written only at the end",
             "sample_every": "it records a sample only at the end"}


def schedule_warnings(config: TrainConfig, steps_per_epoch: int, total_steps: int | None) -> list[str]:
    """What to say of the ``save_epochs`` this run will not reach, and of an every-N-steps schedule given
    with an N beyond its end, as :meth:`TrainObserver.on_message` takes it."""
    warnings = []
    unreachable = [epoch for epoch in config.save_epochs
                   if total_steps is not None and epoch * steps_per_epoch > total_steps]
    end = "" if total_steps is None else \
        f"({total_steps:,} steps, {total_steps / steps_per_epoch:.2f} epochs)"
    if unreachable:
        warnings.append(f"warning: {option('save_epochs')} {','.join(map(str, unreachable))} lies beyond "
                        f"this run's end {end}: no checkpoint will be kept for it")
    elif config.save_epochs and config.time_budget is not None:
        warnings.append(f"note: with {option('time_budget')}, epoch checkpoints are kept only for the epochs "
                        f"the budget reaches")
    for name, meaning in SCHEDULES.items():
        every, default = getattr(config, name), TrainConfig.__dataclass_fields__[name].default
        if total_steps is not None and every is not None and every != default and every > total_steps:
            warnings.append(f"warning: {option(name)} {every:,} lies beyond this run's end {end}: {meaning}")
    return warnings


class TrainingLoop:
    """Step until the schedule or a signal stops the run, evaluating, sampling and saving when it says.
    Every rank runs it and takes the same decisions; rank 0 alone evaluates and writes."""

    def __init__(self, run: TrainingRun, val_ids: torch.Tensor, observer: TrainObserver,
                 stop: GracefulStop | None, run_dir: RunDirectory | None, schedule: Schedule, start: float,
                 clock: Callable[[], float] = time.perf_counter, threads: ThreadChoice | None = None):
        self.run, self.config, self.schedule = run, run.config, schedule
        # Every evaluation scores the same text: the validation split, or its start (TrainConfig.eval_chars).
        self.val_ids, self.val_chars = scored_validation(val_ids, self.config.eval_chars)  # (N,) ids
        self.observer, self.stop, self.run_dir, self.clock = observer, stop, run_dir, clock
        self.start = start  # the clock's reading at the run's start (a resumed run's earlier sessions too)
        # Other programs' use of the cores, watched where charrnn chose the threads (never the user's).
        self.load = LoadWatch() if threads is not None and not threads.given and threads.count > 1 else None
        self.elapsed = self._agreed([0])[1]  # rank 0's clock, agreed by every rank
        schedule.begin(run, self.elapsed)
        self.trained_out = False  # a stop came in the final evaluation: nothing is left to train
        self._start_window()

    def _start_window(self) -> None:
        """Start the averages that the next evaluation record reports."""
        self.loss_sum, self.loss_count = 0.0, 0
        self.window_chars, self.window_start = 0, self.clock()

    def chars_per_s(self, now: float) -> float:
        """Training throughput since the window started, as of ``now`` (a ``clock`` reading)."""
        return self.window_chars / max(now - self.window_start, 1e-9)

    def run_until_stopped(self) -> tuple[StopReason, float, float]:
        """Train until the schedule or a signal stops the run; return why, the run's wall time when
        training stopped (before its final evaluation and saves), and its wall time at the end."""
        run, schedule = self.run, self.schedule
        reason: StopReason | None = None
        while reason is None:
            learning_rate = schedule.learning_rate(run, self.elapsed)
            with saving_if_memory_runs_out(self.run, self.run_dir, self.elapsed):
                loss, chars = run.train_step(learning_rate)
            if run.bad_streak >= self.config.max_bad_steps:
                raise CharrnnError(
                    f"training stopped at step {run.step:,}: {run.bad_streak} consecutive steps had a "
                    f"non-finite loss or gradient; the checkpoints in {self.config.out_dir} keep the last "
                    f"good state; try a lower {option('learning_rate')} (now {self.config.learning_rate:g})")
            if math.isfinite(loss):
                self.loss_sum, self.loss_count = self.loss_sum + loss, self.loss_count + 1
            self.window_chars += chars
            now = self.clock()
            alone = run.group.world_size == 1
            slowed = schedule.slowed(self.chars_per_s(now), now - self.window_start, alone)
            for message in (slowed and self.load and self.load.leave_busy_cores(), slowed):
                if message:
                    self.observer.on_message(message)
            reason = self._agreed_stop(now)
            self.observer.on_step(StepReport(
                step=run.step, epoch=run.epoch, loss=loss, learning_rate=learning_rate,
                chars_per_s=self.chars_per_s(now), progress=schedule.progress(run, self.elapsed),
                skipped_steps=run.skipped, seconds_left=schedule.seconds_left(self.elapsed),
                elapsed_s=now - self.start))
            with saving_if_memory_runs_out(self.run, self.run_dir, self.elapsed):
                dropped = self.evaluate_and_save(reason, learning_rate, self.chars_per_s(now))
            if dropped is not None:  # a stop asked for while scoring: last.pt holds this step
                self.trained_out = reason is not None
                reason = StopReason("signal", signal_name=dropped)
        return reason, self.elapsed, self.clock() - self.start

    def _stop_asked(self) -> bool:
        return self.stop is not None and self.stop.signal_name is not None

    def _agreed(self, values: list[float]) -> list[float]:
        """``values`` and rank 0's clock, each the largest over the ranks: every rank then decides alike,
        or their collectives would no longer pair up."""
        own_clock = self.clock() - self.start if self.run.group.is_main else 0.0
        return self.run.group.reduce([*values, own_clock], self.run.device, op="max")

    def _agreed_stop(self, now: float) -> StopReason | None:
        """A signal any rank received, else the limit reached on rank 0's clock: the same on every rank."""
        signal_name = self.stop.signal_name if self.stop is not None else None
        number, self.elapsed = self._agreed([signal.Signals[signal_name].value if signal_name else 0])
        if number:
            return StopReason("signal", signal_name=signal.Signals(int(number)).name)
        return self.schedule.stop(self.run, self.elapsed)

    def evaluate_and_save(self, reason: StopReason | None, learning_rate: float,
                          chars_per_s: float) -> str | None:
        """Evaluate, sample and save as the schedule says. A stop asked for while scoring drops the
        evaluation, saves last.pt and returns the signal's name."""
        run, run_dir = self.run, self.run_dir
        due = self.schedule.due(run, self.elapsed, reason)
        if not (due.evaluate or due.save or due.sample):
            return None
        val_loss = None
        carried = run.carried_state()  # a collective: every rank gathers
        if due.evaluate and run_dir is not None:
            try:
                val_loss = self._evaluate(run_dir, carried, learning_rate, chars_per_s, due.epoch_end)
            except StopRequested as stopped:
                run_dir.save("last.pt", run.payload(self.elapsed, carried))
                return stopped.signal_name
        if due.sample and run_dir is not None:
            started = self.clock()
            sample = draw_sample(run.model, run.vocab, self.config, run.step, run.epoch, started - self.start,
                                 val_loss, stopped=self._stop_asked)
            if sample is not None:
                run_dir.append_sample(sample)
                self.observer.on_sample(sample)
            self.window_start += self.clock() - started  # the throughput reported is training's alone
        if due.evaluate:
            self._start_window()
        if due.save and run_dir is not None:
            run_dir.save("last.pt", run.payload(self.elapsed, carried))
        return None

    def _evaluate(self, run_dir: RunDirectory, carried: tuple[torch.Tensor, ...], learning_rate: float,
                  chars_per_s: float, epoch_end: bool) -> float:
        """Score the trained weights (and the averaged ones), keep best.pt and an epoch's checkpoint,
        and record it; the trained weights' nats/char. In float32 whatever the precision: exact scores.
        A stop asked for meanwhile raises :class:`StopRequested` at once."""
        run = self.run
        with self.stop.raising() if self.stop is not None else contextlib.nullcontext():
            trained = evaluate(run.model, self.val_ids)
            averaged = None
            if run.average is not None:
                with run.average.swapped_in(run.model):
                    averaged = evaluate(run.model, self.val_ids)
        use_average = averaged is not None and averaged.nats_per_char < trained.nats_per_char
        candidate = averaged if averaged is not None and use_average else trained
        improved = run.best is None or candidate.nats_per_char < run.best.nats_per_char
        run.latest_eval = {"step": run.step, **trained.to_dict()}
        if improved:
            run.best, run.best_is_average = candidate, use_average
            run_dir.save("best.pt", run.payload(self.elapsed, carried, averaged=use_average))
        val_loss = trained.nats_per_char
        record = EvaluationRecord(
            step=run.step, epoch=round(run.epoch, 4),
            train_loss=self.loss_sum / self.loss_count if self.loss_count else None,
            val_loss=val_loss, val_bits_per_char=trained.bits_per_char, learning_rate=learning_rate,
            chars_per_s=chars_per_s, elapsed_s=round(self.clock() - self.start, 3),
            epoch_checkpoint=epoch_checkpoint_name(run.epochs_done, val_loss) if epoch_end else None,
            averaged_val_loss=averaged.nats_per_char if averaged is not None else None,
            val_chars=self.val_chars)
        if record.epoch_checkpoint is not None:
            run_dir.save(record.epoch_checkpoint, run.payload(self.elapsed, carried))
        run_dir.append_metrics(record)
        self.observer.on_eval(record, improved)
        return val_loss


@contextlib.contextmanager
def saving_if_memory_runs_out(run: TrainingRun, run_dir: RunDirectory | None,
                              elapsed: float) -> Iterator[None]:
    """An allocation failure in the block (a step, or an evaluation) saves the run's state as of its last
    completed step (a failed step changes nothing) and becomes a one-line error."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        if not out_of_memory(exc):
            raise
    else:
        return
    gc.collect()
    kept = "nothing newer than the run's last checkpoint was saved"
    if run_dir is not None:
        try:
            run_dir.save("last.pt", run.payload(elapsed, run.carried_state()))
            kept = (f"saved last.pt at step {run.step:,}; resume with {option('resume')} {run_dir.path} once "
                    f"memory is free")
        except (MemoryError, RuntimeError, CharrnnError):
            pass
    raise CharrnnError(f"out of memory after step {run.step:,}; {kept}, or start again with a smaller "
                       f"{option('batch_size')}, {option('seq_len')} or {option('hidden_size')}") from None


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure: Python's, or the CPU or CUDA allocator's."""
    if isinstance(exc, MemoryError | torch.OutOfMemoryError):
        return True
    text = str(exc)
    return "can't allocate memory" in text or "out of memory" in text.lower()


def train(plan: TrainingPlan, observer: TrainObserver | None = None, stop: GracefulStop | None = None,
          group: ProcessGroup | None = None, clock: Callable[[], float] = time.perf_counter) -> TrainResult:
    """Train ``plan`` into its ``config.out_dir``; a branch gets a new run id. On a signal from ``stop``,
    the step finishes, ``last.pt`` is written and :class:`TrainingInterrupted` raised. Under torchrun every
    rank calls this with the same plan; rank 0 alone writes and reports. ``clock`` times the run from
    ``plan.started`` (tests give a fake one)."""
    config, resume_from = plan.config, plan.resume_from
    group = group if group is not None else ProcessGroup()
    observer = observer if observer is not None and group.is_main else TrainObserver()
    out_dir = Path(config.out_dir)
    split = split_ids(plan.ids, plan.corpus.split_point)
    # The ids stay in host memory (memory-mapped from the corpus cache); each step moves one batch.
    batches = StreamBatches(split.train, config.batch_size, config.seq_len)
    with held_run_directory(out_dir, plan.overwrite or resume_from is not None, writer=group.is_main):
        run = TrainingRun(plan.model_config, config, plan.vocab, plan.corpus, batches, plan.initial_weights,
                          group)
        if resume_from is not None:
            run.restore(resume_from)
        if plan.branches:
            run.run_id, run.best = new_run_id(), None
        run_dir = _open_run_directory(plan, run) if group.is_main else None
        steps = planned_steps(config, len(batches))
        for message in (*schedule_warnings(config, len(batches), steps),
                        precision_warning(config.precision, plan.model_config)):
            if message:
                observer.on_message(message)
        observer.on_start(run.model, plan.model_config, config, plan.corpus, len(batches), steps, run.step)
        for message in plan.ending.messages if plan.ending is not None else ():
            observer.on_message(message)
        start = (clock() if plan.started is None else plan.started) - \
            (resume_from["elapsed_s"] if resume_from else 0.0)
        loop = TrainingLoop(run, split.val, observer, stop, run_dir, Schedule(config, plan.ending), start,
                            clock, plan.threads)
        try:
            reason, trained_s, elapsed_s = loop.run_until_stopped()
        except BaseException:
            observer.on_end(completed=False)
            raise
        observer.on_end(completed=not reason.interrupted)
    if reason.interrupted:
        raise TrainingInterrupted(reason.signal_name, out_dir / "last.pt", run.step, loop.trained_out)
    best, best_is_average = group.from_main((run.best, run.best_is_average))
    assert best is not None  # a run that was not interrupted ends with an evaluation
    return TrainResult(
        out_dir=out_dir, steps=run.step, epoch=run.epoch, best=best, best_is_average=best_is_average,
        elapsed_s=elapsed_s, trained_s=trained_s, stop_reason=reason, skipped_steps=run.skipped,
        epoch_checkpoints=run_dir.epoch_checkpoints() if run_dir is not None else [],
        model_config=plan.model_config, config=config, budget=plan.budget, rank=group.rank,
        threads=plan.threads,
    )


def _open_run_directory(plan: TrainingPlan, run: TrainingRun) -> RunDirectory:
    """The run directory, with its config.json: fresh for a new run or a branch, else continued."""
    resume_from = plan.resume_from
    parameters = sum(p.numel() for p in run.model.parameters())
    return RunDirectory(Path(plan.config.out_dir), {
        "run_id": run.run_id, "model": plan.model_config.to_dict(), "train": plan.config.to_dict(),
        "corpus": plan.corpus.to_dict(), "world_size": run.group.world_size,
    }, fresh=resume_from is None or plan.branches,
        resumed_at=resume_from["step"] if resume_from is not None else None, branch_from=plan.branch_from,
        space_needed=3 * checkpoint_bytes(parameters, averaging=run.average is not None))


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
