import math

import pytest

from charrnn import config
from charrnn.config import BUDGET_SHAPES, TrainConfig, shape_for_budget
from charrnn.errors import ConfigError


@pytest.mark.parametrize(("seconds", "hidden"), [(1, 192), (100, 192), (240, 192), (241, 512), (600, 512),
                                                 (86_400, 512)])
def test_each_budget_takes_the_shape_measured_nearest(seconds, hidden):
    assert shape_for_budget(seconds).hidden_size == hidden


def test_budget_shapes_cover_every_budget():
    assert [shape.up_to_seconds for shape in BUDGET_SHAPES] == sorted(s.up_to_seconds for s in BUDGET_SHAPES)
    assert BUDGET_SHAPES[-1].up_to_seconds == math.inf


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
