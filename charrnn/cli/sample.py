"""``charrnn sample``: options in, :meth:`charrnn.api.Model.sample` (or ``stream``), text out."""

from __future__ import annotations

from typing import Any

import click

from charrnn.cli.options import (
    GroupedCommand,
    config_option,
    device_option,
    json_option,
    option,
    reads_checkpoints,
    sampling_options,
)
from charrnn.cli.output import message, say_checkpoint, write_file
from charrnn.config import DEFAULT_LENGTH_PENALTY, SURPRISAL_TOP, SampleConfig
from charrnn.utils.files import json_text
from charrnn.utils.terminal import stream_stdout, write_stdout

DEFAULTS = SampleConfig()


def render_samples(texts: list[str], kind: str) -> str:
    """One text as it is; several, each under a ``=== sample N ===`` (or beam) line of its own."""
    if len(texts) == 1:  # as streamed: the text, ending with a line break unless it ends with one
        return texts[0] if texts[0].endswith("\n") else texts[0] + "\n"
    return "".join(f"=== {kind} {i} ===\n{text}\n" for i, text in enumerate(texts, start=1))


@click.command("sample", cls=GroupedCommand,
               short_help="Generate text; --interactive: write it with the model.")
@reads_checkpoints
@click.argument("checkpoint", type=click.Path())
@sampling_options(DEFAULTS.length)
@config_option("--min-length", SampleConfig, "min_length", "decoding", type=int)
@config_option("--length-penalty", SampleConfig, "length_penalty", "decoding", type=float,
               default_text=f"{DEFAULT_LENGTH_PENALTY:g}")
@config_option("--num-samples", SampleConfig, "num_samples", "decoding", type=int)
@option("--output", type=click.Path(), default=None,
        help="Write the text to this file instead of stdout.", group="output")
@json_option("One JSON object per line: text (prime included), and log_prob and stopped for beams.")
@option("--interactive", is_flag=True, group="writing with the model",
        help="Write with the model in the terminal: see its likeliest next characters, pick one (a digit), "
             "type your own, let it finish the word (Tab) or line (Enter), undo (Backspace); Ctrl-D prints "
             "the text.")
@option("--top", type=int, default=SURPRISAL_TOP, show_default=True, group="writing with the model",
        help="How many guesses --interactive shows.")
@device_option("cpu")
@click.pass_context
def sample_command(ctx: click.Context, checkpoint: str, output: str | None, as_json: bool, device: str,
                   threads: int | None, prime: str | None, prime_file: str | None, interactive: bool,
                   top: int, **decoding: Any) -> None:
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
      charrnn sample best.pt --interactive --prime "ROMEO:" --temperature 0.7
    """
    from charrnn import api

    if interactive or ctx.get_parameter_source("top") is not click.core.ParameterSource.DEFAULT:
        given = {key: value for key, value in {"output": output, "as_json": as_json, **decoding}.items()
                 if ctx.get_parameter_source(key) is not click.core.ParameterSource.DEFAULT}
        write_with_the_model(checkpoint, prime, prime_file, device, threads, top, interactive, given)
        return

    if output is not None:
        api.check_output(output, "output", {"checkpoint": checkpoint, "prime_file": prime_file})
    if output is None and not as_json and decoding["num_samples"] == 1 and decoding["beam_width"] is None:
        stream = api.stream(checkpoint, prime, prime_file=prime_file, device=device, threads=threads,
                            **decoding)
        say_checkpoint(checkpoint, stream.checkpoint)
        _say_seed(stream.seed, stream.seed_drawn)
        stream_stdout(stream, prefix=stream.prime)
        return
    samples = api.sample(checkpoint, prime, prime_file=prime_file, device=device, threads=threads,
                         **decoding)
    say_checkpoint(checkpoint, samples.checkpoint)
    _say_seed(samples.seed, samples.seed_drawn)
    for note in samples.notes:
        message(f"note: {note}")
    for i, record in enumerate(samples.records(), start=1):
        if "log_prob" in record:
            message(f"beam {i}: log-prob {record['log_prob']:.4f}{' (stopped)' if record['stopped'] else ''}")
    if as_json:
        rendered = "".join(json_text(record, ensure_ascii=False) + "\n" for record in samples.records())
    else:
        rendered = render_samples(samples.texts, "sample" if samples.log_probs is None else "beam")
    if output is None:
        write_stdout(rendered)
    else:
        write_file(output, rendered, f"{len(samples.texts)} sample(s)")


def write_with_the_model(checkpoint: str, prime: str | None, prime_file: str | None, device: str,
                         threads: int | None, top: int, interactive: bool, given: dict[str, Any]) -> None:
    """``sample --interactive``: the session in the terminal, then the whole text on stdout."""
    from charrnn import api
    from charrnn.cli.interactive import MOST_GUESSES, require_terminal, write_interactively
    from charrnn.errors import ConfigError, OptionConflict

    if not interactive:
        raise OptionConflict("--top says how many guesses --interactive shows: it goes with it")
    if not 1 <= top <= MOST_GUESSES:
        raise ConfigError(f"must be from 1 to {MOST_GUESSES} (one digit picks each guess)", "top")
    api.writing_request(prime, prime_file=prime_file, **given)  # refused before the model is loaded
    model = api.load(checkpoint, device, threads)
    session = model.writing(prime, prime_file=prime_file, **given)
    require_terminal()
    text = write_interactively(session, top)
    if text is not None:
        write_stdout(text if text.endswith("\n") else text + "\n")


def _say_seed(seed: int | None, drawn: bool) -> None:
    if drawn:
        message(f"seed {seed} (give --seed {seed} to draw the same text again)")


COMMANDS = [sample_command]
