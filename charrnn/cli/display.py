"""How results look in a terminal: what the commands' views (``train_view``, ``evaluate_view``, ...) share.
The views only arrange what the library computed. Every user-supplied string goes in as rich ``Text``,
never as markup, so paths and samples holding ``[brackets]`` show as they are."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from charrnn.config import TrainConfig, partial_eval_chars
from charrnn.config import split_point as corpus_split_point
from charrnn.utils.terminal import escape_char, is_hidden, one_line, shown_parts


def key_value_table(title: str, rows: dict[str, str], fold: bool = False) -> Table:
    """A two-column table of plain text: [brackets] shown as they are, control characters escaped (a
    path stays one line). ``fold``: long values wrap instead of ending in an ellipsis."""
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold" if fold else "ellipsis")
    for key, value in rows.items():
        table.add_row(key, Text(one_line(value)))
    return table


def clock_time(seconds: float) -> str:
    """``83`` → ``1:23``, ``3723`` → ``1:02:03``."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def shown_text(text: str, style: str = "") -> Text:
    """Model or corpus text for a view: line breaks and tabs kept, any other character a terminal would obey
    or hide shown as its escape in reverse video: one character, never the text ``\\x1b``."""
    rendered = Text(style=style)
    for piece, hidden in shown_parts(text):
        rendered.append(piece, style="reverse" if hidden else "")
    return rendered


def append_shown(rendered: Text, char: str, style: str) -> None:
    """One character of a shaded view, as :func:`shown_text` shows it, appended in ``style``."""
    if char in "\n\t" or not is_hidden(char):
        rendered.append(char, style=style)
    else:
        rendered.append(escape_char(char), style=f"{style} reverse".strip())


def escaped(chars: str) -> str:
    """Characters as Python would write them in a string: newlines and tabs visible, the rest as is."""
    return repr(chars)[1:-1]


def describe_model(model: dict[str, Any]) -> str:
    """A model's shape in a few words, from its ``model_config`` dict (as a checkpoint holds it)."""
    return (f"{model['num_layers']}×{model['hidden_size']} {model['cell'].upper()}"
            f"{' (layer-normalised)' if model.get('layer_norm') else ''}"
            f"{' with skip connections' if model.get('skip_connections') else ''}, "
            f"embedding {model['embed_size']}, {regularisation(model)}")


def regularisation(model: dict[str, Any]) -> str:
    """A model's dropouts in a few words: "dropout 0.2", or each rate that is set."""
    locked = " (locked)" if model.get("locked_dropout") else ""
    rates = {"weight_drop": "weight drop", "input_dropout": "input dropout",
             "embed_dropout": "embedding dropout"}
    return ", ".join([f"dropout {model['dropout']:g}{locked}",
                      *(f"{label} {model[key]:g}" for key, label in rates.items() if model.get(key))])


def describe_split(chars: int, split_point: int, val_frac: float) -> str:
    """"1,003,854 train / 111,540 validation (the last 10%)", or what the cap held out."""
    held_out = chars - split_point
    percent = f"{val_frac * 100:.3g}%"
    share = f"the last {percent}" if split_point == corpus_split_point(chars, val_frac) else \
        f"the last {held_out:,} characters: {percent}, capped"
    return f"{split_point:,} train / {held_out:,} validation ({share})"


def describe_evaluations(config: TrainConfig, val_chars: int) -> str:
    """When the run evaluates, and what each evaluation scores."""
    subset = partial_eval_chars(config.eval_chars, val_chars)
    scored = f", each on the first {subset:,} validation chars" if subset else ""
    if config.evaluation_interval:
        return f"every {config.evaluation_interval:,} steps and at the end{scored}"
    return f"at the end, and during training as the time budget says below{scored}"


def part_scored(result: dict[str, Any] | None, corpus: dict[str, Any] | None) -> str:
    """", on the first N validation chars" for a score of only the validation split's start, else nothing."""
    if not result or not corpus or "chars" not in result:
        return ""
    whole = corpus["chars"] - corpus["split_point"] - 1
    return f", on the first {result['chars']:,} validation chars" if result["chars"] < whole else ""


