"""AWD-LSTM regularisation for longer runs (Merity et al. 2018; docs/techniques.md), and skip connections.

Weight drop (one DropConnect mask on W_hh per segment, so fused kernels still run, a layer at a time), locked
and embedding dropout act in training only: in eval mode the model is exactly the plain network."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

# The fused kernel of each cell type (nn.RNNBase.mode); all take (input, state, [w_ih, w_hh, b_ih, b_hh],
# has_biases, num_layers, dropout, train, bidirectional, batch_first).
_FUSED_LAYERS = {"LSTM": torch.lstm, "GRU": torch.gru, "RNN_TANH": torch.rnn_tanh, "RNN_RELU": torch.rnn_relu}

# cuDNN warns when handed one layer's matrices, as the layer-at-a-time recurrence below always is, and
# copies them into one buffer per call: a small cost beside the layer's work, a warning that only alarms.
warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk",
                        category=UserWarning, module=__name__)


def dropout_mask_like(x: torch.Tensor, p: float) -> torch.Tensor:
    """A dropout mask of ``x``'s shape: 0 with probability ``p``, else ``1 / (1 - p)``. ``uniform < 1 - p``
    takes half the time of ``bernoulli_`` on the CPU, and weight drop draws one per layer at every step."""
    keep = 1 - p
    return (torch.rand_like(x) < keep).to(x.dtype).div_(keep)


def locked_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Variational dropout of x: (B, T, F): one mask per stream and feature, the same at every time step."""
    if not training or p == 0:
        return x
    return x * dropout_mask_like(x[:, :1], p)


def sequence_dropout(x: torch.Tensor, p: float, training: bool, locked: bool) -> torch.Tensor:
    """Dropout on a (B, T, F) sequence: locked across time, or a fresh mask per element."""
    return locked_dropout(x, p, training) if locked else F.dropout(x, p, training)


def embedding_dropout(embedding: nn.Embedding, idx: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Embed ``idx`` (B, T) -> (B, T, E), dropping whole rows (each a character's every use) in training."""
    if not training or p == 0:
        return embedding(idx)
    weight = embedding.weight * dropout_mask_like(embedding.weight[:, :1], p)
    return F.embedding(idx, weight)


def layerwise_recurrence(rnn: nn.Module, x: torch.Tensor, state: torch.Tensor | tuple[torch.Tensor, ...],
                         training: bool, weight_drop: float, between_layers: float, locked: bool,
                         skip_connections: bool = False
                         ) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, ...]]:
    """``rnn(x, state)`` one fused layer at a time (``rnn``: an ``nn.RNNBase`` or a :class:`SkipStack`), W_hh
    weight-dropped and the dropout between layers locked when asked, in training. x: (B, T, input_size); state
    as ``rnn`` takes it. Returns out (B, T, H), or (B, T, num_layers·H) with skip connections (layer k ≥ 1
    then reads ``[x, h_{k−1}]``), and the final state."""
    fused_layer, is_lstm = _FUSED_LAYERS[rnn.mode], rnn.mode == "LSTM"
    finals: list[list[torch.Tensor]] = [[], []] if is_lstm else [[]]
    outputs, layer_input = [], x
    for k in range(rnn.num_layers):
        w_hh = getattr(rnn, f"weight_hh_l{k}")
        if training and weight_drop > 0:
            w_hh = w_hh * dropout_mask_like(w_hh, weight_drop)
        weights = [getattr(rnn, f"weight_ih_l{k}"), w_hh, getattr(rnn, f"bias_ih_l{k}"),
                   getattr(rnn, f"bias_hh_l{k}")]
        layer_state = (state[0][k : k + 1], state[1][k : k + 1]) if is_lstm else state[k : k + 1]
        out, *layer_final = fused_layer(layer_input, layer_state, weights, True, 1, 0.0, training, False,
                                        True)
        for kept, tensor in zip(finals, layer_final, strict=True):
            kept.append(tensor)
        outputs.append(out)
        if k < rnn.num_layers - 1:
            layer_input = sequence_dropout(out, between_layers, training, locked)
            if skip_connections:
                layer_input = torch.cat([x, layer_input], dim=-1)
    final = tuple(torch.cat(tensors) for tensors in finals)
    out = torch.cat(outputs, dim=-1) if skip_connections else outputs[-1]
    return out, final if is_lstm else final[0]


class SkipStack(nn.Module):
    """Stacked layers with skip connections (Graves 2013): input to every layer, every layer to the output.
    Names, layout and initialisation (uniform in ±1/√H) are ``nn.LSTM``'s / ``nn.GRU``'s / ``nn.RNN``'s, but
    ``weight_ih_l{k}`` for k ≥ 1 is (G·H, E + H), its first E columns reading the input."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int, dropout: float):
        super().__init__()
        self.mode, self.hidden_size, self.num_layers, self.dropout = mode, hidden_size, num_layers, dropout
        gates = {"LSTM": 4, "GRU": 3}.get(mode, 1) * hidden_size
        bound = hidden_size ** -0.5
        for k in range(num_layers):
            fan_in = input_size if k == 0 else input_size + hidden_size
            shapes = {f"weight_ih_l{k}": (gates, fan_in), f"weight_hh_l{k}": (gates, hidden_size),
                      f"bias_ih_l{k}": (gates,), f"bias_hh_l{k}": (gates,)}
            for name, shape in shapes.items():
                self.register_parameter(name, nn.Parameter(torch.empty(shape).uniform_(-bound, bound)))
