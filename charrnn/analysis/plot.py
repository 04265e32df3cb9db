"""Learning curves from runs' ``metrics.jsonl``: loss against epoch and against wall time.

matplotlib is an optional extra (``pip install 'charrnn-cli[plot]'``); it is imported
only when a plot is drawn, so the rest of charrnn never needs it.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

from charrnn.errors import CharrnnError
from charrnn.training.rundir import read_metrics
from charrnn.utils.files import atomic_write

INSTALL_HINT = "charrnn plot needs matplotlib: pip install 'charrnn-cli[plot]'"


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
            x = [getattr(r, x_key) for r in records]
            val = [math.nan if r.val_loss is None else r.val_loss for r in records]
            axis.plot(x, val, "-o", color=colour, markersize=3,
                      label=f"{name} validation")
            train_points = [(xi, r.train_loss) for xi, r in zip(x, records, strict=True)
                            if r.train_loss is not None]
            if train_points:
                axis.plot(*zip(*train_points, strict=True), "--", color=colour, alpha=0.6,
                          label=f"{name} training")
            for xi, record in zip(x, records, strict=True):
                if record.epoch_checkpoint and record.val_loss is not None:
                    axis.plot(xi, record.val_loss, "*", color=colour, markersize=12)
                    axis.annotate(f"epoch {round(record.epoch)}", (xi, record.val_loss),
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
