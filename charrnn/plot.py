"""Learning curves from runs' ``metrics.jsonl``: loss against epoch and against wall time.

matplotlib is an optional extra (``pip install 'charrnn-cli[plot]'``); it is imported
only when a plot is drawn, so the rest of charrnn never needs it.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

from charrnn.errors import CharrnnError
from charrnn.files import atomic_write, reason

INSTALL_HINT = "charrnn plot needs matplotlib: pip install 'charrnn-cli[plot]'"


PLOTTED_KEYS = ("epoch", "elapsed_s", "val_loss")  # what every evaluation record must hold


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The evaluation records of one run, oldest first; a malformed line is an error naming it."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise CharrnnError(f"{run_dir} is not a run directory (no metrics.jsonl)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CharrnnError(f"{path} is not UTF-8 text (invalid byte at offset {exc.start})") from None
    except OSError as exc:
        raise CharrnnError(f"cannot read {path}: {reason(exc)}") from None
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise CharrnnError(f"{path} line {number} is not JSON") from None
        if not isinstance(record, dict):
            raise CharrnnError(f"{path} line {number} is not an evaluation record (a JSON object)")
        for key in (*PLOTTED_KEYS, "train_loss"):
            value = record.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise CharrnnError(f"{path} line {number}: {key} is {value!r}, not a number")
            if value is None and key in ("epoch", "elapsed_s"):  # a non-finite loss is logged as null
                raise CharrnnError(f"{path} line {number} lacks {key}")
        if "val_loss" not in record:
            raise CharrnnError(f"{path} line {number} lacks val_loss")
        records.append(record)
    if not records:
        raise CharrnnError(f"{path} has no evaluations yet; plot it after the run's first evaluation")
    return records


def run_labels(run_dirs: list[Path]) -> list[str]:
    """The shortest trailing parts of each path that tell the runs apart (``a/run``, ``b/run``)."""
    parts = [Path(run_dir).resolve().parts for run_dir in run_dirs]
    for depth in range(1, max(len(p) for p in parts) + 1):
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [str(run_dir) for run_dir in run_dirs]


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise CharrnnError(INSTALL_HINT) from None
    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


def plot_runs(run_dirs: list[Path], output: Path) -> None:
    """Draw training and validation loss against epoch and against wall time, one colour per run.

    Epoch checkpoints (``--save-epochs``) are marked with a star and their epoch.
    The image format follows ``output``'s suffix (png, svg, pdf, ...).
    """
    runs = [(Path(run_dir), read_metrics(run_dir)) for run_dir in run_dirs]
    names = run_labels([run_dir for run_dir, _ in runs])
    plt = _pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for axis, x_key, x_label in ((axes[0], "epoch", "epoch"), (axes[1], "elapsed_s", "wall time (s)")):
        for index, ((_, records), name) in enumerate(zip(runs, names, strict=True)):
            colour = f"C{index % 10}"
            x = [r[x_key] for r in records]
            val = [math.nan if r["val_loss"] is None else r["val_loss"] for r in records]
            axis.plot(x, val, "-o", color=colour, markersize=3,
                      label=f"{name} validation")
            train_points = [(xi, r["train_loss"]) for xi, r in zip(x, records, strict=True)
                            if r.get("train_loss") is not None]
            if train_points:
                axis.plot(*zip(*train_points, strict=True), "--", color=colour, alpha=0.6,
                          label=f"{name} training")
            for xi, record in zip(x, records, strict=True):
                if record.get("epoch_checkpoint") and record["val_loss"] is not None:
                    axis.plot(xi, record["val_loss"], "*", color=colour, markersize=12)
                    axis.annotate(f"epoch {round(record['epoch'])}", (xi, record["val_loss"]),
                                  textcoords="offset points", xytext=(4, 6), fontsize=8)
        axis.set_xlabel(x_label)
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("loss (nats/char)")
    figure.suptitle(f"Learning curves: {', '.join(names)}")
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    buffer = io.BytesIO()
    suffix = Path(output).suffix.lstrip(".").lower() or "png"
    try:
        figure.savefig(buffer, format=suffix, dpi=120)
    except ValueError:
        raise CharrnnError(f"cannot write a {suffix!r} image; use .png, .svg or .pdf") from None
    finally:
        plt.close(figure)
    atomic_write(Path(output), lambda handle: handle.write(buffer.getvalue()))
