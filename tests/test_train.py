import json
import math
from pathlib import Path

import pytest
import torch

from charrnn.checkpoint import load_checkpoint, load_model
from charrnn.config import ModelConfig, SampleConfig, TrainConfig
from charrnn.data import encode_corpus
from charrnn.errors import CharrnnError
from charrnn.sample import generate
from charrnn.train import (
    check_model_fits,
    learning_rate_at,
    restore_cuda_rng,
    resume_config,
    run_progress,
    stop_reason,
    train,
)

PHRASE = "the quick brown fox jumps over the lazy dog. "


@pytest.fixture
def repeated_corpus(tmp_path: Path) -> Path:
    path = tmp_path / "repeat.txt"
    path.write_text(PHRASE * 60, encoding="utf-8")
    return path


def train_tiny(corpus: Path, out: Path, **overrides):
    encoded = encode_corpus(corpus, corpus.stem, overrides.get("val_frac", 0.1))
    model_options = {k: overrides.pop(k) for k in ("cell", "hidden_size", "num_layers", "dropout")
                     if k in overrides}
    model_config = ModelConfig(vocab_size=len(encoded.vocab), embed_size=16,
                               **{"hidden_size": 64, "num_layers": 1, **model_options})
    overwrite = overrides.pop("overwrite", False)
    config = TrainConfig(out_dir=str(out), **{"batch_size": 8, "seq_len": 32, "learning_rate": 1e-2,
                                              "warmup_steps": 10, **overrides})
    return train(model_config, config, encoded.vocab, encoded.ids, encoded.info, overwrite=overwrite)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_overfits_repeated_text_then_greedy_reproduces_it(repeated_corpus, tmp_path, cell):
    result = train_tiny(repeated_corpus, tmp_path / "run", cell=cell, max_steps=150, eval_every=50)
    assert result.best_val_loss < 0.1
    loaded = load_model(tmp_path / "run" / "best.pt")
    prime = "the quick brown"
    steps = generate(loaded.model, loaded.vocab, SampleConfig(length=2 * len(PHRASE), greedy=True), prime)
    text = prime + "".join(chars[0] for chars in steps)
    assert text == (PHRASE * 4)[: len(text)]


def test_run_directory_contents(repeated_corpus, tmp_path):
    out = tmp_path / "run"
    result = train_tiny(repeated_corpus, out, max_steps=12, eval_every=5, save_every=5)
    assert {p.name for p in out.iterdir()} == {"best.pt", "last.pt", "metrics.jsonl", "config.json"}
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [5, 10, 12]
    assert set(records[0]) == {"step", "epoch", "train_loss", "val_loss", "val_bits_per_char",
                               "learning_rate", "chars_per_s", "elapsed_s"}
    assert result.best_val_loss == min(r["val_loss"] for r in records)
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["cell"] == "lstm" and config["train"]["max_steps"] == 12
    assert config["corpus"]["split_point"] == int(len(PHRASE * 60) * 0.9)
    payload = torch.load(out / "last.pt", weights_only=True)
    assert payload["step"] == 12 and payload["format_version"] == 1


def test_epochs_stop_after_full_passes(repeated_corpus, tmp_path):
    # 2430 training chars, 8 streams of 303, seq 32: 10 steps per epoch.
    result = train_tiny(repeated_corpus, tmp_path / "run", epochs=2, eval_every=100)
    assert result.steps == 20 and result.epoch == 2.0
    assert result.stop_reason == "reached --epochs 2"


def test_time_budget_stops_cleanly_and_evaluates_only_at_the_end(repeated_corpus, tmp_path):
    result = train_tiny(repeated_corpus, tmp_path / "run", time_budget=1.5, save_every=10)
    assert result.stop_reason.startswith("used the --time-budget")
    assert (tmp_path / "run" / "best.pt").exists()
    records = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert result.steps > 10 and len(records) == 1


def test_evaluation_interval():
    assert TrainConfig(out_dir=".").evaluation_interval == 1000
    assert TrainConfig(out_dir=".", time_budget=60).evaluation_interval is None
    assert TrainConfig(out_dir=".", time_budget=60, eval_every=50).evaluation_interval == 50


def test_same_seed_same_model(repeated_corpus, tmp_path):
    a = train_tiny(repeated_corpus, tmp_path / "a", max_steps=5)
    b = train_tiny(repeated_corpus, tmp_path / "b", max_steps=5)
    assert a.best_val_loss == b.best_val_loss


def test_schedule_warms_up_then_decays_to_floor():
    config = TrainConfig(out_dir="x", learning_rate=1.0, warmup_steps=4, min_lr_ratio=0.1, max_steps=100)
    assert learning_rate_at(config, 0, 0.0) == pytest.approx(0.25)
    assert learning_rate_at(config, 3, 0.03) == pytest.approx(1.0)
    cosine = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.04))
    assert learning_rate_at(config, 4, 0.04) == pytest.approx(cosine)
    assert learning_rate_at(config, 50, 0.5) == pytest.approx(0.55)
    assert learning_rate_at(config, 100, 1.0) == pytest.approx(0.1)
    assert learning_rate_at(config, 10, None) == 1.0


def test_progress_follows_nearest_limit():
    config = TrainConfig(out_dir="x", max_steps=100, time_budget=10.0)
    assert run_progress(config, 10, 0.0, 5.0) == 0.5
    assert stop_reason(config, 10, 0.0, 5.0) is None
    assert "max-steps" in stop_reason(config, 100, 0.0, 5.0)


def test_validation_split_too_short(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("abcdefghij" * 20, encoding="utf-8")
    with pytest.raises(CharrnnError, match="validation split has 1"):
        train_tiny(path, tmp_path / "run", val_frac=0.004, batch_size=2, seq_len=4, max_steps=1)


def test_unwritable_out_is_reported_before_training(repeated_corpus, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(CharrnnError, match="--out .*Not a directory"):
        train_tiny(repeated_corpus, blocker / "run", max_steps=1)


@pytest.mark.parametrize("out", ["existing_file", "/dev/null"])
def test_out_naming_a_file_says_so(repeated_corpus, tmp_path, out):
    target = tmp_path / out if out == "existing_file" else Path(out)
    if out == "existing_file":
        target.write_text("")
    with pytest.raises(CharrnnError, match="is a file, not a directory"):
        train_tiny(repeated_corpus, target, max_steps=1)


def test_save_epochs_keeps_named_checkpoints_and_marks_metrics(repeated_corpus, tmp_path):
    out = tmp_path / "run"
    # 10 steps per epoch (see test_epochs_stop_after_full_passes).
    train_tiny(repeated_corpus, out, epochs=3, eval_every=1000, save_epochs=[1, 3])
    names = sorted(p.name for p in out.glob("epoch*.pt"))
    assert [n[:9] for n in names] == ["epoch0001", "epoch0003"]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    marked = {r["epoch_checkpoint"]: r for r in records if "epoch_checkpoint" in r}
    assert sorted(marked) == names
    for name, record in marked.items():
        assert name == f"epoch{int(record['epoch']):04d}-val{record['val_loss']:.4f}.pt"
        payload = torch.load(out / name, weights_only=True)
        assert payload["epoch"] == int(record["epoch"]) and payload["epoch_step"] == 0
    assert [r["step"] for r in records] == [10, 30]  # the final evaluation is the epoch-3 one


def test_overwrite_removes_an_older_runs_epoch_checkpoints(repeated_corpus, tmp_path):
    out = tmp_path / "run"
    train_tiny(repeated_corpus, out, epochs=1, save_epochs=[1])
    with pytest.raises(CharrnnError, match="already holds a training run"):
        train_tiny(repeated_corpus, out, max_steps=2)
    train_tiny(repeated_corpus, out, max_steps=2, overwrite=True)
    assert not list(out.glob("epoch*.pt"))


def params_of(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["model_state"]


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_resume_is_exact_with_dropout(repeated_corpus, tmp_path, cell):
    options = {"cell": cell, "num_layers": 2, "min_lr_ratio": 1.0, "warmup_steps": 0, "eval_every": 5,
               "save_every": 7}
    # 10 steps per epoch: the resumed half crosses an epoch boundary (state reset).
    straight = tmp_path / "straight"
    train_tiny(repeated_corpus, straight, max_steps=14, dropout=0.3, **options)
    halves = tmp_path / "halves"
    train_tiny(repeated_corpus, halves, max_steps=7, dropout=0.3, **options)
    payload = load_checkpoint(halves / "last.pt")
    model_config, config, changes = resume_config(payload, {}, {"max_steps": 14})
    assert changes == ["max_steps: 7 → 14"]
    encoded = encode_corpus(repeated_corpus, "repeat", 0.1)
    train(model_config, config, encoded.vocab, encoded.ids, encoded.info, resume_from=payload)
    for name, value in params_of(straight / "last.pt").items():
        assert (value - params_of(halves / "last.pt")[name]).abs().max() <= 1e-6, name
    steps = [json.loads(line)["step"] for line in (halves / "metrics.jsonl").read_text().splitlines()]
    assert steps == [5, 7, 10, 14]  # appended after the first half's records, not rewritten


def test_resume_refuses_a_different_model_or_layout(tiny_run):
    payload = load_checkpoint(tiny_run / "last.pt")
    with pytest.raises(CharrnnError, match="hidden_size 64 contradicts the checkpoint"):
        resume_config(payload, {"hidden_size": 64}, {})
    with pytest.raises(CharrnnError, match="batch_size 9 contradicts"):
        resume_config(payload, {}, {"batch_size": 9})
    with pytest.raises(CharrnnError, match="already reached --max-steps 40"):
        resume_config(payload, {}, {})
    _, config, changes = resume_config(payload, {"hidden_size": 32},
                                       {"learning_rate": 1e-3, "seed": 1337, "max_steps": 80})
    assert config.learning_rate == 1e-3 and config.max_steps == 80
    assert changes == ["learning_rate: 0.01 → 0.001", "max_steps: 40 → 80"]


def test_value_clipping_bounds_every_gradient_element(repeated_corpus, tmp_path):
    from charrnn.data import StreamBatches, split_ids
    from charrnn.train import TrainingRun

    encoded = encode_corpus(repeated_corpus, "repeat", 0.1)
    model_config = ModelConfig(vocab_size=len(encoded.vocab), hidden_size=32, embed_size=8)
    batches = StreamBatches(split_ids(encoded.ids, encoded.info.split_point).train, 8, 32)
    for mode, bound in (("value", 1e-3), ("norm", None)):
        config = TrainConfig(out_dir=str(tmp_path), batch_size=8, seq_len=32, clip=1e-3, clip_mode=mode,
                             max_steps=1)
        run = TrainingRun(model_config, config, encoded.vocab, encoded.info, batches)
        run.advance(1e-3)
        grads = torch.cat([p.grad.flatten() for p in run.params])
        if bound is not None:
            assert grads.abs().max() <= bound + 1e-12
            assert (grads.abs() == bound).any()  # something really was clipped
        else:
            assert grads.norm() == pytest.approx(1e-3, rel=1e-4)



@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_training_with_pinned_batches(repeated_corpus, tmp_path, precision):
    result = train_tiny(repeated_corpus, tmp_path / "run", max_steps=150, eval_every=50, device="cuda",
                        precision=precision)
    assert result.best_val_loss < 0.2
    # Checkpoints written on the GPU load on the CPU, in float32.
    loaded = load_model(tmp_path / "run" / "best.pt")
    assert all(p.device.type == "cpu" and p.dtype == torch.float32 for p in loaded.model.parameters())


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


def test_a_model_too_large_for_the_gpu_is_refused_before_allocating(monkeypatch):
    """The CUDA branch of the memory check, on a CPU: the GPU's free memory is what counts."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (1 << 20, 80 << 30))
    model_config = ModelConfig(vocab_size=65, hidden_size=512)
    with pytest.raises(CharrnnError, match="cuda has 0.0 GiB available"):
        check_model_fits(model_config, TrainConfig(out_dir=".", device="cuda"))
    check_model_fits(model_config, TrainConfig(out_dir="."))  # the CPU has room
