"""What a time budget decides with, and nothing that runs: the ladder of shapes, the scaling rule fitted
on the budget sweeps, and the budget's constants. Importing it loads no torch. The evidence behind each
figure is in docs/defaults.md, "The budget's constants"."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class BudgetShape:
    """One rung of the ladder a time budget chooses from: an LSTM's size, with the batch, learning rate
    and skip connections that trained it fastest in the budget sweeps, and the weight decay that
    regularised it best in the passes a budget plans for it."""

    hidden_size: int  # units per LSTM layer
    batch_size: int  # parallel BPTT streams
    learning_rate: float  # peak Adam learning rate
    skip_connections: bool = False  # the input to every layer, every layer to the output
    weight_decay: float = 0.1  # decoupled (AdamW) weight decay

    def settings(self) -> dict[str, Any]:
        """What the rung sets: size, batch, learning rate and weight decay always; skip connections when
        used."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {key: value for key, value in values.items() if key != "skip_connections" or value}


# The shapes a budget times and predicts, smallest first; which one wins is decided per run, from this
# machine's measured speed and SCALING_LAW.
BUDGET_LADDER: tuple[BudgetShape, ...] = (
    BudgetShape(hidden_size=128, batch_size=16, learning_rate=5e-3, skip_connections=True),
    BudgetShape(hidden_size=192, batch_size=16, learning_rate=5e-3, skip_connections=True),
    BudgetShape(hidden_size=256, batch_size=24, learning_rate=6e-3, skip_connections=True),
    BudgetShape(hidden_size=384, batch_size=32, learning_rate=5e-3),
    BudgetShape(hidden_size=512, batch_size=32, learning_rate=5e-3),
    BudgetShape(hidden_size=768, batch_size=32, learning_rate=4e-3),
    BudgetShape(hidden_size=1024, batch_size=32, learning_rate=3e-3),
    BudgetShape(hidden_size=1280, batch_size=32, learning_rate=3e-3, weight_decay=0.3),
    BudgetShape(hidden_size=1536, batch_size=32, learning_rate=2.5e-3, weight_decay=0.3),
    BudgetShape(hidden_size=2048, batch_size=32, learning_rate=2e-3, weight_decay=0.3),
)


@dataclass(frozen=True)
class ScalingLaw:
    """Predicted validation nats/char of an LSTM of ``parameters`` trained on ``chars`` characters of a
    training split of ``corpus_chars``: E + A·(n/1e6)^-α + B·(d_eff/1e6)^-β - K·skip, where repeated
    passes over the split count for less and less (d_eff). Fitted by benchmarks/scaling_fit.py."""

    irreducible: float  # E: what no size or data removes
    size_coefficient: float  # A
    size_exponent: float  # α: how fast more parameters help
    data_coefficient: float  # B
    data_exponent: float  # β: how fast more (effective) characters help
    repeat_scale: float  # R: passes beyond the first are worth u·R·(1 - exp(-repeats/R)) characters in all
    skip_gain: float  # K: nats/char less with skip connections (the small rungs' recipe, batch 16 with them)
    rms_error: float  # nats/char: how far the fit's data lie from it; predictions closer than this tie

    def effective_chars(self, chars: float, corpus_chars: float) -> float:
        """Characters seen, counting repeated passes over the split at their diminishing worth."""
        if chars <= corpus_chars:
            return chars
        repeats = chars / corpus_chars - 1
        scale = self.repeat_scale * smaller_corpus_factor(corpus_chars)
        return corpus_chars * (1 + scale * (1 - math.exp(-repeats / scale)))

    def predict(self, parameters: float, chars: float, corpus_chars: float,
                skip_connections: bool = False) -> float:
        effective = self.effective_chars(max(chars, 1.0), corpus_chars)
        return (self.irreducible + self.size_coefficient * (parameters / 1e6) ** -self.size_exponent
                + self.data_coefficient * (effective / 1e6) ** -self.data_exponent
                - (self.skip_gain if skip_connections else 0.0))


# benchmarks/scaling/fit.json, rounded to four figures (benchmarks/scaling_fit.py --check compares them).
SCALING_LAW = ScalingLaw(irreducible=0.7663, size_coefficient=0.3485, size_exponent=0.1028,
                         data_coefficient=0.4798, data_exponent=0.4282, repeat_scale=0.8404,
                         skip_gain=0.0325, rms_error=0.0152)
LAW_CORPUS_CHARS = 1_003_854  # the training split the law was fitted on: tiny Shakespeare's first 90%
# The most passes a budget plans over tiny Shakespeare (unless given --epochs): more scored worse.
BUDGET_MOST_EPOCHS = 5.0
# On a corpus k times smaller a repeated pass is worth more: the repeat scale and the pass limit grow by
# k ** this, down to the smallest split it was fitted on, and never extrapolated below it.
SMALLER_CORPUS_EXPONENT = 0.45
SMALLEST_FITTED_CHARS = 90_000


def smaller_corpus_factor(corpus_chars: float) -> float:
    """How much more a repeated pass over a training split of ``corpus_chars`` is worth, and how many more
    passes a budget allows, than over the split the law was fitted on."""
    return max(1.0, LAW_CORPUS_CHARS / max(corpus_chars, SMALLEST_FITTED_CHARS)) ** SMALLER_CORPUS_EXPONENT


def most_epochs(corpus_chars: float) -> float:
    """The most passes a time budget plans over a training split of ``corpus_chars``: 5 over tiny
    Shakespeare's, more over a smaller one, to a tenth of a pass."""
    return round(BUDGET_MOST_EPOCHS * smaller_corpus_factor(corpus_chars), 1)


# Timing the ladder: at most this share of the budget, each shape for a few steps after an untimed one.
BUDGET_PROBE_SHARE = 0.05
BUDGET_PROBE_STEPS = (2, 20)  # timed steps per shape: at least, at most
BUDGET_PROBE_SECONDS = 1.0  # a shape is timed for at most this long once it has its fewest steps
PROBE_AVERAGE_DECAY = 0.99  # shapes are timed with a weight average (any decay: the same work)
PROBE_COST_MARGIN = 1.25  # a shape's timing is predicted from the last one's speed, with this margin

# Regularisation grows with the passes a budget allows: no dropout up to BUDGET_DROPOUT_FREE_EPOCHS, then
# this much more per doubling of the passes, up to the maximum; less than the least is none.
BUDGET_DROPOUT_FREE_EPOCHS = 2.0
BUDGET_DROPOUT_PER_DOUBLING = 0.1
BUDGET_DROPOUT_MAX = 0.4
BUDGET_DROPOUT_LEAST = 0.1
BUDGET_DROPOUT_WIDTH = 64  # dropout's masks cost about this much width of time per character
BUDGET_WARMUP_SHARE = 0.1  # warm-up takes at most this share of a plan's steps
BUDGET_AVERAGE_SHARE = 0.1  # the weight average spans about this share of the run's steps,
BUDGET_AVERAGE_STEPS = (200, 1000)  # within these bounds

# The end: the time kept for the final evaluation and saves, and the evaluations during training.
CALIBRATION_SAMPLE = 32  # characters of a recorded sample timed to predict a whole sample's cost
SAVE_BYTES_PER_S = 100e6  # a conservative disk: what writing (and fsyncing) a checkpoint costs
FINAL_WORK_MARGIN = 1.25  # the estimate's safety factor
BUDGET_EVALUATION_SHARE = 0.05  # of a time budget, at most this much goes to evaluations during training
BUDGET_EVALUATIONS = (3, 10)  # evaluations during a budgeted run: at least this many (else none), at most
BUDGET_GUARD_EPOCHS = 3.0  # a plan of fewer passes evaluates only at its end: none that short overfit

# A run slower than its plan measured keeps more time for its end, judged over at least this share of
# the budget; it says so past SLOWDOWN_NOTICED, and again once the time kept has grown by half.
SLOWDOWN_WINDOW_SHARE = 0.05
SLOWDOWN_NOTICED = 1.25
SLOWDOWN_RESTATED = 1.5
SLOWDOWN_END_EXPONENT = 1.25  # the end slows more than training: the time kept grows by slowdown ** this
