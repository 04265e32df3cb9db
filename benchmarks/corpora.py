"""Does a time budget's plan carry to other corpora? ``charrnn train --time-budget`` against a plain
``nn.LSTM`` given the same wall time, on each corpus named (not part of CI).

For each corpus: ``charrnn train CORPUS --time-budget S`` as a user runs it (its plan, its validation
score of best.pt, its wall time from start to exit), then the baseline: embedding → 2×256 ``nn.LSTM``
→ linear, Adam at 2e-3, 32 streams of 64 characters, no dropout, schedule or averaging (torch-rnn's and
char-rnn's recipe at a common size), trained until the same budget less its own timed evaluation, and
scored on the same validation split the same way (one stream, state carried). Prints one row per corpus
and appends them to benchmarks/corpora/results.jsonl.

    python benchmarks/corpora.py CORPUS... --seconds 100
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import torch
import torch.nn.functional as F
from torch import nn

from charrnn.data.corpus import encode_corpus, split_ids
from charrnn.utils.hardware import processor_name

RESULTS = Path(__file__).with_name("corpora") / "results.jsonl"
BASELINE = {"hidden": 256, "layers": 2, "embed": 64, "batch": 32, "seq_len": 64, "learning_rate": 2e-3}
EVAL_CHUNK = 4096


class PlainLSTM(nn.Module):
    def __init__(self, vocab_size: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, BASELINE["embed"])
        self.lstm = nn.LSTM(BASELINE["embed"], BASELINE["hidden"], BASELINE["layers"], batch_first=True)
        self.head = nn.Linear(BASELINE["hidden"], vocab_size)

    def forward(self, idx: torch.Tensor, state=None):
        out, state = self.lstm(self.embedding(idx), state)
        return self.head(out), state


@torch.no_grad()
def stream_nll(model: PlainLSTM, ids: torch.Tensor) -> float:
    """Nats per character of ``ids[1:]``, scored as one stream (as ``charrnn eval-perplexity`` does)."""
    model.eval()
    state, total = None, 0.0
    for start in range(0, len(ids) - 1, EVAL_CHUNK):
        end = min(start + EVAL_CHUNK, len(ids) - 1)
        logits, state = model(ids[start:end].long().unsqueeze(0), state)
        total += F.cross_entropy(logits[0], ids[start + 1 : end + 1].long(), reduction="sum").item()
    model.train()
    return total / (len(ids) - 1)


def baseline(corpus: Path, seconds: float, val_frac: float) -> dict:
    """The plain LSTM's validation nats/char after ``seconds`` of wall time, its evaluation included."""
    started = time.perf_counter()
    encoded = encode_corpus(corpus, corpus.stem, val_frac)
    split = split_ids(encoded.ids, encoded.info.split_point)
    torch.manual_seed(0)
    model = PlainLSTM(len(encoded.vocab))
    timed = time.perf_counter()
    stream_nll(model, split.val[:2049])
    evaluation_s = (time.perf_counter() - timed) * (len(split.val) - 1) / 2048
    optimizer = torch.optim.Adam(model.parameters(), lr=BASELINE["learning_rate"])
    batch, seq_len = BASELINE["batch"], BASELINE["seq_len"]
    streams = split.train[: batch * (len(split.train) // batch)].view(batch, -1).long()
    steps_per_epoch = (streams.shape[1] - 1) // seq_len
    state, steps = None, 0
    while time.perf_counter() - started < seconds - 1.1 * evaluation_s:
        start = (steps % steps_per_epoch) * seq_len
        if start == 0:
            state = None
        x, y = streams[:, start : start + seq_len], streams[:, start + 1 : start + seq_len + 1]
        logits, state = model(x, state)
        state = tuple(s.detach() for s in state)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        steps += 1
    score = stream_nll(model, split.val)
    return {"nats_per_char": score, "steps": steps, "epochs": steps / steps_per_epoch,
            "wall_s": time.perf_counter() - started}


def charrnn_run(corpus: Path, seconds: float, val_frac: float, workdir: Path) -> dict:
    """``charrnn train --time-budget`` as a user runs it, then ``eval-perplexity`` of its best.pt."""
    out = workdir / f"run-{corpus.stem}"
    started = time.perf_counter()
    printed = subprocess.run([sys.executable, "-m", "charrnn", "train", str(corpus), "--out", str(out),
                              "--overwrite", "--time-budget", f"{seconds:g}", "-o", "val_frac",
                              f"{val_frac:g}", "--quiet", "--json"],
                             check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - started
    result = json.loads(printed)
    scored = json.loads(subprocess.run([sys.executable, "-m", "charrnn", "eval-perplexity",
                                        str(out / "best.pt"), "--json"],
                                       check=True, capture_output=True, text=True).stdout)
    choice = result["budget"]["candidates"][result["budget"]["choice"]]
    return {"nats_per_char": scored["nats_per_char"], "wall_s": wall, "epochs": result["epoch"],
            "shape": f"{choice['num_layers']}x{choice['settings']['hidden_size']}",
            "predicted": choice["predicted_loss"], "chosen": result["budget"]["chosen"]}


@click.command()
@click.argument("corpora", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--seconds", type=float, default=100.0, show_default=True, help="The budget each run gets.")
@click.option("--val-frac", type=float, default=0.1, show_default=True,
              help="The tail held out for validation (a large corpus's takes long to score on a CPU).")
def main(corpora: tuple[Path, ...], seconds: float, val_frac: float) -> None:
    RESULTS.parent.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for corpus in corpora:
            text = corpus.read_text(encoding="utf-8")
            ours = charrnn_run(corpus, seconds, val_frac, Path(tmp))
            plain = baseline(corpus, seconds, val_frac)
            row = {"corpus": corpus.name, "chars": len(text), "vocabulary": len(set(text)),
                   "seconds": seconds, "val_frac": val_frac, "processor": processor_name(),
                   "threads": torch.get_num_threads(),
                   "charrnn": ours, "plain_lstm": plain}
            with RESULTS.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")
            gain = plain["nats_per_char"] - ours["nats_per_char"]
            print(f"{corpus.name}: {len(text):,} chars, vocabulary {len(set(text)):,}: charrnn "
                  f"{ours['shape']} {ours['epochs']:.2f} epochs → {ours['nats_per_char']:.4f} (predicted "
                  f"{ours['predicted'] or float('nan'):.3f}, wall {ours['wall_s']:.1f} s); plain nn.LSTM "
                  f"{plain['epochs']:.2f} epochs → {plain['nats_per_char']:.4f} "
                  f"(wall {plain['wall_s']:.1f} s); "
                  f"charrnn better by {gain:.4f} nats/char ({gain / math.log(2):.4f} bits)", flush=True)


if __name__ == "__main__":
    main()
