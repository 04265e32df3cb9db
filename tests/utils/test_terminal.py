"""Model text shown: a character a terminal would obey or hide is seen as its escape; sample's is exact."""

import json
import os
import shutil
import subprocess
import sys

import pytest

import charrnn
from charrnn.cli.interactive import CLEAR, screen
from charrnn.utils.terminal import html_text, is_hidden, one_line, shown, shown_parts, visible_char

from helpers import plan_run, run_cli

# An escape sequence that clears the screen, one that sets the window title (OSC ... BEL), a lone CSI
# (C1), a right-to-left override, a zero-width space and a line separator.
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x9b31m\u202e\u200b\u2028"


def test_shown_keeps_line_breaks_and_tabs_one_line_escapes_them_too_and_the_parts_say_which_are_escapes():
    assert shown("plain text, ünïcode — fine") == "plain text, ünïcode — fine"
    assert shown("a\tb\nc\r\nd") == "a\tb\nc\\r\nd"
    assert shown(HOSTILE) == "\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\u202e\\u200b\\u2028"
    assert shown("\U000e0001") == "\\U000e0001"  # a format character beyond the BMP (a language tag)
    assert shown("\u00a0non-breaking") == "\u00a0non-breaking"  # a space is not hidden, whatever its width
    named = os.fsdecode(b"run\xff")  # a byte not UTF-8, in a file name Python read: shown as that byte
    assert is_hidden(named[-1]) and one_line(named) == "run\\xff" and shown("\udc00") == "\\udc00"
    assert one_line("a\nb\tc\x1b") == "a\\nb\\tc\\x1b"
    assert list(shown_parts("ab\x1bc")) == [("ab", False), ("\\x1b", True), ("c", False)]
    assert list(shown_parts("\r\n", keep="\n")) == [("\\r", True), ("\n", False)]
    assert visible_char(" ") == "␣" and visible_char("\n") == "⏎" and visible_char("\u202e") == "\\u202e"
    assert all(is_hidden(char) for char in "\x00\x1b\x7f\x85\x9b\u200d\u2028\u2029\ufeff")
    assert not any(is_hidden(char) for char in "a é\u00a0\u3000😀")
    page = html_text("one\r\ntwo <b>\x1b")  # a page shows a carriage return, with no second line break
    assert "\r" not in page and "\x1b" not in page
    assert page == ('one<span class="hidden">\\r</span>\ntwo &lt;b&gt;<span class="hidden">\\x1b</span>')


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """A tiny run on a corpus full of escape sequences and CRLF line ends, recording samples."""
    root = tmp_path_factory.mktemp("hostile")
    corpus = root / "hostile.txt"
    corpus.write_text(("To be, or not to be\r\n" + HOSTILE + "\r\n") * 200, encoding="utf-8", newline="")
    plan_run(corpus, root / "run", max_steps=30, sample_every=10, sample_length=120,
             sample_prime="\x1b]0;").run()
    return root


def assert_no_raw_hidden(text: str) -> None:
    assert not any(is_hidden(char) for char in text.replace("\n", "")), repr(text)


def test_tables_and_views_show_hidden_characters_as_escapes(hostile_run):
    run = hostile_run / "run"
    text = str(hostile_run / "hostile.txt")
    views = [["compare", str(run / "best.pt"), str(run / "last.pt"), "--length", "200", "--seed", "3"],
             ["compare", str(run), "--evolution"],
             ["inspect", str(run / "best.pt"), text, "--surprisal", "--max-chars", "300"],
             ["inspect", str(run / "best.pt"), text, "--max-chars", "300", "--unit", "0"]]
    for arguments in views:
        result = run_cli(*arguments)
        assert result.exit_code == 0, result.output
        assert_no_raw_hidden(result.stdout)
        assert "\\x1b" in result.stdout, arguments


@pytest.mark.slow
def test_the_product_stays_exact_and_its_views_do_not(hostile_run, tmp_path):
    run = hostile_run / "run"
    product = subprocess.run([sys.executable, "-m", "charrnn", "sample", str(run / "best.pt"), "--prime",
                              "\x1b]0;", "--length", "300", "--seed", "1"], capture_output=True, text=True,
                             check=True)
    assert product.stdout.startswith("\x1b]0;")  # sample writes the text itself
    as_json = run_cli("compare", run, "--evolution", "--json")
    assert json.loads(as_json.stdout)[0]["samples"][0]["prime"] == "\x1b]0;"
    markdown = tmp_path / "evolution.md"
    run_cli("compare", run, "--evolution", "--markdown", markdown)
    assert_no_raw_hidden(markdown.read_text(encoding="utf-8"))
    page, text = tmp_path / "surprisal.html", str(hostile_run / "hostile.txt")
    shaded = run_cli("inspect", run / "best.pt", text, "--surprisal", "--max-chars", "200", "--html", page)
    assert shaded.exit_code == 0, shaded.output
    written = page.read_text(encoding="utf-8")
    assert "\r" not in written and '<span class="hidden">\\r</span>' in written


@pytest.mark.slow
def test_sample_previews_while_training_stay_one_escaped_line(tmp_path):
    corpus = tmp_path / "hostile.txt"
    corpus.write_text(("To be\r\n" + HOSTILE + "\n") * 200, encoding="utf-8", newline="")
    options = ["--out", str(tmp_path / "run"), "--max-steps", "6", "--sample-every", "3",
               "--sample-length", "80", "--hidden", "16", "--sample-prime", "\x1b]0;"]
    trained = subprocess.run([sys.executable, "-m", "charrnn", "train", str(corpus), *options],
                             capture_output=True, text=True)
    assert trained.returncode == 0, trained.stderr
    previews = [line for line in trained.stderr.splitlines() if line.startswith("sample @ step")]
    assert len(previews) == 2
    for line in previews:
        assert_no_raw_hidden(line)
        assert "\\x1b]0;" in line


def test_the_interactive_screen_and_a_run_named_with_markup_show_what_was_written_escaped(hostile_run,
                                                                                          tmp_path):
    session = charrnn.load(hostile_run / "run" / "best.pt").writing("\x1b]0;pwned\x07\r", seed=1)
    drawn = screen(session, 3, "")
    own_codes = drawn.replace(CLEAR, "").replace("\x1b[2m", "").replace("\x1b[0m", "")
    assert_no_raw_hidden(own_codes)
    assert "\\x1b]0;pwned\\x07\\r▌" in own_codes
    odd = tmp_path / "run [bold]x[/bold] \x1b]0;t\x07"
    shutil.copytree(hostile_run / "run", odd)
    result = run_cli("compare", odd, "--evolution")
    assert result.exit_code == 0, result.output
    assert "[bold]x[/bold]" in result.stdout and "\\x1b]0;t\\x07" in result.stdout
    assert_no_raw_hidden(result.stdout)


@pytest.mark.parametrize("name", ["run", "-d", "a b", "it's", "nl\nx", "tab\tx", "r\udcfen", "$(x)", "é語"])
def test_a_path_in_a_command_to_copy_is_one_word_that_the_shell_reads_back_exactly(name):
    from charrnn.utils.terminal import shell_word

    word = shell_word(f"{name}/best.pt")
    assert "\n" not in word and word.isprintable()
    read = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True).stdout
    expected = f"./{name}/best.pt" if name.startswith("-") else f"{name}/best.pt"
    assert read == os.fsencode(expected)


def test_a_terminal_that_reports_no_columns_gets_plain_lines_not_a_bar(monkeypatch):
    from charrnn.utils.terminal import terminal_columns

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: os.terminal_size((0, 0)))
    assert terminal_columns() == 0
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: os.terminal_size((100, 40)))
    assert terminal_columns() == 100
