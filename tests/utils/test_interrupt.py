"""Long commands stop within moments of a real SIGINT or SIGTERM: the exit code, one line, nothing partial."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SMALL_TEXT

from charrnn.training.checkpoint import load_checkpoint
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
        "inspect --unit": ["inspect", model, *read, "--unit", "0", "--max-chars", "100000000",
                           "--html", str(out / "unit.html")],
    }


@pytest.fixture(scope="module")
def long_text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("long") / "long.txt"
    # 26 million characters the tiny model knows: twenty times the stop's allowance (stop_allowance_s).
    path.write_text(SMALL_TEXT * 2000, encoding="utf-8")
    return path


def stop_when_ready(arguments: list[str], signum: int, ready: str | None = None) -> tuple[int, str, float]:
    """Start ``charrnn ARGUMENTS`` as from a terminal, signal it at its work (a second after ``ready`` is on
    its stderr; else after 4 s): its exit status, its stderr and the seconds it took to stop."""
    # As from a terminal: a shell starts a script's background jobs with SIGINT ignored, and a process
    # started so keeps ignoring it, as it should (Ctrl-C in the terminal is not meant for it).
    process = subprocess.Popen([sys.executable, "-m", "charrnn", *arguments], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    try:
        if ready is None:
            time.sleep(4.0)  # past the start-up: the command is at its work
        else:
            while not any(ready in line for line in seen):
                line = process.stderr.readline()
                assert line, f"{arguments[0]} ended before {ready!r}: {''.join(seen)}"
                seen.append(line)
            time.sleep(1.0)
        assert process.poll() is None, f"{arguments[0]} ended before it was asked to stop: {''.join(seen)}"
        process.send_signal(signum)
        asked = time.monotonic()
        _, stderr = process.communicate(timeout=60)
        waited = time.monotonic() - asked
    finally:
        process.kill()
        process.wait()
    return process.returncode, "".join(seen) + stderr, waited


@pytest.mark.slow
@pytest.mark.parametrize("command", ["sample", "beam search", "compare", "eval-perplexity",
                                     "eval-perplexity --dynamic", "inspect --surprisal", "inspect --unit"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_long_command_stops_within_moments_when_asked(tiny_checkpoint, long_text, tmp_path, command,
                                                        signum, stop_allowance_s):
    returncode, stderr, waited = stop_when_ready(commands(tiny_checkpoint, long_text, tmp_path)[command],
                                                 signum)
    assert returncode == EXIT_CODES[signal.Signals(signum).name], stderr
    assert waited < stop_allowance_s, f"{command} took {waited:.1f} s to stop"
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1].startswith("Error: ")
    assert not list(tmp_path.iterdir())  # no partial output under its final name, and no temporary


# train in each of its phases: between steps; scoring during training (every step, all of a validation
# split of about 2 million characters, some seconds for a 2×512 model on one thread); scoring at its end.
TRAIN_PHASES = {
    "training": ["--max-steps", "100000000"],
    "evaluating": ["--max-steps", "100000000", "--eval-every", "1", "-o", "eval_chars", "1900000"],
    "final evaluation": ["--max-steps", "1"],
}


@pytest.fixture(scope="module")
def split_text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("split") / "split.txt"
    path.write_text(SMALL_TEXT * 300, encoding="utf-8")  # 3.9 million characters, half of them validation
    return path


@pytest.mark.slow
@pytest.mark.parametrize("phase", sorted(TRAIN_PHASES))
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_train_stops_within_moments_in_every_phase(split_text, tmp_path, phase, signum, stop_allowance_s):
    """A stop while scoring drops it (the user waits); what it leaves says what to run next, which works."""
    run = tmp_path / "run"
    arguments = ["train", str(split_text), "--hidden", "512", "--embed", "8", "--batch-size", "4",
                 "--seq-len", "16", "-o", "val_frac", "0.5", "--out", str(run), *TRAIN_PHASES[phase]]
    returncode, stderr, waited = stop_when_ready(arguments, signum, ready="└")  # the run table's end
    assert returncode == EXIT_CODES[signal.Signals(signum).name], stderr
    assert waited < stop_allowance_s, f"train took {waited:.1f} s to stop while {phase}"
    assert "Traceback" not in stderr
    assert not [path.name for path in run.iterdir() if path.name.startswith(".")]  # no temporary left
    advice = stderr.strip().splitlines()[-1]
    stopped_at = load_checkpoint(run / "last.pt")["step"]
    if phase == "final evaluation":  # nothing to resume: the advice scores the last weights
        assert "during the final evaluation, after the last step 1" in stderr and stopped_at == 1
        assert advice == f"score the last ones with: charrnn eval-perplexity {run / 'last.pt'}"
        text = tmp_path / "text.txt"
        text.write_text(SMALL_TEXT[:2000], encoding="utf-8")
        result = subprocess.run([sys.executable, "-m", "charrnn", "eval-perplexity", str(run / "last.pt"),
                                 str(text)], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        return
    assert advice == f"resume with: charrnn train --resume {run / 'last.pt'}"
    returncode, stderr, _ = stop_when_ready(["train", "--resume", str(run / "last.pt")], signum, ready="└")
    assert returncode == EXIT_CODES[signal.Signals(signum).name] and f"at step {stopped_at:,} (" in \
        stderr, stderr
