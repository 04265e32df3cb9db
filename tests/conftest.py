"""Shared fixtures: small corpora made on the fly, a tiny trained checkpoint, the data mirror."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from charrnn.data.corpus import CACHE_DIR_ENV
from charrnn.data.datasets import MIRROR_ENV
from charrnn.training.plan import TrainResult
from charrnn.utils.hardware import CPU_BF16_ENV

from helpers import TEST_DEVICE, plan_run

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"  # beside the checkout

# A small corpus with accents, CJK and an emoji, so every test exercises code points
# beyond ASCII. Repetitive enough for a tiny model to learn something in a few steps.
SMALL_TEXT = "".join(
    f"{speaker}:\nCafé {n} — naïve 語 🙂, line {n % 7} of the tiny play.\n\n"
    for n in range(120)
    for speaker in ("ROMEO", "JULIET")
)

# Tests run tiny models, for which a second thread only adds synchronisation, and
# OpenMP threads spin badly when another process (a second test run, a training
# job) holds the other core. charrnn's own thread choice, in this process and in the
# commands tests start, takes OMP_NUM_THREADS as the user's choice.
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``cuda`` skip on machines without a CUDA GPU."""
    for item in items:
        if item.get_closest_marker("cuda") and not torch.cuda.is_available():
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


@pytest.fixture
def device() -> str:
    """The device a test trains, samples and scores on: a CUDA GPU where present, else the CPU."""
    return TEST_DEVICE


@pytest.fixture
def cpu_bf16(monkeypatch: pytest.MonkeyPatch):
    """``cpu_bf16(True)`` makes this test's CPU one with native bfloat16, ``cpu_bf16(False)`` one without,
    whatever the machine (emulated bfloat16 is slow, never wrong): the two paths are tested everywhere."""
    def simulate(native: bool) -> None:
        monkeypatch.setenv(CPU_BF16_ENV, "1" if native else "0")

    return simulate


@pytest.fixture(scope="session", autouse=True)
def corpus_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Encoded corpora go to a temporary cache, never the user's; subprocesses inherit it."""
    path = tmp_path_factory.mktemp("corpus_cache")
    os.environ[CACHE_DIR_ENV] = str(path)
    return path


# A phrase a tiny model learns by heart: repeated_corpus is it 60 times.
PHRASE = "the quick brown fox jumps over the lazy dog. "


@pytest.fixture
def repeated_corpus(tmp_path: Path) -> Path:
    path = tmp_path / "repeat.txt"
    path.write_text(PHRASE * 60, encoding="utf-8")
    return path


@pytest.fixture
def small_corpus(tmp_path: Path) -> Path:
    path = tmp_path / "small.txt"
    path.write_text(SMALL_TEXT, encoding="utf-8")
    return path


def mirror_url() -> str | None:
    """The data mirror: $CHARRNN_DATA_MIRROR, else the shared copy beside the checkout."""
    shared = SHARED_DATA.as_uri() if (SHARED_DATA / "tinyshakespeare" / "input.txt").is_file() else None
    return os.environ.get(MIRROR_ENV) or shared


@pytest.fixture
def data_mirror(monkeypatch: pytest.MonkeyPatch) -> str:
    url = mirror_url()
    if url is None:
        pytest.skip("no tiny Shakespeare mirror (set CHARRNN_DATA_MIRROR)")
    monkeypatch.setenv(MIRROR_ENV, url)
    return url


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory with a tiny LSTM trained for a few steps on SMALL_TEXT."""
    root = tmp_path_factory.mktemp("tiny_run")
    corpus = root / "small.txt"
    corpus.write_text(SMALL_TEXT, encoding="utf-8")
    plan_run(corpus, root / "run", num_layers=2, seq_len=32, max_steps=40, eval_every=20, save_every=20).run()
    return root / "run"


@pytest.fixture
def make_run():
    """The one run factory: ``make_run(corpus, out, observer=None, stop=None, **options)`` trains a tiny run
    (see ``helpers.plan_run``; options: fields of ModelConfig and TrainConfig, ``overwrite``, ``resume``)."""
    def run(corpus: Path | None, out: Path | None, observer=None, stop=None, **options) -> TrainResult:
        return plan_run(corpus, out, **options).run(observer, stop)

    return run


@pytest.fixture
def tiny_checkpoint(tiny_run: Path) -> Path:
    return tiny_run / "best.pt"


@pytest.fixture(scope="session")
def stop_allowance_s(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> float:
    """How long a stop may take: the time, measured here and now, that the tiny model takes to score 1.3
    million characters from a cold start. Every stop test's work takes ten times that or more, so a command
    that ran on would fail; a loaded machine slows the allowance with the stop, so no stopwatch is fixed."""
    text = tmp_path_factory.mktemp("allowance") / "twentieth.txt"
    text.write_text(SMALL_TEXT * 100, encoding="utf-8")
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "charrnn", "eval-perplexity", str(tiny_run / "best.pt"), str(text),
                    "--single-stream", "--skip-unknown"], check=True, capture_output=True, timeout=600)
    return time.monotonic() - started


@pytest.fixture(autouse=True)
def signal_handlers_restored():
    """Every test leaves the stop signals' handlers as it found them: charrnn restores what it replaces."""
    stop_signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {signum: signal.getsignal(signum) for signum in stop_signals}
    yield
    assert {signum: signal.getsignal(signum) for signum in stop_signals} == before
