"""``charrnn eval-perplexity`` and ``charrnn compare``: options in, :mod:`charrnn.api`, tables out."""

from __future__ import annotations

from typing import Any

import click

from charrnn import api
from charrnn.cli.options import (
    GroupedCommand,
    device_option,
    dynamic_options,
    given_options,
    json_option,
    option,
    reads_checkpoints,
    sampling_options,
    single_stream_option,
    skip_unknown_option,
)
from charrnn.cli.output import message, out, print_json, say_checkpoint, show, write_file
from charrnn.config import COMPARE_LENGTH, COMPARE_SEED
from charrnn.errors import CharrnnError


@click.command("eval-perplexity", cls=GroupedCommand,
               short_help="Score a text (default: the checkpoint's validation split).")
@reads_checkpoints
@click.argument("checkpoint", type=click.Path())
@click.argument("text_file", required=False, type=click.Path())
@json_option()
@skip_unknown_option()
@single_stream_option()
@dynamic_options
@device_option("auto")
def eval_perplexity_command(checkpoint: str, text_file: str | None, as_json: bool, device: str,
                            **scoring: Any) -> None:
    """Score TEXT_FILE (default: the checkpoint's own validation split) under CHECKPOINT.

    Reports nats/char, bits/char and perplexity over the whole text, read as many
    streams side by side, each after a warm-up of the text before it (--single-stream:
    as one stream, the state carried throughout). With --dynamic, also the score
    of dynamic evaluation, which adapts a copy of the model to the text as it
    reads it (the checkpoint is never changed).

    \b
    Examples:
      charrnn eval-perplexity checkpoints/tinyshakespeare/best.pt
      charrnn eval-perplexity best.pt held_out.txt --json
      charrnn eval-perplexity best.pt --dynamic
    """
    from charrnn.cli.evaluate_view import score_table

    result = api.perplexity(checkpoint, file=text_file, device=device, **scoring)
    say_checkpoint(checkpoint, result.checkpoint)
    for note in result.notes:
        message(note)
    if as_json:
        print_json(result.to_dict())
    else:
        show(score_table(result))


@click.command("compare", cls=GroupedCommand,
               short_help="Checkpoints side by side; --evolution: a run's samples.")
@reads_checkpoints
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path())
@sampling_options(COMPARE_LENGTH, seed=str(COMPARE_SEED))
@option("--text-file", "--text", "text_file", group="scoring", type=click.Path(), default=None,
        help="Score this file's text for every checkpoint instead of each one's own validation split.")
@skip_unknown_option()
@option("--against", default=None, group="scoring", metavar="train|FILE",
        help="Measure how much of each sample is copied and how much is spelled right, against each "
             "checkpoint's own training split (train) or FILE.")
@single_stream_option()
@dynamic_options
@json_option("Print a JSON list, one object per checkpoint.")
@option("--markdown", "markdown_file", type=click.Path(), default=None, group="output",
        help="Also write the comparison as Markdown to this file.")
@option("--evolution", is_flag=True, group="output",
        help="Instead: show the samples each RUN_DIR recorded while training (train --sample-every), "
             "step by step, with the validation loss.")
@device_option("cpu")
@click.pass_context
def compare_command(ctx: click.Context, checkpoints: tuple[str, ...], as_json: bool,
                    markdown_file: str | None, evolution: bool, **settings: Any) -> None:
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
      charrnn compare a.pt b.pt --beam-width 4 --text-file held_out.txt --json
      charrnn compare runs/*/best.pt --dynamic
      charrnn compare checkpoints/epochs --evolution --markdown evolution.md
    """
    from charrnn.cli.evaluate_view import comparison_renderable, evolution_table

    if markdown_file is not None:  # the evolution reads only the run directories
        reads = () if evolution else ("prime_file", "text_file", "against")
        api.check_output(markdown_file, "markdown_file",
                         {"checkpoints": checkpoints, **{name: settings.get(name) for name in reads}})
    if evolution:  # each run directory's recorded samples, as a table, JSON or Markdown
        evolutions = [api.evolution(run_dir, **given_options(ctx, settings)) for run_dir in checkpoints]
        if markdown_file is not None:
            write_file(markdown_file, "\n".join(each.to_markdown() for each in evolutions))
        if as_json:
            print_json([each.to_dict() for each in evolutions], indent=2)
        else:
            for each in evolutions:
                show(evolution_table(each))
        return
    comparison = api.compare(list(checkpoints), **settings)
    for given, used in zip(checkpoints, comparison.checkpoints, strict=True):
        say_checkpoint(given, used)
    if comparison.note:
        message(f"note: {comparison.note}")
    if markdown_file is not None:
        write_file(markdown_file, comparison.to_markdown())
    if as_json:
        print_json(comparison.to_dict(), indent=2)
    else:
        show(comparison_renderable(comparison.reports, out.width))
    if comparison.failures:
        lacking = "; ".join(f"{path}: no {', no '.join(what)}" for path, what in comparison.failures)
        raise CharrnnError(f"not everything asked could be done ({lacking}); each checkpoint's problem "
                           f"is in its entry above")


COMMANDS = [eval_perplexity_command, compare_command]
