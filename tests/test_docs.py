"""Every command shown in the README and docs/ still parses, so the guide cannot drift from the tool."""

from __future__ import annotations

import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import charrnn
from charrnn.api import dynamic_settings
from charrnn.cli.main import cli
from charrnn.cli.options import parse_advanced
from charrnn.config import COMPARE_SEED, DEFAULT_EVAL_EVERY, SampleConfig, TrainingRequest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```(console|bash)\n(.*?)```", re.DOTALL)


def blocks() -> list[tuple[str, str, str]]:
    """(document, kind, text) for each console or bash block of the README and docs/."""
    return [(document.name, *found) for document in DOCUMENTS
            for found in FENCE.findall(document.read_text(encoding="utf-8"))]


def example_commands() -> list[tuple[str, str]]:
    """(where, command line) for each charrnn command in a console or bash block."""
    found = [(where, line.removeprefix("$ ")) for where, kind, block in blocks()
             for line in (line.strip() for line in block.replace("\\\n", " ").splitlines())
             if line.startswith("$ charrnn " if kind == "console" else "charrnn ")]
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
    """Parse a command line to its subcommand as the program would, and check its values, running nothing."""
    command: click.Command = cli
    context = command.make_context("charrnn", list(args))
    while isinstance(command, click.Group):
        name, *rest = [*getattr(context, "_protected_args", []), *context.args]
        command = command.get_command(context, name)
        assert command is not None, f"no command {name!r}"
        context = command.make_context(name, rest, parent=context)
    check_values(command.name, context)


def check_values(name: str, context: click.Context) -> None:
    """The checks the library makes of these values before any work: ranges, types, conflicts."""
    params = context.params
    if name == "train":
        given = {key: value for key, value in params.items() if key not in ("device", "as_json", "quiet")
                 and context.get_parameter_source(key) is not click.core.ParameterSource.DEFAULT}
        given.update(parse_advanced(given.pop("advanced", ())))
        request = {key: given.pop(key) for key in ("resume", "init_from", "extend_vocab", "out_dir",
                                                   "overwrite") if key in given}
        TrainingRequest(given.pop("corpus", None), given, **request)
    if name in ("sample", "compare"):
        decoding = {key: params[key] for key in SampleConfig.__dataclass_fields__ if key in params}
        SampleConfig(**decoding)
    if name in ("eval-perplexity", "compare"):
        dynamic_settings(*(params[key] for key in ("dynamic", "dynamic_lr", "dynamic_decay", "segment_len")))


EXAMPLES = example_commands()


def test_every_command_has_an_example_in_the_guide_and_in_its_help():
    shown_in = {where: {shlex.split(line, comments=True)[1] for other, line in EXAMPLES if other == where}
                for where in ("README.md", "guide.md")}
    for name, command in cli.commands.items():
        assert name in shown_in["README.md"] | shown_in["guide.md"], f"no example of charrnn {name}"
        assert f"charrnn {name} " in (command.help or ""), f"charrnn {name} --help shows no example"


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
    result = CliRunner().invoke(cli, args, prog_name="charrnn")
    assert result.exit_code == 0, result.output
    if args == ["--version"]:
        assert result.stdout == f"charrnn, version {charrnn.__version__}\n"
    else:
        assert result.stdout.startswith(f"Usage: charrnn {' '.join(args[:-1])}".rstrip() + " [OPTIONS]")
        assert "--help" in result.stdout and result.stderr == ""


def console_examples() -> list[tuple[str, list[str]]]:
    """(command line, the output lines shown under it) for each ``$ charrnn`` line of a console block."""
    commands = [command.splitlines() for _, kind, block in blocks() if kind == "console"
                for command in re.split(r"^\$ ", block, flags=re.MULTILINE)[1:]]
    return [(line, shown) for line, *shown in commands if line.startswith("charrnn ")]


CHEAP = ("charrnn data get", "charrnn sample shakespeare --greedy")  # whole outputs a test checks


@pytest.mark.parametrize(("line", "shown"), [(line, shown) for line, shown in console_examples()
                                             if line.startswith(CHEAP)])
def test_cheap_console_examples_print_what_the_guide_shows(line, shown, data_mirror, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHARRNN_DATA_DIR", raising=False)
    result = CliRunner().invoke(cli, shlex.split(line)[1:])
    assert result.exit_code == 0, result.output
    assert shown in (result.output.splitlines(), result.stdout.splitlines())  # as a terminal, or stdout alone


DEFAULT_IN_BRACKETS = re.compile(r"`(--[a-z][a-z-]*)[^`]*`(?: \([^)]*\))? \[([^\]]+)\]")


def stated_defaults() -> list[tuple[str, str, str]]:
    """(command, flag, the default the README states in brackets) in each command's section."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return [(section.split()[0].rstrip("`"), flag, value) for section in readme.split("\n### `charrnn ")[1:]
            for flag, value in DEFAULT_IN_BRACKETS.findall(section.replace("\n", " "))]


STATED_DEFAULTS = stated_defaults()
# Options whose unset value (None) means a default that the library applies later.
EFFECTIVE_DEFAULTS = {("train", "--eval-every"): DEFAULT_EVAL_EVERY,
                      ("sample", "--temperature"): SampleConfig().softmax_temperature,
                      ("compare", "--temperature"): SampleConfig().softmax_temperature,
                      ("compare", "--seed"): COMPARE_SEED}


def test_the_readme_states_defaults_for_the_main_options():
    assert {"--layers", "--hidden", "--length", "--temperature"} <= {flag for _, flag, _ in STATED_DEFAULTS}


@pytest.mark.parametrize(("command", "flag", "stated"), STATED_DEFAULTS,
                         ids=[f"{command} {flag}" for command, flag, _ in STATED_DEFAULTS])
def test_a_default_the_readme_states_is_the_options_own(command, flag, stated):
    """The README restates defaults for readers; the dataclasses hold them. This keeps the two equal."""
    option = next(param for param in cli.commands[command].params if flag in param.opts)
    first = re.split(r"[ ,;:]", stated.strip(), maxsplit=1)[0]
    default = EFFECTIVE_DEFAULTS.get((command, flag), option.default)
    number = isinstance(default, int | float) and not isinstance(default, bool)
    said = f"README says {flag} [{stated}], the option's default is {default}"
    assert (float(first) if number else first) == (default if number else str(default)), said


def test_the_command_line_reference_is_what_the_code_generates():
    """docs/cli.md is every command's --help; scripts/cli_docs.py rewrites it when an option changes."""
    checked = subprocess.run([sys.executable, str(ROOT / "scripts" / "cli_docs.py"), "--check"],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert "## `charrnn train`" in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def test_the_docs_read_at_a_breath():
    """No sentence of the README or docs/ runs past 40 words; the README and the budget page do not sprawl."""
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "prose_check.py"), *map(str, DOCUMENTS)],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
    assert len((ROOT / "docs" / "defaults.md").read_text().splitlines()) <= 400


def test_the_prose_check_splits_sentences_and_skips_code_and_tables():
    long_sentences = runpy.run_path(str(ROOT / "scripts" / "prose_check.py"))["long_sentences"]
    long = " ".join(["word"] * 41)
    text = f"{long}. Short one.\n\n```\n{long}\n```\n\n| {long} |\n\n    {long}\n\n- Two. X{' x' * 40}\n"
    assert [(line, count) for line, count, _ in long_sentences(text)] == [(1, 41), (11, 41)]
    link = " ".join(["word"] * 39)
    assert long_sentences(f"See [{link}](a/b.md). Done.") == []  # a link counts by its text
