import json
import os
import shutil
import struct
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from charrnn.analysis.plot import plot_runs, read_metrics, run_labels, run_title
from charrnn.cli.main import cli
from charrnn.errors import CharrnnError


def write_run(root: Path, name: str, records: list[dict], model: dict | None = None) -> Path:
    """A run directory holding ``records`` as its metrics.jsonl, and ``model`` in its config.json."""
    run = root / name
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if model:
        (run / "config.json").write_text(json.dumps({"model": model}))
    return run


def fake_run(root: Path, name: str, epochs: int) -> Path:
    """An evaluation each epoch, an epoch checkpoint at the first and the last."""
    return write_run(root, name, [
        {"step": epoch * 10, "epoch": float(epoch), "train_loss": 3.0 / epoch, "val_loss": 3.2 / epoch,
         "elapsed_s": 5.0 * epoch, **({"epoch_checkpoint": f"epoch{epoch:04d}-val{3.2 / epoch:.4f}.pt"}
                                     if epoch in (1, epochs) else {})} for epoch in range(1, epochs + 1)])


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
def test_draws_each_runs_curves_from_its_records_into_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_rgb
    from matplotlib.image import imread

    from charrnn.analysis.plot import learning_curves

    runs = [fake_run(tmp_path, "lstm", 5), fake_run(tmp_path, "gru", 3)]
    epoch_axis, time_axis = learning_curves(runs).axes
    by_epoch = {line.get_label(): line for line in epoch_axis.get_lines()}
    by_time = {line.get_label(): line for line in time_axis.get_lines()}
    assert list(by_epoch["gru validation"].get_xdata()) == [1.0, 2.0, 3.0]
    assert list(by_epoch["gru validation"].get_ydata()) == pytest.approx([3.2, 1.6, 3.2 / 3])
    assert list(by_epoch["lstm training"].get_ydata()) == pytest.approx([3.0 / e for e in range(1, 6)])
    assert list(by_time["lstm validation"].get_xdata()) == [5.0, 10.0, 15.0, 20.0, 25.0]
    assert by_epoch["lstm validation"].get_color() != by_epoch["gru validation"].get_color()
    output = tmp_path / "curves.png"
    plot_runs(runs, output)
    width, height = png_size(output)
    pixels = imread(output)[..., :3]
    assert pixels.shape == (height, width, 3) and width > 600 and height > 300
    for line in (by_epoch["lstm validation"], by_epoch["gru validation"]):  # both runs' curves are drawn
        distance = abs(pixels - to_rgb(line.get_color())).max(axis=-1)
        assert (distance < 0.02).sum() > 100


def test_a_run_with_one_evaluation_draws_its_training_curve_from_losses_jsonl(tmp_path):
    pytest.importorskip("matplotlib")
    from charrnn.analysis.plot import learning_curves

    run = write_run(tmp_path, "budget", [{"step": 30, "epoch": 0.3, "train_loss": 2.0, "val_loss": 2.1,
                                          "elapsed_s": 12.0}])
    (run / "losses.jsonl").write_text("".join(
        json.dumps({"step": step, "epoch": step / 100, "elapsed_s": step * 0.4, "train_loss": 4 - step / 10})
        + "\n" for step in (10, 20, 30)))
    time_axis = learning_curves([run]).axes[1]
    training = {line.get_label(): line for line in time_axis.get_lines()}["budget training"]
    assert list(training.get_xdata()) == pytest.approx([4.0, 8.0, 12.0])
    assert list(training.get_ydata()) == pytest.approx([3.0, 2.0, 1.0])
    assert training.get_linestyle() == "--"  # a curve, not the lone mark of one evaluation


@pytest.mark.slow
def test_cli_plot_from_a_real_run(tiny_run, tmp_path):
    pytest.importorskip("matplotlib")
    output = tmp_path / "out.png"
    result = CliRunner().invoke(cli, ["plot", str(tiny_run), "--output", str(output)])
    assert result.exit_code == 0, result.output
    plot_runs([tiny_run], tmp_path / "library.png")  # the command draws what the library draws
    assert output.read_bytes() == (tmp_path / "library.png").read_bytes()


def test_without_matplotlib_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes "import matplotlib" fail
    run = fake_run(tmp_path, "run", 2)
    result = CliRunner().invoke(cli, ["plot", str(run), "--output", str(tmp_path / "x.png")])
    assert result.exit_code == 1
    assert result.stderr.strip() == "Error: charrnn plot needs matplotlib: pip install 'charrnn-cli[plot]'"
    assert not (tmp_path / "x.png").exists()


def test_a_title_names_the_shape_when_config_json_gives_one_and_never_waits_on_it(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model": {"num_layers": 2, "hidden_size": 64, "cell": "gru"}}))
    assert run_title(tmp_path, "run") == "run: 2×64 GRU"
    config.write_text(json.dumps({"model": {"num_layers": 2, "hidden_size": 64, "cell": "$\\x{$"}}))
    assert run_title(tmp_path, "run") == "run: 2×64 \\$\\X{\\$"  # never matplotlib's mathematics
    config.write_text(json.dumps({"model": {"num_layers": 2, "hidden_size": 64, "cell": "x" * 200_000}}))
    assert run_title(tmp_path, "run") == "run: 2×64 " + "X" * 35 + "…"  # drawing 200 kB took half a minute
    for broken in ('{"model": "lstm"}', '{"model": {}}', "[1]", "{", "\xff"):
        config.write_text(broken)
        assert run_title(tmp_path, "run") == "run"
    config.unlink()
    os.mkfifo(config)  # nothing ever writes it: reading it would wait for ever
    assert run_title(tmp_path, "run") == "run"


def test_not_a_run_directory_and_runs_sharing_a_directory_name_get_distinct_labels(tmp_path):
    with pytest.raises(CharrnnError, match="no metrics.jsonl"):
        read_metrics(tmp_path)
    assert run_labels([tmp_path / "a" / "run", tmp_path / "b" / "run"]) == ["a/run", "b/run"]
    assert run_labels([tmp_path / "x", tmp_path / "y"]) == ["x", "y"]


def test_a_run_named_with_dollars_or_bytes_that_are_not_utf8_is_drawn_as_named(tmp_path):
    pytest.importorskip("matplotlib")
    odd = [tmp_path / "a$\\foo{$b", tmp_path / "x$^$", tmp_path / os.fsdecode(b"c\xffd")]
    for run in odd:
        shutil.copytree(exercise_like_run(tmp_path), run)
        shutil.rmtree(tmp_path / "epochs")
    assert run_labels(odd) == ["a\\$\\foo{\\$b", "x\\$^\\$", "c\\xffd"]
    plot_runs(odd, tmp_path / "odd.png")
    assert (tmp_path / "odd.png").stat().st_size > 0


def exercise_like_run(root: Path) -> Path:
    """Evaluations at every epoch to 20, then every 10 to 500; epoch checkpoints at 5, 10, 20, 50 and 500."""
    records = []
    for epoch in [*range(1, 21), *range(30, 501, 10)]:
        val = 1.6 + 0.3 / epoch + 0.0003 * epoch
        records.append({"step": epoch * 100, "epoch": float(epoch), "train_loss": 1.5 / epoch ** 0.1,
                        "val_loss": val, "elapsed_s": 14.0 * epoch})
        if epoch in (5, 10, 20, 50, 500):
            records[-1]["epoch_checkpoint"] = f"epoch{epoch:04d}-val{val:.4f}.pt"
    return write_run(root, "epochs", records, {"num_layers": 2, "hidden_size": 128, "cell": "lstm"})


def test_an_exercise_run_reads_at_a_glance_and_a_short_one_keeps_a_linear_epoch_axis(tmp_path):
    pytest.importorskip("matplotlib")
    from charrnn.analysis.plot import learning_curves, text_box

    figure = learning_curves([exercise_like_run(tmp_path)])
    epoch_axis = figure.axes[0]
    assert epoch_axis.get_xscale() == "log"  # 1 to 500 epochs: more than two decades
    assert figure._suptitle.get_text() == "epochs: 2×128 LSTM"
    renderer = figure.canvas.get_renderer()
    for axis in figure.axes:
        boxes = [text_box(text, renderer) for text in axis.texts]
        assert len(boxes) == 5
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    legend = [text.get_text() for text in epoch_axis.get_legend().get_texts()]
    # These records come with no best.pt to ring, so the legend does not name one.
    assert "epoch checkpoint (--save-epochs)" in legend and "best.pt (lowest validation loss)" not in legend
    figure = learning_curves([fake_run(tmp_path, "lstm", 5)])
    assert figure.axes[0].get_xscale() == "linear" and figure._suptitle.get_text() == "lstm"
    # A run of one evaluation: its training loss is a marker (a one-point line draws nothing), and the
    # legend names no epoch checkpoint or best.pt that is not on the figure.
    run = write_run(tmp_path, "short", [{"step": 3, "epoch": 0.5, "train_loss": 3.1, "val_loss": 3.3,
                                          "elapsed_s": 1.0}])
    epoch_axis = learning_curves([run]).axes[0]
    legend = [text.get_text() for text in epoch_axis.get_legend().get_texts()]
    assert legend == ["short validation", "short training"]
    training = next(line for line in epoch_axis.get_lines() if line.get_label() == "short training")
    assert training.get_marker() not in ("None", "", None)


def test_the_exercise_figure_redraws_from_the_kept_records(tmp_path):
    """docs/exercise-curves.png comes from benchmarks/exercise, whose records stay readable."""
    pytest.importorskip("matplotlib")
    records = Path(__file__).resolve().parents[2] / "benchmarks" / "exercise"
    metrics = read_metrics(records)
    assert len(metrics) == 174 and metrics[-1].epoch == 500
    assert {r.epoch_checkpoint for r in metrics if r.epoch_checkpoint} == {
        "epoch0001-val1.9507.pt", "epoch0005-val1.6181.pt", "epoch0010-val1.5633.pt",
        "epoch0020-val1.5612.pt", "epoch0050-val1.6203.pt", "epoch0100-val1.6761.pt",
        "epoch0200-val1.7270.pt", "epoch0500-val1.7500.pt"}
    output = tmp_path / "exercise-curves.png"
    plot_runs([records], output)
    assert png_size(output) == png_size(records.parents[1] / "docs" / "exercise-curves.png")


def test_subset_scores_are_a_series_apart_and_best_pt_is_ringed_where_it_was_saved(tmp_path):
    """A budget's run: two scores on the split's (easier) start, then the end's on all of it, as best.pt's."""
    pytest.importorskip("matplotlib")
    import torch

    from charrnn.analysis.plot import best_point, learning_curves

    run = write_run(tmp_path, "run", [
        {"step": 10, "epoch": 0.5, "train_loss": 2.0, "val_loss": 1.4, "elapsed_s": 10.0, "val_chars": 15000},
        {"step": 20, "epoch": 1.0, "train_loss": 1.8, "val_loss": 1.36, "elapsed_s": 20.0,
         "val_chars": 15000},
        {"step": 30, "epoch": 1.5, "train_loss": 1.7, "val_loss": 1.47, "averaged_val_loss": 1.46,
         "elapsed_s": 30.0}])
    assert best_point(run, read_metrics(run), [0.5, 1.0, 1.5]) is None  # no best.pt: no ring
    torch.save({"step": 30, "best": {"nats_per_char": 1.46}}, run / "best.pt")
    assert best_point(run, read_metrics(run), [0.5, 1.0, 1.5]) == (1.5, 1.46)
    lines = {line.get_label(): line for line in learning_curves([run]).axes[0].get_lines()}
    assert list(lines["run validation"].get_ydata()) == [1.47]
    assert list(lines["run validation, first 15,000 chars (another measure)"].get_ydata()) == [1.40, 1.36]
