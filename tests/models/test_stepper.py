"""The one-character path against the sequence path, for every kind of stack."""

import pytest
import torch

from charrnn.config import ModelConfig
from charrnn.models.model import CharRNN
from charrnn.models.stepper import GRUStepper, LayerNormStepper, LSTMStepper, RNNStepper, make_stepper

from helpers import CELLS, make_model

CUDA = pytest.param("cuda", marks=pytest.mark.cuda)
PLAIN = {"lstm": {"cell": "lstm"}, "gru": {"cell": "gru"}, "rnn": {"cell": "rnn"},
         "relu": {"cell": "rnn", "rnn_activation": "relu"}}
STACKS = {**PLAIN, "esn": {"cell": "esn"},
          **{f"layer-normalised {cell}": {"cell": cell, "layer_norm": True} for cell in CELLS},
          **{f"{name} with skips": {**kind, "skip_connections": True} for name, kind in PLAIN.items()}}
# Each with 1 and 3 layers; a reservoir with 1 (by 3, its float32 rounding grows past the CPU's tolerance).
DEPTHS = [(kind, layers) for kind in STACKS for layers in (1, 3) if kind != "esn" or layers == 1]


@pytest.mark.parametrize(("kind", "layers"), DEPTHS)
@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_step_path_equals_fused_module(kind, layers, device):
    """The stepper, on the CPU or a GPU, against the sequence path (fused where it can be) on the CPU."""
    torch.manual_seed(0)
    model = CharRNN(ModelConfig(vocab_size=11, num_layers=layers, hidden_size=16, embed_size=6,
                                **STACKS[kind])).eval()
    assert kind != "relu" or model.rnn.nonlinearity == "relu"
    # Non-zero biases everywhere, so a bias folded into the wrong place would show.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "bias" in name:
                param.uniform_(-0.5, 0.5)
        idx = torch.randint(0, 11, (4, 25))
        fused, fused_state = model(idx)
    tolerance = 1e-5 if device == "cpu" else 1e-4  # GPU kernels sum in another order
    stepper, state = make_stepper(model.to(device)), model.initial_state(4)
    for t in range(idx.shape[1]):
        logits, state = stepper.step(idx[:, t].to(device), state)
        torch.testing.assert_close(logits.cpu(), fused[:, t], rtol=0, atol=tolerance)
    for a, b in zip(state, fused_state, strict=True):
        torch.testing.assert_close(a.cpu(), b, rtol=0, atol=tolerance)


@pytest.mark.parametrize(("options", "expected"), [
    ({"cell": "lstm"}, LSTMStepper), ({"cell": "gru"}, GRUStepper), ({"cell": "rnn"}, RNNStepper),
    ({"cell": "esn"}, RNNStepper), ({"cell": "lstm", "layer_norm": True}, LayerNormStepper),
    ({"cell": "gru", "layer_norm": True}, LayerNormStepper),
])
def test_the_factory_picks_one_class_per_kind_of_cell(options, expected):
    model = CharRNN(ModelConfig(vocab_size=5, hidden_size=8, embed_size=4, **options))
    assert type(make_stepper(model)) is expected


def test_a_stepper_is_a_snapshot_of_the_weights():
    model = make_model("lstm")
    stepper = make_stepper(model)
    idx = torch.tensor([3])
    before, _ = stepper.step(idx, model.initial_state(1))
    with torch.no_grad():
        model.head.bias.add_(1.0)
    after, _ = stepper.step(idx, model.initial_state(1))
    assert torch.equal(before, after)
