"""Tune dynamic evaluation honestly, and report what it gains (not part of CI).

For each checkpoint, its validation split is cut in two halves. Every setting of
the grid is scored on the first half; the setting whose mean gain over all the
checkpoints is largest is the one to make the default. The second half, never
used for choosing, then gives the reported figures: static and dynamic nats/char
side by side, with the chosen setting and with each checkpoint's own best.

    python benchmarks/dynamic_eval.py RUN_OR_CHECKPOINT... [--quick]

On 2 cores a 2×192 LSTM takes about 15 s a setting with segments of 50.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import click

from charrnn.analysis.dynamic import dynamic_evaluate, gradient_rms
from charrnn.config import DynamicConfig
from charrnn.data.corpus import checkpoint_split
from charrnn.models.evaluate import evaluate
from charrnn.training.checkpoint import checkpoint_in, load_model

LEARNING_RATES = (3e-5, 1e-4, 3e-4)  # 1e-3 made a 2×192 LSTM worse than static
DECAYS = (0.0, 1e-3, 1e-2, 1e-1)
SEGMENT_LENS = (25, 50)


@click.command()
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--quick", is_flag=True, help="Segments of 50 only (a third of the time).")
def main(checkpoints: tuple[Path, ...], quick: bool) -> None:
    grid = list(itertools.product(SEGMENT_LENS[1:] if quick else SEGMENT_LENS, LEARNING_RATES, DECAYS))
    models = []
    for path in checkpoints:
        loaded = load_model(checkpoint_in(path, "best.pt"))
        split = checkpoint_split(loaded.payload["corpus"], loaded.vocab)
        middle = len(split.val) // 2
        tune, report = split.val[:middle], split.val[middle:]
        rms = {length: gradient_rms(loaded.network, split.train, length) for length, _, _ in grid}
        models.append((path, loaded, tune, report, rms))
    gains: dict[tuple, list[float]] = {setting: [] for setting in grid}
    for path, loaded, tune, _, rms in models:
        static = evaluate(loaded.network, tune).nats_per_char
        for setting in grid:
            length, lr, decay = setting
            started = time.perf_counter()
            score = dynamic_evaluate(loaded.network, tune, rms[length], DynamicConfig(lr, decay, length))
            gains[setting].append(static - score.nats_per_char)
            seconds = time.perf_counter() - started
            click.echo(f"{path}  first half  segment {length:>3}  lr {lr:<7g} decay {decay:<6g} "
                       f"{score.nats_per_char:.4f} (static {static:.4f}, {seconds:.0f} s)", err=True)
    chosen = max(grid, key=lambda setting: sum(gains[setting]) / len(gains[setting]))
    click.echo(f"\nchosen on the first halves (largest mean gain): segment {chosen[0]}, lr {chosen[1]:g}, "
               f"decay {chosen[2]:g}\n")
    click.echo("| checkpoint | model | static | dynamic (chosen) | gain | own best setting | dynamic (own) |")
    click.echo("|---|---|---|---|---|---|---|")
    for index, (path, loaded, _, report, rms) in enumerate(models):
        own = max(grid, key=lambda setting, i=index: gains[setting][i])
        static = evaluate(loaded.network, report).nats_per_char
        shared = dynamic_evaluate(loaded.network, report, rms[chosen[0]], DynamicConfig(chosen[1], chosen[2],
                                                                                       chosen[0]))
        best = dynamic_evaluate(loaded.network, report, rms[own[0]], DynamicConfig(own[1], own[2], own[0]))
        config = loaded.network.config
        shape = f"{config.num_layers}×{config.hidden_size} {config.cell.upper()}"
        click.echo(f"| {path} | {shape} | {static:.4f} | {shared.nats_per_char:.4f} | "
                   f"{static - shared.nats_per_char:+.4f} | {own[0]}, {own[1]:g}, {own[2]:g} | "
                   f"{best.nats_per_char:.4f} |")


if __name__ == "__main__":
    main()
