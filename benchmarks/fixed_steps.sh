#!/usr/bin/env bash
# Settings compared at a fixed number of steps rather than a wall time, so that the machine's speed, which
# drifts by a fifth from one run to the next on a shared machine, moves no score: each point trains the
# planned settings of a budget's shape for the steps that budget trains it on two AMD EPYC cores, with
# one option changed, and is scored by `eval-perplexity best.pt`. One run at a time, default threads.
# Appends one JSON line per run to benchmarks/fixed_steps/results.jsonl. The step counts are what two
# EPYC cores train in each budget; on another machine, time the budget first and change them.
# THREADS=1 runs each point on one thread and ONLY=NAME runs one point: such runs may go side by side
# (pinned with taskset) as learning curves, whose scores depend on the characters seen, never on the
# speed. Run from the repository root with its virtual environment active (bash 4 or later):
#
#   CHARRNN_DATA_MIRROR=file:///path/to/data bash benchmarks/fixed_steps.sh STAGE [SEED...]
set -eu
if [ $# -lt 1 ]; then
    echo "usage: bash benchmarks/fixed_steps.sh weight-decay-100|weight-decay-600|hour-1280|small-768 [SEED...]" >&2
    exit 2
fi
stage=$1
shift
seeds=${*:-1 2 3}
here=$(cd "$(dirname "$0")" && pwd)

declare -A POINTS
case $stage in
    weight-decay-100)  # the 100-s rung as its budget plans it, for the 2,200 steps (2.6 passes) of 100 s
        base="--hidden 256 --batch-size 24 --lr 6e-3 --skip-connections --dropout 0 --ema 0.9957 --max-steps 2200"
        POINTS=(
            [wd0]="$base --weight-decay 0"
            [wd0.05]="$base --weight-decay 0.05"
            [wd0.1]="$base --weight-decay 0.1"
            [wd0.2]="$base --weight-decay 0.2"
            [wd0.4]="$base --weight-decay 0.4"
            [min-lr-0]="$base --weight-decay 0 -o min_lr_ratio 0"
            [wd0.1-lr7e-3]="$base --weight-decay 0.1 --lr 7e-3"
            [wd0.1-ema0.998]="$base --weight-decay 0.1 --ema 0.998"
            [wd0.1-embed-dropout0.1]="$base --weight-decay 0.1 -o embed_dropout 0.1"
            [wd0.1-input-dropout0.1]="$base --weight-decay 0.1 -o input_dropout 0.1"
        ) ;;
    weight-decay-600)  # the 600-s choice, 2×768, for the 1,500 steps (2.4 passes) of 600 s
        base="--hidden 768 --batch-size 32 --lr 4e-3 --no-skip-connections --dropout 0 --ema 0.995 --max-steps 1500"
        POINTS=([wd0]="$base --weight-decay 0" [wd0.1]="$base --weight-decay 0.1") ;;
    hour-1280)  # the hour's 2×1280 in float32, for the 2,420 steps (3.86 passes) of 3600 s, its evaluations too
        base="--hidden 1280 --batch-size 32 --lr 3e-3 --no-skip-connections --ema 0.9961 --precision fp32
              --max-steps 2420 --eval-every 200 -o eval_chars 36962"
        POINTS=(
            [d0.1-wd0.1]="$base --dropout 0.1 --weight-decay 0.1"
            [d0.1-wd0.3]="$base --dropout 0.1 --weight-decay 0.3"
            [d0.3-wd0.1]="$base --dropout 0.3 --weight-decay 0.1"
            [d0.1-wd0.6]="$base --dropout 0.1 --weight-decay 0.6"
            [d0.1-wd1]="$base --dropout 0.1 --weight-decay 1.0"
        ) ;;
    small-768)  # tiny Shakespeare's first 100,000 characters: 300 s's plan, 2×768 for 13.5 passes of 90,000
        base="--hidden 768 --batch-size 32 --lr 4e-3 --no-skip-connections --dropout 0.3 --ema 0.995
              --max-steps 759 --epochs 14 --eval-every 76"
        first_chars=100000
        POINTS=(
            [wd0.1]="$base --weight-decay 0.1"
            [wd0.3]="$base --weight-decay 0.3"
            [wd1]="$base --weight-decay 1.0"
        ) ;;
    *) echo "unknown stage: $stage" >&2; exit 2 ;;
esac
if [ -n "${ONLY:-}" ] && [ -z "${POINTS[$ONLY]+set}" ]; then
    echo "ONLY=$ONLY is not a point of $stage: ${!POINTS[*]}" >&2
    exit 2
fi
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
corpus=()  # the built-in tiny Shakespeare, or its first characters as a corpus file of their own
if [ -n "${first_chars:-}" ]; then
    corpus=("$runs/first-$first_chars.txt")
    python - "$first_chars" "${corpus[0]}" <<'PY'
import sys
from pathlib import Path
from charrnn.data.datasets import DEFAULT_DATASET, fetch
count, target = int(sys.argv[1]), Path(sys.argv[2])
target.write_text(fetch(DEFAULT_DATASET).path.read_text(encoding="utf-8")[:count], encoding="utf-8")
PY
fi

for seed in $seeds; do
    for name in "${!POINTS[@]}"; do
        [ -n "${ONLY:-}" ] && [ "$name" != "$ONLY" ] && continue
        out="$runs/$name-$seed"
        # shellcheck disable=SC2086  # the options are words
        python -m charrnn train "${corpus[@]}" ${POINTS[$name]} ${THREADS:+--threads "$THREADS"} --seed "$seed" --out "$out" \
            > "$out.log"
        score=$(python -m charrnn eval-perplexity "$out/best.pt" --json)
        python - "$stage" "$name" "$seed" "${POINTS[$name]}" "$score" "${THREADS:-default}" \
            >> "$here/fixed_steps/results.jsonl" <<'PY'
import json, sys, time
stage, name, seed, options, score, threads = sys.argv[1:]
processor = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 "unknown")
print(json.dumps({"stage": stage, "name": name, "seed": int(seed), "options": options.split(),
                  "val_nats_per_char": round(json.loads(score)["nats_per_char"], 4), "processor": processor,
                  "threads": threads, "when": time.strftime("%Y-%m-%d %H:%M")}))
PY
    done
done
