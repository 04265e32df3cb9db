import pytest
import torch

from charrnn.config import ModelConfig
from charrnn.errors import CharrnnError
from charrnn.models.model import CharRNN, spectral_radius

from helpers import CELLS


@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize("cell", CELLS)
def test_forward_shapes_and_state_and_the_whole_sequence_equals_chunks_with_state_carried(cell, layer_norm):
    torch.manual_seed(0)
    model = CharRNN(ModelConfig(vocab_size=11, cell=cell, num_layers=2, hidden_size=16, embed_size=6,
                                layer_norm=layer_norm)).eval()
    logits, state = model(torch.randint(0, 11, (3, 7)))
    assert logits.shape == (3, 7, 11)
    assert [tuple(s.shape) for s in state] == [(2, 3, 16)] * (2 if cell == "lstm" else 1)
    idx = torch.randint(0, 11, (2, 30))
    with torch.no_grad():
        whole, whole_state = model(idx)
        state, parts = None, []
        for chunk in idx.split([11, 5, 14], dim=1):
            logits, state = model(chunk, state)
            parts.append(logits)
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, rtol=0, atol=1e-6)
    for a, b in zip(state, whole_state, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_dropout_between_layers_follows_torchs_generator_on_every_device(cell, device):
    """A checkpoint saves torch's generators, not cuDNN's: a resume is exact only with torch's masks."""
    torch.manual_seed(0)
    model = CharRNN(ModelConfig(vocab_size=11, cell=cell, num_layers=2, hidden_size=16, embed_size=6,
                                dropout=0.5)).to(device).train()
    idx = torch.randint(0, 11, (3, 9), device=device)
    outputs = []
    for _ in range(2):
        torch.manual_seed(1)
        outputs.append(model(idx)[0])
    assert torch.equal(outputs[0], outputs[1])
    assert not torch.equal(outputs[0], model(idx)[0])  # and the masks do change from draw to draw


def test_load_pretrained_copies_weights_keeps_new_vocabulary_rows_fresh_and_refuses_another_shape():
    torch.manual_seed(0)
    small = CharRNN(ModelConfig(vocab_size=5, num_layers=2, hidden_size=8, embed_size=4))
    torch.manual_seed(1)
    wide = CharRNN(ModelConfig(vocab_size=7, num_layers=2, hidden_size=8, embed_size=4))
    fresh_rows = wide.embedding.weight[5:].detach().clone()
    wide.load_pretrained(small.state_dict())
    for name in ("embedding.weight", "head.weight", "head.bias"):  # the vocabulary's rows
        assert torch.equal(wide.state_dict()[name][:5], small.state_dict()[name]), name
    assert torch.equal(wide.embedding.weight[5:], fresh_rows)
    assert torch.equal(wide.rnn.weight_hh_l1, small.rnn.weight_hh_l1)
    other = CharRNN(ModelConfig(vocab_size=5, num_layers=2, hidden_size=16, embed_size=4))
    with pytest.raises(CharrnnError, match="has shape"):  # another shape is refused
        other.load_pretrained(small.state_dict())


@pytest.mark.parametrize("forget_bias", [1.0, 2.5, 0.0])
def test_effective_forget_bias_and_with_layer_norm_its_shift(forget_bias):
    options = {"vocab_size": 5, "cell": "lstm", "num_layers": 2, "hidden_size": 6, "embed_size": 3,
               "forget_bias": forget_bias}
    model, normed = CharRNN(ModelConfig(**options)), CharRNN(ModelConfig(**options, layer_norm=True))
    for k in range(2):
        effective = getattr(model.rnn, f"bias_ih_l{k}") + getattr(model.rnn, f"bias_hh_l{k}")
        assert torch.equal(effective[6:12], torch.full((6,), forget_bias))
        assert torch.equal(getattr(normed.rnn, f"ln_bias_l{k}")[1], torch.full((6,), forget_bias))


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn", "esn"])
@pytest.mark.parametrize(("radius", "density"), [(2.5, 1.0), (0.9, 0.3)])
def test_esn_init_has_the_requested_spectral_radius(cell, radius, density):
    torch.manual_seed(0)
    init = "pytorch" if cell == "esn" else "esn"  # --model esn always draws its reservoir this way
    model = CharRNN(ModelConfig(vocab_size=5, cell=cell, num_layers=2, hidden_size=40, embed_size=3,
                                init=init, spectral_radius=radius, recurrent_density=density))
    for k in range(2):
        for block in getattr(model.rnn, f"weight_hh_l{k}").split(40, dim=0):
            assert spectral_radius(block) == pytest.approx(radius, abs=1e-3)
            assert (block != 0).float().mean().item() == pytest.approx(density, abs=0.05)


def test_orthogonal_and_textbook_init():
    torch.manual_seed(0)
    model = CharRNN(ModelConfig(vocab_size=7, cell="gru", hidden_size=8, embed_size=5, init="orthogonal"))
    for block in model.rnn.weight_hh_l0.split(8, dim=0):
        torch.testing.assert_close(block @ block.t(), torch.eye(8), rtol=0, atol=1e-5)
    model = CharRNN(ModelConfig(vocab_size=7, cell="lstm", hidden_size=8, embed_size=5, init="textbook"))
    for weight, fan_in in ((model.rnn.weight_ih_l0, 5), (model.rnn.weight_hh_l1, 8), (model.head.weight, 8)):
        bound = fan_in ** -0.5
        assert weight.abs().max() <= bound and weight.abs().max() > 0.8 * bound


def test_esn_trains_only_its_read_out():
    torch.manual_seed(0)
    model = CharRNN(ModelConfig(vocab_size=6, cell="esn", num_layers=1, hidden_size=16, embed_size=4))
    logits, _ = model(torch.randint(0, 6, (2, 9)))
    torch.nn.functional.cross_entropy(logits.reshape(-1, 6), torch.randint(0, 6, (18,))).backward()
    trained = {name for name, p in model.named_parameters() if p.grad is not None}
    assert trained == {"head.weight", "head.bias"}
