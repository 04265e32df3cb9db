"""Builders the test modules share (fixtures that use them live in conftest.py)."""

from __future__ import annotations

import torch

from charrnn.config import ModelConfig
from charrnn.model import CharRNN

CELLS = ["lstm", "gru", "rnn"]


def make_model(cell: str, layers: int = 2, seed: int = 0) -> CharRNN:
    """A small untrained model in eval mode: 11 symbols, 16 units, 6-wide embedding."""
    torch.manual_seed(seed)
    config = ModelConfig(vocab_size=11, cell=cell, num_layers=layers, hidden_size=16, embed_size=6)
    return CharRNN(config).eval()
