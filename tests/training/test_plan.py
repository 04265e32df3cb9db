"""Planning a run: defaults, time-budget shapes, resuming and fine-tuning, checked without click."""

import dataclasses
import json
from pathlib import Path

import pytest

import charrnn
from charrnn.config import ModelConfig, TrainingRequest
from charrnn.errors import CharrnnError, ConfigError, OptionConflict
from charrnn.models.devices import BF16_LARGEST_HIDDEN, resolve_precision
from charrnn.models.model import parameter_count
from charrnn.training.budget import BUDGET_LADDER, Speed
from charrnn.training.checkpoint import load_checkpoint
from charrnn.training.plan import RunAlreadyFinished, fine_tune_config, plan_training, resume_config
from charrnn.training.schedule import BudgetEnding, StopReason

from helpers import plan_run


def test_resume_refuses_a_different_model_or_layout(tiny_run):
    payload = load_checkpoint(tiny_run / "last.pt")
    with pytest.raises(CharrnnError, match="hidden_size 64 contradicts the checkpoint"):
        resume_config(payload, {"hidden_size": 64}, {})
    with pytest.raises(CharrnnError, match="batch_size 9 contradicts"):
        resume_config(payload, {}, {"batch_size": 9})
    with pytest.raises(RunAlreadyFinished) as finished:
        resume_config(payload, {}, {})
    assert finished.value.reason == StopReason("max_steps", 40)
    # Every limit still applies: a larger other one is not enough, and the refusal names the one reached.
    limits = {**payload["train_config"], "time_budget": 30.0, "max_steps": None}
    budgeted = {**payload, "train_config": limits, "elapsed_s": 31.0}
    refusal = "used the time_budget of 30 s; give a larger time_budget to continue"
    with pytest.raises(RunAlreadyFinished, match=refusal):
        resume_config(budgeted, {}, {"epochs": 50.0})
    _, config, changes = resume_config(payload, {"hidden_size": 32},
                                       {"learning_rate": 1e-3, "seed": 1337, "max_steps": 80})
    assert config.learning_rate == 1e-3 and config.max_steps == 80
    assert changes == [("learning_rate", 0.01, 0.001), ("max_steps", 40, 80)]
    with pytest.raises(CharrnnError, match="ema_decay 0.9 contradicts the checkpoint"):
        resume_config(payload, {}, {"ema_decay": 0.9, "max_steps": 80})
    with pytest.raises(CharrnnError, match="weight_drop 0.2 contradicts the checkpoint"):
        resume_config(payload, {"weight_drop": 0.2}, {"max_steps": 80})


def test_a_resume_plan_checks_the_corpus_before_anything_runs(tiny_run, tmp_path):
    other = tmp_path / "other.txt"
    other.write_text("not the text this run was trained on\n" * 50, encoding="utf-8")
    with pytest.raises(CharrnnError, match="is not the text this run was trained on"):
        plan_run(other, None, resume=tiny_run / "last.pt", max_steps=80)
    plan = plan_run(None, None, resume=tiny_run, max_steps=80)  # a run directory means its last.pt
    assert plan.resume.checkpoint == tiny_run / "last.pt" and plan.resume.step == 40
    assert plan.config.out_dir == str(tiny_run) and plan.resume_from["step"] == 40


def test_muon_lr_is_refused_where_muon_steps_nothing_and_a_muon_resume_may_change_it(tiny_run, make_run,
                                                                                     small_corpus, tmp_path):
    refusal = "muon_lr is Muon's rate: it goes with optimizer muon"
    for corpus, where in ((small_corpus, {}), (None, {"resume": tiny_run})):  # new; an AdamW run resumed
        with pytest.raises(OptionConflict, match=refusal):
            plan_run(corpus, tmp_path / "new", muon_lr=0.02, max_steps=80, **where)
    with pytest.raises(OptionConflict, match=refusal):  # a fine-tune has the default optimiser unless given
        plan_training(TrainingRequest(small_corpus, {"muon_lr": 0.02}, tmp_path / "tuned",
                                      init_from=tiny_run))
    make_run(small_corpus, tmp_path / "muon", optimizer="muon", max_steps=4)
    plan = plan_run(None, None, resume=tmp_path / "muon", muon_lr=0.02, max_steps=8)  # the run's optimiser
    assert plan.config.optimizer == "muon" and plan.config.muon_lr == 0.02
    assert not (tmp_path / "new").exists() and not (tmp_path / "tuned").exists()


def test_a_resumed_run_keeps_the_split_it_was_trained_with(tiny_run, monkeypatch):
    """A run keeps its split whatever the rule for new runs has become."""
    recorded = json.loads((tiny_run / "config.json").read_text())["corpus"]["split_point"]
    monkeypatch.setattr("charrnn.data.corpus.split_point", lambda *args: 10)
    plan = plan_run(None, None, resume=tiny_run, max_steps=80)
    assert plan.corpus.split_point == recorded != 10


def test_eval_chars_past_the_split_means_the_whole_split_and_another_text_is_refused(tiny_run):
    payload = load_checkpoint(tiny_run / "last.pt")
    whole = payload["corpus"]["chars"] - payload["corpus"]["split_point"] - 1
    payload["train_config"]["eval_chars"] = 10 * whole  # past the split's end: the whole split, as none is
    for given in (10 * whole, whole, None):
        assert resume_config(payload, {}, {"max_steps": 80, "eval_chars": given})[1].eval_chars is None
    with pytest.raises(CharrnnError, match=r"eval_chars 100 contradicts the checkpoint \(eval_chars none\)"):
        resume_config(payload, {}, {"max_steps": 80, "eval_chars": 100})  # another text: refused


@pytest.mark.parametrize(("native", "precision", "expected"), [
    (False, "auto", "fp32"), (True, "fp32", "fp32"), (True, "auto", "bf16"), (True, "bf16", "bf16")])
def test_a_time_budget_times_the_ladder_in_the_precision_training_will_use_and_fills_what_was_not_given(
        monkeypatch, cpu_bf16, small_corpus, native, precision, expected):
    cpu_bf16(native)
    seen = {}

    def measure(model_config, config, *args):
        seen[model_config.hidden_size] = resolve_precision(config.precision, "cpu", model_config)
        if model_config.hidden_size > BF16_LARGEST_HIDDEN:  # too slow to choose here
            return Speed(1.0, 1.0)
        return Speed(1e10 / parameter_count(model_config), 1e11 / parameter_count(model_config))

    monkeypatch.setattr("charrnn.training.budget.measure_speed", measure)
    options = {"time_budget": 600, "batch_size": 4, "precision": precision}
    plan = plan_training(TrainingRequest(small_corpus, options, device="cpu"))
    assert plan.budget.planned and plan.budget.precision == expected
    assert {seen[h] for h in seen if h <= BF16_LARGEST_HIDDEN} == {expected}
    if precision == "bf16":  # wider shapes, which did not learn in bf16, are not candidates
        assert max(seen) <= BF16_LARGEST_HIDDEN
        assert all(c.settings["hidden_size"] <= BF16_LARGEST_HIDDEN for c in plan.budget.candidates)
    choice = plan.budget.choice
    assert plan.config.batch_size == 4 and "batch_size" not in plan.budget.chosen
    assert plan.model_config.hidden_size == choice.settings["hidden_size"]
    assert plan.config.learning_rate == choice.settings["learning_rate"]
    assert plan.model_config.dropout == plan.budget.chosen["dropout"]
    assert plan.config.ema_decay == plan.budget.chosen["ema_decay"] > 0


@pytest.mark.parametrize("options", [{"cell": "gru"}, {"layer_norm": True}])
def test_a_time_budget_leaves_cells_the_rule_was_not_fitted_on_alone(small_corpus, options):
    plan = plan_training(TrainingRequest(small_corpus, {"time_budget": 100, **options}, device="cpu"))
    assert not plan.budget.planned and plan.budget.chosen == {}
    assert plan.model_config.hidden_size == ModelConfig(vocab_size=1).hidden_size


def test_a_time_budget_on_a_gpu_plans_from_that_device_s_own_measurements(monkeypatch, small_corpus):
    devices = set()

    def measure(model_config, config, *args):
        devices.add(config.device)
        return Speed(1e11 / parameter_count(model_config), 1e12 / parameter_count(model_config))

    monkeypatch.setattr("charrnn.training.budget.measure_speed", measure)
    monkeypatch.setattr("charrnn.training.budget.check_model_fits", lambda *args: None)
    # This machine has no such GPU to check the chosen shape's fit on, or to time its end with.
    monkeypatch.setattr("charrnn.training.plan.check_model_fits", lambda *args: None)
    monkeypatch.setattr("charrnn.training.plan.plan_budget_end",
                        lambda model, config, *args, **kwargs: BudgetEnding(config, 0.0, (), ()))
    plan = plan_training(TrainingRequest(small_corpus, {"time_budget": 100, "precision": "fp32"},
                                         device="cuda:1"))
    assert devices == {"cuda:1"} and plan.budget.device == "cuda" and plan.budget.planned


def test_options_that_cannot_go_together_are_refused_before_any_work(small_corpus, tmp_path):
    with pytest.raises(OptionConflict, match="give one of them"):
        plan_training(TrainingRequest(small_corpus, resume=tmp_path / "a.pt", init_from=tmp_path / "b.pt"))
    with pytest.raises(OptionConflict, match="extend_vocab goes with init_from"):
        plan_training(TrainingRequest(small_corpus, extend_vocab=True))
    with pytest.raises(ConfigError, match="unknown training option 'hiden_size'"):
        plan_training(TrainingRequest(small_corpus, {"hiden_size": 3}))
    with pytest.raises(ConfigError, match="unknown training option 'out_dir'"):
        plan_training(TrainingRequest(small_corpus, {"out_dir": "x"}))


def test_fine_tuning_keeps_the_shape_and_the_regularisation_unless_given():
    source = ModelConfig(vocab_size=10, hidden_size=32, locked_dropout=True)
    regularisation = {"dropout": 0.2, "weight_drop": 0.3, "locked_dropout": False, "input_dropout": 0.1,
                      "embed_dropout": 0.05}
    assert fine_tune_config(source, {**regularisation, "hidden_size": 32}, 12) == ModelConfig(
        vocab_size=12, hidden_size=32, **regularisation)
    with pytest.raises(CharrnnError, match="hidden_size 64 contradicts the init_from checkpoint"):
        fine_tune_config(source, {"hidden_size": 64}, 10)
    # Kept unless given: the shipped model fine-tuned better with its dropout than without.
    source = ModelConfig(vocab_size=10, hidden_size=32, dropout=0.15, weight_drop=0.2, locked_dropout=True)
    assert fine_tune_config(source, {}, 10) == dataclasses.replace(source, vocab_size=10)
    assert fine_tune_config(source, {"dropout": 0.0}, 12).dropout == 0.0


def test_a_fine_tuning_plan_reads_the_source_vocabulary(tiny_run, small_corpus, tmp_path):
    novel = tmp_path / "novel.txt"
    novel.write_text("ROMEO: Ωmega\n" * 100, encoding="utf-8")
    with pytest.raises(CharrnnError, match="pass extend_vocab to add them"):
        plan_training(TrainingRequest(novel, init_from=tiny_run))
    plan = plan_training(TrainingRequest(novel, init_from=tiny_run, extend_vocab=True,
                                         out_dir=tmp_path / "ft"))
    source = load_checkpoint(tiny_run / "best.pt")
    assert list(plan.vocab.chars[: len(source["vocab"])]) == source["vocab"] and "Ω" in plan.vocab.chars
    assert plan.initial_weights is not None and plan.config.init_from == str(tiny_run)
    assert Path(plan.config.out_dir) == tmp_path / "ft"


def test_locked_dropout_without_any_dropout_is_refused(small_corpus, tmp_path):
    with pytest.raises(OptionConflict, match="locked_dropout locks the dropout masks across time"):
        charrnn.train(small_corpus, out_dir=tmp_path / "run", max_steps=1, locked_dropout=True)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_budget_choosing_a_rung_too_wide_for_bf16_says_it_trains_in_float32(monkeypatch, cpu_bf16,
                                                                             small_corpus):
    cpu_bf16(True)
    widest = BUDGET_LADDER[-1].hidden_size
    seen = {}

    def measure(model_config, config, *args):
        seen[model_config.hidden_size] = resolve_precision(config.precision, "cpu", model_config)
        fast = 1e12 if model_config.hidden_size == widest else 1e3
        return Speed(fast, fast)

    monkeypatch.setattr("charrnn.training.budget.measure_speed", measure)
    plan = plan_training(TrainingRequest(small_corpus, {"time_budget": 600, "batch_size": 4}, device="cpu"))
    assert widest > BF16_LARGEST_HIDDEN and plan.model_config.hidden_size == widest
    assert plan.budget.precision == "fp32" == seen[widest] and seen[BUDGET_LADDER[0].hidden_size] == "bf16"


def test_a_budget_on_a_split_too_short_to_score_says_so_before_timing_shapes(monkeypatch, small_corpus):
    def measure(*args):
        raise AssertionError("no shape is timed")

    monkeypatch.setattr("charrnn.training.budget.measure_speed", measure)
    with pytest.raises(CharrnnError, match=r"the validation split has 1 character\(s\).*val_max_chars"):
        plan_training(TrainingRequest(small_corpus, {"time_budget": 30, "val_max_chars": 1}))
