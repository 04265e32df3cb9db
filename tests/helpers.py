"""Builders the test modules share (fixtures that use them live in conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner, Result

from charrnn.cli.main import cli
from charrnn.config import ModelConfig, TrainingRequest
from charrnn.data.vocab import Vocab
from charrnn.models.model import CharRNN
from charrnn.training.plan import TrainingPlan, plan_training

CELLS = ["lstm", "gru", "rnn"]

# The charrnn command installed beside this interpreter, for tests that run it as a real process.
INSTALLED = Path(sys.executable).with_name("charrnn")
needs_installed = pytest.mark.skipif(not INSTALLED.exists(), reason="charrnn is not installed here")


def run_installed(*args: Any, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    """The installed ``charrnn ARGS`` as a process of its own, ``env`` added to this one's; its output is
    captured as text unless ``stdout`` or ``stderr`` say otherwise."""
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run([str(INSTALLED), *map(str, args)], text=True, env={**os.environ, **(env or {})},
                          timeout=300, **streams)


def run_cli(*args: Any, env: dict[str, str] | None = None) -> Result:
    """``charrnn ARGS`` run in this process by click's test runner, ``env`` added to this one's."""
    return CliRunner().invoke(cli, [str(arg) for arg in args], env=env)


def assert_one_line_error(result: Any, fragment: str = "", code: int | None = None) -> None:
    """``result`` (of :func:`run_cli`, or a finished process) failed, with ``code`` where given, in one
    ``Error:`` line holding ``fragment``: the last line of its standard error, after no traceback."""
    exception = getattr(result, "exception", None)
    assert exception is None or isinstance(exception, SystemExit), repr(exception)
    status = result.returncode if isinstance(result, subprocess.CompletedProcess) else result.exit_code
    assert status != 0 if code is None else status == code, result.stderr
    assert "Traceback" not in getattr(result, "output", result.stderr), result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("Error: ") and fragment in lines[-1], result.stderr
    assert sum(line.startswith("Error") for line in lines) == 1, result.stderr

# The device tests train, sample and score on: a CUDA GPU where one is present, so that a GPU machine runs
# the whole suite on it, else the CPU. Tests of CPU-only behaviour name "cpu" themselves.
TEST_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# How closely two scores of the same text agree when computed in batches of different sizes: to float32's
# rounding on a CPU; on a GPU, cuDNN's float32 RNN kernels may round as TF32, differently for each batch size
# (many streams against one stream agree there within 1e-4 a character).
SCORE_TOLERANCE = 1e-6 if TEST_DEVICE == "cpu" else 1e-4

# A run small enough to train in a fraction of a second; tests override what they measure.
TINY_RUN: dict[str, Any] = {"num_layers": 1, "hidden_size": 32, "embed_size": 8, "batch_size": 4,
                            "seq_len": 16, "learning_rate": 1e-2}


# Every kind of model charrnn train can make.
KINDS = {
    "lstm": {"cell": "lstm"},
    "gru": {"cell": "gru"},
    "rnn tanh": {"cell": "rnn"},
    "rnn relu": {"cell": "rnn", "rnn_activation": "relu"},
    "esn": {"cell": "esn"},
    "layer-normalised lstm": {"cell": "lstm", "layer_norm": True},
    "layer-normalised gru": {"cell": "gru", "layer_norm": True},
    "layer-normalised rnn": {"cell": "rnn", "layer_norm": True},
    "lstm with skip connections": {"cell": "lstm", "skip_connections": True},
    "gru with skip connections": {"cell": "gru", "skip_connections": True},
    "rnn with skip connections": {"cell": "rnn", "skip_connections": True},
    "3-layer lstm": {"cell": "lstm", "num_layers": 3},
    "1-layer gru": {"cell": "gru", "num_layers": 1},
}
VOCAB = Vocab(tuple("ab\ncé🙂e\u0301 .,!"))  # a non-BMP character and a combining mark


def random_model(options: dict) -> CharRNN:
    """An untrained model of kind ``options`` (:data:`KINDS`) over :data:`VOCAB`; its layer norms matter."""
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=len(VOCAB), hidden_size=12, embed_size=5, **{"num_layers": 2, **options})
    model = CharRNN(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "ln_" in name:  # layer norm's gains and shifts start at 1 and 0: make them matter
                parameter.add_(torch.randn_like(parameter) * 0.3)
    return model


def make_model(cell: str, layers: int = 2, seed: int = 0) -> CharRNN:
    """A small untrained model in eval mode: 11 symbols, 16 units, 6-wide embedding."""
    torch.manual_seed(seed)
    config = ModelConfig(vocab_size=11, cell=cell, num_layers=layers, hidden_size=16, embed_size=6)
    return CharRNN(config).eval()


def plan_run(corpus: Path | None, out: Path | None, *, overwrite: bool = False, resume: Path | None = None,
             finish_s: float = 0.0, device: str = TEST_DEVICE, **options: Any) -> TrainingPlan:
    """The plan of a tiny run on ``corpus`` into ``out`` on ``device``: :data:`TINY_RUN` overridden by
    ``options`` (fields of ModelConfig and TrainConfig); with ``resume``, only the options given change. A
    time budget keeps ``finish_s`` seconds at its end for the caller."""
    given = options if resume is not None else {**TINY_RUN, **options}
    request = TrainingRequest(corpus, given, out, overwrite=overwrite, resume=resume, device=device)
    return plan_training(request, finish_s=finish_s)


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file (metrics.jsonl, losses.jsonl, samples.jsonl)."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def repeated_runs(text: str, n: int) -> list[str]:
    """The runs of ``n`` characters that occur more than once in ``text``."""
    counts = Counter(text[start:start + n] for start in range(len(text) - n + 1))
    return [run for run, count in counts.items() if count > 1]
