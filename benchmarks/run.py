"""charrnn benchmark harness (not part of CI).

Every speed target is a ratio against a reference measured in the same run, so
the verdicts hold on shared, noisy machines where absolute times vary by tens of
percent. Prints a table (figure, reference, ratio, target, verdict) and writes
benchmarks/results.json.

    python benchmarks/run.py            # full sizes, several minutes
    python benchmarks/run.py --quick    # under a minute
    python benchmarks/run.py --only budget_ladder [--as-avx2]   # 100 s to an hour, side by side
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click
import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table
from torch import nn

from charrnn.config import EVAL_STREAMS, ModelConfig, SampleConfig, TrainConfig
from charrnn.data.corpus import CACHE_DIR_ENV, CorpusInfo, StreamBatches, encode_corpus
from charrnn.data.datasets import DATA_DIR_ENV, DEFAULT_DATASET, fetch
from charrnn.data.vocab import Vocab
from charrnn.errors import CharrnnError
from charrnn.generation.beam import beam_search
from charrnn.generation.sample import generate
from charrnn.models.devices import EVAL_CALL_CHARS
from charrnn.models.evaluate import evaluate
from charrnn.models.model import CharRNN
from charrnn.training.loop import train_step
from charrnn.training.state import TrainingRun
from charrnn.utils.hardware import cpu_has_native_bf16, processor_name

RESULTS = Path(__file__).with_name("results.json")
# This processor as an AVX2 CPU without bfloat16 (the Makefile's second test pass sets the same).
AS_AVX2 = {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
           "CHARRNN_CPU_BF16": "0"}


def as_avx2() -> bool:
    """Whether this process runs as an AVX2 CPU without bfloat16: every variable of :data:`AS_AVX2` set."""
    return all(os.environ.get(name) == value for name, value in AS_AVX2.items())
# The size of tiny Shakespeare's vocabulary (65 symbols).
VOCAB = Vocab.from_text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz .,;:!?'\n-&$3")


@dataclass
class Result:
    name: str  # what is measured
    unit: str  # unit of figure and reference
    figure: float  # charrnn's number
    reference: float  # the reference's number, measured in the same run
    ratio: float  # figure / reference
    target: str  # the pass condition, or "reported"
    passed: bool | None  # None when only reported


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Fastest of ``repeats`` runs after one warm-up: the least disturbed by other load."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def paired_times(a: Callable[[], object], b: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Best times of ``a`` and ``b``, run alternately so that a burst of load hits both alike."""
    a(), b()
    times_a, times_b = [], []
    for _ in range(repeats):
        for fn, times in ((a, times_a), (b, times_b)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return min(times_a), min(times_b)


def toy_model(hidden: int, layers: int) -> CharRNN:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=len(VOCAB), num_layers=layers, hidden_size=hidden, embed_size=64)
    return CharRNN(config).eval()


def random_ids(n: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, len(VOCAB), (n,), generator=generator).to(torch.uint8)


def training_run(model_config: ModelConfig, ids: torch.Tensor, batch: int, seq_len: int,
                 steps: int, precision: str = "fp32", **options: Any) -> TrainingRun:
    """A run of ``model_config`` on ``ids``; float32 unless told, to match the float32 references.
    ``options``: other TrainConfig fields."""
    corpus = CorpusInfo("random", "random", len(ids), "-", 0.0, len(ids))
    config = TrainConfig(out_dir=".", batch_size=batch, seq_len=seq_len, max_steps=steps, precision=precision,
                         **options)
    return TrainingRun(model_config, config, VOCAB, corpus, StreamBatches(ids, batch, seq_len))


# ------------------------------------------------------------------ 1. training


def minimal_training_loop(ids: torch.Tensor, hidden: int, layers: int, batch: int, seq_len: int,
                          device: str = "cpu", bf16: bool = False, sync: bool = False
                          ) -> Callable[[int], None]:
    """The reference: embedding → nn.LSTM → linear → cross-entropy → backward → clip → Adam, nothing else.

    Each step's batch is copied from the host, as charrnn's are; ``bf16`` runs the forward pass under
    bfloat16 autocast, and ``sync`` reads the loss on the host after every step (what a per-step
    finiteness check costs an accelerator)."""
    torch.manual_seed(0)
    embedding = nn.Embedding(len(VOCAB), 64).to(device)
    lstm = nn.LSTM(64, hidden, layers, batch_first=True).to(device)
    head = nn.Linear(hidden, len(VOCAB)).to(device)
    params = [*embedding.parameters(), *lstm.parameters(), *head.parameters()]
    optimizer = torch.optim.Adam(params, lr=1e-3)
    streams = ids[: batch * (len(ids) // batch)].view(batch, -1).long()
    state = [torch.zeros(layers, batch, hidden, device=device) for _ in range(2)]

    def run(steps: int) -> None:
        for step in range(steps):
            start = step * seq_len
            x = streams[:, start : start + seq_len].to(device)
            y = streams[:, start + 1 : start + seq_len + 1].to(device)
            with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
                out, (h, c) = lstm(embedding(x), tuple(state))
                logits = head(out)
            state[:] = [h.detach().float(), c.detach().float()]
            loss = F.cross_entropy(logits.reshape(-1, len(VOCAB)).float(), y.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 5.0)
            optimizer.step()
            if sync:
                loss.item()

    return run


def matmul_gflops(repeats: int) -> float:
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    return 2 * 1024**3 / best_time(lambda: torch.mm(a, b), repeats) / 1e9


def training_throughput(quick: bool) -> list[Result]:
    """2×512 LSTM, batch 50, seq-len 100: charrnn's step against the minimal fused loop (≥ 0.9×)."""
    hidden, layers, batch, seq_len = 512, 2, 50, 100
    steps = 3 if quick else 12
    ids = random_ids(batch * seq_len * (steps + 2) + 1)
    run = training_run(ModelConfig(vocab_size=len(VOCAB), num_layers=layers, hidden_size=hidden), ids, batch,
                       seq_len, steps)
    reference = minimal_training_loop(ids, hidden, layers, batch, seq_len)

    def charrnn_steps() -> None:
        run.position = 0
        for _ in range(steps):
            train_step(run, 1e-3)

    ours, theirs = paired_times(charrnn_steps, lambda: reference(steps), 1 if quick else 3)
    chars = batch * seq_len * steps
    ours_cps, theirs_cps = chars / ours, chars / theirs
    params = sum(p.numel() for p in run.model.parameters())
    achieved = 6 * params * ours_cps / 1e9
    peak = matmul_gflops(5 if quick else 20)
    return [
        Result("training 2×512, batch 50 × seq-len 100, vs minimal fused loop", "chars/s", ours_cps,
               theirs_cps, ours_cps / theirs_cps, "≥ 0.90", ours_cps / theirs_cps >= 0.9),
        Result("training GFLOP/s (6 × params × chars/s) vs 1024² float32 matmul", "GFLOP/s", achieved, peak,
               achieved / peak, "reported", None),
    ]


SAMPLE_EVERY = 500  # the cadence of the sampling-cost row: about one sample every 15 s of a 100-s run


def sampling_while_training(quick: bool) -> list[Result]:
    """The 100-s budget's model (2×256 LSTM, batch 16, seq-len 50, bf16 where native) training SAMPLE_EVERY
    steps and recording one sample (train --sample-every, 200 characters), against the steps alone
    (≤ 1.02×)."""
    from charrnn.training.loop import draw_sample

    precision = "bf16" if cpu_has_native_bf16() else "fp32"
    batch, seq_len = 16, 50
    steps = 50 if quick else SAMPLE_EVERY
    ids = random_ids(batch * seq_len * (steps + 2) + 1)
    run = training_run(ModelConfig(vocab_size=len(VOCAB), hidden_size=256, skip_connections=True), ids, batch,
                       seq_len, steps, precision=precision, sample_every=SAMPLE_EVERY)

    def train_steps() -> None:
        run.position = 0
        for _ in range(steps):
            train_step(run, 1e-3)

    repeats = 1 if quick else 3
    training = best_time(train_steps, repeats) * SAMPLE_EVERY / steps
    sampling = best_time(lambda: draw_sample(run.model, VOCAB, run.config, 0, 0.0, 0.0, None), repeats)
    return [Result(f"training {SAMPLE_EVERY} steps + one recorded sample, vs the steps alone (100-s shape, "
                   f"{precision})", "s", training + sampling, training, (training + sampling) / training,
                   "≤ 1.02", (training + sampling) / training <= 1.02)]


# Shapes of the bf16 table: the budget shapes and char-rnn's, a small and a large model.
PRECISION_SHAPES = [(128, 50, 50), (192, 16, 50), (256, 16, 50), (512, 32, 50), (1024, 64, 100)]


def precision_throughput(quick: bool) -> list[Result]:
    """Training throughput in bf16 autocast against float32, same run, same LSTM, on this CPU.

    ``--precision auto`` picks bf16 for the LSTM on a CPU with native bfloat16, so each
    row must be at least 1.0 there; elsewhere bf16 is refused and nothing is measured.
    """
    if not cpu_has_native_bf16():
        return [Result("bf16 vs fp32 training: skipped, this CPU has no native bfloat16", "-", 0.0, 0.0, 0.0,
                       "reported", None)]
    results = []
    steps = 2 if quick else 6
    for hidden, batch, seq_len in PRECISION_SHAPES[1:4:2] if quick else PRECISION_SHAPES:
        ids = random_ids(batch * seq_len * (2 * steps + 4) + 1)
        model_config = ModelConfig(vocab_size=len(VOCAB), hidden_size=hidden)
        runs = {precision: training_run(model_config, ids, batch, seq_len, steps, precision)
                for precision in ("bf16", "fp32")}

        def steps_of(run: TrainingRun) -> Callable[[], None]:
            def take() -> None:
                run.position = 0
                for _ in range(steps):
                    train_step(run, 1e-3)
            return take

        bf16, fp32 = paired_times(steps_of(runs["bf16"]), steps_of(runs["fp32"]), 1 if quick else 3)
        chars = batch * seq_len * steps
        results.append(Result(f"training bf16 vs fp32, LSTM 2×{hidden}, {batch} × {seq_len}", "chars/s",
                              chars / bf16, chars / fp32, fp32 / bf16, "≥ 1.0", fp32 / bf16 >= 1.0))
    return results


QUALITY_SECONDS = 60  # the wall-clock budget of each quality-per-minute run


def quality_per_minute(quick: bool, workdir: Path) -> list[Result]:
    """Validation nats/char of tiny Shakespeare after a one-minute budget, bf16 against fp32.

    Real ``charrnn train --time-budget`` runs, every other option at its default, scored by
    ``eval-perplexity``. Reported, not judged: one run each lands within a few hundredths
    of another run of the same settings. Needs the dataset (CHARRNN_DATA_MIRROR offline)
    and a CPU with native bfloat16; skipped in --quick.
    """
    if not quick and not cpu_has_native_bf16():
        return [Result("quality per minute, bf16 vs fp32: skipped (this CPU has no native bfloat16)", "-",
                       0.0, 0.0, 0.0, "reported", None)]
    corpus, skipped = full_run_corpus(quick, workdir, "quality per minute, bf16 vs fp32")
    if corpus is None:
        return skipped
    scores = {}
    for precision in ("bf16", "fp32"):
        out = workdir / f"quality-{precision}"
        subprocess.run([sys.executable, "-m", "charrnn", "train", str(corpus), "--out", str(out),
                        "--overwrite", "--time-budget", str(QUALITY_SECONDS), "--precision", precision,
                        "--quiet"], check=True, stdout=subprocess.DEVNULL)
        printed = subprocess.run([sys.executable, "-m", "charrnn", "eval-perplexity", str(out / "best.pt"),
                                  "--json"], check=True, capture_output=True, text=True).stdout
        scores[precision] = json.loads(printed)["nats_per_char"]
    return [Result(f"validation nats/char after {QUALITY_SECONDS} s of training, bf16 vs fp32", "nats/char",
                   scores["bf16"], scores["fp32"], scores["bf16"] / scores["fp32"], "reported", None)]


PROMISE_SECONDS = 100  # the budget whose wall time the promise row measures


def full_run_corpus(quick: bool, workdir: Path, row: str) -> tuple[Path | None, list[Result]]:
    """Tiny Shakespeare for a row that runs the command line in full, or (None, the row saying why it was
    skipped: --quick, or no copy to be had)."""
    if quick:
        return None, [Result(f"{row}: skipped (--quick)", "-", 0.0, 0.0, 0.0, "reported", None)]
    try:
        return fetch(DEFAULT_DATASET, workdir / "data").path, []
    except CharrnnError as exc:
        return None, [Result(f"{row}: skipped ({exc})", "-", 0.0, 0.0, 0.0, "reported", None)]


def budget_promise(quick: bool, workdir: Path) -> list[Result]:
    """``charrnn train --time-budget 100`` as a user runs it: the process's wall time from start to exit,
    final evaluation, weight averaging and saves included, against the budget (≤ 1.03×)."""
    corpus, skipped = full_run_corpus(quick, workdir, "time budget kept")
    if corpus is None:
        return skipped
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "charrnn", "train", str(corpus), "--out", str(workdir / "promise"),
                    "--overwrite", "--time-budget", str(PROMISE_SECONDS), "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    return [Result(f"wall time of train --time-budget {PROMISE_SECONDS}, start to exit, vs the budget", "s",
                   wall, PROMISE_SECONDS, wall / PROMISE_SECONDS, "≤ 1.03", wall / PROMISE_SECONDS <= 1.03)]


# The budgets whose share of wall time trains is measured: tiny Shakespeare at 100 s and 600 s, and its
# first 100,000 characters (a corpus of the size most users' own texts have) at 300 s.
SHARE_RUNS = (("tiny Shakespeare", None, 100), ("tiny Shakespeare", None, 600),
              ("its first 100,000 characters", 100_000, 300))


def budget_share(quick: bool, workdir: Path) -> list[Result]:
    """``charrnn train --time-budget S --json`` as a user runs it: the share of the budget that passed
    before training stopped (``trained_s``), the rest being its final evaluation and saves. At least 0.9,
    or the plan says why it ends early (``ends_early`` and ``longer_plan`` in ``--json``)."""
    corpus, skipped = full_run_corpus(quick, workdir, "budget's share spent training")
    if corpus is None:
        return skipped
    results = []
    for name, prefix, seconds in SHARE_RUNS:
        path = corpus
        if prefix is not None:
            path = workdir / "first.txt"
            path.write_text(corpus.read_text(encoding="utf-8")[:prefix], encoding="utf-8")
        out = workdir / f"share-{seconds}"
        printed = subprocess.run([sys.executable, "-m", "charrnn", "train", str(path), "--time-budget",
                                  str(seconds), "--out", str(out), "--overwrite", "--quiet", "--json"],
                                 check=True, capture_output=True, text=True).stdout
        run = json.loads(printed)
        share = run["trained_s"] / seconds
        said = run["budget"]["ends_early"]
        results.append(Result(
            f"train {name} --time-budget {seconds}: share of the budget before training stopped "
            f"({run['best']['nats_per_char']:.4f} nats/char, {run['epoch']:.1f} passes"
            f"{', ends early and says why' if said else ''})", "share", share, 1.0, share,
            "≥ 0.9 or says why", share >= 0.9 or said))
    return results


# A longer budget never scores worse: tiny Shakespeare at each of these budgets, side by side.
LADDER_SECONDS = (100, 300, 600, 3600)
LADDER_LOGS = Path(__file__).with_name("budget_ladder")  # each run's --json and its stderr, kept


def budget_ladder(quick: bool, workdir: Path) -> list[Result]:
    """``charrnn train --time-budget S --json`` for each of :data:`LADDER_SECONDS` (``CHARRNN_LADDER_MOST``
    stops short of the longer ones): each best.pt's score, against the shorter budget's before it (≤ 1)."""
    corpus, skipped = full_run_corpus(quick, workdir, "a longer budget never scores worse")
    if corpus is None:
        return skipped
    most = float(os.environ.get("CHARRNN_LADDER_MOST", math.inf))
    mode = "avx2" if as_avx2() else "native"
    LADDER_LOGS.mkdir(exist_ok=True)
    results, shorter = [], None
    for seconds in (s for s in LADDER_SECONDS if s <= most):
        done = subprocess.run([sys.executable, "-m", "charrnn", "train", str(corpus), "--json", "--overwrite",
                               "--time-budget", str(seconds), "--out", str(workdir / f"ladder-{seconds}")],
                              capture_output=True, text=True)
        log = LADDER_LOGS / f"{mode}-{seconds}"
        log.with_suffix(".json").write_text(done.stdout)
        log.with_suffix(".log").write_text(done.stderr)
        if done.returncode:
            failed = f"train --time-budget {seconds} ({mode}) failed: see {log}.log"
            results.append(Result(failed, "nats/char", 0.0, 0.0, 0.0, "≤ 1", False))
            break
        run = json.loads(done.stdout)
        score, choice = run["best"]["nats_per_char"], run["budget"]["candidates"][run["budget"]["choice"]]
        hidden, epochs, trained_s = choice["settings"]["hidden_size"], run["epoch"], run["trained_s"]
        shape = f"2×{hidden}, {epochs:.1f} passes, trained to {trained_s:.0f} s"
        reference = shorter[1] if shorter else score
        results.append(Result(
            f"train --time-budget {seconds} ({mode}; {shape}) against {shorter[0] if shorter else seconds} s",
            "nats/char", score, reference, score / reference, "≤ 1", score <= reference))
        shorter = (seconds, score)
    return results


HEADLINE_SEEDS = (1, 2, 3)
# The fixed shape the headline is held against: the ladder's 2×256 rung, as an earlier fixed table set it.
FIXED_SHAPE = ("--hidden", "256", "--batch-size", "16", "--lr", "5e-3", "--skip-connections")


def headline(quick: bool, workdir: Path) -> list[Result]:
    """``charrnn train --time-budget 100`` exactly as the README gives it (default threads, the built-in
    corpus), over three seeds, beside a fixed 2×256 LSTM (batch 16, lr 5e-3, skip connections) given the
    same budget, run alternately. Every run exits 0 within 1.03× the budget, and the planner's mean
    score (``eval-perplexity best.pt``) beats the fixed shape's."""
    corpus, skipped = full_run_corpus(quick, workdir, "headline")
    if corpus is None:
        return skipped
    environment = {**os.environ, DATA_DIR_ENV: str(workdir / "data")}
    scores: dict[str, list[float]] = {"planner": [], "fixed": []}
    chosen: list[str] = []
    walls, failures = [], 0
    for seed in HEADLINE_SEEDS:
        for label, extra in (("planner", ()), ("fixed", FIXED_SHAPE)):
            out = workdir / f"headline-{label}-{seed}"
            started = time.perf_counter()
            command = [sys.executable, "-m", "charrnn", "train", "--time-budget", str(PROMISE_SECONDS),
                       "--seed", str(seed), "--out", str(out), *extra]
            trained = subprocess.run(command, env=environment, capture_output=True, text=True)
            walls.append(time.perf_counter() - started)
            if trained.returncode != 0:
                failures += 1
                continue
            printed = subprocess.run([sys.executable, "-m", "charrnn", "eval-perplexity", str(out), "--json"],
                                     check=True, capture_output=True, text=True).stdout
            scores[label].append(json.loads(printed)["nats_per_char"])
            if label == "planner":
                model = json.loads((out / "config.json").read_text())["model"]
                passes = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["epoch"]
                chosen.append(f"{model['num_layers']}×{model['hidden_size']}, {passes:.2f} passes")
    if failures or not scores["planner"] or not scores["fixed"]:
        return [Result(f"headline: {failures} of {2 * len(HEADLINE_SEEDS)} runs failed", "-", 0.0, 0.0, 0.0,
                       "none fail", False)]
    planner, fixed = (sum(values) / len(values) for values in (scores["planner"], scores["fixed"]))
    spread = max(scores["planner"]) - min(scores["planner"])
    worst_wall = max(walls) / PROMISE_SECONDS
    each = ", ".join(f"{value:.4f} ({shape})" for value, shape in zip(scores["planner"], chosen, strict=True))
    return [
        Result(f"train --time-budget {PROMISE_SECONDS}, mean of seeds {each}, vs a fixed 2×256 "
               f"({', '.join(f'{value:.4f}' for value in scores['fixed'])})", "nats/char", planner, fixed,
               planner / fixed, "< 1", planner < fixed),
        Result(f"train --time-budget {PROMISE_SECONDS}: spread of the three seeds' scores", "nats/char",
               spread, 0.01, spread / 0.01, "≤ 1", spread <= 0.01),
        Result(f"train --time-budget {PROMISE_SECONDS}: slowest of the six runs, start to exit, vs the "
               f"budget", "s", max(walls), PROMISE_SECONDS, worst_wall, "≤ 1.03", worst_wall <= 1.03),
        Result(f"train --time-budget {PROMISE_SECONDS}: mean score vs the target", "nats/char", planner, 1.44,
               planner / 1.44, "≤ 1", planner <= 1.44),
    ]


def busy_core(quick: bool) -> list[Result]:
    """Training, scoring and sampling a 2×256 LSTM with charrnn's own thread choice, while another program
    keeps one core busy, against the same work on the quiet machine measured just before (each at most
    2× slower)."""
    from charrnn.utils.hardware import use_threads

    if len(os.sched_getaffinity(0)) < 2:
        return [Result("busy core: skipped (one core)", "-", 0.0, 0.0, 0.0, "reported", None)]
    model_config = ModelConfig(vocab_size=len(VOCAB), hidden_size=256, num_layers=2)
    ids = random_ids(50_000 if quick else 200_000, seed=3)
    steps = 10 if quick else 30

    def work() -> tuple[float, float, float, str]:
        choice = use_threads()
        run = training_run(model_config, ids, 16, 50, steps)
        train_step(run, 1e-3)
        started = time.perf_counter()
        for _ in range(steps):
            train_step(run, 1e-3)
        training = time.perf_counter() - started
        model = run.model.eval()
        scoring = best_time(lambda: evaluate(model, ids[:100_000]), 1)
        config = SampleConfig(length=500, seed=1)
        sampling = best_time(lambda: list(generate(model, VOCAB, config)), 1)
        return training, scoring, sampling, choice.describe() if choice else "torch's default"

    before = torch.get_num_threads()
    try:
        quiet = work()
        spinner = subprocess.Popen([sys.executable, "-c",
                                    "import os\nos.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
                                    "while True: pass"])
        try:
            time.sleep(1.0)
            loaded = work()
        finally:
            spinner.kill()
            spinner.wait()
    finally:
        torch.set_num_threads(before)
    results = []
    for index, what in enumerate(("training", "scoring", "sampling")):
        ratio = loaded[index] / quiet[index]
        results.append(Result(f"{what} 2×256 with one core busy (threads {loaded[3]}) vs quiet (threads "
                              f"{quiet[3]})", "s", loaded[index], quiet[index], ratio, "≤ 2", ratio <= 2))
    return results


# ------------------------------------------------------------------ 2. sampling


class HandWrittenLSTM:
    """The sampling reference: per layer one ``addmm`` on the concatenated ``[x, h]``, then gates."""

    def __init__(self, model: CharRNN):
        rnn = model.rnn
        self.layers = model.config.num_layers
        self.embedding = model.embedding.weight.detach()
        self.weights = [torch.cat([getattr(rnn, f"weight_ih_l{k}"), getattr(rnn, f"weight_hh_l{k}")], 1)
                        .detach().t().contiguous() for k in range(self.layers)]
        self.biases = [(getattr(rnn, f"bias_ih_l{k}") + getattr(rnn, f"bias_hh_l{k}")).detach()
                       for k in range(self.layers)]
        self.head_weight = model.head.weight.detach().t().contiguous()
        self.head_bias = model.head.bias.detach()
        self.hidden = model.config.hidden_size

    @torch.no_grad()
    def sample(self, streams: int, length: int, seed: int) -> list[list[int]]:
        generator = torch.Generator().manual_seed(seed)
        h = [torch.zeros(streams, self.hidden) for _ in range(self.layers)]
        c = [torch.zeros(streams, self.hidden) for _ in range(self.layers)]
        current = torch.zeros(streams, dtype=torch.long)
        emitted = []
        for _ in range(length):
            x = self.embedding[current]
            for k in range(self.layers):
                gates = torch.addmm(self.biases[k], torch.cat([x, h[k]], 1), self.weights[k])
                i, f, g, o = gates.chunk(4, 1)
                c[k] = torch.sigmoid(f) * c[k] + torch.sigmoid(i) * torch.tanh(g)
                h[k] = x = torch.sigmoid(o) * torch.tanh(c[k])
            probs = torch.softmax(torch.addmm(self.head_bias, x, self.head_weight), -1)
            current = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            emitted.append(current.tolist())  # emitting a character needs its id on the host
        return emitted


def per_char_nn_lstm(model: CharRNN, length: int) -> None:
    """What naive samplers do: call the fused module once per character."""
    with torch.no_grad():
        state = model.initial_state(1)
        current = torch.zeros(1, 1, dtype=torch.long)
        for _ in range(length):
            logits, state = model(current, state)
            current = torch.multinomial(torch.softmax(logits[:, -1], -1), 1)


def sampling_speed(quick: bool) -> list[Result]:
    """``charrnn sample`` against the hand-written addmm loop.

    At least 0.8× at 2×512 with one stream; 2×128 and 8 streams are held to the same bar.
    """
    length = 300 if quick else 1000
    repeats = 3 if quick else 5
    results = []
    for hidden, streams in ((512, 1), (128, 1), (512, 8)):
        model = toy_model(hidden, 2)
        reference = HandWrittenLSTM(model)
        config = SampleConfig(length=length, num_samples=streams, seed=1)
        ours, theirs = paired_times(lambda: list(generate(model, VOCAB, config)),  # noqa: B023
                                    lambda: reference.sample(streams, length, 1), repeats)  # noqa: B023
        ratio = theirs / ours
        results.append(Result(f"sampling 2×{hidden}, {streams} stream(s), vs hand-written addmm loop",
                              "chars/s", length * streams / ours, length * streams / theirs, ratio, "≥ 0.80",
                              ratio >= 0.8))
    model = toy_model(512, 2)
    naive = best_time(lambda: per_char_nn_lstm(model, length // 4), 1)
    ours = best_time(lambda: list(generate(model, VOCAB, SampleConfig(length=length // 4, seed=1))), 1)
    results.append(Result("sampling 2×512 vs calling nn.LSTM once per character", "chars/s",
                          length / 4 / ours, length / 4 / naive, naive / ours, "reported", None))
    return results


# --------------------------------------------------------------- 3. beam search


def beam_cost(quick: bool) -> list[Result]:
    """Beam width 8 against width 1 (greedy), same length, 2×512 LSTM: at most 3×."""
    model = toy_model(512, 2)
    length = 100 if quick else 500
    width1, width8 = paired_times(lambda: beam_search(model, VOCAB, "The ", 1, length),
                                  lambda: beam_search(model, VOCAB, "The ", 8, length), 2 if quick else 3)
    ratio = width8 / width1
    return [Result(f"beam search width 8 vs width 1, 2×512, {length} chars", "s", width8, width1, ratio,
                   "≤ 3.0", ratio <= 3.0)]


# ---------------------------------------------------------------- 4. evaluation


def batched_forward(model: CharRNN, ids: torch.Tensor, streams: int = EVAL_STREAMS) -> None:
    """The reference: one batched forward pass of embedding → nn.LSTM → linear over the text, no loss: the
    text as ``streams`` rows side by side, run in pieces of EVAL_CALL_CHARS characters with the state
    carried (one call over a megabyte would hold gigabytes of activations)."""
    rows = ids[: streams * (len(ids) // streams)].view(streams, -1)
    piece = max(1, EVAL_CALL_CHARS // streams)
    with torch.no_grad():
        state = None
        for start in range(0, rows.shape[1], piece):
            _, state = model(rows[:, start : start + piece].long(), state)


def evaluation_cost(quick: bool) -> list[Result]:
    """Scoring 1 MB at 2×512 (as every score is computed) against one batched forward pass over the same
    characters (at least 0.8× its speed), and against one stream (reported)."""
    model = toy_model(512, 2)
    chars = 100_000 if quick else 1_000_000
    ids = random_ids(chars, seed=1)
    ours, batched = paired_times(lambda: evaluate(model, ids), lambda: batched_forward(model, ids), 1)
    one_stream = best_time(lambda: evaluate(model, ids, single_stream=True), 0 if quick else 1)
    return [
        Result(f"scoring {chars / 1e6:g} MB, 2×512, vs one batched forward pass ({EVAL_STREAMS} streams, "
               f"no loss)", "chars/s", chars / ours, chars / batched, batched / ours, "≥ 0.8",
               batched / ours >= 0.8),
        Result(f"scoring {chars / 1e6:g} MB, 2×512, vs one stream (--single-stream)", "chars/s", chars / ours,
               chars / one_stream, one_stream / ours, "reported", None),
    ]


def evaluation_share(quick: bool, workdir: Path) -> list[Result]:
    """A 100 MB corpus trained for 1,000 steps with default settings (``charrnn.train``, a cold cache): the
    share of the wall time spent evaluating (at most 20%)."""
    import charrnn
    import charrnn.training.loop as loop

    megabytes, steps = (10, 100) if quick else (100, 1000)
    corpus = write_corpus(workdir / "large.txt", megabytes, non_ascii=False)
    spent = [0.0]

    def timed(function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - started
        return wrapper

    original = loop.evaluate
    loop.evaluate = timed(original)
    try:
        with fresh_cache():
            started = time.perf_counter()
            result = charrnn.train(corpus, out_dir=workdir / "large-run", max_steps=steps)
            wall = time.perf_counter() - started
    finally:
        loop.evaluate = original
    share = spent[0] / wall
    return [Result(f"evaluating in a {megabytes} MB corpus's {steps:,}-step run with defaults "
                   f"({result.best.chars:,} validation chars), share of its {wall:.0f}-s wall time", "s",
                   spent[0], wall, share, "≤ 0.20", share <= 0.2)]


def budget_end_reserve(quick: bool, workdir: Path) -> list[Result]:
    """``charrnn train --time-budget 100 --hidden 512`` on tiny Shakespeare: the time its run keeps for the
    end (scoring, saves and the interpreter's exit), against the budget (at most 5%)."""
    corpus, skipped = full_run_corpus(quick, workdir, "budget's end reserve")
    if corpus is None:
        return skipped
    printed = subprocess.run([sys.executable, "-m", "charrnn", "train", str(corpus), "--out",
                              str(workdir / "reserve"), "--overwrite", "--time-budget", str(PROMISE_SECONDS),
                              "--hidden", "512"], check=True, capture_output=True, text=True)
    found = re.search(r"training stops about ([0-9.]+) s before the end", printed.stdout + printed.stderr)
    if found is None:
        return [Result("budget's end reserve: not printed", "-", 0.0, 0.0, 0.0, "reported", None)]
    reserve = float(found.group(1))
    share = reserve / PROMISE_SECONDS
    return [Result(f"the end reserve of train --time-budget {PROMISE_SECONDS} --hidden 512, tiny "
                   f"Shakespeare, vs the budget", "s", reserve, PROMISE_SECONDS, share, "≤ 0.05",
                   share <= 0.05)]


# -------------------------------------------------------- 5. corpus preprocessing


def write_corpus(path: Path, megabytes: float, non_ascii: bool) -> Path:
    """A corpus of ``megabytes`` MB: a pseudo-play of shuffled words, with accents and CJK if asked."""
    generator = torch.Generator().manual_seed(0)
    words = ["the", "king", "lord", "thou", "art", "my", "good", "what", "shall", "we", "do", "now", "love",
             "ROMEO:", "JULIET:", "\n", "\n\n", "and", "not", "to", "be"]
    if non_ascii:
        words += ["café", "naïve", "語", "🙂", "Ωmega", "straße"]
    order = torch.randint(0, len(words), (200_000,), generator=generator).tolist()
    block = " ".join(words[i] for i in order).encode("utf-8")
    size = int(megabytes * 1e6)
    with open(path, "wb") as handle:
        for _ in range(size // len(block)):
            handle.write(block)
        handle.write(block[: size % len(block)].decode("utf-8", "ignore").encode("utf-8"))
    return path


@contextmanager
def fresh_cache() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="charrnn-cache-") as directory:
        previous = os.environ.get(CACHE_DIR_ENV)
        os.environ[CACHE_DIR_ENV] = directory
        try:
            yield Path(directory)
        finally:
            if previous is None:
                os.environ.pop(CACHE_DIR_ENV)
            else:
                os.environ[CACHE_DIR_ENV] = previous


def preprocessing_speed(quick: bool, workdir: Path) -> list[Result]:
    """First-time encoding (scan, encode, write the cache) in MB/s: at least 20 MB/s.

    The reference is the whole-text way: read and decode the file, build the
    vocabulary from the string and encode it in one piece, all in memory.
    """
    results = []
    for non_ascii in (False, True):
        megabytes = (10 if quick else 100) / (2 if non_ascii else 1)
        path = write_corpus(workdir / f"speed-{non_ascii}.txt", megabytes, non_ascii)
        size = path.stat().st_size / 1e6

        def whole_text(path: Path = path) -> None:
            text = path.read_bytes().decode("utf-8")
            Vocab.from_text(text).encode(text)

        reference_seconds = best_time(whole_text, 1)
        with fresh_cache():
            start = time.perf_counter()
            encode_corpus(path, "speed", 0.1)
            seconds = time.perf_counter() - start
        kind = "UTF-8 with non-ASCII" if non_ascii else "ASCII"
        results.append(Result(f"corpus preprocessing, {size:.0f} MB {kind}, cold cache, "
                              f"vs whole text in memory", "MB/s", size / seconds, size / reference_seconds,
                              reference_seconds / seconds, "≥ 20 MB/s", size / seconds >= 20))
    return results


# Runs the command line in this process and writes the peak resident set size of
# this process image (VmHWM) to a file. getrusage's ru_maxrss would not do: it
# keeps the high-water mark of the parent the child was forked from.
PEAK_RSS_CHILD = """
import sys
from pathlib import Path
from charrnn.cli.main import cli
try:
    cli.main(sys.argv[2:], prog_name="charrnn")
finally:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            Path(sys.argv[1]).write_text(line.split()[1])
"""


def train_args(corpus: Path, out: Path) -> list[str]:
    """A short CPU training run that touches the whole pipeline: encode, train, validate, save."""
    return ["train", str(corpus), "--out", str(out), "--overwrite", "--max-steps", "20", "--hidden", "64",
            "--layers", "1", "-o", "val_frac", "0.001", "--device", "cpu"]


def peak_rss_of(args: list[str], workdir: Path, preexec: Callable[[], None] | None = None) -> tuple[int, int]:
    """Run ``charrnn ARGS`` in a fresh process: its exit status, and its peak RSS in bytes (0 if unknown)."""
    report = workdir / "peak-rss"
    report.unlink(missing_ok=True)
    with fresh_cache():
        status = subprocess.run([sys.executable, "-c", PEAK_RSS_CHILD, str(report), *args],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=preexec).returncode
    return status, int(report.read_text()) * 1024 if report.exists() else 0


def corpus_memory(quick: bool, workdir: Path) -> list[Result]:
    """Peak RSS of a training run on a large corpus minus on a 1 MB one: at most 3 bytes per character."""
    small = write_corpus(workdir / "small.txt", 1, False)
    big_mb = 20 if quick else 100
    big = write_corpus(workdir / "big.txt", big_mb, False)
    small_status, small_rss = peak_rss_of(train_args(small, workdir / "run-small"), workdir)
    big_status, big_rss = peak_rss_of(train_args(big, workdir / "run-big"), workdir)
    extra_chars = big.stat().st_size - small.stat().st_size
    per_char = (big_rss - small_rss) / extra_chars
    ok = small_status == 0 and big_status == 0
    return [Result(f"peak RSS of a training run, {big_mb} MB corpus vs 1 MB "
                   f"(ratio: extra bytes per extra char)", "MiB", big_rss / 2**20, small_rss / 2**20,
                   per_char, "≤ 3 B/char", ok and per_char <= 3)]


def memory_cgroup(limit: int) -> tuple[Path, Callable[[], None]] | None:
    """A memory cgroup capped at ``limit`` bytes and a function that moves the calling process into it.

    None where cgroups cannot be created (not root, or no writable memory controller).
    """
    for root, limit_file in ((Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
                             (Path("/sys/fs/cgroup"), "memory.max")):
        group = root / f"charrnn-bench-{os.getpid()}"
        try:
            group.mkdir()
            (group / limit_file).write_text(str(limit))
        except OSError:
            if group.exists():
                group.rmdir()
            continue
        return group, lambda group=group: (group / "cgroup.procs").write_text(str(os.getpid()))
    return None


def larger_than_memory(quick: bool, workdir: Path) -> list[Result]:
    """Train on a corpus twice the size of the memory the process may use (a cgroup limit)."""
    limit = 768 * 2**20
    cgroup = None if quick else memory_cgroup(limit)
    if cgroup is None:
        reason = "skipped in --quick" if quick else "skipped: no writable memory cgroup (needs root)"
        return [Result(f"corpus larger than the memory limit: {reason}", "-", 0, 0, 0, "reported", None)]
    group, enter = cgroup
    corpus = write_corpus(workdir / "huge.txt", 2 * limit / 1e6, False)
    try:
        # Evict the freshly written corpus from the page cache, so that the run reads it
        # back under its own limit rather than through pages charged to this process.
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1")
    except OSError:
        pass
    try:
        status, rss = peak_rss_of(train_args(corpus, workdir / "run-huge"), workdir, enter)
    finally:
        group.rmdir()
        corpus.unlink()
    size = 2 * limit / 2**20
    return [Result(f"training on a {size:,.0f} MiB corpus under a {limit / 2**20:.0f} MiB memory limit "
                   f"(figure: peak RSS; exit {status})", "MiB", rss / 2**20, limit / 2**20,
                   rss / limit, "trains", status == 0)]


# ------------------------------------------------------------------- reported


def layer_norm_training_cost(quick: bool) -> list[Result]:
    """Training step time of the layer-normalised LSTM against the fused nn.LSTM, 2×256, 16×50.

    Reported, not judged: the layer-norm cells are Python loops over time, and the
    figure tells users what -o layer_norm true costs.
    """
    ids = random_ids(200_000)
    steps = 3 if quick else 10
    seconds = {}
    for layer_norm in (False, True):
        run = training_run(ModelConfig(vocab_size=len(VOCAB), layer_norm=layer_norm), ids, 16, 50, steps)
        seconds[layer_norm] = best_time(lambda run=run: [train_step(run, 1e-3) for _ in range(steps)], 2)
    ratio = seconds[True] / seconds[False]
    return [Result(f"layer-norm LSTM training vs fused, 2×256, {steps} steps of 16×50", "s", seconds[True],
                   seconds[False], ratio, "reported", None)]


# What each long-run option costs per training step, and the most it may cost.
REGULARISATION_COSTS: tuple[tuple[str, dict, dict, float | None], ...] = (
    ("weight drop 0.3 + locked dropout", {"weight_drop": 0.3, "locked_dropout": True}, {}, 1.25),
    ("weight average (--ema 0.999)", {}, {"ema_decay": 0.999}, 1.05),
    ("skip connections", {"skip_connections": True}, {}, None),
)


def regularisation_training_cost(quick: bool) -> list[Result]:
    """Training step time with each long-run option against the same LSTM without it, 2×512, 32×50,
    dropout 0.3, in the precision ``--precision auto`` picks on this CPU.

    Weight drop and locked dropout run the layers one fused kernel at a time with a fresh
    mask over W_hh; the average reads and writes every weight after each step; skip
    connections widen the upper layers' input and the read-out (reported, not judged: it is
    a larger model).
    """
    precision = "bf16" if cpu_has_native_bf16() else "fp32"
    ids = random_ids(200_000)
    steps = 2 if quick else 6
    results = []
    def steps_of(run: TrainingRun) -> Callable[[], None]:
        return lambda: [train_step(run, 1e-3) for _ in range(steps)]

    for name, model_options, train_options, limit in REGULARISATION_COSTS:
        shape = {"vocab_size": len(VOCAB), "hidden_size": 512, "dropout": 0.3}
        runs = (training_run(ModelConfig(**shape, **model_options), ids, 32, 50, steps, precision,
                             **train_options),
                training_run(ModelConfig(**shape), ids, 32, 50, steps, precision))
        with_option, without = paired_times(*map(steps_of, runs), 1 if quick else 3)
        ratio = with_option / without
        results.append(Result(f"training with {name} vs without, LSTM 2×512, 32 × 50, {precision}", "s",
                              with_option, without, ratio, "reported" if limit is None else f"≤ {limit}",
                              None if limit is None else ratio <= limit))
    return results


def command_start_up(quick: bool) -> list[Result]:
    """Wall time of quick commands (help, version, an argument error) against ``import torch`` alone.

    These must not import torch: a user typing ``charrnn --help`` or pressing TAB for shell
    completion waits for the whole interpreter start. Target: under 0.3 × torch's import.
    """
    charrnn = str(Path(sys.executable).with_name("charrnn"))
    commands = {
        "--help": [charrnn, "--help"],
        "--version": [charrnn, "--version"],
        "train --help": [charrnn, "train", "--help"],
        "sample --help": [charrnn, "sample", "--help"],
        "compare --help": [charrnn, "compare", "--help"],
        "an argument error": [charrnn, "sample", "--temperature", "0", "x.pt"],
    }

    def run(args: list[str]) -> Callable[[], object]:
        return lambda: subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)

    repeats = 2 if quick else 5
    torch_import = best_time(run([sys.executable, "-c", "import torch"]), repeats)
    results = []
    for name, args in commands.items():
        seconds = best_time(run(args), repeats)
        ratio = seconds / torch_import
        results.append(Result(f"charrnn {name} vs python -c 'import torch'", "s", seconds, torch_import,
                              ratio, "≤ 0.30", ratio <= 0.3))
    return results


def machine() -> dict[str, str]:
    emulated = " (as an AVX2 CPU without bf16)" if as_avx2() else ""
    return {"cpu": processor_name() + emulated, "cores": str(os.cpu_count()),
            "threads": str(torch.get_num_threads()), "torch": torch.__version__,
            "python": platform.python_version()}


def render(results: list[Result], title: str) -> Table:
    table = Table(title=title)
    for column in ("benchmark", "unit", "charrnn", "reference", "ratio", "target", "verdict"):
        table.add_column(column)
    for r in results:
        verdict = "measured" if r.passed is None else "[green]pass[/]" if r.passed else "[red]FAIL[/]"
        digits = 4 if r.unit == "nats/char" else 1  # losses differ in the second decimal
        table.add_row(r.name, r.unit, f"{r.figure:,.{digits}f}", f"{r.reference:,.{digits}f}",
                      f"{r.ratio:.2f}", r.target, verdict)
    return table


@click.command()
@click.option("--quick", is_flag=True, help="Small sizes and fewer repeats: under a minute.")
@click.option("--only", multiple=True, help="Run only the benchmarks whose function name contains this.")
@click.option("--as-avx2", "avx2", is_flag=True, help="Run as an AVX2 CPU without bfloat16 (most laptops).")
def main(quick: bool, only: tuple[str, ...], avx2: bool) -> None:
    """Run every benchmark, print the table and write benchmarks/results.json."""
    if avx2 and not as_avx2():  # read once, as torch loads: start again with them set
        os.execve(sys.executable, sys.orig_argv, {**os.environ, **AS_AVX2})
    console = Console(width=max(Console().width, 150))
    in_process = [command_start_up, training_throughput, precision_throughput, sampling_while_training,
                  sampling_speed, beam_cost,
                  evaluation_cost, layer_norm_training_cost, regularisation_training_cost, busy_core]
    on_disk = [preprocessing_speed, corpus_memory, larger_than_memory, quality_per_minute, budget_promise,
               evaluation_share, budget_end_reserve, budget_share, headline]
    if any(part in budget_ladder.__name__ for part in only):  # over an hour and a half: only when named
        on_disk.append(budget_ladder)
    results: list[Result] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="charrnn-bench-") as directory:
        for benchmark in [*in_process, *on_disk]:
            if only and not any(part in benchmark.__name__ for part in only):
                continue
            with console.status(f"{benchmark.__name__}…"):
                args = (quick, Path(directory)) if benchmark in on_disk else (quick,)
                results += benchmark(*args)
    console.print(render(results, "charrnn benchmarks" + (" (quick)" if quick else "")))
    info = machine()
    console.print(f"{info['cpu']}, {info['cores']} cores, {info['threads']} torch threads, "
                  f"torch {info['torch']}, {time.perf_counter() - started:.0f} s")
    RESULTS.write_text(json.dumps({"quick": quick, "machine": info, "results": [asdict(r) for r in results]},
                                  indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
