"""The character-level model: embedding → stacked recurrent layers → dropout → read-out (textbook notes §1).

Gates follow PyTorch (LSTM i, f, g, o; GRU reset after W_hn h; docs/how-it-works.md). State is always a tuple
of (num_layers, B, H) tensors, (h, c) or (h,), so training, sampling and beam search treat all cells alike."""

from __future__ import annotations

import math

import torch
from torch import nn

from charrnn.config import ModelConfig
from charrnn.errors import CharrnnError, option
from charrnn.models.layernorm import LayerNormRNN
from charrnn.models.regularise import SkipStack, embedding_dropout, layerwise_recurrence, sequence_dropout

State = tuple[torch.Tensor, ...]

_RNN_CLASSES: dict[str, type[nn.RNNBase]] = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN, "esn": nn.RNN}
_VOCAB_ROWS = ("embedding.weight", "head.weight", "head.bias")  # one row per vocabulary symbol


class CharRNN(nn.Module):
    """Embedding, stacked recurrent layers, and a linear read-out to ``vocab_size`` logits."""

    def __init__(self, config: ModelConfig, initialise_weights: bool = True):
        super().__init__()
        self.config = config
        # Drawn below only if initialised: on the meta device (state_shapes) a draw costs slow torch imports.
        self.embedding = nn.Embedding(config.vocab_size, config.embed_size,
                                      _weight=torch.empty(config.vocab_size, config.embed_size))
        if initialise_weights:
            nn.init.normal_(self.embedding.weight)
        between_layers = config.dropout if config.num_layers > 1 else 0.0
        if config.layer_norm:
            self.rnn = LayerNormRNN(config.cell, config.embed_size, config.hidden_size, config.num_layers,
                                    between_layers, config.rnn_activation, config.weight_drop,
                                    config.locked_dropout)
        elif config.skip_connections:
            mode = {"lstm": "LSTM", "gru": "GRU"}.get(config.cell, f"RNN_{config.rnn_activation.upper()}")
            self.rnn = SkipStack(mode, config.embed_size, config.hidden_size, config.num_layers,
                                 between_layers)
        else:
            options = {"nonlinearity": config.rnn_activation} if config.cell in ("rnn", "esn") else {}
            self.rnn = _RNN_CLASSES[config.cell](config.embed_size, config.hidden_size,
                                                 num_layers=config.num_layers, dropout=between_layers,
                                                 batch_first=True, **options)
        # The fused multi-layer kernel cannot mask W_hh or lock the dropout between layers: such a model
        # trains one fused layer at a time, as a SkipStack always runs.
        self.layerwise_in_training = not config.layer_norm and (
            config.weight_drop > 0 or (config.locked_dropout and between_layers > 0))
        # cuDNN draws the fused kernel's masks between layers from a generator of its own, which no
        # checkpoint can save: on a GPU such a model trains a layer at a time, so that a resume is exact.
        self.layerwise_on_gpu = not config.layer_norm and not config.skip_connections and between_layers > 0
        self.head = nn.Linear(config.hidden_size * (config.num_layers if config.skip_connections else 1),
                              config.vocab_size)
        if initialise_weights:
            initialise(self)
            if not all(bool(torch.isfinite(p).all()) for p in self.parameters()):
                raise CharrnnError(f"the initial weights are not finite; lower {option('spectral_radius')}")
        if config.cell == "esn":
            # An echo-state network trains only its read-out; the reservoir stays as drawn.
            for param in [*self.embedding.parameters(), *self.rnn.parameters()]:
                param.requires_grad_(False)

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> State:
        """Zero state ``h_0`` (and the LSTM's ``c_0``): a tuple of ``(num_layers, B, H)`` tensors."""
        shape = (self.config.num_layers, batch_size, self.config.hidden_size)
        device = device if device is not None else self.head.weight.device
        return tuple(torch.zeros(shape, device=device) for _ in range(2 if self.config.cell == "lstm" else 1))

    def forward(self, idx: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        """idx: (B, T) int64 ids; state: tuple of (num_layers, B, H), or None for zeros.
        Returns logits (B, T, V) for the character after each position, and the state after the last."""
        if state is None:
            state = self.initial_state(idx.shape[0], idx.device)
        config = self.config
        x = embedding_dropout(self.embedding, idx, config.embed_dropout, self.training)  # (B, T, E)
        x = sequence_dropout(x, config.input_dropout, self.training, config.locked_dropout)
        rnn_state = state if config.cell == "lstm" else state[0]
        layerwise = self.layerwise_in_training or (self.layerwise_on_gpu and x.is_cuda)
        if config.skip_connections or (self.training and layerwise):
            out, new_state = layerwise_recurrence(self.rnn, x, rnn_state, self.training, config.weight_drop,
                                                  self.rnn.dropout, config.locked_dropout,
                                                  config.skip_connections)  # (B, T, H), or (B, T, L·H)
        else:
            out, new_state = self.rnn(x, rnn_state)  # (B, T, H)
        out = sequence_dropout(out, config.dropout, self.training, config.locked_dropout)
        return self.head(out), new_state if isinstance(new_state, tuple) else (new_state,)

    def load_pretrained(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Start from another model's weights, for fine-tuning. Shapes must match, but vocabulary tensors may
        have fewer rows (the source vocabulary a prefix of this one): added characters keep fresh rows."""
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
                    raise CharrnnError(f"the checkpoint's {name} has shape {tuple(source.shape)}, this "
                                       f"model's {tuple(target.shape)}")


def state_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Name and shape of every state-dict tensor of a model with ``config``, built on the meta device."""
    with torch.device("meta"):
        model = CharRNN(config, initialise_weights=False)
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def parameter_count(config: ModelConfig) -> int:
    """Number of parameters of a model with ``config``, computed without allocating it."""
    return sum(math.prod(shape) for shape in state_shapes(config).values())


def spectral_radius(matrix: torch.Tensor) -> float:
    """Largest absolute eigenvalue of a square matrix."""
    return float(torch.linalg.eigvals(matrix.detach().double()).abs().max())


@torch.no_grad()
def initialise(model: CharRNN) -> None:
    """Apply ``model.config.init`` and the LSTM forget-gate bias (textbook notes §2), in place.
    pytorch: module defaults; textbook: weights uniform in ±1/√fan-in; orthogonal: recurrent gate blocks;
    esn (always for --model esn): N(0, 1) blocks thinned to recurrent_density, scaled to spectral_radius.
    The forget-gate bias is the effective one: PyTorch adds b_ih and b_hh, so b_ih holds it and b_hh zero."""
    config = model.config
    scheme = "esn" if config.cell == "esn" else config.init
    H, rnn = config.hidden_size, model.rnn
    if scheme == "textbook":
        cell_weights = [param for name, param in rnn.named_parameters() if name.startswith("weight")]
        for weight in [*cell_weights, model.head.weight]:
            bound = weight.shape[1] ** -0.5
            weight.uniform_(-bound, bound)
    for k in range(config.num_layers):
        for block in getattr(rnn, f"weight_hh_l{k}").split(H, dim=0):  # its H×H matrix per gate, as views
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
