
import pytest

from charrnn import config
from charrnn.config import TrainConfig
from charrnn.errors import ConfigError


def test_bf16_needs_cuda_or_a_cpu_with_native_bf16(monkeypatch):
    monkeypatch.setattr(config, "cpu_has_native_bf16", lambda: False)
    with pytest.raises(ConfigError, match="needs a CUDA device or a CPU with native bfloat16"):
        TrainConfig(out_dir=".", precision="bf16")
    with pytest.raises(ConfigError, match="native bfloat16"):
        TrainConfig(out_dir=".", precision="bf16", device="mps")
    assert TrainConfig(out_dir=".", precision="bf16", device="cuda:1").precision == "bf16"
    monkeypatch.setattr(config, "cpu_has_native_bf16", lambda: True)
    assert TrainConfig(out_dir=".", precision="bf16").precision == "bf16"


