"""Checks on text given on the command line, model text shown in a page, and how scores, checkpoints and
values are shown; light enough for the CLI to import at start-up."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from charrnn.errors import ConfigError
from charrnn.utils.terminal import shown, shown_parts

SURROGATE = re.compile("[\ud800-\udfff]")  # how a byte that is not UTF-8 arrives (surrogateescape)


def require_valid_text(text: str, field: str) -> str:
    """Return ``text``, the option ``field``'s value, or refuse it naming the byte that made it invalid
    UTF-8. An argument that is not UTF-8 arrives with each bad byte as a lone surrogate (surrogateescape)."""
    found = SURROGATE.search(text)  # one scan in C: a text may be megabytes
    if found is not None:
        code = ord(found.group())
        byte = f" (byte 0x{code - 0xDC00:02x})" if code >= 0xDC80 else ""
        raise ConfigError(f"is not valid UTF-8{byte} at character {found.start()}", field)
    return text


# Marks Markdown would read as formatting, each as its character reference; line breaks as <br>.
MARKDOWN_MARKS = {ord(mark): f"&#{ord(mark)};" for mark in "\\`*_[]#|~"} | {ord("\n"): "<br>"}


def markdown_text(text: str) -> str:
    """``text`` (hidden characters as their escapes) as Markdown shows it literally, in a table cell too:
    markup escaped, line breaks as ``<br>`` (:data:`MARKDOWN_MARKS`)."""
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
    """The shortest of file name, run/file name and full path that tells the checkpoints apart (each
    report has ``checkpoint``, a path, and ``run``, its run directory's name)."""
    candidates = [
        [Path(report.checkpoint).name for report in reports],
        [f"{report.run}/{Path(report.checkpoint).name}" for report in reports],
    ]
    for labels in candidates:
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


def heat(nats: float) -> tuple[int, int, int]:
    """White for no surprise, through yellow, to red at :data:`SATURATION_NATS` and beyond."""
    level = max(0.0, min(1.0, nats / SATURATION_NATS))
    return 255, round(255 * (1 - 0.45 * level)), round(255 * (1 - level))
