"""The exceptions for failures a user can fix.

Library code raises :class:`CharrnnError` with a one-line, human-readable message;
the command line turns it into ``Error: <message>`` and a non-zero exit, never a
traceback. A refused option value is a :class:`ConfigError`, which names each
option it concerns the way the caller wrote it: ``max_steps`` from Python,
``--max-steps`` on the command line (see :meth:`ConfigError.render`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

_NAME = re.compile(r"\{\{|\}\}|\{([a-z_]+)\}")  # {name} names an option; {{ and }} are literal braces


def _substitute(template: str, name: Callable[[str], str]) -> str:
    return _NAME.sub(lambda match: name(match.group(1)) if match.group(1) else match.group(0)[0], template)


def option_placeholder(name: str) -> str:
    """Names an option ``{name}``: a message built with it still names options for either door."""
    return "{" + name + "}"


def escape(text: str) -> str:
    """``text`` (a path, a character the user gave) as it must stand in a message that names options."""
    return text.replace("{", "{{").replace("}", "}}")


class CharrnnError(Exception):
    """A user-facing failure: bad input, a missing file, an invalid option.

    With ``names_options``, ``{name}`` in the message stands for the option ``name``
    (see :meth:`render`): a failure that another option would avoid says which.
    """

    def __init__(self, message: str = "", *, names_options: bool = False):
        self.template = message if names_options else None
        super().__init__(_substitute(message, str) if names_options else message)

    def as_template(self) -> str:
        """The message with ``{option}`` still standing for each option, to pass on in another message."""
        template = getattr(self, "template", None)
        return template if template is not None else escape(str(self))

    def render(self, name: Callable[[str], str] = str) -> str:
        """The message, each option named by ``name(option)`` (by default the option itself)."""
        template = getattr(self, "template", None)
        if template is None:
            return str(self)
        return _substitute(template, name)


class ConfigError(CharrnnError, ValueError):
    """An option value the library refuses, raised before anything is read, trained or written.

    ``problem`` is the message, in which ``{name}`` stands for the option ``name``:
    Python callers see the name itself, the command line its flag. With ``field``,
    the message is ``"{field} " + problem``. ``field`` is the first option the
    message concerns (None for a message about no option in particular).
    """

    def __init__(self, problem: str, field: str | None = None):
        template = problem if field is None or "{" + field + "}" in problem else f"{{{field}}} {problem}"
        names = [found for found in _NAME.findall(template) if found]
        self.field = field if field is not None else (names[0] if names else None)
        self.problem = problem
        self.about_value = field is not None and template != problem  # "{field} " + what is wrong with it
        super().__init__(template, names_options=True)

    def render_problem(self, name: Callable[[str], str] = str) -> str:
        """What is wrong, without the field in front (the command line puts the flag elsewhere)."""
        return _substitute(self.problem, name)


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
