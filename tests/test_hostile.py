"""A hostile user's cases, as tables: each ends in one ``Error:`` line (or succeeds), never a traceback, and
leaves what the user had as it was. Crafted checkpoints mutate a real one; broken streams are real."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest.mock import Mock

import pytest
import torch

import charrnn
from charrnn.data import corpus as corpus_cache
from charrnn.errors import CharrnnError, ConfigTypeError
from charrnn.training.checkpoint import load_checkpoint
from charrnn.utils.files import TEMPORARY_GLOB

from helpers import INSTALLED, assert_one_line_error, needs_installed, run_cli, run_installed

TINY = ["--layers", "1", "--hidden", "16", "--embed", "8", "--batch-size", "4", "--seq-len", "16",
        "--eval-every", "5"]


# ------------------------------------------------------------------------------ crafted checkpoints


def _set(path: tuple, value: Any) -> Callable[[dict], None]:
    def mutate(payload: dict) -> None:
        target = payload
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


def _tensor(name: str, change: Callable[[torch.Tensor], Any]) -> Callable[[dict], None]:
    def mutate(payload: dict) -> None:
        payload["model_state"][name] = change(payload["model_state"][name])
    return mutate


CRAFTED_CHECKPOINTS = [
    ("format_version_as_a_string", _set(("format_version",), "1"), "format_version is '1' (a str)"),
    ("format_version_from_the_future", _set(("format_version",), 2), "format version 2"),
    ("model_config_as_a_string", _set(("model_config",), "lstm"), "model_config is 'lstm' (a str)"),
    ("model_config_as_a_list", _set(("model_config",), [1, 2]), "model_config is [1, 2] (a list)"),
    ("hidden_size_as_a_string", _set(("model_config", "hidden_size"), "32"), "model_config.hidden_size"),
    # a small file declaring a 160 GB model: refused before anything is allocated
    ("declared_hidden_size_of_100000", _set(("model_config", "hidden_size"), 100_000), "has shape"),
    ("cell_changed_to_gru", _set(("model_config", "cell"), "gru"), "has shape"),
    ("unknown_cell", _set(("model_config", "cell"), "transformer"), "model_config.cell"),
    ("vocab_with_a_lone_surrogate", _set(("vocab", 0), "\udcff"), "lone surrogate"),
    ("vocab_swapped_by_hand", lambda p: p["vocab"].reverse(), "vocab does not match vocab_digest"),
    ("vocab_of_the_wrong_length", lambda p: p["vocab"].pop(), "vocab has"),
    ("vocab_as_a_string", _set(("vocab",), "abc"), "vocab is 'abc' (a str)"),
    ("vocab_as_a_number", _set(("vocab",), 65), "vocab is 65 (an int)"),
    ("step_past_64_bits", _set(("step",), 10**400), "step is 1000"),
    ("a_negative_validation_score", _set(("best", "nats_per_char"), -1.0), "best is no score: -1.0 nats"),
    ("a_score_its_perplexity_belies", _set(("best", "perplexity"), 1.0), "and perplexity 1.0 over"),
    ("an_evaluation_after_the_step", _set(("latest_eval", "step"), 999), "latest_eval.step is 999; the "),
    ("more_skipped_steps_than_steps", _set(("skipped_steps",), 1000), "skipped_steps is 1,000; the "),
    ("a_corpus_hash_that_is_none", _set(("corpus", "sha256"), "zz"), "sha256 'zz': no text's record"),
    ("an_unknown_training_setting", _set(("train_config", "bogus"), 1), "train_config has 'bogus', which"),
    ("an_unknown_score_field", _set(("best", "zzz"), 1), "best has 'zzz', which this charrnn does not know"),
    ("a_training_setting_out_of_range", _set(("train_config", "learning_rate"), math.nan),
     "train_config.learning_rate must be"),
    ("training_weights_without_an_average", lambda p: p.update(training_weights=p["model_state"]),
     "training_weights are there, but best_is_average is not true"),
    ("a_model_setting_from_a_newer_charrnn", _set(("model_config", "attention"), True),
     "model_config has 'attention', which this charrnn does not know"),
    ("corpus_as_a_string", _set(("corpus",), "small.txt"), "corpus is 'small.txt' (a str)"),
    ("split_point_as_a_string", _set(("corpus", "split_point"), "5"), "corpus.split_point is '5'"),
    ("progress_epochs_as_a_string", _set(("progress_epochs",), "1.5"), "progress_epochs is '1.5'"),
    ("negative_step", _set(("step",), -1), "step is -1; expected 0 or more"),
    ("elapsed_time_not_a_number", _set(("elapsed_s",), float("nan")), "elapsed_s is nan; expected 0 or more"),
    ("infinite_progress", _set(("progress_epochs",), float("inf")), "progress_epochs is inf; expected 0"),
    ("latest_eval_without_its_step", lambda p: p["latest_eval"].pop("step"), "latest_eval.step is None"),
    ("step_as_a_bool", _set(("step",), True), "step is True (a bool)"),
    ("nan_weights", _tensor("head.weight", lambda t: torch.full_like(t, float("nan"))), "non-finite"),
    ("infinite_weights", _tensor("head.bias", lambda t: torch.full_like(t, float("inf"))), "non-finite"),
    ("integer_weights", _tensor("head.bias", lambda t: t.long()), "expected float16, bfloat16"),
    ("weight_missing", lambda p: p["model_state"].pop("head.bias"), "model_state lacks head.bias"),
    ("weight_of_the_wrong_shape", _tensor("head.weight", lambda t: t[:, :3]), "model_state['head.weight']"),
    ("weight_as_a_list", _tensor("head.bias", lambda t: t.tolist()), "expected a tensor"),
    ("unexpected_weight", _set(("model_state", "backdoor.weight"), torch.zeros(1)), "does not declare"),
    ("best_as_a_string", _set(("best",), "1.5"), "best is '1.5' (a str)"),
    ("carried_state_as_a_tensor", _set(("carried_state",), torch.zeros(2)), "carried_state is"),
]


@pytest.fixture
def craft(tiny_run: Path, tmp_path: Path) -> Callable[[Callable[[dict], None]], Path]:
    """A copy of the tiny run whose last.pt is mutated; returns the mutated checkpoint."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)

    def make(mutate: Callable[[dict], None]) -> Path:
        payload = torch.load(run / "last.pt", weights_only=True)
        mutate(payload)
        torch.save(payload, run / "last.pt")
        return run / "last.pt"

    return make


@pytest.mark.parametrize(("name", "mutate", "fragment"), CRAFTED_CHECKPOINTS,
                         ids=[row[0] for row in CRAFTED_CHECKPOINTS])
def test_a_crafted_checkpoint_is_refused_naming_the_bad_field(craft, name, mutate, fragment):
    checkpoint = craft(mutate)
    with pytest.raises(CharrnnError, match="is not a valid charrnn checkpoint") as refused:
        load_checkpoint(checkpoint)
    assert fragment in str(refused.value)
    for command in (["sample", checkpoint, "--length", "3"], ["eval-perplexity", checkpoint, "--json"],
                    ["train", "--resume", checkpoint, "--max-steps", "100"]):
        assert_one_line_error(run_cli(*command), fragment)


def test_a_checkpoint_without_a_corpus_record_samples_but_cannot_score_its_split_or_resume(craft):
    checkpoint = craft(lambda payload: payload.pop("corpus"))
    sampled = run_cli("sample", checkpoint, "--length", "3", "--prime", "R", "--seed", "1")
    assert sampled.exit_code == 0 and sampled.stdout.startswith("R") and len(sampled.stdout) == 1 + 3 + 1
    assert_one_line_error(run_cli("eval-perplexity", checkpoint), "records no training corpus")
    assert_one_line_error(run_cli("train", "--resume", checkpoint, "--max-steps", "100"), "corpus is missing")


def _damage_optimizer(key: str, value: Any) -> Callable[[dict], None]:
    """A mutation that sets ``key`` of the first parameter's AdamW state, or of its first group's."""
    def mutate(payload: dict) -> None:
        optimizer = payload["optimizer_state"]
        (optimizer["state"][0] if key in optimizer["state"][0] else optimizer["param_groups"][0])[key] = value
    return mutate


RNG_DAMAGED = "rng is not the Python, torch and CUDA"
OPTIMIZER_DAMAGED = "optimizer_state is not AdamW's state"
RESUME_CASES = [
    ("epoch_step_out_of_range", _set(("epoch_step",), 10**6), "epoch_step 1000000 is outside"),
    ("carried_state_of_the_wrong_shape", _set(("carried_state",), [torch.zeros(2, 3, 32)] * 2),
     "carried_state has shapes"),
    ("bad_python_rng_state", _set(("rng", "python"), [3, [1, 2, 3], None]), RNG_DAMAGED),
    ("python_rng_state_none", _set(("rng", "python"), None), RNG_DAMAGED),
    ("bad_torch_rng_state", _set(("rng", "torch"), torch.zeros(3, dtype=torch.uint8)), RNG_DAMAGED),
    ("cuda_rng_states_not_tensors", _set(("rng", "cuda"), [5]), RNG_DAMAGED),
    ("empty_optimizer_state", _set(("optimizer_state",), {}), OPTIMIZER_DAMAGED),
    ("optimizer_state_of_none", _set(("optimizer_state", "state"), None), OPTIMIZER_DAMAGED),
    # These load into AdamW and would fail only at the first step.
    ("optimizer_moment_of_the_wrong_shape", _damage_optimizer("exp_avg", torch.zeros(3)), OPTIMIZER_DAMAGED),
    ("optimizer_step_negative", _damage_optimizer("step", torch.tensor(-5.0)), OPTIMIZER_DAMAGED),
    ("optimizer_moment_not_finite", lambda p: p["optimizer_state"]["state"][0]["exp_avg"].fill_(float("nan")),
     OPTIMIZER_DAMAGED),
    ("optimizer_moment_of_integers", lambda p: p["optimizer_state"]["state"][0].update(
        exp_avg=p["optimizer_state"]["state"][0]["exp_avg"].long()), OPTIMIZER_DAMAGED),
    ("optimizer_state_of_one_parameter_dropped", lambda p: p["optimizer_state"]["state"].pop(0),
     OPTIMIZER_DAMAGED),
    ("carried_state_of_integers", lambda p: p.update(carried_state=[s.int() for s in p["carried_state"]]),
     "carried_state must hold finite float32 values"),
    ("no_rng", lambda p: p.pop("rng"), "rng is missing"),
]


def test_a_resume_takes_its_optimisers_settings_from_the_run_never_the_checkpoint(craft, tiny_run, tmp_path):
    shutil.copytree(tiny_run, tmp_path / "intact")
    damaged = craft(lambda payload: payload["optimizer_state"]["param_groups"][0].update(
        betas=(2.0, 0.999), eps=-1.0, maximize=True, weight_decay=10**400))
    resumed = []
    for checkpoint, out in ((damaged, "from_damaged"), (tmp_path / "intact" / "last.pt", "from_intact")):
        done = run_cli("train", "--resume", checkpoint, "--max-steps", "44", "--out", tmp_path / out)
        assert done.exit_code == 0, done.output
        resumed.append(torch.load(tmp_path / out / "last.pt", weights_only=True))
    weights = resumed[1]["model_state"]
    assert all(torch.equal(resumed[0]["model_state"][key], value) for key, value in weights.items())
    assert resumed[0]["optimizer_state"]["param_groups"] == resumed[1]["optimizer_state"]["param_groups"]


@pytest.mark.parametrize(("name", "mutate", "fragment"), RESUME_CASES, ids=[row[0] for row in RESUME_CASES])
def test_resuming_a_crafted_checkpoint_is_refused_before_it_is_told_and_changes_none(craft, name, mutate,
                                                                                   fragment):
    checkpoint = craft(mutate)
    before = {path.name: path.read_bytes() for path in checkpoint.parent.iterdir()}
    refused = run_cli("train", "--resume", checkpoint, "--max-steps", "100")
    assert_one_line_error(refused, fragment)
    assert not any(line.startswith("resuming") for line in refused.stderr.splitlines())
    assert "object" not in refused.stderr  # Python's words, as in "'NoneType' object has no attribute"
    assert {path.name: path.read_bytes() for path in checkpoint.parent.iterdir()} == before


# ----------------------------------------------------------------------------------- bad inputs


def _write(path: str, content: bytes) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        (root / path).parent.mkdir(exist_ok=True)
        (root / path).write_bytes(content)
    return make


def _fifo(root: Path) -> None:
    os.mkfifo(root / "fifo.txt")


def _loop(root: Path) -> None:
    (root / "a.txt").symlink_to(root / "b.txt")
    (root / "b.txt").symlink_to(root / "a.txt")


CORPUS = _write("c.txt", b"abc " * 500)
PLOT, METRICS = ["plot", "run", "--output", "p.png"], "run/metrics.jsonl"
BAD_INPUTS = [
    # (name, setup or None, arguments with CKPT for the tiny checkpoint, fragment of the one error line)
    ("invalid_utf8_prime", None, ["sample", "CKPT", "--prime", "ab\udcff"], "not valid UTF-8 (byte 0xff)"),
    ("invalid_utf8_prime_in_beam_search", None,
     ["sample", "CKPT", "--prime", "ab\udcff", "--beam-width", "2"], "not valid UTF-8 (byte 0xff)"),
    ("invalid_utf8_prime_in_compare", None, ["compare", "CKPT", "--prime", "ab\udcff"],
     "'--prime': is not valid UTF-8 (byte 0xff)"),
    ("invalid_utf8_stop_string", None, ["sample", "CKPT", "--stop-at", "\udcfe"],
     "'--stop-at': is not valid"),
    ("seed_beyond_64_bits_in_sample", None, ["sample", "CKPT", "--seed", str(2**64)], "'--seed': must be"),
    ("hidden_of_a_million", CORPUS, ["train", "c.txt", "--hidden", "1000000"], "GiB (weights, gradients"),
    ("embedding_of_a_billion", CORPUS, ["train", "c.txt", "--embed", "1000000000"],
     "must be at most 16,777,216"),
    ("hidden_of_a_billion", CORPUS, ["train", "c.txt", "--hidden", "1000000000"],
     "must be at most 16,777,216"),
    ("spectral_radius_1e308", CORPUS, ["train", "c.txt", "-o", "init", "esn", "-o", "spectral_radius",
                                       "1e308"], "'-o spectral_radius': must be in"),
    ("out_is_an_existing_file", CORPUS, ["train", "c.txt", "--out", "c.txt"], "is a file, not a directory"),
    ("out_is_a_device", CORPUS, ["train", "c.txt", "--out", "/dev/null"], "is a file, not a directory"),
    ("corpus_is_a_fifo", _fifo, ["train", "fifo.txt"], "is not a regular file"),
    ("corpus_is_dev_zero", None, ["train", "/dev/zero"], "is not a regular file"),
    ("corpus_is_a_symlink_loop", _loop, ["train", "a.txt"], "symbolic links"),
    ("text_to_score_is_a_fifo", _fifo, ["eval-perplexity", "CKPT", "fifo.txt"], "is not a regular file"),
    ("prime_file_is_a_fifo", _fifo, ["sample", "CKPT", "--prime-file", "fifo.txt"], "is not a regular file"),
    ("dataset_target_is_a_directory", lambda r: (r / "data/tinyshakespeare/input.txt").mkdir(parents=True),
     ["data", "get", "--data-dir", "data"], "it is a directory"),
    ("metrics_line_without_keys", _write(METRICS, b'{"step": 1}\n'), PLOT,
     "line 1 is not an evaluation record: it lacks epoch"),
    ("metrics_line_a_bare_number", _write(METRICS, b"3\n"), PLOT, "line 1 is not an evaluation record"),
    ("metrics_not_utf8", _write(METRICS, b"\xff\xfe\n"), PLOT, "is not UTF-8"),
    ("a_text_file_as_checkpoint", _write("c.txt", b"abc"), ["sample", "c.txt"],
     "c.txt is not a charrnn checkpoint (not a file that torch.save wrote)"),
]


@pytest.mark.parametrize(("name", "setup", "args", "fragment"), BAD_INPUTS,
                         ids=[row[0] for row in BAD_INPUTS])
def test_bad_input_is_one_error_line(tiny_checkpoint, tmp_path, monkeypatch, name, setup, args, fragment):
    monkeypatch.chdir(tmp_path)
    if setup:
        setup(tmp_path)
    if args[0] == "plot":
        pytest.importorskip("matplotlib")
    args = [str(tiny_checkpoint) if arg == "CKPT" else arg for arg in args]
    assert_one_line_error(run_cli(*args), fragment)


@pytest.mark.parametrize(("variables", "fragment"), [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' is not a whole number"),
    ({"WORLD_SIZE": "2", "RANK": None}, "RANK is not"),
])
def test_a_broken_torchrun_environment_is_one_error_line(small_corpus, tmp_path, variables, fragment):
    result = run_cli("train", small_corpus, *TINY, "--max-steps", "2", "--out", tmp_path / "run",
                     env=variables)
    assert_one_line_error(result, fragment)


@pytest.mark.parametrize("option", [["--temperature", "1e-45"], ["--temperature", "1e-300"],
                                    ["--top-p", "1e-300"]])
def test_a_vanishing_temperature_or_top_p_samples_like_greedy(tiny_checkpoint, option):
    cold = run_cli("sample", tiny_checkpoint, *option, "--length", "40", "--seed", "1")
    greedy = run_cli("sample", tiny_checkpoint, "--greedy", "--length", "40")
    assert cold.exit_code == 0 and greedy.exit_code == 0, cold.output + greedy.output
    assert cold.stdout == greedy.stdout and len(cold.stdout.rstrip("\n")) == 40


@pytest.mark.slow
def test_a_five_megabyte_prime_runs_in_bounded_memory(tiny_checkpoint, tmp_path):
    vocab = torch.load(tiny_checkpoint, weights_only=True)["vocab"]
    line = "".join(ch for ch in vocab if ch.isalpha()) + "\n"
    (tmp_path / "prime.txt").write_text(line * (5_000_000 // len(line)), encoding="utf-8")
    (tmp_path / "short.txt").write_text(line, encoding="utf-8")
    peaks = {name: peak_memory("sample", tiny_checkpoint, "--prime-file", tmp_path / name, "--length", "5",
                               "--num-samples", "2", "--output", tmp_path / f"out-{name}")
             for name in ("short.txt", "prime.txt")}
    texts = (tmp_path / "out-prime.txt").read_text(encoding="utf-8").split("=== sample ")
    assert [text.split("\n", 1)[1][: len(line) * 3] for text in texts[1:]] == [line * 3] * 2
    # The whole prime's activations would take gigabytes: the prime is read in chunks, so the texts
    # themselves (2 × 5 MB, a few copies) are what it adds.
    assert peaks["prime.txt"] - peaks["short.txt"] < 400 * 2**20


def peak_memory(*arguments: Any) -> int:
    """The largest resident memory, in bytes, of ``charrnn ARGUMENTS`` run as a process of its own."""
    report = ("import resource, runpy, sys\nsys.argv[0] = 'charrnn'\ntry:\n"
              "    runpy.run_module('charrnn', run_name='__main__')\nfinally:\n"
              "    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n")
    result = subprocess.run([sys.executable, "-c", report, *map(str, arguments)], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    return int(result.stderr.splitlines()[-1]) * 1024  # Linux reports kilobytes


def test_perplexity_saturates_to_infinity_and_json_stays_valid(craft, small_corpus):
    checkpoint = craft(_tensor("head.weight", lambda t: t * 1e4))
    result = run_cli("eval-perplexity", checkpoint, small_corpus, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # strict JSON: no NaN or Infinity
    assert report["nats_per_char"] > 709 and report["perplexity"] is None


def test_an_overwrite_that_crashes_before_its_first_write_leaves_the_old_run_whole(
        small_corpus, tmp_path, monkeypatch):
    out = tmp_path / "run"
    assert run_cli("train", small_corpus, *TINY, "--max-steps", "10", "--out", out).exit_code == 0
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    failure = CharrnnError("the evaluation failed")  # as an overflow in the first evaluation once did
    monkeypatch.setattr("charrnn.training.loop.evaluate", Mock(side_effect=failure))
    failed = run_cli("train", small_corpus, *TINY, "--max-steps", "50", "--out", out, "--overwrite",
                     "--seed", "2")
    assert_one_line_error(failed, "the evaluation failed")
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def test_a_diverging_run_finishes_with_valid_metrics(small_corpus, tmp_path):
    out = tmp_path / "run"
    result = run_cli("train", small_corpus, *TINY, "--max-steps", "20", "--out", out, "--lr", "100",
                     "--clip", "0", "-o", "warmup_steps", "0", "--eval-every", "10")
    # It either survives the huge steps or stops on non-finite ones with one line that says so.
    if result.exit_code != 0:
        assert_one_line_error(result, "consecutive steps had a non-finite loss or gradient", code=1)
    records = [json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in metrics.jsonl"))
               for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [record["step"] for record in records] == [10, 20][:len(records)] and records


def test_beam_search_says_when_fewer_beams_exist_than_asked(tmp_path):
    corpus = tmp_path / "a.txt"
    corpus.write_text("a" * 2000, encoding="utf-8")
    assert run_cli("train", corpus, *TINY, "--max-steps", "2", "--out", tmp_path / "run").exit_code == 0
    result = run_cli("sample", tmp_path / "run" / "best.pt", "--beam-width", "3", "--num-samples", "3",
                     "--length", "5")
    assert result.exit_code == 0, result.output
    assert "only 1 distinct continuation" in result.stderr
    assert result.stdout == "aaaaa\n"  # the one text there is, under no header
    beams = charrnn.sample(tmp_path / "run" / "best.pt", "", 5, beam_width=3, num_samples=3)
    assert beams.texts == ["aaaaa"] and beams.log_probs == [0.0]  # one symbol: each is certain


def test_ctrl_c_while_sampling_or_sigterm_while_encoding_is_one_error_line_and_leaves_no_temporary(
        tiny_checkpoint, small_corpus, tmp_path, monkeypatch):
    monkeypatch.setattr("charrnn.generation.sample.generate", Mock(side_effect=KeyboardInterrupt))
    result = run_cli("sample", tiny_checkpoint)
    assert_one_line_error(result, "interrupted by SIGINT", code=130)
    assert "Aborted!" not in result.output
    cache = tmp_path / "cache"
    monkeypatch.setenv(corpus_cache.CACHE_DIR_ENV, str(cache))
    real_lookup = corpus_cache.Vocab.lookup

    def terminated_midway(self, points):
        os.kill(os.getpid(), signal.SIGTERM)
        return real_lookup(self, points)

    monkeypatch.setattr(corpus_cache.Vocab, "lookup", terminated_midway)
    result = run_cli("eval-perplexity", tiny_checkpoint, small_corpus)
    assert_one_line_error(result, "interrupted by SIGTERM", code=143)
    assert not list(cache.glob(TEMPORARY_GLOB)) and not list(cache.glob("*.uint8"))


# --------------------------------------------------------------------------- output destinations


def _destination(kind: str, root: Path) -> Path:
    """An output path of a hostile ``kind`` under ``root``, where real.txt holds "old"; or a device."""
    (root / "real.txt").write_text("old")
    links = {"symlink": "real.txt", "dangling_symlink": "nowhere.txt", "symlink_loop": "loop.txt"}
    if kind in links:
        (root / "link.txt").symlink_to(root / links[kind])
        if kind == "symlink_loop":
            (root / "loop.txt").symlink_to(root / "link.txt")
        return root / "link.txt"
    if kind == "hard_link":
        os.link(root / "real.txt", root / "twin.txt")
    return {"absent": root / "new.txt", "regular": root / "real.txt", "hard_link": root / "real.txt",
            "directory": root, "under_a_file": root / "real.txt" / "out.txt",
            "missing_parent": root / "no" / "such" / "out.txt"}.get(kind, Path(f"/dev/{kind}"))


# kind: (the file the output lands in, or None; the one error line's fragment where it is refused, or None)
DESTINATIONS = {
    "absent": ("new.txt", None), "regular": ("real.txt", None), "symlink": ("real.txt", None),
    "dangling_symlink": ("nowhere.txt", None), "hard_link": ("real.txt", None), "null": (None, None),
    "symlink_loop": (None, "Too many levels of symbolic links"),
    "directory": (None, "must name a file, not a directory"), "under_a_file": (None, "there is no directory"),
    "missing_parent": (None, "there is no directory"), "full": (None, "No space left on device"),
}
OUTPUT_OPTIONS = {
    "sample": lambda ckpt, dest: ["sample", ckpt, "--prime", "ROMEO", "--length", "5", "--output", dest],
    "compare": lambda ckpt, dest: ["compare", ckpt, "--prime", "ROMEO", "--length", "5", "--markdown", dest],
    "inspect": lambda ckpt, dest: ["inspect", ckpt, "TEXT", "--unit", "0", "--html", dest],
}


@pytest.mark.parametrize("command", sorted(OUTPUT_OPTIONS))
@pytest.mark.parametrize("kind", sorted(DESTINATIONS))
def test_an_output_destination_is_respected(tiny_checkpoint, small_corpus, tmp_path, command, kind):
    """Written through a link, under a hard link's one name (whole, never torn), or to a device; or refused
    in one line that changes nothing. Links and devices stay what they were."""
    written, refusal = DESTINATIONS[kind]
    target = _destination(kind, tmp_path)
    before = sorted(path.name for path in tmp_path.iterdir())
    args = OUTPUT_OPTIONS[command](tiny_checkpoint, target)
    result = run_cli(*[small_corpus if arg == "TEXT" else arg for arg in args])
    if refusal:
        assert_one_line_error(result, refusal)
        assert sorted(path.name for path in tmp_path.iterdir()) == before
    else:
        assert result.exit_code == 0, result.output
    if written:
        assert (tmp_path / written).read_text(encoding="utf-8") not in ("", "old")
    assert ((tmp_path / "real.txt").read_text() == "old") == (written != "real.txt")
    assert target.is_symlink() == ("symlink" in kind)
    assert target.is_char_device() == (kind in ("null", "full"))
    assert kind != "hard_link" or (tmp_path / "twin.txt").read_text() == "old"
    assert not list(tmp_path.rglob(TEMPORARY_GLOB))


# ------------------------------------------------------------------- broken standard streams, for real


def run_with_closed(fd: int, *args: Any, **kwargs) -> subprocess.CompletedProcess:
    """The installed ``charrnn ARGS``, started with file descriptor ``fd`` (1: stdout, 2: stderr) closed."""
    closer = f"import os, sys; os.close({fd}); os.execv(sys.argv[1], sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", closer, str(INSTALLED), *map(str, args)], text=True,
                          timeout=120, **kwargs)


STDOUT_COMMANDS = {
    "sample": lambda ckpt: ["sample", ckpt, "--prime", "ROMEO", "--length", "50", "--seed", "1"],
    "eval": lambda ckpt: ["eval-perplexity", ckpt, "--json"],
    "compare": lambda ckpt: ["compare", ckpt, "--length", "20"],
    "help": lambda ckpt: ["--help"],
}


@pytest.mark.slow
@needs_installed
@pytest.mark.parametrize(("command", "closed"), [*((name, False) for name in sorted(STDOUT_COMMANDS)),
                                                 *((name, True) for name in ("sample", "eval", "compare"))])
def test_a_full_or_closed_stdout_is_one_error_line_not_a_lost_result(tiny_checkpoint, command, closed,
                                                                     tmp_path):
    """Closed, the advice names --output only where the command has it, and following it works."""
    args = STDOUT_COMMANDS[command](tiny_checkpoint)
    advice = " (or use --output)" if command == "sample" else ""
    if closed:
        result = run_with_closed(1, *args, stderr=subprocess.PIPE)
        said = f"standard output is closed; redirect it to a file{advice}"
    else:
        with open("/dev/full", "w") as full:
            result = run_installed(*args, stdout=full)
        said = "cannot write to standard output: No space left on device"
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [f"Error: {said}"], result.stderr
    if closed and advice:
        followed = run_with_closed(1, *args, "--output", tmp_path / "out.txt", stderr=subprocess.PIPE)
        assert followed.returncode == 0, followed.stderr
        assert (tmp_path / "out.txt").read_text(encoding="utf-8")


@pytest.mark.slow
@needs_installed
def test_an_ascii_stdout_with_a_non_ascii_model_is_one_error_line(tiny_checkpoint):
    result = run_installed("sample", tiny_checkpoint, "--prime", "Café", "--length", "5",
                           env={"PYTHONIOENCODING": "ascii"})
    assert_one_line_error(result, "Error: standard output (ascii) cannot represent", code=1)


@pytest.mark.slow
@needs_installed
def test_with_stderr_closed_the_error_never_reaches_stdout(tmp_path):
    result = run_with_closed(2, "sample", "nope.pt", stdout=subprocess.PIPE, cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""


@pytest.mark.slow
def test_plot_writes_through_a_symlink_and_reports_a_full_device(tiny_run, tmp_path):
    pytest.importorskip("matplotlib")
    real = tmp_path / "real.png"
    real.write_bytes(b"old")
    link = tmp_path / "link.png"
    link.symlink_to(real)
    assert run_cli("plot", tiny_run, "--output", link).exit_code == 0
    assert link.is_symlink() and real.read_bytes().startswith(b"\x89PNG")
    assert_one_line_error(run_cli("plot", tiny_run, "--output", "/dev/full"), "No space left on device")
    assert Path("/dev/full").is_char_device()


@pytest.mark.parametrize("arguments", [
    ["compare", "{run}/best.pt", "--markdown", "{corpus}"],
    ["compare", "{run}/best.pt", "--against", "train", "--markdown", "{link}"],
    ["sample", "{run}", "--output", "{corpus}"],
    ["inspect", "{run}/best.pt", "{other}", "--unit", "0", "--html", "{link}"],
])
def test_an_output_onto_the_corpus_a_checkpoint_was_trained_on_is_refused(small_corpus, tmp_path, arguments):
    run = tmp_path / "run"
    run_cli("train", small_corpus, "--out", run, "--max-steps", "2", "--hidden", "8", "--layers", "1")
    (tmp_path / "link.txt").symlink_to(small_corpus)
    other = tmp_path / "other.txt"
    other.write_text("some other text to read\n")
    before = small_corpus.read_bytes()
    names = {"run": run, "corpus": small_corpus, "link": tmp_path / "link.txt", "other": other}
    result = run_cli(*[argument.format(**names) for argument in arguments])
    assert_one_line_error(result, "writing it would destroy what is read", code=2)
    assert small_corpus.read_bytes() == before


# ----------------------------------------------------------------- a run's own names, FIFOs, stale states


@pytest.fixture
def small_run(small_corpus, tmp_path, make_run) -> Path:
    return make_run(small_corpus, tmp_path / "run", max_steps=6, eval_every=3).out_dir


@pytest.mark.parametrize("name", [".charrnn.lock", "epoch0002-val1.0000.pt", "other.pt",
                                  ".charrnn-123-last.pt.tmp", "through a link"])
def test_an_output_never_takes_a_name_the_run_directory_keeps(small_run, tmp_path, name):
    destination = small_run / name
    if name == "through a link":
        destination = tmp_path / "link.txt"
        destination.symlink_to(small_run / "epoch0001-val9.9999.pt")
    result = run_cli("sample", small_run, "--length", "5", "--output", destination)
    assert_one_line_error(result, "keeps for its own files", code=2)
    assert not (small_run / name).exists() and not (small_run / "epoch0001-val9.9999.pt").exists()


def test_an_output_inside_a_directory_corpus_is_refused(tmp_path):
    corpus = tmp_path / "texts"
    corpus.mkdir()
    (corpus / "a.txt").write_text("a small corpus of text, repeated to train on.\n" * 60)
    run_cli("train", corpus, "--out", tmp_path / "run", "--max-steps", "2", "--hidden", "8", "--layers", "1")
    result = run_cli("sample", tmp_path / "run", "--length", "5", "--output", corpus / "sample.txt")
    assert_one_line_error(result, "inside the corpus directory", code=2)
    assert not (corpus / "sample.txt").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["config.json", "metrics.jsonl", "last.pt"])
def test_a_fifo_at_a_name_the_run_keeps_never_blocks(small_run, name):
    """Refused in one line, never waited on: not even a log the run would rewrite is replaced."""
    (small_run / name).unlink()
    os.mkfifo(small_run / name)
    arguments = ["train", "--resume", str(small_run / "best.pt"), "--max-steps", "9"]
    process = subprocess.run([sys.executable, "-m", "charrnn", *arguments], capture_output=True, text=True,
                             timeout=120)
    assert_one_line_error(process, code=1)
    assert (small_run / name).is_fifo()


@pytest.mark.parametrize(("make", "refusal", "kept"), [
    (os.mkfifo, "not a regular file", stat.S_ISFIFO),
    (lambda target: target.symlink_to(target.parent / "nowhere"), "a symbolic link to nothing", stat.S_ISLNK),
], ids=["fifo", "dangling link"])
def test_a_fifo_or_dangling_link_where_the_dataset_goes_is_refused_or_set_aside(tmp_path, data_mirror, make,
                                                                                refusal, kept):
    """In a process of its own: a FIFO opened for reading would block."""
    target = tmp_path / "tinyshakespeare" / "input.txt"
    target.parent.mkdir()
    make(target)
    get = [sys.executable, "-m", "charrnn", "data", "get", "--data-dir", str(tmp_path)]
    assert_one_line_error(subprocess.run(get, capture_output=True, text=True, timeout=120), refusal, code=1)
    forced = subprocess.run([*get, "--force"], capture_output=True, text=True, timeout=120)
    assert forced.returncode == 0, forced.stderr
    assert kept(os.lstat(target.with_name("input.txt.kept-1")).st_mode)
    assert stat.S_ISREG(os.lstat(target).st_mode)


def test_a_run_stopped_before_its_config_was_written_resumes(small_corpus, tmp_path, make_run):
    """kill -9 between a new run's first checkpoint and its config.json: the run still resumes in place."""
    run = make_run(small_corpus, tmp_path / "run", max_steps=3, eval_every=3).out_dir
    for name in ("config.json", "metrics.jsonl", "last.pt"):
        (run / name).unlink()  # as the directory stood after best.pt alone was saved
    result = run_cli("train", "--resume", run, "--max-steps", "6")
    assert result.exit_code == 0, result.output
    assert torch.load(run / "last.pt", weights_only=True)["step"] == 6


def test_a_users_file_named_like_a_temporary_is_kept_and_a_directory_at_a_run_files_name_refused(small_run):
    note = small_run / ".charrnn-notes.tmp"
    note.write_text("mine")
    assert run_cli("train", "--resume", small_run, "--max-steps", "8").exit_code == 0
    assert note.read_text() == "mine"
    (small_run / "metrics.jsonl").unlink()
    (small_run / "metrics.jsonl").mkdir()
    result = run_cli("train", "--resume", small_run, "--max-steps", "9")
    assert_one_line_error(result, "is a directory where the run keeps its metrics.jsonl")  # before training


def test_notes_quoting_a_path_stay_on_one_line(small_corpus, tmp_path, make_run):
    run = make_run(small_corpus, tmp_path / "a\nrun\x1b[2J", max_steps=2).out_dir
    resumed = run_cli("train", "--resume", run, "--max-steps", "3")
    assert resumed.exit_code == 0 and "\x1b" not in resumed.stderr
    assert any(line.startswith("resuming ") and "a\\nrun" in line for line in resumed.stderr.splitlines())


def test_a_path_like_that_is_no_path_is_a_type_error():
    class NotAPath:
        def __fspath__(self):
            return 3

    with pytest.raises(ConfigTypeError):
        charrnn.train(NotAPath(), max_steps=1)


@pytest.mark.slow
@needs_installed
@pytest.mark.parametrize("columns", ["0", "5"])
def test_a_terminal_said_to_be_narrow_still_gets_the_results(tiny_checkpoint, small_corpus, columns):
    for args in (["info", tiny_checkpoint], ["eval-perplexity", tiny_checkpoint, "--device", "cpu"]):
        result = run_installed(*args, env={"COLUMNS": columns})
        assert result.returncode == 0, result.stderr
        assert "parameters" in result.stdout or "nats/char" in result.stdout, result.stdout
        assert max(map(len, result.stdout.splitlines())) >= 40
    ranked = run_installed("inspect", tiny_checkpoint, small_corpus, "--surprisal", "--most-surprising", "2",
                           env={"COLUMNS": columns})
    whole = re.findall(r"│\s+\d+\.\d\d\s+│\s+\d+\.\d\d%\s+│", ranked.stdout)  # nats and p, uncut
    assert ranked.returncode == 0 and len(whole) == 2, ranked.stdout
    assert ranked.stdout.count("[") >= 2  # and each character marked


@pytest.mark.slow
@needs_installed
@pytest.mark.parametrize("environment", [{"NO_COLOR": "1"}, {"TERM": "dumb"}, {}],
                         ids=["NO_COLOR", "dumb", "pipe"])
def test_where_colour_carries_a_result_and_none_is_shown_the_output_says_so(tiny_checkpoint, small_corpus,
                                                                            tmp_path, environment):
    """stdout is a pipe in every case here (no colour); NO_COLOR and TERM=dumb are what a terminal says."""
    for mode in (["--surprisal"], ["--unit", "0"]):
        result = run_installed("inspect", tiny_checkpoint, small_corpus, *mode, env=environment)
        assert result.returncode == 0, result.stderr
        assert "note: colour carries" in result.stderr and "--json or --html keep it" in result.stderr
        assert "nats and beyond" not in result.stdout  # no legend of shades nobody sees
    result = run_installed("inspect", tiny_checkpoint, small_corpus, "--surprisal", "--most-surprising", "3",
                           env=environment)
    assert result.returncode == 0 and result.stdout.count("[") >= 3, result.stdout  # each marked
    with_page = run_installed("inspect", tiny_checkpoint, small_corpus, "--surprisal", "--html",
                              tmp_path / "p.html", env=environment)
    assert "note: colour" not in with_page.stderr  # the page keeps the colours
