"""Layer-normalised recurrent layers (textbook notes §1, "Layer normalisation for RNNs"; docs/techniques.md).

Each gate's pre-activation is normalised over its H units, with a gain and shift per gate (its only bias);
the LSTM also normalises c', the GRU resets h before W_hn. Python loops, slower than fused kernels."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from charrnn.models.regularise import dropout_mask_like, sequence_dropout

EPSILON = 1e-5
_GATES = {"rnn": 1, "gru": 3, "lstm": 4}


def layer_norm(a: torch.Tensor, gain: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """γ (a − μ) / sqrt(mean(a²) − μ² + ε) + β over the last dimension. ``F.layer_norm`` normalises in one
    kernel; the gain and shift are applied apart because they are per gate, not per input shape."""
    return gain * F.layer_norm(a, a.shape[-1:], eps=EPSILON) + bias


class LayerNormRNN(nn.Module):
    """Layer-normalised rnn/gru/lstm layers called as nn.RNN is: forward(x: (B, T, E), state) -> (out:
    (B, T, H), state), state (num_layers, B, H) or the LSTM's (h, c); :meth:`step` shares its cell step."""

    def __init__(self, cell: str, input_size: int, hidden_size: int, num_layers: int, dropout: float,
                 activation: str = "tanh", weight_drop: float = 0.0, locked_dropout: bool = False):
        super().__init__()
        self.cell, self.hidden_size, self.num_layers = cell, hidden_size, num_layers
        self.activation = torch.tanh if activation == "tanh" else F.relu
        self.dropout = dropout  # between layers, in training
        self.weight_drop = weight_drop  # DropConnect on W_hh, in training (charrnn.models.regularise)
        self.locked_dropout = locked_dropout  # the dropout between layers keeps its mask across time
        gates, bound = _GATES[cell], hidden_size ** -0.5
        for k in range(num_layers):
            fan_in = input_size if k == 0 else hidden_size
            for name, columns in (("weight_ih", fan_in), ("weight_hh", hidden_size)):
                self.register_parameter(f"{name}_l{k}", nn.Parameter(
                    torch.empty(gates * hidden_size, columns).uniform_(-bound, bound)))
            self.register_parameter(f"ln_gain_l{k}", nn.Parameter(torch.ones(gates, hidden_size)))
            self.register_parameter(f"ln_bias_l{k}", nn.Parameter(torch.zeros(gates, hidden_size)))
            if cell == "lstm":
                self.register_parameter(f"ln_cell_gain_l{k}", nn.Parameter(torch.ones(hidden_size)))
                self.register_parameter(f"ln_cell_bias_l{k}", nn.Parameter(torch.zeros(hidden_size)))

    def _layer(self, name: str, k: int) -> torch.Tensor:
        return getattr(self, f"{name}_l{k}")

    def _cell_step(self, k: int, x_proj: torch.Tensor, h: torch.Tensor, c: torch.Tensor | None,
                   w_hh: torch.Tensor):
        """One step of layer k. x_proj: (B, G·H) = W_x x; h, c: (B, H); w_hh: its recurrent matrix
        (weight-dropped in training). Returns (h', c')."""
        H = self.hidden_size
        gain, bias = self._layer("ln_gain", k), self._layer("ln_bias", k)
        if self.cell == "gru":
            x_z, x_r, x_n = x_proj.split(H, dim=1)
            h_z, h_r = (h @ w_hh[: 2 * H].t()).split(H, dim=1)
            z = torch.sigmoid(layer_norm(x_z + h_z, gain[0], bias[0]))
            r = torch.sigmoid(layer_norm(x_r + h_r, gain[1], bias[1]))
            n = torch.tanh(layer_norm(x_n + (r * h) @ w_hh[2 * H :].t(), gain[2], bias[2]))
            return n + z * (h - n), None
        a = (x_proj + h @ w_hh.t()).view(-1, w_hh.shape[0] // H, H)  # (B, G, H)
        normed = layer_norm(a, gain, bias)
        if self.cell == "rnn":
            return self.activation(normed[:, 0]), None
        i, f, o = torch.sigmoid(normed[:, 0]), torch.sigmoid(normed[:, 1]), torch.sigmoid(normed[:, 3])
        c_new = f * c + i * torch.tanh(normed[:, 2])  # g: the candidate
        cell_gain, cell_bias = self._layer("ln_cell_gain", k), self._layer("ln_cell_bias", k)
        h_new = o * torch.tanh(layer_norm(c_new, cell_gain, cell_bias))
        return h_new, c_new

    def _split_state(self, state):
        if self.cell == "lstm":
            return list(state[0]), list(state[1])
        return list(state), [None] * self.num_layers

    def _join_state(self, hs, cs):
        return (torch.stack(hs), torch.stack(cs)) if self.cell == "lstm" else torch.stack(hs)

    def forward(self, x: torch.Tensor, state):
        hs, cs = self._split_state(state)
        layer_input = x  # (B, T, E)
        for k in range(self.num_layers):
            x_proj = layer_input @ self._layer("weight_ih", k).t()  # (B, T, G·H) for all steps at once
            w_hh = self._layer("weight_hh", k)
            if self.training and self.weight_drop > 0:
                w_hh = w_hh * dropout_mask_like(w_hh, self.weight_drop)
            outputs = []
            for t in range(x.shape[1]):
                hs[k], cs[k] = self._cell_step(k, x_proj[:, t], hs[k], cs[k], w_hh)
                outputs.append(hs[k])
            layer_input = torch.stack(outputs, dim=1)  # (B, T, H)
            if k < self.num_layers - 1:
                layer_input = sequence_dropout(layer_input, self.dropout, self.training, self.locked_dropout)
        return layer_input, self._join_state(hs, cs)

    def step(self, x: torch.Tensor, state):
        """One character: x (B, E) -> top layer's h (B, H) and the new state."""
        hs, cs = self._split_state(state)
        for k in range(self.num_layers):
            x_proj = x @ self._layer("weight_ih", k).t()
            hs[k], cs[k] = self._cell_step(k, x_proj, hs[k], cs[k], self._layer("weight_hh", k))
            x = hs[k]
        return x, self._join_state(hs, cs)
