"""What a training run reports as it goes: the observer's hooks and the report of each step. No torch on
purpose: :func:`charrnn.api.train` checks an observer's type before any heavy import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from charrnn.config import ModelConfig, TrainConfig
    from charrnn.data.corpus import CorpusInfo
    from charrnn.models.model import CharRNN
    from charrnn.training.rundir import EvaluationRecord, SampleRecord


@dataclass
class StepReport:
    step: int  # optimiser steps done
    epoch: float  # passes over the training split done, fractional
    loss: float  # training loss of this step (nats/char)
    learning_rate: float  # learning rate applied at this step
    chars_per_s: float  # training throughput since the last report
    progress: float | None  # fraction of the run done, when a stopping criterion is set
    skipped_steps: int  # steps skipped so far for a non-finite loss or gradient
    seconds_left: float | None = None  # a time budget's seconds left, its end included; None without one
    elapsed_s: float | None = None  # the run's wall time at this step, from where its summary counts


class TrainObserver:
    """Hooks :func:`charrnn.api.train` and the loop call, doing nothing here (the CLI's draws progress)."""

    def on_message(self, text: str) -> None:
        """A note or warning before training starts, each option named as the caller spells it."""

    def on_plan(self, plan: Any) -> None:
        """The :class:`~charrnn.training.plan.TrainingPlan`, made and checked, before anything is written."""

    def on_start(self, model: CharRNN, model_config: ModelConfig, config: TrainConfig,
                 corpus: CorpusInfo, steps_per_epoch: int, total_steps: int | None, first_step: int) -> None:
        pass

    def on_step(self, report: StepReport) -> None:
        pass

    def on_eval(self, record: EvaluationRecord, improved: bool) -> None:
        """``improved``: this evaluation is the run's best so far, and was saved as best.pt."""

    def on_sample(self, record: SampleRecord) -> None:
        """A sample recorded in samples.jsonl (``TrainConfig.sample_every``, epoch checkpoints)."""

    def on_end(self, completed: bool) -> None:
        """``completed`` is False when an error or a signal cut the run short."""
