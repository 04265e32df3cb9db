"""The ``charrnn`` command line: parse options, call the library, print results.

stdout carries what a command produces (text, scores, result tables, JSON) and
nothing else; the run's configuration, progress, notes and errors go to stderr,
so that ``charrnn sample ... > out.txt`` and ``--json`` output stay clean. Heavy
modules (torch above all) are imported inside the commands that need them, so
``--help``, ``--version``, shell completion and argument errors answer at once.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from charrnn import __version__
from charrnn.config import (
    CELL_TYPES,
    CLIP_MODES,
    COMPARE_SAMPLE,
    DEFAULT_EPOCHS,
    DEFAULT_EVAL_EVERY,
    INIT_SCHEMES,
    INSPECT_FEATURES,
    PRECISIONS,
    RNN_ACTIVATIONS,
    DynamicConfig,
    ModelConfig,
    SampleConfig,
    TrainConfig,
)
from charrnn.data.datasets import DATASETS, DEFAULT_DATASET, get_dataset
from charrnn.errors import CharrnnError, ConfigError
from charrnn.utils.files import atomic_write_text, json_text, reason
from charrnn.utils.interrupt import EXIT_CODES, GracefulStop, Terminated, raise_on_termination
from charrnn.utils.terminal import ReaderGone, silence_stdout, stdout_guard, stream_stdout, write_stdout
from charrnn.utils.text import require_valid_text

if TYPE_CHECKING:
    from charrnn.training.checkpoint import LoadedModel
    from charrnn.training.plan import TrainingPlan

out = Console()
err = Console(stderr=True)

DEVICE_CHOICES = click.Choice(["auto", "cpu", "cuda", "mps"])


def device_option(default: str):
    """The one --device option. Whole-text work (train, eval-perplexity) defaults to auto; commands
    that step one character at a time default to cpu, where those latency-bound steps run well."""
    return click.option("--device", type=DEVICE_CHOICES, default=default, show_default=True,
                        help="Where the model runs; auto picks cuda when a GPU is present, else cpu.")
BUDGET_NOTE = " An LSTM run with --time-budget picks its own unless this is given."


def _parse_epochs(value: str | None) -> list[int]:
    """``"5,50,500"`` → ``[5, 50, 500]``; TrainConfig checks the values."""
    try:
        return [int(part) for part in (value or "").split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of epochs",
                                 param_hint="'--save-epochs'") from None


def config_option(flag: str, source: Any, field_name: str, help: str, **kwargs: Any):
    """A click option bound to a config field: the same name, and its default, so they never disagree.

    ``source`` is a config dataclass (its field's default) or an instance of one (a command's
    own defaults, such as :data:`~charrnn.config.COMPARE_SAMPLE`). The option parses the value;
    the dataclass checks it, and an error names the option (see :class:`CharrnnGroup`).
    """
    if isinstance(source, type):
        default = source.__dataclass_fields__[field_name].default
    else:
        default = getattr(source, field_name)
    if isinstance(default, bool):
        kwargs.setdefault("is_flag", True)
    show = default is not None and not isinstance(default, bool)
    return click.option(flag, field_name, default=default, show_default=show, help=help, **kwargs)


def sampling_options(defaults: Any, seed_help: str):
    """The decoding options ``sample`` and ``compare`` share, their defaults taken from ``defaults``
    (:class:`~charrnn.config.SampleConfig`, or an instance of it)."""
    options = [
        config_option("--temperature", defaults, "temperature",
                      "Divide the logits by this (> 0); lower is more conservative.", type=float),
        config_option("--top-k", defaults, "top_k", "Sample only from the k most likely characters.",
                      type=int),
        config_option("--top-p", defaults, "top_p",
                      "Sample only from the smallest set with total probability ≥ p.", type=float),
        config_option("--greedy", defaults, "greedy", "Always take the most likely character."),
        config_option("--seed", defaults, "seed", seed_help, type=int),
        config_option("--stop-at", defaults, "stop_at",
                      "End a sample after this string first appears in the generated text."),
    ]

    return stacked(options)


def stacked(options: list[Callable[[Any], Any]]) -> Callable[[Any], Any]:
    """One decorator applying ``options`` so that --help lists them in this order."""
    def apply(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def dynamic_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--dynamic and its settings, shared by eval-perplexity and compare."""
    return stacked([
        click.option("--dynamic", is_flag=True,
                     help="Also score by dynamic evaluation: adapt a copy of the model to the text as it "
                          "is read."),
        config_option("--dynamic-lr", DynamicConfig, "learning_rate",
                      "Dynamic evaluation: step size (0 gives the static score).", type=float),
        config_option("--dynamic-decay", DynamicConfig, "decay",
                      "Dynamic evaluation: pull towards the trained weights at each step.", type=float),
        config_option("--segment-len", DynamicConfig, "segment_len",
                      "Dynamic evaluation: characters scored between updates.", type=int),
    ])(command)


def _refuse_sampling_options(ctx: click.Context, beam_width: int | None, greedy: bool) -> None:
    """Beam search and --greedy take no sampling option: a given one would be silently ignored."""
    deterministic = "--beam-width" if beam_width is not None else "--greedy" if greedy else None
    if deterministic is None:
        return
    random_options = ("temperature", "top_k", "top_p", "seed") + (("greedy",) if beam_width else ())
    explicit = [f"--{name.replace('_', '-')}" for name in random_options
                if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
    if explicit:
        raise click.UsageError(f"{deterministic} is deterministic; {', '.join(explicit)} does not apply")


def render_samples(texts: list[str], kind: str) -> str:
    """One text as it is; several, each under a ``=== sample N ===`` (or beam) line of its own."""
    if len(texts) == 1:
        return texts[0] + "\n"
    return "".join(f"=== {kind} {i} ===\n{text}\n" for i, text in enumerate(texts, start=1))


def _checkpoint_argument(path: Path, name: str = "best.pt", say: Callable[[str], None] | None = None) -> Path:
    """A checkpoint the user named: a file, or a run directory's ``name``, which is then said."""
    from charrnn.training.checkpoint import checkpoint_in

    resolved = checkpoint_in(path, name)
    if resolved != path:
        (say or message)(f"using {resolved}")
    return resolved


def message(text: str) -> None:
    """A status line on stderr, never re-wrapped or read as markup."""
    click.echo(text, err=True)


class OneLineUsageError(click.ClickException):
    """A usage error shown as one line (click's default adds the usage block above it)."""

    exit_code = 2


class Interrupted(click.ClickException):
    """A signal stopped a command outside training: one line, and the shell's code for it."""

    def __init__(self, signal_name: str):
        super().__init__(f"interrupted by {signal_name}; nothing was left half-written")
        self.exit_code = EXIT_CODES[signal_name]


class CharrnnGroup(click.Group):
    """Turns every user-facing failure into one line, ``Error: ...``, and a non-zero exit."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with raise_on_termination():
                return super().invoke(ctx)
        except ConfigError as exc:  # an option value outside its range: a usage error, exit 2
            raise OneLineUsageError(self._config_error_message(ctx, exc)) from None
        except CharrnnError as exc:
            raise click.ClickException(str(exc)) from None
        except ReaderGone:
            raise SystemExit(1) from None
        except KeyboardInterrupt:
            raise Interrupted("SIGINT") from None
        except Terminated as exc:
            raise Interrupted(exc.signal_name) from None
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
            raise OneLineUsageError(exc.format_message() + hint) from None


    def _config_error_message(self, ctx: click.Context, exc: ConfigError) -> str:
        """A dataclass's complaint about a field, in the words of the option that set it."""
        command = self.get_command(ctx, ctx.invoked_subcommand) if ctx.invoked_subcommand else None
        flags = {param.name: param.opts[0] for param in command.params} if command is not None else {}
        if exc.field not in flags:
            return str(exc)
        return (f"Invalid value for '{flags[exc.field]}': {exc.problem} "
                f"(see '{ctx.command_path} {ctx.invoked_subcommand} --help')")


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
    _fill_closed_descriptors()
    try:
        cli(prog_name="charrnn")
    except SystemExit as finished:
        # Checked before importing charrnn.training.distributed (and so torch): plain commands never need it.
        if os.environ.get("WORLD_SIZE", "1") != "1":
            from charrnn.training.distributed import end_process, world_size_from_environment

            if world_size_from_environment() > 1:
                code = finished.code if isinstance(finished.code, int) else int(finished.code is not None)
                end_process(code)
        raise
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


def _fill_closed_descriptors() -> None:
    """Give a closed stdout or stderr descriptor (``>&-``) /dev/null.

    Otherwise the next file opened (a checkpoint) would take descriptor 1 or 2 and
    receive whatever is printed. ``sys.stdout`` stays None, so commands still report
    that their output has nowhere to go; messages for a closed stderr are dropped,
    never sent to stdout.
    """
    for fd in (1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_WRONLY)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)  # lives as long as the process


# ---------------------------------------------------------------------------- data


@cli.group()
def data() -> None:
    """Download and verify built-in datasets."""


@data.command("get")
@click.argument("name", type=click.Choice(sorted(DATASETS)), default=DEFAULT_DATASET)
@click.option("--data-dir", type=click.Path(path_type=Path), default=None,
              help="Cache directory (default: $CHARRNN_DATA_DIR or ./data).")
@click.option("--force", is_flag=True, help="Download again even if a verified copy exists.")
def data_get(name: str, data_dir: Path | None, force: bool) -> None:
    """Download dataset NAME into the data directory and verify its SHA-256.

    \b
    The origin is karpathy/char-rnn on GitHub; set CHARRNN_DATA_MIRROR to a base
    URL (file:// works) holding NAME/input.txt to fetch from elsewhere.
    \b
    Example:
      charrnn data get tinyshakespeare
    """
    path, _ = _fetch_dataset(name, data_dir, force)
    write_stdout(f"{path}\n")


def _fetch_dataset(name: str, data_dir: Path | None, force: bool = False,
                   say: Callable[[str], None] = message) -> tuple[Path, bool]:
    with err.status(f"fetching {name}…"):
        path, downloaded = get_dataset(name, data_dir, force)
    verb = "downloaded and verified" if downloaded else "verified cached copy of"
    say(f"{verb} {name}: {path} ({DATASETS[name].chars:,} characters)")
    return path, downloaded


# --------------------------------------------------------------------------- train


@cli.command("train")
@click.argument("corpus", required=False, type=click.Path(path_type=Path))
@config_option("--model", ModelConfig, "cell", "Recurrent cell.", type=click.Choice(CELL_TYPES))
@config_option("--layers", ModelConfig, "num_layers", "Stacked recurrent layers.", type=int)
@config_option("--hidden", ModelConfig, "hidden_size", f"Units per layer.{BUDGET_NOTE}",
               type=int)
@config_option("--embed", ModelConfig, "embed_size", "Character embedding size.", type=int)
@config_option("--dropout", ModelConfig, "dropout",
               f"Dropout between layers and before the output layer.{BUDGET_NOTE}",
               type=float)
@config_option("--weight-drop", ModelConfig, "weight_drop",
               "DropConnect on the recurrent weights W_hh: one mask per segment (AWD-LSTM).", type=float)
@config_option("--locked-dropout/--no-locked-dropout", ModelConfig, "locked_dropout",
               "Draw every dropout mask once per segment and keep it at each step (variational).")
@config_option("--input-dropout", ModelConfig, "input_dropout",
               "Dropout on the embedded characters fed to the first layer.", type=float)
@config_option("--embed-dropout", ModelConfig, "embed_dropout",
               "Drop whole characters from the embedding, one draw per segment.", type=float)
@config_option("--skip-connections/--no-skip-connections", ModelConfig, "skip_connections",
               "Feed the input to every layer and every layer to the output layer (Graves 2013).")
@config_option("--batch-size", TrainConfig, "batch_size", f"Parallel BPTT streams.{BUDGET_NOTE}",
               type=int)
@config_option("--seq-len", TrainConfig, "seq_len", "Characters per truncated-BPTT segment.",
               type=int)
@config_option("--lr", TrainConfig, "learning_rate", f"Peak Adam learning rate.{BUDGET_NOTE}",
               type=float)
@config_option("--min-lr-ratio", TrainConfig, "min_lr_ratio", "The cosine schedule ends at lr × this.",
               type=float)
@config_option("--warmup-steps", TrainConfig, "warmup_steps", "Linear learning-rate warm-up.",
               type=int)
@config_option("--weight-decay", TrainConfig, "weight_decay", "Decoupled weight decay.",
               type=float)
@config_option("--ema", TrainConfig, "ema_decay",
               "Keep a moving average of the weights with this decay (e.g. 0.999; 0: off); best.pt holds "
               "it when it scores better.", type=float)
@config_option("--clip", TrainConfig, "clip", "Clipping threshold (see --clip-mode); 0 turns clipping off.",
               type=float)
@config_option("--clip-mode", TrainConfig, "clip_mode",
               "norm: rescale all gradients by their global norm; value: clamp each element to ±clip.",
               type=click.Choice(CLIP_MODES))
@config_option("--rnn-activation", ModelConfig, "rnn_activation", "Nonlinearity of --model rnn.",
               type=click.Choice(RNN_ACTIVATIONS))
@config_option("--layer-norm", ModelConfig, "layer_norm",
               "Layer-normalised cells: each gate's pre-activation (and the LSTM cell state).")
@config_option("--forget-bias", ModelConfig, "forget_bias",
               "LSTM: start the effective forget-gate bias (b_ih + b_hh) at this value "
               "[default: PyTorch's small random biases].", type=float)
@config_option("--init", ModelConfig, "init", "Weight initialisation (textbook notes §2).",
               type=click.Choice(INIT_SCHEMES))
@config_option("--spectral-radius", ModelConfig, "spectral_radius",
               "--init esn / --model esn: spectral radius of each recurrent block.", type=float)
@config_option("--recurrent-density", ModelConfig, "recurrent_density",
               "--init esn / --model esn: fraction of non-zero recurrent weights.", type=float)
@config_option("--epochs", TrainConfig, "epochs",
               f"Stop after this many passes over the training split ({DEFAULT_EPOCHS:g} if no limit "
               f"is given).",
               type=float)
@config_option("--max-steps", TrainConfig, "max_steps", "Stop after this many steps.",
               type=int)
@config_option("--time-budget", TrainConfig, "time_budget",
               "Stop after this many wall-clock seconds, then evaluate and save.",
               type=float)
@click.option("--save-epochs", "save_epochs", callback=lambda ctx, param, value: _parse_epochs(value),
              default=None, metavar="E1,E2,...",
              help="Keep a checkpoint at the end of each listed epoch, e.g. 5,50,500.")
@config_option("--max-bad-steps", TrainConfig, "max_bad_steps",
               "Stop after this many consecutive steps with a non-finite loss or gradient.",
               type=int)
@config_option("--eval-every", TrainConfig, "eval_every",
               f"Steps between validation passes [default: {DEFAULT_EVAL_EVERY:,}; with --time-budget, only "
               f"at the end].",
               type=int)
@config_option("--save-every", TrainConfig, "save_every", "Steps between writes of last.pt.",
               type=int)
@config_option("--val-frac", TrainConfig, "val_frac", "Tail fraction of the corpus held out for validation.",
               type=float)
@config_option("--seed", TrainConfig, "seed", "Random seed.", type=int)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Run directory (default: checkpoints/<corpus name>).")
@click.option("--overwrite", is_flag=True, help="Replace a run already in --out.")
@click.option("--resume", "resume_path", type=click.Path(path_type=Path), default=None,
              help="Continue the run that wrote this checkpoint (e.g. RUN_DIR/last.pt), exactly.")
@click.option("--init-from", type=click.Path(path_type=Path), default=None,
              help="Fine-tune: start from this checkpoint's weights (fresh optimiser) on CORPUS.")
@click.option("--extend-vocab", is_flag=True,
              help="With --init-from: add the corpus's new characters to the vocabulary.")
@device_option("auto")
@config_option("--precision", TrainConfig, "precision",
               "bf16: bfloat16 autocast of the training forward pass (CUDA, or a CPU with "
               "AVX512-BF16/AMX); weights, optimiser and validation stay float32. auto: bf16 for an "
               "LSTM on such a CPU, where it is faster; fp32 elsewhere.",
               type=click.Choice(PRECISIONS))
@click.option("--data-dir", type=click.Path(path_type=Path), default=None,
              help="Dataset cache for the built-in corpus (default: $CHARRNN_DATA_DIR or ./data).")
@click.option("--json", "as_json", is_flag=True, help="Print the final summary as one JSON object.")
@click.option("--quiet", is_flag=True,
              help="No configuration table, progress bar or evaluation lines (warnings and errors stay).")
@click.pass_context
def train_command(ctx: click.Context, corpus: Path | None, out_dir: Path | None, overwrite: bool,
                  resume_path: Path | None, init_from: Path | None, extend_vocab: bool, device: str,
                  data_dir: Path | None, as_json: bool, quiet: bool, **options: Any) -> None:
    """Train a character-level model on CORPUS (a UTF-8 file or a directory of *.txt).

    Without CORPUS, tiny Shakespeare is downloaded (once) and used. The run
    directory receives last.pt, best.pt (lowest validation loss), metrics.jsonl
    and config.json.

    \b
    Examples:
      charrnn train --time-budget 120
      charrnn train my_corpus.txt --hidden 512 --epochs 20 --dropout 0.2
      charrnn train poems/ --model gru --out runs/poems
    """
    from charrnn.cli.display import ProgressBar, describe_stop, key_value_table
    from charrnn.models.devices import resolve_device
    from charrnn.training.distributed import join_from_environment, leave
    from charrnn.training.loop import TrainingInterrupted, TrainObserver
    from charrnn.training.plan import (
        OptionConflict,
        RunAlreadyFinished,
        TrainingRequest,
        check_request,
        plan_training,
    )

    observer = TrainObserver() if quiet else ProgressBar(err, draw_bar=sys.stderr.isatty())
    given = {key: value for key, value in options.items()
             if ctx.get_parameter_source(key) is not click.core.ParameterSource.DEFAULT}
    request = TrainingRequest(corpus, given, out_dir, overwrite, resume_path, init_from, extend_vocab,
                              resolve_device(device))
    try:
        check_request(request)
        # Under torchrun: join the other processes; rank 0 alone prints.
        group, request.device = join_from_environment(request.device)
        say = group.only_main(message)
        if group.world_size > 1:
            say(f"training with {group.world_size} processes (DistributedDataParallel, "
                f"{'nccl' if request.device.startswith('cuda') else 'gloo'})")
        if resume_path is not None:
            request.resume = _checkpoint_argument(resume_path, "last.pt", say)
        elif corpus is None:
            request.corpus, _ = _fetch_dataset(DEFAULT_DATASET, data_dir, say=say)
            request.corpus_name = DEFAULT_DATASET
        if init_from is not None:
            _checkpoint_argument(init_from, "best.pt", say)  # says which checkpoint a directory means
        plan = plan_training(request)
    except OptionConflict as exc:
        raise click.UsageError(str(exc), ctx) from None
    except RunAlreadyFinished as exc:
        raise CharrnnError(f"this run already {describe_stop(exc.reason)}; give a larger limit to continue it"
                           ) from None
    _say_plan(plan, ctx, say)
    try:
        with GracefulStop() as stop:
            result = plan.run(observer, stop, group)
    except TrainingInterrupted as interrupted:
        say(str(interrupted))
        say(f"resume with: charrnn train --resume {shlex.quote(str(interrupted.checkpoint))}")
        ctx.exit(EXIT_CODES[interrupted.signal_name])
    finally:
        leave(group)
    if not group.is_main:
        return
    if as_json:
        write_stdout(json_text({
            "stopped": describe_stop(result.stop_reason), "steps": result.steps, "epoch": result.epoch,
            "elapsed_s": result.elapsed_s, "best": result.best.to_dict(),
            "best_is_average": result.best_is_average,
            "skipped_steps": result.skipped_steps,
            "out_dir": str(result.out_dir), "best_checkpoint": str(result.out_dir / "best.pt"),
            "last_checkpoint": str(result.out_dir / "last.pt"),
            "epoch_checkpoints": [str(path) for path in result.epoch_checkpoints],
        }, ensure_ascii=False) + "\n")
        return
    summary = key_value_table("training finished", {
        "stopped": describe_stop(result.stop_reason),
        "steps": f"{result.steps:,} ({result.epoch:.2f} epochs)",
        "wall time": f"{result.elapsed_s:.1f} s",
        "best validation": f"{result.best.nats_per_char:.4f} nats/char, "
                           f"{result.best.bits_per_char:.4f} bits/char, "
                           f"perplexity {result.best.perplexity:.3f}"
                           f"{' (averaged weights)' if result.best_is_average else ''}",
        "skipped steps": str(result.skipped_steps),
        "checkpoints": f"{result.out_dir / 'best.pt'}, {result.out_dir / 'last.pt'}",
        **({"epoch checkpoints": ", ".join(path.name for path in result.epoch_checkpoints)}
           if result.epoch_checkpoints else {}),
    })
    with stdout_guard():
        out.print(summary)


def _say_plan(plan: TrainingPlan, ctx: click.Context, say: Callable[[str], None]) -> None:
    """Tell the user what the plan decided that they did not ask for in so many words."""
    flags = {param.name: param.opts[0] for param in ctx.command.params}
    budget = plan.budget
    if budget is not None and not budget.measured:
        say(f"--time-budget {budget.seconds:g} s on {budget.device}: the budget settings were measured on a "
            f"CPU, so this run keeps the plain defaults")
    elif budget is not None and budget.chosen:
        chosen = " ".join(flags[key] if value is True else f"{flags[key]} {value:g}"
                          for key, value in budget.chosen.items())
        say(f"--time-budget {budget.seconds:g} s: {chosen} (the fastest-learning settings measured "
            f"for this budget in {budget.precision}; give any of them to override)")
    resume = plan.resume
    if resume is not None:
        for key, old, new in resume.changes:
            say(f"resuming with {key}: {old!r} → {new!r}")
        where = f" into a new branch {plan.config.out_dir}" if resume.branch else ""
        say(f"resuming {resume.checkpoint} at step {resume.step:,} (epoch {resume.epoch:.2f}){where}")


# -------------------------------------------------------------------------- sample


@cli.command("sample")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@config_option("--length", SampleConfig, "length", "Characters to generate.", type=int)
@sampling_options(SampleConfig, "The same seed gives the same text.")
@click.option("--beam-width", type=click.IntRange(min=1), default=None,
              help="Beam search: keep the B most probable continuations (deterministic).")
@config_option("--min-length", SampleConfig, "min_length",
               "--stop-at ends no sample shorter than this many generated characters.", type=int)
@click.option("--length-penalty", type=click.FloatRange(min=0), default=None,
              help="With --beam-width and --stop-at: rank beams by log-probability / ((5 + n) / 6) ** ALPHA, "
                   "n their length [default: 1.0; 0 ranks by total log-probability].")
@click.option("--prime", default=None, help="Text to warm the model with; the output starts with it.")
@click.option("--prime-file", type=click.Path(path_type=Path), default=None,
              help="Read the prime from a UTF-8 file.")
@config_option("--num-samples", SampleConfig, "num_samples",
               "Independent samples, generated together (with --beam-width: the N best beams).", type=int)
@click.option("--output", type=click.Path(path_type=Path), default=None,
              help="Write the text to this file instead of stdout.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line: text (prime included), and log_prob and stopped for beams.")
@device_option("cpu")
@click.pass_context
def sample_command(ctx: click.Context, checkpoint: Path, beam_width: int | None, prime: str | None,
                   prime_file: Path | None, output: Path | None, as_json: bool, device: str,
                   length_penalty: float | None, **options: Any) -> None:
    """Generate text from CHECKPOINT, streaming it to stdout as it is produced.

    stdout (or --output) gets the text alone. Several samples (--num-samples)
    are each preceded by a line "=== sample N ===" ("=== beam N ===" for beams);
    --json gives one JSON object per line instead. With --beam-width the N best
    beams are printed once the search ends, their total log-probabilities on
    stderr.

    \b
    Examples:
      charrnn sample checkpoints/tinyshakespeare/best.pt --prime "ROMEO:" --length 500
      charrnn sample best.pt --temperature 0.7 --top-p 0.9 --seed 1
      charrnn sample best.pt --greedy --length 200 --output greedy.txt
      charrnn sample best.pt --beam-width 8 --num-samples 3 --stop-at $'\\n\\n'
    """
    config = SampleConfig(**options)
    _check_decoding_options(ctx, config, beam_width, length_penalty)
    if prime is not None and prime_file is not None:
        raise click.UsageError("give --prime or --prime-file, not both")
    # Imported only now, so that a mistyped option is reported without waiting for torch.
    from charrnn.data.corpus import read_corpus
    from charrnn.generation.sample import collect_samples, generate
    from charrnn.models.devices import resolve_device
    from charrnn.training.checkpoint import load_model
    if prime_file is not None:
        prime = read_corpus(prime_file)
    prime = prime or ""
    checkpoint = _checkpoint_argument(checkpoint)
    loaded = load_model(checkpoint, resolve_device(device))

    if beam_width is not None:
        records = _best_beams(loaded, config, prime, beam_width, length_penalty)
        rendered = render_samples([record["text"] for record in records], "beam")
    else:
        drawn = config.seed is None and not config.greedy
        if drawn:
            # A fresh seed each time, said on stderr, so that any text worth keeping can be drawn again.
            config = dataclasses.replace(config, seed=secrets.randbits(63))
        steps = generate(loaded.model, loaded.vocab, config, prime)  # checks the prime first
        if drawn:
            message(f"seed {config.seed} (give --seed {config.seed} to draw the same text again)")
        if output is None and config.num_samples == 1 and not as_json:
            stream_stdout((chars[0] for chars in steps), prefix=prime)
            return
        records = [{"text": text} for text in collect_samples(steps, prime, config.num_samples)]
        rendered = render_samples([record["text"] for record in records], "sample")
    if as_json:
        rendered = "".join(json_text(record, ensure_ascii=False) + "\n" for record in records)
    if output is None:
        write_stdout(rendered)
        return
    atomic_write_text(output, rendered)
    message(f"wrote {config.num_samples} sample(s) to {output}")


def _check_decoding_options(ctx: click.Context, config: SampleConfig, beam_width: int | None,
                            length_penalty: float | None) -> None:
    """Refuse option combinations that would be ignored or repeat themselves."""
    _refuse_sampling_options(ctx, beam_width, config.greedy)
    if length_penalty is not None and beam_width is None:
        raise click.UsageError("--length-penalty ranks beams: it goes with --beam-width")
    if beam_width is not None and config.num_samples > beam_width:
        raise click.UsageError(f"--num-samples {config.num_samples} exceeds --beam-width {beam_width}")
    if beam_width is None and config.greedy and config.num_samples > 1:
        raise click.UsageError(f"--greedy gives one text; --num-samples {config.num_samples} would repeat it "
                               f"(use --beam-width for several deterministic texts)")


def _best_beams(loaded: LoadedModel, config: SampleConfig, prime: str, beam_width: int,
                length_penalty: float | None) -> list[dict[str, Any]]:
    """The ``config.num_samples`` best beams as output records; their scores are said on stderr."""
    from charrnn.generation.beam import DEFAULT_LENGTH_PENALTY, beam_search

    beams = beam_search(loaded.model, loaded.vocab, prime, beam_width, config.length, config.stop_at,
                        DEFAULT_LENGTH_PENALTY if length_penalty is None else length_penalty,
                        config.min_length)
    if len(beams) < config.num_samples:
        message(f"note: only {len(beams)} distinct continuation(s) of {config.length} characters exist "
                f"over this model's {len(loaded.vocab)}-symbol vocabulary; printing {len(beams)}")
    beams = beams[: config.num_samples]
    for i, beam in enumerate(beams, start=1):
        message(f"beam {i}: log-prob {beam.log_prob:.4f}{' (stopped)' if beam.stopped else ''}")
    return [{"text": prime + beam.text, "log_prob": beam.log_prob, "stopped": beam.stopped} for beam in beams]


# ---------------------------------------------------------------- eval-perplexity


@cli.command("eval-perplexity")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.argument("text_file", required=False, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object for scripts.")
@click.option("--skip-unknown", is_flag=True,
              help="Drop characters outside the vocabulary and score the rest.")
@dynamic_options
@device_option("auto")
def eval_perplexity_command(checkpoint: Path, text_file: Path | None, as_json: bool, skip_unknown: bool,
                            dynamic: bool, device: str, **dynamic_settings: Any) -> None:
    """Score TEXT_FILE (default: the checkpoint's own validation split) under CHECKPOINT.

    Reports nats/char, bits/char and perplexity over the whole text, read as one
    stream with the state carried across chunks. With --dynamic, also the score
    of dynamic evaluation, which adapts a copy of the model to the text as it
    reads it (the checkpoint is never changed).

    \b
    Examples:
      charrnn eval-perplexity checkpoints/tinyshakespeare/best.pt
      charrnn eval-perplexity best.pt held_out.txt --json
      charrnn eval-perplexity best.pt --dynamic
    """
    from charrnn.analysis.dynamic import checkpoint_dynamic_score
    from charrnn.cli.display import key_value_table
    from charrnn.data.cache import cached_ids, scan_corpus
    from charrnn.data.corpus import checkpoint_validation_ids
    from charrnn.data.vocab import UnknownCharactersError, describe_chars
    from charrnn.models.devices import resolve_device
    from charrnn.models.evaluate import evaluate
    from charrnn.training.checkpoint import load_model
    checkpoint = _checkpoint_argument(checkpoint)
    loaded = load_model(checkpoint, resolve_device(device))
    if text_file is None:
        try:
            ids = checkpoint_validation_ids(loaded.payload.get("corpus"), loaded.vocab)
        except CharrnnError as exc:
            raise CharrnnError(f"{exc}; pass a TEXT_FILE to score instead") from None
        source = f"validation split of {loaded.payload['corpus']['path']}"
    else:
        scan = scan_corpus(text_file)
        unknown = loaded.vocab.outside(scan.char_counts())
        if unknown and not skip_unknown:
            raise CharrnnError(f"{UnknownCharactersError(unknown)} (use --skip-unknown to score the rest)")
        if unknown:
            message(f"skipped {sum(unknown.values()):,} character(s) outside the vocabulary: "
                    f"{describe_chars(unknown)}")
        ids = cached_ids(scan, loaded.vocab, skip_unknown=True)
        source = str(text_file)
    settings = DynamicConfig(**dynamic_settings) if dynamic else None  # checked before the work starts
    started = time.perf_counter()
    result = evaluate(loaded.model, ids)
    adapted = checkpoint_dynamic_score(loaded, ids, settings) if settings is not None else None
    seconds = time.perf_counter() - started
    if as_json:
        record: dict[str, Any] = result.to_dict()
        if adapted is not None:
            record["dynamic"] = {**adapted.to_dict(), **settings.to_dict()}
        write_stdout(json_text(record) + "\n")
        return
    rows = {
        "text": source,
        "nats/char": f"{result.nats_per_char:.4f}",
        "bits/char": f"{result.bits_per_char:.4f}",
        "perplexity": f"{result.perplexity:.4f}",
    }
    if adapted is not None:
        rows.update({
            "dynamic nats/char": f"{adapted.nats_per_char:.4f} "
                                 f"({adapted.nats_per_char - result.nats_per_char:+.4f})",
            "dynamic bits/char": f"{adapted.bits_per_char:.4f}",
            "dynamic settings": f"lr {settings.learning_rate:g}, decay {settings.decay:g}, "
                                f"segments of {settings.segment_len}",
        })
    rows.update({"characters scored": f"{result.chars:,}", "time": f"{seconds:.1f} s"})
    table = key_value_table("perplexity", rows)
    with stdout_guard():
        out.print(table)


# ------------------------------------------------------------------------- compare

@cli.command("compare")
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--prime", default="", help="Every sample starts with this text.")
@config_option("--length", COMPARE_SAMPLE, "length", "Characters to generate per checkpoint.", type=int)
@sampling_options(COMPARE_SAMPLE, "The same seed for every checkpoint.")
@click.option("--prime-file", type=click.Path(path_type=Path), default=None,
              help="Read the prime from a UTF-8 file.")
@click.option("--beam-width", type=click.IntRange(min=1), default=None,
              help="Decode by beam search (deterministic) instead of sampling.")
@click.option("--text", "text_file", type=click.Path(path_type=Path), default=None,
              help="Score this text for every checkpoint instead of each one's own validation split.")
@click.option("--against", default=None, metavar="train|FILE",
              help="Measure how much of each sample is copied and how much is spelled right, against "
                   "each checkpoint's own training split (train) or FILE.")
@dynamic_options
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per checkpoint.")
@click.option("--markdown", "markdown_file", type=click.Path(path_type=Path), default=None,
              help="Also write the comparison as Markdown to this file.")
@device_option("cpu")
@click.pass_context
def compare_command(ctx: click.Context, checkpoints: tuple[Path, ...], prime: str, length: int,
                    temperature: float, seed: int, top_k: int | None, top_p: float | None, greedy: bool,
                    prime_file: Path | None, beam_width: int | None, stop_at: str | None,
                    text_file: Path | None, against: str | None, dynamic: bool, as_json: bool,
                    markdown_file: Path | None, device: str, **dynamic_settings: Any) -> None:
    """Score CHECKPOINTS and sample each with the same prime, seed and decoding settings.

    For each: epoch, steps, validation nats/char, bits/char, perplexity and a
    sample, side by side (stacked when the terminal is narrow). Checkpoints may
    come from different runs, sizes and vocabularies. With --against, also the
    share of the sample's words that are real words of the reference, the longest
    passage copied from it verbatim, and the share of characters inside copies of
    32 characters or more.

    \b
    Examples:
      charrnn compare checkpoints/epochs/epoch0005-*.pt checkpoints/epochs/epoch0050-*.pt
      charrnn compare checkpoints/epochs/epoch0*.pt --against train --prime "ROMEO:"
      charrnn compare runs/*/best.pt --prime "ROMEO:" --temperature 0.8 --markdown report.md
      charrnn compare a.pt b.pt --beam-width 4 --text held_out.txt --json
      charrnn compare runs/*/best.pt --dynamic
    """
    sample = SampleConfig(length=length, temperature=temperature, seed=seed, stop_at=stop_at, top_k=top_k,
                          top_p=top_p, greedy=greedy)
    _refuse_sampling_options(ctx, beam_width, greedy)
    if prime and prime_file is not None:
        raise click.UsageError("give --prime or --prime-file, not both")
    from charrnn.analysis.compare import TRAINING_SPLIT, CompareSettings, compare_checkpoints, to_markdown
    from charrnn.cli.display import comparison_renderable
    from charrnn.data.corpus import read_corpus
    from charrnn.models.devices import resolve_device
    if prime_file is not None:
        prime = read_corpus(prime_file)
    require_valid_text(prime, "--prime")
    text = read_corpus(text_file) if text_file is not None else None
    if against is not None and against != TRAINING_SPLIT:
        read_corpus(Path(against))  # a missing or unreadable reference fails now, not per checkpoint
    settings = CompareSettings(prime=prime, sample=sample, beam_width=beam_width, text=text,
                               text_name=str(text_file) if text_file is not None else None, against=against,
                               dynamic=DynamicConfig(**dynamic_settings) if dynamic else None)
    paths = [_checkpoint_argument(path) for path in checkpoints]
    reports, note = compare_checkpoints(paths, settings, resolve_device(device))
    if note:
        message(f"note: {note}")
    if markdown_file is not None:
        atomic_write_text(markdown_file, to_markdown(reports, settings, note))
        message(f"wrote {markdown_file}")
    if as_json:
        write_stdout(json_text([report.to_dict() for report in reports], indent=2, ensure_ascii=False) + "\n")
        return
    with stdout_guard():
        out.print(comparison_renderable(reports, out.width))


# ---------------------------------------------------------------------------- info


@cli.command("info")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object for scripts.")
def info_command(checkpoint: Path, as_json: bool) -> None:
    """Describe CHECKPOINT (a file, or a run directory's best.pt) without running the model.

    Model shape and parameter count, vocabulary, step and epoch, the best
    validation loss stored in it, its corpus (and whether it is still there,
    unchanged), the training options and the format version.

    \b
    Examples:
      charrnn info checkpoints/tinyshakespeare/best.pt
      charrnn info checkpoints/tinyshakespeare --json
    """
    from charrnn.training.checkpoint import describe_checkpoint, load_checkpoint

    checkpoint = _checkpoint_argument(checkpoint)
    facts = describe_checkpoint(load_checkpoint(checkpoint))
    if as_json:
        write_stdout(json_text({"checkpoint": str(checkpoint), **facts}, ensure_ascii=False) + "\n")
        return
    from charrnn.cli.display import info_table

    with stdout_guard():
        out.print(info_table(str(checkpoint), facts))


# ---------------------------------------------------------------------------- plot


@cli.command("plot")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--output", type=click.Path(path_type=Path), default=Path("curves.png"), show_default=True,
              help="Image to write; the suffix picks the format (png, svg, pdf).")
def plot_command(run_dirs: tuple[Path, ...], output: Path) -> None:
    """Plot training and validation loss of RUN_DIRS against epoch and wall time.

    One colour per run; epoch checkpoints (train --save-epochs) are starred.
    Needs the optional matplotlib: pip install 'charrnn-cli[plot]'.

    \b
    Example:
      charrnn plot checkpoints/epochs runs/gru --output curves.png
    """
    from charrnn.analysis.plot import plot_runs
    plot_runs(list(run_dirs), output)
    message(f"wrote {output}")


# ------------------------------------------------------------------------- inspect


@cli.command("inspect")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.argument("text_file", type=click.Path(path_type=Path))
@click.option("--layer", type=click.IntRange(min=0), default=0, show_default=True,
              help="Layer to look at, counting from 0.")
@click.option("--unit", type=click.IntRange(min=0), default=None, help="Unit of that layer, counting from 0.")
@click.option("--state", type=click.Choice(["h", "c"]), default="h", show_default=True,
              help="Hidden state, or (LSTM only) cell state.")
@click.option("--rank", "feature", type=click.Choice(INSPECT_FEATURES), default=None,
              help="List the units that best track this feature of the text.")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="How many units --rank lists.")
@click.option("--max-chars", type=click.IntRange(min=1), default=3000, show_default=True,
              help="Read at most this many characters of TEXT_FILE.")
@click.option("--html", "html_file", type=click.Path(path_type=Path), default=None,
              help="Also write the coloured text as a standalone HTML page.")
@device_option("cpu")
def inspect_command(checkpoint: Path, text_file: Path, layer: int, unit: int | None, state: str,
                    feature: str | None, top: int, max_chars: int, html_file: Path | None,
                    device: str) -> None:
    """Colour TEXT_FILE by one unit's activation, or rank units by a feature of the text.

    Each character is shaded by the unit's value after reading it: red negative,
    white zero, blue positive. --rank quotes finds "inside a quotation" cells.

    \b
    Examples:
      charrnn inspect best.pt play.txt --layer 1 --unit 37 --state c
      charrnn inspect best.pt play.txt --rank quotes --top 5
      charrnn inspect best.pt play.txt --unit 37 --html unit37.html
    """
    from charrnn.analysis.neurons import activations, html_page, rank_units, text_feature
    from charrnn.cli.display import coloured_text, ranking_table
    from charrnn.data.corpus import read_corpus
    from charrnn.data.vocab import UnknownCharactersError
    from charrnn.models.devices import resolve_device
    from charrnn.training.checkpoint import load_model
    if unit is None and feature is None:
        raise click.UsageError("give --unit to colour the text, or --rank to find units")
    checkpoint = _checkpoint_argument(checkpoint)
    loaded = load_model(checkpoint, resolve_device(device))
    config = loaded.model.config
    if layer >= config.num_layers:
        raise click.BadParameter(f"the model has layers 0 to {config.num_layers - 1}", param_hint="'--layer'")
    if unit is not None and unit >= config.hidden_size:
        raise click.BadParameter(f"layers have units 0 to {config.hidden_size - 1}", param_hint="'--unit'")
    text = read_corpus(text_file)[:max_chars]
    try:
        acts = activations(loaded.model, loaded.vocab, text, state)
    except UnknownCharactersError as exc:
        raise CharrnnError(f"{text_file}: {exc}") from None
    if feature is not None:
        ranked = rank_units(acts, text_feature(text, feature), top)
        with stdout_guard():
            out.print(ranking_table(ranked, f"units tracking {feature} ({state} state)"))
    if unit is None:
        return
    values = acts[:, layer, unit].tolist()
    scale = 1.0 if state == "h" else max(1e-6, max(abs(v) for v in values))
    with stdout_guard():
        out.print(coloured_text(text, values, scale), soft_wrap=True)
    if html_file is not None:
        title = (f"{checkpoint.resolve().parent.name}/{checkpoint.name}: layer {layer}, unit {unit}, "
                 f"{'cell state' if state == 'c' else 'hidden state'}")
        atomic_write_text(html_file, html_page(text, values, scale, title))
        message(f"wrote {html_file}")
