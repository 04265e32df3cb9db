"""How ``charrnn inspect`` and ``charrnn info`` look: coloured text, rankings, surprisal, a checkpoint."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from charrnn.cli.display import (
    append_shown,
    describe_model,
    describe_split,
    escaped,
    key_value_table,
    part_scored,
)
from charrnn.utils.terminal import SATURATION_NATS, colour, heat, visible_char

SHADE = "black on rgb({},{},{})"  # a character on a background of this red, green and blue


def ranking_table(ranked: list[tuple[int, int, float]], title: str) -> Table:
    """Units and their correlation with a text feature, best first."""
    table = Table(title=title, title_justify="left")
    for column in ("layer", "unit", "correlation"):
        table.add_column(column, justify="right")
    for layer, unit, correlation in ranked:
        table.add_row(str(layer), str(unit), f"{correlation:+.3f}")
    return table


def coloured_text(text: str, values: list[float], scale: float) -> Text:
    """The text with each character's background shaded by its value."""
    rendered = Text()
    for char, value in zip(text, values, strict=True):
        append_shown(rendered, char, SHADE.format(*colour(value, scale)) if char != "\n" else "")
    return rendered


def surprisal_text(text: str, rows: list[Any], legend: bool = True) -> Group:
    """The text shaded by surprisal (white to red), a legend of the shades (where ``legend``: a console
    without colour shows none), and the mean over the scored characters."""
    scored = {row.index: row.nats for row in rows}
    rendered = Text()
    for index, char in enumerate(text):
        nats = scored.get(index)
        shade = "dim" if nats is None else "" if char == "\n" else SHADE.format(*heat(nats))
        append_shown(rendered, char, shade)
    summary = Text("surprisal: " if legend else "")
    for level in range(int(SATURATION_NATS) + 1 if legend else 0):
        summary.append(f" {level} ", style=SHADE.format(*heat(level)))
    mean = sum(scored.values()) / len(scored)
    summary.append(f"{' nats and beyond; ' if legend else ''}{len(scored):,} characters scored, {mean:.4f} "
                   f"nats/char on average (the first character has no context and is not scored)")
    return Group(rendered, Text(), summary)


def surprising_table(positions: list[Any], marked: bool = False) -> Table:
    """``inspect --most-surprising``: each position, its surprisal, its context (the character highlighted,
    and bracketed where ``marked``: a console without colour) and the model's guesses."""
    table = Table(title="the most surprising characters")
    for column, justify in (("#", "right"), ("index", "right"), ("char", "center"), ("nats", "right"),
                            ("p", "right"), ("in context", "left"), ("the model expected", "left")):
        table.add_column(column, justify=justify)
    for rank, position in enumerate(positions, start=1):
        row = position.row
        context = Text(escaped(position.before), style="dim")
        shown = f"[{escaped(row.char)}]" if marked else escaped(row.char)
        context.append(shown, style="bold black on rgb(255,115,0)")
        context.append(escaped(position.after), style="dim")
        guesses = "  ".join(f"{visible_char(char)} {probability:.0%}" for char, probability in row.top)
        table.add_row(str(rank), f"{row.index:,}", visible_char(row.char), f"{row.nats:.2f}",
                      f"{math.exp(-row.nats):.2%}", context, guesses)
    return table


def _setting(value: Any) -> str:
    """A training setting in info's list, quoted where it would not read as one word (empty, spaced, ...)."""
    quoted = isinstance(value, str) and (not value or any(mark in value for mark in " ,\n\t"))
    return repr(value) if quoted else str(value)


def info_table(name: str, facts: dict[str, Any]) -> Table:
    """``charrnn info``'s table of what a checkpoint holds."""
    corpus, latest = facts["corpus"], facts["latest_eval"]
    rows = {
        "model": describe_model(facts["model"]),
        "parameters": f"{facts['parameters']:,}",
        "vocabulary": f"{facts['vocab_size']} characters: {escaped(facts['vocab'])}",
        "step": "n/a" if facts["step"] is None else f"{facts['step']:,}",
        "epoch": "n/a" if facts["epoch"] is None else f"{facts['epoch']:.2f}",
        "best validation": "n/a" if facts["best"] is None
                           else f"{facts['best']['nats_per_char']:.4f} nats/char (the run's best when saved"
                                f"{', by the averaged weights' if facts.get('best_is_average') else ''}"
                                f"{part_scored(facts.get('best'), corpus)})",
        "corpus": "not recorded" if corpus is None else
                  f"{corpus['path']} ({corpus['chars']:,} chars, {corpus['status']})",
        "corpus sha256": "n/a" if corpus is None else corpus["sha256"],
        **({"split": describe_split(corpus["chars"], corpus["split_point"], corpus["val_frac"])}
           if corpus else {}),
        **({"latest validation": f"{latest['nats_per_char']:.4f} nats/char at step {latest['step']:,}"
                                 f"{part_scored(latest, corpus)}"} if latest else {}),
        "weights": facts["weights_dtype"] + (
            f", scoring {facts['score']['nats_per_char']:.4f} nats/char on validation" if facts.get("score")
            else ", not scored as saved"),
        **({"trained on": escaped(facts["machine"])} if facts.get("machine") else {}),
        "resumable": "yes" if facts["resumable"] else "no (weights only)",
        "format version": str(facts["format_version"]),
    }
    if training := facts["training"]:
        rows["training"] = ", ".join(f"{key} {_setting(value)}" for key, value in sorted(training.items())
                                     if key != "out_dir" and value not in (None, [], False))
    return key_value_table(name, rows, fold=True)
