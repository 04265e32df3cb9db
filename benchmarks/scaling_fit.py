"""Fit the scaling rule that time budgets plan with, and check it against the constants charrnn ships.

The rule (:class:`charrnn.training.budget.ScalingLaw`, method in ``docs/defaults.md``) predicts
the validation nats/char of an LSTM of ``n`` parameters trained on ``d`` characters of a corpus whose
training split holds ``u`` characters::

    loss = E + A · (n / 1e6) ** -alpha + B · (d_eff / 1e6) ** -beta
    d_eff = d                                              while d ≤ u (one pass)
    d_eff = u · (1 + R · (1 - exp(-(d / u - 1) / R)))      beyond: each repeated pass is worth less

Its data are every finished 2-layer LSTM run on tiny Shakespeare recorded under ``benchmarks/``, each
scored where its ``best.pt`` is:

- the time-budget sweep (``sweep/results.jsonl``: one score per run; ``threads`` says whether it ran
  pinned to one thread or with charrnn's own choice of all free cores, and the fit's error on the latter
  is reported apart);
- the learning curves (``scaling/curves.jsonl``: each curve's last point and its best one);
- the learning curves beyond the ladder (``long_curves/results.jsonl``: 2×512 to 2×2048 on a GPU, each
  run's best evaluation).

Throughput never enters: a run's characters are its steps × batch × sequence length, whatever machine
ran it.

    python benchmarks/scaling_fit.py            # fit, print, write benchmarks/scaling/fit.json
    python benchmarks/scaling_fit.py --check    # exit 1 unless budget.SCALING_LAW matches the file
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import click
import torch

from charrnn.config import ModelConfig
from charrnn.models.model import parameter_count
from charrnn.training.budget import SCALING_LAW, ScalingLaw

HERE = Path(__file__).resolve().parent
SWEEP = HERE / "sweep" / "results.jsonl"
CURVES = HERE / "scaling" / "curves.jsonl"
LONG_CURVES = HERE / "long_curves" / "results.jsonl"
FIT = HERE / "scaling" / "fit.json"
TRAIN_CHARS = 1_003_854  # tiny Shakespeare's training split (the first 90%)
VOCAB = 65  # tiny Shakespeare's characters
SKIP_LARGEST_HIDDEN = 256  # the widest rung of BUDGET_LADDER with skip connections
# Starting points for the fit (E, ln A, alpha, ln B, beta, ln R, K): its valleys are shallow, so the
# best of a few is kept.
STARTS = ((1.2, -2.0, 0.5, -1.0, 0.5, 0.0, 0.0), (1.3, -3.0, 0.3, -1.5, 0.7, -0.7, 0.0),
          (1.0, -1.0, 0.2, -0.5, 0.3, 0.7, 0.0))


def option(options: list[str], name: str, default: float) -> float:
    return float(options[options.index(name) + 1]) if name in options else default


def points() -> list[dict]:
    """Every recorded 2-layer LSTM run on tiny Shakespeare: name, parameters, characters trained, validation
    loss, and whether it had skip connections."""
    rows = []
    for line in SWEEP.read_text().splitlines():
        run = json.loads(line)
        options = run["options"]
        if "--model" in options:  # the rule is for LSTMs
            continue
        batch = run.get("batch_size") or option(options, "--batch-size", 16)  # the run's own, where recorded
        steps = run.get("best_step", run["steps"])
        chars = steps * batch * (run.get("seq_len") or option(options, "--seq-len", 50))
        threads = run.get("threads", "1")
        # Runs with charrnn's own threads are the current code, whose ladder links the layers of shapes up
        # to 2×256 (given as an option, or chosen by the budget when no --hidden was given).
        skip = "--skip-connections" in options or (threads == "default" and "--hidden" not in options
                                                   and run["hidden"] <= SKIP_LARGEST_HIDDEN)
        rows.append({"name": run["name"], "hidden": run["hidden"], "layers": run["layers"], "chars": chars,
                     "loss": run["val_nats_per_char"], "threads": threads, "skip": skip})
    for line in CURVES.read_text().splitlines():
        run = json.loads(line)
        curve = run["curve"]
        best = min(curve, key=lambda point: point[1])
        for label, (chars, loss) in (("end", curve[-1]), ("best", best)):
            if label == "best" and best == curve[-1]:
                continue
            rows.append({"name": f"{run['name']}@{label}", "hidden": run["hidden"], "layers": run["layers"],
                         "chars": chars, "loss": loss, "threads": run.get("threads", "1"), "skip": False})
    for line in LONG_CURVES.read_text().splitlines():
        run = json.loads(line)
        if run["layers"] != 2:
            continue
        best = min(run["evaluations"], key=lambda point: min(point["val_loss"], point["averaged_val_loss"]))
        rows.append({"name": f"gpu-{run['name']}", "hidden": run["hidden"], "layers": 2,
                     "chars": best["epoch"] * TRAIN_CHARS,
                     "loss": min(best["val_loss"], best["averaged_val_loss"]), "threads": "gpu",
                     "skip": False})
    for row in rows:
        row["parameters"] = parameter_count(ModelConfig(vocab_size=VOCAB, hidden_size=row["hidden"],
                                                        num_layers=row["layers"],
                                                        skip_connections=row["skip"]))
    return rows


def law_from(theta: list[float]) -> ScalingLaw:
    irreducible, log_a, alpha, log_b, beta, log_r, skip_gain = theta
    return ScalingLaw(irreducible=irreducible, size_coefficient=math.exp(log_a), size_exponent=alpha,
                      data_coefficient=math.exp(log_b), data_exponent=beta, repeat_scale=math.exp(log_r),
                      skip_gain=skip_gain, rms_error=0.0)


def fit(rows: list[dict]) -> tuple[ScalingLaw, float]:
    """Least squares over the rows; returns the law (rounded as shipped, with its RMS error) and the
    unrounded RMS error."""
    parameters = torch.tensor([row["parameters"] for row in rows], dtype=torch.float64) / 1e6
    chars = torch.tensor([row["chars"] for row in rows], dtype=torch.float64)
    skip = torch.tensor([float(row["skip"]) for row in rows], dtype=torch.float64)
    loss = torch.tensor([row["loss"] for row in rows], dtype=torch.float64)

    def predict(theta: torch.Tensor) -> torch.Tensor:
        irreducible, log_a, alpha, log_b, beta, log_r, skip_gain = theta
        repeats = torch.clamp(chars / TRAIN_CHARS - 1, min=0)
        scale = torch.exp(log_r)
        effective = torch.minimum(chars, TRAIN_CHARS * (1 + scale * (1 - torch.exp(-repeats / scale))))
        return irreducible + torch.exp(log_a - alpha * torch.log(parameters)) + \
            torch.exp(log_b - beta * torch.log(effective / 1e6)) - skip_gain * skip

    def least_squares(start: tuple[float, ...]) -> tuple[float, list[float]]:
        theta = torch.tensor(start, dtype=torch.float64, requires_grad=True)
        optimiser = torch.optim.LBFGS([theta], max_iter=2000, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            optimiser.zero_grad()
            error = ((predict(theta) - loss) ** 2).mean()
            error.backward()
            return error

        optimiser.step(closure)
        return closure().item(), theta.detach().tolist()

    best = min((least_squares(start) for start in STARTS), key=lambda result: result[0])
    law = rounded(law_from(best[1]))
    residuals = [predicted(law, row) - row["loss"] for row in rows]
    rms = math.sqrt(sum(r * r for r in residuals) / len(residuals))
    return dataclasses.replace(law, rms_error=round(rms, 4)), rms


def predicted(law: ScalingLaw, row: dict) -> float:
    return law.predict(row["parameters"], row["chars"], TRAIN_CHARS, row["skip"])


def rounded(law: ScalingLaw) -> ScalingLaw:
    """Four significant figures: what charrnn ships."""
    return ScalingLaw(**{key: float(f"{value:.4g}") for key, value in dataclasses.asdict(law).items()})


@click.command()
@click.option("--check", is_flag=True, help="Compare budget.SCALING_LAW with fit.json; fit nothing.")
def main(check: bool) -> None:
    if check:
        shipped = json.loads(FIT.read_text())["law"]
        if shipped != dataclasses.asdict(SCALING_LAW):
            sys.exit(f"budget.SCALING_LAW {dataclasses.asdict(SCALING_LAW)} differs from {FIT}: "
                     f"{shipped}")
        print("budget.SCALING_LAW matches fit.json")
        return
    rows = points()
    law, rms = fit(rows)
    for row in rows:
        row["predicted"] = round(predicted(law, row), 4)
        print(f"{row['name']:60} {row['parameters'] / 1e6:6.2f} M params {row['chars'] / 1e6:6.2f} M chars "
              f"{row['loss']:.4f} predicted {row['predicted']:.4f}")
    print(f"{len(rows)} runs, RMS error {rms:.4f}: {law}")
    # The rule plans runs as users run them, on all cores: its error on those points is checked apart.
    default = [row["predicted"] - row["loss"] for row in rows if row["threads"] == "default"]
    default_rms = math.sqrt(sum(r * r for r in default) / len(default)) if default else None
    if default:
        print(f"{len(default)} of them with charrnn's own threads: RMS error {default_rms:.4f}, mean error "
              f"{sum(default) / len(default):+.4f}")
    FIT.write_text(json.dumps({"law": dataclasses.asdict(law), "rms_error": round(rms, 4),
                               "default_threads_rms_error": default_rms and round(default_rms, 4),
                               "train_chars": TRAIN_CHARS, "points": rows}, indent=1) + "\n")

if __name__ == "__main__":
    main()
