"""Does the time budget's probe read a shape at the speed it trains? (not part of CI)

The probe times a shape's first 2 to 20 steps after an untimed one; the wide shapes get only 2. This trains
each ladder shape named for 41 steps at the warm-up's rates, as a run starts, and prints the chars/s of the
first two timed steps against steps 21 to 40. ``--peak`` steps at the peak rate throughout, as the probe
once did: an untrained 2×1280 then saturates within a dozen steps and slows fourfold (docs/defaults.md).

    python benchmarks/probe_steps.py 512 768 1024 1280 [--precision fp32] [--peak]
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from charrnn.config import ModelConfig, TrainConfig
from charrnn.data.corpus import StreamBatches, encode_corpus, split_ids
from charrnn.data.datasets import DEFAULT_DATASET, fetch
from charrnn.training.budget import BUDGET_LADDER
from charrnn.training.distributed import ProcessGroup
from charrnn.training.loop import train_step
from charrnn.training.schedule import learning_rate_at
from charrnn.training.state import TrainingRun

STEPS = 41  # the untimed step, then 40


@click.command()
@click.argument("widths", nargs=-1, type=int, required=True)
@click.option("--precision", default="fp32", help="fp32, bf16 or auto, as a run takes it.")
@click.option("--peak", is_flag=True, help="Step at the peak rate, not the warm-up's.")
def main(widths: tuple[int, ...], precision: str, peak: bool) -> None:
    encoded = encode_corpus(fetch(DEFAULT_DATASET, Path("data")).path, "tinyshakespeare", 0.1)
    train_ids = split_ids(encoded.ids, encoded.info.split_point).train
    for width in widths:
        rung = next(rung for rung in BUDGET_LADDER if rung.hidden_size == width)
        model_config = ModelConfig(vocab_size=len(encoded.vocab), hidden_size=width,
                                   skip_connections=rung.skip_connections)
        config = TrainConfig(out_dir="unused", batch_size=rung.batch_size, learning_rate=rung.learning_rate,
                             precision=precision, ema_decay=0.99)
        run = TrainingRun(model_config, config, encoded.vocab, encoded.info,
                          StreamBatches(train_ids, config.batch_size, config.seq_len), group=ProcessGroup())
        seconds, chars = [], 0
        for step in range(STEPS):
            started = time.perf_counter()
            chars = train_step(run, config.learning_rate if peak else learning_rate_at(config, step, 0.0))[1]
            seconds.append(time.perf_counter() - started)
        first_two, later = 2 * chars / sum(seconds[1:3]), 20 * chars / sum(seconds[21:41])
        print(f"2×{width} ({run.precision}): first two timed steps {first_two:,.0f} chars/s, steps 21-40 "
              f"{later:,.0f}: {later / first_two:.2f}")


if __name__ == "__main__":
    main()
