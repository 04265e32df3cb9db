"""The ``charrnn`` group: every failure as one line, and the process's start and end. stdout carries
what a command produces and nothing else; configuration, progress, notes and errors go to stderr. Heavy
modules (torch above all) are imported inside the commands, so ``--help``, ``--version``, completion and
argument errors answer at once."""

from __future__ import annotations

import os
import time
from typing import Any

import click

from charrnn import __version__
from charrnn.cli.options import option_namer
from charrnn.cli.output import message
from charrnn.errors import CharrnnError, ConfigError, OptionConflict, option, options_spelled
from charrnn.utils.files import reason
from charrnn.utils.hardware import cpu_bf16_setting, process_age_s
from charrnn.utils.interrupt import EXIT_CODES, Terminated, raise_on_termination
from charrnn.utils.terminal import ReaderGone, fill_closed_descriptors, one_line, silence_stdout


class OneLineUsageError(click.ClickException):
    """A usage error shown as one line (click's default adds the usage block above it)."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(one_line(message))


class Interrupted(click.ClickException):
    """A signal stopped a command outside training: one line, and the shell's code for it."""

    def __init__(self, signal_name: str):
        super().__init__(f"interrupted by {signal_name}; nothing was left half-written")
        self.exit_code = EXIT_CODES[signal_name]


class CharrnnGroup(click.Group):
    """Turns every user-facing failure into one line, ``Error: ...``, and a non-zero exit."""

    def invoke(self, ctx: click.Context) -> Any:
        # Every message names an option as this command spells it; the command is known once parsed.
        with options_spelled(lambda name: option_namer(self._command(ctx))(name)):
            try:
                with raise_on_termination():
                    cpu_bf16_setting()  # a mistyped CHARRNN_CPU_BF16 is refused by every command
                    return super().invoke(ctx)
            except ConfigError as exc:  # a refused option value: a usage error, exit 2, in the options' words
                command = self._command(ctx)
                see = f" (see '{ctx.command_path} {command.name} --help')" if command is not None else ""
                plain = isinstance(exc, OptionConflict) or exc.field is None
                problem = str(exc) if plain else f"Invalid value for '{option(exc.field)}': {exc.problem}"
                raise OneLineUsageError(problem + see) from None
            except CharrnnError as exc:
                raise click.ClickException(one_line(str(exc))) from None
            except ReaderGone:
                raise SystemExit(1) from None
            except KeyboardInterrupt:
                raise Interrupted("SIGINT") from None
            except Terminated as exc:
                raise Interrupted(exc.signal_name) from None
            except click.exceptions.NoArgsIsHelpError:  # a group without a command: click shows its help
                raise
            except click.UsageError as exc:
                hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
                raise OneLineUsageError(exc.format_message() + hint) from None

    def _command(self, ctx: click.Context) -> click.Command | None:
        return self.get_command(ctx, ctx.invoked_subcommand) if ctx.invoked_subcommand else None


@click.group(cls=CharrnnGroup)
@click.version_option(__version__, prog_name="charrnn")
def cli() -> None:
    """Character-level RNN text generator: train, sample, and measure perplexity.

    \b
    Quick tour:
      charrnn train --time-budget 120          # tiny Shakespeare, downloaded on first use
      charrnn sample checkpoints/tinyshakespeare/best.pt --prime "ROMEO:"
      charrnn eval-perplexity checkpoints/tinyshakespeare/best.pt
    """


def main() -> None:
    """The ``charrnn`` command and ``python -m charrnn`` (which is what torchrun starts)."""
    fill_closed_descriptors()
    try:
        # This process was started for the command: a time budget counts from its start.
        cli(prog_name="charrnn", obj={"started": time.perf_counter() - process_age_s()})
    except SystemExit as finished:
        from charrnn.api import end_torchrun_worker

        code = finished.code if isinstance(finished.code, int) else int(finished.code is not None)
        end_torchrun_worker(code)
        raise
    except KeyboardInterrupt:
        # Ctrl-C between commands' own handling and the exit (after the work was done, say): still the
        # documented exit and one line, not Python's death by the signal.
        message("Error: interrupted by SIGINT")
        raise SystemExit(EXIT_CODES["SIGINT"]) from None
    except OSError as exc:
        # Only writing the standard streams raises a bare OSError here (--help into /dev/full, say):
        # every file charrnn opens itself reports its own failures as a CharrnnError.
        silence_stdout()
        message(f"Error: cannot write to standard output: {reason(exc)}")
        raise SystemExit(1) from None
    except Exception as exc:
        # A failure no check foresaw: still one line. CHARRNN_DEBUG=1 shows the traceback.
        if os.environ.get("CHARRNN_DEBUG"):
            raise
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        message(f"Error: unexpected {type(exc).__name__}: {detail} (please report it; CHARRNN_DEBUG=1 "
                f"shows where)")
        raise SystemExit(1) from None


def _register() -> None:
    from charrnn.cli import data, evaluate, export, inspect, sample, train

    for module in (train, sample, evaluate, inspect, export, data):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()
