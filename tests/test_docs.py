"""Every command shown in the README and docs/ still parses, so the guide cannot drift from the tool."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from charrnn.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```(console|bash)\n(.*?)```", re.DOTALL)


def example_commands() -> list[tuple[str, str]]:
    """(where, command line) for each charrnn command in a console or bash block."""
    found = []
    for document in DOCUMENTS:
        for kind, block in FENCE.findall(document.read_text(encoding="utf-8")):
            lines = block.replace("\\\n", " ").splitlines()
            for line in lines:
                line = line.strip()
                if kind == "console":
                    if not line.startswith("$ charrnn "):
                        continue
                    line = line[2:]
                elif not line.startswith("charrnn "):
                    continue
                found.append((document.name, line))
    return found + help_examples(cli, "charrnn")


def help_examples(command: click.Command, path: str) -> list[tuple[str, str]]:
    """The example lines of every command's --help text."""
    found = [(path, line.strip()) for line in (command.help or "").splitlines()
             if line.strip().startswith("charrnn ")]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            found += help_examples(sub, f"{path} {name}")
    return found


def parse(args: list[str]) -> None:
    """Parse a command line down to its subcommand, as the real program would, without running it."""
    command: click.Command = cli
    context = command.make_context("charrnn", list(args))
    while isinstance(command, click.Group):
        name, *rest = [*getattr(context, "_protected_args", []), *context.args]
        command = command.get_command(context, name)
        assert command is not None, f"no command {name!r}"
        context = command.make_context(name, rest, parent=context)


EXAMPLES = example_commands()


def test_the_guide_has_examples():
    assert len(EXAMPLES) >= 20


@pytest.mark.parametrize(("where", "line"), EXAMPLES,
                         ids=[f"{where}:{line[:50]}" for where, line in EXAMPLES])
def test_each_example_command_parses(where, line):
    # Bash's $'...' quoting (a newline in --stop-at) is not shlex's: give it the string it stands for.
    line = re.sub(r"\$'([^']*)'", lambda m: shlex.quote(m.group(1).encode().decode("unicode_escape")), line)
    args = shlex.split(line, comments=True)[1:]
    try:
        parse(args)
    except click.exceptions.Exit:
        pass  # --help and --version stop parsing, successfully


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["train", "--help"], ["sample", "--help"],
                                  ["info", "--help"], ["data", "get", "--help"]])
def test_help_and_version_answer(args):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0 and result.stdout.strip()


def console_examples() -> list[tuple[str, list[str]]]:
    """(command line, the output lines shown under it) for each ``$ charrnn`` line of a console block."""
    found = []
    for document in DOCUMENTS:
        for kind, block in FENCE.findall(document.read_text(encoding="utf-8")):
            if kind != "console":
                continue
            lines = block.splitlines()
            for index, line in enumerate(lines):
                if line.startswith("$ charrnn "):
                    shown = []
                    for following in lines[index + 1:]:
                        if following.startswith("$ "):
                            break
                        shown.append(following)
                    found.append((line[2:], shown))
    return found


CHEAP = ("charrnn data get",)  # examples whose whole output can be checked in a test


@pytest.mark.parametrize(("line", "shown"), [(line, shown) for line, shown in console_examples()
                                             if line.startswith(CHEAP)])
def test_cheap_console_examples_print_what_the_guide_shows(line, shown, data_mirror, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHARRNN_DATA_DIR", raising=False)
    result = CliRunner().invoke(cli, shlex.split(line)[1:])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == shown
