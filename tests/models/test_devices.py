import pytest
import torch

import charrnn
from charrnn.config import ModelConfig
from charrnn.errors import CharrnnError
from charrnn.models import devices
from charrnn.models.devices import check_model_fits, precision_warning, resolve_device, resolve_precision


def test_auto_picks_the_gpu_only_when_there_is_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    with pytest.raises(CharrnnError, match="no CUDA GPU is available"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cpu") == "cpu"


def test_a_model_too_large_for_memory_or_the_gpu_is_refused_with_its_size_before_allocating(monkeypatch):
    """The CUDA branch of the memory check runs on a CPU too: the GPU's free memory is what counts."""
    monkeypatch.setattr("charrnn.models.devices.available_host_memory", lambda: 1 << 30)
    with pytest.raises(CharrnnError, match=r"about 28\.0 GiB .* cpu has 1\.0 GiB available"):
        check_model_fits(ModelConfig(vocab_size=65, hidden_size=8192, num_layers=4), "cpu")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (1 << 20, 80 << 30))
    model_config = ModelConfig(vocab_size=65, hidden_size=512)
    with pytest.raises(CharrnnError, match="cuda has 0.0 GiB available"):
        check_model_fits(model_config, "cuda")
    check_model_fits(model_config, "cpu")  # the CPU has room


@pytest.mark.parametrize(("native", "device", "options", "expected"), [
    (True, "cpu", {}, "bf16"),
    (True, "cpu", {"layer_norm": True}, "fp32"),  # a Python loop of small products: slower in bf16
    (True, "cpu", {"cell": "gru"}, "fp32"),
    (True, "cpu", {"cell": "rnn"}, "fp32"),
    (True, "cpu", {"hidden_size": 768}, "bf16"),
    (True, "cpu", {"hidden_size": 1024}, "fp32"),  # stalled on the unigram plateau in bf16
    (True, "cuda", {}, "fp32"),  # not measured on a GPU yet
    (False, "cpu", {}, "fp32"),
])
def test_auto_precision_picks_bf16_only_where_it_was_measured_faster(cpu_bf16, native, device, options,
                                                                      expected):
    cpu_bf16(native)
    model_config = ModelConfig(vocab_size=5, **options)
    assert resolve_precision("auto", device, model_config) == expected
    assert resolve_precision("fp32", device, model_config) == "fp32"  # a given precision is kept
    assert resolve_precision("bf16", device, model_config) == "bf16"


def test_a_step_whose_activations_cannot_fit_names_batch_and_sequence_else_the_model(monkeypatch):
    monkeypatch.setattr("charrnn.models.devices.available_host_memory", lambda: 4 << 30)
    wide = ModelConfig(vocab_size=20_000, hidden_size=64)  # a CJK-sized vocabulary
    with pytest.raises(CharrnnError, match=r"activations \(4,096 × 1,000 characters.*Lower batch_size or "
                                           r"seq_len"):
        check_model_fits(wide, "cpu", batch_size=4096, seq_len=1000)
    check_model_fits(wide, "cpu", batch_size=16, seq_len=50)
    # Lowering the batch cannot help a model whose weights alone overflow (about 40 MiB of weights,
    # gradients and moments): that advice would fail, so the model is named instead.
    monkeypatch.setattr("charrnn.models.devices.available_host_memory", lambda: 20 << 20)
    with pytest.raises(CharrnnError, match=r"Choose a smaller hidden_size, embed_size or num_layers, and "
                                           r"lower batch_size or seq_len$"):  # both would be refused
        check_model_fits(wide, "cpu", batch_size=4096, seq_len=1000)
    with pytest.raises(CharrnnError, match=r"Choose a smaller hidden_size, embed_size or num_layers$"):
        check_model_fits(wide, "cpu", batch_size=1, seq_len=1)  # the advice not given, followed: no help


def test_the_api_names_the_options_to_lower_before_writing(tmp_path, monkeypatch, small_corpus):
    monkeypatch.setattr("charrnn.models.devices.available_host_memory", lambda: 64 << 20)
    with pytest.raises(CharrnnError, match="Lower batch_size or seq_len"):
        charrnn.train(small_corpus, out_dir=tmp_path / "run", batch_size=1024, seq_len=512, max_steps=1,
                      hidden_size=8, embed_size=8, num_layers=1, device="cpu")
    assert not (tmp_path / "run").exists()


def test_bf16_asked_for_a_wide_lstm_warns_that_auto_keeps_it_in_float32():
    wide = ModelConfig(vocab_size=5, hidden_size=1280)
    warning = precision_warning("bf16", wide)
    assert warning.startswith("warning: precision bf16 trains a 2×1280 LSTM") and "auto" in warning
    assert precision_warning("auto", wide) is None and precision_warning("fp32", wide) is None
    assert precision_warning("bf16", ModelConfig(vocab_size=5, hidden_size=768)) is None
    assert precision_warning("bf16", ModelConfig(vocab_size=5, hidden_size=1280, cell="gru")) is None


def test_bf16_autocast_without_onednn_kernels_runs_torchs_own_and_draws_no_random_numbers(monkeypatch):
    """Where oneDNN has no bfloat16 LSTM (CHARRNN_CPU_BF16=1 on an AVX2 processor), the step still runs."""
    devices._onednn_has_bf16_lstm.cache_clear()
    before = torch.get_rng_state()
    devices._onednn_has_bf16_lstm()
    assert torch.equal(torch.get_rng_state(), before)  # a seeded or resumed run stays exact
    monkeypatch.setattr(devices, "_onednn_has_bf16_lstm", lambda: False)
    lstm, head = torch.nn.LSTM(4, 8, batch_first=True), torch.nn.Linear(8, 3)
    with devices.autocast(torch.device("cpu"), "bf16"):
        assert not torch.backends.mkldnn.enabled
        output, _ = lstm(torch.randn(2, 5, 4))
        logits = head(output)
    assert torch.backends.mkldnn.enabled and logits.dtype == torch.bfloat16
    logits.float().sum().backward()
    assert lstm.weight_ih_l0.grad.dtype == torch.float32
