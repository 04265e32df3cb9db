"""Checks on text given on the command line, light enough for the CLI to import at start-up."""

from __future__ import annotations

from charrnn.errors import CharrnnError


def require_valid_text(text: str, what: str) -> str:
    """Return ``text``, or say which byte made it invalid UTF-8; ``what`` may name an option as ``{name}``.

    Command-line arguments that are not UTF-8 arrive with each bad byte as a lone
    surrogate (Python's surrogateescape); such text has no code points to look up.
    """
    for position, char in enumerate(text):
        if "\ud800" <= char <= "\udfff":
            byte = f" (byte 0x{ord(char) - 0xDC00:02x})" if ord(char) >= 0xDC80 else ""
            raise CharrnnError(f"{what} is not valid UTF-8{byte} at character {position}", names_options=True)
    return text
