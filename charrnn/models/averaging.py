"""Weight averaging: an exponential moving average (EMA) of the weights (Polyak and Juditsky 1992).

After applied optimiser step t (from 1), avg ← r·avg + (1 − r)·w with r = min(decay, (1 + t) / (10 + t)): the
warm-up forgets the random initial weights fast. The average is scored, never trained (docs/techniques.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


class WeightAverage:
    """The running average of ``model``'s weights (the same names and shapes as its state dict)."""

    def __init__(self, model: nn.Module, decay: float):
        self.decay = decay  # the rate r approaches as the warm-up ends
        self.updates = 0  # averaging steps taken (applied optimiser steps)
        live = model.state_dict()  # views of the model's own tensors, which training updates in place
        self.weights = {name: tensor.detach().clone() for name, tensor in live.items()}
        # The averages and the model's tensors in one order, for one fused update of them all.
        self._averages, self._live = list(self.weights.values()), [live[name] for name in self.weights]

    def rate(self) -> float:
        """r for the next update, the t-th: the decay, or less early in the run."""
        t = self.updates + 1
        return min(self.decay, (1 + t) / (10 + t))

    @torch.no_grad()
    def update(self) -> None:
        """Move the average towards the model's current weights (those it was made from, in place)."""
        torch._foreach_lerp_(self._averages, self._live, 1 - self.rate())
        self.updates += 1

    @contextlib.contextmanager
    def swapped_in(self, model: nn.Module) -> Iterator[nn.Module]:
        """``model`` holding the averaged weights for the ``with`` block, its own ones afterwards."""
        own = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
        model.load_state_dict(self.weights)
        try:
            yield model
        finally:
            model.load_state_dict(own)

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps to continue the average exactly."""
        return {"weights": self.weights, "updates": self.updates}

    def load_state(self, state: dict[str, Any]) -> None:
        if state.keys() != {"weights", "updates"} or state["weights"].keys() != self.weights.keys():
            raise ValueError("the weight average does not fit this model")
        for name, tensor in state["weights"].items():
            self.weights[name].copy_(tensor)
        self.updates = int(state["updates"])
