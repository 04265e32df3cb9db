"""Does ``--no-repeat N`` end loops without making the text worse? (not part of CI)

For a checkpoint, 2,000-character texts after a prime, greedy, by beam search of width 8, and sampled
at temperature 0.5 (three seeds), without the rule and with it for each N given, and for each text:

- the share of its characters inside a run of 20 that occurs more than once in it (loops);
- the share of its words that are words of the checkpoint's own training split (spelling);
- the model's own nats/char on it, scored as ``eval-perplexity`` scores a text (how natural the model
  finds what it wrote: a text that avoids its likeliest continuations scores higher).

    python benchmarks/repetition.py CHECKPOINT [--no-repeat 8,12,16,24] [--prime "ROMEO:"]
    python benchmarks/repetition.py shakespeare --corpus data/tinyshakespeare/input.txt
"""

from __future__ import annotations

from pathlib import Path

import click

import charrnn
from charrnn.analysis.memorisation import Reference, known_word_fraction
from charrnn.data.corpus import checkpoint_split
from charrnn.training.checkpoint import checkpoint_in, load_model

LOOP_RUN = 20  # characters in the runs that count as a loop when they occur twice
LENGTH = 2000
SEEDS = (1, 2, 3)


def looped_share(text: str, n: int = LOOP_RUN) -> float:
    """The share of ``text``'s characters that lie inside a run of ``n`` occurring more than once."""
    counts: dict[str, int] = {}
    for start in range(len(text) - n + 1):
        counts[text[start:start + n]] = counts.get(text[start:start + n], 0) + 1
    covered = [False] * len(text)
    for start in range(len(text) - n + 1):
        if counts[text[start:start + n]] > 1:
            covered[start:start + n] = [True] * n
    return sum(covered) / len(text) if text else 0.0


@click.command()
@click.argument("checkpoint")
@click.option("--no-repeat", "lengths", default="8,12,16,24", show_default=True,
              help="The values of N to try, comma-separated.")
@click.option("--prime", default="ROMEO:", show_default=True)
@click.option("--corpus", type=click.Path(exists=True, dir_okay=False),
              help="The training corpus, where the checkpoint's own path to it is not on this machine.")
def main(checkpoint: str, lengths: str, prime: str, corpus: str | None) -> None:
    path = checkpoint_in(checkpoint)
    loaded = load_model(path)
    if corpus is None:
        train_text = loaded.vocab.decode(checkpoint_split(loaded.payload.get("corpus"), loaded.vocab).train)
    else:
        train_text = Path(corpus).read_text(encoding="utf-8")[: loaded.payload["corpus"]["split_point"]]
    reference = Reference(train_text)
    model = charrnn.load(path)
    decodings = {"greedy": [{"greedy": True}], "beam 8": [{"beam_width": 8}],
                 "temperature 0.5": [{"temperature": 0.5, "seed": seed} for seed in SEEDS]}
    print(f"{path}: {LENGTH:,} characters after {prime!r}; loops = share of characters inside a repeated "
          f"{LOOP_RUN}-character run")
    print(f"{'decoding':<16} {'rule':<14} {'loops':>7} {'known words':>12} {'model nats/char':>16}")
    for name, settings in decodings.items():
        for rule in [None, *(int(value) for value in lengths.split(","))]:
            figures = []
            for options in settings:
                extra = {} if rule is None else {"no_repeat": rule}
                text = model.sample(prime, LENGTH, **options, **extra).text[len(prime):]
                scored = model.perplexity(prime + text).nats_per_char
                figures.append((looped_share(text), known_word_fraction(text, reference) or 0.0, scored))
            mean = [sum(column) / len(column) for column in zip(*figures, strict=True)]
            label = "none" if rule is None else f"--no-repeat {rule}"
            print(f"{name:<16} {label:<14} {mean[0]:>7.1%} {mean[1]:>12.1%} {mean[2]:>16.4f}")


if __name__ == "__main__":
    main()
