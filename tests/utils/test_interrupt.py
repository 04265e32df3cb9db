"""Every command that can run long stops within moments of SIGINT or SIGTERM, with the documented exit code,
a one-line message and no partial output (a real signal to a real process)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SMALL_TEXT

from charrnn.utils.interrupt import EXIT_CODES

LONG = "1000000"


def commands(checkpoint: Path, text: Path, out: Path) -> dict[str, list[str]]:
    """Each long-running command, sized to run for minutes on a tiny model."""
    model, read = str(checkpoint), [str(text)]
    return {
        "sample": ["sample", model, "--length", "100000000", "--output", str(out / "sample.txt")],
        "beam search": ["sample", model, "--beam-width", "16", "--length", LONG],
        "compare": ["compare", model, model, "--length", "100000000"],
        "eval-perplexity": ["eval-perplexity", model, str(text), "--single-stream", "--skip-unknown"],
        "eval-perplexity --dynamic": ["eval-perplexity", model, str(text), "--dynamic", "--skip-unknown"],
        "inspect --surprisal": ["inspect", model, *read, "--surprisal", "--skip-unknown", "--single-stream",
                                "--html", str(out / "surprisal.html")],
        "inspect --unit": ["inspect", model, *read, "--unit", "0", "--max-chars", "10000000",
                           "--html", str(out / "unit.html")],
    }


@pytest.fixture(scope="module")
def long_text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("long") / "long.txt"
    # 26 million characters the tiny model knows: two cores of a Xeon score 2.6 million one stream at a
    # time in about 5 s, so a tenth of this ended before the signal came.
    path.write_text(SMALL_TEXT * 2000, encoding="utf-8")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("command", ["sample", "beam search", "compare", "eval-perplexity",
                                     "eval-perplexity --dynamic", "inspect --surprisal", "inspect --unit"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_long_command_stops_within_moments_when_asked(tiny_checkpoint, long_text, tmp_path, command,
                                                        signum):
    arguments = commands(tiny_checkpoint, long_text, tmp_path)[command]
    # As from a terminal: a shell starts a script's background jobs with SIGINT ignored, and a process
    # started so keeps ignoring it, as it should (Ctrl-C in the terminal is not meant for it).
    process = subprocess.Popen([sys.executable, "-m", "charrnn", *arguments], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        time.sleep(4.0)  # past the start-up: the command is at its work
        assert process.poll() is None, f"{command} ended before it was asked to stop: {process.stderr.read()}"
        process.send_signal(signum)
        asked = time.monotonic()
        _, stderr = process.communicate(timeout=60)
        waited = time.monotonic() - asked
    finally:
        process.kill()
        process.wait()
    assert process.returncode == EXIT_CODES[signal.Signals(signum).name], stderr
    assert waited < 2.5, f"{command} took {waited:.1f} s to stop"
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1].startswith("Error: ")
    assert not list(tmp_path.iterdir())  # no partial output under its final name, and no temporary
