import pytest
import torch

from charrnn.config import ModelConfig
from charrnn.devices import check_model_fits, resolve_device
from charrnn.errors import CharrnnError


def test_auto_picks_the_gpu_only_when_there_is_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    with pytest.raises(CharrnnError, match="no CUDA GPU is available"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cpu") == "cpu"


def test_a_model_too_large_for_memory_is_refused_with_its_size(monkeypatch):
    monkeypatch.setattr("charrnn.devices.available_host_memory", lambda: 1 << 30)
    with pytest.raises(CharrnnError, match=r"about 28\.0 GiB .* cpu has 1\.0 GiB available"):
        check_model_fits(ModelConfig(vocab_size=65, hidden_size=8192, num_layers=4), "cpu")


def test_a_model_too_large_for_the_gpu_is_refused_before_allocating(monkeypatch):
    """The CUDA branch of the memory check, on a CPU: the GPU's free memory is what counts."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (1 << 20, 80 << 30))
    model_config = ModelConfig(vocab_size=65, hidden_size=512)
    with pytest.raises(CharrnnError, match="cuda has 0.0 GiB available"):
        check_model_fits(model_config, "cuda")
    check_model_fits(model_config, "cpu")  # the CPU has room
