"""The training loop: truncated BPTT, Adam, a warm-up + cosine schedule, clipping, evaluation.

Textbook notes §3: inputs are ``text[i : i+T]``, targets ``text[i+1 : i+T+1]``;
the final state of a segment is the initial state of the next, detached so that
backpropagation stops at the segment boundary; the state is reset at the start
of each epoch. Gradients are clipped by their global norm,
``g ← g · v / ‖g‖`` when ``‖g‖ > v``, and a step whose loss or gradient is not
finite is skipped rather than applied.

The loop reports through a :class:`TrainObserver`; it never prints by itself.
"""

from __future__ import annotations

import contextlib
import math
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from charrnn.config import ModelConfig, TrainConfig
from charrnn.data import CorpusInfo, Split, StreamBatches, split_ids
from charrnn.distributed import ProcessGroup
from charrnn.errors import CharrnnError
from charrnn.evaluate import EvalResult, evaluate
from charrnn.files import json_text, remove_stale_temporaries
from charrnn.hardware import available_host_memory
from charrnn.interrupt import GracefulStop
from charrnn.model import CharRNN, detach_state, parameter_count
from charrnn.rundir import (
    RunDirectory,
    check_free_space,
    epoch_checkpoint_name,
    new_run_id,
    prepare_out_dir,
)
from charrnn.runlock import RunLock
from charrnn.vocab import Vocab


def resolve_device(name: str) -> str:
    """Turn ``auto`` into ``cuda`` when a GPU is present, else ``cpu``; check explicit choices."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise CharrnnError("--device cuda was requested but no CUDA GPU is available")
    if name == "mps" and not torch.backends.mps.is_available():
        raise CharrnnError("--device mps was requested but MPS is not available")
    return name


def autocast(device: torch.device, precision: str):
    """bfloat16 autocast of the training forward pass for ``precision == "bf16"``; a no-op for fp32.

    Weights, optimiser state and the loss stay float32, so checkpoints are the same either way.
    """
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


@dataclass
class StepReport:
    step: int  # optimiser steps done
    epoch: float  # passes over the training split done, fractional
    loss: float  # training loss of this step (nats/char)
    learning_rate: float  # learning rate applied at this step
    chars_per_s: float  # training throughput since the last report
    progress: float | None  # fraction of the run done, when a stopping criterion is set
    skipped_steps: int  # steps skipped so far for a non-finite loss or gradient


@dataclass
class TrainResult:
    out_dir: Path  # where checkpoints and logs were written
    steps: int  # optimiser steps done
    epoch: float  # passes over the training split done
    best_val_loss: float  # lowest validation nats/char seen
    best: EvalResult  # the evaluation that produced best.pt
    elapsed_s: float  # wall time of the loop, evaluations included
    stop_reason: str  # which criterion ended the run
    skipped_steps: int  # steps skipped for non-finite values
    epoch_checkpoints: list[Path]  # the --save-epochs checkpoints this call wrote


class TrainingInterrupted(Exception):
    """A signal stopped the run after a step; ``checkpoint`` holds a resumable state."""

    def __init__(self, signal_name: str, checkpoint: Path, step: int):
        super().__init__(f"interrupted by {signal_name} after step {step:,}; saved {checkpoint}")
        self.signal_name = signal_name
        self.checkpoint = checkpoint
        self.step = step


class TrainObserver:
    """Hooks the loop calls; the default does nothing. The CLI's draws a progress bar."""

    def on_start(self, model: CharRNN, model_config: ModelConfig, config: TrainConfig,
                 corpus: CorpusInfo, steps_per_epoch: int, total_steps: int | None, first_step: int) -> None:
        pass

    def on_step(self, report: StepReport) -> None:
        pass

    def on_eval(self, record: dict[str, Any]) -> None:
        pass

    def on_end(self, completed: bool) -> None:
        """``completed`` is False when an error or a signal cut the run short."""


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


def stop_reason(config: TrainConfig, step: int, epoch: float, elapsed: float) -> str | None:
    if config.max_steps is not None and step >= config.max_steps:
        return f"reached --max-steps {config.max_steps}"
    if config.epochs is not None and epoch >= config.epochs - 1e-9:
        return f"reached --epochs {config.epochs:g}"
    if config.time_budget is not None and elapsed >= config.time_budget:
        return f"used the --time-budget of {config.time_budget:g} s"
    return None


def checkpoint_bytes(model: CharRNN) -> int:
    """Roughly what one checkpoint takes on disk: float32 weights, Adam's two moments, a margin."""
    return 3 * 4 * sum(p.numel() for p in model.parameters()) + (1 << 20)


TRAINING_BYTES_PER_PARAMETER = 16  # float32 weights, gradients and Adam's two moments


def check_model_fits(model_config: ModelConfig, config: TrainConfig) -> None:
    """Refuse, before allocating anything, a model whose training state cannot fit in memory."""
    count = parameter_count(model_config)
    needed = count * TRAINING_BYTES_PER_PARAMETER
    device = torch.device(config.device)
    if device.type == "cuda":
        available = torch.cuda.mem_get_info(device)[0]
    elif device.type == "cpu":
        available = available_host_memory()
    else:
        available = None
    if available is not None and needed > available:
        raise CharrnnError(
            f"the model has {count:,} parameters, and training it needs about {needed / 2**30:,.1f} GiB "
            f"(weights, gradients and Adam's moments) before any activations; {config.device} has "
            f"{available / 2**30:,.1f} GiB available. Choose a smaller --hidden, --embed or --layers"
        )


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def restore_cuda_rng(states: list[torch.Tensor]) -> None:
    """Restore saved CUDA generator states, one per GPU, onto the GPUs this machine has.

    A run saved on more GPUs than are present restores the first ones; one saved without
    a GPU (no states) or resumed without one leaves the CUDA generators as they are.
    """
    if not states or not torch.cuda.is_available():
        return
    for index, state in enumerate(states[: torch.cuda.device_count()]):
        torch.cuda.set_rng_state(state, index)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:120] if text else type(exc).__name__


def _plain_python_rng_state(state: tuple) -> list:
    """``random.getstate()`` as lists and ints, which weights-only loading accepts."""
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _python_rng_state(plain: list) -> tuple:
    version, internal, gauss = plain
    return version, tuple(internal), gauss


class TrainingRun:
    """The mutable state of one run: model, optimiser, place in the data, best result so far.

    ``advance()`` takes one truncated-BPTT step; ``payload()`` is the checkpoint dict.
    With a process ``group`` this rank trains its own block of the streams through
    DistributedDataParallel (see :mod:`charrnn.distributed`).
    """

    def __init__(self, model_config: ModelConfig, config: TrainConfig, vocab: Vocab, corpus: CorpusInfo,
                 batches: StreamBatches, initial_weights: dict[str, torch.Tensor] | None = None,
                 group: ProcessGroup | None = None):
        self.model_config = model_config
        self.config = config
        self.vocab = vocab
        self.corpus = corpus
        self.batches = batches
        self.device = torch.device(config.device)
        # Host batches reach a GPU through pinned memory, copied without blocking the host.
        self.pin_batches = self.device.type == "cuda"
        seed_everything(config.seed)
        self.model = CharRNN(model_config)
        if initial_weights is not None:
            self.model.load_pretrained(initial_weights)
        self.model.to(self.device)
        self.group = group
        self.rows = group.rows(config.batch_size) if group else slice(None)  # this rank's streams
        self.local_batch = config.batch_size // (group.world_size if group else 1)
        # The module that training steps call; checkpoints and evaluation use self.model itself.
        self.trained: torch.nn.Module = self.model
        if group is not None:
            self.trained = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=config.learning_rate,
                                           weight_decay=config.weight_decay)
        self.max_norm = config.clip if config.clip > 0 and config.clip_mode == "norm" else float("inf")
        self.step = 0  # optimiser steps taken (skipped ones included)
        self.epochs_done = 0  # completed passes over the training split
        self.position = 0  # next step within the current epoch
        self.state = self.model.initial_state(self.local_batch, self.device)
        self.best: EvalResult | None = None
        self.skipped = 0  # steps skipped for a non-finite loss or gradient
        self.bad_streak = 0  # consecutive skipped steps up to now
        self.run_id = new_run_id()  # names the run directory's run in config.json and every checkpoint
        self.latest_eval: dict[str, Any] | None = None  # the last validation result, with its step

    @property
    def epoch(self) -> float:
        return self.epochs_done + self.position / len(self.batches)

    def advance(self, learning_rate: float) -> tuple[float, int]:
        """One step at ``learning_rate``: its training loss (nats/char, maybe non-finite) and characters."""
        if self.position == 0:
            self.state = self.model.initial_state(self.local_batch, self.device)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        inputs, targets = (
            window[self.rows].pin_memory().to(self.device, non_blocking=True) if self.pin_batches
            else window[self.rows]
            for window in self.batches[self.position]
        )  # (B, T) each, B this rank's streams
        self.model.train()
        with autocast(self.device, self.config.precision):
            logits, state = self.trained(inputs, self.state)  # (B, T, V)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
        # Without the detach, the next segment's backward pass would run on into this one.
        self.state = detach_state(tuple(s.float() for s in state))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # Textbook notes §3: by norm, g ← g·v/‖g‖ when ‖g‖ > v (all parameters jointly);
        # by value, each element clamped to ±v. The norm also tells whether the step is finite.
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
        if self.config.clip_mode == "value" and self.config.clip > 0:
            torch.nn.utils.clip_grad_value_(self.params, self.config.clip)
        # One host transfer for both numbers: each sync stalls an accelerator's queue.
        loss_value, norm_value = torch.stack([loss.detach(), grad_norm.to(loss.dtype)]).tolist()
        if self.group is not None:
            # The gradients (so their norm) are already averaged; the loss is made global too,
            # so that every rank takes the same decision to apply or skip this step.
            loss_value = self.group.reduce([loss_value], self.device)[0] / self.group.world_size
        if math.isfinite(loss_value) and math.isfinite(norm_value):
            self.optimizer.step()
            self.bad_streak = 0
        else:
            # Never apply a NaN or infinite update (textbook notes §3): skip it and count it.
            self.skipped += 1
            self.bad_streak += 1
        self.step += 1
        self.position += 1
        if self.position == len(self.batches):
            self.position = 0
            self.epochs_done += 1
        return loss_value, inputs.numel() * (self.group.world_size if self.group else 1)

    def restore(self, payload: dict[str, Any]) -> None:
        """Continue exactly where ``payload`` (a checkpoint of this run) left off.

        Weights, optimiser moments, position in the data, the carried hidden state,
        the best result and every random generator come back as they were, so the
        continued run takes the same steps an uninterrupted one would have.
        """
        if not 0 <= payload["epoch_step"] < len(self.batches):
            raise CharrnnError(f"cannot resume: epoch_step {payload['epoch_step']} is outside this run's "
                               f"{len(self.batches)} steps per epoch")
        carried = payload["carried_state"]
        expected = tuple(s.shape for s in self.model.initial_state(self.config.batch_size, "meta"))
        if tuple(tuple(s.shape) for s in carried) != tuple(tuple(shape) for shape in expected):
            raise CharrnnError(f"cannot resume: carried_state has shapes {[tuple(s.shape) for s in carried]};"
                               f" this run needs {[tuple(shape) for shape in expected]}")
        self.model.load_state_dict(payload["model_state"])
        try:
            self.optimizer.load_state_dict(payload["optimizer_state"])
        except (ValueError, KeyError, TypeError, RuntimeError, IndexError) as exc:
            raise CharrnnError(f"cannot resume: optimizer_state does not fit this model ({_first_line(exc)})"
                               ) from None
        self.step = payload["step"]
        self.epochs_done = payload["epoch"]
        self.position = payload["epoch_step"]
        self.state = tuple(s[:, self.rows].to(self.device) for s in carried)
        self.best = EvalResult(**payload["best"]) if payload.get("best") else None
        self.skipped = payload.get("skipped_steps", 0)
        self.run_id = payload.get("run_id", self.run_id)
        self.latest_eval = payload.get("latest_eval")
        rng = payload["rng"]
        try:
            random.setstate(_python_rng_state(rng["python"]))
            torch.set_rng_state(rng["torch"])
            restore_cuda_rng(rng.get("cuda") or [])
        except (ValueError, KeyError, TypeError, RuntimeError, IndexError) as exc:
            raise CharrnnError(f"cannot resume: rng holds no valid generator state ({_first_line(exc)})"
                               ) from None

    def carried_state(self) -> tuple[torch.Tensor, ...]:
        """The hidden state of all ``batch_size`` streams (a collective: every rank must call it)."""
        if self.group is None:
            return self.state
        return tuple(self.group.gather_rows(s, dim=1) for s in self.state)

    def payload(self, elapsed_s: float, carried_state: tuple[torch.Tensor, ...]) -> dict[str, Any]:
        """The checkpoint dict: everything :meth:`restore` needs, plus what readers want to know.

        ``carried_state`` is :meth:`carried_state`'s result, gathered by every rank beforehand.
        """
        return {
            "run_id": self.run_id,
            "model_config": self.model_config.to_dict(),
            "train_config": self.config.to_dict(),
            "vocab": self.vocab.to_list(),
            "vocab_digest": self.vocab.digest(),
            "model_state": self.model.state_dict(),
            "optimizer_state": self.optimizer.state_dict(),
            "step": self.step,
            "epoch": self.epochs_done,
            "epoch_step": self.position,
            "progress_epochs": self.epoch,
            "best_val_loss": self.best.nats_per_char if self.best else None,
            "best": self.best.to_dict() if self.best else None,
            "latest_eval": self.latest_eval,
            "skipped_steps": self.skipped,
            "elapsed_s": elapsed_s,
            "carried_state": list(carried_state),
            "rng": {
                "python": _plain_python_rng_state(random.getstate()),
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            },
            "corpus": self.corpus.to_dict(),
        }


def _agree(run: TrainingRun, stop: GracefulStop | None, elapsed: float) -> tuple[str | None, float]:
    """The stop signal, if any rank received one, and rank 0's clock: the same on every rank.

    Every decision that depends on them (the learning rate, when to stop, evaluate
    and save) must be taken identically by all ranks, or their collectives would
    no longer pair up. Alone, they are this process's own.
    """
    signal_name = stop.signal_name if stop is not None else None
    if run.group is None:
        return signal_name, elapsed
    number = signal.Signals[signal_name].value if signal_name else 0
    number, elapsed = run.group.reduce([number, elapsed if run.group.is_main else 0.0], run.device, op="max")
    return (signal.Signals(int(number)).name if number else None), elapsed


def _train_loop(run: TrainingRun, config: TrainConfig, val_ids: torch.Tensor, observer: TrainObserver,
                stop: GracefulStop | None, elapsed_before: float,
                run_dir: RunDirectory | None) -> tuple[str, float]:
    """Step, evaluate, log and save until a stopping criterion or a signal; return why, and when.

    With a process group, rank 0 alone evaluates and writes (``run_dir`` is None
    elsewhere); every rank steps.
    """
    out_dir = Path(config.out_dir)
    main = run_dir is not None
    loss_sum, loss_count = 0.0, 0
    window_chars, window_start = 0, time.perf_counter()
    start = time.perf_counter() - elapsed_before
    elapsed = elapsed_before
    reason: str | None = None
    while reason is None:
        lr = learning_rate_at(config, run.step, run_progress(config, run.step, run.epoch, elapsed))
        loss, chars = run.advance(lr)
        if run.bad_streak >= config.max_bad_steps:
            raise CharrnnError(
                f"training stopped at step {run.step:,}: {run.bad_streak} consecutive steps had a "
                f"non-finite loss or gradient; the checkpoints in {out_dir} keep the last good state; "
                f"try a lower --lr (now {config.learning_rate:g})"
            )
        if math.isfinite(loss):
            loss_sum += loss
            loss_count += 1
        window_chars += chars
        now = time.perf_counter()
        signal_name, elapsed = _agree(run, stop, now - start)
        reason = f"interrupted by {signal_name}" if signal_name else stop_reason(
            config, run.step, run.epoch, elapsed)
        observer.on_step(StepReport(
            step=run.step, epoch=run.epoch, loss=loss, learning_rate=lr,
            chars_per_s=window_chars / max(now - window_start, 1e-9),
            progress=run_progress(config, run.step, run.epoch, elapsed), skipped_steps=run.skipped,
        ))

        epoch_end = run.position == 0 and run.epochs_done in config.save_epochs
        # An interrupted run saves at once: the user is waiting.
        interval = config.evaluation_interval
        scheduled = (interval is not None and run.step % interval == 0) or reason is not None or epoch_end
        evaluating = scheduled and not signal_name
        saving = run.step % config.save_every == 0 or reason is not None
        carried = run.carried_state() if evaluating or saving else None
        if evaluating and main:
            result = evaluate(run.model, val_ids)  # in float32 whatever the precision: exact scores
            run.latest_eval = {"step": run.step, **result.to_dict()}
            record = {
                "step": run.step,
                "epoch": round(run.epoch, 4),
                "train_loss": loss_sum / loss_count if loss_count else None,
                "val_loss": result.nats_per_char,
                "val_bits_per_char": result.bits_per_char,
                "learning_rate": lr,
                "chars_per_s": window_chars / max(now - window_start, 1e-9),
                "elapsed_s": round(time.perf_counter() - start, 3),
            }
            improved = run.best is None or result.nats_per_char < run.best.nats_per_char
            if improved:
                run.best = result
                run_dir.save("best.pt", run.payload(elapsed, carried))
            if epoch_end:
                record["epoch_checkpoint"] = epoch_checkpoint_name(run.epochs_done, result.nats_per_char)
                run_dir.save(record["epoch_checkpoint"], run.payload(elapsed, carried))
            run_dir.append_metrics(json_text(record))
            observer.on_eval({**record, "best": improved})
        if evaluating:
            loss_sum, loss_count = 0.0, 0
            window_chars, window_start = 0, time.perf_counter()
        if saving and main:
            run_dir.save("last.pt", run.payload(elapsed, carried))
    return reason, time.perf_counter() - start


def train(
    model_config: ModelConfig,
    config: TrainConfig,
    vocab: Vocab,
    ids: torch.Tensor,
    corpus: CorpusInfo,
    observer: TrainObserver | None = None,
    overwrite: bool = False,
    resume_from: dict[str, Any] | None = None,
    stop: GracefulStop | None = None,
    initial_weights: dict[str, torch.Tensor] | None = None,
    group: ProcessGroup | None = None,
    branch_history: list[str] | None = None,
) -> TrainResult:
    """Train a new model on ``ids`` (the encoded corpus) and write the run to ``config.out_dir``.

    An existing run in ``config.out_dir`` is replaced only when ``overwrite`` is set,
    and only once the new run writes its first file (see :mod:`charrnn.rundir`).
    With ``resume_from`` (a checkpoint of the run in ``config.out_dir``, see
    :func:`resume_config` and :func:`charrnn.rundir.resume_target`) training
    continues from it exactly, appending to ``metrics.jsonl``. With
    ``branch_history`` as well, ``config.out_dir`` is a new directory (a branch):
    the run continues there from the checkpoint under a new run id, its
    ``metrics.jsonl`` starting with those lines, and its ``best.pt`` the best of
    the branch. When ``stop`` reports a signal, the current step finishes,
    ``last.pt`` is written and :class:`TrainingInterrupted` is raised. After
    ``config.max_bad_steps`` consecutive non-finite steps, training stops with an
    error and the checkpoints written so far are left as they were.
    ``initial_weights`` (a checkpoint's ``model_state``) start a fine-tuning run
    from a trained model with a fresh optimiser; see :meth:`CharRNN.load_pretrained`.
    With a process ``group`` (torchrun), every rank calls this with the same
    arguments; rank 0 alone touches ``config.out_dir`` and reports to ``observer``.

    ids: (N,) integer ids of the whole corpus; from ``corpus.split_point`` on, it is validation.
    """
    main = group is None or group.is_main
    observer = observer if observer is not None and main else TrainObserver()
    out_dir = Path(config.out_dir)
    split: Split = split_ids(ids, corpus.split_point)
    if len(split.val) < 2:
        raise CharrnnError(
            f"the validation split has {len(split.val)} character(s); it needs at least 2 "
            f"(use a longer corpus or a larger --val-frac)"
        )
    # The ids stay in host memory (memory-mapped from the corpus cache); each step moves one batch.
    batches = StreamBatches(split.train, config.batch_size, config.seq_len)
    if main:
        prepare_out_dir(out_dir, overwrite=overwrite or resume_from is not None)
    check_model_fits(model_config, config)
    with RunLock(out_dir) if main else contextlib.nullcontext():
        run = TrainingRun(model_config, config, vocab, corpus, batches, initial_weights, group)
        val_ids = split.val
        if resume_from is not None:
            run.restore(resume_from)
        branching = branch_history is not None
        if branching:
            run.run_id = new_run_id()
            run.best = None
        run_dir = None
        if main:
            remove_stale_temporaries(out_dir)
            check_free_space(out_dir, 3 * checkpoint_bytes(run.model))
            run_dir = RunDirectory(out_dir, {
                "run_id": run.run_id, "model": model_config.to_dict(), "train": config.to_dict(),
                "corpus": corpus.to_dict(), "world_size": group.world_size if group else 1,
            }, fresh=resume_from is None or branching, history=branch_history or [])
        observer.on_start(run.model, model_config, config, corpus, len(batches),
                          _planned_steps(config, len(batches)), run.step)
        try:
            # A resumed run continues its clock, so a time budget covers the whole run.
            reason, elapsed_s = _train_loop(run, config, val_ids, observer, stop,
                                            resume_from["elapsed_s"] if resume_from else 0.0, run_dir)
        except BaseException:
            observer.on_end(completed=False)
            raise
        observer.on_end(completed=not reason.startswith("interrupted"))
    if reason.startswith("interrupted"):
        raise TrainingInterrupted(reason.removeprefix("interrupted by "), out_dir / "last.pt", run.step)
    if group is not None:
        run.best = group.from_main(run.best)
    assert run.best is not None  # a run that was not interrupted ends with an evaluation
    return TrainResult(
        out_dir=out_dir, steps=run.step, epoch=run.epoch, best_val_loss=run.best.nats_per_char,
        best=run.best, elapsed_s=elapsed_s, stop_reason=reason,
        skipped_steps=run.skipped,
        epoch_checkpoints=run_dir.epoch_checkpoints() if run_dir is not None else [],
    )


# What a checkpoint needs to be resumed.
RESUME_FIELDS = ("corpus", "train_config", "optimizer_state", "step", "epoch", "epoch_step",
                 "progress_epochs", "elapsed_s", "carried_state", "rng")
RESUME_MAY_CHANGE = ("epochs", "max_steps", "time_budget", "learning_rate", "min_lr_ratio", "warmup_steps",
                     "clip", "clip_mode", "max_bad_steps", "save_epochs", "eval_every", "save_every",
                     "device", "precision")


def resume_config(
    payload: dict[str, Any], model_options: dict[str, Any], train_options: dict[str, Any]
) -> tuple[ModelConfig, TrainConfig, list[str]]:
    """The configuration a resumed run continues with, and a line for each option that changed.

    ``model_options`` and ``train_options`` are the options given for the resumed
    run. Stopping criteria, the learning-rate schedule, evaluation and saving may
    change; the model, the data layout and the seed may not, since the checkpoint's
    weights and its place in the data only make sense with them.
    """
    model_config = ModelConfig.from_dict(payload["model_config"])
    for key, value in model_options.items():
        if getattr(model_config, key) != value:
            raise CharrnnError(
                f"{key} {value!r} contradicts the checkpoint ({key} {getattr(model_config, key)!r}); "
                f"a resumed run keeps its model"
            )
    saved = dict(payload["train_config"])
    changes = []
    for key, value in train_options.items():
        if saved.get(key) == value:
            continue
        if key not in RESUME_MAY_CHANGE:
            raise CharrnnError(
                f"{key} {value!r} contradicts the checkpoint ({key} {saved.get(key)!r}); resuming may change "
                f"only {', '.join(RESUME_MAY_CHANGE)}"
            )
        changes.append(f"{key}: {saved.get(key)!r} → {value!r}")
        saved[key] = value
    config = TrainConfig.from_dict(saved)
    finished = stop_reason(config, payload["step"], payload["progress_epochs"], payload["elapsed_s"])
    if finished:
        raise CharrnnError(f"this run already {finished}; give a larger limit to continue it")
    return model_config, config, changes


def _planned_steps(config: TrainConfig, steps_per_epoch: int) -> int | None:
    """Steps the run will take when a step or epoch limit is set (a time budget may end it sooner)."""
    limits = []
    if config.max_steps is not None:
        limits.append(config.max_steps)
    if config.epochs is not None:
        limits.append(math.ceil(config.epochs * steps_per_epoch))
    return min(limits) if limits else None
