"""Regularisation for longer runs: the AWD-LSTM recipe (Merity et al. 2018, "Regularizing and
Optimizing LSTM Language Models"), see docs/techniques.md, "Regularisation".

- **Weight drop** (DropConnect on the recurrent matrices W_hh): one mask per training
  segment, shared by every stream and time step, so the recurrence still runs through
  PyTorch's fused kernels, layer by layer, with the masked matrix in place of W_hh.
- **Locked (variational) dropout**: one mask per stream per segment, reused at every
  time step, instead of a fresh mask for every character.
- **Embedding dropout**: whole characters dropped from the embedding for a segment.

All of them act in training only: in eval mode (evaluation, sampling, the stepper)
the model is exactly the unregularised network.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

# The fused kernel of each cell type (nn.RNNBase.mode); all take (input, state, [w_ih, w_hh, b_ih, b_hh],
# has_biases, num_layers, dropout, train, bidirectional, batch_first).
_FUSED_LAYERS = {"LSTM": torch.lstm, "GRU": torch.gru, "RNN_TANH": torch.rnn_tanh, "RNN_RELU": torch.rnn_relu}

# On CUDA, cuDNN warns that weights "are not part of single contiguous chunk of memory" when handed one
# layer's matrices (or a weight-dropped copy) rather than the module's flattened buffer, as the layer-at-a-
# time recurrence below always does. It then copies them into one buffer per call: for a 2×768 layer,
# 19 MB, microseconds at a GPU's bandwidth beside the layer's work. Said to a user, it only alarms.
warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk",
                        category=UserWarning, module=__name__)


def dropout_mask_like(x: torch.Tensor, p: float) -> torch.Tensor:
    """A dropout mask of ``x``'s shape: 0 with probability ``p``, else ``1 / (1 - p)``.

    Drawn as ``uniform < 1 - p``, which took half the time of ``bernoulli_`` on the CPU
    (23 against 44 ms for a 3072 × 768 recurrent matrix, 2 threads), a cost that weight
    drop pays for every layer at every step.
    """
    keep = 1 - p
    return (torch.rand_like(x) < keep).to(x.dtype).div_(keep)


def locked_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Variational dropout: one mask per stream and feature, the same at every time step.

    x: (B, T, F). Returns x masked along B and F (not T); x itself when not training or p is 0.
    """
    if not training or p == 0:
        return x
    return x * dropout_mask_like(x[:, :1], p)


def sequence_dropout(x: torch.Tensor, p: float, training: bool, locked: bool) -> torch.Tensor:
    """Dropout on a (B, T, F) sequence: locked across time, or a fresh mask per element."""
    return locked_dropout(x, p, training) if locked else F.dropout(x, p, training)


def embedding_dropout(embedding: nn.Embedding, idx: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Embed ``idx`` (B, T) with whole rows of the table dropped (all of a character's occurrences).

    Returns (B, T, E); the kept rows are scaled by ``1 / (1 - p)``.
    """
    if not training or p == 0:
        return embedding(idx)
    weight = embedding.weight * dropout_mask_like(embedding.weight[:, :1], p)
    return F.embedding(idx, weight)


def layerwise_recurrence(rnn: nn.Module, x: torch.Tensor, state: torch.Tensor | tuple[torch.Tensor, ...],
                         training: bool, weight_drop: float, between_layers: float, locked: bool,
                         skip_connections: bool = False
                         ) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, ...]]:
    """``rnn(x, state)`` one fused layer at a time, with W_hh weight-dropped in training.

    ``rnn`` is an ``nn.RNNBase`` or a :class:`SkipStack` (their ``mode``, ``num_layers``
    and per-layer weight names). The dropout between layers (``between_layers``, in
    training) is locked across time when ``locked``, as in the AWD-LSTM. With
    ``skip_connections``, layer k ≥ 1 reads ``[x, output of layer k − 1]`` and the
    output is every layer's output side by side. x: (B, T, input_size); state and
    the returned state as ``rnn``'s own: (num_layers, B, H), or a pair of them for
    the LSTM. Returns out (B, T, H), or (B, T, num_layers·H) with skip connections,
    and the final state.
    """
    fused_layer = _FUSED_LAYERS[rnn.mode]
    is_lstm = rnn.mode == "LSTM"
    finals: list[list[torch.Tensor]] = [[], []] if is_lstm else [[]]
    outputs = []
    layer_input = x
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
    """Stacked recurrent layers with skip connections (Graves 2013, "Generating Sequences With
    Recurrent Neural Networks"): the input reaches every layer and every layer reaches the output.

    The weights have ``nn.LSTM``'s / ``nn.GRU``'s / ``nn.RNN``'s names and layout, except that
    ``weight_ih_l{k}`` for k ≥ 1 is (G·H, E + H): its first E columns read the input. Its
    initialisation is PyTorch's: every weight and bias uniform in ±1/√H. It runs through
    :func:`layerwise_recurrence`; :mod:`charrnn.models.stepper` has its one-character path.
    """

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
