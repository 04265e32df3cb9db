"""Write docs/cli.md, every command's --help, from the click commands themselves.

    python scripts/cli_docs.py           # rewrite docs/cli.md
    python scripts/cli_docs.py --check   # exit 1 if docs/cli.md is not what the code would write

tests/test_docs.py runs the check, so the page cannot drift from the options.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from charrnn.cli.main import cli

PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
WIDTH = 100  # help is wrapped at this many columns, whatever the terminal that runs the script


def _commands(command: click.Command, path: str, parent: click.Context | None = None):
    """(command path, its help text) for ``command`` and every command below it, in help order."""
    context = click.Context(command, info_name=path.split()[-1], parent=parent, terminal_width=WIDTH,
                            max_content_width=WIDTH)
    yield path, command.get_help(context)
    if isinstance(command, click.Group):
        for name in command.list_commands(context):
            yield from _commands(command.commands[name], f"{path} {name}", context)


def render() -> str:
    """The whole page."""
    parts = ["# Command-line reference",
             "",
             "Every command's `--help`, generated from the code by `python scripts/cli_docs.py`.",
             "The [README](../README.md) and the [user guide](guide.md) say what the commands are for.",
             ""]
    for path, help_text in _commands(cli, "charrnn"):
        parts += [f"## `{path}`", "", "```text", help_text.rstrip(), "```", ""]
    return "\n".join(parts)


def main() -> int:
    page = render()
    if "--check" in sys.argv[1:]:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE} is stale: run python scripts/cli_docs.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
