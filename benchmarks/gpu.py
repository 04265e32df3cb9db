"""GPU benchmarks (not part of CI; needs a CUDA GPU): charrnn's CUDA paths against references run beside them.

    python benchmarks/gpu.py            # about a minute on an H100 or H200
    python benchmarks/gpu.py --quick    # small shapes and sizes: checks that every row runs

Rows:
- training chars/s at 2×512 and 3×1024, float32 and bf16, against a minimal cuDNN ``nn.LSTM`` loop that copies
  each batch from the host as charrnn does (target ≥ 0.90×);
- what reading the loss on the host after every step costs that loop (charrnn reads loss and gradient norm
  together, once per step, to skip a non-finite step);
- sampling chars/s at 1 and 64 streams, on the GPU and on this machine's CPU (which device ``sample`` and
  ``compare`` should default to);
- beam width 8 against width 1;
- scoring 1 MB as many streams (the default) against one stream (``--single-stream``, timed on 100 kB).

Inference rows run in float32, as charrnn's sampling and scoring do. A full run on a GPU writes
benchmarks/gpu_results.json.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import click
import torch
from rich.console import Console
from run import (
    VOCAB,
    Result,
    best_time,
    machine,
    minimal_training_loop,
    paired_times,
    random_ids,
    render,
    toy_model,
    training_run,
)

from charrnn.config import ModelConfig, SampleConfig
from charrnn.generation.beam import beam_search
from charrnn.generation.sample import generate
from charrnn.models.evaluate import evaluate
from charrnn.training.loop import train_step

RESULTS = Path(__file__).with_name("gpu_results.json")
SHAPES = ((2, 512), (3, 1024))  # (layers, hidden) of every row
SAMPLING_SHAPES = ((2, 128), *SHAPES)  # adds a shape short budgets train: the default device's case
QUICK_SHAPES = ((2, 64), (3, 128))  # --quick: small enough to try the script on a CPU


def synced(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn`` followed by a wait for the GPU, so that a host clock times the work, not its launch."""
    def run() -> None:
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    return run


def training(quick: bool, device: str) -> list[Result]:
    batch, seq_len = 50, 100
    steps = 8 if quick else 40
    results = []
    for layers, hidden in QUICK_SHAPES if quick else SHAPES:
        for precision in ("fp32", "bf16"):
            ids = random_ids(batch * seq_len * (steps + 2) + 1)
            run = training_run(ModelConfig(vocab_size=len(VOCAB), num_layers=layers, hidden_size=hidden), ids,
                               batch, seq_len, steps, precision=precision, device=device)
            reference = minimal_training_loop(ids, hidden, layers, batch, seq_len, device=device,
                                              bf16=precision == "bf16")

            def charrnn_steps(run=run) -> None:
                run.position = 0
                for _ in range(steps):
                    train_step(run, 1e-3)

            ours, theirs = paired_times(synced(charrnn_steps), synced(lambda r=reference: r(steps)), 3)
            chars = batch * seq_len * steps
            results.append(Result(f"training {layers}×{hidden} {precision}, batch {batch} × seq-len "
                                  f"{seq_len}, vs minimal cuDNN loop", "chars/s", chars / ours,
                                  chars / theirs, theirs / ours, "≥ 0.90", theirs / ours >= 0.9))
    layers, hidden = (QUICK_SHAPES if quick else SHAPES)[0]
    ids = random_ids(batch * seq_len * (steps + 2) + 1)
    with_sync = minimal_training_loop(ids, hidden, layers, batch, seq_len, device=device, sync=True)
    without = minimal_training_loop(ids, hidden, layers, batch, seq_len, device=device)
    synced_time, free_time = paired_times(synced(lambda: with_sync(steps)), synced(lambda: without(steps)), 3)
    chars = batch * seq_len * steps
    results.append(Result(f"minimal loop {layers}×{hidden} fp32 reading the loss every step vs never",
                          "chars/s", chars / synced_time, chars / free_time, free_time / synced_time,
                          "reported", None))
    return results


def sampling(quick: bool, device: str) -> list[Result]:
    length = 100 if quick else 500
    results = []
    for layers, hidden in QUICK_SHAPES if quick else SAMPLING_SHAPES:
        on_gpu, on_cpu = toy_model(hidden, layers).to(device), toy_model(hidden, layers)
        for streams in (1, 64):
            config = SampleConfig(length=length, num_samples=streams, seed=1)
            gpu = best_time(synced(lambda m=on_gpu, c=config: list(generate(m, VOCAB, c))), 2)
            cpu = best_time(lambda m=on_cpu, c=config: list(generate(m, VOCAB, c)), 1)
            results.append(Result(f"sampling {layers}×{hidden}, {streams} stream(s): GPU vs this machine's "
                                  "CPU", "chars/s", length * streams / gpu, length * streams / cpu, cpu / gpu,
                                  "reported", None))
    return results


def beams(quick: bool, device: str) -> list[Result]:
    length = 100 if quick else 300
    results = []
    for layers, hidden in QUICK_SHAPES if quick else SHAPES:
        model = toy_model(hidden, layers).to(device)
        width1, width8 = paired_times(synced(lambda m=model: beam_search(m, VOCAB, "The ", 1, length)),
                                      synced(lambda m=model: beam_search(m, VOCAB, "The ", 8, length)), 2)
        results.append(Result(f"beam search {layers}×{hidden} width 8 vs width 1, {length} chars", "ms",
                              width8 * 1e3, width1 * 1e3, width8 / width1, "≤ 3.0", width8 / width1 <= 3.0))
    return results


def scoring(quick: bool, device: str) -> list[Result]:
    chars = 100_000 if quick else 1_000_000
    single_chars = 20_000 if quick else 100_000
    ids = random_ids(chars, seed=1)
    results = []
    for layers, hidden in QUICK_SHAPES if quick else SHAPES:
        model = toy_model(hidden, layers).to(device)
        many = best_time(synced(lambda m=model: evaluate(m, ids)), 2)
        one = best_time(synced(lambda m=model: evaluate(m, ids[:single_chars], single_stream=True)), 1)
        results.append(Result(f"scoring {layers}×{hidden}: {chars / 1e6:g} MB as many streams vs one stream "
                              f"({single_chars / 1e3:g} kB)", "chars/s", chars / many, single_chars / one,
                              (chars / many) / (single_chars / one), "reported", None))
    return results


@click.command()
@click.option("--quick", is_flag=True, help="Small shapes and sizes: checks that every row runs.")
@click.option("--device", default="cuda", show_default=True,
              help="Where the rows marked GPU run; 'cpu' tries the script on a machine without one.")
@click.option("--only", type=click.Choice(["training", "sampling", "beams", "scoring"]), multiple=True,
              help="Run these row groups alone (repeatable); the committed table is left as it is.")
def main(quick: bool, device: str, only: tuple[str, ...]) -> None:
    """Run the GPU rows, print the table and write benchmarks/gpu_results.json."""
    if device == "cuda" and not torch.cuda.is_available():
        raise click.ClickException("no CUDA GPU: these benchmarks time charrnn's CUDA paths")
    console = Console(width=max(Console().width, 150))
    started = time.perf_counter()
    results: list[Result] = []
    for benchmark in (training, sampling, beams, scoring):
        if only and benchmark.__name__ not in only:
            continue
        rows = benchmark(quick, device)
        console.print(render(rows, benchmark.__name__))
        results += rows
    info = {**machine(), "gpu": torch.cuda.get_device_name() if device == "cuda" else "none"}
    console.print(render(results, "charrnn GPU benchmarks" + (" (quick)" if quick else "")))
    console.print(f"{info['gpu']}; {info['cpu']}, {info['cores']} cores, {info['threads']} torch threads, "
                  f"torch {info['torch']}, {time.perf_counter() - started:.0f} s")
    if device == "cuda" and not quick and not only:  # the committed table holds a full run on a GPU only
        table = {"machine": info, "results": [asdict(r) for r in results]}
        RESULTS.write_text(json.dumps(table, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
