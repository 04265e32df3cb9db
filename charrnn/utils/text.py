"""Checks on text given on the command line, and model text shown in a page; light enough for the CLI to
import at start-up."""

from __future__ import annotations

import html

from charrnn.errors import CharrnnError
from charrnn.utils.terminal import shown_parts


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


def html_text(text: str) -> str:
    """Model or corpus text inside a page's ``<pre>``: line breaks stay, and every other hidden character
    (a carriage return, an escape, a bidirectional override) is its escape in a ``hidden`` span. A raw
    carriage return would be read as a second line break, double-spacing a CRLF text."""
    return "".join(f'<span class="hidden">{html.escape(piece)}</span>' if hidden else html.escape(piece)
                   for piece, hidden in shown_parts(text, keep="\n"))


HIDDEN_CHAR_STYLE = ".hidden{font-size:80%;border:1px solid #999;border-radius:2px;padding:0 1px}"
