"""Learning curves at equal steps: AdamW against Muon on charrnn's CharRNN, tiny Shakespeare or the corpus
given after the setting (not part of CI).

A plain loop of its own, so that variants the product does not offer (each gate's block orthogonalised
apart, other rates and momenta) can be tried: 32 streams × 100 characters, warm-up 100 steps, cosine to
×0.1, clipping at 5, no weight decay, AdamW at 3e-3 on what Muon does not step. Scored on the first 50,000
validation characters, 10 streams from a zero state. Prints one JSON line per configuration. Loss against
steps does not depend on the machine: a one-thread run (``OMP_NUM_THREADS=1``) beside other work is fine.

    python benchmarks/muon_curves.py '{"opt": "muon", "lr": 0.04, "hidden": 256, "steps": 600}'
    python benchmarks/muon_curves.py '{"opt": "muon", "lr": 0.02, "hidden": 256, "steps": 600, "blocks": 4}'
    python benchmarks/muon_curves.py '{"opt": "adamw", "lr": 0.006, "hidden": 512, "steps": 600}'
    python benchmarks/muon_curves.py '{"opt": "adamw", "lr": 0.012, "hidden": 256, "steps": 600}' code.txt
"""

import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from charrnn.config import ModelConfig
from charrnn.models.model import CharRNN
from charrnn.training import state
from charrnn.training.state import Muon

CORPUS = "../shared/data/tinyshakespeare/input.txt"


class BlockMuon(Muon):
    """charrnn's Muon without weight decay, with each of ``blocks`` row blocks orthogonalised apart (4: an
    LSTM's gates): its step runs with the product's orthogonalisation swapped for a block-wise one."""

    def __init__(self, params: list[torch.Tensor], lr: float, momentum: float, blocks: int):
        super().__init__(params, lr, 0.0, torch.float32, momentum)
        self.blocks = blocks

    def step(self) -> None:
        whole = state.orthogonalised

        def by_blocks(update: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
            parts = update.chunk(self.blocks, 0)
            # Muon scales a step by the whole matrix's shape; here each block's own shape scales it.
            shape = max(1.0, parts[0].size(0) / update.size(1)) / max(1.0, update.size(0) / update.size(1))
            return torch.cat([whole(part, dtype) for part in parts]) * shape**0.5

        state.orthogonalised = by_blocks
        try:
            super().step()
        finally:
            state.orthogonalised = whole


def main() -> None:
    setting = json.loads(sys.argv[1])
    torch.manual_seed(setting.get("seed", 1))
    text = Path(sys.argv[2] if len(sys.argv) > 2 else CORPUS).read_text()
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text])
    split = int(len(ids) * 0.9)
    train, val = ids[:split], ids[split:]
    batch, length, steps = 32, 100, setting["steps"]
    model = CharRNN(ModelConfig(vocab_size=len(chars), hidden_size=setting["hidden"], num_layers=2))
    cells = [p for p in model.rnn.parameters() if p.ndim == 2]
    if setting["opt"] == "adamw":
        optimizers = [torch.optim.AdamW(model.parameters(), lr=setting["lr"], weight_decay=0.0)]
    else:
        rest = [p for p in model.parameters() if all(p is not cell for cell in cells)]
        muon = BlockMuon(cells, setting["lr"], setting.get("momentum", 0.95), setting.get("blocks", 1))
        optimizers = [torch.optim.AdamW(rest, lr=3e-3, weight_decay=0.0), muon]
    peaks = [group["lr"] for optimizer in optimizers for group in optimizer.param_groups]
    per_stream = len(train) // batch
    streams = train[: per_stream * batch].view(batch, per_stream)
    state, position, losses = None, 0, []
    for step in range(steps):
        if position + length + 1 > per_stream:
            position, state = 0, None
        inputs = streams[:, position:position + length]
        targets = streams[:, position + 1:position + length + 1]
        position += length
        factor = min(1, (step + 1) / 100) * (0.1 + 0.45 * (1 + math.cos(math.pi * step / steps)))
        groups = [group for optimizer in optimizers for group in optimizer.param_groups]
        for group, peak in zip(groups, peaks, strict=True):
            group["lr"] = peak * factor
        logits, state = model(inputs, state)
        state = tuple(s.detach() for s in state)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        for optimizer in optimizers:
            optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        for optimizer in optimizers:
            optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        held = val[:50001]
        width = (len(held) - 1) // 10
        logits, _ = model(held[: width * 10].view(10, width))
        targets = held[1: width * 10 + 1].view(10, width)
        score = F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()
    third = steps // 3
    print(json.dumps({**setting, "train_middle_third": sum(losses[third:2 * third]) / third,
                      "train_last_third": sum(losses[2 * third:]) / (steps - 2 * third),
                      "val": round(score, 4)}))


if __name__ == "__main__":
    main()
