"""``charrnn data get``: :func:`charrnn.api.get_dataset`, and the path it verified."""

from __future__ import annotations

import click

from charrnn import api
from charrnn.cli.output import err, message
from charrnn.utils.terminal import write_stdout


@click.group()
def data() -> None:
    """Download and verify built-in datasets.

    \b
    Examples:
      charrnn data get
      charrnn data get tinyshakespeare --data-dir ~/corpora --force
    """


@data.command("get")
@click.argument("name", type=click.Choice(sorted(api.DATASETS)), default=api.DEFAULT_DATASET)
@click.option("--data-dir", type=click.Path(), default=None,
              help="Cache directory (default: $CHARRNN_DATA_DIR or ./data).")
@click.option("--force", is_flag=True,
              help="Download again even if a verified copy exists; a different file found there is kept "
                   "under a new name (NAME.kept-1), never replaced.")
def data_get(name: str, data_dir: str | None, force: bool) -> None:
    """Download dataset NAME into the data directory and verify its SHA-256.

    \b
    The origin is karpathy/char-rnn on GitHub; set CHARRNN_DATA_MIRROR to a base
    URL (file:// works) holding NAME/input.txt to fetch from elsewhere.
    \b
    Example:
      charrnn data get tinyshakespeare
    """
    with err.status(f"fetching {name}…"):
        dataset = api.get_dataset(name, data_dir, force)
    if dataset.kept is not None:
        message(f"kept the different file that was there as {dataset.kept}")
    verb = "downloaded and verified" if dataset.downloaded else "verified cached copy of"
    message(f"{verb} {name}: {dataset.path} ({dataset.chars:,} characters)")
    write_stdout(f"{dataset.path}\n")


COMMANDS = [data]
