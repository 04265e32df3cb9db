"""The exceptions for failures a user can fix, each with a one-line message.

The command line prints one as ``Error: <message>`` with a non-zero exit, never a traceback. A message
names each option as its caller spells it (:func:`option`): ``max_steps`` in Python, ``--max-steps``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

_SPELLING: ContextVar[Callable[[str], str]] = ContextVar("charrnn_option_spelling", default=str)


def option(name: str) -> str:
    """The option ``name`` as the caller spells it: the parameter itself, or the command line's flag."""
    return _SPELLING.get()(name)


@contextmanager
def options_spelled(spell: Callable[[str], str]) -> Iterator[None]:
    """Within the block, :func:`option` names each option by ``spell`` (the command line's flags)."""
    token = _SPELLING.set(spell)
    try:
        yield
    finally:
        _SPELLING.reset(token)


def first_line(exc: BaseException, most: int = 160) -> str:
    """The first line of a library's exception, shortened to ``most`` characters, for a one-line message."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= most else text[: most - 1].rstrip() + "…"


def shortened(text: str, most: int = 40) -> str:
    """``text`` cut after ``most`` characters, with "…" to say so."""
    return text if len(text) <= most else f"{text[:most]}…"


def short_repr(value: object, most: int = 40) -> str:
    """``repr(value)`` for a one-line message, cut after ``most`` characters."""
    try:
        return shortened(repr(value), most)
    except ValueError:  # a whole number past Python's 4,300 digits to a string
        return "a number of over 4,300 digits"


class CharrnnError(Exception):
    """A user-facing failure: bad input, a missing file, an invalid option."""


class ConfigError(CharrnnError, ValueError):
    """An option value refused before anything is read, trained or written. ``field``: the option the
    message is about, named before ``problem`` (None: no option in particular)."""

    def __init__(self, problem: str, field: str | None = None):
        super().__init__(problem if field is None else f"{option(field)} {problem}")
        self.field, self.problem = field, problem


class ConfigTypeError(ConfigError, TypeError):
    """An option value of the wrong type: a bool for a number, 5.5 for a count, a string for a number."""


class OptionConflict(ConfigError):
    """Options that cannot go together, or one that does nothing beside another (a CLI usage error)."""


class TrainingInterrupted(KeyboardInterrupt):
    """A signal stopped the run after a step; ``checkpoint`` holds a resumable state (pass it as
    ``resume``). With ``trained_out`` only the final evaluation was stopped: nothing is left to resume
    (best.pt, if any, keeps the best weights evaluated). A ``KeyboardInterrupt``, so that code which
    stops on Ctrl-C still does."""

    def __init__(self, signal_name: str, checkpoint: Path, step: int, trained_out: bool = False):
        during = " during the final evaluation, after the last step" if trained_out else " after step"
        super().__init__(f"interrupted by {signal_name}{during} {step:,}; saved {checkpoint}")
        self.signal_name, self.checkpoint = signal_name, checkpoint
        self.step, self.trained_out = step, trained_out
