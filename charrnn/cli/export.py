"""``charrnn export``: :func:`charrnn.api.export`, and what was written."""

from __future__ import annotations

import click

from charrnn.cli.options import GroupedCommand, json_option, option, reads_checkpoints, threads_option
from charrnn.cli.output import message, print_json, say_checkpoint


@click.command("export", cls=GroupedCommand, short_help="Write a model as a web page that generates text.")
@reads_checkpoints
@click.argument("checkpoint", type=click.Path())
@option("--output", required=True, type=click.Path(), group="output",
        help="The HTML page to write (one file: the weights, the vocabulary and the JavaScript inside).")
@option("--title", default=None, group="output", help="The page's title (default: the run's name).")
@option("--prime", default="", group="output", help="Text to put in the page's prime box.")
@json_option("Print what was written as one JSON object.")
@threads_option()
def export_command(checkpoint: str, output: str, title: str | None, prime: str, as_json: bool,
                   threads: int | None) -> None:
    """Write CHECKPOINT's model as one self-contained web page that generates text.

    The page runs the model in the browser with its own JavaScript: no Python,
    no server, no network. It has controls for the prime, length, temperature,
    top-k, top-p, greedy decoding, the seed and the no-repeat rule, and reads the
    same settings from its URL (?prime=ROMEO:&length=300&greedy=1&autorun=1).
    Greedy text in the page is the text of charrnn sample --greedy (with
    --no-repeat N as with no_repeat=N).

    \b
    Example:
      charrnn export checkpoints/tinyshakespeare --output shakespeare.html
    """
    from charrnn.api import export

    page = export(checkpoint, output, title=title, prime=prime, threads=threads)
    say_checkpoint(checkpoint, page.checkpoint)
    if as_json:
        print_json(page.to_dict())
        return
    message(f"wrote {page.path} ({page.size / 2**20:,.1f} MiB: {page.parameters:,} parameters as "
            f"{page.encoding})")


COMMANDS = [export_command]
