"""The command line end to end: in process through CliRunner, and as the installed program."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import charrnn
from charrnn.cli.main import cli
from charrnn.config import TrainConfig
from charrnn.models.evaluate import evaluate
from charrnn.models.model import parameter_count
from charrnn.training.budget import Speed
from charrnn.training.checkpoint import load_model

from helpers import INSTALLED, assert_one_line_error, needs_installed, run_cli, run_installed

TINY_TRAIN = ["--layers", "1", "--hidden", "24", "--embed", "8", "--batch-size", "4", "--seq-len", "16",
              "--eval-every", "10", "--seed", "1"]


@pytest.fixture
def runner(tmp_path, monkeypatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHARRNN_DATA_DIR", raising=False)
    return CliRunner()


def invoke(runner: CliRunner, *args: str):
    return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_train_sample_eval_round_trip(runner, small_corpus):
    result = invoke(runner, "train", small_corpus, *TINY_TRAIN, "--max-steps", "25")
    assert result.exit_code == 0, result.output
    run = Path("checkpoints/small")
    assert {p.name for p in run.iterdir()} == {"best.pt", "last.pt", "metrics.jsonl", "losses.jsonl",
                                               "config.json"}
    assert "best validation" in result.stdout and "reached --max-steps 25" in result.stdout
    assert "parameters" in result.stderr  # configuration table
    assert result.stderr.splitlines()[-1] == "sample with: charrnn sample checkpoints/small/best.pt"
    first = invoke(runner, "sample", run / "best.pt", "--prime", "ROMEO:", "--length", "80", "--seed", "4")
    assert first.exit_code == 0, first.output
    assert first.stdout.startswith("ROMEO:") and len(first.stdout) == len("ROMEO:") + 80 + 1
    scored = invoke(runner, "eval-perplexity", run / "best.pt", "--json")
    report = json.loads(scored.stdout)
    assert set(report) == {"text", "nats_per_char", "bits_per_char", "perplexity", "chars", "seconds",
                           "checkpoint"}
    assert report["text"].startswith("validation split of ")
    loaded = load_model(run / "best.pt")
    text = small_corpus.read_text(encoding="utf-8")
    cut = loaded.payload["corpus"]["split_point"]
    expected = evaluate(loaded.network, loaded.vocab.encode(text[cut:]))
    assert report["nats_per_char"] == pytest.approx(expected.nats_per_char)
    table = re.sub(r"[\s│]", "", result.stderr)  # the run table, its wrapped cells joined
    assert "(thelast10%)" in table and "every10stepsandattheend" in table
    exact = json.loads(invoke(runner, "eval-perplexity", run / "best.pt", "--json", "--single-stream").stdout)
    one_stream = evaluate(loaded.network, loaded.vocab.encode(text[cut:]), single_stream=True)
    assert exact["nats_per_char"] == pytest.approx(one_stream.nats_per_char)
    assert exact["nats_per_char"] == pytest.approx(report["nats_per_char"], abs=1e-4)
    assert report["chars"] == len(text) - cut - 1
    assert loaded.payload["best"]["nats_per_char"] == pytest.approx(report["nats_per_char"], rel=1e-6)


CONTRADICTIONS = [
    (["--max-steps", "6", "--hidden", "48"], "--hidden 48 contradicts the checkpoint"),
    (["--max-steps", "6", "--seq-len", "8"],
     "--seq-len 8 contradicts the checkpoint (--seq-len 16); resuming may change only --epochs"),
    (["--max-steps", "6", "--overwrite"], "--overwrite with --resume replaces nothing"),
    (["--max-steps", "3"], "this run already reached --max-steps 3"),
]


def test_an_existing_run_is_kept_unless_overwrite_and_a_resume_may_not_contradict_it(runner, small_corpus):
    assert invoke(runner, "train", small_corpus, *TINY_TRAIN, "--max-steps", "3").exit_code == 0
    best, last = Path("checkpoints/small/best.pt"), Path("checkpoints/small/last.pt")
    before = best.read_bytes(), last.read_bytes()
    again = invoke(runner, "train", small_corpus, *TINY_TRAIN, "--max-steps", "3")
    assert_one_line_error(again, "already holds a training run")
    assert "continue it with --resume checkpoints/small/last.pt" in again.stderr
    for extra, fragment in CONTRADICTIONS:
        assert_one_line_error(invoke(runner, "train", "--resume", last, *extra), fragment)
    budgeted = invoke(runner, "train", small_corpus, "--time-budget", "10", "--out", "checkpoints/small")
    assert_one_line_error(budgeted, "already holds a training run")  # before anything is measured
    assert (best.read_bytes(), last.read_bytes()) == before
    replaced = invoke(runner, "train", small_corpus, *TINY_TRAIN, "--max-steps", "3", "--overwrite",
                      "--seed", "2")
    assert replaced.exit_code == 0 and best.read_bytes() != before[0]


@pytest.mark.slow
def test_resume_continues_the_run_and_resuming_an_earlier_checkpoint_never_replaces_newer_results(
        runner, small_corpus):
    # small.txt: 13,100 chars, 11,790 for training; 4 streams of 2,947, seq-len 16: 185 steps an epoch.
    first = invoke(runner, "train", small_corpus, *TINY_TRAIN, "--epochs", "1", "--save-epochs", "1,2",
                   "--eval-every", "1000")
    assert first.exit_code == 0, first.output
    run = Path("checkpoints/small")
    resumed = invoke(runner, "train", "--resume", run / "last.pt", "--epochs", "2")
    assert resumed.exit_code == 0, resumed.output
    assert "resuming with --epochs: 1.0 → 2.0" in resumed.stderr
    assert [p.name[:9] for p in sorted(run.glob("epoch*.pt"))] == ["epoch0001", "epoch0002"]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("epoch_checkpoint", "")[:9] for r in records] == ["epoch0001", "epoch0002"]
    assert torch.load(run / "last.pt", weights_only=True)["step"] == 2 * records[0]["step"]
    before = {name: (run / name).read_bytes() for name in ("best.pt", "last.pt", "metrics.jsonl")}
    earlier = next(run.glob("epoch0001-*.pt"))
    refused = invoke(runner, "train", "--resume", earlier, "--epochs", "2")
    assert_one_line_error(refused, "has newer results")
    assert "--out NEW_DIR" in refused.stderr
    branched = invoke(runner, "train", "--resume", earlier, "--epochs", "2", "--out", "branch")
    assert branched.exit_code == 0, branched.output
    assert {name: (run / name).read_bytes() for name in before} == before
    history = [json.loads(line) for line in Path("branch/metrics.jsonl").read_text().splitlines()]
    assert history[0] == records[0]  # the branch starts with the run's history up to the checkpoint
    assert torch.load("branch/last.pt", weights_only=True)["run_id"] != \
        torch.load(run / "last.pt", weights_only=True)["run_id"]


def train_tiny_run(runner: CliRunner, corpus: Path, out: str, *extra: str):
    return invoke(runner, "train", corpus, *TINY_TRAIN, "--out", out, *extra)


def test_resume_of_a_fine_tuned_run_trains_on_the_checkpoints_vocabulary(runner, small_corpus):
    """The fine-tuned vocabulary (extended, so unlike the corpus's own) must carry through a resume."""
    assert train_tiny_run(runner, small_corpus, "base", "--max-steps", "4").exit_code == 0
    Path("lower.txt").write_text(small_corpus.read_text(encoding="utf-8").lower(), encoding="utf-8")
    tune = ["train", "lower.txt", "--init-from", "base/last.pt", "--extend-vocab", *TINY_TRAIN]
    assert invoke(runner, *tune, "--max-steps", "8", "--out", "straight").exit_code == 0
    assert invoke(runner, *tune, "--max-steps", "4", "--out", "halves").exit_code == 0
    resumed = invoke(runner, "train", "--resume", "halves/last.pt", "--max-steps", "8")
    assert resumed.exit_code == 0, resumed.output
    straight = torch.load("straight/last.pt", weights_only=True)
    halves = torch.load("halves/last.pt", weights_only=True)
    assert straight["vocab"] == halves["vocab"] != sorted(halves["vocab"])
    for name, tensor in straight["model_state"].items():
        assert torch.equal(tensor, halves["model_state"][name]), name


def test_a_run_directory_stands_for_its_checkpoint_and_a_resume_keeps_to_its_own_run(runner, small_corpus):
    assert train_tiny_run(runner, small_corpus, "run", "--max-steps", "4").exit_code == 0
    sampled = invoke(runner, "sample", "run", "--length", "5", "--seed", "1")
    assert sampled.exit_code == 0 and "using run/best.pt" in sampled.stderr
    assert sampled.stdout == invoke(runner, "sample", "run/best.pt", "--length", "5", "--seed", "1").stdout
    resumed = invoke(runner, "train", "--resume", "run", "--max-steps", "6")
    assert resumed.exit_code == 0 and "using run/last.pt" in resumed.stderr
    assert_one_line_error(invoke(runner, "eval-perplexity", "."), "is a directory without a best.pt")
    other = Path("other")
    other.mkdir()
    (other / "config.json").write_text('{"mine": true}\n')
    (other / "best.pt").write_bytes(b"the user's own")
    (other / "metrics.jsonl").write_text("{}\n")
    (other / "last.pt").write_bytes(Path("run/last.pt").read_bytes())
    before = {p.name: p.read_bytes() for p in other.iterdir()}
    refused = invoke(runner, "train", "--resume", other / "last.pt", "--max-steps", "10")
    assert_one_line_error(refused, "is not the run that wrote last.pt (its config.json belongs to another")
    assert {p.name: p.read_bytes() for p in other.iterdir()} == before
    for text, why in (("[" * 600 + "]" * 600, "is nested more than 64 levels deep"),
                      ("[1]", "is not a JSON object"), ('{"run_id": 1', "is not JSON (Expecting")):
        (other / "config.json").write_text(text)  # each says what is wrong with it, never "another run"
        refused = invoke(runner, "train", "--resume", other / "last.pt", "--max-steps", "10")
        assert_one_line_error(refused, f"(its config.json {why}")
    resumed = invoke(runner, "train", "--resume", "run/last.pt", "--max-steps", "8", "--out", "run")
    assert resumed.exit_code == 0, resumed.output  # --out naming the checkpoint's own directory
    assert torch.load("run/last.pt", weights_only=True)["step"] == 8


def test_fine_tune_with_extended_vocabulary(runner, tiny_checkpoint):
    Path("new.txt").write_text("ROMEO: Zounds! Quoth the Knave, 'tis XV o'clock.\n" * 40, encoding="utf-8")
    refused = invoke(runner, "train", "new.txt", "--init-from", tiny_checkpoint, "--max-steps", "2")
    assert_one_line_error(refused, "'Z' (U+005A)")
    assert "--extend-vocab" in refused.stderr
    tuned = invoke(runner, "train", "new.txt", "--init-from", tiny_checkpoint, "--extend-vocab",
                   "--max-steps", "2", "--batch-size", "4", "--seq-len", "16", "--dropout", "0.1",
                   "--weight-drop", "0.2", "-o", "locked_dropout", "true")
    assert tuned.exit_code == 0, tuned.output
    assert (f"fine-tuning {tiny_checkpoint}: its shape and regularisation (--dropout 0.1 (given; the "
            "checkpoint's 0), --weight-drop 0.2 (given; the checkpoint's 0)) are kept unless given; the "
            "vocabulary grows from") in tuned.stderr
    old = torch.load(tiny_checkpoint, weights_only=True)
    new = torch.load("checkpoints/new/last.pt", weights_only=True)
    assert new["vocab"][: len(old["vocab"])] == old["vocab"]  # no id moved
    assert {"Z", "Q", "K", "X"} <= set(new["vocab"][len(old["vocab"]):])
    assert new["model_config"]["hidden_size"] == old["model_config"]["hidden_size"]
    assert new["model_config"]["dropout"] == 0.1
    assert new["model_config"]["weight_drop"] == 0.2 and new["model_config"]["locked_dropout"]
    assert new["train_config"]["init_from"] == str(tiny_checkpoint)
    assert max(s["step"] for s in new["optimizer_state"]["state"].values()) == 2  # fresh optimiser
    sampled = invoke(runner, "sample", "checkpoints/new/last.pt", "--prime", "Zounds", "--length", "10")
    assert sampled.exit_code == 0 and sampled.stdout.startswith("Zounds")


def test_a_time_budget_says_what_it_leaves_to_the_defaults(runner, tiny_checkpoint, small_corpus):
    tuned = invoke(runner, "train", small_corpus, "--init-from", tiny_checkpoint, "--time-budget", "30",
                   "--max-steps", "1", "--batch-size", "4", "--seq-len", "16", "--out", "tuned")
    assert tuned.exit_code == 0, tuned.output
    assert ("--time-budget 30 s: a fine-tune keeps its checkpoint's shape and regularisation, and every "
            "other setting not given keeps its plain default") in tuned.stderr
    assert (f"fine-tuning {tiny_checkpoint}: its shape and regularisation (no dropout) are kept unless "
            "given\n") in tuned.stderr  # and the vocabulary, not extended, does not grow
    saved = json.loads(Path("tuned/config.json").read_text())["train"]
    assert saved["weight_decay"] == 0.0 and saved["learning_rate"] == TrainConfig.learning_rate
    gru = invoke(runner, "train", small_corpus, "--model", "gru", "--time-budget", "30", "--max-steps", "1",
                 "--hidden", "16", "--batch-size", "4", "--seq-len", "16", "--out", "gru")
    assert gru.exit_code == 0, gru.output
    assert "the scaling rule covers plain LSTMs, so this gru keeps the plain defaults" in gru.stderr


def test_samples_to_a_file_as_the_umask_says_or_as_json_and_a_drawn_seed_draws_again(runner, tiny_checkpoint):
    previous = os.umask(0o002)
    try:
        result = invoke(runner, "sample", tiny_checkpoint, "--num-samples", "3", "--length", "20", "--seed",
                        "2", "--output", "out.txt")
    finally:
        os.umask(previous)
    assert result.exit_code == 0 and result.stdout == "" and Path("out.txt").stat().st_mode & 0o777 == 0o664
    text = Path("out.txt").read_text(encoding="utf-8")
    parts = re.split(r"=== sample (\d) ===\n", text)
    assert parts[0] == "" and parts[1::2] == ["1", "2", "3"]
    samples = [part.removesuffix("\n") for part in parts[2::2]]  # each text, then a line break
    assert [len(sample) for sample in samples] == [20, 20, 20] and len(set(samples)) == 3
    sampled = invoke(runner, "sample", tiny_checkpoint, "--num-samples", "2", "--length", "10", "--seed", "3",
                     "--json")  # one object per line
    records = [json.loads(line) for line in sampled.stdout.splitlines()]
    assert len(records) == 2 and all(set(record) == {"text"} for record in records)
    first = invoke(runner, "sample", tiny_checkpoint, "--length", "30")
    seed = next(line.split()[1] for line in first.stderr.splitlines() if line.startswith("seed "))
    again = invoke(runner, "sample", tiny_checkpoint, "--length", "30", "--seed", seed)
    assert again.stdout == first.stdout and "seed " not in again.stderr


def test_beam_search_prints_the_best_beams_best_first_with_their_scores(runner, tiny_checkpoint):
    result = invoke(runner, "sample", tiny_checkpoint, "--prime", "ROMEO:", "--beam-width", "4",
                    "--num-samples", "2", "--length", "30")
    assert result.exit_code == 0, result.output
    assert [line for line in result.stdout.splitlines() if line.startswith("===")] == ["=== beam 1 ===",
                                                                                       "=== beam 2 ==="]
    scores = [float(line.split("log-prob ")[1].split()[0]) for line in result.stderr.splitlines()
              if line.startswith("beam ")]
    assert len(scores) == 2 and scores[0] >= scores[1]
    width_one = invoke(runner, "sample", tiny_checkpoint, "--prime", "ROMEO:", "--beam-width", "1",
                       "--length", "30")
    greedy = invoke(runner, "sample", tiny_checkpoint, "--prime", "ROMEO:", "--greedy", "--length", "30")
    assert width_one.exit_code == 0 and greedy.exit_code == 0, width_one.output + greedy.output
    assert width_one.stdout == greedy.stdout  # one beam: the text alone, no header
    assert greedy.stdout.startswith("ROMEO:") and len(greedy.stdout) == len("ROMEO:") + 30 + 1


@pytest.mark.parametrize(("args", "prime", "options"), [
    (["--prime", "ROMEO:", "--stop-at", "\n", "--length", "500", "--seed", "1"], "ROMEO:",
     {"stop_at": "\n", "length": 500, "seed": 1}),
    (["--prime-file", "prime.txt", "--greedy", "--length", "30"], "JULIET:\n",
     {"greedy": True, "length": 30}),
])
def test_sample_prints_the_apis_text_stop_string_and_prime_file_included(runner, tiny_checkpoint, args, prime,
                                                                          options):
    Path("prime.txt").write_text("JULIET:\n", encoding="utf-8")
    result = invoke(runner, "sample", tiny_checkpoint, *args)
    expected = charrnn.sample(tiny_checkpoint, prime, **options).text
    assert result.exit_code == 0 and result.stdout == expected + ("" if expected.endswith("\n") else "\n")


def test_eval_unknown_characters_named_and_skippable(runner, tiny_checkpoint):
    Path("other.txt").write_text("ROMEO: Café ZZZ Q", encoding="utf-8")
    refused = invoke(runner, "eval-perplexity", tiny_checkpoint, "other.txt")
    assert_one_line_error(refused, "'Z' (U+005A) ×3")
    assert "--skip-unknown" in refused.stderr
    skipped = invoke(runner, "eval-perplexity", tiny_checkpoint, "other.txt", "--skip-unknown", "--json")
    assert skipped.exit_code == 0
    assert json.loads(skipped.stdout)["chars"] == len("ROMEO: Café  ") - 1
    assert "skipped 4 characters" in skipped.stderr


def test_data_get_uses_the_mirror_and_train_without_corpus_fetches_tiny_shakespeare(runner, data_mirror):
    result = invoke(runner, "data", "get", "tinyshakespeare", "--data-dir", "cache")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(Path("cache/tinyshakespeare/input.txt"))
    assert len(Path("cache/tinyshakespeare/input.txt").read_text(encoding="utf-8")) == 1_115_394
    result = invoke(runner, "train", "--layers", "1", "--hidden", "8", "--embed", "4", "--batch-size", "2",
                    "--seq-len", "8", "--max-steps", "2")
    assert result.exit_code == 0, result.output
    payload = torch.load("checkpoints/tinyshakespeare/last.pt", weights_only=True)
    corpus = payload["corpus"]
    assert (corpus["chars"], corpus["split_point"], len(payload["vocab"])) == (1_115_394, 1_003_854, 65)


@pytest.fixture
def bad_files(tmp_path, tiny_checkpoint) -> None:
    files = {"empty.txt": b"", "latin1.txt": "café".encode("latin-1"), "short.txt": b"abcdefgh" * 4,
             "notes.txt": b"plain text, not a checkpoint"}
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    (tmp_path / "cut.pt").write_bytes(tiny_checkpoint.read_bytes()[:1500])
    torch.save({"weights": torch.ones(2)}, tmp_path / "foreign.pt")


BAD_INPUTS = [
    (["train", "missing.txt"], "does not exist"),
    (["train", "empty.txt"], "is empty"),
    (["train", "latin1.txt"], "not UTF-8"),
    (["train", "short.txt", "--batch-size", "8", "--seq-len", "16"], "needs at least 129"),
    (["train", "short.txt", "--epochs", "0"], "--epochs"),
    (["train", "short.txt", "--lr", "1e39"], "Invalid value for '--lr': must be positive and at most 1000"),
    (["train", "short.txt", "--save-epochs", "5,x"], "not a comma-separated list"),
    (["train", "short.txt", "--device", "mps"], "MPS is not available"),
    (["train", "small.txt", "--init-from", "CKPT", "--hidden", "64"],
     "--hidden 64 contradicts the --init-from checkpoint (--hidden 32)"),
    (["train", "short.txt", "--device", "mps", "--precision", "bf16"],
     "Error: --precision bf16 needs a CUDA device or a CPU with native bfloat16"),
    (["sample", "CKPT", "--temperature", "inf"], "'--temperature': must be a number greater than 0"),
    (["sample", "CKPT", "--top-p", "0"], "top-p"),
    (["sample", "CKPT", "--prime", "Ωmega"], "'Ω' (U+03A9)"),
    (["sample", "CKPT", "--beam-width", "0"], "--beam-width"),
    (["sample", "missing.pt"], "does not exist"),
    (["sample", "cut.pt"], "not a readable charrnn checkpoint"),
    (["sample", "foreign.pt"], "not a charrnn checkpoint"),
    (["eval-perplexity", "foreign.pt"], "not a charrnn checkpoint"),
    (["eval-perplexity", "CKPT", "empty.txt"], "empty.txt is empty: it holds no text"),
    (["sampel"], "No such command"),
    (["train", "short.txt", "--threads", "0"], "'--threads': must be a whole number of at least 1"),
    (["sample", "CKPT", "--threads", "0"], "'--threads': must be a whole number of at least 1"),
    (["eval-perplexity", "CKPT", "--threads", "-2"], "'--threads': must be a whole number of at least 1"),
    (["compare", "CKPT", "--threads", "0"], "'--threads': must be a whole number of at least 1"),
    (["inspect", "CKPT", "notes.txt", "--surprisal", "--threads", "0"], "'--threads': must be a whole"),
    (["export", "CKPT", "--output", "page.html", "--threads", "0"], "'--threads': must be a whole number"),
    (["sample", "CKPT", "--threads", "two"], "'--threads': 'two' is not a valid integer"),
    (["sample", "CKPT", "--threads", "99999999999999999999"], "at least 1 (at most 1,024)"),
    *([(["sample", "CKPT", "--device", "cuda"], "no CUDA GPU is available")]
      if not torch.cuda.is_available() else []),
]


@pytest.mark.parametrize(("args", "fragment"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_error(runner, small_corpus, bad_files, tiny_checkpoint, args, fragment):
    args = [str(tiny_checkpoint) if a == "CKPT" else a for a in args]
    result = invoke(runner, *args)
    assert_one_line_error(result, fragment)
    assert not any(Path("checkpoints").glob("**/*.pt"))  # nothing half-written


@pytest.mark.slow
@needs_installed
def test_installed_program_end_to_end(tmp_path, small_corpus):
    version = run_installed("--version", cwd=tmp_path)
    assert version.returncode == 0 and "charrnn" in version.stdout
    trained = run_installed("train", small_corpus, *TINY_TRAIN, "--max-steps", "12", "--out", "run",
                            cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    assert "best validation" in trained.stdout
    sampled = run_installed("sample", "run/best.pt", "--prime", "ROMEO:", "--length", "40", "--seed", "3",
                            cwd=tmp_path)
    assert sampled.returncode == 0 and sampled.stdout.startswith("ROMEO:")
    scored = run_installed("eval-perplexity", "run/best.pt", "--json", cwd=tmp_path)
    assert json.loads(scored.stdout)["chars"] > 0
    piped = subprocess.run(f"'{INSTALLED}' sample run/best.pt --length 200000 --seed 1 | head -c 20",
                           shell=True, cwd=tmp_path, capture_output=True, timeout=300)
    assert len(piped.stdout) == 20 and piped.stderr == b""
    failed = run_installed("sample", "run/best.pt", "--temperature", "0", cwd=tmp_path)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert failed.stderr.strip().count("\n") == 0


def slow_machine(monkeypatch, work_per_s=1e8):
    """Time-budget shapes train at work_per_s / parameters chars/s, without timing anything."""
    monkeypatch.setattr("charrnn.training.budget.measure_speed", lambda model_config, *args: Speed(
        work_per_s / parameter_count(model_config), 10 * work_per_s / parameter_count(model_config)))


def test_a_time_budget_picks_the_settings_not_given(runner, small_corpus, monkeypatch):
    slow_machine(monkeypatch)
    result = invoke(runner, "train", small_corpus, "--out", "run", "--time-budget", "100", "--max-steps", "3",
                    "--precision", "fp32", *TINY_TRAIN)
    assert result.exit_code == 0, result.stderr
    # One line says what the budget chose; the --max-steps 3 given ends it early, before it beats guessing.
    assert re.search(r"^--time-budget 100 s: 1×24 LSTM at [\d,]+ chars/s in fp32, 0\.0 epochs \(time for "
                     r"[\d.]+: the --max-steps given ends it first\), predicts [\d.]+ nats/char \(as "
                     r"guessing alike among this text's characters would: the rule cannot tell shapes "
                     r"apart\)$",
                     result.stderr, re.M)
    assert "--time-budget: " not in result.stderr
    config = json.loads(Path("run/config.json").read_text())
    assert config["model"]["hidden_size"] == 24 and config["train"]["batch_size"] == 4  # given: kept
    assert config["train"]["learning_rate"] == 5e-3
    # The settings made for the user, which they may override, are in config.json's budget.
    chosen = config["budget"]["chosen"]
    assert chosen["learning_rate"] == 5e-3 and "hidden_size" not in chosen
    assert invoke(runner, "train", "--resume", "run", "--max-steps", "4").exit_code == 0
    assert json.loads(Path("run/config.json").read_text())["budget"] == config["budget"]  # a resume keeps it


@pytest.mark.slow
@pytest.mark.parametrize("native", [False, True])
def test_a_budget_says_which_shape_this_machine_affords_and_why(runner, small_corpus, monkeypatch, cpu_bf16,
                                                                native):
    cpu_bf16(native)
    slow_machine(monkeypatch, work_per_s=1e9)
    result = invoke(runner, "train", small_corpus, "--out", "run", "--time-budget", "5", "--json",
                    "--device", "cpu")  # about the CPU's precision: with a GPU present, auto trains there
    assert result.exit_code == 0, result.stderr
    budget = json.loads(result.stdout)["budget"]
    hidden = json.loads(Path("run/config.json").read_text())["model"]["hidden_size"]
    choice = next(c for c in budget["candidates"] if c["settings"]["hidden_size"] == hidden)
    assert f"--time-budget 5 s: 2×{hidden} LSTM at {choice['chars_per_s']:,.0f} chars/s in " \
           f"{'bf16' if native else 'fp32'}, " in result.stderr
    assert "--time-budget: " not in result.stderr  # the shapes considered are --json's, not stderr's
    # The slowest shapes, on this slow machine: some have no time, others a batch no shape timed had; --json
    # and config.json list every shape, whether it was timed, and whether one of its batch was.
    assert any(c["predicted_loss"] is None or not c["estimable"] for c in budget["candidates"])
    assert all({"settings", "chars_per_s", "measured", "estimable"} <= c.keys() for c in budget["candidates"])
    assert json.loads(Path("run/config.json").read_text())["budget"]["candidates"] == budget["candidates"]


@pytest.mark.cuda
def test_a_time_budget_on_cuda_plans_from_the_gpu_s_own_throughput(runner, small_corpus):
    result = invoke(runner, "train", small_corpus, "--time-budget", "30", "--device", "cuda", "--out", "run")
    assert result.exit_code == 0, result.output
    # The chosen shape may be timed, or estimated from a timed one of its batch: a GPU's speed hardly
    # falls with width, so a short probe may stop before the widest rung.
    chosen = r"LSTM at (about )?[\d,]+ chars/s in fp32, "
    assert re.search(chosen, result.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["train", "--lr", "-1"], ["train", "--time-budget", "-4"], ["train", "-o", "warmup_steps", "-1"],
    ["sample", "shakespeare", "--temperature", "-1"], ["compare", "shakespeare", "--length", "-5"],
    ["eval-perplexity", "shakespeare", "--dynamic-lr", "-1"],
    ["inspect", "shakespeare", "text.txt", "--top", "-2"],
    ["inspect", "shakespeare", "text.txt", "--surprisal", "--most-surprising", "0"],
    ["inspect", "shakespeare", "text.txt", "--surprisal", "--top", "0"],
    ["inspect", "shakespeare", "text.txt", "--surprisal", "--max-chars", "1"],
    ["compare", "shakespeare", "--greedy", "--top-k", "3"], ["compare", "shakespeare", "--skip-unknown"],
    ["compare", "shakespeare", "--evolution", "--greedy"],
    ["sample", "shakespeare", "--interactive", "--json"],
    ["sample", "shakespeare", "--threads", "0"], ["eval-perplexity", "shakespeare", "--threads", "2000"],
    ["export", "shakespeare", "--output", "page.html", "--threads", "0"],
    ["plot", ".", "--output", "."], ["OMP_NUM_THREADS=abc", "sample", "shakespeare"],
    ["OMP_NUM_THREADS=0", "train", "text.txt"],
])
def test_a_bad_option_is_refused_before_torch_is_imported(args, tmp_path):
    """Refused in a fraction of torch's import time: no argument error imports torch or matplotlib."""
    (tmp_path / "text.txt").write_text("To be, or not to be\n", encoding="utf-8")
    environment = dict(os.environ, **dict(arg.split("=") for arg in args if "=" in arg))
    probe = ("import sys\nfrom charrnn.cli.main import main\ntry:\n    main()\nexcept SystemExit as end:\n"
             "    print(end.code, 'torch' in sys.modules or 'matplotlib' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe, *(arg for arg in args if "=" not in arg)],
                            capture_output=True, text=True, cwd=tmp_path, env=environment)
    assert result.stdout.split() == ["2", "False"], result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("Error: ")


def test_a_group_named_without_its_command_shows_its_help():
    result = subprocess.run([sys.executable, "-m", "charrnn", "data"], capture_output=True, text=True)
    assert result.returncode == 2 and "\\n" not in result.stderr + result.stdout
    assert "Usage: charrnn data [OPTIONS] COMMAND" in result.stderr + result.stdout
    assert "charrnn data get tinyshakespeare --data-dir" in result.stderr + result.stdout


def test_the_command_line_reaches_the_library_only_through_the_api():
    """cli/ imports api, config, errors and utils, no other floor (but type names under TYPE_CHECKING)."""
    allowed = ("charrnn.api", "charrnn.cli", "charrnn.config", "charrnn.errors", "charrnn.utils")
    found = []
    for path in sorted((Path(charrnn.__file__).parent / "cli").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        type_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                     and ast.unparse(block.test) == "TYPE_CHECKING" for node in ast.walk(block)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in type_only and node.module and \
                    node.module.startswith("charrnn.") and not node.module.startswith(allowed):
                found.append(f"{path.name}: {node.module}")
    assert found == []


@pytest.mark.parametrize(("args", "fragment"), [
    (["train", "small.txt", "--seed", str(2**64)], "'--seed': must be between"),
    (["sample", "x.pt", "--temperature", "0"], "use --greedy"),
    # Checked before the default corpus would be fetched or the checkpoint read:
    (["train", "--lr", "-1"], "Invalid value for '--lr': must be positive and at most 1000 (see 'cli train"),
    (["train", "-o", "warmup_steps", "-1"], "Invalid value for '-o warmup_steps': must be at least 0"),
    (["train", "--resume", "gone/last.pt", "-o", "min_lr_ratio", "1.5"],
     "'-o min_lr_ratio': must be in [0, 1]"),
    (["compare", "gone.pt", "--length", "-1"],
     "Invalid value for '--length': must be a whole number of 0 or more"),
    (["sample", "gone.pt", "--top-k", "0"],
     "Invalid value for '--top-k': must be a whole number of at least 1"),
    (["train", "--ema", "1"], "Invalid value for '--ema': must be in [0, 1) (0 turns averaging off)"),
    (["train", "--weight-drop", "1"], "Invalid value for '--weight-drop': must be in [0, 1)"),
    (["train", "-o", "embed_dropout", "nan"],
     "Invalid value for '-o embed_dropout': must be a finite number"),
    (["train", "-o", "eval_chars", "0"], "Invalid value for '-o eval_chars': must be at least 1"),
    (["train", "-o", "eval_chars", "1.5"], "Invalid value for '-o eval_chars': '1.5' is not a whole number"),
    (["train", "--model", "esn", "--weight-drop", "0.2"], "--weight-drop does not apply to --model esn"),
])
def test_an_option_value_out_of_range_is_a_usage_error(runner, small_corpus, args, fragment, monkeypatch):
    """The dataclass checks the value; the message names the option that gave it."""
    monkeypatch.setenv("CHARRNN_DATA_MIRROR", "file:///nonexistent")
    assert_one_line_error(invoke(runner, *args), fragment, code=2)
    assert not Path("data").exists()


def test_every_evaluation_may_score_the_validation_splits_start(runner, small_corpus):
    result = train_tiny_run(runner, small_corpus, "run", "--max-steps", "4", "--eval-every", "2",
                            "-o", "eval_chars", "50")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in Path("run/metrics.jsonl").read_text().splitlines()]
    assert [record.get("val_chars") for record in records] == [50, 50]  # the end's too
    summary = " ".join(word for word in result.output.split() if word != "│")
    assert "perplexity" in summary and "on the first 50 validation chars" in summary  # the summary says so
    assert json.loads(Path("run/config.json").read_text())["train"]["eval_chars"] == 50


@pytest.mark.slow
def test_save_epochs_beyond_the_run_warn_and_the_summary_lists_those_written(runner, small_corpus):
    result = train_tiny_run(runner, small_corpus, "run", "--epochs", "2", "--save-epochs", "1,5",
                            "--eval-every", "1000")
    assert result.exit_code == 0, result.output
    assert "warning: --save-epochs 5 lies beyond this run's end" in " ".join(result.stderr.split())
    assert "epoch checkpoints" in result.stdout and "epoch0001-" in result.stdout


def test_train_json_quiet_and_a_log_without_a_progress_bar(runner, small_corpus):
    quiet = invoke(runner, "train", small_corpus, *TINY_TRAIN, "--max-steps", "10", "--out", "q", "--quiet",
                   "--json")
    assert quiet.exit_code == 0, quiet.output
    summary = json.loads(quiet.stdout)
    assert summary["steps"] == 10 and summary["best"]["nats_per_char"] > 0
    assert summary["stopped"] == "reached max_steps 10"  # the API's record, as Python names it
    assert quiet.stderr == ""
    logged = invoke(runner, "train", small_corpus, *TINY_TRAIN, "--max-steps", "10", "--out", "log")
    assert "step/s" not in logged.stderr  # stderr is no terminal here: no bar, only evaluation lines
    assert [line for line in logged.stderr.splitlines() if line.startswith("step ")]


@pytest.mark.parametrize("native", [False, True])
def test_the_run_table_says_which_precision_auto_chose_and_how_many_threads_and_why(runner, small_corpus,
                                                                                     cpu_bf16, native):
    cpu_bf16(native)
    # What auto chooses on a CPU, on a machine with a GPU too (where a run on the GPU has no threads row).
    on_cpu = [*TINY_TRAIN, "--device", "cpu", "--max-steps", "2"]
    chosen = invoke(runner, "train", small_corpus, *on_cpu, "--out", "a", "--threads", "2")
    assert chosen.exit_code == 0, chosen.output
    expected = "bf16 (auto)" if native else "fp32 (auto)"
    assert f"cpu, {expected}" in chosen.stderr and "2 (--threads)" in chosen.stderr
    assert torch.get_num_threads() == 2
    torch.set_num_threads(1)
    forced = invoke(runner, "train", small_corpus, *on_cpu, "--out", "f", "--precision", "fp32", "--json")
    assert "cpu, fp32 " in forced.stderr and "(auto)" not in forced.stderr
    assert "1 (OMP_NUM_THREADS)" in forced.stderr  # the test suite's own setting (conftest)
    assert json.loads(forced.stdout)["threads"] == {"count": 1, "reason": "OMP_NUM_THREADS", "given": True}


def test_the_run_table_and_summary_name_the_regularisation_and_the_average(runner, small_corpus):
    result = invoke(runner, "train", small_corpus, *TINY_TRAIN, "--max-steps", "2", "--out", "r",
                    "--dropout", "0.1", "-o", "locked_dropout", "true", "--weight-drop", "0.2",
                    "--ema", "0.9", "--json")
    assert result.exit_code == 0, result.output
    table = " ".join(result.stderr.replace("│", " ").split())
    assert "dropout 0.1 (locked), weight drop 0.2" in table and "weight average (EMA 0.9)" in table
    summary = json.loads(result.stdout)
    (evaluation,) = [json.loads(line) for line in Path("r/metrics.jsonl").read_text().splitlines()]
    assert summary["best_is_average"] is (evaluation["averaged_val_loss"] < evaluation["val_loss"])
    assert summary["best"]["nats_per_char"] == pytest.approx(min(evaluation["averaged_val_loss"],
                                                                 evaluation["val_loss"]))
    config = json.loads(Path("r/config.json").read_text())
    assert config["model"]["weight_drop"] == 0.2 and config["train"]["ema_decay"] == 0.9


def test_a_skip_connection_model_samples_scores_and_beam_searches(runner, small_corpus):
    trained = train_tiny_run(runner, small_corpus, "skip", "--max-steps", "4", "--layers", "2",
                             "--skip-connections")
    assert trained.exit_code == 0, trained.output
    sampled = invoke(runner, "sample", "skip/best.pt", "--length", "20", "--seed", "3", "--prime", "th")
    assert sampled.exit_code == 0 and sampled.stdout.startswith("th") and len(sampled.stdout) >= 22
    beamed = invoke(runner, "sample", "skip/best.pt", "--length", "10", "--beam-width", "3", "--prime", "th")
    assert beamed.exit_code == 0, beamed.output
    best = charrnn.load("skip").sample("th", 10, beam_width=3)
    assert beamed.stdout == best.text + "\n" and len(best.text) == 12
    scored = invoke(runner, "eval-perplexity", "skip/best.pt", "--json")
    assert json.loads(scored.stdout)["nats_per_char"] == pytest.approx(
        torch.load("skip/best.pt", weights_only=True)["best"]["nats_per_char"], rel=1e-6)
    described = invoke(runner, "info", "skip/best.pt")
    assert "with skip connections" in " ".join(described.stdout.replace("│", " ").split())


@pytest.mark.slow
def test_a_budgets_skip_connections_can_be_turned_off(runner, small_corpus, monkeypatch):
    slow_machine(monkeypatch, work_per_s=1e9)
    result = invoke(runner, "train", small_corpus, "--out", "run", "--time-budget", "3",
                    "--no-skip-connections")
    assert result.exit_code == 0, result.stderr
    assert "--skip-connections" not in result.stderr
    config = json.loads(Path("run/config.json").read_text())
    assert config["model"]["skip_connections"] is False
    # The rest of the budget's choice still applied.
    assert config["model"]["hidden_size"] in (128, 192, 256) and config["train"]["ema_decay"] > 0


@pytest.mark.slow
@needs_installed
def test_training_goes_on_quietly_when_the_reader_of_stderr_goes_away(small_corpus, tmp_path):
    """``charrnn train ... 2>&1 | head -1``: the run finishes and saves; nothing is lost."""
    arguments = ["train", str(small_corpus), "--out", str(tmp_path / "run"), "--hidden", "16",
                 "--layers", "1", "--max-steps", "200", "--eval-every", "10"]
    process = subprocess.Popen([str(INSTALLED), *arguments], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    process.stderr.readline()
    process.stderr.close()  # the reader is gone: every later note meets a closed pipe
    assert process.wait(timeout=120) == 0
    assert torch.load(tmp_path / "run" / "last.pt", weights_only=True)["step"] == 200


@pytest.mark.parametrize("command", ["train", "sample"])
@pytest.mark.parametrize("name", ["two\nlines.txt", "escape\x1b[2Jcodes.txt", "tab\tand\rreturn.txt"])
def test_a_path_with_control_characters_stays_on_one_quoted_line(tmp_path, name, command):
    result = run_cli(command, tmp_path / name)
    assert_one_line_error(result, code=1)
    assert len(result.stderr.splitlines()) == 1 and not {"\x1b", "\t", "\r"} & set(result.stderr)
    assert "\n" not in name or "two\\nlines.txt" in result.stderr


@pytest.mark.parametrize(("given", "held_out"), [("300", 300), ("none", None)])
def test_val_max_chars_caps_the_split_or_with_none_does_not(runner, small_corpus, given, held_out):
    result = invoke(runner, "train", small_corpus, *TINY_TRAIN, "--max-steps", "2", "-o", "val_max_chars",
                    given)
    assert result.exit_code == 0, result.output
    corpus = json.loads(Path("checkpoints/small/config.json").read_text())["corpus"]
    expected = corpus["chars"] - held_out if held_out else int(corpus["chars"] * 0.9)
    assert corpus["split_point"] == expected
    table = re.sub(r"[\s│]", "", result.stderr)
    assert ("characters:10%,capped" in table) == (held_out is not None)


@pytest.mark.parametrize(("damaged", "arguments"), [
    ("metrics.jsonl", ["plot", "{run}", "--output", "curves.png"]),
    ("samples.jsonl", ["compare", "{run}", "--evolution"]),
    ("config.json", ["train", "--resume", "{run}", "--max-steps", "30"]),
])
def test_a_run_file_nested_too_deeply_is_named_in_one_line(runner, small_corpus, damaged, arguments):
    if arguments[0] == "plot":
        pytest.importorskip("matplotlib")
    assert invoke(runner, "train", small_corpus, *TINY_TRAIN, "--max-steps", "20", "--sample-every", "10",
                  "--out", "run").exit_code == 0
    (Path("run") / damaged).write_text("[" * 200_000 + "\n", encoding="utf-8")
    refused = invoke(runner, *(argument.format(run="run") for argument in arguments))
    assert_one_line_error(refused, damaged, code=1)
    assert "unexpected" not in refused.stderr


@pytest.mark.slow
def test_bf16_asked_for_an_lstm_too_wide_for_it_warns(runner, small_corpus, cpu_bf16):
    cpu_bf16(True)
    result = invoke(runner, "train", small_corpus, "--out", "run", "--hidden", "800", "--embed", "8",
                    "--batch-size", "2", "--seq-len", "8", "--max-steps", "1", "--precision", "bf16",
                    "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "warning: --precision bf16 trains a 2×800 LSTM" in " ".join(result.stderr.split())


def test_the_help_lists_every_mode_whole_and_its_examples_can_be_typed_as_shown(runner):
    """A mode that is a flag (--evolution, --surprisal, --interactive) is in the list; no entry is cut."""
    shown = invoke(runner, "sample", "--help").stdout
    assert "--stop-at $'\\n\\n'" in shown  # bash passes a newline only with $'...'
    assert all(line == "" or line.startswith((" ", "Usage:")) or line.endswith(":")  # a group of options
               for line in shown.splitlines())
    result = runner.invoke(cli, ["--help"], terminal_width=80)
    commands = result.output.split("Commands:\n")[1].splitlines()
    assert len(commands) == len(cli.commands) and not any(line.endswith("...") for line in commands)
    listed = {line.split()[0]: line for line in commands}
    assert "--evolution" in listed["compare"] and "--surprisal" in listed["inspect"]
    assert "--interactive" in listed["sample"]


@pytest.mark.parametrize("value", ["2", "yes", " 1"])
def test_a_mistyped_cpu_bf16_setting_is_refused_by_every_command(runner, tiny_checkpoint, value):
    """Even by a command that has no use for it: a setting the user made is never silently ignored."""
    for args in (["info", str(tiny_checkpoint)], ["sample", str(tiny_checkpoint), "--length", "3"]):
        result = runner.invoke(cli, args, env={"CHARRNN_CPU_BF16": value})
        assert result.exit_code == 1
        assert result.stderr.strip() == (f"Error: CHARRNN_CPU_BF16 must be 0 (no native bfloat16) or 1 "
                                         f"(native bfloat16), not {value!r}; unset it to detect the "
                                         f"processor's")
