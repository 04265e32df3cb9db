"""Property-based fuzzing of the command line (hypothesis is a test-only dependency).

Whatever the options, corpus bytes or prime: never a traceback, never exit code 0
together with an error message, never a partially written file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from charrnn.checkpoint import load_checkpoint
from charrnn.cli import cli

FUZZ = settings(max_examples=int(os.environ.get("CHARRNN_FUZZ_EXAMPLES", "100")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

numbers = st.one_of(st.integers(-5, 40).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.sampled_from(["", "x", "1e9", "-0", "0.5"]))


def mostly(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Valid values four times in five, anything else the fifth, so many runs get past option parsing."""
    return st.integers(0, 4).flatmap(lambda pick: numbers if pick == 0 else valid)


corpora = st.one_of(
    st.binary(max_size=3000),  # usually not UTF-8
    st.text(max_size=3000).map(str.encode),
    st.text(min_size=1, max_size=40).map(lambda line: (line * 80).encode()),  # long enough to train on
)


def check_outcome(result, directory: Path) -> None:
    output = result.output
    assert "Traceback" not in output, output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 0:
        assert "Error:" not in result.stderr, result.stderr
    else:
        last = [line for line in result.stderr.splitlines() if line.strip()][-1]
        assert last.startswith("Error: "), result.stderr
    assert not list(directory.rglob(".*.tmp")), "a temporary file was left behind"
    for checkpoint in directory.rglob("*.pt"):
        load_checkpoint(checkpoint)  # complete and loadable, or this raises


@FUZZ
@given(corpus=corpora, batch_size=mostly(st.integers(1, 6).map(str)),
       seq_len=mostly(st.integers(1, 20).map(str)), val_frac=mostly(st.floats(0.02, 0.5).map(repr)),
       lr=mostly(st.floats(1e-4, 10.0).map(repr)),
       save_epochs=mostly(st.sampled_from(["", "1", "1,2"])))
def test_train_never_crashes(corpus, batch_size, seq_len, val_frac, lr, save_epochs):
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "corpus.txt").write_bytes(corpus)
        args = ["train", str(directory / "corpus.txt"), "--layers", "1", "--hidden", "8", "--embed", "4",
                "--max-steps", "2", "--eval-every", "1", "--out", str(directory / "run"),
                "--batch-size", batch_size, "--seq-len", seq_len, "--val-frac", val_frac, "--lr", lr]
        if save_epochs:
            args += ["--save-epochs", save_epochs]
        check_outcome(CliRunner().invoke(cli, args), directory)


@FUZZ
@given(prime=st.text(max_size=40), temperature=numbers, top_k=numbers, top_p=numbers,
       length=st.integers(-3, 60).map(str), mode=st.sampled_from(["sample", "greedy", "beam"]),
       stop_at=st.one_of(st.none(), st.text(max_size=3)))
def test_sample_never_crashes(tiny_run, prime, temperature, top_k, top_p, length, mode, stop_at):
    args = ["sample", str(tiny_run / "best.pt"), "--prime", prime, "--length", length]
    if mode == "sample":
        args += ["--temperature", temperature, "--top-k", top_k, "--top-p", top_p]
    elif mode == "greedy":
        args += ["--greedy"]
    else:
        args += ["--beam-width", top_k]
    if stop_at:
        args += ["--stop-at", stop_at]
    with tempfile.TemporaryDirectory() as tmp:
        check_outcome(CliRunner().invoke(cli, args), Path(tmp))


@FUZZ
@given(text=st.binary(max_size=500), skip=st.booleans())
def test_eval_perplexity_never_crashes(tiny_run, text, skip):
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "text.txt").write_bytes(text)
        args = ["eval-perplexity", str(tiny_run / "best.pt"), str(directory / "text.txt"), "--json"]
        if skip:
            args.append("--skip-unknown")
        check_outcome(CliRunner().invoke(cli, args), directory)
