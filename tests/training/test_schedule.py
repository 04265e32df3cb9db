import math
from types import SimpleNamespace

import pytest

from charrnn.config import TrainConfig
from charrnn.errors import options_spelled
from charrnn.training.schedule import (
    SLOWDOWN_END_EXPONENT,
    BudgetEnding,
    Schedule,
    StopReason,
    learning_rate_at,
    planned_steps,
    run_progress,
    stop_reason,
)


def test_schedule_warms_up_then_decays_to_floor():
    config = TrainConfig(out_dir="x", learning_rate=1.0, warmup_steps=4, min_lr_ratio=0.1, max_steps=100)
    assert learning_rate_at(config, 0, 0.0) == pytest.approx(0.25)
    assert learning_rate_at(config, 3, 0.03) == pytest.approx(1.0)
    cosine = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.04))
    assert learning_rate_at(config, 4, 0.04) == pytest.approx(cosine)
    assert learning_rate_at(config, 50, 0.5) == pytest.approx(0.55)
    assert learning_rate_at(config, 100, 1.0) == pytest.approx(0.1)
    assert learning_rate_at(config, 10, None) == 1.0


def test_progress_follows_nearest_limit_and_epochs_stop_within_rounding():
    config = TrainConfig(out_dir="x", max_steps=100, time_budget=10.0)
    assert run_progress(config, 10, 0.0, 5.0) == 0.5
    assert stop_reason(config, 10, 0.0, 5.0) is None
    assert stop_reason(config, 100, 0.0, 5.0) == StopReason("max_steps", 100)
    assert stop_reason(config, 10, 0.0, 10.0) == StopReason("time_budget", 10.0)
    config = TrainConfig(out_dir="x", epochs=3.0)
    assert stop_reason(config, 30, 3.0 - 1e-12, 0.0) == StopReason("epochs", 3.0)
    assert stop_reason(config, 29, 2.9, 0.0) is None


def test_planned_steps_take_the_nearer_limit_and_a_stop_reason_names_it_as_spelled():
    assert planned_steps(TrainConfig(out_dir="x", max_steps=100, epochs=2.5), steps_per_epoch=30) == 75
    assert planned_steps(TrainConfig(out_dir="x", max_steps=50, epochs=2.5), steps_per_epoch=30) == 50
    assert planned_steps(TrainConfig(out_dir="x", time_budget=60), steps_per_epoch=30) is None
    assert str(StopReason("max_steps", 40)) == "reached max_steps 40"
    with options_spelled(lambda name: "--" + name):
        assert StopReason("time_budget", 60.0).describe() == "used the --time_budget of 60 s"
    assert str(StopReason("signal", signal_name="SIGTERM")) == "interrupted by SIGTERM"
    assert StopReason("signal", signal_name="SIGINT").interrupted and not StopReason("epochs", 2).interrupted



def test_a_slowdown_stretches_what_is_left_of_training_so_progress_and_the_rate_never_jump():
    config = TrainConfig(out_dir="x", time_budget=100.0, warmup_steps=0)
    schedule = Schedule(config, BudgetEnding(10.0, (0.25, 0.5, 0.75), (), 0.0, chars_per_s=1000.0))
    run = SimpleNamespace(step=500, epoch=0.0, position=1, epochs_done=0)
    assert schedule.progress(run, 40.0) == 0.5  # 40 s trained and 10 s kept, of 100
    before = schedule.learning_rate(run, 40.0)
    assert schedule.slowed(500.0, 10.0, 40.0, alone=True).startswith("this machine slowed")
    kept = 10.0 * 2**SLOWDOWN_END_EXPONENT
    assert schedule.reserve == pytest.approx(kept)
    assert schedule.progress(run, 40.0) == pytest.approx(0.5) and schedule.learning_rate(run, 40.0) == before
    # Half of what is left to train, from then on, is half of what was left of the run.
    assert schedule.progress(run, 40.0 + (60.0 - kept) / 2) == pytest.approx(0.75)
    assert schedule.stop(run, 100.0 - kept) == StopReason("time_budget", 100.0)
    assert schedule.progress(run, 100.0 - kept) == pytest.approx(1.0)
    # Each planned evaluation is still due once, as progress reaches it.
    due = [schedule.due(run, elapsed, None)[0] for elapsed in (40.0, 50.0, 60.0, 70.0, 80.0)]
    assert due == [True, False, True, False, False]
