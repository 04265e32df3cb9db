"""``charrnn info``, ``charrnn inspect`` and ``charrnn plot``: looking at checkpoints and runs."""

from __future__ import annotations

from itertools import islice
from typing import Any

import click

from charrnn import api
from charrnn.cli.options import (
    GroupedCommand,
    config_option,
    device_option,
    given_options,
    json_option,
    option,
    reads_checkpoints,
    single_stream_option,
    skip_unknown_option,
)
from charrnn.cli.output import colour_lost, print_json, say_checkpoint, show, shows_colour, write_file
from charrnn.config import INSPECT_FEATURES, INSPECT_TOP, InspectConfig
from charrnn.errors import OptionConflict
from charrnn.utils.files import json_text
from charrnn.utils.terminal import stream_stdout


@click.command("info", cls=GroupedCommand, short_help="Describe a checkpoint without building its model.")
@reads_checkpoints
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
    from charrnn.cli.inspect_view import info_table

    result = api.info(checkpoint)
    say_checkpoint(checkpoint, result.checkpoint)
    if as_json:
        print_json(result.to_dict())
    else:
        show(info_table(str(result.checkpoint), result.facts))


@click.command("inspect", cls=GroupedCommand,
               short_help="Look at units; --surprisal: each character's surprisal.")
@reads_checkpoints
@click.argument("checkpoint", type=click.Path())
@click.argument("text_file", type=click.Path())
@config_option("--unit", InspectConfig, "unit", "what to look at", type=int)
@config_option("--layer", InspectConfig, "layer", "what to look at", type=int, default_text="0")
@config_option("--state", InspectConfig, "state", "what to look at", type=click.Choice(["h", "c"]))
@config_option("--rank", InspectConfig, "rank", "what to look at", type=click.Choice(INSPECT_FEATURES))
@config_option("--top", InspectConfig, "top", "what to look at", type=int, default_text=str(INSPECT_TOP))
@config_option("--max-chars", InspectConfig, "max_chars", "what to look at", type=int,
               default_text="3000; with --surprisal, the whole text")
@option("--surprisal", is_flag=True, group="surprisal",
        help="Colour each character by its surprisal (-ln p given the text before it) and list the model's "
             "guesses there (--top of them, default 5); the mean is eval-perplexity's nats/char.")
@option("--most-surprising", type=int, metavar="K", group="surprisal",
        help="List the K most surprising characters in their context (implies --surprisal).")
@skip_unknown_option("surprisal")
@single_stream_option("surprisal")
@option("--html", "html_file", type=click.Path(), default=None, group="output",
        help="Also write the coloured text as a standalone HTML page (with --surprisal, each character's "
             "scores on hover).")
@json_option("Print the activations and the ranking as one JSON object instead (with --surprisal, one "
             "object per character, streamed).")
@device_option("cpu")
@click.pass_context
def inspect_command(ctx: click.Context, checkpoint: str, text_file: str, html_file: str | None, device: str,
                    as_json: bool, surprisal: bool, most_surprising: int | None, skip_unknown: bool,
                    single_stream: bool, **looking: Any) -> None:
    """Colour TEXT_FILE by one unit's activation, rank units by a feature of the text, or show where
    the model is surprised.

    Each character is shaded by the unit's value after reading it: red negative,
    white zero, blue positive. --rank quotes finds "inside a quotation" cells.
    --surprisal shades each character by how unexpected it was, white to red.

    \b
    Examples:
      charrnn inspect best.pt play.txt --layer 1 --unit 37 --state c
      charrnn inspect best.pt play.txt --rank quotes --top 5
      charrnn inspect best.pt play.txt --unit 37 --html unit37.html
      charrnn inspect best.pt held_out.txt --most-surprising 10
      charrnn inspect best.pt held_out.txt --surprisal --html surprisal.html
    """
    from charrnn.cli.inspect_view import coloured_text, ranking_table, surprisal_text, surprising_table

    if html_file is not None:
        api.check_output(html_file, "html_file", {"checkpoint": checkpoint, "text_file": text_file})
    surprising = surprisal or most_surprising is not None
    if (skip_unknown or single_stream) and not surprising:
        flag = "--skip-unknown drops characters from" if skip_unknown else "--single-stream sets how it reads"
        raise OptionConflict(f"{flag} the text --surprisal scores: it goes with --surprisal or "
                             f"--most-surprising")
    if surprising:  # the rows streamed as JSON, the K most surprising, or the coloured text
        if most_surprising is not None:
            api.Surprisal.check_count(most_surprising)
        given = {**given_options(ctx, looking), "skip_unknown": skip_unknown, "single_stream": single_stream}
        scores = api.surprisal(checkpoint, file=text_file, device=device, **given)
        say_checkpoint(checkpoint, scores.model.checkpoint)
        rows = None  # the coloured text's rows, computed once for the page too
        if most_surprising is not None:
            positions = scores.most_surprising(most_surprising)
            if as_json:
                print_json([position.to_dict() for position in positions])
            else:
                show(surprising_table(positions, marked=not shows_colour()))
        elif as_json:
            stream_stdout(json_lines(scores))
        else:
            rows = list(scores)
            show(surprisal_text(scores.text, rows, legend=shows_colour()), soft_wrap=True)
            if html_file is None:
                colour_lost("each character's surprisal")
        if html_file is not None:
            write_file(html_file, scores.to_html(rows=rows))
        return
    seen = api.inspect(checkpoint, file=text_file, device=device, **looking)
    say_checkpoint(checkpoint, seen.checkpoint)
    page = seen.to_html() if html_file is not None else None  # refused without --unit, before any output
    if as_json:
        print_json(seen.to_dict())
    if seen.ranking is not None and not as_json:
        show(ranking_table(seen.ranking, f"units tracking {seen.feature} ({seen.state} state)"))
    if seen.values is not None and not as_json:
        show(coloured_text(seen.text, seen.values, seen.scale), soft_wrap=True)
        if html_file is None:
            colour_lost("the unit's activation at each character")
    if html_file is not None and page is not None:
        write_file(html_file, page)


def json_lines(rows: Any, batch: int = 512) -> Any:
    """One JSON object per row and line, handed on ``batch`` rows at a time (one flush each)."""
    rows = iter(rows)
    while chunk := list(islice(rows, batch)):
        yield "".join(json_text(row.to_dict(), ensure_ascii=False) + "\n" for row in chunk)


@click.command("plot", short_help="Plot runs' training and validation loss.")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path())
@click.option("--output", type=click.Path(), default="curves.png", show_default=True,
              help="Image to write; the suffix picks the format (png, svg, pdf).")
def plot_command(run_dirs: tuple[str, ...], output: str) -> None:
    """Plot training and validation loss of RUN_DIRS against epoch and wall time.

    One colour per run; epoch checkpoints (train --save-epochs) are starred, and
    best.pt is ringed where it was saved, at the score it records. Scores on the
    start of the validation split (a time budget's evaluations during training) are
    a dotted series of their own, never joined to whole-split scores. A log epoch
    axis when the run spans more than two decades of epochs.
    Needs the optional matplotlib: pip install 'charrnn-cli[plot]'.

    \b
    Example:
      charrnn plot checkpoints/epochs runs/gru --output curves.png
    """
    from charrnn.cli.output import message

    message(f"wrote {api.plot(list(run_dirs), output)}")


COMMANDS = [info_command, inspect_command, plot_command]
