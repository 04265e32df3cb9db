"""One character at a time: the fast inference path of sampling, beam search and inspect (textbook notes §1).

Weights are laid out once, so a step is a few ``addmm`` calls, layer 0's input read from a table by id
(docs/performance.md). An inference-only snapshot of the weights: make a new one when they change."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
import torch.nn.functional as F

from charrnn.models.model import CharRNN, State

Layers = list[tuple[torch.Tensor, ...]]  # per layer: (h, c) or (h,), each (B, H)


class Stepper(ABC):
    """The interface: :meth:`step` on stacked state, :meth:`step_layers` on per-layer state."""

    def __init__(self, model: CharRNN):
        config = model.config
        self.hidden_size, self.num_layers = config.hidden_size, config.num_layers
        # With skip connections every layer reaches the output, and the input every layer.
        self.skip_connections, self.embed_size = config.skip_connections, config.embed_size
        self.head_weight = model.head.weight.detach().t().contiguous()  # (H, V), or (L·H, V) with skips
        self.head_bias = model.head.bias.detach().clone()  # (V,)

    def unstack(self, state: State) -> Layers:
        """``(num_layers, B, H)`` state tensors → one tuple of ``(B, H)`` tensors per layer."""
        return [tuple(s[k] for s in state) for k in range(self.num_layers)]

    def stack(self, layers: Layers) -> State:
        """The inverse of :meth:`unstack`."""
        return tuple(torch.stack(parts) for parts in zip(*layers, strict=True))

    @torch.no_grad()
    def step(self, idx: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """Read one character: idx (B,) int64, state a tuple of (num_layers, B, H).
        Returns logits (B, V) for the next character and the new state."""
        logits, layers = self.step_layers(idx, self.unstack(state))
        return logits, self.stack(layers)

    @abstractmethod
    def step_layers(self, idx: torch.Tensor, layers: Layers) -> tuple[torch.Tensor, Layers]:
        """:meth:`step` on per-layer state (:meth:`unstack`), which long loops keep: stacking it per character
        costs more than a step's products. The weights are detached copies: no graph even without no_grad."""

    def read_out(self, layers: Layers) -> torch.Tensor:
        """Logits (B, V) from the top layer's hidden state (B, H), or every layer's with skip connections."""
        top = torch.cat([h for h, *_ in layers], dim=1) if self.skip_connections else layers[-1][0]
        return torch.addmm(self.head_bias, top, self.head_weight)

    def upper_input(self, model: CharRNN, k: int, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``k`` ≥ 1's input weights: (the part reading the layer below (G, H), a base). The base is
        ``bias`` (G,), or with skip connections a table (V, G) folding in the embedding's input product."""
        weight = getattr(model.rnn, f"weight_ih_l{k}")
        if not self.skip_connections:
            return weight, bias
        reads_input, reads_below = weight[:, : self.embed_size], weight[:, self.embed_size :]
        return reads_below, torch.addmm(bias, model.embedding.weight, reads_input.t())


class _SummedInputStepper(Stepper):
    """LSTM and Elman RNN: each layer's pre-activation is ``W_ih x + W_hh h + b`` in one product."""

    def __init__(self, model: CharRNN):
        super().__init__(model)
        rnn = model.rnn
        with torch.no_grad():
            self.input_table = torch.addmm(rnn.bias_ih_l0 + rnn.bias_hh_l0, model.embedding.weight,
                                           rnn.weight_ih_l0.t())  # (V, G)
            self.first_recurrent = rnn.weight_hh_l0.t().contiguous()  # (H, G)
            # Upper layers: one product of [x, h] with the stacked weights, added to the base.
            self.upper = []
            for k in range(1, self.num_layers):
                reads_below, base = self.upper_input(
                    model, k, getattr(rnn, f"bias_ih_l{k}") + getattr(rnn, f"bias_hh_l{k}"))
                stacked = torch.cat([reads_below, getattr(rnn, f"weight_hh_l{k}")], dim=1)
                self.upper.append((stacked.t().contiguous(), base))  # (2H, G); (G,) or (V, G)

    def first_preactivation(self, idx: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Layer 0: the input part read from the lookup table by character id. idx: (B,); h: (B, H)."""
        return torch.addmm(self.input_table[idx], h, self.first_recurrent)

    def upper_preactivation(self, k: int, idx: torch.Tensor, x: torch.Tensor, h: torch.Tensor
                            ) -> torch.Tensor:
        """Layer ``k`` ≥ 1 from the layer below's ``x`` (with skips, ``idx`` via the base): one ``addmm``."""
        weight, base = self.upper[k - 1]
        return torch.addmm(base[idx] if self.skip_connections else base, torch.cat([x, h], dim=1), weight)


class LSTMStepper(_SummedInputStepper):
    def step_layers(self, idx: torch.Tensor, layers: Layers) -> tuple[torch.Tensor, Layers]:
        new_layers, x = [], None
        for k, (h_prev, c_prev) in enumerate(layers):
            gates = (self.first_preactivation(idx, h_prev) if k == 0
                     else self.upper_preactivation(k, idx, x, h_prev))  # (B, 4H), gates i, f, g, o
            # One sigmoid over all four gates (g's is unused) costs less than four small calls.
            i, f, _, o = torch.sigmoid(gates).chunk(4, dim=1)
            g = torch.tanh(gates.chunk(4, dim=1)[2])
            c = torch.addcmul(f * c_prev, i, g)  # f ⊙ c + i ⊙ g
            x = o * torch.tanh(c)
            new_layers.append((x, c))
        return self.read_out(new_layers), new_layers


class RNNStepper(_SummedInputStepper):
    """The Elman RNN, and the echo-state network's reservoir (a tanh RNN whose weights stay fixed)."""

    def __init__(self, model: CharRNN):
        super().__init__(model)
        self.activation = F.relu if model.config.rnn_activation == "relu" else torch.tanh

    def step_layers(self, idx: torch.Tensor, layers: Layers) -> tuple[torch.Tensor, Layers]:
        new_layers, x = [], None
        for k, (h_prev,) in enumerate(layers):
            x = self.activation(self.first_preactivation(idx, h_prev) if k == 0
                                else self.upper_preactivation(k, idx, x, h_prev))
            new_layers.append((x,))
        return self.read_out(new_layers), new_layers


class GRUStepper(Stepper):
    """Input and recurrent products stay apart: the reset gate multiplies the candidate's recurrent part."""

    def __init__(self, model: CharRNN):
        super().__init__(model)
        rnn = model.rnn
        with torch.no_grad():
            self.input_table = torch.addmm(rnn.bias_ih_l0, model.embedding.weight,
                                           rnn.weight_ih_l0.t())  # (V, 3H)
            self.recurrent = [(getattr(rnn, f"weight_hh_l{k}").t().contiguous(),
                               getattr(rnn, f"bias_hh_l{k}")) for k in range(self.num_layers)]
            self.upper_inputs = []
            for k in range(1, self.num_layers):
                reads_below, base = self.upper_input(model, k, getattr(rnn, f"bias_ih_l{k}"))
                self.upper_inputs.append((reads_below.t().contiguous(), base))  # (H, 3H); (3H,) or (V, 3H)

    def step_layers(self, idx: torch.Tensor, layers: Layers) -> tuple[torch.Tensor, Layers]:
        H = self.hidden_size
        new_layers, x = [], None
        for k, (h_prev,) in enumerate(layers):
            if k == 0:
                gi = self.input_table[idx]  # (B, 3H)
            else:
                weight, base = self.upper_inputs[k - 1]
                gi = torch.addmm(base[idx] if self.skip_connections else base, x, weight)
            weight_hh, bias_hh = self.recurrent[k]
            gh = torch.addmm(bias_hh, h_prev, weight_hh)  # (B, 3H)
            r, z = torch.sigmoid(gi[:, : 2 * H] + gh[:, : 2 * H]).chunk(2, dim=1)
            n = torch.tanh(torch.addcmul(gi[:, 2 * H :], r, gh[:, 2 * H :]))
            x = torch.addcmul(n, z, h_prev - n)  # = (1 - z) ⊙ n + z ⊙ h_prev
            new_layers.append((x,))
        return self.read_out(new_layers), new_layers


class LayerNormStepper(Stepper):
    """Layer-normalised cells step through their module's own one-character step, on its live parameters."""

    def __init__(self, model: CharRNN):
        super().__init__(model)
        self.rnn, self.carries_cell = model.rnn, model.config.cell == "lstm"
        self.embedding = model.embedding.weight.detach()  # (V, E)

    @torch.no_grad()
    def step_layers(self, idx: torch.Tensor, layers: Layers) -> tuple[torch.Tensor, Layers]:
        state = self.stack(layers)
        _, rnn_state = self.rnn.step(self.embedding[idx], state if self.carries_cell else state[0])
        layers = self.unstack(rnn_state if self.carries_cell else (rnn_state,))
        return self.read_out(layers), layers


def make_stepper(model: CharRNN) -> Stepper:
    """The stepper for ``model``'s kind of cell, over a snapshot of its current weights."""
    if model.config.layer_norm:
        return LayerNormStepper(model)
    return {"lstm": LSTMStepper, "gru": GRUStepper}.get(model.config.cell, RNNStepper)(model)
