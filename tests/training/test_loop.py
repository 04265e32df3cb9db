import dataclasses
import json
import time
from pathlib import Path

import pytest
import torch
from conftest import PHRASE

from charrnn.config import EVAL_SLICE, SampleConfig, TrainConfig, TrainingRequest
from charrnn.data.corpus import StreamBatches, encode_corpus, split_ids
from charrnn.errors import CharrnnError
from charrnn.generation.sample import generate
from charrnn.models.evaluate import SCORING_PROBE_STEPS, evaluate, stream_layout
from charrnn.training import budget as budget_module
from charrnn.training import loop
from charrnn.training.budget import BUDGET_GUARD_EPOCHS, CALIBRATION_SAMPLE, FINAL_WORK_MARGIN, most_epochs
from charrnn.training.checkpoint import load_model
from charrnn.training.observer import TrainObserver
from charrnn.training.plan import plan_training
from charrnn.training.schedule import RunAlreadyFinished, StopReason, schedule_warnings
from charrnn.training.state import TrainingRun
from charrnn.utils.hardware import LoadWatch, ThreadChoice

from helpers import SCORE_TOLERANCE, TEST_DEVICE, plan_run, read_jsonl

# 2430 training characters in 8 streams of 303, 32 per step: 10 steps per epoch.
OPTIONS = {"hidden_size": 64, "embed_size": 16, "batch_size": 8, "seq_len": 32, "warmup_steps": 10}


@pytest.fixture(autouse=True)
def the_fake_clocks_are_the_planned_machine(monkeypatch):
    """A budget's probe times the wall clock; FakeClock runs see the speed their plan expects."""
    monkeypatch.setattr("charrnn.training.budget.planned_speed", lambda budget: None)


def train_tiny(make_run, corpus: Path, out: Path, **options):
    return make_run(corpus, out, **{**OPTIONS, **options})


@pytest.mark.slow
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_overfits_repeated_text_then_greedy_reproduces_it(make_run, repeated_corpus, tmp_path, cell):
    result = train_tiny(make_run, repeated_corpus, tmp_path / "run", cell=cell, max_steps=150, eval_every=50)
    assert result.best.nats_per_char < 0.1
    loaded = load_model(tmp_path / "run" / "best.pt")
    prime = "the quick brown"
    steps = generate(loaded.network, loaded.vocab, SampleConfig(length=2 * len(PHRASE), greedy=True), prime)
    text = prime + "".join(chars[0] for chars in steps)
    assert text == (PHRASE * 4)[: len(text)]


def test_run_directory_contents(make_run, repeated_corpus, tmp_path):
    out = tmp_path / "run"
    result = train_tiny(make_run, repeated_corpus, out, max_steps=12, eval_every=5, save_every=5)
    assert {p.name for p in out.iterdir()} == {"best.pt", "last.pt", "metrics.jsonl", "losses.jsonl",
                                               "config.json"}
    records = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in records] == [5, 10, 12]
    # Every step is a hundredth or more of a 12-step run: a row each, whose means the evaluations report.
    losses = read_jsonl(out / "losses.jsonl")
    assert [row["step"] for row in losses] == list(range(1, 13))
    assert records[0]["train_loss"] == pytest.approx(sum(row["train_loss"] for row in losses[:5]) / 5)
    assert set(records[0]) == {"step", "epoch", "train_loss", "val_loss", "val_bits_per_char",
                               "learning_rate", "chars_per_s", "elapsed_s"}
    assert result.best.nats_per_char == min(r["val_loss"] for r in records)
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["cell"] == "lstm" and config["train"]["max_steps"] == 12
    assert config["corpus"]["split_point"] == int(len(PHRASE * 60) * 0.9)
    payload = torch.load(out / "last.pt", weights_only=True)
    assert payload["step"] == 12 and payload["format_version"] == 1
    assert config["run_id"] == payload["run_id"]


class FakeClock(TrainObserver):
    """A wall clock that moves only when a step ends, by ``step_seconds``: runs become exact."""

    def __init__(self, step_seconds: float):
        self.now = 1000.0
        self.step_seconds = step_seconds
        self.messages: list[str] = []

    def on_message(self, text: str) -> None:
        self.messages.append(text)

    def __call__(self) -> float:
        return self.now

    def on_step(self, report) -> None:
        self.now += self.step_seconds


def measured_end(monkeypatch, pass_s: float, other_s: float = 0.0) -> None:
    """A time budget's end measured at ``pass_s`` a pass over the validation split and ``other_s`` to save."""
    monkeypatch.setattr(budget_module, "final_work_seconds",
                        lambda model, vocab, config, val, clock: budget_module.BudgetEnd(
                            pass_s, 2 if config.ema_decay > 0 else 1, other_s))


@pytest.fixture
def budget_run(repeated_corpus, tmp_path, monkeypatch):
    """``budget_run(step_s, pass_s, **options)``: a tiny run (OPTIONS, then ``options``) into tmp_path/``out``
    on a FakeClock that moves ``step_s`` a step, its end measured at ``pass_s`` a pass (None: not replaced),
    ``spent_s`` of it gone before training, its plan changed by ``adjust``. Returns the result, the clock and
    metrics.jsonl's records."""
    def run(step_s: float, pass_s: float | None = None, out: str = "run", spent_s: float = 0.0,
            adjust=lambda plan: plan, **options):
        if pass_s is not None:
            measured_end(monkeypatch, pass_s)
        clock = FakeClock(step_seconds=step_s)
        plan = plan_run(repeated_corpus, tmp_path / out, **{**OPTIONS, **options})
        result = adjust(dataclasses.replace(plan, started=clock.now - spent_s)).run(clock, clock=clock)
        return result, clock, read_jsonl(tmp_path / out / "metrics.jsonl")

    return run


def test_time_budget_stops_cleanly_and_evaluates_only_at_the_end(budget_run, tmp_path):
    # A clock that stood still: an end that costs nothing; steps of 0.125 s, exact in binary.
    result, _, records = budget_run(0.125, pass_s=0.0, time_budget=1.5, save_every=10)
    # The clock is read after each step, before the step is reported: step 13 sees 12 × 0.125 = 1.5 s.
    assert result.stop_reason == StopReason("time_budget", 1.5)
    assert result.steps == 13 and result.elapsed_s == 13 * 0.125
    assert (tmp_path / "run" / "best.pt").exists()
    assert len(records) == 1 and records[0]["step"] == 13


def test_evaluation_interval_and_a_schedule_beyond_the_runs_end_is_named():
    assert TrainConfig(out_dir=".").evaluation_interval == 1000
    assert TrainConfig(out_dir=".", time_budget=60).evaluation_interval is None
    assert TrainConfig(out_dir=".", time_budget=60, eval_every=50).evaluation_interval == 50
    config = TrainConfig(out_dir=".", max_steps=300, eval_every=500, save_every=400, sample_every=1000)
    warnings = schedule_warnings(config, steps_per_epoch=100, total_steps=300)
    end = "lies beyond this run's end (300 steps, 3.00 epochs)"
    assert warnings == [f"warning: eval_every 500 {end}: it evaluates only at the end",
                        f"warning: save_every 400 {end}: last.pt is written only at the end",
                        f"warning: sample_every 1,000 {end}: it records a sample only at the end"]
    assert schedule_warnings(TrainConfig(out_dir=".", max_steps=300), 100, 300) == []  # defaults say nothing


def test_validation_split_too_short(make_run, tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("abcdefghij" * 20, encoding="utf-8")
    with pytest.raises(CharrnnError, match="validation split has 1"):
        train_tiny(make_run, path, tmp_path / "run", val_frac=0.004, batch_size=2, seq_len=4, max_steps=1)


@pytest.mark.parametrize(("out", "refusal"), [("file/run", "cannot use the run directory .*Not a directory"),
                                              ("file", "is a file, not a directory"),
                                              ("/dev/null", "is a file, not a directory")])
def test_out_under_or_naming_a_file_is_refused(make_run, repeated_corpus, tmp_path, out, refusal):
    (tmp_path / "file").write_text("")
    with pytest.raises(CharrnnError, match=refusal):
        train_tiny(make_run, repeated_corpus, tmp_path / out, max_steps=1)


def test_save_epochs_keeps_named_checkpoints_and_marks_metrics(make_run, repeated_corpus, tmp_path):
    out = tmp_path / "run"
    # 2430 training chars, 8 streams of 303, seq 32: 10 steps per epoch, and epochs stop after full passes.
    result = train_tiny(make_run, repeated_corpus, out, epochs=3, eval_every=1000, save_epochs=[1, 3])
    assert result.steps == 30 and result.epoch == 3.0 and result.stop_reason == StopReason("epochs", 3)
    names = sorted(p.name for p in out.glob("epoch*.pt"))
    assert [n[:9] for n in names] == ["epoch0001", "epoch0003"]
    records = read_jsonl(out / "metrics.jsonl")
    marked = {r["epoch_checkpoint"]: r for r in records if "epoch_checkpoint" in r}
    assert sorted(marked) == names
    for name, record in marked.items():
        assert name == f"epoch{int(record['epoch']):04d}-val{record['val_loss']:.4f}.pt"
        payload = torch.load(out / name, weights_only=True)
        assert payload["epoch"] == int(record["epoch"]) and payload["epoch_step"] == 0
    assert [r["step"] for r in records] == [10, 30]  # the final evaluation is the epoch-3 one


@pytest.mark.slow
@pytest.mark.parametrize("cell,regularisation", [
    ("lstm", {"dropout": 0.3}),
    ("gru", {"dropout": 0.3}),
    ("lstm", {"dropout": 0.3, "weight_drop": 0.3, "locked_dropout": True, "input_dropout": 0.1,
              "embed_dropout": 0.1, "ema_decay": 0.9}),
    ("gru", {"dropout": 0.3, "weight_drop": 0.3, "skip_connections": True}),
    ("lstm", {"dropout": 0.3, "optimizer": "muon", "weight_decay": 0.1}),
])
def test_resume_is_exact_with_dropout(make_run, repeated_corpus, tmp_path, cell, regularisation):
    options = {"cell": cell, "num_layers": 2, "min_lr_ratio": 1.0, "warmup_steps": 0, "eval_every": 5,
               "save_every": 7, **regularisation}
    # 10 steps per epoch: the resumed half crosses an epoch boundary (state reset).
    straight = tmp_path / "straight"
    train_tiny(make_run, repeated_corpus, straight, max_steps=14, **options)
    halves = tmp_path / "halves"
    train_tiny(make_run, repeated_corpus, halves, max_steps=7, **options)
    plan = plan_run(None, None, resume=halves / "last.pt", max_steps=14)
    assert plan.resume.changes == [("max_steps", 7, 14)] and not plan.resume.branch
    earlier = torch.load(halves / "last.pt", weights_only=True)["elapsed_s"]
    assert plan.run().earlier_s == earlier > 0  # the summary says how much of its wall time came before
    ends = [torch.load(run / "last.pt", weights_only=True) for run in (straight, halves)]
    for name, value in ends[0]["model_state"].items():
        assert (value - ends[1]["model_state"][name]).abs().max() <= 1e-6, name
    if "ema_decay" in regularisation:
        averages = [end["weight_average"] for end in ends]
        assert averages[0]["updates"] == averages[1]["updates"] == 14
        for name, value in averages[0]["weights"].items():
            assert (value - averages[1]["weights"][name]).abs().max() <= 1e-6, name
    # Appended after the first half's records, not rewritten.
    assert [row["step"] for row in read_jsonl(halves / "metrics.jsonl")] == [5, 7, 10, 14]


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_training_with_pinned_batches(make_run, repeated_corpus, tmp_path, precision):
    plan = plan_run(repeated_corpus, tmp_path / "run", **OPTIONS, max_steps=150, eval_every=50,
                    precision=precision)
    plan.config.device = "cuda"
    result = plan.run()
    assert result.best.nats_per_char < 0.2
    # Checkpoints written on the GPU load on the CPU, in float32.
    loaded = load_model(tmp_path / "run" / "best.pt")
    assert all(p.device.type == "cpu" and p.dtype == torch.float32 for p in loaded.network.parameters())


@pytest.mark.parametrize("failure", [MemoryError(),
                                     RuntimeError("DefaultCPUAllocator: can't allocate memory")])
def test_running_out_of_memory_saves_the_last_whole_step_and_resumes_exactly(
        make_run, repeated_corpus, tmp_path, monkeypatch, failure):
    reference = tmp_path / "reference"
    train_tiny(make_run, repeated_corpus, reference, max_steps=12, eval_every=5)
    backward = torch.Tensor.backward
    calls = []

    def failing_at_the_eighth(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 8:  # after the forward pass, with the next segment's state already computed
            raise failure
        return backward(self, *args, **kwargs)

    out = tmp_path / "run"
    monkeypatch.setattr(torch.Tensor, "backward", failing_at_the_eighth)
    with pytest.raises(CharrnnError) as refused:
        train_tiny(make_run, repeated_corpus, out, max_steps=12, eval_every=5)
    monkeypatch.setattr(torch.Tensor, "backward", backward)
    assert str(refused.value).startswith("out of memory after step 7; saved last.pt at step 7")
    assert torch.load(out / "last.pt", weights_only=True)["step"] == 7
    make_run(None, None, resume=out, max_steps=12)
    resumed = torch.load(out / "last.pt", weights_only=True)["model_state"]
    expected = torch.load(reference / "last.pt", weights_only=True)["model_state"]
    assert all(torch.equal(resumed[key], expected[key]) for key in expected)


def test_a_time_budget_keeps_time_for_the_final_evaluation_and_saves_and_once_used_cannot_be_resumed(
        budget_run, tmp_path):
    # Kept for the end: two passes (the trained and the averaged weights) of 0.25 s, × FINAL_WORK_MARGIN 1.05.
    result, clock, _ = budget_run(0.125, pass_s=0.25, time_budget=1.5)
    assert result.stop_reason == StopReason("time_budget", 1.5)
    assert result.steps == 9  # step 9 sees 8 × 0.125 = 1.0 s, and 1.0 + 0.5 reaches the budget
    assert result.trained_s == 1.0 and result.to_dict()["trained_s"] == 1.0  # when training stopped
    told = "time_budget 1.5 s: training stops about 0.5 s before the end, to evaluate and save inside it"
    assert told in clock.messages  # whole: what follows the run is kept no time
    # Resumed with the same budget, a run whose end needs the time left says so before writing anything.
    before = {path.name: path.read_bytes() for path in (tmp_path / "run").iterdir()}
    with pytest.raises(RunAlreadyFinished, match="this run already used the time_budget of 1.5 s"):
        plan_run(None, None, resume=tmp_path / "run").run(clock, clock=clock)
    assert {path.name: path.read_bytes() for path in (tmp_path / "run").iterdir()} == before
    # So is one whose own start (loading, measuring: 59 s of a 60-s budget) leaves its end no time.
    request = TrainingRequest(None, {"time_budget": 60.0}, None, resume=tmp_path / "run", device=TEST_DEVICE)
    with pytest.raises(RunAlreadyFinished, match="already used the time_budget of 60 s"):
        plan_training(request, started=time.perf_counter() - 59.0)
    assert plan_training(request).config.time_budget == 60.0  # started now: time enough
    # A caller that needs a quarter second once training returns (the command line: its exit) gets it.
    finishing, clock, _ = budget_run(0.125, out="finishing", time_budget=1.5, finish_s=0.25)
    # Over 3% of the budget, that time is told: the command's exit may take less, and end it early.
    told = "stops about 0.8 s before the end, to evaluate and save inside it (0.25 s of it for what follows"
    assert finishing.steps == 7 and any(told in message for message in clock.messages)


def test_a_machine_slower_than_planned_keeps_more_time_for_the_end_and_says_so(budget_run):
    """The plan measured twice the speed the run sees: training stops earlier, keeping time for the end."""
    def slowed(plan):  # 8 × 32 characters a step of 0.125 s: 2,048 chars/s on this clock
        assert plan.ending.reserve_s == pytest.approx(0.42)
        return dataclasses.replace(plan, ending=dataclasses.replace(plan.ending, chars_per_s=4096.0))

    result, clock, _ = budget_run(0.125, pass_s=0.2, time_budget=1.5, adjust=slowed)
    assert result.stop_reason == StopReason("time_budget", 1.5)
    assert result.steps < 9  # the planned speed's run trains 9 steps (the test above)
    noticed = [message for message in clock.messages if message.startswith("this machine slowed")]
    assert noticed and all("not the 4,096 the plan measured" in message for message in noticed)
    kept = [float(message.split("training now stops ")[1].split(" s")[0]) for message in noticed]
    assert kept == sorted(kept) and kept[0] > 0.42  # each says the time kept has grown again
    assert result.trained_s <= 1.5 - kept[-1] + 1e-9


@pytest.mark.parametrize("given", [False, True])
def test_a_slowed_run_leaves_the_cores_other_programs_keep_busy_unless_its_threads_were_given(
        budget_run, monkeypatch, given):
    """On a busy core the run trains, and ends, on the cores left; a thread count the user gave stays."""
    monkeypatch.setattr(LoadWatch, "others_busy", lambda self: 1)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    threads = ThreadChoice(2, "--threads" if given else "2 cores, all free", given)
    try:
        _, clock, _ = budget_run(0.125, pass_s=0.2, time_budget=1.5, adjust=lambda plan: dataclasses.replace(
            plan, ending=dataclasses.replace(plan.ending, chars_per_s=4096.0), threads=threads))
        assert torch.get_num_threads() == (2 if given else 1)
    finally:
        torch.set_num_threads(before)
    left = [message for message in clock.messages if message.startswith("other programs keep")]
    said = "other programs keep 1 of this machine's 2 cores busy: training goes on with 1 thread"
    assert left == ([] if given else [said])


def test_the_final_work_is_timed_on_a_part_of_the_first_batch_and_scaled_and_keeps_time_for_a_sample(
        small_corpus, tmp_path):
    def timed(plan, val, readings):
        run = TrainingRun(plan.model_config, plan.config, plan.vocab, plan.corpus,
                          StreamBatches(plan.ids[:5000], 4, 16))
        end = budget_module.final_work_seconds(run.model, run.vocab, run.config, val, lambda: next(readings))
        return run, end

    plan = plan_run(small_corpus, tmp_path / "run", max_steps=1)
    val = plan.ids.repeat(8)[: 3 * EVAL_SLICE + 1]  # 3 streams
    run, end = timed(plan, val, iter([10.0, 12.0, 12.0, 14.5, 14.5, 17.0]))  # at best, the steps take 2 s
    layout = stream_layout(run.model, len(val))
    assert layout.streams == 3
    assert end.pass_s == pytest.approx(2.0 * layout.positions / (3 * SCORING_PROBE_STEPS))
    assert end.pass_s * FINAL_WORK_MARGIN < end.reserve_s() < (end.pass_s + 1.0) * FINAL_WORK_MARGIN
    # A run that records samples keeps time for one.
    sampling = plan_run(small_corpus, tmp_path / "sampling", max_steps=1, sample_every=10, sample_length=320)
    readings = iter([0.0] * 6 + [5.0, 6.0])  # evaluation free; CALIBRATION_SAMPLE characters take 1 s
    _, end = timed(sampling, sampling.ids[:100], readings)
    assert end.reserve_s() >= FINAL_WORK_MARGIN * 320 / CALIBRATION_SAMPLE


@pytest.mark.parametrize("spent", [0, 20])
def test_a_long_budget_evaluates_over_what_is_left_once_training_starts_and_a_resume_plans_for_the_rest(
        budget_run, tmp_path, spent):
    # An evaluation (of the trained and the averaged weights) costs 1 s: 5% of a 100-s budget pays for 5,
    # evenly through what is left once training starts (all of it, or 80 s once loading and measuring took
    # 20), until 1.05 s (the final evaluation's, with its margin) before the budget's end (the epoch limit,
    # given, is out of reach).
    result, clock, records = budget_run(0.5, pass_s=0.5, spent_s=spent, time_budget=100, epochs=1000)
    assert len(records) == 6 and records[0]["step"] > 1  # five during training, one at the end
    planned = [spent + (98.95 - spent) * k / 6 for k in range(1, 6)]  # k / (5 + 1) of the time left
    assert all(0 <= record["elapsed_s"] - moment <= 1
               for record, moment in zip(records, planned, strict=False))
    assert any("5 evaluations during training, evenly through it (the whole validation split, about 1.0 s "
               "each)" in message for message in clock.messages)
    assert not any("val_chars" in record for record in records)
    assert result.best.nats_per_char == min(record["val_loss"] for record in records)
    # Resumed with 10 s more, its share pays for none.
    clock.messages.clear()
    plan_run(None, None, resume=tmp_path / "run", time_budget=110).run(clock, clock=clock)
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert len(records) == 7  # five during the first session, its end's, and the resumed session's end
    assert any("no evaluations during training (too little of the budget is left)" in message
               for message in clock.messages)


def planned_evaluations(monkeypatch, evaluates: bool) -> None:
    """Have a time budget plan its every shape to evaluate during training, or not."""
    predict = budget_module.predict_candidates
    monkeypatch.setattr(budget_module, "predict_candidates", lambda *args, **kwargs: tuple(
        dataclasses.replace(candidate, evaluates=evaluates) for candidate in predict(*args, **kwargs)))


@pytest.mark.slow
def test_a_budget_planned_for_few_passes_evaluates_only_at_its_end(budget_run, repeated_corpus, tmp_path,
                                                                    monkeypatch):
    # The same run as above, but its budget planned under 3 passes: it cannot overfit, so nothing is spent on
    # evaluations during training. A given --eval-every still evaluates on its schedule.
    measured_end(monkeypatch, pass_s=0.5)
    plan = plan_run(repeated_corpus, tmp_path / "run", **OPTIONS, time_budget=100, epochs=1000)
    assert plan.budget.choice.epochs >= BUDGET_GUARD_EPOCHS and plan.budget.choice.evaluates  # many passes
    planned_evaluations(monkeypatch, False)
    _, clock, records = budget_run(0.5, out="few", time_budget=100, epochs=1000)
    assert len(records) == 1
    assert any("no evaluations during training (with them its shape would train under 3 epochs" in message
               for message in clock.messages)
    assert any("stops about 1.1 s before the end" in m for m in clock.messages)  # 2 passes × 1.05
    _, _, scheduled = budget_run(0.5, out="scheduled", time_budget=100, epochs=1000, eval_every=50)
    assert len(scheduled) > 1


def test_an_evaluation_a_slow_step_carried_to_the_end_is_left_to_the_ends_own(budget_run):
    # Steps of 16.4 s on a 100-s budget: the fifth moment falls due at the step just before the last, whose
    # end's evaluation would follow it at once: four evaluations during training, then the end's.
    _, _, records = budget_run(16.4, pass_s=0.5, time_budget=100, epochs=1000)
    steps = [record["step"] for record in records]
    assert len(steps) == 5 and steps[-1] - steps[-2] >= 2  # the end's evaluation stands alone


def test_a_budget_whose_share_pays_for_fewer_than_three_evaluations_makes_none(budget_run, monkeypatch):
    # An evaluation (of the trained and the averaged weights) costs 2 s: 5% of 100 s pays for 2.5.
    planned_evaluations(monkeypatch, True)
    _, clock, records = budget_run(0.5, pass_s=1.0, time_budget=100, epochs=1000)
    assert not any("evaluations during training, evenly" in message for message in clock.messages)
    assert any("no evaluations during training (5% of the budget pays for fewer than 3)" in message
               for message in clock.messages)
    assert len(records) == 1


@pytest.mark.parametrize("spent", [0.0, 0.4])
def test_a_budget_that_affords_more_passes_than_the_rule_trusts_ends_early(budget_run, spent):
    """With or without 40% spent before training, evaluations fall evenly through the passes it trains."""
    limit = most_epochs(2430)  # the passes a budget plans over this corpus's training split, at most
    budget = 10 * limit * 2  # time for twice the limit's steps (ten a pass)
    result, _, records = budget_run(0.5, pass_s=0.5, spent_s=spent * budget, time_budget=budget)
    assert result.stop_reason == StopReason("epochs", limit)
    assert result.epoch == pytest.approx(limit, abs=0.1)  # in whole steps
    assert result.config.epochs == limit and result.trained_s < (spent + 0.6) * budget
    # Its evaluations are spread over the passes it makes (near limit × k / (n + 1)), never before.
    evaluations = len(records) - 1
    assert evaluations >= 3 and records[-1]["epoch"] == result.epoch
    assert all(0 <= record["epoch"] - limit * k / (evaluations + 1) <= 0.2
               for k, record in enumerate(records[:-1], start=1))


def whole_score(checkpoint: Path, corpus: Path, chars: int | None = None) -> tuple[dict, float]:
    """A checkpoint's recorded best, and its weights' score on the val split (its first ``chars``)."""
    payload = torch.load(checkpoint, weights_only=True)
    encoded = encode_corpus(corpus, "repeat", 0.1)
    model = load_model(checkpoint).network.to(TEST_DEVICE)
    val = split_ids(encoded.ids, encoded.info.split_point).val
    return payload["best"], evaluate(model, val if chars is None else val[: chars + 1]).nats_per_char


def test_best_pt_keeps_the_best_weights_a_budget_evaluated_when_the_run_ends_worse(
        budget_run, repeated_corpus, tmp_path, monkeypatch):
    # Five evaluations during a 100-s budget (as above); every step from the 100th adds noise to the weights.
    train_step = loop.train_step

    def wrecking(run, learning_rate):
        result = train_step(run, learning_rate)
        if run.step >= 100:
            with torch.no_grad():
                for parameter in run.model.parameters():
                    parameter.add_(torch.randn_like(parameter))
        return result

    monkeypatch.setattr(loop, "train_step", wrecking)
    result, _, records = budget_run(0.5, pass_s=0.5, time_budget=100, epochs=1000)
    scores = [min(record["val_loss"], record["averaged_val_loss"]) for record in records]
    best_during = min(range(len(records) - 1), key=scores.__getitem__)
    assert len(records) == 6 and scores[-1] > scores[best_during]  # the run ends worse than it was
    assert torch.load(tmp_path / "run" / "best.pt", weights_only=True)["step"] == records[best_during]["step"]
    recorded, recomputed = whole_score(tmp_path / "run" / "best.pt", repeated_corpus)
    assert recorded["nats_per_char"] == pytest.approx(recomputed, abs=SCORE_TOLERANCE)
    assert result.best.nats_per_char == recorded["nats_per_char"] == scores[best_during]


def test_a_budget_that_cannot_pay_for_its_end_is_refused_before_anything_is_written(budget_run, tmp_path):
    """A budget too short to score the validation split is refused at once, rather than overrun."""
    # Two passes of 30 s, with the margin: 63 s for the end of a 60-s budget.
    expected = (r"time_budget 60 s cannot pay for this run's end: scoring the \d+ validation characters "
                r"of the trained and the averaged weights and saving take about 63.0 s.*well above 6[34] s.*"
                r"hold out less text with val_max_chars or val_frac \(now 300000 and 0.1\)")
    with pytest.raises(CharrnnError, match=expected):
        budget_run(0.5, pass_s=30.0, out="new/run", time_budget=60)
    assert not (tmp_path / "new").exists()  # the directories it made to prove them writable are gone again
    (tmp_path / "mine").mkdir()  # a directory the user made stays, empty as it was
    with pytest.raises(CharrnnError, match=expected):
        budget_run(0.5, out="mine", time_budget=60)
    assert (tmp_path / "mine").is_dir() and not any((tmp_path / "mine").iterdir())


def test_a_budget_and_a_step_limit_stop_at_whichever_comes_first_and_say_so(budget_run):
    result, clock, _ = budget_run(0.125, time_budget=100, max_steps=5)
    assert result.stop_reason == StopReason("max_steps", 5)
    assert "time_budget 100 s and max_steps 5: the run stops at whichever comes first" in clock.messages


def test_a_limit_the_budgets_plan_chose_is_not_told_as_the_users(repeated_corpus, tmp_path, monkeypatch):
    measured_end(monkeypatch, pass_s=0.0)
    clock = FakeClock(step_seconds=0.125)
    plan = plan_run(repeated_corpus, tmp_path / "run", time_budget=2, save_every=10)
    assert "epochs" in plan.budget.chosen  # the plan's own pass limit, not the user's
    result = plan.run(clock, clock=clock)
    assert not [message for message in clock.messages if "whichever comes first" in message]
    # Nor when the run resumes with more time; an --epochs given then is the user's.
    assert result.stop_reason.criterion == "time_budget"
    for seconds, given, told in ((3, {}, False), (4, {"epochs": 1000.0}, True)):
        clock.messages.clear()
        resumed = plan_run(None, None, resume=tmp_path / "run", time_budget=seconds, **given)
        # --json gives what the budget weighed, as config.json keeps it.
        weighed = resumed.run(clock, clock=clock).to_dict()["budget"]
        assert weighed == json.loads(json.dumps(plan.budget.to_dict()))
        assert any("whichever comes first" in message for message in clock.messages) is told


def test_every_evaluation_scores_the_same_start_of_the_split_when_told(make_run, repeated_corpus, tmp_path):
    result = train_tiny(make_run, repeated_corpus, tmp_path / "run", max_steps=30, eval_every=10,
                        eval_chars=100)
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [record.get("val_chars") for record in records] == [100, 100, 100]  # the end's too
    recorded, recomputed = whole_score(tmp_path / "run" / "best.pt", repeated_corpus, chars=100)
    assert recorded["chars"] == result.best.chars == 100
    assert recorded["nats_per_char"] == pytest.approx(recomputed, abs=SCORE_TOLERANCE)


def test_a_budget_plans_as_many_evaluations_as_its_share_pays_for():
    # A pass over the validation split costs 10 s: 5% of a 1,000-s budget (50 s) pays for five.
    end = budget_module.BudgetEnd(pass_s=10.0, weight_sets=1)
    assert end.evaluations(1000) == 5
    assert end.evaluations(10**6) == 10  # never more than ten
    assert end.evaluations(500) == 0  # 25 s pays for fewer than three: none
    assert dataclasses.replace(end, weight_sets=2).evaluations(1000) == 0  # each scores two sets of weights
    assert dataclasses.replace(end, pass_s=0.0).evaluations(1000) == 0  # a clock that stood still
