from pathlib import Path

import pytest
import torch

from charrnn.config import ModelConfig, TrainConfig
from charrnn.data.corpus import StreamBatches, encode_corpus, split_ids
from charrnn.training.loop import train_step
from charrnn.training.state import TrainingRun, restore_cuda_rng


@pytest.fixture
def repeated_corpus(tmp_path: Path) -> Path:
    path = tmp_path / "repeat.txt"
    path.write_text("the quick brown fox jumps over the lazy dog. " * 60, encoding="utf-8")
    return path


def test_value_clipping_bounds_every_gradient_element(make_run, repeated_corpus, tmp_path):
    encoded = encode_corpus(repeated_corpus, "repeat", 0.1)
    model_config = ModelConfig(vocab_size=len(encoded.vocab), hidden_size=32, embed_size=8)
    batches = StreamBatches(split_ids(encoded.ids, encoded.info.split_point).train, 8, 32)
    for mode, bound in (("value", 1e-3), ("norm", None)):
        config = TrainConfig(out_dir=str(tmp_path), batch_size=8, seq_len=32, clip=1e-3, clip_mode=mode,
                             max_steps=1)
        run = TrainingRun(model_config, config, encoded.vocab, encoded.info, batches)
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
    encoded = encode_corpus(repeated_corpus, "repeat", 0.1)
    model_config = ModelConfig(vocab_size=len(encoded.vocab), hidden_size=32, embed_size=8)
    batches = StreamBatches(split_ids(encoded.ids, encoded.info.split_point).train, 8, 32)
    runs = {precision: TrainingRun(model_config, TrainConfig(out_dir=str(tmp_path), batch_size=8, seq_len=32,
                                                             precision=precision),
                                   encoded.vocab, encoded.info, batches)
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
