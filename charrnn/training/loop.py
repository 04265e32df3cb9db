"""The training loop (textbook notes §3), from :func:`train_step` up: it evaluates, samples, saves and stops
as its Schedule says, writes only through rundir, reports only to a TrainObserver."""

from __future__ import annotations

import contextlib
import gc
import math
import signal
import time
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from charrnn.config import SampleConfig, TrainConfig
from charrnn.data.corpus import scored_validation
from charrnn.data.vocab import Vocab
from charrnn.errors import CharrnnError, option
from charrnn.generation.sample import default_warmup, generate
from charrnn.models.devices import autocast
from charrnn.models.evaluate import evaluate
from charrnn.models.model import CharRNN
from charrnn.training.observer import StepReport, TrainObserver
from charrnn.training.rundir import EvaluationRecord, LossRecord, RunDirectory, SampleRecord
from charrnn.training.schedule import Schedule, StopReason
from charrnn.training.state import TrainingRun
from charrnn.utils.hardware import LoadWatch, ThreadChoice
from charrnn.utils.interrupt import GracefulStop, StopRequested


def train_step(run: TrainingRun, learning_rate: float) -> tuple[float, int]:
    """One truncated-BPTT step at ``learning_rate``: forward, loss, backward, clip and the optimiser's step.
    Returns the training loss (nats/char; NaN or infinite for a skipped step) and the characters seen."""
    inputs, targets = run.next_batch()  # (B, T) each
    run.model.train()
    with autocast(run.device, run.precision):  # bf16 where the plan chose it
        logits, state = run.step_module(inputs, run.state)  # (B, T, V); DDP under torchrun
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
    run.model.zero_grad(set_to_none=True)
    loss.backward()
    loss_value, norm_value = run.agreed(loss, run.clip_gradients())  # the same on every rank
    run.step_if_finite(learning_rate, loss_value, norm_value)
    run.advance(state)
    return loss_value, inputs.numel() * run.group.world_size


class TrainingLoop:
    """Step until stopped, evaluating, sampling and saving as scheduled; rank 0 alone evaluates and writes."""

    def __init__(self, run: TrainingRun, val_ids: torch.Tensor, observer: TrainObserver,
                 stop: GracefulStop | None, run_dir: RunDirectory | None, schedule: Schedule, start: float,
                 clock: Callable[[], float] = time.perf_counter, threads: ThreadChoice | None = None):
        self.run, self.config, self.schedule = run, run.config, schedule
        # Every evaluation scores the same text: the validation split, or its start (TrainConfig.eval_chars).
        self.val_ids, self.val_chars = scored_validation(val_ids, self.config.eval_chars)  # (N,) ids
        self.observer, self.run_dir, self.clock = observer, run_dir, clock
        self.stop = stop if stop is not None else GracefulStop()  # never entered: no signal reaches it
        self.start = start  # the clock's reading at the run's start (a resumed run's earlier sessions too)
        # Other programs' use of the cores, watched where charrnn chose the threads (never the user's).
        self.load = LoadWatch() if threads is not None and not threads.given and threads.count > 1 else None
        self.elapsed = self._agreed([0])[1]  # rank 0's clock, agreed by every rank
        schedule.begin(run, self.elapsed)
        self.trained_out = False  # a stop came in the final evaluation: nothing is left to train
        self._start_window()
        self.losses: list[float] = []  # the finite training losses since the last row of losses.jsonl
        self.loss_mark = self._loss_mark(schedule.progress(run, self.elapsed))  # the last row's hundredth
        # Rows wait for the loop's next writes, adding no moment of their own for an overwritten run to go.
        self.loss_rows: list[LossRecord] = []

    def _start_window(self) -> None:
        """Start the averages that the next evaluation record reports."""
        self.loss_sum, self.loss_count, self.window_chars, self.window_start = 0.0, 0, 0, self.clock()

    def run_until_stopped(self) -> tuple[StopReason, float, float]:
        """Train until stopped; return why, and the run's wall time when training stopped and at the end."""
        run, schedule = self.run, self.schedule
        reason: StopReason | None = None
        while reason is None:
            learning_rate = schedule.learning_rate(run, self.elapsed)
            with saving_if_memory_runs_out(self.run, self.run_dir, self.elapsed):
                loss, chars = train_step(run, learning_rate)
            if run.bad_streak >= self.config.max_bad_steps:
                raise CharrnnError(
                    f"training stopped at step {run.step:,}: {run.bad_streak} consecutive steps had a "
                    f"non-finite loss or gradient; the checkpoints in {self.config.out_dir} keep the last "
                    f"good state; try a lower {option('learning_rate')} (now {self.config.learning_rate:g})")
            if math.isfinite(loss):
                self.loss_sum, self.loss_count = self.loss_sum + loss, self.loss_count + 1
                self.losses.append(loss)
            self.window_chars += chars
            now = self.clock()
            speed = self.window_chars / max(now - self.window_start, 1e-9)  # chars/s since the window started
            slowed = schedule.slowed(speed, now - self.window_start, self.elapsed,
                                     alone=run.group.world_size == 1)
            for message in (slowed and self.load and self.load.leave_busy_cores(), slowed):
                if message:
                    self.observer.on_message(message)
            reason = self._agreed_stop()
            progress = schedule.progress(run, self.elapsed)
            self._log_loss(progress, now)
            self.observer.on_step(StepReport(
                step=run.step, epoch=run.epoch, loss=loss, learning_rate=learning_rate, chars_per_s=speed,
                progress=progress, skipped_steps=run.skipped, elapsed_s=now - self.start,
                seconds_left=schedule.seconds_left(self.elapsed)))
            with saving_if_memory_runs_out(self.run, self.run_dir, self.elapsed):
                dropped = self.evaluate_and_save(reason, learning_rate, speed)
            if dropped is not None:  # a stop asked for while scoring: last.pt holds this step
                self.trained_out = reason is not None
                reason = StopReason("signal", signal_name=dropped)
        return reason, self.elapsed, self.clock() - self.start

    def _loss_mark(self, progress: float | None) -> int:
        """Which hundredth of the run ``progress`` is in (without a limit: which hundred steps)."""
        return int(progress * 100) if progress is not None else self.run.step // 100

    def _log_loss(self, progress: float | None, now: float) -> None:
        """A row of losses.jsonl for each hundredth of the run: the mean of its finite training losses."""
        if (mark := self._loss_mark(progress)) != self.loss_mark and self.losses:
            self.loss_rows.append(LossRecord(self.run.step, round(self.run.epoch, 4),
                                             round(now - self.start, 3), sum(self.losses) / len(self.losses)))
            self.loss_mark, self.losses = mark, []

    def _agreed_stop(self) -> StopReason | None:
        """A signal any rank received, else the limit reached on rank 0's clock: the same on every rank."""
        signal_name = self.stop.signal_name
        number, self.elapsed = self._agreed([signal.Signals[signal_name].value if signal_name else 0])
        return (StopReason("signal", signal_name=signal.Signals(int(number)).name) if number
                else self.schedule.stop(self.run, self.elapsed))

    def _agreed(self, values: list[float]) -> list[float]:
        """``values`` and rank 0's clock, maxed over the ranks: all decide alike, so collectives pair up."""
        own_clock = self.clock() - self.start if self.run.group.is_main else 0.0
        return self.run.group.reduce([*values, own_clock], self.run.device, op="max")

    def evaluate_and_save(self, reason: StopReason | None, learning_rate: float,
                          chars_per_s: float) -> str | None:
        """Evaluate, sample and save as scheduled; a stop while scoring saves last.pt, returns its signal."""
        run, run_dir = self.run, self.run_dir
        evaluating, saving, sampling, epoch_end = self.schedule.due(run, self.elapsed, reason)
        if not (evaluating or saving or sampling):
            return None
        carried, val_loss = run.carried_state(), None  # the carried state: a collective, every rank gathers
        if evaluating and run_dir is not None:
            try:
                val_loss = self._evaluate(run_dir, carried, learning_rate, chars_per_s, epoch_end)
            except StopRequested as stopped:
                run_dir.save("last.pt", run.payload(self.elapsed, carried))
                self._write_losses()
                return stopped.signal_name
        if sampling and run_dir is not None:
            started = self.clock()
            sample = draw_sample(run.model, run.vocab, self.config, run.step, run.epoch, started - self.start,
                                 val_loss, stopped=lambda: self.stop.signal_name is not None)
            if sample is not None:
                run_dir.log(sample)
                self.observer.on_sample(sample)
            self.window_start += self.clock() - started  # the throughput reported is training's alone
        if evaluating:
            self._start_window()
        if saving and run_dir is not None:
            run_dir.save("last.pt", run.payload(self.elapsed, carried))
        self._write_losses()
        return None

    def _write_losses(self) -> None:
        """The rows of losses.jsonl that wait, after the writes they wait for."""
        if self.loss_rows and self.run_dir is not None:
            self.run_dir.log(*self.loss_rows)
        self.loss_rows = []

    def _evaluate(self, run_dir: RunDirectory, carried: tuple[torch.Tensor, ...], learning_rate: float,
                  chars_per_s: float, epoch_end: bool) -> float:
        """Score the trained (and averaged) weights in float32, keep best.pt and an epoch's checkpoint, record
        it; the trained weights' nats/char. A stop asked for meanwhile raises StopRequested at once."""
        run = self.run
        with self.stop.raising():
            trained = evaluate(run.model, self.val_ids)
            averaged = None
            if run.average is not None:
                with run.average.swapped_in(run.model):
                    averaged = evaluate(run.model, self.val_ids)
        use_average = averaged is not None and averaged.nats_per_char < trained.nats_per_char
        candidate = averaged if use_average else trained
        improved = run.best is None or candidate.nats_per_char < run.best.nats_per_char
        run.latest_eval = {"step": run.step, **trained.to_dict()}
        if improved:
            run.best, run.best_is_average = candidate, use_average
            run_dir.save("best.pt", run.payload(self.elapsed, carried, averaged=use_average))
        val_loss = trained.nats_per_char
        record = EvaluationRecord(
            step=run.step, epoch=round(run.epoch, 4), learning_rate=learning_rate, val_chars=self.val_chars,
            train_loss=self.loss_sum / self.loss_count if self.loss_count else None, chars_per_s=chars_per_s,
            val_loss=val_loss, averaged_val_loss=averaged.nats_per_char if averaged is not None else None,
            val_bits_per_char=trained.bits_per_char, elapsed_s=round(self.clock() - self.start, 3),
            epoch_checkpoint=f"epoch{run.epochs_done:04d}-val{val_loss:.4f}.pt" if epoch_end else None)
        if record.epoch_checkpoint is not None:
            run_dir.save(record.epoch_checkpoint, run.payload(self.elapsed, carried))
        run_dir.log(record)
        self.observer.on_eval(record, improved)
        return val_loss


@contextlib.contextmanager
def saving_if_memory_runs_out(run: TrainingRun, run_dir: RunDirectory | None,
                              elapsed: float) -> Iterator[None]:
    """An allocation failure in the block saves the last completed step's state: a one-line error."""
    try:
        yield
        return
    except (MemoryError, RuntimeError) as exc:  # Python's allocation failure, or the CPU or CUDA allocator's
        text = str(exc)
        if not (isinstance(exc, MemoryError | torch.OutOfMemoryError) or "can't allocate memory" in text
                or "out of memory" in text.lower()):
            raise
    gc.collect()
    kept = "nothing newer than the run's last checkpoint was saved"
    if run_dir is not None:
        with contextlib.suppress(MemoryError, RuntimeError, CharrnnError):
            run_dir.save("last.pt", run.payload(elapsed, run.carried_state()))
            kept = (f"saved last.pt at step {run.step:,}; resume with {option('resume')} {run_dir.path} once "
                    f"memory is free")
    raise CharrnnError(f"out of memory after step {run.step:,}; {kept}, or start again with a smaller "
                       f"{option('batch_size')}, {option('seq_len')} or {option('hidden_size')}") from None


def draw_sample(model: CharRNN, vocab: Vocab, config: TrainConfig, step: int, epoch: float, seconds: float,
                val_loss: float | None, stopped: Callable[[], bool] = lambda: False) -> SampleRecord | None:
    """The run's recorded sample from ``model`` now (mode restored); None if ``stopped()`` turns true."""
    decoding = SampleConfig(length=config.sample_length, temperature=config.sample_temperature,
                            seed=config.sample_seed)
    was_training, pieces = model.training, []
    try:
        for chars in generate(model, vocab, decoding, config.sample_prime):
            if stopped():
                return None
            pieces.append(chars[0])
    finally:
        model.train(was_training)
    prime = config.sample_prime or default_warmup(vocab)  # what an empty prime reads: a newline
    return SampleRecord(step, round(epoch, 4), round(seconds, 3), val_loss, prime,
                        config.sample_temperature, config.sample_seed, "".join(pieces))
