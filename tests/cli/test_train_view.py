"""The train command's view: progress lines without a terminal, the watcher, the budget's line."""

import dataclasses

import pytest
from rich.console import Console

from charrnn.cli.train_view import BAR_UNITS, ProgressBar, budget_line
from charrnn.errors import options_spelled
from charrnn.training.budget import SCALING_LAW, BudgetDecision, Candidate, dropout_speed
from charrnn.training.observer import StepReport
from charrnn.training.rundir import EvaluationRecord


@pytest.fixture
def flags():
    """Options named as the command line names them, as they are while a command runs."""
    with options_spelled(lambda field: "--" + field.replace("_", "-")):
        yield


def progress(clock):
    """A progress display without a terminal, reading the time from ``clock``."""
    return ProgressBar(Console(stderr=True), draw_bar=False, clock=clock)


def report(step: int, progress: float, **fields):
    """Step ``step``'s report: loss 2.0 at 800 chars/s, 40 steps an epoch, unless ``fields`` say otherwise."""
    return StepReport(**{"step": step, "epoch": step / 40, "loss": 2.0, "learning_rate": 1e-3,
                         "chars_per_s": 800.0, "progress": progress, "skipped_steps": 0, **fields})


def evaluation(step: int, **fields):
    """Step ``step``'s evaluation record (40 steps an epoch, a second a step): val 1.9, train 2.25."""
    return EvaluationRecord(**{"step": step, "epoch": step / 40, "train_loss": 2.25, "val_loss": 1.9,
                               "val_bits_per_char": 2.7, "learning_rate": 1e-3, "chars_per_s": 800.0,
                               "elapsed_s": float(step), **fields})


def test_without_a_terminal_a_log_gets_a_line_every_30_seconds_and_at_each_evaluation(capsys):
    """A time-budgeted run logging to a file: never silent for long, every line self-contained."""
    now = [100.0]
    bar = progress(lambda: now[0])
    bar.started = bar.last_line = now[0]
    for step in range(1, 101):  # a step every second: 100 s of training, 0% to 50% of the run
        now[0] += 1.0
        bar.on_step(report(step, step / 200))
        if step == 45:
            bar.on_eval(evaluation(45, train_loss=2.0), improved=True)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split()[1] for line in lines] == ["30", "45", "75"]
    assert lines[0] == ("step 30  epoch 0.750  train 2.0000  800 chars/s  elapsed 0:30  remaining 2:50  "
                        "val n/a")
    assert lines[1].endswith("val 1.9000 (evaluated)  (best)") and "remaining 2:35" in lines[1]
    assert lines[2].endswith("val 1.9000") and "elapsed 1:15" in lines[2]


def logged_steps(steps: int, progress_before: float):
    """A progress display without a terminal, after ``steps`` one-second steps, each 1% of the run, the
    run already ``progress_before`` done when they began."""
    now = [0.0]
    bar = progress(lambda: now[0])
    bar.started = bar.last_line = now[0]
    for step in range(1, steps + 1):
        now[0] += 1.0
        bar.on_step(report(step, progress_before + step / 100))
    return bar


def test_a_log_line_at_an_evaluation_says_what_it_scored(capsys):
    """An evaluation of the validation split's start, of both weights, right after a timed line: the
    line says so, with the training loss the record averaged, as metrics.jsonl gives it for this step
    (the steps since the last line averaged 2.0)."""
    logged_steps(30, 0.0).on_eval(evaluation(30, averaged_val_loss=1.8, val_chars=12_000), improved=True)
    evaluated, = capsys.readouterr().err.splitlines()  # one line for the step: the timed one waited
    assert evaluated.startswith("step 30 ") and "train 2.2500" in evaluated
    assert evaluated.endswith("val 1.9000 (evaluated on the first 12,000 chars, averaged 1.8000)  (best)")


def test_a_step_whose_line_was_written_gets_an_evaluation_only_line(capsys):
    """The watcher wrote step 30's line while its evaluation ran: the evaluation adds a line of its own,
    with no second training loss to contradict the first."""
    bar = logged_steps(30, 0.0)
    bar.clock = lambda: 36.0  # the evaluation took longer than the watcher waits for a due line
    bar.say_if_quiet()
    bar.on_eval(evaluation(30), improved=False)
    timed, evaluated = capsys.readouterr().err.splitlines()
    assert timed.startswith("step 30 ") and "train 2.0000" in timed and "elapsed 0:30" in timed
    assert evaluated == "step 30  val 1.9000 (evaluated)"


def test_a_long_silence_is_broken_by_the_watcher(capsys):
    bar = logged_steps(20, 0.0)  # 20 one-second steps, no line yet: the last was at 0 s

    def look(at: float) -> str:  # what the watcher writes when it looks at ``at`` seconds
        bar.clock = lambda: at
        bar.say_if_quiet()
        return capsys.readouterr().err
    assert look(31.0) == ""  # a line is due, but the loop's next step writes it: the watcher waits
    assert look(36.0) == "step 20 done; still at work (evaluating, saving or a slow step) for 0:36\n"
    # The next note, 36 s on, counts from the last progress line still.
    assert look(72.0) == "step 20 done; still at work (evaluating, saving or a slow step) for 1:12\n"
    bar.finished.set()
    assert look(500.0) == ""
    bar = progress(lambda: 0.0)  # a first step slower than 30 seconds is not silent either
    assert look(40.0) == "no step done yet; still at work (evaluating, saving or a slow step) for 0:40\n"


def test_quick_steps_get_their_ordinary_line_every_30_seconds_however_the_watcher_is_timed(capsys):
    """The watcher wakes once a second; with 0.1-s steps its look at 30 s must not take the place of the
    loop's own line at the next step."""
    now = [0.0]
    bar = progress(lambda: now[0])
    for step in range(1, 951):
        now[0] = step * 0.1
        bar.on_step(report(step, step / 1000, epoch=step / 1000))
        if step % 10 == 0:
            bar.say_if_quiet()  # the watcher's once-a-second look
    lines = capsys.readouterr().err.splitlines()
    assert [line.split()[1] for line in lines] == ["300", "600", "900"]
    assert all("train 2.0000" in line for line in lines)


def test_the_remaining_time_counts_from_the_budgets_start_and_never_exceeds_what_is_left_of_it(capsys):
    """Steps slowing down make the pace's estimate grow; the budget's own clock caps it."""
    now = [0.0]
    bar = progress(lambda: now[0])
    for step in range(1, 41):
        now[0] += 1.0 if step < 20 else 4.0  # a machine that got busy
        bar.on_step(report(step, 0.1 + step / 200, seconds_left=120.0 - now[0]))
    bar.on_end(True)
    for line in capsys.readouterr().err.splitlines():
        elapsed, remaining = (line.split(f"{key} ")[1].split()[0] for key in ("elapsed", "remaining"))
        minutes, seconds = map(int, remaining.split(":"))
        elapsed_minutes, elapsed_seconds = map(int, elapsed.split(":"))
        assert 60 * minutes + seconds <= 120 - (60 * elapsed_minutes + elapsed_seconds)
    # A 100-s budget that keeps 20 s for its end starts at 20% progress: after 30 one-second steps, 50 remain,
    # not the 30 that progress/step alone would suggest.
    logged_steps(30, 0.2).on_end(True)  # the line due at step 30, written when the run ends
    line, = capsys.readouterr().err.splitlines()
    assert "elapsed 0:30  remaining 0:50" in line


def test_the_budget_names_the_runner_up_a_larger_shape_beat_within_the_rules_error(flags):
    def shape(hidden: int, loss: float, batch: int = 16) -> Candidate:
        settings = {"hidden_size": hidden, "batch_size": batch, "skip_connections": batch == 16}
        return Candidate(settings=settings, num_layers=2, parameters=hidden * 1000, chars_per_s=1000.0,
                         eval_chars_per_s=1000.0, measured=True, estimable=True, training_s=90.0,
                         chars=90_000.0, epochs=2.0, budget_epochs=2.0, predicted_loss=loss)

    tie = SCALING_LAW.rms_error / 2
    decision = BudgetDecision(100, "cpu", "bf16", True, {}, (shape(192, 1.478), shape(256, 1.478 + tie),
                                                             shape(384, 1.478 + tie, batch=32)))
    assert budget_line(decision) == (f"--time-budget 100 s: 2×256 LSTM at 1,000 chars/s in bf16, 2.0 epochs, "
                                     f"predicts {1.478 + tie:.3f} nats/char; runner-up 2×192 LSTM predicts "
                                     f"1.478 ({-tie:+.3f}, within the rule's error)")
    assert "predicts 1.478 nats/char on tiny Shakespeare (the rule's text" in budget_line(
        dataclasses.replace(decision, candidates=decision.candidates[:1]), other_text=True)
    capped = dataclasses.replace(decision.candidates[0], predicted_loss=0.0, guessing=True)  # "aaaa…"
    assert "predicts 0.000 nats/char (as guessing alike among this text's characters would" in budget_line(
        dataclasses.replace(decision, candidates=(capped,)), other_text=True)
    # --json says which rule passed it over, and names the close call.
    assert decision.to_dict()["outranked"] == 0 and decision.to_dict()["close_call"] == 2
    estimated = dataclasses.replace(shape(192, 1.5), measured=False)
    alone = BudgetDecision(100, "cpu", "fp32", True, {}, (estimated,))
    assert budget_line(alone) == ("--time-budget 100 s: 2×192 LSTM at about 1,000 chars/s in fp32, 2.0 "
                                  "epochs, predicts 1.500 nats/char")
    muon = budget_line(alone, muon=True)
    assert muon == f"{budget_line(alone)}; the rule is AdamW's, timed at Muon's speed"
    late = dataclasses.replace(estimated, predicted_loss=None)
    assert budget_line(BudgetDecision(5, "cpu", "fp32", True, {}, (late,))) == (
        "--time-budget 5 s leaves no shape time to train once it is measured, evaluated and saved: the "
        "fastest, 2×192 LSTM (about 1,000 chars/s in fp32), trains what it can")
    unplanned = BudgetDecision(5, "cpu", "fp32", False, {}, unplanned_because="a fine-tune keeps its shape")
    assert budget_line(unplanned) == "--time-budget 5 s: a fine-tune keeps its shape"


def test_the_budget_says_what_its_dropout_costs_and_json_says_why_it_ends_early(flags):
    choice = Candidate(settings={"hidden_size": 768, "batch_size": 32}, num_layers=2, parameters=7_340_929,
                       chars_per_s=9287.0, eval_chars_per_s=50_000.0, measured=True, estimable=True,
                       training_s=560.0, chars=3.9e6, epochs=3.9, budget_epochs=3.9, predicted_loss=1.421,
                       precision="bf16", dropout=0.1, speed_share=dropout_speed(768))
    assert budget_line(BudgetDecision(600, "cpu", "bf16", True, {"dropout": 0.1}, (choice,))) == (
        "--time-budget 600 s: 2×768 LSTM at 9,287 chars/s in bf16, 3.9 epochs with dropout 0.1 (8% slower), "
        "predicts 1.421 nats/char")
    capped = dataclasses.replace(choice, chars=5e6, epochs=5.0, budget_epochs=6.4, limit="epochs",
                                 dropout=0.15)
    chosen = {"dropout": 0.15, "epochs": 5.0}
    alone = BudgetDecision(600, "cpu", "bf16", True, chosen, (capped,))
    assert "5.0 epochs (time for 6.4: it ends early at its limit) with dropout 0.15 (8% slower)" in \
        budget_line(alone)
    # A limit the user gave is told as theirs, as --json tells it (no early end of the plan's own).
    users = BudgetDecision(600, "cpu", "bf16", True, {}, (dataclasses.replace(capped, users_limit=True),))
    assert "(time for 6.4: the --epochs given ends it first)" in budget_line(users)
    assert not users.to_dict()["ends_early"]
    # None of the shapes trains to the budget's end: --json says the run ends early and names no longer plan.
    assert alone.to_dict()["ends_early"] and alone.to_dict()["longer_plan"] is None
    # A larger shape that would train to the end, and predicts worse, however little: named, and --json's too.
    for loss, gap in ((1.452, "+0.031"), (1.425, "+0.004, within the rule's error")):
        wider = dataclasses.replace(choice, settings={"hidden_size": 1024, "batch_size": 32}, epochs=2.1,
                                    predicted_loss=loss)
        longer = BudgetDecision(600, "cpu", "bf16", True, chosen, (capped, wider))
        line = budget_line(longer)
        assert line.startswith("--time-budget 600 s: 2×768 LSTM at 9,287 chars/s in bf16, 5.0")
        assert line.endswith(f"; the best that trains to the end, 2×1024 LSTM, predicts {loss:.3f} ({gap})")
        assert longer.to_dict()["longer_plan"] == 1
    given = dataclasses.replace(choice, dropout=0.3, speed_share=1.0)  # the user's, timed with it
    assert ", 3.9 epochs, predicts" in budget_line(BudgetDecision(600, "cpu", "bf16", True, {}, (given,)))


def test_a_log_line_gives_the_runs_own_elapsed_time_as_its_summary_counts(capsys):
    """A budget's planning comes before training starts: the summary's wall time counts it, so the line
    does too (the step's report carries the run's clock)."""
    bar = progress(lambda: 40.0)
    bar.started = bar.last_line = 0.0
    bar.on_step(report(1, 0.5, epoch=0.1, elapsed_s=52.0))
    bar.on_step(report(2, 0.6, epoch=0.2, elapsed_s=53.0))
    line, = capsys.readouterr().err.splitlines()
    assert "elapsed 0:52" in line


def test_on_a_terminal_the_bar_counts_the_runs_progress_below_every_note(capsys):
    """Notes before the first step stand above a bar not yet drawn; the bar's end never moves."""
    bar = ProgressBar(Console(stderr=True), draw_bar=True)
    bar.on_message("--time-budget 120 s: training stops about 3.0 s before the end")
    assert bar.bar is None and capsys.readouterr().err.startswith("--time-budget 120 s: training stops")
    seen = []
    for step, done in ((1, 0.2), (2, 0.25), (3, 0.5)):  # a budget's progress starts above 0
        bar.on_step(report(step, done))
        seen.append((bar.bar.n, bar.bar.total))
    assert seen == [(200, BAR_UNITS), (250, BAR_UNITS), (500, BAR_UNITS)]
    bar.on_message("a note while training")
    bar.on_end(True)
    assert bar.bar.n == BAR_UNITS
    err = capsys.readouterr().err
    assert "a note while training\n" in err and "step=3" in err
