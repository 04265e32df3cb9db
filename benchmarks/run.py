"""charrnn benchmark harness (not part of CI).

Every figure is a ratio against a reference measured in the same process, so the
verdicts hold on shared, noisy machines where absolute times vary by tens of
percent. Prints a table (figure, reference, ratio, target, verdict) and writes
benchmarks/results.json.

    python benchmarks/run.py            # full lengths
    python benchmarks/run.py --quick    # under a minute
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import click
import torch
from rich.console import Console
from rich.table import Table

from charrnn.beam import beam_search
from charrnn.config import ModelConfig, TrainConfig
from charrnn.data import CorpusInfo, StreamBatches
from charrnn.model import CharRNN
from charrnn.train import TrainingRun
from charrnn.vocab import Vocab

RESULTS = Path(__file__).with_name("results.json")


@dataclass
class Result:
    name: str  # what is measured
    figure: float  # seconds for the thing measured
    reference: float  # seconds for the reference, same run
    ratio: float  # figure / reference
    target: str  # the pass condition on the ratio
    passed: bool


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Fastest of ``repeats`` runs after one warm-up: the least disturbed by other load."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def toy_model(hidden: int, layers: int) -> tuple[CharRNN, Vocab]:
    torch.manual_seed(0)
    # The size of tiny Shakespeare's vocabulary (65 symbols).
    vocab = Vocab.from_text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz .,;:!?'\n-&$3")
    config = ModelConfig(vocab_size=len(vocab), num_layers=layers, hidden_size=hidden, embed_size=64)
    return CharRNN(config).eval(), vocab


def beam_cost(quick: bool) -> Result:
    """Beam width 8 against width 1 (greedy), same length, 2×512 LSTM: at most 3×."""
    model, vocab = toy_model(512, 2)
    length = 100 if quick else 500
    repeats = 2 if quick else 3
    width1 = best_time(lambda: beam_search(model, vocab, "The ", 1, length), repeats)
    width8 = best_time(lambda: beam_search(model, vocab, "The ", 8, length), repeats)
    ratio = width8 / width1
    return Result(f"beam search width 8 vs 1, 2×512, {length} chars", width8, width1, ratio, "≤ 3.0",
                  ratio <= 3.0)


def layer_norm_training_cost(quick: bool) -> Result:
    """Training step time of the layer-normalised LSTM against the fused nn.LSTM, 2×256, 16×50.

    Reported, not judged: the layer-norm cells are Python loops over time, and the
    figure tells users what --layer-norm costs.
    """
    vocab = toy_model(8, 1)[1]
    ids = torch.randint(0, len(vocab), (200_000,), generator=torch.Generator().manual_seed(0)).to(torch.uint8)
    corpus = CorpusInfo("random", "random", len(ids), "-", 0.0, len(ids))
    batches = StreamBatches(ids, 16, 50)
    steps = 3 if quick else 10
    seconds = {}
    for layer_norm in (False, True):
        config = TrainConfig(out_dir=".", batch_size=16, seq_len=50, max_steps=steps)
        run = TrainingRun(ModelConfig(vocab_size=len(vocab), layer_norm=layer_norm), config, vocab, corpus,
                          batches)
        seconds[layer_norm] = best_time(lambda run=run: [run.advance(1e-3) for _ in range(steps)], 2)
    ratio = seconds[True] / seconds[False]
    return Result(f"layer-norm LSTM training vs fused, 2×256, {steps} steps of 16×50", seconds[True],
                  seconds[False], ratio, "reported", True)


BENCHMARKS = [beam_cost, layer_norm_training_cost]


def machine() -> dict[str, str]:
    model_name = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model_name = line.split(":", 1)[1].strip()
                break
    return {"cpu": model_name, "threads": str(torch.get_num_threads()), "torch": torch.__version__,
            "python": platform.python_version()}


@click.command()
@click.option("--quick", is_flag=True, help="Short lengths and fewer repeats: under a minute.")
def main(quick: bool) -> None:
    """Run every benchmark, print the table and write benchmarks/results.json."""
    results = [benchmark(quick) for benchmark in BENCHMARKS]
    table = Table(title="charrnn benchmarks" + (" (quick)" if quick else ""))
    for column in ("benchmark", "figure (s)", "reference (s)", "ratio", "target", "verdict"):
        table.add_column(column)
    for r in results:
        verdict = "measured" if r.target == "reported" else "[green]pass[/]" if r.passed else "[red]FAIL[/]"
        table.add_row(r.name, f"{r.figure:.3f}", f"{r.reference:.3f}", f"{r.ratio:.2f}", r.target, verdict)
    console = Console()
    console.print(table)
    info = machine()
    console.print(f"{info['cpu']}, {info['threads']} threads, torch {info['torch']}")
    RESULTS.write_text(json.dumps({"quick": quick, "machine": info, "results": [asdict(r) for r in results]},
                                  indent=2) + "\n")


if __name__ == "__main__":
    main()
