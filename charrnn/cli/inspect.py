"""``charrnn info``, ``charrnn inspect`` and ``charrnn plot``: looking at checkpoints and runs."""

from __future__ import annotations

from typing import Any

import click

from charrnn.cli.options import GroupedCommand, config_option, device_option, json_option, option
from charrnn.cli.output import print_json, say_checkpoint, show, write_file
from charrnn.config import INSPECT_FEATURES, INSPECT_TOP, InspectConfig


@click.command("info", cls=GroupedCommand)
@click.argument("checkpoint", type=click.Path())
@json_option()
def info_command(checkpoint: str, as_json: bool) -> None:
    """Describe CHECKPOINT (a file, or a run directory's best.pt) without running the model.

    Model shape and parameter count, vocabulary, step and epoch, the best
    validation loss stored in it, its corpus (and whether it is still there,
    unchanged), the training options and the format version.

    \b
    Examples:
      charrnn info checkpoints/tinyshakespeare/best.pt
      charrnn info checkpoints/tinyshakespeare --json
    """
    from charrnn.api import info

    result = info(checkpoint)
    say_checkpoint(checkpoint, result.checkpoint)
    if as_json:
        print_json(result.to_dict())
        return
    from charrnn.cli.display import info_table

    show(info_table(str(result.checkpoint), result.facts))


@click.command("inspect", cls=GroupedCommand)
@click.argument("checkpoint", type=click.Path())
@click.argument("text_file", type=click.Path())
@config_option("--unit", InspectConfig, "unit", "what to look at", type=int)
@config_option("--layer", InspectConfig, "layer", "what to look at", type=int, default_text="0")
@config_option("--state", InspectConfig, "state", "what to look at", type=click.Choice(["h", "c"]))
@config_option("--rank", InspectConfig, "rank", "what to look at", type=click.Choice(INSPECT_FEATURES))
@config_option("--top", InspectConfig, "top", "what to look at", type=int, default_text=str(INSPECT_TOP))
@config_option("--max-chars", InspectConfig, "max_chars", "what to look at", type=int)
@option("--html", "html_file", type=click.Path(), default=None, group="output",
        help="Also write the coloured text as a standalone HTML page.")
@json_option("Print the activations and the ranking as one JSON object instead.")
@device_option("cpu")
def inspect_command(checkpoint: str, text_file: str, html_file: str | None, device: str, as_json: bool,
                    **looking: Any) -> None:
    """Colour TEXT_FILE by one unit's activation, or rank units by a feature of the text.

    Each character is shaded by the unit's value after reading it: red negative,
    white zero, blue positive. --rank quotes finds "inside a quotation" cells.

    \b
    Examples:
      charrnn inspect best.pt play.txt --layer 1 --unit 37 --state c
      charrnn inspect best.pt play.txt --rank quotes --top 5
      charrnn inspect best.pt play.txt --unit 37 --html unit37.html
    """
    from charrnn.api import check_output, inspect
    from charrnn.cli.display import coloured_text, ranking_table

    if html_file is not None:
        check_output(html_file, "html_file", {"checkpoint": checkpoint, "text_file": text_file})
    seen = inspect(checkpoint, file=text_file, device=device, **looking)
    say_checkpoint(checkpoint, seen.checkpoint)
    page = seen.to_html() if html_file is not None else None  # refused without --unit, before any output
    if as_json:
        print_json(seen.to_dict())
    if seen.ranking is not None and not as_json:
        show(ranking_table(seen.ranking, f"units tracking {seen.feature} ({seen.state} state)"))
    if seen.values is not None and not as_json:
        show(coloured_text(seen.text, seen.values, seen.scale), soft_wrap=True)
    if html_file is not None and page is not None:
        write_file(html_file, page)


@click.command("plot")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path())
@click.option("--output", type=click.Path(), default="curves.png", show_default=True,
              help="Image to write; the suffix picks the format (png, svg, pdf).")
def plot_command(run_dirs: tuple[str, ...], output: str) -> None:
    """Plot training and validation loss of RUN_DIRS against epoch and wall time.

    One colour per run; epoch checkpoints (train --save-epochs) are starred.
    Needs the optional matplotlib: pip install 'charrnn-cli[plot]'.

    \b
    Example:
      charrnn plot checkpoints/epochs runs/gru --output curves.png
    """
    from charrnn.api import plot
    from charrnn.cli.output import message

    message(f"wrote {plot(list(run_dirs), output)}")


COMMANDS = [info_command, inspect_command, plot_command]
