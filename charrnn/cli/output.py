"""Where the commands write: results to stdout, notes to stderr, files atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console

from charrnn.utils.files import atomic_write_text, json_text
from charrnn.utils.terminal import one_line, stdout_guard, write_stdout

# A narrower console (COLUMNS=0 or 5) lays a table out a character or none to a column, losing the result:
# results are laid out for 80 columns at least, and a narrower terminal wraps them.
NARROWEST_CONSOLE = 80


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    if console.width < NARROWEST_CONSOLE:
        console.width = NARROWEST_CONSOLE
    return console


out = _console()
err = _console(stderr=True)


def shows_colour() -> bool:
    """Whether stdout shows colour: not under NO_COLOR or TERM=dumb, nor into a pipe or a file."""
    return out.color_system is not None and not out.no_color


def colour_lost(what: str) -> None:
    """Say, where stdout shows no colour, that ``what`` the colours carried was lost, and where to find it."""
    if not shows_colour():
        message(f"note: colour carries {what}, and standard output shows none here (NO_COLOR, TERM=dumb, "
                f"a pipe or a file); --json or --html keep it")


def message(text: str) -> None:
    """A status line on stderr, never re-wrapped or read as markup."""
    click.echo(one_line(text), err=True)


def print_json(value: Any, **options: Any) -> None:
    """``value`` (a result's ``to_dict()``) as one JSON document on stdout."""
    write_stdout(json_text(value, ensure_ascii=False, **options) + "\n")


def show(renderable: Any, **options: Any) -> None:
    """A rich table or text on stdout."""
    with stdout_guard():
        out.print(renderable, **options)


def write_file(path: Path, text: str, what: str = "") -> None:
    """Write ``text`` to ``path`` atomically and say so."""
    atomic_write_text(path, text)
    message(f"wrote {what}{' to ' if what else ''}{path}")


def say_checkpoint(given: Path, used: Path) -> None:
    """Say which checkpoint a run directory stood for."""
    if Path(given) != used:
        message(f"using {used}")
