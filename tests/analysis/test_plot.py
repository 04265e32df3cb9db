import json
import struct
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from charrnn.analysis.plot import plot_runs, read_metrics, run_labels
from charrnn.cli.main import cli
from charrnn.errors import CharrnnError


def fake_run(root: Path, name: str, epochs: int) -> Path:
    run = root / name
    run.mkdir()
    records = []
    for epoch in range(1, epochs + 1):
        record = {"step": epoch * 10, "epoch": float(epoch), "train_loss": 3.0 / epoch,
                  "val_loss": 3.2 / epoch, "elapsed_s": 5.0 * epoch}
        if epoch in (1, epochs):
            record["epoch_checkpoint"] = f"epoch{epoch:04d}-val{3.2 / epoch:.4f}.pt"
        records.append(record)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_renders_a_valid_png(tmp_path):
    pytest.importorskip("matplotlib")
    runs = [fake_run(tmp_path, "lstm", 5), fake_run(tmp_path, "gru", 3)]
    output = tmp_path / "curves.png"
    plot_runs(runs, output)
    width, height = png_size(output)
    assert width > 600 and height > 300


def test_cli_plot_from_a_real_run(tiny_run, tmp_path):
    pytest.importorskip("matplotlib")
    output = tmp_path / "out.png"
    result = CliRunner().invoke(cli, ["plot", str(tiny_run), "--output", str(output)])
    assert result.exit_code == 0, result.output
    assert png_size(output)[0] > 0


def test_without_matplotlib_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes "import matplotlib" fail
    run = fake_run(tmp_path, "run", 2)
    result = CliRunner().invoke(cli, ["plot", str(run), "--output", str(tmp_path / "x.png")])
    assert result.exit_code == 1
    assert result.stderr.strip() == "Error: charrnn plot needs matplotlib: pip install 'charrnn-cli[plot]'"
    assert not (tmp_path / "x.png").exists()


def test_not_a_run_directory(tmp_path):
    with pytest.raises(CharrnnError, match="no metrics.jsonl"):
        read_metrics(tmp_path)


def test_runs_sharing_a_directory_name_get_distinct_labels(tmp_path):
    assert run_labels([tmp_path / "a" / "run", tmp_path / "b" / "run"]) == ["a/run", "b/run"]
    assert run_labels([tmp_path / "x", tmp_path / "y"]) == ["x", "y"]
