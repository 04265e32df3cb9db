"""How far the many-stream score lands from the exact one-stream score, by warm-up length (not part of CI).

Trains one model of every cell kind (LSTM, GRU, vanilla RNN, layer-normalised LSTM, skip-connected LSTM,
echo-state network) on each corpus, with ``charrnn train`` as a user runs it, then scores each model's
validation split as one stream (``--single-stream``, the exact definition) and as many streams with each
warm-up length W (slices of :data:`~charrnn.models.evaluate.EVAL_SLICE` characters). Writes
benchmarks/eval_streams/results.jsonl (one row per model) and table.md (the worst difference per W).

    python benchmarks/eval_streams.py                   # tiny Shakespeare and Python's own source
    python benchmarks/eval_streams.py --steps 300 --kinds lstm,gru    # quicker
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import click
import torch

from charrnn.data.corpus import checkpoint_validation_ids
from charrnn.data.vocab import Vocab
from charrnn.models.evaluate import EVAL_SLICE, StreamLayout, layout_nll
from charrnn.training.checkpoint import load_model
from charrnn.utils.hardware import processor_name

HERE = Path(__file__).with_name("eval_streams")
WARMUPS = (0, 32, 128, 256, 512, 1024, 2048)
# Each kind's options, and how many steps it trains (the layer-normalised cell runs a Python loop per step).
KINDS = {
    "lstm": ([], 1.0),
    "gru": (["--model", "gru"], 1.0),
    "rnn": (["--model", "rnn"], 1.0),
    "layernorm": (["-o", "layer_norm", "true"], 0.3),
    "skip": (["--skip-connections"], 1.0),
    "esn": (["--model", "esn", "--hidden", "512"], 1.0),
}


def python_source(workdir: Path, limit: int = 1_500_000) -> Path:
    """The first ``limit`` characters of the Python standard library's own modules, in name order."""
    parts, size = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="ignore")
        parts.append(text)
        size += len(text)
        if size >= limit:
            break
    corpus = workdir / "python_source.txt"
    corpus.write_text("".join(parts)[:limit], encoding="utf-8")
    return corpus


def score_row(checkpoint: Path, corpus_name: str, kind: str, slice_chars: int) -> dict:
    loaded = load_model(checkpoint)
    ids = checkpoint_validation_ids(loaded.payload.get("corpus"), Vocab.from_list(loaded.payload["vocab"]))
    model = loaded.network
    exact_total, chars = layout_nll(model, ids, StreamLayout.for_text(len(ids), single_stream=True))
    exact = exact_total / chars
    row = {"corpus": corpus_name, "kind": kind, "val_chars": chars, "exact": exact, "slice": slice_chars,
           "differences": {}}
    for warmup in WARMUPS:
        layout = StreamLayout(chars, slice_chars, warmup, 128)
        total = layout_nll(model, ids, layout)[0]
        row["differences"][str(warmup)] = total / chars - exact
    # The training precision: bfloat16 autocast, on the first 20,000 characters, against float32.
    sample = ids[:20_001]
    full = layout_nll(model, sample, StreamLayout.for_text(len(sample)))[0] / (len(sample) - 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model.eval()
        halved = sum(torch.nn.functional.cross_entropy(chunk_logits.float(), targets, reduction="sum").item()
                     for chunk_logits, targets in _bf16_chunks(model, sample))
    row["bf16_difference"] = halved / (len(sample) - 1) - full
    return row


@torch.no_grad()
def _bf16_chunks(model, ids):
    """One stream in bfloat16 autocast (the scoring routine itself always turns autocast off)."""
    state = None
    for start in range(0, len(ids) - 1, 2048):
        end = min(start + 2048, len(ids) - 1)
        logits, state = model(ids[start:end].long().unsqueeze(0), state)
        yield logits[0], ids[start + 1 : end + 1].long()


@click.command()
@click.option("--steps", type=int, default=1500, show_default=True, help="Training steps of each fused cell.")
@click.option("--kinds", default=",".join(KINDS), show_default=True)
@click.option("--slice", "slice_chars", type=int, default=EVAL_SLICE, show_default=True,
              help="Predicted characters each stream scores.")
@click.option("--shakespeare", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=Path(__file__).resolve().parents[2] / "shared/data/tinyshakespeare/input.txt")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None)
def main(steps: int, kinds: str, slice_chars: int, shakespeare: Path, workdir: Path | None) -> None:
    workdir = workdir or Path(tempfile.mkdtemp(prefix="eval-streams-"))
    workdir.mkdir(parents=True, exist_ok=True)
    corpora = {"tinyshakespeare": shakespeare, "python_source": python_source(workdir)}
    HERE.mkdir(exist_ok=True)
    rows = []
    for corpus_name, corpus in corpora.items():
        for kind in kinds.split(","):
            options, share = KINDS[kind]
            out = workdir / f"{corpus_name}-{kind}"
            if not (out / "best.pt").exists():
                started = time.perf_counter()
                subprocess.run([sys.executable, "-m", "charrnn", "train", str(corpus), "--out", str(out),
                                "--overwrite", "--quiet", "--max-steps", str(max(1, int(steps * share))),
                                *options], check=True)
                print(f"trained {corpus_name} {kind} in {time.perf_counter() - started:.0f} s", flush=True)
            row = score_row(out / "best.pt", corpus_name, kind, slice_chars)
            row["processor"] = processor_name()
            rows.append(row)
            print(json.dumps(row), flush=True)
    # Rows of other slice lengths, measured before, are kept: the table shows each.
    results = HERE / "results.jsonl"
    kept = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()] \
        if results.exists() else []
    kept = [row for row in kept if row["slice"] != slice_chars] + rows
    results.write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")
    sizes = sorted({row["slice"] for row in kept})
    tables = [table([row for row in kept if row["slice"] == size]) for size in sizes]
    (HERE / "table.md").write_text("\n".join(tables), encoding="utf-8")


def table(rows: list[dict]) -> str:
    """The worst difference per warm-up W, and each model's, for one slice length."""
    warmups = [w for w in WARMUPS if all(str(w) in row["differences"] for row in rows)]
    header = "| corpus | cell | one stream | " + " | ".join(f"W={w}" for w in warmups) + " | bf16 |"
    lines = [f"Many-stream score minus the one-stream score, nats/char, slices of {rows[0]['slice']:,} "
             f"characters ({rows[0]['processor']}).", "", header,
             "|" + "---|" * (4 + len(warmups))]
    for row in rows:
        cells = " | ".join(f"{row['differences'][str(w)]:+.1e}" for w in warmups)
        lines.append(f"| {row['corpus']} | {row['kind']} | {row['exact']:.4f} | {cells} | "
                     f"{row['bf16_difference']:+.1e} |")
    worst = " | ".join(f"{max(abs(row['differences'][str(w)]) for row in rows):.1e}" for w in warmups)
    lines.append(f"| **worst** | | | {worst} | {max(abs(row['bf16_difference']) for row in rows):.1e} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
