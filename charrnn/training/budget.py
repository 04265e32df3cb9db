"""What a time budget trains (docs/defaults.md, "Time budgets"): the ladder's shapes timed, their losses
predicted by :data:`SCALING_LAW`, the best chosen and regularised for its passes; and how the run ends
(:func:`plan_budget_end`). Throughput is measured on this machine, never looked up, so a faster machine
or a longer budget moves the choice with no table to update."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from charrnn.config import ModelConfig, TrainConfig, split_options
from charrnn.data.corpus import CorpusInfo, StreamBatches, scored_validation
from charrnn.data.vocab import Vocab
from charrnn.errors import CharrnnError, option
from charrnn.models.devices import check_model_fits, resolve_precision, too_wide_for_bf16
from charrnn.models.evaluate import scoring_seconds
from charrnn.models.model import CharRNN, parameter_count
from charrnn.training.budget_rules import (
    BUDGET_AVERAGE_SHARE,
    BUDGET_AVERAGE_STEPS,
    BUDGET_DROPOUT_FREE_EPOCHS,
    BUDGET_DROPOUT_LEAST,
    BUDGET_DROPOUT_MAX,
    BUDGET_DROPOUT_PER_DOUBLING,
    BUDGET_DROPOUT_WIDTH,
    BUDGET_EVALUATION_SHARE,
    BUDGET_EVALUATIONS,
    BUDGET_GUARD_EPOCHS,
    BUDGET_LADDER,
    BUDGET_PROBE_SECONDS,
    BUDGET_PROBE_SHARE,
    BUDGET_PROBE_STEPS,
    BUDGET_WARMUP_SHARE,
    CALIBRATION_SAMPLE,
    FINAL_WORK_MARGIN,
    PROBE_AVERAGE_DECAY,
    PROBE_COST_MARGIN,
    SAVE_BYTES_PER_S,
    SCALING_LAW,
    ScalingLaw,
    most_epochs,
)
from charrnn.training.distributed import ProcessGroup
from charrnn.training.loop import draw_sample, train_step
from charrnn.training.rundir import checkpoint_bytes
from charrnn.training.schedule import BudgetEnding, RunAlreadyFinished, stop_reason
from charrnn.training.state import TrainingRun


@dataclass(frozen=True)
class Speed:
    """How fast this machine runs one shape."""

    train_chars_per_s: float  # training characters per second, optimiser and average included
    eval_chars_per_s: float  # validation characters scored per second (as every evaluation scores them)


@dataclass(frozen=True)
class Workload:
    """What a budget pays for besides training, the corpus it trains on, and the limits that may end
    the run sooner."""

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


@dataclass(frozen=True)
class Candidate:
    """One shape a time budget considered, and what it would make of the budget."""

    # hidden_size, batch_size, learning_rate, weight_decay (and skip_connections) it trains with
    settings: dict[str, Any]
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
    # Evaluates during training: it still trains BUDGET_GUARD_EPOCHS passes, or eval_every was given.
    evaluates: bool = True
    dropout: float = 0.0  # the user's, else the plan's: dropout_for_epochs of its passes at dropout_speed
    speed_share: float = 1.0  # share of its timed speed it trains at: below 1 only with the plan's dropout

    def describe(self) -> str:
        return f"{self.num_layers}×{self.settings['hidden_size']} LSTM"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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

    @property
    def choice(self) -> Candidate | None:
        """What :func:`choose` chooses: when no shape has time to train, the fastest."""
        return choose(self.candidates) if self.candidates else None

    @property
    def evaluates(self) -> bool:
        """Whether the run may evaluate during training (:attr:`Candidate.evaluates`); True when unplanned."""
        choice = self.choice
        return choice is None or choice.evaluates

    @property
    def tie_error(self) -> float:
        """Predictions closer than this (nats/char, the rule's error) tie."""
        return SCALING_LAW.rms_error

    def outranked(self) -> Candidate | None:
        """The lowest prediction, when :func:`choose` took another that ties with it (a larger one that
        trains alike, or one that trains to the budget's end)."""
        lowest = _lowest(self.candidates)
        return lowest if lowest is not None and lowest is not self.choice else None

    def close_call(self) -> Candidate | None:
        """The best shape that trains unlike the choice (another batch or skip connections), when it
        predicts within the rule's error of the lowest: measured speeds vary, and may tip such a choice."""
        choice, lowest = self.choice, _lowest(self.candidates)
        if choice is None or lowest is None:
            return None
        outranked = self.outranked()  # already named, with why it was passed over
        others = [c for c in self.candidates if c.predicted_loss is not None and c is not outranked
                  and not _alike(c.settings, choice.settings)]
        runner_up = min(others, key=lambda c: c.predicted_loss) if others else None
        if runner_up is None or runner_up.predicted_loss - lowest.predicted_loss >= SCALING_LAW.rms_error:
            return None
        return runner_up

    def ends_early(self) -> bool:
        """Whether the choice stops at the plan's own pass limit (:func:`most_epochs`) before the budget's
        end; a limit the user gave is theirs to lift."""
        choice = self.choice
        return choice is not None and choice.limit == "epochs" and "epochs" in self.chosen

    def longer_plan(self) -> Candidate | None:
        """When the choice :meth:`ends_early`, the best shape that would train to the budget's end (None
        when none would)."""
        if not self.ends_early():
            return None
        spending = [c for c in self.candidates if c.limit is None and c.predicted_loss is not None]
        return min(spending, key=lambda c: c.predicted_loss) if spending else None

    def to_dict(self) -> dict[str, Any]:
        """Every field, and the indices of the choice, the outranked, the close call and the longer plan."""
        def index(candidate: Candidate | None) -> int | None:
            return None if candidate is None else self.candidates.index(candidate)

        return {**dataclasses.asdict(self), "choice": index(self.choice),
                "outranked": index(self.outranked()), "close_call": index(self.close_call()),
                "ends_early": self.ends_early(), "longer_plan": index(self.longer_plan())}


def choose(candidates: tuple[Candidate, ...]) -> Candidate:
    """The lowest prediction, or the largest measured shape that trains alike and ties with it, unless a
    larger one predicts lower; the fastest when none can train. A tied shape stopping at its pass limit
    yields to one that trains to the budget's end, so the probe's wobble never decides how much of the
    budget trains (docs/defaults.md, "Choose")."""
    lowest = _lowest(candidates)
    if lowest is None:
        return candidates[0]
    spending = tuple(c for c in candidates if c.limit is None and c.predicted_loss is not None
                     and c.predicted_loss - lowest.predicted_loss < SCALING_LAW.rms_error)
    eligible = spending if lowest.limit is not None and spending else candidates
    best = _lowest(eligible)
    assert best is not None
    tied = [c for c in eligible if c is best or (
        c.measured and c.predicted_loss is not None and _alike(c.settings, best.settings)
        and c.predicted_loss - best.predicted_loss < SCALING_LAW.rms_error)]
    undominated = [c for c in tied if not any(
        other.parameters > c.parameters and other.predicted_loss is not None
        and other.predicted_loss < c.predicted_loss for other in eligible)]
    return max(undominated, key=lambda c: c.parameters)


def _lowest(candidates: tuple[Candidate, ...]) -> Candidate | None:
    """The candidate with the lowest prediction; None when none has time to train."""
    trained = [c for c in candidates if c.predicted_loss is not None]
    return min(trained, key=lambda c: c.predicted_loss) if trained else None


def dropout_for_epochs(epochs: float) -> float:
    """Dropout for ``epochs`` passes: more with every doubling, none below :data:`BUDGET_DROPOUT_LEAST`."""
    if epochs <= BUDGET_DROPOUT_FREE_EPOCHS:
        return 0.0
    grown = BUDGET_DROPOUT_PER_DOUBLING * math.log2(epochs / BUDGET_DROPOUT_FREE_EPOCHS)
    dropout = round(min(grown, BUDGET_DROPOUT_MAX) * 20) / 20  # in steps of 0.05
    return dropout if dropout >= BUDGET_DROPOUT_LEAST else 0.0


def dropout_speed(hidden_size: int) -> float:
    """The share of its speed timed without dropout that a shape trains at with it: the masks add about
    :data:`BUDGET_DROPOUT_WIDTH` to its width's work."""
    return hidden_size / (hidden_size + BUDGET_DROPOUT_WIDTH)


def average_decay_for_steps(steps: float) -> float:
    """The weight average's decay for a run of ``steps``: a span of about a tenth of the run."""
    low, high = BUDGET_AVERAGE_STEPS
    span = min(max(BUDGET_AVERAGE_SHARE * steps, low), high)
    return round(1 - 1 / span, 4)


def predict_candidates(shapes: list[tuple[dict[str, Any], int, int]], speeds: list[Speed | None],
                       workload: Workload, precisions: list[str] | None = None,
                       law: ScalingLaw = SCALING_LAW) -> tuple[Candidate, ...]:
    """Each shape's candidate; ``shapes`` are (settings, layers, parameters), smallest first. A shape not
    measured is estimated from measured ones of its batch and precision (:func:`_cost_line`; none: no
    candidate). Each trains in what the probe, its end and evaluations leave; the plan's dropout is taken
    only where the passes made at :func:`dropout_speed` still call for it."""
    precisions = precisions if precisions is not None else ["fp32"] * len(shapes)
    kinds = [(settings["batch_size"], precision) for (settings, _, _), precision in zip(shapes, precisions,
                                                                                         strict=True)]
    measured = [(kind, params, speed)
                for (_, _, params), kind, speed in zip(shapes, kinds, speeds, strict=True) if speed]
    if not measured:
        raise CharrnnError("no shape of the time budget's ladder could be measured")
    candidates = []
    for (settings, layers, params), kind, measured_speed in zip(shapes, kinds, speeds, strict=True):
        alike = [(size, speed) for each_kind, size, speed in measured if each_kind == kind]
        if measured_speed is None and not alike:
            candidates.append(Candidate(
                settings=settings, num_layers=layers, parameters=params, chars_per_s=0.0,
                eval_chars_per_s=0.0, measured=False, estimable=False, training_s=0.0, chars=0.0,
                epochs=0.0, budget_epochs=0.0, predicted_loss=None, precision=kind[1], evaluates=False))
            continue
        speed = measured_speed or Speed(
            1 / _cost_line([(size, 1 / each.train_chars_per_s) for size, each in alike])(params),
            1 / _cost_line([(size, 1 / each.eval_chars_per_s) for size, each in alike])(params))
        saves = 2 * checkpoint_bytes(params, workload.averaging) / SAVE_BYTES_PER_S  # best.pt and last.pt
        end = BudgetEnd(workload.val_chars / speed.eval_chars_per_s, 2 if workload.averaging else 1,
                        workload.val_chars, saves)
        left = workload.seconds - workload.spent_s - workload.probe_s
        dropout, share = workload.dropout or 0.0, 1.0
        trained = _trained(speed.train_chars_per_s, settings, workload, left, end)
        if workload.dropout is None:  # the plan's dropout, if the passes made at its cost call for it
            slowed_share = dropout_speed(settings["hidden_size"])
            slowed = _trained(slowed_share * speed.train_chars_per_s, settings, workload, left, end)
            planned = dropout_for_epochs(slowed[1] / workload.train_chars)
            if planned:
                dropout, share, trained = planned, slowed_share, slowed
        training_s, chars, affordable, limit, evaluates = trained
        skip = settings.get("skip_connections", False)
        candidates.append(Candidate(
            settings=settings, num_layers=layers, parameters=params, chars_per_s=speed.train_chars_per_s,
            eval_chars_per_s=speed.eval_chars_per_s, measured=measured_speed is not None, estimable=True,
            training_s=training_s, chars=chars, epochs=chars / workload.train_chars,
            budget_epochs=affordable / workload.train_chars,
            predicted_loss=law.predict(params, chars, workload.train_chars, skip) if chars else None,
            limit=limit, precision=kind[1], evaluates=evaluates, dropout=dropout,
            speed_share=share,
        ))
    return tuple(candidates)


def _trained(chars_per_s: float, settings: dict[str, Any], workload: Workload, left_s: float,
             end: BudgetEnd) -> tuple[float, float, float, str | None, bool]:
    """What ``left_s`` seconds make at ``chars_per_s``: (training seconds, characters trained, characters
    the time alone affords, the limit that ends it first, whether it evaluates during training). It
    evaluates when, keeping their time, it still trains :data:`BUDGET_GUARD_EPOCHS` passes, or
    ``eval_every`` was given; otherwise their time trains it."""
    available = max(left_s - end.reserve_s(), 0.0)
    if workload.eval_every is not None:
        evaluation_per_char = end.weight_sets * end.pass_s / (settings["batch_size"] * workload.seq_len
                                                              * workload.eval_every)
        training_s = available / (1 + chars_per_s * evaluation_per_char)
        return training_s, *_training(chars_per_s, settings, workload, training_s), True
    training_s = available * (1 - BUDGET_EVALUATION_SHARE)
    chars, affordable, limit = _training(chars_per_s, settings, workload, training_s)
    evaluates = chars >= BUDGET_GUARD_EPOCHS * workload.train_chars
    if not evaluates:
        training_s = available
        chars, affordable, limit = _training(chars_per_s, settings, workload, training_s)
    return training_s, chars, affordable, limit, evaluates


def _training(chars_per_s: float, settings: dict[str, Any], workload: Workload,
              training_s: float) -> tuple[float, float, str | None]:
    """What ``training_s`` seconds train at ``chars_per_s``: (the characters within the limits, the
    characters the time alone affords, the limit that ends the run first, if one does)."""
    step_chars = settings["batch_size"] * workload.seq_len
    affordable = chars_per_s * training_s
    epoch_limit = most_epochs(workload.train_chars) if workload.max_epochs is None else workload.max_epochs
    limits = {"epochs": epoch_limit * workload.train_chars}
    if workload.max_steps is not None:
        limits["max_steps"] = workload.max_steps * step_chars
    limit = min(limits, key=limits.__getitem__)
    chars = min(affordable, limits[limit])
    ends = limit if limits[limit] < affordable else None
    chars -= chars % step_chars  # whole steps
    if not chars and ends is not None and affordable >= step_chars:
        chars = step_chars  # a limit of less than a step: the run still trains one, as the loop does
    return chars, affordable, ends


def _cost_line(points: list[tuple[int, float]]) -> Callable[[float], float]:
    """Seconds per character against parameters: the line through the last two points, or through the
    origin and the only one; never falling with size, never below a picosecond."""
    if len(points) == 1:
        (params, cost), = points
        slope, intercept = cost / params, 0.0
    else:
        (params_a, cost_a), (params_b, cost_b) = points[-2:]
        slope = max((cost_b - cost_a) / (params_b - params_a), 0.0) if params_b != params_a else 0.0
        intercept = cost_b - slope * params_b
    return lambda params: max(intercept + slope * params, 1e-12)


def measure_speed(model_config: ModelConfig, config: TrainConfig, vocab: Vocab, corpus: CorpusInfo,
                  train_ids: torch.Tensor, val_ids: torch.Tensor, limit_s: float,
                  clock: Callable[[], float] = time.perf_counter) -> Speed:
    """How fast this machine trains and evaluates this shape: real steps of a throwaway run (the first
    untimed, since it pays for allocation and kernel selection), as many as ``limit_s`` allows within
    :data:`BUDGET_PROBE_STEPS`, then the scoring of the first validation characters."""
    run = TrainingRun(model_config, config, vocab, corpus,
                      StreamBatches(train_ids, config.batch_size, config.seq_len), group=ProcessGroup())
    train_step(run, config.learning_rate)
    fewest, most = BUDGET_PROBE_STEPS
    started, steps, chars = clock(), 0, 0
    while steps < most and (steps < fewest or clock() - started < limit_s):
        chars += train_step(run, config.learning_rate)[1]
        steps += 1
    trained = clock()
    scoring_s = scoring_seconds(run.model, val_ids, clock)
    return Speed(chars / max(trained - started, 1e-9), (len(val_ids) - 1) / max(scoring_s, 1e-9))


def measuring_seconds(chars_per_s: float, chars_per_step: int, limit_s: float) -> float:
    """What :func:`measure_speed` takes to time a shape that trains ``chars_per_s``, with
    :data:`PROBE_COST_MARGIN`: its untimed step, then its timed steps (at least the fewest of
    :data:`BUDGET_PROBE_STEPS`, and past ``limit_s`` by at most one, up to the most)."""
    step_s = chars_per_step / max(chars_per_s, 1e-9)
    fewest, most = BUDGET_PROBE_STEPS
    timed_steps = min(max(math.ceil(limit_s / step_s), fewest), most)
    return PROBE_COST_MARGIN * (1 + timed_steps) * step_s


def plan_budget(seconds: float, given: dict[str, Any], config: TrainConfig, vocab: Vocab,
                corpus: CorpusInfo, train_ids: torch.Tensor, val_ids: torch.Tensor,
                group: ProcessGroup | None = None, clock: Callable[[], float] = time.perf_counter,
                started: float | None = None, measure: Callable[..., Speed] | None = None) -> BudgetDecision:
    """Time the ladder within :data:`BUDGET_PROBE_SHARE` of ``seconds``, predict and choose (docs/defaults.md,
    "Time budgets"). ``given``: the user's options, kept in every shape; ``started``: a ``clock`` reading
    when the budget began. Shapes that cannot fit the device, the corpus or bf16 are left out. Under
    torchrun rank 0 times and every rank takes its figures."""
    group = group if group is not None else ProcessGroup()
    measure = measure if measure is not None else measure_speed
    # The first optimiser pays for torch's lazy import of its compiler: paid here, it is not mistaken for
    # the first shape's cost, from which the next shape's is predicted.
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])
    now = clock()
    spent_s = now - started if started is not None else 0.0
    model_options = split_options(given)[0]
    device = config.device.split(":")[0]
    trials = _fitting_trials(_shapes(given, len(vocab)), model_options, given, config, vocab, train_ids)
    precisions = [resolve_precision(config.precision, device, model) for _, model, _ in trials]
    if "hidden_size" not in given:  # bf16 asked for: only the widths measured to learn in it
        kept = [index for index, (_, model, _) in enumerate(trials)
                if precisions[index] != "bf16" or not too_wide_for_bf16(model)]
        trials, precisions = [trials[index] for index in kept], [precisions[index] for index in kept]
    shapes = [shape for shape, _, _ in trials]
    workload = Workload(seconds, spent_s, 0.0, len(train_ids), len(val_ids), config.seq_len,
                        averaging=given.get("ema_decay", 1.0) > 0, max_steps=config.max_steps,
                        max_epochs=config.epochs, eval_every=config.eval_every,
                        dropout=given.get("dropout"))
    speeds: list[Speed | None] = [None] * len(shapes)
    if group.is_main:
        def timed(model: ModelConfig, trial: TrainConfig, limit_s: float) -> Speed:
            return measure(model, trial, vocab, corpus, train_ids, val_ids, limit_s, clock)

        allowance = BUDGET_PROBE_SHARE * seconds
        speeds = _time_the_ladder(trials, precisions, workload, allowance, timed, clock, now)
    figures = [value for speed in speeds for value in (
        (speed.train_chars_per_s, speed.eval_chars_per_s) if speed else (0.0, 0.0))]
    *figures, probe_s = group.reduce([*figures, clock() - now], torch.device(config.device), op="max")
    speeds = [Speed(train, evaluation) if train else None for train, evaluation in zip(
        figures[::2], figures[1::2], strict=True)]
    candidates = predict_candidates(shapes, speeds, dataclasses.replace(workload, probe_s=probe_s),
                                    precisions)
    choice = choose(candidates)
    return BudgetDecision(seconds, device, choice.precision, planned=True,
                          chosen=_chosen_settings(choice, given, config, len(train_ids)),
                          candidates=candidates, probe_s=probe_s)


def _time_the_ladder(trials: list[tuple[tuple[dict[str, Any], int, int], ModelConfig, TrainConfig]],
                     precisions: list[str], workload: Workload, allowance: float,
                     measure: Callable[[ModelConfig, TrainConfig, float], Speed],
                     clock: Callable[[], float], started: float) -> list[Speed | None]:
    """Each shape's measured speed, smallest first, while the next one's predicted timing fits
    ``allowance`` seconds from ``started``; None for those left untimed. Timing stops at a shape that
    predicts worse than the one before when all three train alike: larger ones would too."""
    shapes = [shape for shape, _, _ in trials]
    speeds: list[Speed | None] = [None] * len(trials)
    previous_loss = math.inf
    for index, ((settings, _, params), trial_model, trial) in enumerate(trials):
        spent = clock() - started
        limit_s = min(BUDGET_PROBE_SECONDS, max(allowance - spent, 0.0))
        if index:
            previous = speeds[index - 1]
            assert previous is not None
            speed = previous.train_chars_per_s * shapes[index - 1][2] / params
            step_chars = trial.batch_size * trial.seq_len
            # What is left of the share, less the untimed step and the one that may overrun, with the margin.
            limit_s = min(BUDGET_PROBE_SECONDS, max(
                (allowance - spent) / PROBE_COST_MARGIN - 2 * step_chars / speed, 0.0))
            if spent + measuring_seconds(speed, step_chars, limit_s) > allowance:
                break
        speeds[index] = measure(trial_model, trial, limit_s)
        estimate = predict_candidates(shapes[: index + 1], speeds[: index + 1],
                                      dataclasses.replace(workload, probe_s=clock() - started),
                                      precisions[: index + 1])[-1]
        following = shapes[index + 1][0] if index + 1 < len(shapes) else settings
        loss = estimate.predicted_loss if estimate.predicted_loss is not None else math.inf
        alike_before = index > 0 and _alike(shapes[index - 1][0], settings)
        if alike_before and loss > previous_loss and _alike(following, settings):
            break
        previous_loss = loss
    return speeds


def _chosen_settings(choice: Candidate, given: dict[str, Any], config: TrainConfig,
                     train_chars: int) -> dict[str, Any]:
    """What the budget sets for the options not given: the shape, its regularisation, the pass limit and
    a warm-up within :data:`BUDGET_WARMUP_SHARE` of its steps."""
    steps = choice.chars / (choice.settings["batch_size"] * config.seq_len)
    chosen = {**choice.settings, "dropout": choice.dropout, "ema_decay": average_decay_for_steps(steps)}
    if config.epochs is None:  # even where the budget ends it sooner: a shape may train faster than timed
        chosen["epochs"] = most_epochs(train_chars)
    if steps * BUDGET_WARMUP_SHARE < config.warmup_steps:
        chosen["warmup_steps"] = max(1, int(steps * BUDGET_WARMUP_SHARE))
    return {key: value for key, value in chosen.items() if key not in given}


def _alike(settings: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two shapes differ only in size (same batch and skip connections): only then does a larger,
    slower one also predict worse."""
    return (settings["batch_size"] == other["batch_size"]
            and settings.get("skip_connections", False) == other.get("skip_connections", False))


def _fitting_trials(shapes: list[tuple[dict[str, Any], int, int]], model_options: dict[str, Any],
                    given: dict[str, Any], config: TrainConfig, vocab: Vocab,
                    train_ids: torch.Tensor) -> list[tuple[tuple[dict[str, Any], int, int], ModelConfig,
                                                           TrainConfig]]:
    """Each shape that fits the device and the corpus, with the configurations it is timed with; when
    none does, the smallest one's error is raised."""
    trials, first_error = [], None
    for shape in shapes:
        settings = shape[0]
        trial_model = ModelConfig(vocab_size=len(vocab), **{**model_options, **split_options(settings)[0]})
        trial = dataclasses.replace(config, **split_options(settings)[1], time_budget=None, max_steps=None,
                                    epochs=None, ema_decay=given.get("ema_decay", PROBE_AVERAGE_DECAY))
        try:
            check_model_fits(trial_model, config.device, trial.batch_size, trial.seq_len)
            StreamBatches(train_ids, trial.batch_size, trial.seq_len)
        except CharrnnError as exc:
            first_error = first_error or exc
            continue
        trials.append((shape, trial_model, trial))
    if not trials:
        raise first_error
    return trials


def _shapes(given: dict[str, Any], vocab_size: int) -> list[tuple[dict[str, Any], int, int]]:
    """The ladder's distinct rungs as (settings, layers, parameters), smallest first, the user's settings in
    place of the rung's. A size the user gave takes the settings of the rung nearest to it."""
    rungs = BUDGET_LADDER
    if "hidden_size" in given:
        rungs = (min(rungs, key=lambda rung: abs(math.log(rung.hidden_size / given["hidden_size"]))),)
    shapes, seen = [], set()
    for rung in rungs:
        settings = {key: given.get(key, value) for key, value in rung.settings().items()}
        if "skip_connections" in given:  # the law counts them, so settings say whether the shape has them
            settings["skip_connections"] = given["skip_connections"]
        layers = given.get("num_layers", ModelConfig.__dataclass_fields__["num_layers"].default)
        if layers == 1:
            settings.pop("skip_connections", None)  # one layer has none to link
        key = tuple(sorted(settings.items()))
        if key in seen:
            continue
        seen.add(key)
        model_options = {**split_options(given)[0], **split_options(settings)[0]}
        model = ModelConfig(vocab_size=vocab_size, **model_options)
        shapes.append((settings, layers, parameter_count(model)))
    return sorted(shapes, key=lambda shape: shape[2])


# ---------------------------------------------------------------------------- the budget's end




@dataclass(frozen=True)
class BudgetEnd:
    """What a time-budgeted run must plan for: what an evaluation costs, and the work at its end."""

    pass_s: float  # one pass of one set of weights over the whole validation split
    weight_sets: int  # sets of weights each evaluation scores: 2 with a weight average, else 1
    val_chars: int  # characters a pass over the whole validation split scores
    other_s: float = 0.0  # the saves of best.pt and last.pt, and a recorded sample when the run records them

    def evaluations(self, budget: float) -> int:
        """The evaluations :data:`BUDGET_EVALUATION_SHARE` of ``budget`` pays for, within
        :data:`BUDGET_EVALUATIONS` (none when fewer than its fewest fit)."""
        each_s = self.weight_sets * self.pass_s
        if each_s <= 0:  # not measured (a clock that stood still)
            return 0
        fewest, most = BUDGET_EVALUATIONS
        count = min(BUDGET_EVALUATION_SHARE * budget / each_s, most)  # a float: budgets may be vast
        return int(count) if count >= fewest else 0

    def reserve_s(self) -> float:
        """The time kept for the final evaluation, saves and sample, with :data:`FINAL_WORK_MARGIN`."""
        return FINAL_WORK_MARGIN * (self.weight_sets * self.pass_s + self.other_s)


def planned_speed(budget: BudgetDecision | None) -> float | None:
    """The training speed the run should see: its planned choice's timed speed, dropout's cost included
    (None where nothing was timed)."""
    choice = budget.choice if budget is not None and budget.planned else None
    return choice.chars_per_s * choice.speed_share if choice is not None and choice.measured else None


def evenly_spaced(count: int) -> tuple[float, ...]:
    """``count`` moments evenly through a run, as fractions of it, neither at its start nor its end."""
    return tuple(k / (count + 1) for k in range(1, count + 1))


def final_work_seconds(model: CharRNN, vocab: Vocab, config: TrainConfig, val_ids: torch.Tensor,
                       clock: Callable[[], float]) -> BudgetEnd:
    """What a budgeted run of ``model``'s shape pays for an evaluation, and for the saves of best.pt and
    last.pt and a recorded sample (timed on a few characters)."""
    weight_sets = 2 if config.ema_decay > 0 else 1
    if len(val_ids) < 2:
        return BudgetEnd(0.0, weight_sets, 0)
    pass_s = scoring_seconds(model, val_ids, clock)
    parameters = sum(p.numel() for p in model.parameters())
    saving = 2 * checkpoint_bytes(parameters, averaging=weight_sets == 2) / SAVE_BYTES_PER_S
    sampling = 0.0
    if config.sample_every is not None or config.save_epochs:  # a recorded sample ends the run too
        started = clock()
        draw_sample(model, vocab, dataclasses.replace(config, sample_length=CALIBRATION_SAMPLE), 0, 0.0, 0.0,
                    None)
        sampling = (clock() - started) * config.sample_length / CALIBRATION_SAMPLE
    return BudgetEnd(pass_s, weight_sets, len(val_ids) - 1, saving + sampling)


def plan_budget_end(model_config: ModelConfig, config: TrainConfig, vocab: Vocab, val_ids: torch.Tensor,
                    group: ProcessGroup, clock: Callable[[], float], finish_s: float,
                    started: float | None = None, resumed: dict[str, Any] | None = None,
                    evaluates: bool = True) -> BudgetEnding:
    """A budgeted run's end, measured on a model of its shape: the seconds kept (``finish_s`` included),
    when to evaluate during training (none without ``evaluates`` or with ``eval_every``) and what to tell
    the user. A new run whose budget from ``started`` cannot pay for its end is refused; a resumed run
    with no time left raises :class:`RunAlreadyFinished`."""
    budget = config.time_budget
    assert budget is not None
    device = torch.device(config.device)
    val_ids, scored = scored_validation(val_ids, config.eval_chars)  # what every evaluation scores
    model = CharRNN(model_config).to(device) if group.is_main else None
    measured = final_work_seconds(model, vocab, config, val_ids, clock) if model is not None else \
        BudgetEnd(0.0, 1, 0)
    pass_s, other_s = group.reduce([measured.pass_s, measured.other_s], device, op="max")
    end = BudgetEnd(pass_s, 2 if config.ema_decay > 0 else 1, len(val_ids) - 1, other_s)
    each_s = end.weight_sets * pass_s
    whole_run = end.evaluations(budget) if config.eval_every is None and evaluates else 0
    left_s = budget - resumed["elapsed_s"] if resumed is not None else budget
    count = int(whole_run * max(left_s, 0.0) / budget)  # a resumed run: what is left gets its share
    reserve = end.reserve_s() + finish_s
    if config.eval_every is not None:  # an evaluation on schedule may start just before training stops
        reserve += FINAL_WORK_MARGIN * each_s
    messages = [f"{option('time_budget')} {budget:g} s: training stops about {reserve:.1f} s before the end, "
                f"to evaluate and save inside it"]
    scores = "the whole validation split" if scored is None else f"the first {scored:,} validation characters"
    if count:
        each = f"about {each_s:.1f} s" if each_s >= 0.05 else "under 0.1 s"
        messages.append(f"{option('time_budget')} {budget:g} s: {count} evaluations during training, evenly "
                        f"through it ({scores}, {each} each); best.pt keeps the best weights seen")
    elif config.eval_every is None:
        if whole_run:
            because = "too little of the budget is left"
        elif evaluates:
            because = (f"{BUDGET_EVALUATION_SHARE:.0%} of the budget pays for fewer than "
                       f"{BUDGET_EVALUATIONS[0]}")
        else:
            because = (f"with them its shape would train under {BUDGET_GUARD_EPOCHS:g} epochs, and no run "
                       f"that short was seen to overfit; their time trains it")
        messages.append(f"{option('time_budget')} {budget:g} s: no evaluations during training ({because}); "
                        f"best.pt is scored at the end")
    for other in ("max_steps", "epochs"):
        if getattr(config, other) is not None:
            messages.append(f"{option('time_budget')} {budget:g} s and {option(other)} "
                            f"{getattr(config, other):g}: the run stops at whichever comes first")
    if resumed is not None:
        finished = stop_reason(config, resumed["step"], resumed["progress_epochs"],
                               resumed["elapsed_s"] + reserve)
        if finished is not None:
            raise RunAlreadyFinished(finished)
    else:
        refuse_an_end_past_the_budget(config, len(val_ids) - 1, config.ema_decay > 0,
                                      clock() - (clock() if started is None else started), reserve)
    return BudgetEnding(reserve, evenly_spaced(count), tuple(messages), finish_s)


def refuse_an_end_past_the_budget(config: TrainConfig, val_chars: int, averaging: bool, spent_s: float,
                                  reserve_s: float) -> None:
    """Refuse, before anything is written, a budget that cannot pay for its run's end (a large validation
    split or vocabulary scores slowly on a CPU): overrunning it would break its promise."""
    budget = config.time_budget
    assert budget is not None
    if spent_s + reserve_s < budget:
        return
    weights = " of the trained and the averaged weights" if averaging else ""
    raise CharrnnError(
        f"{option('time_budget')} {budget:g} s cannot pay for this run's end: scoring the {val_chars:,} "
        f"validation characters{weights} and saving take about {reserve_s:.1f} s on this machine, and "
        f"{spent_s:.1f} s have gone on loading and measuring; give a budget well above "
        f"{math.ceil(spent_s + reserve_s):d} s, or hold out less text with {option('val_max_chars')} or "
        f"{option('val_frac')} (now {config.val_max_chars or 'none'} and {config.val_frac:g})")
