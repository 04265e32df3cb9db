"""Learning curves for a scaling rule: validation loss against characters seen, per model shape.

A time budget's best shape depends on two things: how fast this machine trains
each shape (measured at the start of a run) and how the validation loss of each
shape falls with the characters it has seen. The second does not depend on the
machine, so these curves can be recorded on any processor, even on one core
shared with other work: only the chars/s column depends on the machine, and
the rule never reads it from here.

Each point is a real ``charrnn train --max-steps N --eval-every E`` run on tiny
Shakespeare; its ``metrics.jsonl`` becomes one line of
``benchmarks/scaling/curves.jsonl``. Points already recorded are skipped, so
the script can be stopped and started again.

    python benchmarks/scaling.py --list
    taskset -c 1 env OMP_NUM_THREADS=1 python benchmarks/scaling.py   # one core, in the background
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click

from charrnn.utils.hardware import processor_name

HERE = Path(__file__).resolve().parent
CURVES = HERE / "scaling" / "curves.jsonl"
RUNS = HERE.parent / "runs" / "scaling"  # checkpoints; git-ignored
SEQ_LEN = 50


@dataclass(frozen=True)
class Point:
    hidden: int  # units per LSTM layer
    layers: int  # stacked LSTM layers
    dropout: float  # between layers and before the output layer
    batch: int  # parallel BPTT streams
    learning_rate: float  # peak Adam learning rate
    million_chars: float  # characters to train on, in millions (sets --max-steps)
    evals: int = 16  # validation passes along the way

    @property
    def name(self) -> str:
        return f"h{self.hidden}x{self.layers}-d{self.dropout:g}-b{self.batch}-lr{self.learning_rate:g}-" \
               f"{self.million_chars:g}M"

    def steps(self) -> int:
        return round(self.million_chars * 1e6 / (self.batch * SEQ_LEN))

    def options(self) -> list[str]:
        return ["--hidden", str(self.hidden), "--layers", str(self.layers), "--dropout", str(self.dropout),
                "--batch-size", str(self.batch), "--lr", str(self.learning_rate), "--seq-len", str(SEQ_LEN),
                "--precision", "bf16", "--max-steps", str(self.steps()),
                "--eval-every", str(max(1, self.steps() // self.evals)), "--quiet"]


POINTS = [
    Point(256, 2, 0.0, 16, 5e-3, 6),
    Point(384, 2, 0.1, 32, 5e-3, 12),
    Point(512, 2, 0.2, 32, 5e-3, 20),
    Point(768, 2, 0.3, 32, 4e-3, 20),
    Point(512, 3, 0.25, 32, 4e-3, 20),
    Point(1024, 2, 0.4, 32, 3e-3, 20),
]


def recorded() -> set[str]:
    if not CURVES.exists():
        return set()
    return {json.loads(line)["name"] for line in CURVES.read_text().splitlines() if line.strip()}


def run_point(point: Point) -> dict:
    out = RUNS / point.name
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "charrnn", "train", *point.options(), "--out", str(out),
                    "--overwrite"], check=True)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    chars_per_step = point.batch * SEQ_LEN
    return {
        "name": point.name, "hidden": point.hidden, "layers": point.layers, "dropout": point.dropout,
        "batch": point.batch, "learning_rate": point.learning_rate, "seq_len": SEQ_LEN,
        "curve": [[row["step"] * chars_per_step, row["val_loss"]] for row in rows if "val_loss" in row],
        "chars_per_s": [row["chars_per_s"] for row in rows if "chars_per_s" in row][-1:],
        "wall_s": round(time.perf_counter() - started, 1), "processor": processor_name(),
        "threads": os.environ.get("OMP_NUM_THREADS", "all"), "when": time.strftime("%Y-%m-%d %H:%M"),
    }


@click.command()
@click.option("--list", "list_only", is_flag=True, help="Show the points and which are recorded.")
def main(list_only: bool) -> None:
    done = recorded()
    for point in POINTS:
        if list_only or point.name in done:
            click.echo(f"{'done ' if point.name in done else 'to do'}  {point.name}  ({point.steps()} steps)")
            continue
        click.echo(f"running {point.name}", err=True)
        record = run_point(point)
        CURVES.parent.mkdir(exist_ok=True)
        with CURVES.open("a") as file:
            file.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
