"""Writing the product to standard output, and showing text safely: text given on the command line checked,
model text in a page, scores, checkpoints and values. Light enough for the CLI to import at start-up.
A closed, full or narrow-encoded stdout is a one-line :class:`CharrnnError`, and a reader that left
(``| head``) a quiet stop: never a traceback, and never a result lost behind exit code 0."""

from __future__ import annotations

import html
import io
import os
import re
import shlex
import sys
import unicodedata
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from charrnn.errors import CharrnnError, ConfigError
from charrnn.utils.files import reason


class ReaderGone(Exception):
    """stdout's reader closed the pipe (``charrnn sample ... | head``): stop quietly."""


def _to_devnull(fd: int) -> None:
    opened = os.open(os.devnull, os.O_WRONLY)
    if opened != fd:
        os.dup2(opened, fd)
        os.close(opened)


def silence_stdout() -> None:
    """Point the descriptor at /dev/null, so the interpreter's last flush at exit cannot fail again."""
    with suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        _to_devnull(sys.stdout.fileno())


@contextmanager
def stdout_guard() -> Iterator[None]:
    """Turn a failure to write stdout inside the block into a one-line error (or a quiet stop)."""
    if sys.stdout is None:
        import click  # only the command line runs a command; the library's callers have no stdout advice

        context = click.get_current_context(silent=True)  # " (or use --output)" where the command has it
        names = {param.name for param in context.command.params} if context is not None else set()
        advice = " (or use --output)" if "output" in names else ""
        raise CharrnnError(f"standard output is closed; redirect it to a file{advice}")
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
        raise ReaderGone from None
    except UnicodeEncodeError as exc:
        encoding = getattr(sys.stdout, "encoding", None) or "its encoding"
        unwritable = exc.object[exc.start:exc.end]
        raise CharrnnError(f"standard output ({encoding}) cannot represent {unwritable!r}; "
                           f"set PYTHONIOENCODING=utf-8 or write to a file") from None
    except OSError as exc:
        silence_stdout()
        raise CharrnnError(f"cannot write to standard output: {reason(exc)}") from None


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout and flush it; see :func:`stdout_guard` for the failures."""
    with stdout_guard():
        sys.stdout.write(text)


def stream_stdout(pieces: Iterable[str], prefix: str = "") -> None:
    """Write ``prefix`` then each piece as it comes, flushed, ending with a newline when it did not."""
    last = prefix
    with stdout_guard():
        sys.stdout.write(prefix)
        for piece in pieces:
            sys.stdout.write(piece)
            sys.stdout.flush()
            last = piece or last
        if not last.endswith("\n"):
            sys.stdout.write("\n")


# Characters a terminal would act on or hide: controls (C0, DEL, C1: escapes, carriage returns, bells),
# format characters (bidirectional overrides, zero-width joiners), line and paragraph separators, and
# surrogates (a byte of a name that is not UTF-8): no file or terminal takes them.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def is_hidden(char: str) -> bool:
    """Whether a terminal would act on ``char`` or not show it."""
    return unicodedata.category(char) in HIDDEN_CATEGORIES


def escape_char(char: str) -> str:
    """``char`` as Python writes it in a string: ``\\r``, ``\\x1b``, ``\\u202e``; a byte that was not UTF-8
    (Python's surrogateescape) as the byte, ``\\xff``."""
    if char in NAMED_ESCAPES:
        return NAMED_ESCAPES[char]
    code = ord(char) - 0xDC00 if "\udc80" <= char <= "\udcff" else ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown_parts(text: str, keep: str = "\n\t") -> Iterator[tuple[str, bool]]:
    """``text`` in runs: (plain text, False) and (the escape of a hidden character not in ``keep``, True)."""
    plain_start = 0
    for index, char in enumerate(text):
        if char not in keep and is_hidden(char):
            if index > plain_start:
                yield text[plain_start:index], False
            yield escape_char(char), True
            plain_start = index + 1
    if plain_start < len(text):
        yield text[plain_start:], False


def shown(text: str, keep: str = "\n\t") -> str:
    """Model or corpus text as a terminal may show it: line breaks and tabs kept, every other hidden
    character escaped, so no escape sequence acts. For views only: ``sample``'s product stays exact."""
    if text.isprintable():
        return text
    return "".join(piece for piece, _ in shown_parts(text, keep))


def one_line(text: str) -> str:
    """``text`` with every hidden character escaped, line breaks too: a message quoting it stays one line."""
    return shown(text, keep="")


def visible_char(char: str) -> str:
    """One character as a list of guesses shows it: a blank as a sign, any other hidden one escaped."""
    return {" ": "␣", "\n": "⏎", "\t": "⇥"}.get(char) or one_line(char)


class StderrWhileReaderLives:
    """``sys.stderr`` that outlives its reader: once a write meets a closed pipe (``2>&1 | head``), later
    notes go to /dev/null, so a training run goes on instead of dying on a progress line."""

    def __init__(self, stream: Any):
        self._stream = stream

    def _gone(self) -> None:
        with suppress(OSError, ValueError, io.UnsupportedOperation):
            _to_devnull(self._stream.fileno())

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()
            with suppress(OSError):  # what could not be flushed is dropped with the reader
                self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def fill_closed_descriptors() -> None:
    """Give a closed stdout or stderr descriptor (``>&-``) /dev/null, lest the next file opened (a checkpoint)
    receive what is printed. ``sys.stdout`` stays None, so commands report it; a closed stderr drops notes."""
    for fd in (1, 2):
        try:
            os.fstat(fd)
        except OSError:
            _to_devnull(fd)
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)  # lives as long as the process
    sys.stderr = StderrWhileReaderLives(sys.stderr)


# ---------------------------------------------------------------------------- text given and shown
def require_valid_text(text: str, field: str) -> str:
    """Return ``text``, the option ``field``'s value, or refuse it naming the byte that made it invalid
    UTF-8. An argument that is not UTF-8 arrives with each bad byte as a lone surrogate (surrogateescape)."""
    if (found := re.search("[\ud800-\udfff]", text)) is not None:  # one scan in C: a text may be megabytes
        code = ord(found.group())
        byte = f" (byte 0x{code - 0xDC00:02x})" if code >= 0xDC80 else ""
        raise ConfigError(f"is not valid UTF-8{byte} at character {found.start()}", field)
    return text


# Marks Markdown would read as formatting, each as its character reference; line breaks as <br>.
MARKDOWN_MARKS = {ord(mark): f"&#{ord(mark)};" for mark in "\\`*_[]#|~"} | {ord("\n"): "<br>"}


def markdown_text(text: str) -> str:
    """:func:`shown` ``text`` as Markdown shows it literally, in a table cell too (:data:`MARKDOWN_MARKS`)."""
    return html.escape(shown(text), quote=False).translate(MARKDOWN_MARKS)


def html_text(text: str) -> str:
    """Model or corpus text inside a page's ``<pre>``: line breaks stay, every other hidden character is
    its escape in a ``hidden`` span (a raw carriage return would double-space a CRLF text)."""
    return "".join(f'<span class="hidden">{html.escape(piece)}</span>' if hidden else html.escape(piece)
                   for piece, hidden in shown_parts(text, keep="\n"))


HIDDEN_CHAR_STYLE = ".hidden{font-size:80%;border:1px solid #999;border-radius:2px;padding:0 1px}"


def format_score(value: float | None, digits: int = 4) -> str:
    """A score to ``digits`` decimals, or "n/a" when there is none."""
    return "n/a" if value is None else f"{value:.{digits}f}"


def format_epoch(epoch: float | None) -> str:
    """Passes over the training split to two decimals, trailing zeros dropped (2.71, 5), or "n/a"."""
    return "n/a" if epoch is None else f"{epoch:.2f}".rstrip("0").rstrip(".")


def checkpoint_labels(reports: list[Any]) -> list[str]:
    """The shortest of file name, ``run``/file name and full ``checkpoint`` path that tells reports apart."""
    names = [Path(report.checkpoint).name for report in reports]
    # A model folder is its own run: its name alone, never "m1/m1".
    for labels in (names, [name if report.run == name else f"{report.run}/{name}"
                           for report, name in zip(reports, names, strict=True)]):
        if len(set(labels)) == len(labels):
            return labels
    return [report.checkpoint for report in reports]


def colour(value: float, scale: float) -> tuple[int, int, int]:
    """Red for negative, white for zero, blue for positive, saturating at ±scale."""
    v = max(-1.0, min(1.0, value / scale)) if scale > 0 else 0.0
    if v < 0:
        return 255, round(255 * (1 + v)), round(255 * (1 + v))
    return round(255 * (1 - v)), round(255 * (1 - v)), 255


SATURATION_NATS = 6.0  # surprisal at which the colour is fully red (p ≈ 0.25%)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 sample``, ``2 samples``: a count with its noun agreeing."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def heat(nats: float) -> tuple[int, int, int]:
    """White for no surprise, through yellow, to red at :data:`SATURATION_NATS` and beyond."""
    level = max(0.0, min(1.0, nats / SATURATION_NATS))
    return 255, round(255 * min(1.0, 2 - 2 * level)), round(255 * max(0.0, 1 - 2 * level))


def shell_word(path: str | Path) -> str:
    """A path as one shell word on one line, for a command a user copies: quoted, a leading dash behind
    ``./``, a hidden character (a line break, a byte not UTF-8) as the escape bash's ``$'...'`` reads back."""
    text = str(path)
    text = f"./{text}" if text.startswith("-") else text
    if text.isprintable():
        return shlex.quote(text)

    def escaped(char: str) -> str:
        if char in "\\'":
            return "\\" + char
        if char.isprintable():
            return char
        # bash reads \xNN as a byte, so a C1 control (a character, not a byte) takes \u
        return f"\\u{ord(char):04x}" if 0x80 <= ord(char) < 0x100 else escape_char(char)

    return "$'" + "".join(map(escaped, text)) + "'"


def terminal_columns() -> int:
    """The columns of stderr's terminal; 0 without one, or where it reports none (plain lines serve then)."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns if sys.stderr.isatty() else 0
    except (OSError, ValueError):
        return 0
