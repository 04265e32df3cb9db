import math

import pytest

from charrnn.config import BUDGET_SHAPES, TrainConfig, shape_for_budget
from charrnn.errors import ConfigError


@pytest.mark.parametrize(("seconds", "hidden"), [(1, 192), (100, 192), (240, 192), (241, 512), (600, 512),
                                                 (86_400, 512)])
def test_each_budget_takes_the_shape_measured_nearest(seconds, hidden):
    assert shape_for_budget(seconds).hidden_size == hidden


def test_budget_shapes_cover_every_budget():
    assert [shape.up_to_seconds for shape in BUDGET_SHAPES] == sorted(s.up_to_seconds for s in BUDGET_SHAPES)
    assert BUDGET_SHAPES[-1].up_to_seconds == math.inf


def test_bf16_needs_cuda():
    with pytest.raises(ConfigError, match="needs a CUDA device"):
        TrainConfig(out_dir=".", precision="bf16")
    assert TrainConfig(out_dir=".", precision="bf16", device="cuda:1").precision == "bf16"
