"""When a run stops, how far along it is, and its learning rate at each step."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from charrnn.config import TrainConfig
from charrnn.errors import CharrnnError, option_placeholder

StopCriterion = Literal["max_steps", "epochs", "time_budget", "signal"]


@dataclass(frozen=True)
class StopReason:
    """Why a run ended: a limit of its configuration was reached, or a signal arrived."""

    criterion: StopCriterion  # the TrainConfig field whose limit was reached, or "signal"
    limit: float | int | None = None  # that limit (None for a signal)
    signal_name: str | None = None  # the signal, e.g. "SIGINT" (for a signal only)

    @property
    def interrupted(self) -> bool:
        return self.criterion == "signal"

    def describe(self, name: Callable[[str], str] = str) -> str:
        """Why the run stopped, each option named by ``name(option)`` (the command line gives flags)."""
        if self.interrupted:
            return f"interrupted by {self.signal_name}"
        if self.criterion == "time_budget":
            return f"used the {name('time_budget')} of {self.limit:g} s"
        if self.criterion == "max_steps":
            return f"reached {name('max_steps')} {self.limit}"
        return f"reached {name('epochs')} {self.limit:g}"

    def __str__(self) -> str:
        return self.describe()


class RunAlreadyFinished(CharrnnError):
    """A resumed run has already reached the limit that would stop it at once."""

    def __init__(self, reason: StopReason):
        # Every limit it was given still applies: a larger other limit would not let it go on.
        super().__init__(f"this run already {reason.describe(option_placeholder)}; give a larger "
                         f"{option_placeholder(reason.criterion)} to continue it", names_options=True)
        self.reason = reason  # the StopReason it reached


def stop_reason(config: TrainConfig, step: int, epoch: float, elapsed: float) -> StopReason | None:
    """The limit of ``config`` that a run at ``step`` (``epoch``, ``elapsed`` seconds) has reached, if any."""
    if config.max_steps is not None and step >= config.max_steps:
        return StopReason("max_steps", config.max_steps)
    if config.epochs is not None and epoch >= config.epochs - 1e-9:
        return StopReason("epochs", config.epochs)
    if config.time_budget is not None and elapsed >= config.time_budget:
        return StopReason("time_budget", config.time_budget)
    return None


def run_progress(config: TrainConfig, step: int, epoch: float, elapsed: float) -> float | None:
    """The fraction done by whichever stopping criterion is nearest, or None without one."""
    fractions = []
    if config.max_steps is not None:
        fractions.append(step / config.max_steps)
    if config.epochs is not None:
        fractions.append(epoch / config.epochs)
    if config.time_budget is not None:
        fractions.append(elapsed / config.time_budget)
    return max(fractions) if fractions else None


def planned_steps(config: TrainConfig, steps_per_epoch: int) -> int | None:
    """Steps the run will take when a step or epoch limit is set (a time budget may end it sooner)."""
    limits = []
    if config.max_steps is not None:
        limits.append(config.max_steps)
    if config.epochs is not None:
        limits.append(math.ceil(config.epochs * steps_per_epoch))
    return min(limits) if limits else None


def learning_rate_at(config: TrainConfig, step: int, progress: float | None) -> float:
    """Linear warm-up for ``warmup_steps``, then cosine decay to ``min_lr_ratio`` of the peak.

    ``progress`` in [0, 1] is how much of the run is done; with no known end the rate
    stays at its peak after warm-up.
    """
    peak = config.learning_rate
    if step < config.warmup_steps:
        return peak * (step + 1) / config.warmup_steps
    if progress is None:
        return peak
    floor = peak * config.min_lr_ratio
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
