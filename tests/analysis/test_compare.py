import dataclasses
import io
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from rich.console import Console

import charrnn
from charrnn.analysis.compare import CheckpointReport, CompareSettings, compare_checkpoints, to_markdown
from charrnn.cli.evaluate_view import comparison_renderable
from charrnn.config import SampleConfig
from charrnn.errors import CharrnnError
from charrnn.generation.sample import collect_samples, generate
from charrnn.models.evaluate import evaluate
from charrnn.training.checkpoint import load_model, save_checkpoint
from charrnn.utils.terminal import checkpoint_labels

from helpers import plan_run, run_cli


@pytest.fixture(scope="module")
def other_run(tmp_path_factory) -> Path:
    """A GRU of another size, trained on a corpus with a different vocabulary (no 'R', adds 'Ω')."""
    root = tmp_path_factory.mktemp("other")
    corpus = root / "other.txt"
    corpus.write_text("Ωmega speaks: the quick brown fox.\n" * 80, encoding="utf-8")
    plan_run(corpus, root / "run", cell="gru", hidden_size=16, embed_size=4, learning_rate=3e-3,
             max_steps=10).run()
    return root / "run"


def settings(**overrides) -> CompareSettings:
    if "beam_width" in overrides:
        sample = SampleConfig(length=overrides.pop("length", 40), beam_width=overrides.pop("beam_width"))
    else:
        sample = SampleConfig(length=overrides.pop("length", 40), seed=3, temperature=0.9)
    return CompareSettings(**{"prime": "ROMEO:", "sample": sample, **overrides})


def test_reports_match_eval_and_sample_in_many_streams_or_one(tiny_run):
    paths = [tiny_run / "best.pt", tiny_run / "last.pt"]
    reports, note = compare_checkpoints(paths, settings())
    assert note is None
    loaded = load_model(paths[0])
    text = Path(loaded.payload["corpus"]["path"]).read_text(encoding="utf-8")
    ids = loaded.vocab.encode(text[loaded.payload["corpus"]["split_point"]:])
    assert reports[0].nats_per_char == pytest.approx(evaluate(loaded.network, ids).nats_per_char)
    direct = collect_samples(generate(loaded.network, loaded.vocab, settings().sample, "ROMEO:"), "ROMEO:", 1)
    assert reports[0].sample == direct[0]
    assert reports[0].step == loaded.payload["step"] and reports[0].run == "run" and reports[0].error is None
    reports, _ = compare_checkpoints(paths[:1], settings(single_stream=True))
    exact = evaluate(loaded.network, ids, single_stream=True)
    assert reports[0].nats_per_char == pytest.approx(exact.nats_per_char)
    result = run_cli("compare", tiny_run / "best.pt", "--single-stream", "--json", "--length", "5")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["nats_per_char"] == pytest.approx(reports[0].nats_per_char)
    reports, _ = compare_checkpoints(paths[:1], settings(beam_width=3))  # beam decoding reports its log-prob
    best = charrnn.sample(tiny_run / "best.pt", "ROMEO:", 40, beam_width=3)
    assert reports[0].sample == best.text and reports[0].log_prob == best.log_probs[0]


def test_different_vocabularies_are_noted_and_each_still_sampled_and_scored_where_it_can(tiny_run, other_run):
    reports, note = compare_checkpoints([tiny_run / "best.pt", other_run / "best.pt"], settings())
    assert "different vocabularies" in note
    assert reports[0].sample.startswith("ROMEO:")
    # The prime's 'R' is not in the other vocabulary: its entry says so and has no sample.
    assert reports[1].sample is None and "'R' (U+0052) ×1" in reports[1].error
    assert reports[1].nats_per_char is not None  # still scored on its own validation split
    greek = compare_checkpoints([tiny_run / "best.pt", other_run / "best.pt"], settings(prime=""))[0]
    assert all(r.sample is not None for r in greek)
    text = "ROMEO: Café\n" * 5  # a shared text with characters the other never saw
    reports, _ = compare_checkpoints([tiny_run / "best.pt", other_run / "best.pt"],
                                     settings(prime="", text=text, text_name="shared.txt"))
    assert reports[0].scored_on == "shared.txt" and reports[0].chars == len(text) - 1
    assert reports[1].nats_per_char is None and "not scored" in reports[1].error


def test_a_stop_string_one_checkpoint_cannot_write_lets_it_run_to_its_length(tiny_run, other_run):
    """'Ω' is in the other's vocabulary only: the tiny model samples to its length as if no stop was given."""
    stopping = SampleConfig(length=40, seed=3, temperature=0.9, stop_at="Ω")
    reports, _ = compare_checkpoints([tiny_run / "best.pt", other_run / "best.pt"],
                                     settings(prime="", sample=stopping))
    unstopped = charrnn.sample(tiny_run / "best.pt", "", 40, seed=3, temperature=0.9).text
    assert [report.error for report in reports] == [None, None]
    assert reports[0].sample == unstopped


def test_markdown_table_and_samples_and_terminal_columns_or_panels_write_an_epoch_alike(tiny_run, other_run):
    reports, note = compare_checkpoints([tiny_run / "best.pt", other_run / "best.pt"], settings(prime=""))
    document = to_markdown(reports, settings(prime=""), note)
    header = "| checkpoint | run | epoch | steps | nats/char | bits/char | perplexity | chars scored |"
    assert header in document
    assert all(f"| {report.chars:,} |" in document for report in reports)  # texts that differ say so
    wide, narrow = render(reports, 160), render(reports, 50)
    assert all(f"{report.chars:,}" in wide for report in reports)
    assert document.count("```text") == 2 and "Note: the checkpoints have different vocabularies" in document
    assert "┃" in wide and "╭─" not in wide  # one table, checkpoints as columns
    assert narrow.count("╭─") == 2  # one panel per checkpoint
    assert "run/best.pt" in wide  # same file name in two runs: labelled with the run
    reports = [dataclasses.replace(reports[0], epoch=2.711111)]  # the same epoch, in two places
    assert "| 2.71 |" in to_markdown(reports, settings(prime=""), note)
    assert "2.71 " in render(reports, 160) and "2.711" not in render(reports, 160)


def test_markdown_shows_a_runs_name_literally_and_it_and_the_page_take_a_name_not_utf8(tiny_run, tmp_path):
    odd = tmp_path / "a|b_x_*"
    shutil.copytree(tiny_run, odd)
    reports, note = compare_checkpoints([odd / "best.pt"], settings(prime=""))
    row = next(line for line in to_markdown(reports, settings(prime=""), note).splitlines()
               if line.startswith("| best.pt"))
    assert row.startswith("| best.pt | a&#124;b&#95;x&#95;&#42; |")
    assert row.count("|") == 9  # the columns of the table, none from the name
    odd = tmp_path / os.fsdecode(b"r\xffn")
    shutil.copytree(tiny_run, odd)
    reports, note = compare_checkpoints([odd / "best.pt"], settings(prime="<!--|"))
    document = to_markdown(reports, settings(prime="<!--|"), note)
    assert "| r&#92;xffn |" in document and "Prime '&lt;!--&#124;'" in document
    page = charrnn.export(odd, tmp_path / "page.html")
    assert "<title>charrnn: r\\xffn</title>" in page.path.read_text(encoding="utf-8")


def render(reports, width: int) -> str:
    console = Console(file=io.StringIO(), width=width)
    console.print(comparison_renderable(reports, width))
    return console.file.getvalue()


def test_cli_json_markdown_table_and_a_missing_checkpoint(tiny_run, other_run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run_cli("compare", tiny_run / "best.pt", other_run / "best.pt", "--length", "20", "--json",
                     "--markdown", "report.md")
    assert result.exit_code == 0, result.output
    entries = json.loads(result.stdout)
    assert [set(e) >= {"checkpoint", "epoch", "step", "nats_per_char", "bits_per_char", "perplexity",
                       "sample"} for e in entries] == [True, True]
    assert all(len(e["sample"]) == 20 for e in entries)
    assert "different vocabularies" in result.stderr
    assert Path("report.md").read_text(encoding="utf-8").startswith("# Checkpoint comparison")
    shown = run_cli("compare", tiny_run / "best.pt", "--length", "10")
    assert shown.exit_code == 0 and "nats/char" in shown.stdout
    missing = run_cli("compare", tiny_run / "best.pt", "nope.pt")
    assert missing.exit_code == 1 and missing.stderr.strip() == ("Error: checkpoint nope.pt does not exist "
        "(charrnn train writes one; shakespeare names the model that comes with charrnn)")


def test_labels_fall_back_to_full_paths_and_the_vocabulary_note_tells_checkpoints_apart(tiny_run, other_run,
                                                                                          tmp_path):
    copy_dir = tmp_path / "elsewhere" / tiny_run.name
    copy_dir.mkdir(parents=True)
    (copy_dir / "best.pt").write_bytes((tiny_run / "best.pt").read_bytes())
    reports, _ = compare_checkpoints([tiny_run / "best.pt", copy_dir / "best.pt"], settings(length=5))
    assert checkpoint_labels(reports) == [str(tiny_run / "best.pt"), str(copy_dir / "best.pt")]
    other = tmp_path / "other"  # the vocabulary note tells checkpoints apart by their labels
    shutil.copytree(other_run, other)
    reports, note = compare_checkpoints([tiny_run / "best.pt", other / "best.pt"], settings(length=5))
    assert f"{tiny_run.name}/best.pt: " in note and "other/best.pt: " in note
    from types import SimpleNamespace as Report  # a model folder is its own run: "m1", never "m1/m1"
    folders = [Report(checkpoint="a/best.pt", run="a"), Report(checkpoint="b/best.pt", run="b"),
               Report(checkpoint="m1", run="m1")]
    assert checkpoint_labels(folders) == ["a/best.pt", "b/best.pt", "m1"]


def test_a_checkpoint_whose_corpus_is_gone_shows_its_stored_score(tiny_run, tmp_path):
    payload = torch.load(tiny_run / "best.pt", weights_only=True)
    payload["corpus"]["path"] = str(tmp_path / "gone.txt")
    moved = tmp_path / "best.pt"
    save_checkpoint(moved, payload)
    reports, _ = compare_checkpoints([moved], settings(length=5))
    assert reports[0].nats_per_char == payload["best"]["nats_per_char"]  # best.pt's weights scored that
    assert "validation score stored at training time" in reports[0].error
    del payload["latest_eval"]
    payload["best"] = None
    save_checkpoint(moved, payload)
    reports, _ = compare_checkpoints([moved], settings(length=5))
    assert reports[0].nats_per_char is None and "give text_file FILE" in reports[0].error


def test_compare_takes_the_sampling_options_of_sample(tiny_run, tmp_path):
    checkpoint = str(tiny_run / "best.pt")
    prime = tmp_path / "prime.txt"
    prime.write_text("ROMEO:", encoding="utf-8")
    compared = run_cli("compare", checkpoint, "--prime-file", prime, "--top-k", "3", "--top-p", "0.9",
                       "--length", "20", "--json", "--markdown", tmp_path / "r.md")
    assert compared.exit_code == 0, compared.output
    sampled = run_cli("sample", checkpoint, "--prime", "ROMEO:", "--top-k", "3", "--top-p", "0.9", "--length",
                      "20", "--seed", "1")
    assert json.loads(compared.stdout)[0]["sample"] + "\n" == sampled.stdout
    assert "temperature 1, top-k 3, top-p 0.9, seed 1" in (tmp_path / "r.md").read_text(encoding="utf-8")
    greedy = run_cli("compare", checkpoint, "--greedy", "--length", "20", "--json", "--prime", "R")
    plain = run_cli("sample", checkpoint, "--greedy", "--length", "20", "--prime", "R")
    assert json.loads(greedy.stdout)[0]["sample"] + "\n" == plain.stdout
    refused = run_cli("compare", checkpoint, "--greedy", "--temperature", "0.5")
    assert refused.exit_code == 2 and "--greedy is deterministic" in refused.stderr


def test_a_text_a_checkpoint_cannot_score_fails_the_command_and_skip_unknown_with_it_scores_the_rest(
        tiny_run, other_run, tmp_path):
    text = tmp_path / "shared.txt"
    text.write_text("ROMEO: Café\n" * 5, encoding="utf-8")
    arguments = ["compare", tiny_run / "best.pt", other_run / "best.pt", "--text-file", text, "--length",
                 "10"]
    refused = run_cli(*arguments)
    assert refused.exit_code == 1 and "nats/char" in refused.stdout  # what could be done is still shown
    error = refused.stderr.strip().splitlines()[-1]
    assert error.startswith("Error: not everything asked could be done") and "other" in error
    as_json = run_cli(*arguments, "--json")
    assert as_json.exit_code == 1 and json.loads(as_json.stdout)[1]["nats_per_char"] is None
    assert "not in the model's vocabulary" in json.loads(as_json.stdout)[1]["error"]
    assert "drops them" in json.loads(as_json.stdout)[1]["error"]
    skipped = run_cli(*arguments, "--skip-unknown", "--json")
    assert skipped.exit_code == 0, skipped.output
    entries = json.loads(skipped.stdout)
    assert all(entry["nats_per_char"] is not None for entry in entries)
    assert entries[1]["chars"] < entries[0]["chars"]
    refused = run_cli("compare", tiny_run / "best.pt", "--skip-unknown")
    assert refused.exit_code == 2 and "--skip-unknown goes with --text" in refused.stderr
    with pytest.raises(CharrnnError, match="skip_unknown goes with text_file"):
        charrnn.compare([tiny_run / "best.pt"], skip_unknown=True)
    with pytest.raises(CharrnnError, match="skip_unknown"):
        charrnn.compare([tiny_run / "best.pt"], text_file=tiny_run / "config.json", skip_unknown="yes")


def test_markdown_names_the_reference_of_memorisation_only_when_all_share_it():
    figures = {"known_word_fraction": 0.9, "longest_copied_chars": 12, "longest_copied_line": 3,
               "longest_copied_passage": "ROMEO: I am", "copied_fraction": 0.0}

    def report(name: str, corpus: str) -> CheckpointReport:
        return CheckpointReport(f"{name}/best.pt", name, 1.0, 10, 40, "validation split", 1.5, 2.2, 4.5, 100,
                                "ROMEO: I am", None, None, figures, f"training split of {corpus}")

    settings = CompareSettings(prime="ROMEO:", sample=SampleConfig(length=10, seed=1), against="train")
    shared = to_markdown([report("a", "one.txt"), report("b", "one.txt")], settings, None)
    assert "Memorisation measured against the training split of one.txt." in shared
    mixed = to_markdown([report("a", "one.txt"), report("b", "two.txt")], settings, None)
    assert "Memorisation measured against each checkpoint's own training split." in mixed

