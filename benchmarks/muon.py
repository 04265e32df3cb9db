"""Muon against AdamW on a recurrent model's matrices (not part of CI).

Two measurements, each printed as a table with ratios against AdamW measured in the same run:

- ``steps``: the time of one training step (batch 32 × 50) of 2×256, 2×512 and 2×1024 LSTMs with AdamW
  on everything, and with Muon on the recurrent matrices, orthogonalising in float32 and in bfloat16;
- ``budget``: ``charrnn train --time-budget SECONDS --hidden H`` with each optimiser (the budget picks the
  rest), its validation score and the steps it took: equal wall time, not equal steps.

Run with default threads and nothing else running. To act as an AVX2 CPU without bf16, set
``MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 CHARRNN_CPU_BF16=0``.

    python benchmarks/muon.py steps
    python benchmarks/muon.py budget --seconds 120 --hidden 256,512 [--corpus FILE]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import torch

from charrnn.config import ModelConfig, TrainConfig
from charrnn.data.corpus import CorpusInfo, StreamBatches
from charrnn.data.vocab import Vocab
from charrnn.training.loop import train_step
from charrnn.training.state import TrainingRun

WIDTHS = (256, 512, 1024)


def step_seconds(hidden: int, optimizer: str, ns_dtype: torch.dtype, steps: int = 8) -> float:
    """The median seconds of a training step of a 2×``hidden`` LSTM, float32, on random text."""
    vocab = Vocab.from_list([chr(c) for c in range(32, 97)])
    ids = torch.randint(0, len(vocab), (32 * 50 * (steps + 2) + 1,))
    config = TrainConfig(out_dir=".", batch_size=32, seq_len=50, optimizer=optimizer, precision="fp32")
    corpus = CorpusInfo(path="random", name="random", sha256="0" * 64, chars=len(ids), split_point=len(ids),
                        val_frac=0.1)
    run = TrainingRun(ModelConfig(vocab_size=len(vocab), hidden_size=hidden), config, vocab, corpus,
                      StreamBatches(ids, 32, 50))
    if optimizer == "muon":
        run.optimizer.parts[1].dtype = ns_dtype
    train_step(run, 1e-3)  # untimed: first calls allocate
    timings = []
    for _ in range(steps):
        started = time.perf_counter()
        train_step(run, 1e-3)
        timings.append(time.perf_counter() - started)
    return sorted(timings)[len(timings) // 2]


@click.group()
def main() -> None:
    """Muon against AdamW."""


@main.command()
def steps() -> None:
    """Seconds per step, and Muon's cost as a ratio of AdamW's."""
    print("| shape | AdamW s/step | Muon float32 | ratio | Muon bfloat16 | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    emulated = False  # bfloat16 that costs tens of AdamW steps is emulated: wider shapes would take minutes
    for hidden in WIDTHS:
        adam = step_seconds(hidden, "adamw", torch.float32)
        fp32 = step_seconds(hidden, "muon", torch.float32)
        bf16 = None if emulated else step_seconds(hidden, "muon", torch.bfloat16)
        emulated = bf16 is None or bf16 > 5 * adam
        bf16_cells = "not timed | |" if bf16 is None else f"{bf16:.3f} | {bf16 / adam:.2f} |"
        print(f"| 2×{hidden} | {adam:.3f} | {fp32:.3f} | {fp32 / adam:.2f} | {bf16_cells}", flush=True)


@main.command()
@click.option("--seconds", default=120.0, help="The time budget of every run.")
@click.option("--hidden", default="256,512", help="Widths to train, comma-separated.")
@click.option("--corpus", type=click.Path(exists=True, dir_okay=False), help="Default: tiny Shakespeare.")
@click.option("--seed", default=1)
def budget(seconds: float, hidden: str, corpus: str | None, seed: int) -> None:
    """Validation nats/char at equal wall time, AdamW against Muon."""
    print("| shape | AdamW: steps, nats/char | Muon: steps, nats/char | Muon − AdamW |")
    print("|---|---:|---:|---:|")
    for width in (int(part) for part in hidden.split(",")):
        scores = []
        for optimizer in ("adamw", "muon"):
            with tempfile.TemporaryDirectory() as out:
                command = [sys.executable, "-m", "charrnn", "train", *([corpus] if corpus else []),
                           "--time-budget", str(seconds), "--hidden", str(width), "--optimizer", optimizer,
                           "--seed", str(seed), "--out", str(Path(out) / "run"), "--json", "--quiet"]
                finished = subprocess.run(command, check=True, capture_output=True, text=True)
                summary = json.loads(finished.stdout)
            scores.append((summary["steps"], summary["best"]["nats_per_char"]))
        (adam_steps, adam), (muon_steps, muon) = scores
        print(f"| 2×{width} | {adam_steps:,}, {adam:.4f} | {muon_steps:,}, {muon:.4f} | {muon - adam:+.4f} |",
              flush=True)


if __name__ == "__main__":
    main()
