"""The training loop: step, evaluate and save, stop; and :func:`train`, which sets it up.

The loop only schedules. A step is :meth:`TrainingRun.train_step
<charrnn.training.state.TrainingRun.train_step>`; when to stop and the learning rate
come from :mod:`charrnn.training.schedule`; files go through :mod:`charrnn.training.rundir`; other
processes (torchrun) through :mod:`charrnn.training.distributed`. The loop reports through a
:class:`TrainObserver` and never prints by itself.
"""

from __future__ import annotations

import contextlib
import copy
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

from charrnn.config import (
    SLOWDOWN_END_EXPONENT,
    SLOWDOWN_NOTICED,
    SLOWDOWN_RESTATED,
    SLOWDOWN_WINDOW_SHARE,
    ModelConfig,
    TrainConfig,
    partial_eval_chars,
)
from charrnn.data.corpus import StreamBatches, split_ids
from charrnn.errors import CharrnnError, TrainingInterrupted, escape
from charrnn.models.devices import precision_warning
from charrnn.models.evaluate import EvalResult, evaluate, evaluate_with_prefix
from charrnn.training.checkpoint import load_checkpoint
from charrnn.training.distributed import ProcessGroup
from charrnn.training.observer import StepReport, TrainObserver
from charrnn.training.rundir import (
    EvaluationRecord,
    RunDirectory,
    checkpoint_bytes,
    epoch_checkpoint_name,
    held_run_directory,
    new_run_id,
)
from charrnn.training.samples import draw_sample
from charrnn.training.schedule import (
    StopReason,
    learning_rate_at,
    planned_steps,
    run_progress,
    stop_reason,
)
from charrnn.training.state import TrainingRun
from charrnn.utils.interrupt import GracefulStop, StopRequested
from charrnn.utils.threads import LoadWatch, ThreadChoice, usable_cores

if TYPE_CHECKING:  # the plan is made above the engine, and imports it
    from charrnn.training.budget import BudgetEnding
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
    trained_s: float | None = None  # wall time when training stopped, before the final evaluation and saves
    # (counted, like elapsed_s, from the run's start, its earlier sessions included when resumed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stopped": str(self.stop_reason), "steps": self.steps, "epoch": self.epoch,
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
        warnings.append(f"warning: {{save_epochs}} {','.join(map(str, unreachable))} lies beyond this run's "
                        f"end {end}: no checkpoint will be kept for it")
    elif config.save_epochs and config.time_budget is not None:
        warnings.append("note: with {time_budget}, epoch checkpoints are kept only for the epochs the budget "
                        "reaches")
    for name, meaning in SCHEDULES.items():
        every, default = getattr(config, name), TrainConfig.__dataclass_fields__[name].default
        if total_steps is not None and every is not None and every != default and every > total_steps:
            warnings.append(f"warning: {{{name}}} {every:,} lies beyond this run's end {end}: {meaning}")
    return warnings


class TrainingLoop:
    """Step until a stopping criterion or a signal, evaluating and saving on schedule.

    Every rank of a process group runs the loop and takes the same decisions; rank 0
    alone evaluates and writes (``run_dir`` is None elsewhere).
    """

    def __init__(self, run: TrainingRun, val_ids: torch.Tensor, observer: TrainObserver,
                 stop: GracefulStop | None, run_dir: RunDirectory | None, elapsed_before: float,
                 clock: Callable[[], float] = time.perf_counter, started: float | None = None,
                 ending: BudgetEnding | None = None, threads: ThreadChoice | None = None):
        self.clock = clock  # seconds, for the time budget and the throughput figures
        self.run = run
        self.config = run.config
        self.val_ids = val_ids  # (N,) validation ids
        self.observer = observer
        self.stop = stop
        self.run_dir = run_dir
        # A resumed run continues its clock; a budget counts from when training was asked for.
        self.start = (clock() if started is None else started) - elapsed_before
        self.elapsed = elapsed_before  # rank 0's clock, agreed by every rank
        # Seconds of a time budget kept for the final evaluation and saves.
        self.reserve = ending.reserve_s if ending is not None else 0.0
        self.ending = ending
        self.slowdown = 1.0  # how much slower than planned the machine has trained (kept at its worst)
        self.stated_reserve = self.reserve  # the time kept for the end that the user was last told of
        # Other programs' use of the cores, watched where charrnn chose the threads (never the user's).
        self.load = LoadWatch() if threads is not None and not threads.given and threads.count > 1 else None
        evaluation_points = ending.points if ending is not None else ()
        # A long budget's evaluations during training, spread evenly over what is left of it (as fractions
        # of the run, ascending; a budget's run starts part-done: the time spent before training and kept
        # for the end count in it): its best weights are kept.
        done = 0.0
        if evaluation_points:  # how far the run is, on the clock every rank agrees on
            self.elapsed = run.group.reduce([clock() - self.start if run.group.is_main else 0.0], run.device,
                                            op="max")[0]
            done = self.progress() or 0.0
        self.evaluation_points = [done + (1.0 - done) * point for point in evaluation_points]
        # An evaluation falling due within half this of the end (a slow step jumped past its moment) is
        # left to the end's own: two evaluations back to back would break "evenly through it".
        self.evaluation_gap = (1.0 - done) / (len(evaluation_points) + 1)
        # The evaluations during training score the validation split's start (all of it by default).
        self.eval_chars = partial_eval_chars(self.config, len(val_ids) - 1)
        self.subset_chars = self.eval_chars or len(val_ids) - 1  # what comparisons during training score
        self._start_window()

    def _start_window(self) -> None:
        """Start the averages that the next evaluation record reports."""
        self.loss_sum, self.loss_count = 0.0, 0
        self.window_chars, self.window_start = 0, self.clock()

    def chars_per_s(self, now: float) -> float:
        """Training throughput since the window started, as of ``now`` (a ``perf_counter`` time)."""
        return self.window_chars / max(now - self.window_start, 1e-9)

    def progress(self) -> float | None:
        return run_progress(self.config, self.run.step, self.run.epoch, self.elapsed + self.reserve)

    def run_until_stopped(self) -> tuple[StopReason, float, float]:
        """Train until a stopping criterion or a signal; return why, the run's wall time when training
        stopped (before its final evaluation and saves), and its wall time at the end."""
        run, config = self.run, self.config
        reason: StopReason | None = None
        self.trained_out = False
        while reason is None:
            learning_rate = learning_rate_at(config, run.step, self.progress())
            with self._saving_if_memory_runs_out():
                loss, chars = run.train_step(learning_rate)
            if run.bad_streak >= config.max_bad_steps:
                raise CharrnnError(
                    f"training stopped at step {run.step:,}: {run.bad_streak} consecutive steps had a "
                    f"non-finite loss or gradient; the checkpoints in {escape(config.out_dir)} keep the last "
                    f"good "
                    f"state; try a lower {{learning_rate}} (now {config.learning_rate:g})", names_options=True
                )
            if math.isfinite(loss):
                self.loss_sum += loss
                self.loss_count += 1
            self.window_chars += chars
            now = self.clock()
            self._keep_time_for_the_end(now)
            reason = self._agreed_stop(now)
            budget_left = None if config.time_budget is None else max(config.time_budget - self.elapsed, 0.0)
            self.observer.on_step(StepReport(
                step=run.step, epoch=run.epoch, loss=loss, learning_rate=learning_rate,
                chars_per_s=self.chars_per_s(now), progress=self.progress(), skipped_steps=run.skipped,
                seconds_left=budget_left, elapsed_s=now - self.start,
            ))
            with self._saving_if_memory_runs_out():
                dropped = self.evaluate_and_save(reason, learning_rate, self.chars_per_s(now))
            if dropped is not None:  # a stop asked for while scoring: last.pt holds this step
                self.trained_out = reason is not None  # the final evaluation's: nothing left to train
                reason = StopReason("signal", signal_name=dropped)
        return reason, self.elapsed, self.clock() - self.start

    def _keep_time_for_the_end(self, now: float) -> None:
        """A machine slower than the plan measured (another program busy on it) takes longer over the
        end's evaluation and saves as well: the time kept for them grows with the slowdown (to the power
        SLOWDOWN_END_EXPONENT), and the user is told, so that the run still ends inside its budget (one
        process only: the ranks of torchrun would each see their own speed)."""
        ending = self.ending
        window = now - self.window_start
        if ending is None or ending.chars_per_s is None or self.run.group.world_size > 1 or \
                window < SLOWDOWN_WINDOW_SHARE * (self.config.time_budget or 0.0):
            return
        slowdown = ending.chars_per_s / max(self.chars_per_s(now), 1e-9)
        if slowdown <= self.slowdown:
            return
        self.slowdown = slowdown
        kept = ending.finish_s + (ending.reserve_s - ending.finish_s) * slowdown ** SLOWDOWN_END_EXPONENT
        # Said when first noticed, and again whenever the time kept has grown by half since.
        if slowdown >= SLOWDOWN_NOTICED and kept >= SLOWDOWN_RESTATED * self.stated_reserve:
            self._leave_the_busy_cores()
            self.observer.on_message(
                f"this machine slowed: training runs at {self.chars_per_s(now):,.0f} chars/s, not the "
                f"{ending.chars_per_s:,.0f} the plan measured; to evaluate and save inside the budget, "
                f"training now stops {kept:.1f} s before its end, not {ending.reserve_s:.1f}")
            self.stated_reserve = kept
        self.reserve = kept

    def _leave_the_busy_cores(self) -> None:
        """Other programs keep cores busy: a thread there runs a fraction of the time and torch's others
        wait for it at every operation (:mod:`charrnn.utils.threads`), so the run trains, and ends, on
        the cores left."""
        if self.load is None:
            return
        others = self.load.others_busy()
        self.load.start()
        cores = len(usable_cores())
        left = max(1, cores - others)
        if left < torch.get_num_threads():
            torch.set_num_threads(left)
            self.observer.on_message(f"other programs keep {others} of this machine's {cores} cores busy: "
                                     f"training goes on with {left} thread{'s' if left > 1 else ''}")

    @contextlib.contextmanager
    def _saving_if_memory_runs_out(self) -> Iterator[None]:
        """An allocation failure in the block (a step, or an evaluation) saves the run's state as of
        its last completed step (a failed step changes nothing) and becomes a one-line error."""
        try:
            yield
        except (MemoryError, RuntimeError) as exc:
            if not out_of_memory(exc):
                raise
            raise self._saved_after_running_out() from None

    def _saved_after_running_out(self) -> CharrnnError:
        run = self.run
        gc.collect()
        kept = "nothing newer than the run's last checkpoint was saved"
        if self.run_dir is not None:
            try:
                self.run_dir.save("last.pt", run.payload(self.elapsed, run.carried_state()))
                kept = (f"saved last.pt at step {run.step:,}; resume with {{resume}} "
                        f"{escape(str(self.run_dir.path))} once memory is free")
            except (MemoryError, RuntimeError, CharrnnError):
                pass
        return CharrnnError(f"out of memory after step {run.step:,}; {kept}, or start again with a smaller "
                            f"{{batch_size}}, {{seq_len}} or {{hidden_size}}", names_options=True)

    def _stop_asked(self) -> bool:
        """Whether this process has received a stop signal (before the ranks agree on it)."""
        return self.stop is not None and self.stop.signal_name is not None

    def _agreed_stop(self, now: float) -> StopReason | None:
        """A signal any rank received, else the criterion reached on rank 0's clock: the same on
        every rank.

        Every decision that depends on them (the learning rate, when to stop, evaluate
        and save) must be taken identically by all ranks, or their collectives would
        no longer pair up. Alone, they are this process's own.
        """
        group = self.run.group
        signal_name = self.stop.signal_name if self.stop is not None else None
        number = signal.Signals[signal_name].value if signal_name else 0
        own_clock = now - self.start if group.is_main else 0.0
        number, self.elapsed = group.reduce([number, own_clock], self.run.device, op="max")
        if number:
            return StopReason("signal", signal_name=signal.Signals(int(number)).name)
        return stop_reason(self.config, self.run.step, self.run.epoch, self.elapsed + self.reserve)

    def _droppable(self) -> contextlib.AbstractContextManager:
        """A block (scoring) that a stop signal ends at once with :class:`StopRequested`."""
        return self.stop.raising() if self.stop is not None else contextlib.nullcontext()

    def evaluate_and_save(self, reason: StopReason | None, learning_rate: float,
                          chars_per_s: float) -> str | None:
        """Evaluate on schedule, at the end and at a listed epoch's end; save last.pt on schedule and
        at the end (an interrupted run saves at once, without evaluating: the user is waiting). A stop
        asked for while scoring drops the evaluation, saves last.pt and returns the signal's name."""
        run, config = self.run, self.config
        epoch_end = run.position == 0 and run.epochs_done in config.save_epochs
        interval = config.evaluation_interval
        progress = self.progress()
        timed = bool(self.evaluation_points) and (progress or 0.0) >= self.evaluation_points[0]
        if timed:  # the agreed clock: every rank takes the same decision
            self.evaluation_points = [point for point in self.evaluation_points if point > progress]
            timed = 1.0 - (progress or 0.0) >= self.evaluation_gap / 2
        on_interval = interval is not None and run.step % interval == 0
        scheduled = on_interval or timed or reason is not None or epoch_end
        evaluating = scheduled and not (reason is not None and reason.interrupted)
        saving = run.step % config.save_every == 0 or reason is not None
        sampling = self.run_dir is not None and not (reason is not None and reason.interrupted) and (
            epoch_end or (config.sample_every is not None
                          and (run.step % config.sample_every == 0 or reason is not None)))
        if not (evaluating or saving or sampling):
            return None
        val_loss = None
        carried = run.carried_state()  # a collective: every rank gathers
        if evaluating and self.run_dir is not None:
            whole = reason is not None or epoch_end or self.eval_chars is None
            try:
                trained, averaged = self._scores(run.model, whole)
                use_average = averaged is not None and averaged.reported.nats_per_char < \
                    trained.reported.nats_per_char
                candidate = averaged if use_average else trained
                improved = self._improves(candidate, whole)
            except StopRequested as stopped:
                self.run_dir.save("last.pt", run.payload(self.elapsed, carried))
                return stopped.signal_name
            run.latest_eval = {"step": run.step, **trained.reported.to_dict()}
            val_loss = trained.reported.nats_per_char
            if improved:
                run.best, run.best_subset = candidate.reported, candidate.subset
                run.best_is_average = use_average
                self.run_dir.save("best.pt", run.payload(self.elapsed, carried, averaged=use_average))
            record = EvaluationRecord(
                step=run.step, epoch=round(run.epoch, 4),
                train_loss=self.loss_sum / self.loss_count if self.loss_count else None,
                val_loss=val_loss, val_bits_per_char=trained.reported.bits_per_char,
                learning_rate=learning_rate, chars_per_s=chars_per_s,
                elapsed_s=round(self.clock() - self.start, 3),
                epoch_checkpoint=epoch_checkpoint_name(run.epochs_done, val_loss) if epoch_end else None,
                averaged_val_loss=averaged.reported.nats_per_char if averaged is not None else None,
                val_chars=None if whole else trained.reported.chars,
            )
            if record.epoch_checkpoint is not None:
                self.run_dir.save(record.epoch_checkpoint, run.payload(self.elapsed, carried))
            self.run_dir.append_metrics(record)
            self.observer.on_eval(record, improved)
        if sampling:
            started = self.clock()
            record = draw_sample(run.model, run.vocab, config, run.step, run.epoch, started - self.start,
                                 val_loss, stopped=self._stop_asked)
            if record is not None:
                self.run_dir.append_sample(record)
                self.observer.on_sample(record)
            self.window_start += self.clock() - started  # the throughput reported is training's alone
        if evaluating:
            self._start_window()
        if saving and self.run_dir is not None:
            self.run_dir.save("last.pt", run.payload(self.elapsed, carried))
        return None

    def _scores(self, model: torch.nn.Module, whole: bool) -> tuple[Scores, Scores | None]:
        """The scores of the trained weights and of the averaged ones (None without an average): on the
        whole validation split (with the evaluation subset's from the same pass), or on the subset alone.
        In float32 whatever the precision: exact scores."""
        def score() -> Scores:
            with self._droppable():
                if self.eval_chars is None or not whole:
                    scored = evaluate(model, self.val_ids[: self.subset_chars + 1])
                    return Scores(scored, scored)
                subset, everything = evaluate_with_prefix(model, self.val_ids, self.subset_chars)
                return Scores(everything, subset)

        trained = score()
        if self.run.average is None:
            return trained, None
        with self.run.average.swapped_in(model):
            return trained, score()

    def _improves(self, candidate: Scores, whole: bool) -> bool:
        """Whether ``candidate`` beats best.pt: on the evaluation subset during training, on the whole split
        at the end. A best.pt scored on the subset alone is first scored on the whole split (its record
        updated), so the comparison at the end is exact and best.pt never loses to an earlier evaluation."""
        run = self.run
        best, best_subset = run.best, run.best_subset
        if best is None:
            return True
        if not whole:  # a best.pt with no score on a subset of this size stays until the end
            return best_subset is not None and best_subset.chars == candidate.subset.chars and \
                candidate.subset.nats_per_char < best_subset.nats_per_char
        if best.chars != candidate.reported.chars:
            best, step = self._rescore_best()
            if best.nats_per_char <= candidate.reported.nats_per_char:
                self.observer.on_message(
                    f"best.pt keeps the weights of step {step:,}: {best.nats_per_char:.4f} nats/char on the "
                    f"whole validation split, against {candidate.reported.nats_per_char:.4f} now")
        return candidate.reported.nats_per_char < best.nats_per_char

    def _rescore_best(self) -> tuple[EvalResult, int]:
        """Score best.pt's weights on the whole validation split and record that score in it; return
        the score and the step of those weights."""
        assert self.run_dir is not None
        path = self.run_dir.path / "best.pt"
        payload = load_checkpoint(path)
        scratch = copy.deepcopy(self.run.model)
        scratch.load_state_dict(payload["model_state"])
        with self._droppable():
            subset, whole = evaluate_with_prefix(scratch, self.val_ids, self.subset_chars)
        del scratch
        self.run.best, self.run.best_subset = whole, subset
        self.run_dir.save("best.pt", {**payload, "best": whole.to_dict(),
                                      "best_val_loss": whole.nats_per_char, "best_subset": subset.to_dict()})
        return whole, payload["step"]


@dataclass(frozen=True)
class Scores:
    """One set of weights' scores at an evaluation."""

    reported: EvalResult  # on the whole validation split, or on the evaluation subset during training
    subset: EvalResult  # on the evaluation subset (the same as reported when that is all that was scored)


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure: Python's, or the CPU or CUDA allocator's."""
    if isinstance(exc, MemoryError | torch.OutOfMemoryError):
        return True
    text = str(exc)
    return "can't allocate memory" in text or "out of memory" in text.lower()


def train(plan: TrainingPlan, observer: TrainObserver | None = None, stop: GracefulStop | None = None,
          group: ProcessGroup | None = None, clock: Callable[[], float] = time.perf_counter,
          started: float | None = None) -> TrainResult:
    """Train ``plan`` (made and checked by :func:`charrnn.training.plan.plan_training`) and write the run
    to its ``config.out_dir``.

    An existing run there is replaced only when the plan may overwrite it, and only once the new run
    writes its first file (see :mod:`charrnn.training.rundir`). A resumed plan continues its checkpoint
    exactly, continuing ``metrics.jsonl`` and ``samples.jsonl`` from its step; a branch continues it in a
    new directory under a new run id, its logs starting with that run's rows up to the checkpoint, and its
    ``best.pt`` the best of the branch. When ``stop`` reports a signal, the current step finishes,
    ``last.pt`` is written and :class:`TrainingInterrupted` is raised. After ``config.max_bad_steps``
    consecutive non-finite steps, training stops with an error and the checkpoints written so far are left
    as they were. In a process ``group`` (torchrun), every rank calls this with the same plan; rank 0 alone
    touches ``config.out_dir`` and reports to ``observer``. ``clock`` measures the run's wall time (tests
    give a fake one); ``started`` (a ``clock`` reading) is when training was asked for, from which a time
    budget counts (default: now). A time-budgeted run stops training early enough to evaluate, average and
    save inside the budget, and evaluates during training where its plan says (``plan.ending``).
    """
    model_config, config, vocab, corpus = plan.model_config, plan.config, plan.vocab, plan.corpus
    resume_from, branch_from = plan.resume_from, plan.branch_from
    group = group if group is not None else ProcessGroup()
    observer = observer if observer is not None and group.is_main else TrainObserver()
    out_dir = Path(config.out_dir)
    split = split_ids(plan.ids, plan.corpus.split_point)
    # The ids stay in host memory (memory-mapped from the corpus cache); each step moves one batch.
    batches = StreamBatches(split.train, config.batch_size, config.seq_len)
    with held_run_directory(out_dir, plan.overwrite or resume_from is not None, writer=group.is_main):
        run = TrainingRun(model_config, config, vocab, corpus, batches, plan.initial_weights, group)
        if resume_from is not None:
            run.restore(resume_from)
        branching = branch_from is not None
        if branching:
            run.run_id = new_run_id()
            run.best = None
        run_dir = None
        if group.is_main:
            parameters = sum(p.numel() for p in run.model.parameters())
            run_dir = RunDirectory(out_dir, {
                "run_id": run.run_id, "model": model_config.to_dict(), "train": config.to_dict(),
                "corpus": corpus.to_dict(), "world_size": group.world_size,
            }, fresh=resume_from is None or branching,
                resumed_at=resume_from["step"] if resume_from is not None else None, branch_from=branch_from,
                space_needed=3 * checkpoint_bytes(parameters, averaging=run.average is not None))
        warnings = [*schedule_warnings(config, len(batches), planned_steps(config, len(batches))),
                    precision_warning(config.precision, model_config)]
        for warning in filter(None, warnings):
            observer.on_message(warning)
        observer.on_start(run.model, model_config, config, corpus, len(batches),
                          planned_steps(config, len(batches)), run.step)
        for message in plan.ending.messages if plan.ending is not None else ():
            observer.on_message(message)
        loop = TrainingLoop(run, split.val, observer, stop, run_dir,
                            resume_from["elapsed_s"] if resume_from else 0.0, clock, started, plan.ending,
                            plan.threads)
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
        elapsed_s=elapsed_s, trained_s=trained_s,
        stop_reason=reason, skipped_steps=run.skipped,
        epoch_checkpoints=run_dir.epoch_checkpoints() if run_dir is not None else [],
        model_config=model_config, config=plan.config, budget=plan.budget, rank=group.rank,
        threads=plan.threads,
    )
