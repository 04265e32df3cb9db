"""The exceptions for failures a user can fix.

Library code raises :class:`CharrnnError` with a one-line, human-readable message;
the command line turns it into ``Error: <message>`` and a non-zero exit, never a
traceback. A message names each option the way its caller spells it (:func:`option`):
``max_steps`` from Python, ``--max-steps`` on the command line.
"""

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


class CharrnnError(Exception):
    """A user-facing failure: bad input, a missing file, an invalid option."""


class ConfigError(CharrnnError, ValueError):
    """An option value the library refuses, raised before anything is read, trained or written.

    With ``field``, the message is the option's name, then ``problem``; ``field`` is the option
    the message is about (None for a message about no option in particular).
    """

    def __init__(self, problem: str, field: str | None = None):
        super().__init__(problem if field is None else f"{option(field)} {problem}")
        self.field = field
        self.problem = problem


class ConfigTypeError(ConfigError, TypeError):
    """An option value of the wrong type: a bool where a number belongs, 5.5 for a count, a string for
    a number."""


class OptionConflict(ConfigError):
    """Options that cannot be given together, or one that does nothing beside another (a usage error on
    the command line)."""


class TrainingInterrupted(KeyboardInterrupt):
    """A signal stopped the run after a step; ``checkpoint`` holds a resumable state (pass it as
    ``resume``), unless ``trained_out``: the run had reached its end and only its final evaluation was
    stopped, so there is nothing to resume (a best.pt keeps the best weights evaluated before, if any
    were). A ``KeyboardInterrupt``, so that code which stops on Ctrl-C still does."""

    def __init__(self, signal_name: str, checkpoint: Path, step: int, trained_out: bool = False):
        during = " during the final evaluation, after the last step" if trained_out else " after step"
        super().__init__(f"interrupted by {signal_name}{during} {step:,}; saved {checkpoint}")
        self.signal_name = signal_name
        self.checkpoint = checkpoint
        self.step = step
        self.trained_out = trained_out
