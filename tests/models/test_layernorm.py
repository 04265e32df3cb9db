import math

import pytest
import torch

from charrnn.config import ModelConfig, TrainConfig
from charrnn.data.corpus import CorpusInfo, StreamBatches
from charrnn.data.vocab import Vocab
from charrnn.models.layernorm import EPSILON, LayerNormRNN
from charrnn.training.loop import train_step
from charrnn.training.state import TrainingRun

CELLS = ["rnn", "gru", "lstm"]


def ln_by_hand(a: list[float], gain: list[float], bias: list[float]) -> list[float]:
    """Textbook notes §1: μ = mean(a), σ = sqrt(mean(a²) − μ² + ε), γ (a − μ) / σ + β."""
    mu = sum(a) / len(a)
    sigma = math.sqrt(sum(x * x for x in a) / len(a) - mu * mu + EPSILON)
    return [g * (x - mu) / sigma + b for x, g, b in zip(a, gain, bias, strict=True)]


def matvec(matrix: torch.Tensor, vector: list[float]) -> list[float]:
    return [sum(float(m) * v for m, v in zip(row, vector, strict=True)) for row in matrix]


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


@pytest.fixture
def layer_and_inputs(request):
    torch.manual_seed(0)
    layer = LayerNormRNN(request.param, input_size=3, hidden_size=4, num_layers=1, dropout=0.0)
    with torch.no_grad():
        for name, param in layer.named_parameters():
            if name.startswith("ln_"):
                param.uniform_(-1, 1)  # gains and shifts away from 1 and 0, so mistakes show
    return request.param, layer, [0.3, -1.2, 0.8], [0.5, -0.1, 0.2, -0.7], [0.1, 0.4, -0.3, 0.9]


@pytest.mark.parametrize("layer_and_inputs", CELLS, indirect=True)
def test_one_step_equals_the_equations_by_hand(layer_and_inputs):
    cell, layer, x, h, c = layer_and_inputs
    w_ih, w_hh = layer.weight_ih_l0.detach(), layer.weight_hh_l0.detach()
    gain, bias = layer.ln_gain_l0.detach().tolist(), layer.ln_bias_l0.detach().tolist()
    H = 4
    pre = [a + b for a, b in zip(matvec(w_ih, x), matvec(w_hh, h), strict=True)]
    if cell == "rnn":
        expected_h = [math.tanh(v) for v in ln_by_hand(pre, gain[0], bias[0])]
    elif cell == "lstm":
        i, f, g, o = (ln_by_hand(pre[k * H:(k + 1) * H], gain[k], bias[k]) for k in range(4))
        c_new = [sigmoid(fv) * cv + sigmoid(iv) * math.tanh(gv)
                 for iv, fv, gv, cv in zip(i, f, g, c, strict=True)]
        c_normed = ln_by_hand(c_new, layer.ln_cell_gain_l0.tolist(), layer.ln_cell_bias_l0.tolist())
        expected_h = [sigmoid(ov) * math.tanh(cv) for ov, cv in zip(o, c_normed, strict=True)]
    else:
        x_proj = matvec(w_ih, x)
        z = [sigmoid(v) for v in ln_by_hand(pre[:H], gain[0], bias[0])]
        r = [sigmoid(v) for v in ln_by_hand(pre[H:2 * H], gain[1], bias[1])]
        reset_h = [rv * hv for rv, hv in zip(r, h, strict=True)]
        candidate = [a + b for a, b in zip(x_proj[2 * H:], matvec(w_hh[2 * H:], reset_h), strict=True)]
        n = [math.tanh(v) for v in ln_by_hand(candidate, gain[2], bias[2])]
        expected_h = [zv * hv + (1 - zv) * nv for zv, hv, nv in zip(z, h, n, strict=True)]
    state = (torch.tensor([[h]]), torch.tensor([[c]])) if cell == "lstm" else torch.tensor([[h]])
    with torch.no_grad():
        top, _ = layer.step(torch.tensor([x]), state)
    assert top[0].tolist() == pytest.approx(expected_h, abs=1e-5)


def test_layer_norm_model_learns(tmp_path):
    vocab = Vocab.from_text("abcd ")
    ids = vocab.encode("abcd " * 200)
    info = CorpusInfo("x", "x", len(ids), "0", 0.1, len(ids))
    config = TrainConfig(out_dir=str(tmp_path), batch_size=4, seq_len=10, learning_rate=1e-2, max_steps=60)
    run = TrainingRun(ModelConfig(vocab_size=5, num_layers=1, hidden_size=16, embed_size=4, layer_norm=True),
                      config, vocab, info, StreamBatches(ids, 4, 10))
    losses = [train_step(run, 1e-2)[0] for _ in range(60)]
    assert losses[-1] < 0.3 < losses[0]
