"""The character-level recurrent language model and its fast per-step path.

``CharRNN`` is embedding → stacked fused ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` →
dropout → linear head. The cell equations are those of textbook notes §1, with
PyTorch's conventions: LSTM gates stored in the order i, f, g, o; the GRU weights
the *old* state by the update gate z and applies the reset gate after the
recurrent matrix product, ``n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))``.

State is explicit and always a tuple of ``(num_layers, B, H)`` tensors: ``(h, c)``
for the LSTM, ``(h,)`` for the GRU and RNN. That one shape lets training detach
it, and sampling and beam search index it, without caring about the cell type.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from charrnn.config import ModelConfig
from charrnn.errors import CharrnnError
from charrnn.layernorm import LayerNormRNN

State = tuple[torch.Tensor, ...]
Layers = list[tuple[torch.Tensor, ...]]  # per layer: (h, c) or (h,), each (B, H)

_RNN_CLASSES: dict[str, type[nn.RNNBase]] = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN, "esn": nn.RNN}
_VOCAB_ROWS = ("embedding.weight", "head.weight", "head.bias")  # one row per vocabulary symbol


class CharRNN(nn.Module):
    """Embedding, stacked recurrent layers, and a linear read-out to ``vocab_size`` logits."""

    def __init__(self, config: ModelConfig, initialise_weights: bool = True):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.embed_size)
        between_layers = config.dropout if config.num_layers > 1 else 0.0
        if config.layer_norm:
            self.rnn = LayerNormRNN(config.cell, config.embed_size, config.hidden_size, config.num_layers,
                                    between_layers, config.rnn_activation)
        else:
            options = {"nonlinearity": config.rnn_activation} if config.cell in ("rnn", "esn") else {}
            self.rnn = _RNN_CLASSES[config.cell](
                config.embed_size,
                config.hidden_size,
                num_layers=config.num_layers,
                dropout=between_layers,
                batch_first=True,
                **options,
            )
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(config.hidden_size, config.vocab_size)
        if initialise_weights:
            initialise(self)
            if not all(bool(torch.isfinite(p).all()) for p in self.parameters()):
                raise CharrnnError("the initial weights are not finite; lower --spectral-radius")
        if config.cell == "esn":
            # An echo-state network trains only its read-out; the reservoir stays as drawn.
            for param in [*self.embedding.parameters(), *self.rnn.parameters()]:
                param.requires_grad_(False)

    @property
    def state_size(self) -> int:
        """Number of tensors in the recurrent state: 2 for the LSTM, else 1."""
        return 2 if self.config.cell == "lstm" else 1

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> State:
        """Zero state ``h_0`` (and ``c_0``): a tuple of ``(num_layers, B, H)`` tensors."""
        shape = (self.config.num_layers, batch_size, self.config.hidden_size)
        device = device if device is not None else self.head.weight.device
        return tuple(torch.zeros(shape, device=device) for _ in range(self.state_size))

    def forward(self, idx: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        """Run a batch of sequences.

        idx: (B, T) int64 character ids. state: tuple of (num_layers, B, H), or None
        for zeros. Returns logits (B, T, V) for the character after each position,
        and the state after the last position.
        """
        if state is None:
            state = self.initial_state(idx.shape[0], idx.device)
        x = self.embedding(idx)  # (B, T, E)
        rnn_state = state if self.config.cell == "lstm" else state[0]
        out, new_state = self.rnn(x, rnn_state)  # (B, T, H)
        logits = self.head(self.dropout(out))  # (B, T, V)
        new_state = new_state if isinstance(new_state, tuple) else (new_state,)
        return logits, new_state

    def load_pretrained(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Start from another model's weights, for fine-tuning.

        Every tensor must match in shape, except that the vocabulary-sized ones
        (embedding rows, read-out rows and biases) may be shorter: the source
        vocabulary is then a prefix of this one, its rows are copied, and the rows
        of the added characters keep their fresh initialisation.
        """
        own = self.state_dict()
        with torch.no_grad():
            for name, source in state_dict.items():
                target = own.get(name)
                if target is None:
                    raise CharrnnError(f"the checkpoint has a weight this model lacks: {name}")
                if source.shape == target.shape:
                    target.copy_(source)
                elif name in _VOCAB_ROWS and source.shape[1:] == target.shape[1:] \
                        and source.shape[0] < target.shape[0]:
                    target[: source.shape[0]].copy_(source)
                else:
                    raise CharrnnError(
                        f"the checkpoint's {name} has shape {tuple(source.shape)}, this model's "
                        f"{tuple(target.shape)}"
                    )

    def stepper(self) -> Stepper:
        """A snapshot of the weights laid out for fast one-character steps (see :class:`Stepper`)."""
        return Stepper(self)


def state_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The name and shape of every tensor in the state dict of a model with ``config``.

    Built on the meta device, so a declared size is checked without allocating it.
    """
    with torch.device("meta"):
        model = CharRNN(config, initialise_weights=False)
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def parameter_count(config: ModelConfig) -> int:
    """Number of parameters of a model with ``config``, computed without allocating it."""
    return sum(math.prod(shape) for shape in state_shapes(config).values())


def spectral_radius(matrix: torch.Tensor) -> float:
    """Largest absolute eigenvalue of a square matrix."""
    return float(torch.linalg.eigvals(matrix.detach().double()).abs().max())


def _recurrent_blocks(weight: torch.Tensor, hidden_size: int) -> list[torch.Tensor]:
    """The H×H recurrent matrices stacked in ``weight_hh`` (one per gate), as views."""
    return list(weight.split(hidden_size, dim=0))


@torch.no_grad()
def initialise(model: CharRNN) -> None:
    """Apply ``model.config.init`` and the LSTM forget-gate bias (textbook notes §2), in place.

    pytorch: the modules' own defaults. textbook: every weight matrix of the cells
    and the read-out uniform in ±1/√r, r its number of columns (fan-in).
    orthogonal: each gate's recurrent H×H block orthogonal. esn: each recurrent
    block drawn from N(0, 1), kept with probability ``recurrent_density``, then
    rescaled so its spectral radius is ``spectral_radius`` (--model esn always uses
    this). A requested forget-gate bias is the *effective* one: PyTorch adds b_ih
    and b_hh, so b_ih holds the requested value and b_hh zero.
    """
    config = model.config
    scheme = "esn" if config.cell == "esn" else config.init
    H = config.hidden_size
    rnn = model.rnn
    if scheme == "textbook":
        cell_weights = [param for name, param in rnn.named_parameters() if name.startswith("weight")]
        for weight in [*cell_weights, model.head.weight]:
            bound = weight.shape[1] ** -0.5
            weight.uniform_(-bound, bound)
    for k in range(config.num_layers):
        blocks = _recurrent_blocks(getattr(rnn, f"weight_hh_l{k}"), H)
        for block in blocks:
            if scheme == "orthogonal":
                nn.init.orthogonal_(block)
            elif scheme == "esn":
                drawn = torch.randn(H, H)
                if config.recurrent_density < 1.0:
                    drawn *= torch.rand(H, H) < config.recurrent_density
                radius = spectral_radius(drawn)
                block.copy_(drawn * (config.spectral_radius / radius) if radius > 0 else drawn)
        if config.cell == "lstm" and config.forget_bias is not None:
            if config.layer_norm:  # the layer norm's shift is the gate's only bias
                getattr(rnn, f"ln_bias_l{k}")[1] = config.forget_bias
            else:
                getattr(rnn, f"bias_ih_l{k}")[H : 2 * H] = config.forget_bias
                getattr(rnn, f"bias_hh_l{k}")[H : 2 * H] = 0.0


def detach_state(state: State) -> State:
    """Cut the graph at a segment boundary so backprop stops there (truncated BPTT)."""
    return tuple(s.detach() for s in state)


class Stepper:
    """One-character-at-a-time inference with the cell's matrix products done directly.

    Calling the fused ``nn.LSTM`` once per character pays its dispatch and layout
    overhead on every step, about 10× slower on CPU than the arithmetic itself.
    This class concatenates each layer's weights once so a step is one ``addmm``
    per layer on ``[x, h]``; the first layer's input product is folded into a
    lookup table ``embedding @ W_ih^T + b`` indexed by the character id. The numbers
    equal the fused module's up to float rounding (tested to 1e-5).

    It is a snapshot: rebuild it after the model's weights change. Inference only
    (no dropout, no autograd).
    """

    def __init__(self, model: CharRNN):
        self.cell = "rnn" if model.config.cell == "esn" else model.config.cell
        self.hidden_size = model.config.hidden_size
        self.num_layers = model.config.num_layers
        rnn = model.rnn
        self.layer_norm_rnn = rnn if model.config.layer_norm else None
        self.embedding = model.embedding.weight.detach()
        self.head_weight = model.head.weight.detach().t().contiguous()  # (H, V)
        self.head_bias = model.head.bias.detach().clone()
        if self.layer_norm_rnn is not None:
            return  # its own step function is the sequence path's, one character long
        with torch.no_grad():
            embedding = model.embedding.weight  # (V, E)
            w_ih0 = rnn.weight_ih_l0
            b_ih0 = rnn.bias_ih_l0
            if self.cell == "gru":
                # Input and recurrent products stay apart: the reset gate multiplies
                # only the recurrent part of the candidate.
                self.input_table = torch.addmm(b_ih0, embedding, w_ih0.t())  # (V, 3H)
                self.recurrent = [
                    (getattr(rnn, f"weight_hh_l{k}").t().contiguous(), getattr(rnn, f"bias_hh_l{k}"))
                    for k in range(self.num_layers)
                ]
                self.upper_input = [
                    (getattr(rnn, f"weight_ih_l{k}").t().contiguous(), getattr(rnn, f"bias_ih_l{k}"))
                    for k in range(1, self.num_layers)
                ]
            else:
                self.input_table = torch.addmm(b_ih0 + rnn.bias_hh_l0, embedding, w_ih0.t())
                self.first_recurrent = rnn.weight_hh_l0.t().contiguous()  # (H, G)
                # Upper layers: one product of [x, h] with the stacked weights.
                self.upper = [
                    (
                        torch.cat(
                            [getattr(rnn, f"weight_ih_l{k}"), getattr(rnn, f"weight_hh_l{k}")], dim=1
                        ).t().contiguous(),  # (2H, G)
                        getattr(rnn, f"bias_ih_l{k}") + getattr(rnn, f"bias_hh_l{k}"),
                    )
                    for k in range(1, self.num_layers)
                ]
            self.activation = F.relu if rnn.mode == "RNN_RELU" else torch.tanh

    def unstack(self, state: State) -> Layers:
        """``(num_layers, B, H)`` state tensors → one tuple of ``(B, H)`` tensors per layer."""
        return [tuple(s[k] for s in state) for k in range(self.num_layers)]

    def stack(self, layers: Layers) -> State:
        """The inverse of :meth:`unstack`."""
        return tuple(torch.stack(parts) for parts in zip(*layers, strict=True))

    @torch.no_grad()
    def step(self, idx: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """Advance one character.

        idx: (B,) int64 ids. state: tuple of (num_layers, B, H). Returns logits (B, V)
        for the next character and the new state.
        """
        logits, layers = self.advance(idx, self.unstack(state))
        return logits, self.stack(layers)

    def advance(self, idx: torch.Tensor, layers: Layers) -> tuple[torch.Tensor, Layers]:
        """:meth:`step` on the per-layer form of the state (see :meth:`unstack`).

        Loops that take many steps keep the state in this form: stacking and
        slicing it on every character would cost more than the small matrix
        products of a step. The weights here are detached copies, so no graph is
        built even outside ``torch.no_grad()``.
        """
        if self.layer_norm_rnn is not None:
            return self._layer_norm_step(idx, layers)
        if self.cell == "lstm":
            return self._lstm_step(idx, layers)
        if self.cell == "gru":
            return self._gru_step(idx, layers)
        return self._rnn_step(idx, layers)

    @torch.no_grad()
    def _layer_norm_step(self, idx: torch.Tensor, layers: Layers) -> tuple[torch.Tensor, Layers]:
        """The layer-norm cells' own step function (it reads the module's live parameters)."""
        state = self.stack(layers)
        rnn_state = state if self.cell == "lstm" else state[0]
        top, rnn_state = self.layer_norm_rnn.step(self.embedding[idx], rnn_state)
        logits = torch.addmm(self.head_bias, top, self.head_weight)
        return logits, self.unstack(rnn_state if self.cell == "lstm" else (rnn_state,))

    def _preactivation(
        self, k: int, idx: torch.Tensor, x: torch.Tensor | None, h: torch.Tensor
    ) -> torch.Tensor:
        """``W_ih x + W_hh h + b`` of layer ``k`` (LSTM and RNN): one ``addmm`` on ``[x, h]``.

        Layer 0 reads its input part from the lookup table by character id instead.
        """
        if k == 0:
            return torch.addmm(self.input_table[idx], h, self.first_recurrent)
        weight, bias = self.upper[k - 1]
        return torch.addmm(bias, torch.cat([x, h], dim=1), weight)

    def _lstm_step(self, idx: torch.Tensor, layers: Layers) -> tuple[torch.Tensor, Layers]:
        H = self.hidden_size
        new_layers = []
        x = None
        for k, (h_prev, c_prev) in enumerate(layers):
            gates = self._preactivation(k, idx, x, h_prev)  # (B, 4H), gates i, f, g, o
            # One sigmoid over all four gates (g's is unused) costs less than four small calls.
            i, f, _, o = torch.sigmoid(gates).chunk(4, dim=1)
            g = torch.tanh(gates[:, 2 * H : 3 * H])
            c = torch.addcmul(f * c_prev, i, g)  # f ⊙ c + i ⊙ g
            x = o * torch.tanh(c)
            new_layers.append((x, c))
        logits = torch.addmm(self.head_bias, x, self.head_weight)
        return logits, new_layers

    def _gru_step(self, idx: torch.Tensor, layers: Layers) -> tuple[torch.Tensor, Layers]:
        H = self.hidden_size
        new_layers = []
        x = None
        for k, (h_prev,) in enumerate(layers):
            if k == 0:
                gi = self.input_table[idx]  # (B, 3H)
            else:
                weight, bias = self.upper_input[k - 1]
                gi = torch.addmm(bias, x, weight)
            weight_hh, bias_hh = self.recurrent[k]
            gh = torch.addmm(bias_hh, h_prev, weight_hh)  # (B, 3H)
            r, z = torch.sigmoid(gi[:, : 2 * H] + gh[:, : 2 * H]).chunk(2, dim=1)
            n = torch.tanh(torch.addcmul(gi[:, 2 * H :], r, gh[:, 2 * H :]))
            x = torch.addcmul(n, z, h_prev - n)  # = (1 - z) ⊙ n + z ⊙ h_prev
            new_layers.append((x,))
        logits = torch.addmm(self.head_bias, x, self.head_weight)
        return logits, new_layers

    def _rnn_step(self, idx: torch.Tensor, layers: Layers) -> tuple[torch.Tensor, Layers]:
        new_layers = []
        x = None
        for k, (h_prev,) in enumerate(layers):
            x = self.activation(self._preactivation(k, idx, x, h_prev))
            new_layers.append((x,))
        logits = torch.addmm(self.head_bias, x, self.head_weight)
        return logits, new_layers
