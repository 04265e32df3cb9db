"""charrnn info: what a checkpoint holds, without running the model."""

from __future__ import annotations

import json
import shutil

from click.testing import CliRunner
from rich.console import Console

from charrnn.cli.main import cli


def test_info_describes_a_checkpoint_and_a_run_directory(tiny_run):
    table = CliRunner().invoke(cli, ["info", str(tiny_run / "best.pt")])
    assert table.exit_code == 0, table.output
    for fragment in ("2×32 LSTM", "parameters", "vocabulary", "present, unchanged", "resumable", "yes",
                     "format version", "latest validation", "batch_size 4", "validation (the last 10%)"):
        assert fragment in table.stdout, fragment
    as_json = CliRunner().invoke(cli, ["info", str(tiny_run), "--json"])
    facts = json.loads(as_json.stdout)
    assert facts["checkpoint"].endswith("best.pt") and "using" in as_json.stderr
    assert facts["model"]["hidden_size"] == 32 and facts["vocab_size"] == len(facts["vocab"])
    assert facts["corpus"]["status"] == "present, unchanged" and facts["format_version"] == 1
    assert facts["parameters"] > 0 and facts["step"] > 0


def test_info_says_when_the_corpus_is_gone(tiny_run, tmp_path):
    corpus = tmp_path / "small.txt"
    shutil.copy(tiny_run.parent / "small.txt", corpus)
    run = tmp_path / "run"
    trained = CliRunner().invoke(cli, ["train", str(corpus), "--layers", "1", "--hidden", "8", "--embed", "4",
                                       "--batch-size", "4", "--seq-len", "16", "--max-steps", "2",
                                       "--out", str(run)])
    assert trained.exit_code == 0, trained.output
    corpus.unlink()
    facts = json.loads(CliRunner().invoke(cli, ["info", str(run), "--json"]).stdout)
    assert facts["corpus"]["status"] == "missing"


def test_info_says_when_a_score_covers_only_the_validation_splits_start(tiny_run):
    """A checkpoint saved during a long budget's training holds scores of the split's first characters."""
    from rich.console import Console

    from charrnn.cli.inspect_view import info_table
    from charrnn.training.checkpoint import describe_checkpoint, load_checkpoint

    facts = describe_checkpoint(load_checkpoint(tiny_run / "best.pt"), tiny_run / "best.pt")
    whole = facts["corpus"]["chars"] - facts["corpus"]["split_point"] - 1
    assert facts["best"]["chars"] == whole
    console = Console(record=True, width=300)
    console.print(info_table("best.pt", facts))
    assert "validation chars" not in console.export_text()
    facts["best"] = {**facts["best"], "chars": 40}
    facts["latest_eval"] = {**facts["latest_eval"], "chars": 40}
    console.print(info_table("best.pt", facts))
    assert console.export_text().count("on the first 40 validation chars") == 2


def test_a_text_setting_that_is_empty_or_spaced_is_shown_in_quotes(tiny_run):
    from charrnn.cli.inspect_view import info_table
    from charrnn.training.checkpoint import describe_checkpoint, load_checkpoint

    facts = describe_checkpoint(load_checkpoint(tiny_run / "best.pt"), tiny_run / "best.pt")
    facts["training"] = {**facts["training"], "sample_prime": "", "precision": "auto", "device": "a, b"}
    console = Console(width=1000, record=True)
    console.print(info_table("x", facts))
    table = console.export_text()
    assert "sample_prime ''" in table and "precision auto" in table and "device 'a, b'" in table
