"""Hyperparameter sweep on tiny Shakespeare under a fixed wall-clock budget.

Each point is a real ``charrnn train --time-budget S`` run with some options
changed from the defaults, scored afterwards by ``charrnn eval-perplexity`` on
its best checkpoint (the validation split is nanoGPT's; nothing is tuned on it
beyond choosing among these points). Points cost minutes, so the sweep runs in
stages and is resumable: a point whose result is already recorded is skipped.

    python benchmarks/sweep.py --stage s100        # the 100-second points
    python benchmarks/sweep.py --stage s600        # the 600-second points
    python benchmarks/sweep.py --list              # stages and points, without running
    python benchmarks/sweep.py --report            # table and plot from what has run

Results: benchmarks/sweep/results.jsonl (one line per point), table.md and
curves.png (validation loss against wall seconds, from each run's metrics.jsonl).
Run nothing else on the machine meanwhile: these are wall-clock budgets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click
import torch

from charrnn.utils.hardware import processor_name

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "sweep"
RESULTS = RESULTS_DIR / "results.jsonl"
RUNS = HERE.parent / "runs" / "sweep"  # checkpoints; git-ignored


@dataclass(frozen=True)
class Point:
    name: str  # unique label, also the run directory's name
    budget: int  # --time-budget in seconds
    options: tuple[str, ...] = field(default_factory=tuple)  # train options that differ from the defaults


def points(budget: int, variants: dict[str, tuple[str, ...]]) -> list[Point]:
    return [Point(f"s{budget}-{name}", budget, options) for name, options in variants.items()]


# The 100-s rung with the dropout and weight average its budget plans (later options override earlier ones).
RUNG_100 = ("--hidden", "256", "--batch-size", "16", "--lr", "5e-3", "--skip-connections", "--dropout", "0",
            "--ema", "0.9963")

STAGES: dict[str, list[Point]] = {
    "s100": points(100, {
        "defaults": (),
        "lr5e-3": ("--lr", "5e-3"),
        "lr8e-3": ("--lr", "8e-3"),
        "h192-lr5e-3": ("--hidden", "192", "--lr", "5e-3"),
        "h320-lr4e-3": ("--hidden", "320", "--lr", "4e-3"),
        "gru": ("--model", "gru"),
        "t32": ("--seq-len", "32"),
        "b24-lr5e-3": ("--batch-size", "24", "--lr", "5e-3"),
        "minlr0.01": ("-o", "min_lr_ratio", "0.01"),
        "h192-lr8e-3": ("--hidden", "192", "--lr", "8e-3"),
        "h128-lr8e-3": ("--hidden", "128", "--lr", "8e-3"),
        "h192-b24-lr6e-3": ("--hidden", "192", "--batch-size", "24", "--lr", "6e-3"),
    }),
    "s600": points(600, {
        "h256-b24-lr6e-3-dropout0.1": ("--batch-size", "24", "--lr", "6e-3", "--dropout", "0.1"),
        "h384-b24-lr5e-3-dropout0.1": ("--hidden", "384", "--batch-size", "24", "--lr", "5e-3",
                                       "--dropout", "0.1"),
        "h384-b32-lr6e-3-dropout0.2": ("--hidden", "384", "--batch-size", "32", "--lr", "6e-3",
                                       "--dropout", "0.2"),
        "h512-b32-lr5e-3-dropout0.2": ("--hidden", "512", "--batch-size", "32", "--lr", "5e-3",
                                       "--dropout", "0.2"),
    }),
    # bfloat16 on a CPU that has it: the 100-second shape again, then the larger shapes that bf16's
    # throughput may make affordable; every option given, so no budget shape fills anything in.
    "s100-bf16": points(100, {
        "fp32-h192-b16-lr5e-3": ("--precision", "fp32", "--hidden", "192", "--batch-size", "16",
                                 "--lr", "5e-3", "--dropout", "0"),
        "bf16-h192-b16-lr5e-3": ("--precision", "bf16", "--hidden", "192", "--batch-size", "16",
                                 "--lr", "5e-3", "--dropout", "0"),
        "bf16-h256-b16-lr5e-3": ("--precision", "bf16", "--hidden", "256", "--batch-size", "16",
                                 "--lr", "5e-3", "--dropout", "0"),
        "bf16-h256-b32-lr6e-3": ("--precision", "bf16", "--hidden", "256", "--batch-size", "32",
                                 "--lr", "6e-3", "--dropout", "0"),
        "bf16-h320-b16-lr4e-3": ("--precision", "bf16", "--hidden", "320", "--batch-size", "16",
                                 "--lr", "4e-3", "--dropout", "0"),
        # Weight averaging: each run scores its trained and its averaged weights (a paired comparison).
        "bf16-h192-b16-lr5e-3-ema0.995": ("--precision", "bf16", "--hidden", "192", "--batch-size", "16",
                                          "--lr", "5e-3", "--dropout", "0", "--ema", "0.995"),
        "bf16-h256-b16-lr5e-3-ema0.995": ("--precision", "bf16", "--hidden", "256", "--batch-size", "16",
                                          "--lr", "5e-3", "--dropout", "0", "--ema", "0.995"),
        # Skip connections on the bf16 100-second shape.
        "bf16-h256-b16-lr5e-3-ema0.995-skip": ("--precision", "bf16", "--hidden", "256", "--batch-size", "16",
                                               "--lr", "5e-3", "--dropout", "0", "--ema", "0.995",
                                               "--skip-connections"),
        # The same pair again from another seed.
        "bf16-h256-b16-lr5e-3-ema0.995-seed2": ("--precision", "bf16", "--hidden", "256", "--batch-size",
                                                "16", "--lr", "5e-3", "--dropout", "0", "--ema", "0.995",
                                                "--seed", "2"),
        "bf16-h256-b16-lr5e-3-ema0.995-skip-seed2": ("--precision", "bf16", "--hidden", "256", "--batch-size",
                                                     "16", "--lr", "5e-3", "--dropout", "0", "--ema", "0.995",
                                                     "--skip-connections", "--seed", "2"),
    }),
    # Ten minutes with bfloat16: wider models than the 600-second shape (2×512), and the AWD-LSTM
    # regularisation (weight drop on W_hh, locked dropout) on it.
    "s600-bf16": points(600, {
        "bf16-h768-b32-lr4e-3-dropout0.25": ("--precision", "bf16", "--hidden", "768", "--batch-size", "32",
                                             "--lr", "4e-3", "--dropout", "0.25"),
        "bf16-h512-b32-lr5e-3-dropout0.2-ema0.998": ("--precision", "bf16", "--hidden", "512",
                                                     "--batch-size", "32", "--lr", "5e-3", "--dropout", "0.2",
                                                     "--ema", "0.998"),
        "bf16-h512-b32-lr5e-3-dropout0.1-ema0.998": ("--precision", "bf16", "--hidden", "512",
                                                     "--batch-size", "32", "--lr", "5e-3", "--dropout", "0.1",
                                                     "--ema", "0.998"),
    }),
    # What a time budget plans by itself, every option at its default: the budgets the targets name.
    "planned": [*points(100, {"planned": (), "planned-seed2": ("--seed", "2")}),
                *points(600, {"planned": ()}), *points(3600, {"planned": ()})],
    # The ladder's rungs at 100 s as users run them (all cores, charrnn's own thread choice): the shape
    # given, the rest planned. The planned runs of the same budget are the headline benchmark's.
    "default-threads": points(100, {
        "threads-h128": ("--hidden", "128", "--batch-size", "16", "--lr", "5e-3", "--skip-connections"),
        "threads-h192": ("--hidden", "192", "--batch-size", "16", "--lr", "5e-3", "--skip-connections"),
        "threads-h384": ("--hidden", "384", "--batch-size", "32", "--lr", "5e-3"),
        "threads-h512": ("--hidden", "512", "--batch-size", "32", "--lr", "5e-3"),
    }),
    # Beyond the ladder at 100 s: other cells, depth, segment length and learning rate on the 100-s rung
    # (2×256, batch 16, lr 5e-3, skip connections), beside it. Dropout and the weight average are given as
    # the budget plans them for that rung, so that cells the budget does not plan train with the same.
    "beyond-100": points(100, {name: (*RUNG_100, *changes) for name, changes in {
        "beyond-fixed-h256": (),
        "beyond-gru-h256": ("--model", "gru"),
        "beyond-gru-h320": ("--model", "gru", "--hidden", "320"),
        "beyond-l3-h192": ("--layers", "3", "--hidden", "192"),
        "beyond-t100": ("--seq-len", "100"),
        "beyond-lr7e-3": ("--lr", "7e-3"),
    }.items()}),
    # The batch and learning rate of the 100-s rung, and skip connections on the next rung, beside the
    # rung itself run again in the same sitting (the machine's speed drifts from one day to the next).
    "beyond-100-batch": points(100, {name: (*RUNG_100, *changes) for name, changes in {
        "batch-rung-again": (),
        "batch-b24-lr5e-3": ("--batch-size", "24"),
        "batch-b24-lr6e-3": ("--batch-size", "24", "--lr", "6e-3"),
        "batch-b12-lr4e-3": ("--batch-size", "12", "--lr", "4e-3"),
        "batch-lr4e-3": ("--lr", "4e-3"),
        "batch-h384-b32-skip": ("--hidden", "384", "--batch-size", "32"),
        "batch-b32-lr6e-3": ("--batch-size", "32", "--lr", "6e-3"),
        "batch-b32-lr7e-3": ("--batch-size", "32", "--lr", "7e-3"),
    }.items()}),
    # The most promising of those beside the rung over three seeds, run alternately in one sitting, each
    # with the dropout and weight average its budget plans (as the headline benchmark's fixed shape is).
    "batch-confirm": points(100, {f"confirm-{name}-seed{seed}": (*shape, "--seed", str(seed))
                                  for seed in (1, 2, 3) for name, shape in {
                                      "rung": ("--hidden", "256", "--batch-size", "16", "--lr", "5e-3",
                                               "--skip-connections"),
                                      "b24-lr6e-3": ("--hidden", "256", "--batch-size", "24", "--lr", "6e-3",
                                                     "--skip-connections"),
                                  }.items()}),
    # An hour: the AWD-LSTM regularisation and weight averaging on a wider model, every option given.
    "s3600-bf16": points(3600, {
        "h768-b32-lr4e-3-dropout0.3-locked-wdrop0.3-ema0.999": (
            "--hidden", "768", "--batch-size", "32", "--lr", "4e-3", "--dropout", "0.3",
            "-o", "locked_dropout", "true", "--weight-drop", "0.3", "--ema", "0.999"),
    }),
}


def recorded() -> dict[str, dict]:
    if not RESULTS.exists():
        return {}
    return {row["name"]: row for row in map(json.loads, RESULTS.read_text().splitlines())}


def charrnn(*args: str, capture: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "charrnn", *args], check=True, text=True,
                          capture_output=capture)


def run_point(point: Point, extra: tuple[str, ...]) -> dict:
    out = RUNS / point.name
    started = time.perf_counter()
    charrnn("train", "--time-budget", str(point.budget), "--out", str(out), "--overwrite", *point.options,
            *extra)
    return result_row(point, out, time.perf_counter() - started, extra)


def result_row(point: Point, out: Path, wall: float, extra: tuple[str, ...]) -> dict:
    """A finished point's record: ``out`` is its run directory, ``wall`` its seconds from start to exit.
    The shape, batch and sequence length are the run's own (a budget may have chosen them)."""
    score = json.loads(charrnn("eval-perplexity", str(out / "best.pt"), "--json", capture=True).stdout)
    best_step = torch.load(out / "best.pt", map_location="cpu", weights_only=False)["step"]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    config = json.loads((out / "config.json").read_text())
    return {**asdict(point), "extra": list(extra), "val_nats_per_char": score["nats_per_char"],
            "trained_nats_per_char": metrics[-1]["val_loss"],
            "averaged_nats_per_char": metrics[-1].get("averaged_val_loss"),
            "steps": metrics[-1]["step"], "epochs": metrics[-1]["epoch"], "train_wall_s": round(wall, 1),
            "best_step": best_step,  # best.pt's, which the score is of: earlier than the last when it overfit
            "hidden": config["model"]["hidden_size"], "layers": config["model"]["num_layers"],
            "batch_size": config["train"]["batch_size"], "seq_len": config["train"]["seq_len"],
            # Whole-split scores only: a long budget's evaluations of the split's start are not comparable.
            "curve": [(m["elapsed_s"], m["val_loss"]) for m in metrics if m.get("val_chars") is None],
            "cpu": os.cpu_count(), "processor": processor_name(), "when": time.strftime("%Y-%m-%d %H:%M"),
            # OMP_NUM_THREADS when the sweep was pinned to one thread; else charrnn chose (all free cores).
            "threads": os.environ.get("OMP_NUM_THREADS", "default")}


def report() -> None:
    rows = sorted(recorded().values(), key=lambda row: (row["budget"], row["val_nats_per_char"]))
    lines = ["| point | budget (s) | options | steps | epochs | validation nats/char | of which averaged "
             "| processor |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        options = " ".join(row["options"]) or "(defaults)"
        averaged = row.get("averaged_nats_per_char")
        # The averaged weights' score beside the trained ones' (best.pt holds the better of the two).
        averaging = "" if averaged is None else f"{averaged:.4f} (trained {row['trained_nats_per_char']:.4f})"
        lines.append(f"| {row['name']} | {row['budget']} | `{options}` | {row['steps']:,} | "
                     f"{row['epochs']:.2f} | {row['val_nats_per_char']:.4f} | {averaging} | "
                     f"{row.get('processor', 'not recorded')} |")
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "table.md").write_text("\n".join(lines) + "\n")
    click.echo("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        click.echo("matplotlib is not installed (pip install 'charrnn-cli[plot]'): no curves.png", err=True)
        return
    # A time-budgeted run scores the whole validation split only at its end, so most runs are one
    # point: where they finished, in wall seconds, and the validation loss they reached.
    figure, axes = plt.subplots(figsize=(9, 6))
    for row in rows:
        seconds, losses = zip(*row["curve"], strict=True)
        losses = (*losses[:-1], row["val_nats_per_char"])  # the run ends at best.pt's score
        axes.plot(seconds, losses, marker="o", markersize=4, linewidth=1)
        axes.annotate(row["name"].split("-", 1)[1], (seconds[-1], losses[-1]), fontsize=6,
                      xytext=(4, 0), textcoords="offset points", va="center")
    axes.set_xscale("log")
    axes.set_xlabel("wall seconds of the training loop (log scale)")
    axes.set_ylabel("validation nats/char (eval-perplexity of best.pt)")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(RESULTS_DIR / "curves.png", dpi=120)
    click.echo(f"wrote {RESULTS_DIR / 'table.md'} and {RESULTS_DIR / 'curves.png'}")


@click.command()
@click.option("--stage", "stage_names", multiple=True, type=click.Choice(sorted(STAGES)),
              help="Run these stages' points that have no result yet.")
@click.option("--only", multiple=True, help="Run only points whose name contains this.")
@click.option("--again", is_flag=True, help="Run points again even if they have a result.")
@click.option("--list", "list_points", is_flag=True, help="List the stages and their points.")
@click.option("--report", "make_report", is_flag=True, help="Write table.md and curves.png from the results.")
@click.argument("extra", nargs=-1)
def main(stage_names: tuple[str, ...], only: tuple[str, ...], again: bool, list_points: bool,
         make_report: bool, extra: tuple[str, ...]) -> None:
    """Run sweep stages; EXTRA options (after --) go to every training run."""
    if list_points:
        done = recorded()
        for name, stage in STAGES.items():
            click.echo(f"{name}:")
            for point in stage:
                result = done.get(point.name)
                status = f"{result['val_nats_per_char']:.4f}" if result else "-"
                click.echo(f"  {point.name:32s} {' '.join(point.options) or '(defaults)':45s} {status}")
    for name in stage_names:
        for point in STAGES[name]:
            if only and not any(part in point.name for part in only):
                continue
            if point.name in recorded() and not again:
                continue
            click.echo(f"== {point.name}: {' '.join(point.options) or '(defaults)'}", err=True)
            row = run_point(point, extra)
            RESULTS_DIR.mkdir(exist_ok=True)
            with RESULTS.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            click.echo(f"== {point.name}: {row['val_nats_per_char']:.4f} nats/char", err=True)
    if make_report:
        report()


if __name__ == "__main__":
    main()
