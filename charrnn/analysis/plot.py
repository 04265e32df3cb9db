"""Learning curves from runs' ``metrics.jsonl`` and ``losses.jsonl``: loss against epoch and wall time.

matplotlib is an optional extra (``charrnn-cli[plot]``), imported only when a plot is drawn."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from charrnn.errors import CharrnnError, shortened
from charrnn.training.rundir import read_header, read_losses, read_metrics
from charrnn.utils.files import atomic_write, read_json_object
from charrnn.utils.terminal import one_line


def run_labels(run_dirs: list[Path]) -> list[str]:
    """The shortest trailing parts of each path that tell the runs apart (``a/run``, ``b/run``)."""
    parts = [Path(run_dir).resolve().parts for run_dir in run_dirs]
    for depth in range(1, max(len(p) for p in parts) + 1):
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            break
    else:
        labels = [str(run_dir) for run_dir in run_dirs]
    return [shown_as_written(label) for label in labels]


def shown_as_written(text: str) -> str:
    """``text`` as a plot draws it: hidden characters escaped, a "$" never starting matplotlib's maths."""
    return one_line(text).replace("$", r"\$")


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise CharrnnError("charrnn plot needs matplotlib: pip install 'charrnn-cli[plot]'") from None
    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


LOG_AXIS_SPAN = 100  # a run whose evaluations span more than two decades of epochs gets a log epoch axis
# Where an epoch label may sit, in points from its star, tried in this order: right of it, stepping up
# and down, then left of it.
LABEL_OFFSETS = [(dx, dy) for dx in (5, -52) for dy in (7, 19, -15, 31, -27, 43, -39, 55, 67, 79)]
TITLE_SHAPE_MOST = 40  # a shape longer than this (only a hand-edited config.json) is cut: drawing it is slow


def run_title(run_dir: Path, name: str) -> str:
    """The run's name and model shape (from its config.json, when readable): ``epochs: 2×128 LSTM``."""
    model = (read_json_object(Path(run_dir) / "config.json") or {}).get("model")
    try:
        shape = f"{model['num_layers']}×{model['hidden_size']} {str(model['cell']).upper()}"
    except (KeyError, TypeError):
        return name
    return f"{name}: {shown_as_written(shortened(shape, TITLE_SHAPE_MOST))}"


def text_box(label: Any, renderer: Any) -> Any:
    """Where a label's text is drawn (an annotation's own extent also spans its connecting line)."""
    from matplotlib.text import Text

    return Text.get_window_extent(label, renderer)


def plot_runs(run_dirs: list[Path], output: Path) -> None:
    """Draw :func:`learning_curves` into ``output``; its suffix picks the format (png, svg, pdf, ...)."""
    plt = _pyplot()
    figure = learning_curves(run_dirs)
    buffer = io.BytesIO()
    suffix = Path(output).suffix.lstrip(".").lower() or "png"
    try:
        figure.savefig(buffer, format=suffix, dpi=120)
    except ValueError:
        raise CharrnnError(f"cannot write a {suffix!r} image; use .png, .svg or .pdf") from None
    finally:
        plt.close(figure)
    atomic_write(Path(output), lambda handle: handle.write(buffer.getvalue()))


def learning_curves(run_dirs: list[Path]) -> Any:
    """A figure of training and validation loss against epoch and wall time, one colour per run, titled with
    the runs' shapes. Whole-split and split-start scores are separate series; best.pt is ringed at its score;
    epoch checkpoints are starred and labelled without overlap; the epoch axis is log past two decades."""
    runs = [(Path(run_dir), read_metrics(run_dir)) for run_dir in run_dirs]
    losses = {run_dir: read_losses(run_dir) for run_dir, _ in runs}  # the training curve, where logged
    names = run_labels([run_dir for run_dir, _ in runs])
    plt = _pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    epochs = [r.epoch for _, records in runs for r in records if r.epoch > 0]
    log_epochs = bool(epochs) and max(epochs) / min(epochs) > LOG_AXIS_SPAN
    labels_by_axis = []
    drawn = {"epoch checkpoint": False, "best.pt": False}  # what the legend's markers may name
    for axis, x_key, x_label in ((axes[0], "epoch", "epoch"), (axes[1], "elapsed_s", "wall time (s)")):
        labels = []
        labels_by_axis.append(labels)
        for index, ((run_dir, records), name) in enumerate(zip(runs, names, strict=True)):
            colour = f"C{index % 10}"
            x = [getattr(r, x_key) for r in records]
            scored = [(xi, r) for xi, r in zip(x, records, strict=True) if r.val_loss is not None]
            whole = [(xi, r.val_loss) for xi, r in scored if r.val_chars is None]
            subset = [(xi, r.val_loss) for xi, r in scored if r.val_chars is not None]
            if whole:
                axis.plot(*zip(*whole, strict=True), "-o", color=colour, markersize=3,
                          label=f"{name} validation")
            if subset:
                chars = min(r.val_chars for r in records if r.val_chars is not None)
                axis.plot(*zip(*subset, strict=True), ":^", color=colour, markersize=3, alpha=0.8,
                          label=f"{name} validation, first {chars:,} chars (another measure)")
            training = ([(getattr(row, x_key), row.train_loss) for row in losses[run_dir]]
                        or [(xi, r.train_loss) for xi, r in zip(x, records, strict=True)
                            if r.train_loss is not None])
            if training:  # one point has no line to draw: it is marked instead
                axis.plot(*zip(*training, strict=True), "--" if len(training) > 1 else "x",
                          color=colour, alpha=0.6, label=f"{name} training")
            for xi, record in scored:
                if record.epoch_checkpoint:
                    drawn["epoch checkpoint"] = True
                    axis.plot(xi, record.val_loss, "*", color=colour, markersize=12)
                    labels.append(axis.annotate(
                        f"epoch {round(record.epoch)}", (xi, record.val_loss), textcoords="offset points",
                        xytext=LABEL_OFFSETS[0], fontsize=8,
                        arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.6}))
            if (best := best_point(run_dir, records, x)) is not None:
                drawn["best.pt"] = True
                axis.plot(*best, "o", markersize=11, markerfacecolor="none", markeredgecolor=colour,
                          markeredgewidth=1.6)
        if x_key == "epoch" and log_epochs:
            axis.set_xscale("log")
        axis.set_xlabel(x_label + (" (log scale)" if x_key == "epoch" and log_epochs else ""))
        axis.grid(alpha=0.3, which="both" if x_key == "epoch" and log_epochs else "major")
    axes[0].set_ylabel("loss (nats/char)")
    titles = [run_title(run_dir, name) for (run_dir, _), name in zip(runs, names, strict=True)]
    figure.suptitle(", ".join(titles))
    handles, texts = axes[0].get_legend_handles_labels()
    if drawn["epoch checkpoint"]:
        handles.append(plt.Line2D([], [], linestyle="none", marker="*", markersize=10, color="0.3"))
        texts.append("epoch checkpoint (--save-epochs)")
    if drawn["best.pt"]:
        handles.append(plt.Line2D([], [], linestyle="none", marker="o", markersize=9, markerfacecolor="none",
                                  markeredgecolor="0.3"))
        texts.append("best.pt (lowest validation loss)")
    axes[0].legend(handles, texts, fontsize=8)
    figure.tight_layout()
    figure.canvas.draw()  # the layout settles where each label would land
    renderer = figure.canvas.get_renderer()
    for labels in labels_by_axis:  # each to the first offset where it overlaps no label placed before it
        placed: list[Any] = []
        for label in labels:
            for offset in LABEL_OFFSETS:
                label.set_position(offset)
                box = text_box(label, renderer).expanded(1.05, 1.15)
                if not any(box.overlaps(other) for other in placed):
                    break
            placed.append(text_box(label, renderer))
    return figure


def best_point(run_dir: Path, records: list[Any], x: list[float]) -> tuple[float, float] | None:
    """Where best.pt sits on a curve: the evaluation at its step, with the score it records (for whichever
    of the trained and averaged weights it holds); None when it cannot be read or no evaluation is there."""
    header = read_header(Path(run_dir) / "best.pt")
    if header is None or not isinstance(header.get("step"), int):
        return None
    at_step = [(xi, r) for xi, r in zip(x, records, strict=True) if r.step == header["step"]]
    if not at_step:
        return None
    xi, record = min(at_step, key=lambda pair: pair[1].val_chars is not None)  # the whole split's first
    best = header.get("best")
    score = best.get("nats_per_char") if isinstance(best, dict) else None
    if not isinstance(score, float | int) or isinstance(score, bool):
        scores = [value for value in (record.val_loss, record.averaged_val_loss) if value is not None]
        score = min(scores) if scores else None
    return None if score is None else (xi, float(score))
