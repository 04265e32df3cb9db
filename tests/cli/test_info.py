"""charrnn info: what a checkpoint holds, without running the model."""

from __future__ import annotations

import json

from click.testing import CliRunner
from rich.console import Console

from charrnn.cli.inspect_view import info_table
from charrnn.cli.main import cli
from charrnn.training.checkpoint import describe_checkpoint


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


def test_info_says_when_the_corpus_is_gone(small_corpus, tmp_path, make_run):
    run = make_run(small_corpus, tmp_path / "run", max_steps=2).out_dir
    small_corpus.unlink()
    facts = json.loads(CliRunner().invoke(cli, ["info", str(run), "--json"]).stdout)
    assert facts["corpus"]["status"] == "missing"


def test_info_says_when_a_score_covers_only_the_validation_splits_start_and_quotes_spaced_settings(tiny_run):
    """A checkpoint saved during a long budget's training holds scores of the split's first characters."""
    facts = describe_checkpoint(tiny_run / "best.pt")
    whole = facts["corpus"]["chars"] - facts["corpus"]["split_point"] - 1
    assert facts["best"]["chars"] == whole
    console = Console(record=True, width=300)
    console.print(info_table("best.pt", facts))
    assert "validation chars" not in console.export_text()
    facts["best"] = {**facts["best"], "chars": 40}
    facts["latest_eval"] = {**facts["latest_eval"], "chars": 40}
    console.print(info_table("best.pt", facts))
    assert console.export_text().count("on the first 40 validation chars") == 2
    facts["training"] = {**facts["training"], "sample_prime": "", "precision": "auto", "device": "a, b"}
    console = Console(width=1000, record=True)
    console.print(info_table("x", facts))
    table = console.export_text()
    assert "sample_prime ''" in table and "precision auto" in table and "device 'a, b'" in table
