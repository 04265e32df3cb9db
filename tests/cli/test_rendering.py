"""The command line against a fake API (llm's MockModel pattern): what it passes in, and how it renders
what comes back. Fast and exact, because no model runs: the commands only parse, call and print."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from charrnn import api
from charrnn.cli.main import cli
from charrnn.cli.train import PROCESS_EXIT_S
from charrnn.config import ModelConfig, TrainConfig
from charrnn.errors import ConfigError, OptionConflict, option
from charrnn.models.evaluate import EvalResult
from charrnn.training.plan import TrainResult
from charrnn.training.schedule import StopReason


class FakeAPI:
    """Records each call and returns a canned result."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.calls: list[tuple[str, tuple, dict]] = []
        self.monkeypatch = monkeypatch

    def answer(self, name: str, result=None, error: Callable[[], Exception] | None = None) -> None:
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            if error is not None:
                raise error()  # made when raised, as the library makes its errors
            return result() if callable(result) else result

        self.monkeypatch.setattr(api, name, call)


@pytest.fixture
def fake(monkeypatch) -> FakeAPI:
    return FakeAPI(monkeypatch)


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="charrnn")


SCORE = EvalResult(1.25, 1.25 / math.log(2), math.exp(1.25), 999)


def test_sample_streams_the_text_and_says_the_drawn_seed(fake):
    fake.answer("stream", lambda: api.SampleStream("AB", 7, True, iter("cd"), Path("run/best.pt")))
    result = invoke("sample", "run", "--prime", "AB", "--temperature", "0.5")
    assert result.exit_code == 0, result.output
    assert result.stdout == "ABcd\n"
    assert result.stderr.splitlines() == ["using run/best.pt",
                                          "seed 7 (give --seed 7 to draw the same text again)"]
    (name, args, kwargs), = fake.calls
    assert (name, args) == ("stream", ("run", "AB"))
    assert kwargs["temperature"] == 0.5 and kwargs["top_k"] is None and kwargs["device"] == "cpu"


def test_beams_print_their_texts_and_their_scores(fake):
    fake.answer("sample", api.Samples(["AB-x", "AB-y"], None, False, [-1.5, -2.25], [True, False],
                                      ["only 2 distinct continuations"], Path("best.pt")))
    result = invoke("sample", "best.pt", "--prime", "AB", "--beam-width", "3", "--num-samples", "2", "--json")
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"text": "AB-x", "log_prob": -1.5, "stopped": True},
        {"text": "AB-y", "log_prob": -2.25, "stopped": False}]
    assert result.stderr.splitlines() == ["note: only 2 distinct continuations",
                                          "beam 1: log-prob -1.5000 (stopped)", "beam 2: log-prob -2.2500"]


def test_eval_perplexity_json_is_the_results_dict(fake):
    scored = api.TextScore("held_out.txt", SCORE, {"Ω": 2}, None, None, 0.5, Path("best.pt"))
    fake.answer("perplexity", scored)
    result = invoke("eval-perplexity", "best.pt", "held_out.txt", "--json", "--skip-unknown")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == scored.to_dict()
    assert "skipped 2 characters outside the vocabulary" in result.stderr
    table = invoke("eval-perplexity", "best.pt", "held_out.txt", "--skip-unknown")
    assert "1.2500" in table.stdout and "held_out.txt" in table.stdout
    kwargs = fake.calls[0][2]
    assert kwargs["file"] == "held_out.txt" and kwargs["skip_unknown"] is True
    assert kwargs["dynamic"] is False and kwargs["dynamic_lr"] is None and kwargs["device"] == "auto"


def test_train_passes_only_what_was_given_and_prints_the_results_dict(fake, tmp_path):
    done = TrainResult(tmp_path, 12, 0.5, SCORE, False, 3.0, StopReason("max_steps", 12), 0, [],
                       ModelConfig(vocab_size=5), TrainConfig(out_dir=str(tmp_path)))
    fake.answer("train", done)
    result = invoke("train", "c.txt", "--max-steps", "12", "--hidden", "64", "-o", "warmup_steps", "0",
                    "-o", "layer_norm", "yes", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads(json.dumps(done.to_dict()))
    (_, args, kwargs), = fake.calls
    assert args == ("c.txt",)
    engine = ("observer", "started", "finish_s")
    assert {key: value for key, value in kwargs.items() if key not in engine} == {
        "max_steps": 12, "hidden_size": 64, "warmup_steps": 0, "layer_norm": True}
    assert kwargs["finish_s"] == PROCESS_EXIT_S  # a budget keeps time for the interpreter's exit
    assert 0 < time.perf_counter() - kwargs["started"] < 60  # when the command began: a budget counts from it
    summary = invoke("train", "c.txt", "--max-steps", "12")
    assert "reached --max-steps 12" in " ".join(summary.stdout.replace("│", " ").split())


@pytest.mark.parametrize(("error", "shown"), [
    (lambda: ConfigError("must be at least 1", "max_steps"),
     "Error: Invalid value for '--max-steps': must be at least 1 (see 'charrnn train --help')"),
    (lambda: OptionConflict(f"{option('init_from')} starts a new run and {option('resume')} continues one: "
                            f"give one of them"),
     "Error: --init-from starts a new run and --resume continues one: give one of them "
     "(see 'charrnn train --help')"),
    (lambda: ConfigError("must be a number", "warmup_steps"),
     "Error: Invalid value for '-o warmup_steps': must be a number (see 'charrnn train --help')"),
])
def test_library_refusals_name_the_options_as_the_command_line_writes_them(fake, error, shown):
    fake.answer("train", error=error)
    result = invoke("train", "c.txt")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [shown]


def test_a_bad_advanced_setting_is_refused_before_the_library_is_called(fake):
    fake.answer("train", None)
    for args, shown in ((["-o", "warmup", "1"], "'warmup' is not one of init, forget_bias"),
                        (["-o", "layer_norm", "maybe"],
                         "Invalid value for '-o layer_norm': 'maybe' is not true or false")):
        result = invoke("train", "c.txt", *args)
        assert result.exit_code == 2 and shown in result.stderr, result.output
    assert fake.calls == []
