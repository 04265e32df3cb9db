"""``charrnn export``: :func:`charrnn.api.export`, and what was written."""

from __future__ import annotations

import click

from charrnn import api
from charrnn.cli.options import GroupedCommand, json_option, option, reads_checkpoints, threads_option
from charrnn.cli.output import message, print_json, say_checkpoint
from charrnn.config import EXPORT_FORMATS


@click.command("export", cls=GroupedCommand,
               short_help="Write a model as a web page, or a model folder to share.")
@reads_checkpoints
@click.argument("checkpoint", type=click.Path())
@option("--output", required=True, type=click.Path(), group="output",
        help="The HTML page to write (one file: the weights, the vocabulary and the JavaScript inside), or "
             "with --format safetensors the model folder (a new or empty one, or one export wrote).")
@option("--format", "export_format", type=click.Choice(EXPORT_FORMATS), default="page", show_default=True,
        group="output", help="page: a web page that generates text; safetensors: a model folder "
                             "(model.safetensors, config.json, vocab.json and a README model card).")
@option("--title", default=None, group="page", help="The page's title (default: the run's name).")
@option("--prime", default="", group="page", help="Text to put in the page's prime box.")
@option("--float32", is_flag=True, group="model folder",
        help="Store float32 weights in the model folder, not the checkpoint's own precision.")
@json_option("Print what was written as one JSON object.")
@threads_option()
def export_command(checkpoint: str, output: str, export_format: str, title: str | None, prime: str,
                   float32: bool, as_json: bool, threads: int | None) -> None:
    """Write CHECKPOINT's model as one self-contained web page that generates text,
    or as a model folder that other programs load.

    The page runs the model in the browser with its own JavaScript: no Python,
    no server, no network. It has controls for the prime, length, temperature,
    top-k, top-p, greedy decoding, the seed and the no-repeat rule, and reads the
    same settings from its URL (?prime=ROMEO:&length=300&greedy=1&autorun=1).
    Greedy text in the page is the text of charrnn sample --greedy (with
    --no-repeat N as with no_repeat=N).

    The model folder (--format safetensors) holds the weights as safetensors
    (no code runs when they load), config.json, vocab.json and a README.md model
    card: what it scores, on which text, and how it was trained. charrnn reads
    the folder wherever it reads a checkpoint, except to resume.

    \b
    Examples:
      charrnn export checkpoints/tinyshakespeare --output shakespeare.html
      charrnn export checkpoints/tinyshakespeare --format safetensors --output shakespeare-model
    """
    written = api.export(checkpoint, output, format=export_format, title=title, prime=prime,
                         float32=float32, threads=threads)
    say_checkpoint(checkpoint, written.checkpoint)
    if as_json:
        print_json(written.to_dict())
        return
    what = "weights" if written.format == "safetensors" else "page"
    message(f"wrote {written.path} ({what} {written.size / 2**20:,.1f} MiB: {written.parameters:,} "
            f"parameters as {written.encoding})")


COMMANDS = [export_command]
