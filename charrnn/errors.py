"""The one exception type for failures a user can fix.

Library code raises :class:`CharrnnError` with a one-line, human-readable message;
the command line turns it into ``Error: <message>`` and a non-zero exit, never a
traceback.
"""


class CharrnnError(Exception):
    """A user-facing failure: bad input, a missing file, an invalid option."""


class ConfigError(CharrnnError, ValueError):
    """An option value outside its allowed range.

    ``field`` names the configuration field at fault (the command line shows its
    flag instead), and ``problem`` says what is wrong with it; a message about
    several options together has no field.
    """

    def __init__(self, problem: str, field: str | None = None):
        super().__init__(f"{field} {problem}" if field else problem)
        self.problem = problem
        self.field = field
