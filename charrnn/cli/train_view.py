"""How ``charrnn train`` looks: the plan, the progress bar and log lines, the summary."""

from __future__ import annotations

import math
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text
from tqdm import tqdm

from charrnn.api import DEFAULT_DATASET, TrainObserver
from charrnn.cli.display import (
    clock_time,
    describe_evaluations,
    describe_model,
    describe_split,
    key_value_table,
)
from charrnn.config import REGULARISATION_RATES, ModelConfig, TrainConfig
from charrnn.errors import option
from charrnn.utils.terminal import one_line

if TYPE_CHECKING:  # result types, named for their readers; importing them would import torch
    from charrnn.data.corpus import CorpusInfo
    from charrnn.models.model import CharRNN
    from charrnn.training.observer import StepReport
    from charrnn.training.plan import TrainingPlan, TrainResult
    from charrnn.training.rundir import EvaluationRecord, SampleRecord
    from charrnn.utils.hardware import ThreadChoice


LOG_EVERY_S = 30.0  # without a terminal, a progress line at least this often
BAR_UNITS = 1000  # the bar counts thousandths of the run's progress
DUE_LINE_WAIT_S = 5.0  # beyond LOG_EVERY_S, how long the watcher leaves a line to the loop before writing


class ProgressBar(TrainObserver):
    """Prints the run configuration, a tqdm bar with loss, chars/s and ETA, and eval lines. Without a terminal
    (a log, a pipe), a line at every evaluation and every :data:`LOG_EVERY_S` seconds at least (one a step at
    most); a watcher thread says when a step or an evaluation outlasts that, so a log never looks hung."""

    def __init__(self, console: Console, draw_bar: bool = True,
                 quiet: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console  # where the configuration table goes (stderr)
        self.draw_bar = draw_bar and not quiet  # False: plain progress lines instead
        self.quiet = quiet  # notes only: no table, bar or progress lines
        self.bar: tqdm | None = None
        self.clock = clock  # the wall clock of the log lines (a test's fake)
        self.started = self.last_line = 0.0  # when training started and the last line was written
        self.quiet_since = 0.0  # the last progress line's time: a note that the run is at work counts from it
        self.first_step = 0  # the step this process started from (a resumed run's is not 0)
        self.first_report: StepReport | None = None  # this process's first step, where its pace starts
        self.losses: list[float] = []  # training losses since the last line
        self.last_step: StepReport | None = None  # the latest step's report
        self.last_val: float | None = None  # the latest validation loss
        self.threads: ThreadChoice | None = None  # the plan's CPU threads, for the table
        self.precision = ""  # the precision the plan trains in (fp32 or bf16), for the table
        self.line_due: float | None = None  # when a line fell due at the latest step (written at the next)
        self.logged_step: int | None = None  # the step the latest progress line was for
        self.writing = threading.Lock()  # the watcher thread and the loop write lines in turn
        self.finished = threading.Event()  # set when the run ends: the watcher stops

    def on_message(self, text: str) -> None:
        """Notes and warnings, quiet or not: above the bar, which is drawn again below them."""
        if self.bar is not None:
            self.bar.clear()
        self.console.print(Text(one_line(text)), soft_wrap=True)
        if self.bar is not None:
            self.bar.refresh()

    def on_plan(self, plan: TrainingPlan) -> None:
        """Say what the plan decided that the user did not ask for in so many words."""
        self.threads, self.precision = plan.threads, plan.precision
        if plan.budget is not None:
            muon = plan.config.optimizer == "muon"
            self.on_message(budget_line(plan.budget, plan.corpus.name != DEFAULT_DATASET, muon))
            if (warning := plan.budget.short_of_a_pass()) is not None:
                self.on_message(warning)
        if (tuned := plan.fine_tune) is not None:
            now, before = plan.model_config.to_dict(), tuned.model_before.to_dict()
            kept = ", ".join(
                f"{option(field)} {now[field]:g}" + ("" if now[field] == before[field] else
                                             f" (given; the checkpoint's {before[field]:g})")
                for field in REGULARISATION_RATES if now[field] or before[field]) or "no dropout"
            grown = f"; the vocabulary grows from {tuned.vocab_before} to {len(plan.vocab)} characters" \
                if len(plan.vocab) > tuned.vocab_before else ""
            self.on_message(f"fine-tuning {tuned.checkpoint}: its shape and regularisation ({kept}) are "
                            f"kept unless given{grown}")
        if (resume := plan.resume) is not None:
            for key, old, new in resume.changes:
                old, new = ("none" if value is None else repr(value) for value in (old, new))
                self.on_message(f"resuming with {option(key)}: {old} → {new}")
            where = f" into a new branch {plan.config.out_dir}" if resume.branch else ""
            self.on_message(f"resuming {resume.checkpoint} at step {resume.step:,} "
                            f"(epoch {resume.epoch:.2f}){where}")

    def on_start(self, model: CharRNN, model_config: ModelConfig, config: TrainConfig,
                 corpus: CorpusInfo, steps_per_epoch: int, total_steps: int | None, first_step: int) -> None:
        if self.quiet:
            return
        parameters = sum(p.numel() for p in model.parameters())
        trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
        frozen_note = f" ({trained:,} trained, the rest frozen)" if trained != parameters else ""
        self.started = self.last_line = self.quiet_since = self.clock()
        self.first_step = first_step
        muon = f"Muon lr {config.muon_lr:g} on the recurrent matrices, " if config.optimizer == "muon" else ""
        rows = {
            "corpus": f"{corpus.path} ({corpus.chars:,} chars, vocabulary {model_config.vocab_size})",
            "split": describe_split(corpus.chars, corpus.split_point, corpus.val_frac),
            "model": describe_model(model_config.to_dict()),
            "parameters": f"{parameters:,}{frozen_note}",
            "batches": f"{config.batch_size} streams × {config.seq_len} chars, "
                       f"{steps_per_epoch:,} steps per epoch",
            "optimiser": f"{muon}AdamW lr {config.learning_rate:g} (warm-up {config.warmup_steps}, cosine to "
                         f"×{config.min_lr_ratio:g}), weight decay {config.weight_decay:g}, "
                         f"clip {config.clip_mode} {config.clip:g}"
                         f"{f', weight average (EMA {config.ema_decay:g})' if config.ema_decay else ''}",
            "stop": ", ".join(filter(None, [
                config.epochs and f"{config.epochs:g} epochs",
                config.max_steps and f"{config.max_steps:,} steps",
                config.time_budget and f"{config.time_budget:g} s",
            ])),
            "validation": describe_evaluations(config, corpus.chars - corpus.split_point - 1),
            "epoch checkpoints": ", ".join(map(str, config.save_epochs)) or "none",
            "device": f"{config.device}, {self.precision}{' (auto)' if config.precision == 'auto' else ''}",
            **({"threads": self.threads.describe()} if self.threads is not None and config.device == "cpu"
               else {}),
            "seed": str(config.seed),
            "out": config.out_dir,
        }
        self.console.print(key_value_table("charrnn train", rows))
        if not self.draw_bar:
            threading.Thread(target=self._watch, name="charrnn-progress", daemon=True).start()

    def _watch(self) -> None:
        """While the run goes on, say what it waits for when no line was written for :data:`LOG_EVERY_S`."""
        while not self.finished.wait(1.0):
            self.say_if_quiet()

    def say_if_quiet(self) -> None:
        """The watcher's look: a line due a while, or a line saying the run is still at work."""
        with self.writing:
            now = self.clock()
            quiet_for = now - self.last_line
            # The loop writes a line due at a step when the next one ends: the watcher steps in only once
            # that is overdue, so a run of quick steps always gets its ordinary lines.
            if quiet_for < LOG_EVERY_S + DUE_LINE_WAIT_S or self.finished.is_set():
                return
            if self.line_due is not None:
                self._log_line()
                self.last_line = self.quiet_since = now
                return
            done = "no step done yet" if self.last_step is None else f"step {self.last_step.step:,} done"
            tqdm.write(f"{done}; still at work (evaluating, saving or a slow step) for "
                       f"{clock_time(now - self.quiet_since)}", file=sys.stderr)
            self.last_line = now

    def on_step(self, report: StepReport) -> None:
        if self.first_report is None:
            self.first_report = report
            if self.draw_bar:  # drawn from the first step: every note before it stands above it
                self.bar = tqdm(total=BAR_UNITS, unit="‰", dynamic_ncols=True, file=sys.stderr,
                                bar_format="{percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}")
        if self.bar is None:
            with self.writing:
                if self.line_due is not None:  # the previous step's line: no evaluation wrote one for it
                    self._log_line()
                self.last_step = report
                if not self.quiet:
                    self.losses.append(report.loss)
                    now = self.clock()
                    self.line_due = now if now - self.last_line >= LOG_EVERY_S else None
            return
        self.last_step = report
        postfix = {"step": f"{report.step:,}", "loss": f"{report.loss:.3f}",
                   "chars/s": f"{report.chars_per_s:,.0f}", "lr": f"{report.learning_rate:.2e}"}
        if report.skipped_steps:
            postfix["skipped"] = report.skipped_steps
        self.bar.set_postfix(postfix, refresh=False)
        # The run's progress, whichever limit is nearest (a time budget included): a steady end and ETA.
        self.bar.update(round(BAR_UNITS * (report.progress or 0.0)) - self.bar.n)

    def _steps_to_go(self, report: StepReport) -> float | None:
        """Steps left at the pace progress has made since this process's first step: a time budget's
        progress starts above 0 (what planning took, and the reserve for its end, count in it)."""
        first = self.first_report
        gained = (report.progress - first.progress
                  if report.progress and first is not None and first.progress is not None else 0.0)
        return max(0.0, (1 - report.progress) * (report.step - first.step) / gained) if gained > 0 else None

    def _log_line(self, evaluation: str = "", train_loss: float | None = None,
                  elapsed_s: float | None = None) -> None:
        """One plain line for a log: where the run is, how fast, how long to go. ``train_loss`` and
        ``elapsed_s``: an evaluation's, as metrics.jsonl records them (else the recent mean, the step's)."""
        report = self.last_step  # every caller has a step to report
        now = self.clock() if self.line_due is None else self.line_due  # a line as of when it fell due
        val = f"{self.last_val:.4f}" if self.last_val is not None else "n/a"
        if report.step == self.logged_step:  # the step has its line: this one adds the evaluation alone
            tqdm.write(f"step {report.step:,}  val {val}{evaluation}", file=sys.stderr)
            self.last_line, self.quiet_since, self.line_due = now, now, None
            return
        training = now - self.started
        # Shown on the run's own clock, as the summary's wall time counts (a budget's planning included).
        elapsed = next((given for given in (elapsed_s, report.elapsed_s) if given is not None), training)
        done = report.step - self.first_step
        to_go = self._steps_to_go(report)
        estimate = to_go * training / done if to_go is not None and done > 0 else None
        if report.seconds_left is not None:
            estimate = report.seconds_left if estimate is None else min(estimate, report.seconds_left)
        remaining = "?" if estimate is None else clock_time(estimate)
        finite = [loss for loss in self.losses if math.isfinite(loss)]
        # An evaluation's line gives metrics.jsonl's figure (the mean since the last evaluation); the others
        # the mean since the last line.
        mean = train_loss if train_loss is not None else sum(finite) / len(finite) if finite else None
        train = "n/a" if mean is None else f"{mean:.4f}"
        tqdm.write(f"step {report.step:,}  epoch {report.epoch:.3f}  train {train}  "
                   f"{report.chars_per_s:,.0f} chars/s  elapsed {clock_time(elapsed)}  "
                   f"remaining {remaining}  val {val}{evaluation}", file=sys.stderr)
        self.losses, self.last_line, self.line_due, self.logged_step = [], now, None, report.step
        self.quiet_since = now

    def on_eval(self, record: EvaluationRecord, improved: bool) -> None:
        self.last_val = record.val_loss if record.val_loss is not None else self.last_val
        if self.quiet:
            return
        marker = ("  (best)" if improved else "") + \
            (f"  saved {record.epoch_checkpoint}" if record.epoch_checkpoint else "")
        if self.bar is None and self.last_step is not None:
            details = "".join([
                "" if record.val_chars is None else f" on the first {record.val_chars:,} chars",
                "" if record.averaged_val_loss is None else f", averaged {record.averaged_val_loss:.4f}"])
            with self.writing:
                self._log_line(f" (evaluated{details}){marker}", record.train_loss, record.elapsed_s)
            return
        train_part = f"train {record.train_loss:.4f}" if record.train_loss is not None else "train n/a"
        averaged = "" if record.averaged_val_loss is None else f"  averaged {record.averaged_val_loss:.4f}"
        if record.val_chars is not None:
            averaged += f"  (first {record.val_chars:,} validation chars)"
        val = f"val {record.val_loss:.4f} nats/char ({record.val_bits_per_char:.3f} bits){averaged}{marker}"
        tqdm.write(f"step {record.step:>6}  epoch {record.epoch:>7.3f}  {train_part}  {val}", file=sys.stderr)

    def on_sample(self, record: SampleRecord) -> None:
        """One line: the step and the start of the sample, its line breaks shown as ⏎, cut to the width."""
        if self.quiet:
            return
        head = f"sample @ step {record.step:,}: "
        width = max(20, shutil.get_terminal_size().columns - len(head) - 1)
        text = one_line((record.prime + record.text).replace("\n", "⏎"))
        tqdm.write(head + (text if len(text) <= width else text[: width - 1] + "…"), file=sys.stderr)

    def on_end(self, completed: bool) -> None:
        with self.writing:
            self.finished.set()
            if self.line_due is not None:
                self._log_line()
        if self.bar is not None:
            if completed:  # a limit's end is reached, however near the last step's progress came to it
                self.bar.update(BAR_UNITS - self.bar.n)
            self.bar.close()


def budget_line(budget: Any, other_text: bool = False, muon: bool = False) -> str:
    """What a time budget chose, in one line: the shape, its speed, passes and prediction, and the runner-up
    (of the others, the lowest prediction: the shape the tie rule passed over, when it did). With
    ``other_text`` (a corpus of the user's own), it says the predictions are tiny Shakespeare's; with
    ``muon``, that they are AdamW's at Muon's speed (docs/defaults.md, "The optimiser")."""
    head, choice = f"{option('time_budget')} {budget.seconds:g} s", budget.choice
    if not budget.planned:
        return f"{head}: {budget.unplanned_because}"
    speed = f"{'' if choice.measured else 'about '}{choice.chars_per_s:,.0f} chars/s in {budget.precision}"
    if choice.predicted_loss is None:
        return (f"{head} leaves no shape time to train once it is measured, evaluated and saved: the "
                f"fastest, {choice.describe()} ({speed}), trains what it can")
    affords = "far more" if choice.budget_epochs > 1e6 else f"{choice.budget_epochs:.1f}"
    ends = f"the {option(choice.limit)} given ends it first" if choice.users_limit else \
        "it ends early at its limit"
    limit = f" (time for {affords}: {ends})" if choice.limit else ""
    slowed = f" with dropout {choice.dropout:g} ({1 - choice.speed_share:.0%} slower)" \
        if choice.speed_share < 1 else ""
    others = [c for c in budget.candidates if c is not choice and c.predicted_loss is not None
              and c.pays_for_its_end]
    runner_up = ""
    if others:  # a plan that ends early names the best that would not: the time it leaves is no oversight
        longer = budget.longer_plan()
        second = longer or min(others, key=lambda c: c.predicted_loss)
        gap = second.predicted_loss - choice.predicted_loss
        tie = ", within the rule's error" if abs(gap) < budget.tie_error else ""
        named = (f"the best that trains to the end, {second.describe()}," if longer
                 else f"runner-up {second.describe()}")
        runner_up = f"; {named} predicts {second.predicted_loss:.3f} ({gap:+.3f}{tie})"
    scale = " on tiny Shakespeare (the rule's text: this text scores otherwise)" if other_text else ""
    if choice.guessing:  # the rule's text is richer: guessing among this one's characters beats it
        scale = " (as guessing alike among this text's characters would: the rule cannot tell shapes apart)"
    rule = "; the rule is AdamW's, timed at Muon's speed" if muon else ""
    return (f"{head}: {choice.describe()} at {speed}, {choice.epochs:.1f} epochs{limit}{slowed}, predicts "
            f"{choice.predicted_loss:.3f} nats/char{scale}{runner_up}{rule}")


def training_summary(result: TrainResult) -> Table:
    """``charrnn train``'s closing table."""
    best = result.best
    # -o eval_chars N below the split's length: every score, best.pt's too, is of its first N characters.
    part = result.config is not None and result.config.eval_chars == best.chars
    return key_value_table("training finished", {
        "stopped": result.stop_reason.describe(),
        "steps": f"{result.steps:,} ({result.epoch:.2f} epochs)",
        "wall time": f"{result.elapsed_s:.1f} s" + (f" ({result.earlier_s:.1f} s of it in earlier sessions)"
                                                     if result.earlier_s else ""),
        "best validation": f"{best.nats_per_char:.4f} nats/char, {best.bits_per_char:.4f} bits/char, "
                           f"perplexity {best.perplexity:.3f}"
                           f"{' (averaged weights)' if result.best_is_average else ''}"
                           f"{f', on the first {best.chars:,} validation chars' if part else ''}",
        "skipped steps": str(result.skipped_steps),
        "checkpoints": f"{result.out_dir / 'best.pt'}, {result.out_dir / 'last.pt'}",
        **({"epoch checkpoints": ", ".join(path.name for path in result.epoch_checkpoints)}
           if result.epoch_checkpoints else {}),
    })
