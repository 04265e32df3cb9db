import math

import pytest

from charrnn import config
from charrnn.config import BUDGET_SHAPES, TrainConfig, shape_for_budget
from charrnn.errors import ConfigError


@pytest.mark.parametrize(("precision", "seconds", "hidden"), [
    ("fp32", 1, 192), ("fp32", 100, 192), ("fp32", 240, 192), ("fp32", 241, 512), ("fp32", 600, 512),
    ("fp32", 86_400, 512),
    ("bf16", 100, 256), ("bf16", 240, 256), ("bf16", 241, 512), ("bf16", 3600, 512), ("bf16", 86_400, 512),
])
def test_each_budget_takes_the_shape_measured_nearest(precision, seconds, hidden):
    assert shape_for_budget(seconds, "cpu", precision).hidden_size == hidden


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_budget_shapes_cover_every_budget(precision):
    limits = [shape.up_to_seconds for shape in BUDGET_SHAPES[precision]]
    assert limits == sorted(limits) and limits[-1] == math.inf


def test_bf16_needs_cuda_or_a_cpu_with_native_bf16(monkeypatch):
    monkeypatch.setattr(config, "cpu_has_native_bf16", lambda: False)
    with pytest.raises(ConfigError, match="needs a CUDA device or a CPU with native bfloat16"):
        TrainConfig(out_dir=".", precision="bf16")
    with pytest.raises(ConfigError, match="native bfloat16"):
        TrainConfig(out_dir=".", precision="bf16", device="mps")
    assert TrainConfig(out_dir=".", precision="bf16", device="cuda:1").precision == "bf16"
    monkeypatch.setattr(config, "cpu_has_native_bf16", lambda: True)
    assert TrainConfig(out_dir=".", precision="bf16").precision == "bf16"


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_budget_shapes_measured_on_a_cpu_are_not_applied_elsewhere(device):
    assert shape_for_budget(100, device) is None
    assert shape_for_budget(100, "cpu") is not None
