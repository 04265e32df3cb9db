
import pytest

from charrnn import config
from charrnn.config import TrainConfig
from charrnn.errors import ConfigError


def test_bf16_needs_cuda_or_a_cpu_with_native_bf16(cpu_bf16):
    cpu_bf16(False)
    with pytest.raises(ConfigError, match="needs a CUDA device or a CPU with native bfloat16"):
        TrainConfig(out_dir=".", precision="bf16")
    assert TrainConfig(out_dir=".", precision="bf16", device="cuda:1").precision == "bf16"
    cpu_bf16(True)
    assert TrainConfig(out_dir=".", precision="bf16").precision == "bf16"


class Name(str):
    """A string of another class, as numpy's str_ is."""


@pytest.mark.parametrize(("value", "hint", "expected"), [
    (5, float, None), (True, float, "a number"), (5.5, int, "a whole number"),
    ("x", int | None, "a whole number or None"), ("x", int | float, "a number"),
    ([1, "a"], list[int], "a list of whole numbers"), ((1, 2), list[int], None),
    ("gru", config.CellType, None), ("x", config.CellType, "one of lstm, gru, rnn, esn"),
    ({"a": 1}, config.ModelConfig, None), (None, config.ModelConfig | None, None),
    (3, config.ModelConfig | None, "a ModelConfig record or None"),
])
def test_the_one_type_rule_says_what_it_expected(value, hint, expected):
    assert config.expected_type(value, hint) == expected


def test_a_value_is_stored_in_its_fields_own_type():
    assert config.checked(5, float, "x") == 5.0 and type(config.checked(5, float, "x")) is float
    assert type(config.checked(Name("gru"), config.CellType, "cell")) is str
    assert type(config.ModelConfig(vocab_size=3, cell=Name("gru")).cell) is str
    with pytest.raises(ConfigError, match="cell must be one of lstm, gru, rnn, esn$"):
        config.ModelConfig(vocab_size=3, cell="transformer")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("num_layers", 129, "must be at most 128"),
    ("hidden_size", 1_000_000_000, "must be at most 16,777,216"),
    ("embed_size", 2**24 + 1, "must be at most 16,777,216"),
])
def test_sizes_no_machine_could_hold_are_refused_as_options_not_as_torch_errors(field, value, message):
    with pytest.raises(ConfigError, match=f"{field} {message}"):
        config.ModelConfig(vocab_size=65, **{field: value})
    config.ModelConfig(vocab_size=65, **{field: value - 1 if field == "num_layers" else 2**24})
