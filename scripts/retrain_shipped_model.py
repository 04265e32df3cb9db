"""Retrain the model that ships inside charrnn (``charrnn sample shakespeare``) from scratch.

    python scripts/retrain_shipped_model.py            # about 5 minutes on two CPU cores
    python scripts/retrain_shipped_model.py --hidden 192 --skip-connections --output /tmp/other

Downloads tiny Shakespeare (checksum-verified; ``CHARRNN_DATA_MIRROR`` points elsewhere), trains the
shape given with the settings a time budget gives that shape for five passes (dropout and weight average
from the same rules: charrnn.training.budget), rounds the weights to 16 bits, and writes a model folder
that records the corpus (its sha256 and split), the exact training settings, and the validation score of
the weights as shipped: the validation split read as one text (``eval-perplexity shakespeare --text``
over it gives the same number; tests/models/test_pretrained.py checks it).
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import asdict
from pathlib import Path

import click
import torch

import charrnn
from charrnn.data.datasets import DATASETS, DEFAULT_DATASET, fetch
from charrnn.models.pretrained import shipped_path
from charrnn.training.budget import BUDGET_MOST_EPOCHS, average_decay_for_steps, dropout_for_epochs
from charrnn.training.checkpoint import load_checkpoint, save_checkpoint, write_model_folder

SHIPPED_DTYPE = torch.float16  # the weights' precision in the file: half float32's size, within 2 MB


def public_url(dataset) -> str:
    """The corpus's public home, recorded in place of this machine's path."""
    return f"{dataset.origin}/{dataset.relative_path}"


@click.command()
@click.option("--hidden", default=256, show_default=True, help="Units per layer.")
@click.option("--layers", default=2, show_default=True, help="LSTM layers.")
@click.option("--skip-connections", is_flag=True, help="Every layer reads the input and reaches the output.")
@click.option("--batch-size", default=16, show_default=True, help="Streams per step.")
@click.option("--lr", default=5e-3, show_default=True, help="Peak learning rate.")
@click.option("--seed", default=1, show_default=True, help="The run's seed.")
@click.option("--output", type=click.Path(file_okay=False, path_type=Path),
              default=shipped_path("shakespeare"), show_default=True, help="The model folder to write.")
def main(hidden: int, layers: int, skip_connections: bool, batch_size: int, lr: float, seed: int,
         output: Path) -> None:
    """Train, round to 16 bits, score, and write the shipped model folder."""
    with tempfile.TemporaryDirectory(prefix="charrnn-shipped-") as work:
        corpus = fetch(DEFAULT_DATASET, Path(work) / "data").path
        text = corpus.read_text(encoding="utf-8")
        epochs = BUDGET_MOST_EPOCHS
        seq_len = 50
        steps = epochs * math.ceil(len(text) * 0.9 / (batch_size * seq_len))
        settings = dict(hidden_size=hidden, num_layers=layers, skip_connections=skip_connections,
                        batch_size=batch_size, seq_len=seq_len, learning_rate=lr, epochs=epochs, seed=seed,
                        dropout=dropout_for_epochs(epochs), ema_decay=average_decay_for_steps(steps))
        click.echo(f"training {layers}×{hidden} on {corpus.name}: {settings}")
        result = charrnn.train(corpus, out_dir=Path(work) / "run", **settings)
        trained = load_checkpoint(result.out_dir / "best.pt")
        payload = {
            "model_config": trained["model_config"],
            "vocab": trained["vocab"],
            "vocab_digest": trained["vocab_digest"],
            "model_state": {name: w.to(SHIPPED_DTYPE) for name, w in trained["model_state"].items()},
            "corpus": {**trained["corpus"], "path": public_url(DATASETS[DEFAULT_DATASET])},
            "train_config": {**trained["train_config"], "out_dir": "."},
            "step": trained["step"],
            "progress_epochs": trained["progress_epochs"],
            "elapsed_s": trained["elapsed_s"],
            "machine": trained["machine"],
            "best_is_average": trained["best_is_average"],
        }
        validation = text[trained["corpus"]["split_point"]:]
        staged = Path(work) / "shipped.pt"
        save_checkpoint(staged, payload)
        score = charrnn.perplexity(staged, validation, device="cpu")
        payload["best"] = asdict(score.score)
        write_model_folder(payload, output, "shakespeare", shown="shakespeare")
    click.echo(f"trained weights: {trained['best']['nats_per_char']:.4f} nats/char on the validation split; "
               f"shipped ({SHIPPED_DTYPE}): {score.score.nats_per_char:.4f} over it as one text")
    click.echo(f"wrote {output} ({(output / 'model.safetensors').stat().st_size:,} bytes of weights, "
               f"{sum(t.numel() for t in payload['model_state'].values()):,} parameters, torch "
               f"{torch.__version__})")


if __name__ == "__main__":
    main()
