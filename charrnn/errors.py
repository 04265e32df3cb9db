"""The one exception type for failures a user can fix.

Library code raises :class:`CharrnnError` with a one-line, human-readable message;
the command line turns it into ``Error: <message>`` and a non-zero exit, never a
traceback.
"""


class CharrnnError(Exception):
    """A user-facing failure: bad input, a missing file, an invalid option."""


class ConfigError(CharrnnError, ValueError):
    """An option value outside its allowed range."""
