"""A run's :class:`Schedule`: its progress, learning rate and end; when it evaluates, samples, saves."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from charrnn.config import TrainConfig
from charrnn.errors import CharrnnError, option

if TYPE_CHECKING:
    from charrnn.training.state import TrainingRun

# A run slower than its plan measured keeps more time for its end (:meth:`Schedule.slowed`):
SLOWDOWN_WINDOW_SHARE = 0.05  # its speed judged over at least this share of the budget;
SLOWDOWN_NOTICED = 1.25  # the user told past this slowdown,
SLOWDOWN_RESTATED = 1.5  # and again each time the time kept has grown by this factor
SLOWDOWN_END_EXPONENT = 1.25  # the end slows more than training: the time kept grows by slowdown ** this


@dataclass(frozen=True)
class StopReason:
    """Why a run ended: a limit of its configuration was reached, or a signal arrived."""

    criterion: Literal["max_steps", "epochs", "time_budget", "signal"]  # the TrainConfig limit reached
    limit: float | int | None = None  # that limit (None for a signal)
    signal_name: str | None = None  # the signal, e.g. "SIGINT" (for a signal only)

    @property
    def interrupted(self) -> bool:
        return self.criterion == "signal"

    def describe(self) -> str:
        """Why the run stopped."""
        if self.interrupted:
            return f"interrupted by {self.signal_name}"
        if self.criterion == "time_budget":
            return f"used the {option('time_budget')} of {self.limit:g} s"
        if self.criterion == "max_steps":
            return f"reached {option('max_steps')} {self.limit}"
        return f"reached {option('epochs')} {self.limit:g}"

    __str__ = describe


class RunAlreadyFinished(CharrnnError):
    """A resumed run has already reached the limit that would stop it at once."""

    def __init__(self, reason: StopReason):
        # Every limit it was given still applies: a larger other limit would not let it go on.
        super().__init__(f"this run already {reason.describe()}; give a larger {option(reason.criterion)} to "
                         f"continue it")
        self.reason = reason  # the StopReason it reached


def stop_reason(config: TrainConfig, step: int, epoch: float, elapsed: float) -> StopReason | None:
    """The limit of ``config`` that a run at ``step`` (``epoch``, ``elapsed`` seconds) has reached, if any."""
    limits = (("max_steps", step, config.max_steps), ("epochs", epoch + 1e-9, config.epochs),
              ("time_budget", elapsed, config.time_budget))
    reached = (StopReason(name, limit) for name, done, limit in limits if limit is not None and done >= limit)
    return next(reached, None)


def run_progress(config: TrainConfig, step: int, epoch: float, elapsed: float,
                 began: tuple[int, float, float] = (0, 0.0, 0.0)) -> float | None:
    """The fraction done since ``began`` (step, epoch, seconds) by the nearest limit, or None without one."""
    limits = zip((step, epoch, elapsed), began, (config.max_steps, config.epochs, config.time_budget),
                 strict=True)
    return max(((now - start) / (limit - start) for now, start, limit in limits
                if limit is not None and limit > start), default=None)


def planned_steps(config: TrainConfig, steps_per_epoch: int) -> int | None:
    """Steps the run will take when a step or epoch limit is set (a time budget may end it sooner)."""
    by_epochs = None if config.epochs is None else math.ceil(config.epochs * steps_per_epoch)
    return min((limit for limit in (config.max_steps, by_epochs) if limit is not None), default=None)


# Every-N-steps schedules, and what an N beyond the run's end means (None when left at its default:
# a default interval longer than a short run is no surprise).
SCHEDULES = {"eval_every": "it evaluates only at the end", "save_every": "last.pt is written only at the end",
             "sample_every": "it records a sample only at the end"}


def schedule_warnings(config: TrainConfig, steps_per_epoch: int, total_steps: int | None) -> list[str]:
    """Warnings of the ``save_epochs`` this run will not reach and every-N-steps schedules past its end."""
    warnings = []
    unreachable = [epoch for epoch in config.save_epochs
                   if total_steps is not None and epoch * steps_per_epoch > total_steps]
    end = "" if total_steps is None else (
        f"({total_steps:,} steps, {total_steps / steps_per_epoch:.2f} epochs)")
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


def learning_rate_at(config: TrainConfig, step: int, progress: float | None) -> float:
    """Linear warm-up, then cosine decay to ``min_lr_ratio`` of the peak over ``progress`` (None: peak)."""
    peak = config.learning_rate
    if step < config.warmup_steps:
        return peak * (step + 1) / config.warmup_steps
    if progress is None:
        return peak
    floor = peak * config.min_lr_ratio
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


@dataclass(frozen=True)
class BudgetEnding:
    """A budgeted run's end, and its evaluations before (:func:`~charrnn.training.budget.plan_budget_end`)."""

    reserve_s: float  # seconds kept at the end: the final evaluation and saves, and the caller's finish_s
    points: tuple[float, ...]  # when to evaluate during training, as fractions of the run
    messages: tuple[str, ...]  # what to tell the user of it
    finish_s: float = 0.0  # of reserve_s, the caller's: what a slower machine does not lengthen
    chars_per_s: float | None = None  # the training speed the plan measured (None: none measured)


class Schedule:
    """A run's timetable as its plan decided it, which the loop asks after every step."""

    def __init__(self, config: TrainConfig, ending: BudgetEnding | None = None):
        self.config, self.ending = config, ending
        self.reserve = ending.reserve_s if ending is not None else 0.0  # seconds kept for the end
        self.told_reserve = self.reserve  # the time kept for the end that the user was last told of
        self.slowdown = 1.0  # how much slower than planned training has run (kept at its worst)
        # The planned evaluations still due during training (fractions of it), and the distance between them.
        self.points = list(ending.points) if ending is not None else []
        self.gap = 1.0 / (len(self.points) + 1)
        self.began = (0, 0.0, 0.0)  # the step, epoch and spent seconds (reserve included) at its start
        self.stretched_from = (0.0, self.reserve)  # elapsed and spent seconds when the time kept last grew

    def spent(self, elapsed: float) -> float:
        """The budget's seconds spent at ``elapsed``, the end's reserved time counted as spent. When that time
        grows, the rest of training stretches over what is left: progress, rate, evaluations never jump."""
        (at, spent), budget = self.stretched_from, self.config.time_budget
        if budget is None:
            return elapsed + self.reserve
        return spent + (budget - spent) * (elapsed - at) / max(budget - self.reserve - at, 1e-9)

    def begin(self, run: TrainingRun, elapsed: float) -> None:
        """Start the planned evaluations' clock here, where training starts: it may start part-done."""
        self.began = (run.step, run.epoch, self.spent(elapsed))

    def progress(self, run: TrainingRun, elapsed: float) -> float | None:
        """How much of the run is done (None without a limit): the end's reserved time counts as spent."""
        return run_progress(self.config, run.step, run.epoch, self.spent(elapsed))

    def learning_rate(self, run: TrainingRun, elapsed: float) -> float:
        return learning_rate_at(self.config, run.step, self.progress(run, elapsed))

    def seconds_left(self, elapsed: float) -> float | None:
        """What is left of a time budget (None without one)."""
        return None if self.config.time_budget is None else max(self.config.time_budget - elapsed, 0.0)

    def stop(self, run: TrainingRun, elapsed: float) -> StopReason | None:
        return stop_reason(self.config, run.step, run.epoch, elapsed + self.reserve)

    def due(self, run: TrainingRun, elapsed: float, reason: StopReason | None) -> tuple[bool, ...]:
        """Whether to evaluate (keep best.pt), save last.pt, record a sample and keep a save_epochs checkpoint
        now, the run stopping for ``reason``; an interrupted run only saves, at once: the user is waiting."""
        config, last = self.config, reason is not None
        interrupted = last and reason.interrupted
        epoch_end = run.position == 0 and run.epochs_done in config.save_epochs
        # The share of its training done since it began, by its nearest limit: planned evaluations fall
        # evenly along it, whichever limit ends the run.
        progress = run_progress(config, run.step, run.epoch, self.spent(elapsed), self.began) or 0.0
        timed = bool(self.points) and progress >= self.points[0]
        if timed:  # a slow step may pass a moment: one evaluation for all passed, none just before the end
            self.points = [point for point in self.points if point > progress]
            timed = 1.0 - progress >= self.gap / 2
        interval = config.evaluation_interval
        evaluate = last or epoch_end or timed or (interval is not None and run.step % interval == 0)
        sample = epoch_end or (config.sample_every is not None
                               and (last or run.step % config.sample_every == 0))
        return (evaluate and not interrupted, last or run.step % config.save_every == 0,
                sample and not interrupted, epoch_end)

    def slowed(self, chars_per_s: float, window_s: float, elapsed: float, alone: bool) -> str | None:
        """Follow the training speed at ``elapsed``: a machine slower than planned is slower over the end
        too, so the time kept grows; returns what to tell the user. Only ``alone``: each rank sees its own."""
        ending = self.ending
        if (ending is None or ending.chars_per_s is None or not alone
                or window_s < SLOWDOWN_WINDOW_SHARE * (self.config.time_budget or 0.0)):
            return None
        if (slowdown := ending.chars_per_s / max(chars_per_s, 1e-9)) <= self.slowdown:
            return None
        self.slowdown, self.stretched_from = slowdown, (elapsed, self.spent(elapsed))
        own = ending.reserve_s - ending.finish_s  # the run's own end, which slows with the machine
        self.reserve = ending.finish_s + own * slowdown ** SLOWDOWN_END_EXPONENT
        if slowdown < SLOWDOWN_NOTICED or self.reserve < SLOWDOWN_RESTATED * self.told_reserve:
            return None
        self.told_reserve = self.reserve
        return (f"this machine slowed: training runs at {chars_per_s:,.0f} chars/s, not the "
                f"{ending.chars_per_s:,.0f} the plan measured; to evaluate and save inside the budget, "
                f"training now stops {self.reserve:.1f} s before its end, not {ending.reserve_s:.1f}")
