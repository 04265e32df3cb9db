"""The state of one training run (what :func:`~charrnn.training.loop.train_step` works on), turned into a
checkpoint dict and back exactly: a resumed run takes the steps an unbroken one would have."""

from __future__ import annotations

import contextlib
import math
import random
import uuid
from collections.abc import Iterator
from typing import Any

import torch

from charrnn.config import ModelConfig, TrainConfig
from charrnn.data.corpus import CorpusInfo, StreamBatches
from charrnn.data.vocab import Vocab
from charrnn.errors import CharrnnError
from charrnn.models.devices import resolve_precision
from charrnn.models.evaluate import EvalResult
from charrnn.models.model import CharRNN, detach_state
from charrnn.training.distributed import ProcessGroup
from charrnn.utils.hardware import cpu_has_native_bf16, machine_description


def restore_cuda_rng(states: list[torch.Tensor]) -> None:
    """Restore saved CUDA generator states onto this machine's GPUs, if any (the first ones, if fewer)."""
    for index, state in enumerate(states[: torch.cuda.device_count() if torch.cuda.is_available() else 0]):
        torch.cuda.set_rng_state(state, index)


@contextlib.contextmanager
def _refusing_to_resume(problem: str) -> Iterator[None]:
    """A saved state that will not load as "cannot resume: ``problem``" (Python's words help nobody)."""
    try:
        yield
    except (ValueError, KeyError, TypeError, RuntimeError, IndexError, AttributeError, OverflowError):
        raise CharrnnError(f"cannot resume: {problem}; the checkpoint is damaged") from None


def optimizer_for(model: CharRNN, config: TrainConfig, precision: str) -> torch.optim.Optimizer | CellMuon:
    """AdamW on every trained parameter of ``model``, or ``--optimizer muon``'s pair (:class:`CellMuon`)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if config.optimizer == "muon":
        # bfloat16 where it is native (emulated, a 2×512 step cost 62 AdamW steps: docs/defaults.md)
        native = precision == "bf16" and (torch.device(config.device).type == "cuda" or cpu_has_native_bf16())
        return CellMuon(model, params, config, torch.bfloat16 if native else torch.float32)
    return torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)


def _check_optimizer_state(saved: Any, fresh: dict[str, Any]) -> None:
    """Raise ValueError unless optimiser state ``saved`` is laid out as ``fresh``, a fresh step's: the same
    groups of the same parameters, and for each (or none: all steps skipped) finite tensors of its shapes."""
    if "param_groups" not in fresh:  # CellMuon: AdamW's state and Muon's
        if saved.keys() != fresh.keys():
            raise ValueError
        for key in fresh:
            _check_optimizer_state(saved[key], fresh[key])
        return
    if saved["state"] and saved["state"].keys() != fresh["state"].keys():
        raise ValueError
    for index, tensors in saved["state"].items():
        if tensors.keys() != fresh["state"][index].keys():
            raise ValueError
        for name, like in fresh["state"][index].items():
            tensor = tensors[name]
            if (tensor.shape != like.shape or tensor.dtype != like.dtype or not torch.isfinite(tensor).all()
                    # AdamW's step count, and the second moment whose root divides
                    or (name in ("step", "exp_avg_sq") and (tensor < 0).any())):
                raise ValueError
    if [group["params"] for group in saved["param_groups"]] != [g["params"] for g in fresh["param_groups"]]:
        raise ValueError


def load_moments(optimizer: torch.optim.Optimizer | CellMuon, saved: dict[str, Any]) -> None:
    """``saved``'s per-parameter state into ``optimizer``, whose settings (``muon_lr`` say) stay the run's."""
    settings = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    optimizer.load_state_dict(saved)
    for group, own in zip(optimizer.param_groups, settings, strict=True):
        group.update(own)


def check_resumable(payload: dict[str, Any], model_config: ModelConfig, config: TrainConfig,
                    steps_per_epoch: int) -> None:
    """Refuse, before a word of resuming is said, training state in ``payload`` that the run could not load
    or step with: each part loads into a weightless copy of the run (meta tensors), after its first step."""
    if not 0 <= payload["epoch_step"] < steps_per_epoch:
        raise CharrnnError(f"cannot resume: epoch_step {payload['epoch_step']} is outside this run's "
                           f"{steps_per_epoch} steps per epoch")
    with torch.device("meta"):
        model = CharRNN(model_config, initialise_weights=False)
    carried, expected = payload["carried_state"], model.initial_state(config.batch_size, "meta")
    shapes, needed = ([tuple(s.shape) for s in states] for states in (carried, expected))
    if shapes != needed:
        raise CharrnnError(f"cannot resume: carried_state has shapes {shapes}; this run needs {needed}")
    if not all(s.dtype == torch.float32 and bool(torch.isfinite(s).all()) for s in carried):
        raise CharrnnError("cannot resume: carried_state must hold finite float32 values; the checkpoint is "
                           "damaged")
    optimizer = optimizer_for(model, config, resolve_precision(config.precision, config.device, model_config))
    for param in model.parameters():
        param.grad = torch.zeros_like(param)
    optimizer.step()  # a fresh step: the state's layout that a saved one must have
    kind = "Muon and AdamW" if config.optimizer == "muon" else "AdamW"
    with _refusing_to_resume(f"optimizer_state is not {kind}'s state for this model"):
        _check_optimizer_state(payload["optimizer_state"], optimizer.state_dict())
        load_moments(optimizer, payload["optimizer_state"])  # its tensors copied onto the meta device
    if config.ema_decay > 0:
        with _refusing_to_resume("weight_average does not fit this model"):
            WeightAverage(model, config.ema_decay).load_state(payload["weight_average"])
    rng = payload["rng"]
    with _refusing_to_resume("rng is not the Python, torch and CUDA generator states charrnn saves"):
        version, internal, gauss = rng["python"]
        random.Random().setstate((version, tuple(internal), gauss))
        torch.Generator().set_state(rng["torch"])
        if not all(isinstance(s, torch.Tensor) and s.dtype == torch.uint8 for s in rng.get("cuda") or []):
            raise TypeError


class TrainingRun:
    """One run's mutable state; under torchrun this rank trains its block of the streams through DDP."""

    def __init__(self, model_config: ModelConfig, config: TrainConfig, vocab: Vocab, corpus: CorpusInfo,
                 batches: StreamBatches, initial_weights: dict[str, torch.Tensor] | None = None,
                 group: ProcessGroup | None = None):
        self.model_config, self.config, self.vocab = model_config, config, vocab
        self.corpus, self.batches = corpus, batches
        self.device = torch.device(config.device)
        self.precision = resolve_precision(config.precision, config.device, model_config)  # fp32 or bf16
        random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.model = CharRNN(model_config)
        if initial_weights is not None:
            self.model.load_pretrained(initial_weights)
        self.model.to(self.device)
        self.group = group if group is not None else ProcessGroup()
        self.rows = self.group.rows(config.batch_size)  # this rank's streams
        self.local_batch = config.batch_size // self.group.world_size
        # What training steps call (DDP across processes); checkpoints and evaluation use the model.
        self.step_module = self.group.wrap(self.model, self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        # The moving average of the weights, scored beside them at each evaluation (WeightAverage, below).
        self.average = WeightAverage(self.model, config.ema_decay) if config.ema_decay > 0 else None
        self.optimizer = optimizer_for(self.model, config, self.precision)
        self.max_norm = config.clip if config.clip > 0 and config.clip_mode == "norm" else float("inf")
        self.step = 0  # optimiser steps taken (skipped ones included)
        self.epochs_done = 0  # completed passes over the training split
        self.position = 0  # next step within the current epoch
        self.state = self.model.initial_state(self.local_batch, self.device)
        self.best: EvalResult | None = None
        self.best_is_average = False  # whether best.pt holds the averaged weights
        self.skipped = 0  # steps skipped for a non-finite loss or gradient
        self.bad_streak = 0  # consecutive skipped steps up to now
        self.run_id = uuid.uuid4().hex  # names the run directory's run in config.json and every checkpoint
        self.latest_eval: dict[str, Any] | None = None  # the last validation result, with its step

    @property
    def epoch(self) -> float:
        return self.epochs_done + self.position / len(self.batches)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next window's inputs and targets, (B, T) for this rank's streams; epochs start from zeros."""
        if self.position == 0:
            self.state = self.model.initial_state(self.local_batch, self.device)
        window = self.batches[self.position]
        if self.device.type == "cuda":  # through pinned memory, copied without blocking the host
            return tuple(part[self.rows].pin_memory().to(self.device, non_blocking=True) for part in window)
        return tuple(part[self.rows] for part in window)

    def clip_gradients(self) -> torch.Tensor:
        """Textbook notes §3: by norm, g ← g·v/‖g‖ when ‖g‖ > v (all parameters jointly); by value, each
        element clamped to ±v. Returns the norm before clipping: it tells whether the step is finite."""
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
        if self.config.clip_mode == "value" and self.config.clip > 0:
            torch.nn.utils.clip_grad_value_(self.params, self.config.clip)
        return grad_norm

    def agreed(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> tuple[float, float]:
        """The step's loss (averaged here) and gradient norm (already averaged), alike on every rank."""
        # One host transfer for both numbers: each sync stalls an accelerator's queue.
        loss_value, norm_value = torch.stack([loss.detach(), grad_norm.to(loss.dtype)]).tolist()
        return self.group.reduce([loss_value], self.device)[0] / self.group.world_size, norm_value

    def step_if_finite(self, learning_rate: float, loss: float, grad_norm: float) -> None:
        """The optimiser's step at ``learning_rate`` (and the weights' average), unless the loss or the
        gradient is NaN or infinite: such an update is never applied, only counted (textbook notes §3)."""
        if math.isfinite(loss) and math.isfinite(grad_norm):
            for param_group in self.optimizer.param_groups:
                param_group["lr"] = learning_rate * param_group.get("lr_ratio", 1.0)
            self.optimizer.step()
            if self.average is not None:
                self.average.update()
            self.bad_streak = 0
        else:
            self.skipped += 1
            self.bad_streak += 1

    def advance(self, state: tuple[torch.Tensor, ...]) -> None:
        """Carry ``state`` detached (backward stops at this window) into the next window, after a step."""
        self.state = detach_state(tuple(s.float() for s in state))
        self.step, self.position = self.step + 1, (self.position + 1) % len(self.batches)
        if self.position == 0:  # the epoch has ended
            self.epochs_done += 1

    def restore(self, payload: dict[str, Any]) -> None:
        """Go on exactly where ``payload`` (a checkpoint :func:`check_resumable` passed) left off, rng too."""
        # A best.pt that holds the averaged weights keeps the trained ones for training to go on from.
        self.model.load_state_dict(payload.get("training_weights") or payload["model_state"])
        load_moments(self.optimizer, payload["optimizer_state"])
        self.step, self.epochs_done, self.position = payload["step"], payload["epoch"], payload["epoch_step"]
        self.state = tuple(s[:, self.rows].to(self.device) for s in payload["carried_state"])
        self.best = EvalResult(**payload["best"]) if payload.get("best") else None
        self.best_is_average = bool(payload.get("best_is_average"))
        if self.average is not None:
            self.average.load_state(payload["weight_average"])
        self.skipped, self.latest_eval = payload.get("skipped_steps", 0), payload.get("latest_eval")
        self.run_id = payload.get("run_id", self.run_id)
        version, internal, gauss = payload["rng"]["python"]
        random.setstate((version, tuple(internal), gauss))
        torch.set_rng_state(payload["rng"]["torch"])
        restore_cuda_rng(payload["rng"].get("cuda") or [])

    def carried_state(self) -> tuple[torch.Tensor, ...]:
        """The hidden state of all ``batch_size`` streams (a collective: every rank must call it)."""
        return tuple(self.group.gather_rows(s, dim=1) for s in self.state)

    def payload(self, elapsed_s: float, carried_state: tuple[torch.Tensor, ...],
                averaged: bool = False) -> dict[str, Any]:
        """The checkpoint dict: all :meth:`restore` needs and readers want (``carried_state``: as all ranks
        gathered it); with ``averaged``, model_state holds the average, training_weights the trained."""
        weights = ({"model_state": self.average.weights, "training_weights": self.model.state_dict()}
                   if averaged else {"model_state": self.model.state_dict()})
        version, internal, gauss = random.getstate()  # as lists and ints for weights-only loading
        return {"run_id": self.run_id, "model_config": self.model_config.to_dict(),
                "train_config": self.config.to_dict(), "vocab": self.vocab.to_list(),
                "vocab_digest": self.vocab.digest(), **weights,
                "weight_average": self.average.state() if self.average is not None else None,
                "optimizer_state": self.optimizer.state_dict(), "step": self.step, "epoch": self.epochs_done,
                "epoch_step": self.position, "progress_epochs": self.epoch,
                "best": self.best.to_dict() if self.best else None, "best_is_average": self.best_is_average,
                "latest_eval": self.latest_eval, "skipped_steps": self.skipped, "elapsed_s": elapsed_s,
                "machine": machine_description(self.config.device), "carried_state": list(carried_state),
                "rng": {"python": [version, list(internal), gauss], "torch": torch.get_rng_state(),
                        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
                "corpus": self.corpus.to_dict()}


# ---------------------------------------------------------------------------- the weights' moving average
# An exponential moving average (EMA) of the weights (Polyak and Juditsky 1992). After applied optimiser
# step t (from 1), avg ← r·avg + (1 − r)·w with r = min(decay, (1 + t) / (10 + t)): the warm-up forgets the
# random initial weights fast. The average is scored, never trained (docs/techniques.md).
class WeightAverage:
    """The running average of ``model``'s weights (the same names and shapes as its state dict)."""

    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay = decay  # the rate r approaches as the warm-up ends
        self.updates = 0  # averaging steps taken (applied optimiser steps)
        live = model.state_dict()  # views of the model's own tensors, which training updates in place
        self.weights = {name: tensor.detach().clone() for name, tensor in live.items()}
        # The averages and the model's tensors in one order, for one fused update of them all.
        self._averages, self._live = list(self.weights.values()), [live[name] for name in self.weights]

    @torch.no_grad()
    def update(self) -> None:
        """Move the average towards the model's current weights (those it was made from, in place)."""
        t = self.updates + 1  # r: the decay, or less early in the run
        torch._foreach_lerp_(self._averages, self._live, 1 - min(self.decay, (1 + t) / (10 + t)))
        self.updates = t

    @contextlib.contextmanager
    def swapped_in(self, model: torch.nn.Module) -> Iterator[torch.nn.Module]:
        """``model`` holding the averaged weights for the ``with`` block, its own ones afterwards."""
        own = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
        model.load_state_dict(self.weights)
        try:
            yield model
        finally:
            model.load_state_dict(own)

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps to continue the average exactly."""
        return {"weights": self.weights, "updates": self.updates}

    def load_state(self, state: dict[str, Any]) -> None:
        if state.keys() != {"weights", "updates"} or state["weights"].keys() != self.weights.keys() or any(
                tensor.dtype != self.weights[name].dtype for name, tensor in state["weights"].items()):
            raise ValueError("the weight average does not fit this model")
        for name, tensor in state["weights"].items():
            self.weights[name].copy_(tensor)
        self.updates = int(state["updates"])


# Muon (Jordan et al. 2024): momentum orthogonalised by five steps of a quintic Newton–Schulz iteration, with
# its coefficients, for the recurrent layers' weight matrices (each gate stacked whole: 4H×H for an LSTM).
def orthogonalised(update: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``update`` (a matrix) with its singular values pushed near 1, computed in ``dtype``."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = update.to(dtype)
    wide = x.T if x.size(0) > x.size(1) else x  # the Gram matrix of the shorter side is the cheaper
    wide = wide / wide.norm().clamp(min=1e-7)
    for _ in range(5):
        gram = wide @ wide.T
        wide = torch.addmm(wide, torch.addmm(gram, gram, gram, beta=b, alpha=c), wide, beta=a)
    return (wide.T if x.size(0) > x.size(1) else wide).to(update.dtype)


class Muon(torch.optim.Optimizer):
    """Muon for 2-D parameters: Nesterov momentum, orthogonalised in ``dtype``, then decoupled weight decay.
    torch's own always orthogonalises in bfloat16, which most CPUs emulate."""

    def __init__(self, params: list[torch.Tensor], lr: float, weight_decay: float, dtype: torch.dtype,
                 momentum: float = 0.95):
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay, "momentum": momentum})
        self.dtype = dtype

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            for param in group["params"]:
                momentum = self.state[param].setdefault("momentum", torch.zeros_like(param))
                momentum.lerp_(param.grad, 1 - group["momentum"])
                update = orthogonalised(param.grad.lerp(momentum, group["momentum"]), self.dtype)
                param.mul_(1 - group["lr"] * group["weight_decay"])  # scaled as torch's Muon scales it
                param.add_(update, alpha=-group["lr"] * max(1.0, param.size(0) / param.size(1)) ** 0.5)


class CellMuon:
    """``--optimizer muon``: Muon on the recurrent layers' matrices, AdamW on the embedding, the biases and
    the read-out. Muon's rate keeps its ratio to AdamW's through the schedule (``lr_ratio``)."""

    def __init__(self, model: CharRNN, params: list[torch.Tensor], config: TrainConfig, dtype: torch.dtype):
        cells = {id(p) for p in model.rnn.parameters() if p.ndim == 2}
        ratio = config.muon_lr / config.learning_rate
        self.parts = (
            torch.optim.AdamW([p for p in params if id(p) not in cells], lr=config.learning_rate,
                              weight_decay=config.weight_decay),
            # Its decay divided by the ratio: each step shrinks every weight alike.
            Muon([p for p in params if id(p) in cells], config.muon_lr, config.weight_decay / ratio, dtype),
        )
        self.parts[1].param_groups[0]["lr_ratio"] = ratio

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [group for part in self.parts for group in part.param_groups]

    def step(self) -> None:
        for part in self.parts:
            part.step()

    def state_dict(self) -> dict[str, Any]:
        return {"adamw": self.parts[0].state_dict(), "muon": self.parts[1].state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for part, key in zip(self.parts, ("adamw", "muon"), strict=True):
            part.load_state_dict(state[key])
