import contextlib

import pytest
import torch
from torch import nn

from charrnn.config import ModelConfig, TrainConfig
from charrnn.data.corpus import StreamBatches, encode_corpus, split_ids
from charrnn.models.evaluate import EvalResult
from charrnn.models.model import CharRNN
from charrnn.training import loop as trainer
from charrnn.training.loop import train_step
from charrnn.training.rundir import checkpoint_bytes
from charrnn.training.state import (
    CellMuon,
    TrainingRun,
    WeightAverage,
    load_moments,
    optimizer_for,
    orthogonalised,
    restore_cuda_rng,
)

from helpers import plan_run


def direct_run(corpus, tmp_path, hidden: int = 32, batch: int = 8, seq: int = 32, **options) -> TrainingRun:
    encoded = encode_corpus(corpus, "repeat", 0.1)
    model_config = ModelConfig(vocab_size=len(encoded.vocab), hidden_size=hidden, embed_size=8)
    batches = StreamBatches(split_ids(encoded.ids, encoded.info.split_point).train, batch, seq)
    config = TrainConfig(out_dir=str(tmp_path), batch_size=batch, seq_len=seq, **options)
    return TrainingRun(model_config, config, encoded.vocab, encoded.info, batches)


def test_value_clipping_bounds_every_gradient_element(repeated_corpus, tmp_path):
    for mode, bound in (("value", 1e-3), ("norm", None)):
        run = direct_run(repeated_corpus, tmp_path, clip=1e-3, clip_mode=mode, max_steps=1)
        train_step(run, 1e-3)
        grads = torch.cat([p.grad.flatten() for p in run.params])
        if bound is not None:
            assert grads.abs().max() <= bound + 1e-12
            assert (grads.abs() == bound).any()  # something really was clipped
        else:
            assert grads.norm() == pytest.approx(1e-3, rel=1e-4)


def test_cuda_generator_states_are_restored_onto_the_gpus_present(monkeypatch):
    """The resume branch for CUDA generators, on a CPU: a run saved on 2 GPUs resumed on 1."""
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, index: restored.append((state, index)))
    states = [torch.zeros(16, dtype=torch.uint8), torch.ones(16, dtype=torch.uint8)]
    restore_cuda_rng(states)
    assert len(restored) == 1 and restored[0][1] == 0 and torch.equal(restored[0][0], states[0])
    restored.clear()
    restore_cuda_rng([])  # saved without a GPU
    assert restored == []


def test_auto_precision_trains_an_lstm_in_bf16_here_with_float32_weights(repeated_corpus, tmp_path, cpu_bf16):
    cpu_bf16(True)
    runs = {precision: direct_run(repeated_corpus, tmp_path, precision=precision)
            for precision in ("auto", "bf16", "fp32")}
    assert runs["auto"].precision == "bf16"
    losses = {precision: [train_step(run, 1e-2)[0] for _ in range(30)] for precision, run in runs.items()}
    assert losses["auto"] == losses["bf16"]  # the same path, step for step
    assert losses["bf16"] != losses["fp32"]
    assert losses["bf16"][-1] < losses["bf16"][0] - 0.5  # it learns
    assert abs(losses["bf16"][-1] - losses["fp32"][-1]) < 0.1
    payload = runs["auto"].payload(0.0, runs["auto"].carried_state())
    assert all(tensor.dtype == torch.float32 for tensor in payload["model_state"].values())
    assert payload["train_config"]["precision"] == "auto"


# ---------------------------------------------------------------------------- the weights' moving average

def scalar_model(value: float) -> nn.Module:
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(value)
    return model


def test_the_average_follows_the_warm_up_then_the_decay():
    model = scalar_model(0.0)
    average = WeightAverage(model, decay=0.5)
    with torch.no_grad():
        model.weight.fill_(1.0)
    average.update()  # r = min(0.5, 2/11)
    assert average.weights["weight"].item() == pytest.approx(9 / 11)
    average.update()  # r = min(0.5, 3/12)
    assert average.weights["weight"].item() == pytest.approx(1 - (2 / 11) * (3 / 12))
    for _ in range(20):
        average.update()
    assert average.weights["weight"].item() == pytest.approx(1.0, abs=1e-5)
    with torch.no_grad():
        model.weight.fill_(3.0)
    average.update()  # r = the decay, 0.5, from here on
    assert average.weights["weight"].item() == pytest.approx(2.0, abs=1e-5)


def test_swapped_in_weights_go_back_even_after_an_error():
    model = scalar_model(3.0)
    average = WeightAverage(scalar_model(7.0), decay=0.9)
    with pytest.raises(RuntimeError), average.swapped_in(model):
        assert model.weight.item() == 7.0
        raise RuntimeError("evaluation failed")
    assert model.weight.item() == 3.0


def test_the_state_round_trips_and_refuses_another_model():
    model = scalar_model(2.0)
    average = WeightAverage(model, decay=0.9)
    with torch.no_grad():
        model.weight.fill_(4.0)
    average.update()
    copy = WeightAverage(scalar_model(0.0), decay=0.9)
    copy.load_state(average.state())
    assert copy.updates == 1 and torch.equal(copy.weights["weight"], average.weights["weight"])
    with pytest.raises(ValueError):
        WeightAverage(nn.Linear(1, 1), decay=0.9).load_state(average.state())


@pytest.fixture
def scripted_scores(monkeypatch):
    """Make validation scores depend only on whether the averaged weights are in the model."""
    scores = {"trained": 2.0, "averaged": 1.0}
    averaging = []
    original = WeightAverage.swapped_in

    @contextlib.contextmanager
    def marked(self, model):
        with original(self, model):
            averaging.append(True)
            yield model
            averaging.pop()

    monkeypatch.setattr(WeightAverage, "swapped_in", marked)
    monkeypatch.setattr(trainer, "evaluate", lambda model, ids: EvalResult.from_total(
        scores["averaged" if averaging else "trained"], 1))
    return scores


def checkpoint(path):
    return torch.load(path, weights_only=True)


def test_best_pt_holds_whichever_of_the_averaged_and_trained_weights_scores_better(scripted_scores,
                                                                                    small_corpus, tmp_path):
    result = plan_run(small_corpus, tmp_path / "run", max_steps=3, ema_decay=0.9).run()
    assert result.best_is_average and result.best.nats_per_char == 1.0
    best, last = checkpoint(tmp_path / "run" / "best.pt"), checkpoint(tmp_path / "run" / "last.pt")
    assert best["best_is_average"] and best["best"]["nats_per_char"] == 1.0
    for name, tensor in last["model_state"].items():
        assert torch.equal(best["model_state"][name], last["weight_average"]["weights"][name])
        assert torch.equal(best["training_weights"][name], tensor)
    assert not torch.equal(best["model_state"]["head.bias"], last["model_state"]["head.bias"])
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert '"val_loss": 2.0' in metrics and '"averaged_val_loss": 1.0' in metrics
    parameters = sum(tensor.numel() for tensor in last["model_state"].values())
    largest = (tmp_path / "run" / "best.pt").stat().st_size
    assert 4 * 4 * parameters < largest <= checkpoint_bytes(parameters, averaging=True)  # four float32 copies
    scripted_scores.update(trained=1.0, averaged=1.5)  # now the trained weights score better
    result = plan_run(small_corpus, tmp_path / "other", max_steps=3, ema_decay=0.9).run()
    best, last = checkpoint(tmp_path / "other" / "best.pt"), checkpoint(tmp_path / "other" / "last.pt")
    assert not result.best_is_average and "training_weights" not in best and not best["best_is_average"]
    assert all(torch.equal(best["model_state"][name], tensor) for name, tensor in last["model_state"].items())


def test_training_goes_on_from_the_trained_weights_of_an_averaged_best_pt(scripted_scores, small_corpus,
                                                                          tmp_path):
    plan_run(small_corpus, tmp_path / "run", max_steps=3, ema_decay=0.9).run()
    plan_run(None, tmp_path / "branch", resume=tmp_path / "run" / "best.pt", max_steps=6).run()
    plan_run(None, None, resume=tmp_path / "run" / "last.pt", max_steps=6).run()
    branched = checkpoint(tmp_path / "branch" / "last.pt")
    continued = checkpoint(tmp_path / "run" / "last.pt")
    for name, tensor in continued["model_state"].items():
        assert torch.equal(branched["model_state"][name], tensor), name
        average = continued["weight_average"]["weights"][name]
        assert torch.equal(branched["weight_average"]["weights"][name], average), name


def test_muon_orthogonalises_each_recurrent_matrix_and_adam_steps_the_rest(repeated_corpus, tmp_path):
    update = torch.randn(64, 16) @ torch.diag(torch.logspace(-1, 1, 16))  # singular values spread 100-fold
    singular = torch.linalg.svdvals(orthogonalised(update, torch.float32))
    assert singular.min() > 0.5 and singular.max() < 1.3  # pushed near 1, as the iteration promises
    run = direct_run(repeated_corpus, tmp_path, 16, 4, 16, optimizer="muon", learning_rate=0.01, muon_lr=0.04,
                     weight_decay=0.1)
    assert isinstance(run.optimizer, CellMuon)
    adam, muon = (part.param_groups[0]["params"] for part in run.optimizer.parts)
    names = {id(p): name for name, p in run.model.named_parameters()}
    assert sorted(names[id(p)] for p in muon) == ["rnn.weight_hh_l0", "rnn.weight_hh_l1", "rnn.weight_ih_l0",
                                                  "rnn.weight_ih_l1"]
    assert len(adam) + len(muon) == len(run.params)
    train_step(run, 0.005)  # half the peak: Muon's rate keeps its ratio, and both shrink weights alike
    assert [group["lr"] for group in run.optimizer.param_groups] == [0.005, pytest.approx(0.02)]
    assert run.optimizer.parts[1].param_groups[0]["weight_decay"] == pytest.approx(0.1 * 0.01 / 0.04)
    assert set(run.optimizer.state_dict()) == {"adamw", "muon"}


def test_a_resumed_optimiser_keeps_the_saved_moments_and_takes_its_settings_from_the_run():
    model = CharRNN(ModelConfig(vocab_size=10, hidden_size=16))
    saved = optimizer_for(model, TrainConfig(out_dir="x", optimizer="muon", muon_lr=0.04), "fp32")
    for param in model.parameters():
        param.grad = torch.ones_like(param)
    saved.step()
    resumed = optimizer_for(model, TrainConfig(out_dir="x", optimizer="muon", muon_lr=0.08), "fp32")
    load_moments(resumed, saved.state_dict())
    peak = TrainConfig(out_dir="x").learning_rate
    assert resumed.param_groups[-1]["lr_ratio"] == pytest.approx(0.08 / peak)  # the checkpoint's was 0.04
    moments = [state["momentum"] for state in resumed.parts[1].state.values()]
    assert moments and all(torch.equal(a, b["momentum"]) for a, b in zip(
        moments, saved.parts[1].state.values(), strict=True))
