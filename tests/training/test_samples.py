"""Samples recorded while training: samples.jsonl, its rows, resumes and branches, and compare --evolution."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import charrnn
from charrnn.api import Evolution
from charrnn.errors import CharrnnError, OptionConflict
from charrnn.training.rundir import LOCK_NAME, SAMPLES_NAME, RunDirectory, SampleRecord, read_samples

from helpers import plan_run, run_cli

SAMPLING = {"sample_every": 4, "sample_length": 30, "eval_every": 100, "save_every": 8}


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / SAMPLES_NAME).read_text(encoding="utf-8").splitlines()]


def weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "last.pt", weights_only=True)["model_state"]


def test_a_sample_every_n_steps_and_at_the_end_with_fixed_prime_seed_and_temperature(small_corpus, tmp_path):
    plan_run(small_corpus, tmp_path / "run", max_steps=10, sample_prime="ROMEO:", **SAMPLING).run()
    recorded = rows(tmp_path / "run")
    assert [row["step"] for row in recorded] == [4, 8, 10]
    assert set(recorded[0]) == {"step", "epoch", "seconds", "val_loss", "prime", "temperature", "seed",
                                "text"}
    assert all((row["prime"], row["temperature"], row["seed"]) == ("ROMEO:", 0.8, 0) for row in recorded)
    assert all(len(row["text"]) == 30 for row in recorded)
    assert [row["val_loss"] is None for row in recorded] == [True, True, False]  # evaluated at the end only
    assert recorded[0]["seconds"] <= recorded[1]["seconds"] <= recorded[2]["seconds"]


def test_recording_samples_never_changes_the_training(small_corpus, tmp_path):
    plan_run(small_corpus, tmp_path / "with", max_steps=10, **SAMPLING).run()
    plan_run(small_corpus, tmp_path / "without", max_steps=10, eval_every=100, save_every=8).run()
    with_samples, without = weights(tmp_path / "with"), weights(tmp_path / "without")
    assert all(torch.equal(with_samples[key], without[key]) for key in without)
    assert not (tmp_path / "without" / SAMPLES_NAME).exists()


def test_epoch_checkpoints_record_a_sample_without_asking(small_corpus, tmp_path):
    result = plan_run(small_corpus, tmp_path / "run", epochs=2, save_epochs=[1], eval_every=1000).run()
    recorded = rows(tmp_path / "run")
    assert len(recorded) == 1 and recorded[0]["val_loss"] is not None
    assert recorded[0]["step"] < result.steps


def test_a_resume_after_a_crash_continues_the_log_with_no_duplicate_or_missing_step(small_corpus, tmp_path,
                                                                                   monkeypatch):
    plan_run(small_corpus, tmp_path / "whole", max_steps=20, **SAMPLING).run()
    save = RunDirectory.save

    def crash_at_step_12(self, name, payload):
        if name == "last.pt" and payload["step"] == 12:
            raise CharrnnError("the machine went down")
        save(self, name, payload)

    monkeypatch.setattr(RunDirectory, "save", crash_at_step_12)
    with pytest.raises(CharrnnError):
        plan_run(small_corpus, tmp_path / "run", max_steps=20, **{**SAMPLING, "save_every": 6}).run()
    monkeypatch.setattr(RunDirectory, "save", save)
    assert [row["step"] for row in rows(tmp_path / "run")] == [4, 8, 12]  # last.pt is at step 6
    plan_run(None, None, resume=tmp_path / "run", max_steps=20).run()
    resumed, whole = rows(tmp_path / "run"), rows(tmp_path / "whole")
    assert [row["step"] for row in resumed] == [row["step"] for row in whole] == [4, 8, 12, 16, 20]
    assert [row["text"] for row in resumed] == [row["text"] for row in whole]


def test_a_branch_starts_with_the_samples_up_to_its_checkpoint(small_corpus, tmp_path):
    plan_run(small_corpus, tmp_path / "run", max_steps=12, **{**SAMPLING, "save_every": 8}).run()
    plan_run(None, tmp_path / "branch", resume=tmp_path / "run" / "last.pt", max_steps=16).run()
    assert [row["step"] for row in rows(tmp_path / "branch")] == [4, 8, 12, 16]


def test_a_sample_prime_outside_the_vocabulary_is_refused_before_any_write(small_corpus, tmp_path):
    with pytest.raises(CharrnnError, match="sample_prime has characters the corpus does not: 'Z'"):
        charrnn.train(small_corpus, out_dir=tmp_path / "run", max_steps=2, sample_every=1, sample_prime="Zed")
    assert not (tmp_path / "run").exists()


def test_sample_settings_without_samples_are_refused(small_corpus, tmp_path):
    with pytest.raises(OptionConflict, match="sample_temperature shapes the samples recorded while training"):
        charrnn.train(small_corpus, out_dir=tmp_path / "run", max_steps=2, sample_temperature=1.0)


@pytest.fixture
def sampled_run(small_corpus, tmp_path) -> Path:
    plan_run(small_corpus, tmp_path / "run", max_steps=10, **SAMPLING).run()
    return tmp_path / "run"


def test_the_evolution_is_the_recorded_samples(sampled_run):
    evolution = charrnn.evolution(sampled_run)
    assert [row.step for row in evolution.rows] == [4, 8, 10]
    assert evolution.rows == read_samples(sampled_run)
    log = sampled_run / SAMPLES_NAME
    good = json.loads(log.read_text(encoding="utf-8").splitlines()[0])
    mistyped = [json.dumps({**good, name: value}) for name, value in
                (("epoch", "x"), ("val_loss", "bad"), ("prime", 5), ("step", True), ("seed", 1.5))]
    for damage in ('{"step": 1}', '{"step": "x"', "[1]", *mistyped):
        kept = log.read_text(encoding="utf-8")
        log.write_text(kept + damage + "\n", encoding="utf-8")
        with pytest.raises(CharrnnError, match=r"line 4 is not a recorded sample.*; remove that line"):
            read_samples(sampled_run)
        log.write_text(kept, encoding="utf-8")
    log.write_text(kept + mistyped[-1] + "\n", encoding="utf-8")
    with pytest.raises(CharrnnError, match="line 4 is not a recorded sample: seed is 1.5, not a whole"):
        read_samples(sampled_run)
    log.unlink()
    os.mkfifo(log)  # there, but not a log: not "record samples with --sample-every"
    with pytest.raises(CharrnnError, match=r"cannot read .*samples\.jsonl: "):
        read_samples(sampled_run)
    assert evolution.to_dict()["samples"][0]["step"] == 4
    markdown = evolution.to_markdown()
    assert "| step | epoch | val nats/char | sample |" in markdown and "<br>" in markdown
    assert "the trained ones; best.pt may hold their average" in markdown  # which weights the scores are


def test_compare_evolution_as_a_table_json_and_markdown(sampled_run, tmp_path):
    table = run_cli("compare", sampled_run, "--evolution")
    assert table.exit_code == 0, table.output
    assert "samples while training" in table.stdout and "val nats/char" in table.stdout
    as_json = run_cli("compare", sampled_run, "--evolution", "--json")
    assert [row["step"] for row in json.loads(as_json.stdout)[0]["samples"]] == [4, 8, 10]
    report = tmp_path / "evolution.md"
    written = run_cli("compare", sampled_run, "--evolution", "--markdown", report)
    assert written.exit_code == 0 and report.read_text().startswith("# Samples while training")


@pytest.mark.parametrize(("arguments", "fragment"), [
    (["--temperature", "0.5"], "--temperature does not apply"),
    (["--markdown", "{run}/samples.jsonl"], "would destroy what is read"),
])
def test_compare_evolution_refusals_are_one_line(sampled_run, arguments, fragment):
    result = run_cli("compare", sampled_run, "--evolution", *(a.format(run=sampled_run) for a in arguments))
    assert result.exit_code == 2, result.output
    assert len(result.stderr.splitlines()) == 1 and fragment in result.stderr


def test_a_run_without_samples_says_how_to_record_them(tmp_path, small_corpus):
    plan_run(small_corpus, tmp_path / "run", max_steps=2).run()
    result = run_cli("compare", tmp_path / "run", "--evolution")
    assert result.exit_code == 1 and "charrnn train --sample-every N" in result.stderr


def test_train_shows_each_sample_on_one_line(small_corpus, tmp_path):
    result = run_cli("train", small_corpus, "--out", tmp_path / "run", "--hidden", "16", "--layers", "1",
                     "--max-steps", "4", "--sample-every", "2", "--sample-length", "40")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("sample @ step")]
    assert [line.split(":")[0] for line in lines] == ["sample @ step 2", "sample @ step 4"]
    assert "⏎" in lines[0]  # the default prime, a newline, shown on the line


def test_the_default_prime_is_recorded_as_the_newline_it_reads(small_corpus, tmp_path):
    plan_run(small_corpus, tmp_path / "run", max_steps=4, sample_every=4, sample_length=10).run()
    assert rows(tmp_path / "run")[0]["prime"] == "\n"


def test_the_evolutions_markdown_shows_markup_as_text(tmp_path):
    row = SampleRecord(5, 0.1, 1.0, None, "\n", 0.8, 0, "*bold* _it_ `code` a|b <b>")
    markdown = Evolution(tmp_path, [row]).to_markdown()
    assert "&#42;bold&#42; &#95;it&#95; &#96;code&#96; a&#124;b &lt;b&gt;" in markdown


@pytest.mark.slow
def test_a_stop_during_a_long_recorded_sample_is_honoured_within_moments(small_corpus, tmp_path,
                                                                         stop_allowance_s):
    """SIGINT abandons a minutes-long sample; the run saves last.pt and stops as after any step."""
    out = tmp_path / "run"
    arguments = ["train", str(small_corpus), "--out", str(out), "--hidden", "16", "--layers", "1",
                 "--sample-every", "1", "--sample-length", "1000000", "--quiet", "--device", "cpu"]
    process = subprocess.Popen([sys.executable, "-m", "charrnn", *arguments], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (out / LOCK_NAME).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)  # well into the first sample
    process.send_signal(signal.SIGINT)
    asked = time.monotonic()
    _, stderr = process.communicate(timeout=30)
    assert time.monotonic() - asked < stop_allowance_s, "the stop waited for the sample"
    assert process.returncode == 130, stderr
    assert torch.load(out / "last.pt", weights_only=True)["step"] >= 1
    assert not (out / SAMPLES_NAME).exists()  # the abandoned sample is not recorded


def test_a_recorded_sample_too_long_for_memory_is_refused_before_training(small_corpus, tmp_path):
    refused = run_cli("train", small_corpus, "--out", tmp_path / "run", "--hidden", "16", "--max-steps", "10",
                      "--sample-every", "5", "--sample-length", "100000000000")
    assert refused.exit_code == 1 and refused.stderr.strip().endswith("Lower --sample-length")
    assert "generating a text of 100,000,000,000 characters needs about" in refused.stderr
    assert not (tmp_path / "run").exists()
