"""``charrnn sample --interactive``: writing with the model in the terminal (keys: docs/guide.md). The
screen, on stderr and redrawn after every key, shows the text so far and the model's likeliest next
characters. Ctrl-D prints the whole text to stdout; Ctrl-C leaves without printing."""

from __future__ import annotations

import codecs
import os
import shutil
import sys
import termios
import tty
from typing import TYPE_CHECKING, Any

from charrnn.errors import CharrnnError
from charrnn.utils.terminal import counted, shown, visible_char

if TYPE_CHECKING:
    from charrnn.generation.writing import WritingSession

CLEAR = "\x1b[H\x1b[2J"
BACKSPACE = ("\x7f", "\x08")
END = "\x04"  # Ctrl-D
HELP = "digit: pick · type: write · Tab: end word · Enter: end line · Backspace: undo · Ctrl-D: done"
MOST_GUESSES = 9  # one digit picks each


def require_terminal() -> None:
    """Refuse, in one line, a session whose keys or screen are not a terminal."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise CharrnnError("--interactive needs a terminal: standard input and standard error must both be "
                           "one (not a pipe or a file)")


def screen(session: WritingSession, top: int, note: str) -> str:
    """The whole screen: the end of the text that fits (wrapped lines counted), a cursor, the guesses, a
    note and the keys, each of those one line cut to the terminal's width."""
    try:  # the size of stderr, where the screen is drawn: stdout is often redirected, to keep the text
        columns, rows = os.get_terminal_size(sys.stderr.fileno())
    except (OSError, ValueError):
        columns, rows = shutil.get_terminal_size()
    width = max(10, columns)
    wrapped = [piece[start:start + width] or "" for piece in (shown(session.text) + "▌").split("\n")
               for start in range(0, max(1, len(piece)), width)]
    body = wrapped[-max(1, rows - 5):]
    guesses = "  ".join(f"{number} {visible_char(guess.char)} {guess.probability:.0%}"
                        for number, guess in enumerate(session.guesses(top), start=1))
    def cut(line: str) -> str:
        return line if len(line) <= width - 1 else line[: width - 2] + "…"

    return (f"{CLEAR}{chr(10).join(body)}\n{'─' * (width - 1)}\n{cut('next: ' + guesses)}\n{cut(note)}\n"
            f"\x1b[2m{cut(HELP)}\x1b[0m")


def keys(fd: int) -> Any:
    """Characters typed on ``fd`` (UTF-8), an escape sequence (arrow keys) skipped as one."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while data := os.read(fd, 64):
        text = decoder.decode(data)
        if not text.startswith("\x1b"):
            yield from text
    yield END


def write_interactively(session: WritingSession, top: int) -> str:
    """Run the session on the terminal; the text when Ctrl-D (or the end of the input) ends it."""
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    note, typed = f"writing after {counted(len(session.prime), 'character')} of prime", keys(fd)
    try:
        tty.setcbreak(fd)  # keys one by one, unechoed; Ctrl-C still interrupts
        while True:
            sys.stderr.write(screen(session, top, note))
            sys.stderr.flush()
            if (key := next(typed)) == END:
                return session.text
            note = _act(session, top, key)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        sys.stderr.write(CLEAR)
        sys.stderr.flush()


def _act(session: WritingSession, top: int, key: str) -> str:
    """Do what ``key`` asks; return the note to show."""
    guesses = session.guesses(top)
    if key.isdigit() and 1 <= int(key) <= len(guesses):
        session.write(guesses[int(key) - 1].char)
        return f"took guess {key}"
    if key in BACKSPACE:
        return "undone" if session.undo() else "nothing to undo (the prime stays)"
    if key == "\t":
        return f"the model wrote {session.continue_to()!r}"
    if key in ("\n", "\r"):
        return f"the model wrote {session.continue_to(chr(10))!r}"
    if key in session.vocab:
        session.write(key)
        return f"wrote {key!r}"
    return f"the model never saw {key!r}: type another character"
