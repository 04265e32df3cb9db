"""``charrnn sample``: options in, :meth:`charrnn.api.Model.sample` (or ``stream``), text out."""

from __future__ import annotations

from typing import Any

import click

from charrnn import api
from charrnn.cli.options import (
    GroupedCommand,
    config_option,
    device_option,
    given_options,
    json_option,
    option,
    reads_checkpoints,
    sampling_options,
)
from charrnn.cli.output import message, say_checkpoint, write_file
from charrnn.config import DEFAULT_LENGTH_PENALTY, SURPRISAL_TOP, SampleConfig
from charrnn.errors import ConfigError, OptionConflict
from charrnn.utils.files import json_text
from charrnn.utils.terminal import counted, stream_stdout, write_stdout


@click.command("sample", cls=GroupedCommand,
               short_help="Generate text; --interactive: write it with the model.")
@reads_checkpoints
@click.argument("checkpoint", type=click.Path())
@sampling_options(SampleConfig().length)
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
    if interactive or given_options(ctx, {"top": top}):  # the session in the terminal, then the text
        from charrnn.cli.interactive import MOST_GUESSES, require_terminal, write_interactively

        if not interactive:
            raise OptionConflict("--top says how many guesses --interactive shows: it goes with it")
        if not 1 <= top <= MOST_GUESSES:
            raise ConfigError(f"must be from 1 to {MOST_GUESSES} (one digit picks each guess)", "top")
        given = given_options(ctx, {"output": output, "as_json": as_json, **decoding})
        session = api.writing(checkpoint, prime, prime_file=prime_file, device=device, threads=threads,
                              **given)  # every option refused before the model is loaded
        require_terminal()
        text = write_interactively(session, top)
        write_stdout(text if text.endswith("\n") else text + "\n")
        return

    if output is not None:
        api.check_output(output, "output", {"checkpoint": checkpoint, "prime_file": prime_file})
    streamed = (output is None and not as_json and decoding["num_samples"] == 1
                and decoding["beam_width"] is None)  # a stream is one sample, as it is generated
    write = api.stream if streamed else api.sample
    samples = write(checkpoint, prime, prime_file=prime_file, device=device, threads=threads, **decoding)
    say_checkpoint(checkpoint, samples.checkpoint)
    if samples.seed_drawn:
        message(f"seed {samples.seed} (give --seed {samples.seed} to draw the same text again)")
    if streamed:
        stream_stdout(samples, prefix=samples.prime)
        return
    for note in samples.notes:
        message(f"note: {note}")
    for i, record in enumerate(samples.records(), start=1):
        if "log_prob" in record:
            message(f"beam {i}: log-prob {record['log_prob']:.4f}{' (stopped)' if record['stopped'] else ''}")
    if as_json:
        rendered = "".join(json_text(record, ensure_ascii=False) + "\n" for record in samples.records())
    elif len(samples.texts) == 1:  # as streamed: the text, ending with a line break unless it ends with one
        rendered = samples.text if samples.text.endswith("\n") else samples.text + "\n"
    else:  # each under a line "=== sample N ===" (or beam) of its own
        kind = "sample" if samples.log_probs is None else "beam"
        rendered = "".join(f"=== {kind} {i} ===\n{text}\n" for i, text in enumerate(samples.texts, start=1))
    if output is None:
        write_stdout(rendered)
    else:
        write_file(output, rendered, counted(len(samples.texts), "sample"))


COMMANDS = [sample_command]
