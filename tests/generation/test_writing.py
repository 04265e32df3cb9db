"""Writing with the model: the session (exact undo, its guesses' numbers) and sample --interactive in tmux."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
import torch

import charrnn
from charrnn.errors import CharrnnError

from helpers import INSTALLED, needs_installed, repeated_runs, run_cli

TMUX = shutil.which("tmux")


@pytest.fixture
def session(tiny_checkpoint):
    return charrnn.load(tiny_checkpoint).writing("ROMEO:", temperature=0.8, seed=1)


def test_the_model_finishes_the_word_or_the_line_and_undo_restores_the_state_exactly(session):
    before = [(guess.char, guess.probability) for guess in session.guesses(5)]
    layers = [tuple(part.clone() for part in layer) for layer in session.points[-1].layers]
    wrote = session.continue_to(" \n")
    assert wrote and wrote[-1] in " \n" and session.written == wrote
    line = session.continue_to("\n")
    assert line.endswith("\n") and "\n" not in line[:-1]
    session.write("\n")
    session.continue_to("\n")
    while session.undo():
        pass
    assert session.text == "ROMEO:" and [(g.char, g.probability) for g in session.guesses(5)] == before
    assert all(torch.equal(a, b) for old, new in zip(layers, session.points[-1].layers, strict=True)
               for a, b in zip(old, new, strict=True))


def test_the_guesses_are_the_numbers_surprisal_shows(session, tiny_checkpoint):
    session.write("\n")
    session.write("J")
    rows = list(charrnn.surprisal(tiny_checkpoint, "ROMEO:\nJU", top=3))
    after_j = rows[-1]  # the scores for the character after "ROMEO:\nJ"
    assert [(g.char, round(g.probability, 5)) for g in session.guesses(3)] == \
        [(char, round(probability, 5)) for char, probability in after_j.top]


def test_the_model_writes_under_the_no_repeat_rule_and_an_undo_takes_its_runs_back(tiny_checkpoint):
    model = charrnn.load(tiny_checkpoint)
    free, ruled = (model.writing("ROMEO:", temperature=0.05, seed=1, **rule)
                   for rule in ({}, {"no_repeat": 8}))
    for writer in (free, ruled):
        while len(writer.written) < 300:
            writer.continue_to("\n")
    assert repeated_runs(free.text, 8)  # nearly greedy, the tiny model loops
    assert repeated_runs(ruled.text, 8) == []
    while len(ruled.written) > 20:
        ruled.undo()
    kept = ruled.text
    ruled.continue_to("\n")
    assert ruled.text.startswith(kept) and repeated_runs(ruled.text, 8) == []


@pytest.mark.parametrize(("arguments", "code", "fragment"), [
    (["--interactive"], 1, "--interactive needs a terminal"),
    (["--top", "3"], 2, "--top says how many guesses --interactive shows"),
    (["--interactive", "--num-samples", "2"], 2, "--num-samples does not apply"),
    (["--interactive", "--top", "0"], 2, "--top"),
    (["--interactive", "--top", "12"], 2, "from 1 to 9 (one digit picks each guess)"),
])
def test_interactive_refusals_are_one_line(tiny_checkpoint, arguments, code, fragment):
    result = run_cli("sample", tiny_checkpoint, *arguments)
    assert result.exit_code == code, result.output
    assert len(result.stderr.splitlines()) == 1 and fragment in result.stderr


def screen(name: str) -> str:
    return subprocess.run([TMUX, "capture-pane", "-p", "-t", name], capture_output=True, text=True).stdout


def wait_for(name: str, text: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = screen(name)
        if text in shown:
            return shown
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared:\n{screen(name)}")


@pytest.mark.slow
@needs_installed
@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux)")
def test_writing_in_a_real_terminal(tiny_checkpoint, tmp_path):
    name = f"charrnn-{tmp_path.name}"
    out = tmp_path / "out.txt"
    command = f"'{INSTALLED}' sample '{tiny_checkpoint}' --interactive --prime ROMEO: --seed 2 > '{out}'; " \
              f"echo \"exit $?\" >> '{out}'; sleep 60"
    subprocess.run([TMUX, "new-session", "-d", "-s", name, "-x", "100", "-y", "25", command], check=True)
    try:
        shown = wait_for(name, "next: 1 ")
        assert "ROMEO:▌" in shown and "Ctrl-D" in shown
        # The likeliest guess, a forced J, the model ending the line, its newline undone, and the end.
        for key, said in (("1", "took guess 1"), ("J", "wrote 'J'"), ("Enter", "the model wrote"),
                          ("BSpace", "undone"), ("C-d", "")):
            subprocess.run([TMUX, "send-keys", "-t", name, key], check=True)
            wait_for(name, said)
        deadline = time.monotonic() + 30
        while "exit" not in (out.read_text() if out.exists() else "") and time.monotonic() < deadline:
            time.sleep(0.1)
        text = out.read_text()
        assert text.endswith("exit 0\n") and text.startswith("ROMEO:")
        first_guess = charrnn.load(tiny_checkpoint).writing("ROMEO:", seed=2).guesses(1)[0].char
        written = text.removesuffix("exit 0\n").removesuffix("\n")  # printed with a final line break
        assert written.startswith(f"ROMEO:{first_guess}J") and not written.endswith("\n")
    finally:
        subprocess.run([TMUX, "kill-session", "-t", name], capture_output=True)


@pytest.mark.parametrize(("call", "error"), [
    (lambda s: s.guesses(0), "count must be at least 1"),
    (lambda s: s.guesses(True), "count"),
    (lambda s: s.write("ab"), "char must be one character, not 2"),
    (lambda s: s.write(5), "char"),
    (lambda s: s.continue_to(""), "ends must name at least one character"),
    (lambda s: s.continue_to(None), "ends"),
    (lambda s: s.write("\u2603"), "never saw"),  # a character the model never saw
])
def test_the_sessions_arguments_are_checked_like_every_option(session, call, error):
    with pytest.raises(CharrnnError, match=error):
        call(session)
    assert session.written == ""
