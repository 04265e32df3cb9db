"""What a time budget trains (docs/defaults.md, "Time budgets", and each constant's evidence): the ladder's
shapes timed, their losses predicted by :data:`SCALING_LAW`, the best chosen and regularised for its passes;
and how the run ends (:func:`plan_budget_end`). Throughput is measured on this machine, never looked up, so
a faster machine or a longer budget moves the choice with no table to update."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, astuple, dataclass, replace
from typing import Any

import torch

from charrnn.config import ModelConfig, TrainConfig, split_options
from charrnn.data.corpus import CorpusInfo, StreamBatches, scored_validation
from charrnn.data.vocab import Vocab
from charrnn.errors import CharrnnError, option
from charrnn.models.devices import check_model_fits, resolve_precision, too_wide_for_bf16
from charrnn.models.evaluate import scoring_seconds
from charrnn.models.model import CharRNN, parameter_count
from charrnn.training.distributed import ProcessGroup
from charrnn.training.loop import draw_sample, train_step
from charrnn.training.rundir import checkpoint_bytes
from charrnn.training.schedule import BudgetEnding, RunAlreadyFinished, learning_rate_at, stop_reason
from charrnn.training.state import TrainingRun


@dataclass(frozen=True)
class BudgetShape:
    """One rung of the ladder a time budget chooses from: an LSTM's size, with the batch, learning rate and
    skip connections that trained it fastest in the sweeps, and the weight decay that regularised it best."""

    hidden_size: int  # units per LSTM layer
    batch_size: int  # parallel BPTT streams
    learning_rate: float  # peak AdamW learning rate
    skip_connections: bool = False  # the input to every layer, every layer to the output
    weight_decay: float = 0.1  # decoupled (AdamW) weight decay


# Smallest first; which one wins is decided per run, from this machine's measured speed and SCALING_LAW.
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
        scale = self.repeat_scale * smaller_corpus_factor(corpus_chars)
        return corpus_chars * (1 + scale * (1 - math.exp(-(chars / corpus_chars - 1) / scale)))

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
BUDGET_MOST_EPOCHS = 5.0  # the most passes planned over it (unless given --epochs): more scored worse
SMALLER_CORPUS_EXPONENT = 0.45  # k times less text: the repeat scale and the pass limit grow by k ** this,
SMALLEST_FITTED_CHARS = 90_000  # down to the smallest split it was fitted on, never extrapolated below it

BUDGET_PROBE_SHARE = 0.05  # the ladder is timed in at most this share of the budget,
BUDGET_PROBE_STEPS = (2, 20)  # each shape for this many steps (at least, at most) after an untimed one
BUDGET_PROBE_SECONDS = 1.0  # a shape is timed for at most this long once it has its fewest steps
PROBE_AVERAGE_DECAY = 0.99  # shapes are timed with a weight average (any decay: the same work)
PROBE_COST_MARGIN = 1.25  # a shape's timing is predicted from the last one's speed, with this margin

BUDGET_DROPOUT_FREE_EPOCHS = 2.0  # dropout grows with the passes a budget allows: none up to this many,
BUDGET_DROPOUT_PER_DOUBLING = 0.1  # then this much more per doubling of them,
BUDGET_DROPOUT_MAX = 0.4  # up to this;
BUDGET_DROPOUT_LEAST = 0.1  # less than this is none
BUDGET_DROPOUT_WIDTH = 64  # dropout's masks cost about this much width of time per character
BUDGET_WARMUP_SHARE = 0.1  # warm-up takes at most this share of a plan's steps
BUDGET_AVERAGE_SHARE = 0.1  # the weight average spans about this share of the run's steps,
BUDGET_AVERAGE_STEPS = (200, 1000)  # within these bounds

# The end: the time kept for the final evaluation and saves, and the evaluations during training.
CALIBRATION_SAMPLE = 32  # characters of a recorded sample timed to predict a whole sample's cost
SAVE_BYTES_PER_S = 100e6  # a conservative disk: what writing (and fsyncing) a checkpoint costs
FINAL_WORK_MARGIN = 1.05  # the estimate's safety factor
BUDGET_END_TOLERANCE = 0.03  # a run ends within this share of its budget, or its note says why it may not
BUDGET_EVALUATION_SHARE = 0.05  # of a time budget, at most this much goes to evaluations during training
BUDGET_EVALUATIONS = (3, 10)  # evaluations during a budgeted run: at least this many (else none), at most
BUDGET_GUARD_EPOCHS = 3.0  # a plan of fewer passes evaluates only at its end: none that short overfit
USEFUL_EPOCHS = 0.5  # a size the user gave that a budget trains less than this share of a pass is warned of


def smaller_corpus_factor(corpus_chars: float) -> float:
    """How much more a repeated pass over a split of ``corpus_chars`` is worth than over the law's."""
    return max(1.0, LAW_CORPUS_CHARS / max(corpus_chars, SMALLEST_FITTED_CHARS)) ** SMALLER_CORPUS_EXPONENT


def most_epochs(corpus_chars: float) -> float:
    """The most passes a time budget plans over a training split of ``corpus_chars``, to a tenth."""
    return round(BUDGET_MOST_EPOCHS * smaller_corpus_factor(corpus_chars), 1)


def overfitting_epochs(corpus_chars: float) -> float:
    """The passes over a split of ``corpus_chars`` from which runs were seen to overfit: 3 on tiny
    Shakespeare, growing as :func:`most_epochs` does (about 9 on 90,000 characters: shapes peaked at 7-9)."""
    return BUDGET_GUARD_EPOCHS * smaller_corpus_factor(corpus_chars)


@dataclass(frozen=True)
class Speed:
    """How fast this machine runs one shape."""

    train_chars_per_s: float  # training characters per second, optimiser and average included
    eval_chars_per_s: float  # validation characters scored per second (as every evaluation scores them)


@dataclass(frozen=True)
class Workload:
    """What a budget pays for besides training, its corpus, and the limits that may end the run sooner."""

    seconds: float  # the budget
    spent_s: float  # already gone when planning began (loading the corpus, and the command's start)
    probe_s: float  # spent measuring shapes
    train_chars: int  # characters in the training split
    val_chars: int  # characters in the validation split, scored at the end (twice with averaging)
    seq_len: int  # characters per segment: training comes in whole steps
    averaging: bool  # whether the run keeps a weight average, which the final evaluation scores too
    max_steps: int | None = None  # a step limit given beside the budget
    max_epochs: float | None = None  # an epoch limit given beside the budget
    eval_every: int | None = None  # steps between evaluations, given beside the budget: paid from it
    dropout: float | None = None  # the user's dropout, every shape timed with it; None: the plan chooses
    uniform_loss: float = math.inf  # ln(vocabulary size): no prediction is worse than guessing alike


@dataclass(frozen=True)
class Candidate:
    """One shape a time budget considered, and what it would make of the budget."""

    settings: dict[str, Any]  # hidden_size, batch_size, learning_rate, weight_decay (and skip_connections)
    num_layers: int  # stacked LSTM layers
    parameters: int  # its parameter count
    chars_per_s: float  # training throughput on this machine, as timed (without dropout, unless given)
    eval_chars_per_s: float  # evaluation throughput on this machine
    measured: bool  # False: estimated from the shapes measured before it (the probe's time ran out)
    estimable: bool  # measured, or estimated from measured shapes of its batch; False: not a candidate
    training_s: float  # seconds left to train once the probe, the final evaluation and saves are paid for
    chars: float  # characters it trains on: what the budget affords, within the step and epoch limits
    epochs: float  # passes over the training split that makes
    budget_epochs: float  # passes the budget's time alone would afford
    predicted_loss: float | None  # validation nats/char the scaling law expects; None: no time to train
    limit: str | None = None  # "epochs" or "max_steps" when that limit ends its run before the budget does
    precision: str = "fp32"  # the precision it trains in, and was (or would be) timed in
    evaluates: bool = True  # during training: it trains BUDGET_GUARD_EPOCHS passes, or eval_every was given
    dropout: float = 0.0  # the user's, else the plan's: dropout_for_epochs of its passes at dropout_speed
    speed_share: float = 1.0  # share of its timed speed it trains at: below 1 only with the plan's dropout
    end_s: float = 0.0  # the time kept for its final evaluation and saves
    users_limit: bool = False  # the limit that ends it sooner is one the user gave, not the plan's
    guessing: bool = False  # the law predicted worse than guessing alike (few characters): it predicts that

    def describe(self) -> str:
        return f"{self.num_layers}×{self.settings['hidden_size']} LSTM"

    @property
    def pays_for_its_end(self) -> bool:
        """Whether the budget ends its training, or the user's limit leaves it more training than its end."""
        training_s = self.chars / max(self.chars_per_s * self.speed_share, 1e-9)
        return not self.users_limit or self.end_s <= training_s


@dataclass(frozen=True)
class BudgetDecision:
    """What a time budget did to a run's shape, and why."""

    seconds: float  # the budget
    device: str  # the device type it was measured on
    precision: str  # the precision the chosen shape trains in (fp32 or bf16); others may train in another
    planned: bool  # False: no rule covers this run (another cell, layer norm, a fine-tune); plain defaults
    chosen: dict[str, Any]  # the fields set for the user (those they did not give)
    candidates: tuple[Candidate, ...] = ()  # every shape considered, smallest first
    probe_s: float = 0.0  # seconds spent measuring them, inside the budget
    unplanned_because: str = ""  # when not planned: why the run keeps the plain defaults, for the user
    tie_error = SCALING_LAW.rms_error  # predictions closer than this (nats/char, the rule's error) tie

    @property
    def choice(self) -> Candidate | None:
        """What :func:`choose` chooses: when no shape has time to train, the fastest."""
        return choose(self.candidates) if self.candidates else None

    def outranked(self) -> Candidate | None:
        """The lowest prediction, when :func:`choose` took another that ties with it."""
        return lowest if (lowest := _lowest(self.candidates)) is not self.choice else None

    def close_call(self) -> Candidate | None:
        """The best shape that trains unlike the choice (another batch or skip connections), when it
        predicts within the rule's error of the lowest: measured speeds vary, and may tip such a choice."""
        choice, outranked = self.choice, self.outranked()  # the outranked is named already, with why
        runner_up = _lowest(c for c in self.candidates
                            if c is not outranked and not _alike(c.settings, choice.settings))
        gap = runner_up.predicted_loss - _lowest(self.candidates).predicted_loss if runner_up else math.inf
        return runner_up if gap < self.tie_error else None

    def ends_early(self) -> bool:
        """Whether the choice stops at the plan's own pass limit (not the user's) before the budget's end."""
        return self.choice is not None and self.choice.limit == "epochs" and "epochs" in self.chosen

    def longer_plan(self) -> Candidate | None:
        """When the choice :meth:`ends_early`, the best shape that would train to the budget's end."""
        return _lowest(c for c in self.candidates if c.limit is None) if self.ends_early() else None

    def short_of_a_pass(self) -> str | None:
        """A warning when the budget trains a size the user gave under :data:`USEFUL_EPOCHS` of a pass."""
        choice = self.choice if self.planned and "hidden_size" not in self.chosen else None
        if choice is None or choice.epochs >= USEFUL_EPOCHS:
            return None
        return (f"warning: in {self.seconds:g} s the {choice.describe()} given trains {choice.epochs:.1f} "
                f"epochs here, under {USEFUL_EPOCHS:g} of a pass over the text: leave "
                f"{option('hidden_size')} to {option('time_budget')}, or give it more time")

    def to_dict(self) -> dict[str, Any]:
        """Every field, and the indices of the choice, the outranked, the close call and the longer plan."""
        def index(candidate: Candidate | None) -> int | None:
            return None if candidate is None else self.candidates.index(candidate)
        return {**asdict(self), "choice": index(self.choice), "outranked": index(self.outranked()),
                "close_call": index(self.close_call()), "ends_early": self.ends_early(),
                "longer_plan": index(self.longer_plan())}


def choose(candidates: tuple[Candidate, ...]) -> Candidate:
    """The lowest prediction, or a measured shape that trains alike and ties with it: the most passes where
    all pass :func:`overfitting_epochs`, else the largest unless a larger one predicts lower. A
    lowest that stops at its pass limit ties only with others that do; one the user's limit stops before a
    costlier end is passed over; the fastest when none can train (docs/defaults.md)."""
    best = _lowest(c for c in candidates if c.pays_for_its_end)
    if best is None:
        return candidates[0]
    # A shorter plan that predicts lower wins: its characters, capped by passes, do not hang on a timing.
    eligible = [c for c in candidates if c.pays_for_its_end and (c.limit is None) == (best.limit is None)]
    tied = [c for c in eligible if c is best or (
        c.measured and c.predicted_loss is not None and _alike(c.settings, best.settings)
        and c.predicted_loss - best.predicted_loss < SCALING_LAW.rms_error)]
    past = all(c.epochs and c.epochs >= overfitting_epochs(c.chars / c.epochs) for c in tied)
    if best.limit is None and past:  # where runs overfit, passes paid more than width
        return max(tied, key=lambda c: (c.epochs, c.parameters))
    undominated = [c for c in tied if not any(
        other.parameters > c.parameters and other.predicted_loss is not None
        and other.predicted_loss < c.predicted_loss for other in eligible)]
    return max(undominated, key=lambda c: c.parameters)


def _lowest(candidates: Iterable[Candidate]) -> Candidate | None:
    """The candidate with the lowest prediction (at a tie, one that trains to the end), if any trains."""
    return min((c for c in candidates if c.predicted_loss is not None),
               key=lambda c: (c.predicted_loss, c.limit is not None), default=None)


def _alike(one: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two shapes' settings differ only in size: only then does a larger, slower one predict worse."""
    return all(one.get(key, False) == other.get(key, False) for key in ("batch_size", "skip_connections"))


def dropout_for_epochs(epochs: float) -> float:
    """Dropout for ``epochs`` passes: more with every doubling, none below :data:`BUDGET_DROPOUT_LEAST`."""
    if epochs <= BUDGET_DROPOUT_FREE_EPOCHS:
        return 0.0
    grown = BUDGET_DROPOUT_PER_DOUBLING * math.log2(epochs / BUDGET_DROPOUT_FREE_EPOCHS)
    dropout = round(min(grown, BUDGET_DROPOUT_MAX) * 20) / 20  # in steps of 0.05
    return dropout if dropout >= BUDGET_DROPOUT_LEAST else 0.0


def dropout_speed(hidden_size: int) -> float:
    """The share of its speed timed without dropout that a shape of ``hidden_size`` trains at with it."""
    return hidden_size / (hidden_size + BUDGET_DROPOUT_WIDTH)


def average_decay_for_steps(steps: float) -> float:
    """The weight average's decay for a run of ``steps``: a span of about a tenth of the run."""
    low, high = BUDGET_AVERAGE_STEPS
    return round(1 - 1 / min(max(BUDGET_AVERAGE_SHARE * steps, low), high), 4)


def predict_candidates(shapes: list[tuple[dict[str, Any], int, int]], speeds: list[Speed | None],
                       workload: Workload, precisions: list[str] | None = None) -> tuple[Candidate, ...]:
    """Each shape's candidate; one not measured is estimated from measured ones of its batch and precision."""
    kinds = [(shape[0]["batch_size"], precision)
             for shape, precision in zip(shapes, precisions or ["fp32"] * len(shapes), strict=True)]
    if not any(speeds):
        raise CharrnnError("no shape of the time budget's ladder could be measured")
    left_s = workload.seconds - workload.spent_s - workload.probe_s
    candidates = []
    for (settings, layers, params), (_, precision), measured_speed in zip(shapes, kinds, speeds, strict=True):
        alike = [(shape[2], speed) for shape, kind, speed in zip(shapes, kinds, speeds, strict=True)
                 if speed and kind == (settings["batch_size"], precision)]
        if measured_speed is None and not alike:  # nothing to estimate it from: it neither runs nor trains
            candidates.append(Candidate(settings, layers, params, 0.0, 0.0, False, False, 0.0, 0.0, 0.0, 0.0,
                                        None, precision=precision, evaluates=False))
            continue
        speed = measured_speed or Speed(
            1 / _cost_line([(size, 1 / each.train_chars_per_s) for size, each in alike])(params),
            1 / _cost_line([(size, 1 / each.eval_chars_per_s) for size, each in alike])(params))
        saves = 2 * checkpoint_bytes(params, workload.averaging) / SAVE_BYTES_PER_S  # best.pt and last.pt
        end = BudgetEnd(workload.val_chars / speed.eval_chars_per_s, 2 if workload.averaging else 1, saves)
        dropout, share = workload.dropout or 0.0, 1.0
        trained = _trained(speed.train_chars_per_s, settings, workload, left_s, end)
        if workload.dropout is None:  # the plan's dropout, if the passes made at its cost call for it
            slowed_share = dropout_speed(settings["hidden_size"])
            slowed = _trained(slowed_share * speed.train_chars_per_s, settings, workload, left_s, end)
            if planned := dropout_for_epochs(slowed[1] / workload.train_chars):
                dropout, share, trained = planned, slowed_share, slowed
        training_s, chars, affordable, limit, evaluates = trained
        skip = settings.get("skip_connections", False)
        law = SCALING_LAW.predict(params, chars, workload.train_chars, skip) if chars else None
        predicted = None if law is None else min(workload.uniform_loss, law)  # never worse than guessing
        candidates.append(Candidate(
            settings, layers, params, chars_per_s=speed.train_chars_per_s,
            eval_chars_per_s=speed.eval_chars_per_s, measured=measured_speed is not None, estimable=True,
            training_s=training_s, chars=chars, epochs=chars / workload.train_chars, predicted_loss=predicted,
            budget_epochs=affordable / workload.train_chars, limit=limit, precision=precision,
            evaluates=evaluates, dropout=dropout, speed_share=share, end_s=end.reserve_s(),
            users_limit=limit == "max_steps" or (limit == "epochs" and workload.max_epochs is not None),
            guessing=law is not None and law > workload.uniform_loss))
    return tuple(candidates)


def _trained(chars_per_s: float, settings: dict[str, Any], workload: Workload, left_s: float,
             end: BudgetEnd) -> tuple[float, float, float, str | None, bool]:
    """What ``left_s`` seconds make at ``chars_per_s``: (training seconds, characters trained in whole
    steps, characters the time alone affords, the limit that ends it first, whether it evaluates)."""
    step_chars = settings["batch_size"] * workload.seq_len
    epoch_limit = most_epochs(workload.train_chars) if workload.max_epochs is None else workload.max_epochs
    limits = {"epochs": epoch_limit * workload.train_chars}
    if workload.max_steps is not None:
        limits["max_steps"] = workload.max_steps * step_chars
    limit = min(limits, key=limits.__getitem__)

    def training(training_s: float) -> tuple[float, float, float, str | None]:
        affordable = chars_per_s * training_s
        chars = min(affordable, limits[limit])
        chars -= chars % step_chars
        if not chars and limits[limit] < affordable and affordable >= step_chars:
            chars = step_chars  # a limit of less than a step: the run still trains one, as the loop does
        return training_s, chars, affordable, limit if limits[limit] < affordable else None

    available = max(left_s - end.reserve_s(), 0.0)
    if workload.eval_every is not None:
        evaluation_per_char = end.weight_sets * end.pass_s / (step_chars * workload.eval_every)
        return *training(available / (1 + chars_per_s * evaluation_per_char)), True
    trained = training(available * (1 - BUDGET_EVALUATION_SHARE))
    if trained[1] >= BUDGET_GUARD_EPOCHS * workload.train_chars:  # else no evaluations: their time trains
        return *trained, True
    return *training(available), False


def _cost_line(points: list[tuple[int, float]]) -> Callable[[float], float]:
    """Seconds per character against parameters, on the line through the last two points (or one and 0)."""
    (params_a, cost_a), (params_b, cost_b) = [(0, 0.0), *points][-2:]
    slope = max((cost_b - cost_a) / (params_b - params_a), 0.0) if params_b != params_a else 0.0
    intercept = cost_b - slope * params_b if len(points) > 1 else 0.0
    return lambda params: max(intercept + slope * params, 1e-12)


def measure_speed(model_config: ModelConfig, config: TrainConfig, vocab: Vocab, corpus: CorpusInfo,
                  train_ids: torch.Tensor, val_ids: torch.Tensor, limit_s: float,
                  clock: Callable[[], float] = time.perf_counter) -> Speed:
    """This shape's speed here: a throwaway run's steps in ``limit_s`` (after an untimed one), and a score."""
    run = TrainingRun(model_config, config, vocab, corpus,
                      StreamBatches(train_ids, config.batch_size, config.seq_len), group=ProcessGroup())
    # At the warm-up's rates, as the run starts: at its peak, an untrained 2×1280 saturates in a dozen steps
    # and its steps slow fourfold (docs/defaults.md).
    train_step(run, learning_rate_at(config, 0, 0.0))
    fewest, most = BUDGET_PROBE_STEPS
    started, steps, chars = clock(), 0, 0
    while steps < most and (steps < fewest or clock() - started < limit_s):
        steps += 1
        chars += train_step(run, learning_rate_at(config, steps, 0.0))[1]
    trained_s = clock() - started
    scoring_s = scoring_seconds(run.model, val_ids, clock)
    return Speed(chars / max(trained_s, 1e-9), (len(val_ids) - 1) / max(scoring_s, 1e-9))


def measuring_seconds(chars_per_s: float, chars_per_step: int, limit_s: float) -> float:
    """What :func:`measure_speed` takes to time a shape that trains ``chars_per_s``, with a margin."""
    step_s = chars_per_step / max(chars_per_s, 1e-9)
    fewest, most = BUDGET_PROBE_STEPS
    return PROBE_COST_MARGIN * (1 + min(max(math.ceil(limit_s / step_s), fewest), most)) * step_s


def plan_budget(seconds: float, given: dict[str, Any], config: TrainConfig, vocab: Vocab, corpus: CorpusInfo,
                train_ids: torch.Tensor, val_ids: torch.Tensor, group: ProcessGroup | None = None,
                clock: Callable[[], float] = time.perf_counter, started: float | None = None,
                measure: Callable[..., Speed] | None = None) -> BudgetDecision:
    """Time the ladder in :data:`BUDGET_PROBE_SHARE` of ``seconds`` and choose; all shapes keep ``given``."""
    group, measure = group or ProcessGroup(), measure or measure_speed
    # The first optimiser pays for torch's lazy import of its compiler: paid here, it is not mistaken for
    # the first shape's cost, from which the next shape's is predicted.
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])
    now, device = clock(), config.device.split(":")[0]
    trials = _trials(given, config, device, vocab, train_ids)
    shapes, precisions = [trial[0] for trial in trials], [trial[3] for trial in trials]
    workload = Workload(seconds, now - started if started is not None else 0.0, 0.0, len(train_ids),
                        len(val_ids), config.seq_len, given.get("ema_decay", 1.0) > 0, config.max_steps,
                        config.epochs, config.eval_every, given.get("dropout"), math.log(len(vocab)))
    speeds: list[Speed | None] = [None] * len(shapes)
    previous_loss, allowance = math.inf, BUDGET_PROBE_SHARE * seconds
    # Rank 0 times shapes, smallest first, while the next's predicted timing fits; all take its figures.
    for index, ((settings, _, params), trial_model, trial, _) in enumerate(trials if group.is_main else []):
        spent = clock() - now
        limit_s = min(BUDGET_PROBE_SECONDS, max(allowance - spent, 0.0))
        if index:  # predicted from the last one's speed: its own time may have gone on a cold start
            speed = speeds[index - 1].train_chars_per_s * shapes[index - 1][2] / params
            step_chars = trial.batch_size * trial.seq_len
            # What is left of the share, less the untimed step and the one that may overrun, with the margin.
            limit_s = min(BUDGET_PROBE_SECONDS, max(
                (allowance - spent) / PROBE_COST_MARGIN - 2 * step_chars / speed, 0.0))
            if spent + measuring_seconds(speed, step_chars, limit_s) > allowance:
                break
        speeds[index] = measure(trial_model, trial, vocab, corpus, train_ids, val_ids, limit_s, clock)
        estimate = predict_candidates(shapes[: index + 1], speeds[: index + 1],
                                      replace(workload, probe_s=clock() - now), precisions[: index + 1])[-1]
        loss = estimate.predicted_loss if estimate.predicted_loss is not None else math.inf
        # Worse than the one before, and all three (or the last two) train alike: larger ones would be too.
        if loss > previous_loss and all(_alike(shape[0], settings) for shape in shapes[index - 1: index + 2]):
            break
        if not estimate.pays_for_its_end:  # the user's limit leaves it less training than its end: larger
            break  # ones' ends cost more still
        previous_loss = loss
    figures = [value for speed in speeds for value in (astuple(speed) if speed else (0.0, 0.0))]
    *figures, probe_s = group.reduce([*figures, clock() - now], torch.device(config.device), op="max")
    speeds = [Speed(*figures[i: i + 2]) if figures[i] else None for i in range(0, len(figures), 2)]
    candidates = predict_candidates(shapes, speeds, replace(workload, probe_s=probe_s), precisions)
    choice = choose(candidates)
    steps = choice.chars / (choice.settings["batch_size"] * config.seq_len)
    chosen = {**choice.settings, "dropout": choice.dropout, "ema_decay": average_decay_for_steps(steps)}
    if config.epochs is None:  # even where the budget ends it sooner: a shape may train faster than timed
        chosen["epochs"] = most_epochs(len(train_ids))
    if steps * BUDGET_WARMUP_SHARE < config.warmup_steps:
        chosen["warmup_steps"] = max(1, int(steps * BUDGET_WARMUP_SHARE))
    chosen = {key: value for key, value in chosen.items() if key not in given}
    return BudgetDecision(seconds, device, choice.precision, True, chosen, candidates, probe_s)


def _trials(given: dict[str, Any], config: TrainConfig, device: str, vocab: Vocab, train_ids: torch.Tensor,
            ) -> list[tuple[tuple[dict[str, Any], int, int], ModelConfig, TrainConfig, str]]:
    """Each shape that fits the device and the corpus (none: the smallest one's error), with the
    configurations and precision it is timed in; in bf16 only the widths measured to learn in it."""
    trials, first_error = [], None
    for shape in _shapes(given, len(vocab)):
        model_options, train_options = split_options(shape[0])
        trial_model = ModelConfig(vocab_size=len(vocab), **{**split_options(given)[0], **model_options})
        trial = replace(config, **train_options, time_budget=None, max_steps=None, epochs=None,
                        ema_decay=given.get("ema_decay", PROBE_AVERAGE_DECAY))
        try:
            check_model_fits(trial_model, config.device, trial.batch_size, trial.seq_len)
            StreamBatches(train_ids, trial.batch_size, trial.seq_len)
        except CharrnnError as exc:
            first_error = first_error or exc
            continue
        trials.append((shape, trial_model, trial, resolve_precision(config.precision, device, trial_model)))
    if not trials:
        raise first_error
    return [trial for trial in trials
            if "hidden_size" in given or trial[3] != "bf16" or not too_wide_for_bf16(trial[1])]


def _shapes(given: dict[str, Any], vocab_size: int) -> list[tuple[dict[str, Any], int, int]]:
    """The ladder's rungs as (settings, layers, parameters), smallest first, with the user's settings."""
    rungs = ((min(BUDGET_LADDER, key=lambda rung: abs(math.log(rung.hidden_size / given["hidden_size"]))),)
             if "hidden_size" in given else BUDGET_LADDER)
    layers = given.get("num_layers", ModelConfig.__dataclass_fields__["num_layers"].default)
    shapes = []
    for rung in rungs:
        settings = {key: given.get(key, value) for key, value in asdict(rung).items()
                    if key != "skip_connections" or value}  # skip connections only where the rung has them
        if "skip_connections" in given:  # the law counts them, so settings say whether the shape has them
            settings["skip_connections"] = given["skip_connections"]
        if layers == 1:
            settings.pop("skip_connections", None)  # one layer has none to link
        options = {**split_options(given)[0], **split_options(settings)[0]}
        shapes.append((settings, layers, parameter_count(ModelConfig(vocab_size=vocab_size, **options))))
    return sorted(shapes, key=lambda shape: shape[2])


@dataclass(frozen=True)
class BudgetEnd:
    """What a time-budgeted run must plan for: what an evaluation costs, and the work at its end."""

    pass_s: float  # one pass of one set of weights over the whole validation split
    weight_sets: int  # sets of weights each evaluation scores: 2 with a weight average, else 1
    other_s: float = 0.0  # the saves of best.pt and last.pt, and a recorded sample when the run records them

    def evaluations(self, budget: float) -> int:
        """The evaluations :data:`BUDGET_EVALUATION_SHARE` of ``budget`` pays for, within its bounds."""
        each_s, (fewest, most) = self.weight_sets * self.pass_s, BUDGET_EVALUATIONS
        if each_s <= 0:  # not measured (a clock that stood still)
            return 0
        count = min(BUDGET_EVALUATION_SHARE * budget / each_s, most)  # a float: budgets may be vast
        return int(count) if count >= fewest else 0

    def reserve_s(self) -> float:
        """The time kept for the final evaluation, saves and sample, with :data:`FINAL_WORK_MARGIN`."""
        return FINAL_WORK_MARGIN * (self.weight_sets * self.pass_s + self.other_s)


def planned_speed(budget: BudgetDecision | None) -> float | None:
    """The training speed the run should see, dropout's cost included (None where nothing was timed)."""
    choice = budget.choice if budget is not None and budget.planned else None
    return choice.chars_per_s * choice.speed_share if choice is not None and choice.measured else None


def final_work_seconds(model: CharRNN, vocab: Vocab, config: TrainConfig, val_ids: torch.Tensor,
                       clock: Callable[[], float]) -> BudgetEnd:
    """What a budgeted run of ``model``'s shape pays for an evaluation, and for its end's saves and sample."""
    weight_sets = 2 if config.ema_decay > 0 else 1
    pass_s = scoring_seconds(model, val_ids, clock)
    parameters = sum(p.numel() for p in model.parameters())
    saving = 2 * checkpoint_bytes(parameters, averaging=weight_sets == 2) / SAVE_BYTES_PER_S
    sampling = 0.0
    if config.sample_every is not None or config.save_epochs:  # a recorded sample ends the run too
        started = clock()
        draw_sample(model, vocab, replace(config, sample_length=CALIBRATION_SAMPLE), 0, 0.0, 0.0, None)
        sampling = (clock() - started) * config.sample_length / CALIBRATION_SAMPLE
    return BudgetEnd(pass_s, weight_sets, saving + sampling)


def plan_budget_end(model_config: ModelConfig, config: TrainConfig, vocab: Vocab, val_ids: torch.Tensor,
                    group: ProcessGroup, clock: Callable[[], float], finish_s: float,
                    started: float | None = None, resumed: dict[str, Any] | None = None,
                    decision: BudgetDecision | None = None,
                    chosen_before: dict[str, Any] | None = None) -> BudgetEnding:
    """A budgeted run's end, measured on a model of its shape: the seconds kept (``finish_s`` included), when
    to evaluate, what to tell the user and the speed planned. A new run whose budget from ``started`` cannot
    pay for its end is refused; a resumed run with no time left raises :class:`RunAlreadyFinished`.
    ``chosen_before``: what a resumed run's budget chose, never told as the user's limit."""
    choice, chosen = (decision.choice, decision.chosen) if decision else (None, chosen_before or {})
    evaluates = choice is None or choice.evaluates  # during training (an unplanned budget's: it may)
    budget, device = config.time_budget, torch.device(config.device)
    val_ids, scored = scored_validation(val_ids, config.eval_chars)  # what every evaluation scores
    measured = (final_work_seconds(CharRNN(model_config).to(device), vocab, config, val_ids, clock)
                if group.is_main else BudgetEnd(0.0, 1))
    pass_s, other_s = group.reduce([measured.pass_s, measured.other_s], device, op="max")
    end = BudgetEnd(pass_s, 2 if config.ema_decay > 0 else 1, other_s)
    each_s = end.weight_sets * pass_s
    whole_run = end.evaluations(budget) if config.eval_every is None and evaluates else 0
    left_s = budget - resumed["elapsed_s"] if resumed is not None else budget
    count = int(whole_run * max(left_s, 0.0) / budget)  # a resumed run: what is left gets its share
    reserve = end.reserve_s() + finish_s
    if config.eval_every is not None:  # an evaluation on schedule may start just before training stops
        reserve += FINAL_WORK_MARGIN * each_s
    head = f"{option('time_budget')} {budget:g} s"
    # Kept whole, what follows the run (the command's exit) may take less: in a short budget that shows.
    after = (f" ({finish_s:g} s of it for what follows the run, such as the command's exit, which may take "
             f"less: a budget this short can end that much early)"
             if finish_s > BUDGET_END_TOLERANCE * budget else "")
    messages = [f"{head}: training stops about {reserve:.1f} s before the end, to evaluate and save "
                f"inside it{after}"]
    scores = "the whole validation split" if scored is None else f"the first {scored:,} validation characters"
    if count:
        each = f"about {each_s:.1f} s" if each_s >= 0.05 else "under 0.1 s"
        messages.append(f"{head}: {count} evaluations during training, evenly through it ({scores}, {each} "
                        f"each); best.pt keeps the best weights seen")
    elif config.eval_every is None:
        if whole_run:
            because = "too little of the budget is left"
        elif evaluates:
            because = (f"{BUDGET_EVALUATION_SHARE:.0%} of the budget pays for fewer than "
                       f"{BUDGET_EVALUATIONS[0]}")
        else:
            because = (f"with them its shape would train under {BUDGET_GUARD_EPOCHS:g} epochs, and no run "
                       f"that short was seen to overfit; their time trains it")
        messages.append(f"{head}: no evaluations during training ({because}); best.pt is scored at the end")
    messages += [f"{head} and {option(other)} {getattr(config, other):g}: the run stops at whichever comes "
                 f"first" for other in ("max_steps", "epochs")
                 if getattr(config, other) is not None and other not in chosen]
    spent_s = clock() - (clock() if started is None else started)  # this command's, before training
    if resumed is not None:  # one whose end this command's start leaves no time for has finished too
        finished = stop_reason(config, resumed["step"], resumed["progress_epochs"],
                               resumed["elapsed_s"] + spent_s + reserve)
        if finished is not None:
            raise RunAlreadyFinished(finished)
    elif spent_s + reserve >= budget:
        # Refused before anything is written (a large validation split or vocabulary scores slowly on a
        # CPU): overrunning the budget would break its promise.
        weights = " of the trained and the averaged weights" if config.ema_decay > 0 else ""
        raise CharrnnError(
            f"{head} cannot pay for this run's end: scoring the {len(val_ids) - 1:,} validation characters"
            f"{weights} and saving take about {reserve:.1f} s on this machine, and {spent_s:.1f} s have gone "
            f"on loading and measuring; give a budget well above {math.ceil(spent_s + reserve):d} s, or hold "
            f"out less text with {option('val_max_chars')} or {option('val_frac')} (now "
            f"{config.val_max_chars or 'none'} and {config.val_frac:g})")
    points = tuple(k / (count + 1) for k in range(1, count + 1))  # evenly through the run, not at its ends
    return BudgetEnding(reserve, points, tuple(messages), finish_s, planned_speed(decision))
