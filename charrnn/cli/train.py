"""``charrnn train``: options in, :func:`charrnn.api.train`, a summary out."""

from __future__ import annotations

import time
from typing import Any

import click

from charrnn.cli.options import (
    GroupedCommand,
    config_option,
    device_option,
    given_options,
    json_option,
    option,
    parse_advanced,
)
from charrnn.cli.output import err, message, print_json, show
from charrnn.config import (
    CELL_TYPES,
    DEFAULT_EPOCHS,
    DEFAULT_EVAL_EVERY,
    OPTIMIZERS,
    PRECISIONS,
    ModelConfig,
    TrainConfig,
)
from charrnn.errors import TrainingInterrupted
from charrnn.utils.interrupt import EXIT_CODES
from charrnn.utils.terminal import shell_word, terminal_columns

RUN = "run directory and checkpoints"  # a help group
SAMPLES = "samples while training"  # a help group
# What a time budget keeps for the interpreter's exit once training returns: freeing torch took 0.6 to
# 1.5 s after runs on a 2-core EPYC (torch 2.13 CPU build).
PROCESS_EXIT_S = 1.5


def _parse_epochs(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int] | None:
    """``"5,50,500"`` → ``[5, 50, 500]``; TrainConfig checks the values."""
    if value is None:
        return None
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of epochs") from None


@click.command("train", cls=GroupedCommand, short_help="Train a model (default corpus: tiny Shakespeare).")
@click.argument("corpus", required=False, type=click.Path())
@config_option("--time-budget", TrainConfig, "time_budget", "stopping", type=float,
               help="Stop after this many wall-clock seconds, then evaluate and save. An LSTM's size, batch, "
                    "learning rate and regularisation, unless given, are chosen from this machine's "
                    "measured speed (timed inside the budget).")
@config_option("--epochs", TrainConfig, "epochs", "stopping", type=float,
               help=f"Stop after this many passes over the training split ({DEFAULT_EPOCHS:g} if no limit is "
                    f"given).")
@config_option("--max-steps", TrainConfig, "max_steps", "stopping", type=int)
@config_option("--model", ModelConfig, "cell", "model", type=click.Choice(CELL_TYPES))
@config_option("--layers", ModelConfig, "num_layers", "model", type=int)
@config_option("--hidden", ModelConfig, "hidden_size", "model", budget=True, type=int)
@config_option("--embed", ModelConfig, "embed_size", "model", type=int)
@config_option("--skip-connections/--no-skip-connections", ModelConfig, "skip_connections", "model",
               budget=True)
@config_option("--lr", TrainConfig, "learning_rate", "optimisation", budget=True, type=float)
@config_option("--batch-size", TrainConfig, "batch_size", "optimisation", budget=True, type=int)
@config_option("--seq-len", TrainConfig, "seq_len", "optimisation", type=int)
@config_option("--weight-decay", TrainConfig, "weight_decay", "optimisation", budget=True, type=float)
@config_option("--optimizer", TrainConfig, "optimizer", "optimisation", type=click.Choice(OPTIMIZERS))
@config_option("--clip", TrainConfig, "clip", "optimisation", type=float)
@config_option("--seed", TrainConfig, "seed", "optimisation", type=int)
@config_option("--dropout", ModelConfig, "dropout", "regularisation", budget=True, type=float)
@config_option("--weight-drop", ModelConfig, "weight_drop", "regularisation", type=float)
@config_option("--ema", TrainConfig, "ema_decay", "regularisation", budget=True, type=float)
@option("--out", "out_dir", type=click.Path(), group=RUN,
        help="Run directory (default: checkpoints/<corpus name>).")
@option("--overwrite", is_flag=True, group=RUN, help="Replace a run already in --out.")
@option("--resume", type=click.Path(), group=RUN,
        help="Continue the run that wrote this checkpoint (or a run directory's last.pt), exactly.")
@option("--init-from", type=click.Path(), group=RUN,
        help="Fine-tune: start from this checkpoint's weights (fresh optimiser) on CORPUS; shakespeare "
             "names the model that comes with charrnn (unless a file or directory has that name).")
@option("--extend-vocab", is_flag=True, group=RUN,
        help="With --init-from: add the corpus's new characters to the vocabulary.")
@option("--save-epochs", callback=_parse_epochs, metavar="E1,E2,...", group=RUN,
        help="Keep a checkpoint at the end of each listed epoch, e.g. 5,50,500.")
@config_option("--eval-every", TrainConfig, "eval_every", "evaluation", type=int,
               help="Steps between validation passes.",
               default_text=f"{DEFAULT_EVAL_EVERY:,}; with --time-budget, at the end and a few times before "
                            f"when the budget pays for them")
@config_option("--sample-every", TrainConfig, "sample_every", SAMPLES, type=int,
               help="Every N steps (and at the end, and at every epoch checkpoint) append a sample to "
                    "samples.jsonl and show its start; see it with compare RUN_DIR --evolution.",
               default_text="at epoch checkpoints only")
@config_option("--sample-length", TrainConfig, "sample_length", SAMPLES, type=int)
@config_option("--sample-prime", TrainConfig, "sample_prime", SAMPLES, default_text="a newline")
@config_option("--sample-temperature", TrainConfig, "sample_temperature", SAMPLES, type=float)
@config_option("--sample-seed", TrainConfig, "sample_seed", SAMPLES, type=int)
@device_option("auto", "hardware and precision")
@config_option("--precision", TrainConfig, "precision", "hardware and precision",
               type=click.Choice(PRECISIONS),
               help="bf16: bfloat16 autocast of the training forward pass (CUDA, or a CPU with "
                    "AVX512-BF16/AMX); weights, optimiser and validation stay float32. auto: bf16 for an "
                    "LSTM up to 768 units wide on such a CPU, where it is faster; fp32 elsewhere.")
@json_option("Print the final summary as one JSON object.")
@option("--quiet", is_flag=True, group="output",
        help="No configuration table, progress bar or evaluation lines (warnings and errors stay).")
@option("-o", "--option", "advanced", type=(str, str), multiple=True, metavar="NAME VALUE", group="advanced",
        help="One of the settings below, e.g. -o warmup_steps 100.")
@click.pass_context
def train_command(ctx: click.Context, corpus: str | None, as_json: bool, quiet: bool,
                  advanced: tuple[tuple[str, str], ...], **arguments: Any) -> None:
    """Train a character-level model on CORPUS (a UTF-8 file or a directory of *.txt).

    Without CORPUS, tiny Shakespeare is downloaded (once, into $CHARRNN_DATA_DIR
    or ./data) and used. The run directory receives last.pt, best.pt (lowest
    validation loss), metrics.jsonl and config.json.

    \b
    Examples:
      charrnn train --time-budget 120
      charrnn train my_corpus.txt --hidden 512 --epochs 20 --dropout 0.2
      charrnn train poems/ --model gru --out runs/poems
      charrnn train --resume checkpoints/tinyshakespeare --epochs 20
    """
    # A time budget counts from the command's start: the process's, when it was started for it (main).
    started = (ctx.obj or {}).get("started", time.perf_counter())
    from charrnn import api
    from charrnn.cli.train_view import ProgressBar, training_summary

    given = {**given_options(ctx, arguments), **parse_advanced(advanced)}
    observer = ProgressBar(err, draw_bar=terminal_columns() > 0, quiet=quiet)
    try:
        result = api.train(corpus, observer=observer, started=started, finish_s=PROCESS_EXIT_S, **given)
    except TrainingInterrupted as interrupted:
        message(str(interrupted))
        if interrupted.trained_out:  # nothing left to resume
            kept = "best.pt keeps the best weights evaluated before; " \
                if interrupted.checkpoint.with_name("best.pt").is_file() else ""
            message(f"{kept}score the last ones with: charrnn eval-perplexity "
                    f"{shell_word(str(interrupted.checkpoint))}")
        else:
            message(f"resume with: charrnn train --resume {shell_word(str(interrupted.checkpoint))}")
        ctx.exit(EXIT_CODES[interrupted.signal_name])
    if result.rank != 0:  # torchrun's other processes: the first one reports
        return
    if as_json:
        print_json(result.to_dict())
    else:
        show(training_summary(result))
        message(f"sample with: charrnn sample {shell_word(str(result.out_dir / 'best.pt'))}")


COMMANDS = [train_command]
