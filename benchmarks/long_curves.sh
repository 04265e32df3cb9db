#!/usr/bin/env bash
# Learning curves beyond the budget ladder, on a GPU: what the characters an hour of CPU training buys would
# score, for larger and more strongly regularised shapes than the ladder's. Each run stops after a fixed
# number of passes (--epochs), not a wall time, so its scores depend on the characters it saw, not on how
# fast the GPU is or on the other runs sharing it: all run at once. The passes per shape are what two
# AMD EPYC cores train in about an hour in bfloat16 (2×768: 5,100 characters/s; 2×1024: 2,000; 3×768
# about 3,400; 2×512: 10 minutes). Results: one JSON summary and metrics.jsonl per run, in OUT/curves.tgz;
# benchmarks/long_curves/results.jsonl records them.
#
#   CHARRNN_DATA_MIRROR=file:///path/to/data bash benchmarks/long_curves.sh OUT STAGE [SECONDS]
set -u
out=$1
stage=$2
seconds=${3:-400}
mkdir -p "$out"
runs=$(mktemp -d)
export PYTHONUNBUFFERED=1

declare -A POINTS
case $stage in
    beyond)  # longer and more strongly regularised than the ladder's top, and wider or deeper
        POINTS=(
            [h768-d0.15-e5]="--hidden 768 --lr 4e-3 --dropout 0.15 --ema 0.9968 --epochs 5"
            [h768-d0.3-e16]="--hidden 768 --lr 4e-3 --dropout 0.3 --ema 0.999 --epochs 16"
            [h768-d0.45-e16]="--hidden 768 --lr 4e-3 --dropout 0.45 --ema 0.999 --epochs 16"
            [h768-d0.3-wd0.25-e16]="--hidden 768 --lr 4e-3 --dropout 0.3 --weight-drop 0.25 --ema 0.999 --epochs 16"
            [h1024-d0.4-e7]="--hidden 1024 --lr 3e-3 --dropout 0.4 --ema 0.999 --epochs 7"
            [l3-h768-d0.35-e10]="--layers 3 --hidden 768 --lr 3e-3 --dropout 0.35 --ema 0.999 --epochs 10"
            [h512-d0.25-e7]="--hidden 512 --lr 5e-3 --dropout 0.25 --ema 0.998 --epochs 7"
        ) ;;
    wider)  # wider than the ladder's top at the passes that served it best
        POINTS=(
            [h1024-d0.15-e5]="--hidden 1024 --lr 3e-3 --dropout 0.15 --ema 0.9968 --epochs 5"
            [h1024-d0.25-e5]="--hidden 1024 --lr 3e-3 --dropout 0.25 --ema 0.9968 --epochs 5"
            [h1024-d0.35-e5]="--hidden 1024 --lr 3e-3 --dropout 0.35 --ema 0.9968 --epochs 5"
            [h1024-d0.25-lr4e-3-e5]="--hidden 1024 --lr 4e-3 --dropout 0.25 --ema 0.9968 --epochs 5"
            [h1280-d0.3-e4]="--hidden 1280 --lr 3e-3 --dropout 0.3 --ema 0.9968 --epochs 4"
            [h768-d0.2-e6]="--hidden 768 --lr 4e-3 --dropout 0.2 --ema 0.9968 --epochs 6"
            [h768-d0.15-e5-seed2]="--hidden 768 --lr 4e-3 --dropout 0.15 --ema 0.9968 --epochs 5 --seed 2"
            [l3-h768-d0.25-e6]="--layers 3 --hidden 768 --lr 3e-3 --dropout 0.25 --ema 0.9968 --epochs 6"
        ) ;;
    widest)  # the widest two-layer shapes two EPYC cores train for at least two passes in an hour
        POINTS=(
            [h1280-d0.2-e4]="--hidden 1280 --lr 3e-3 --dropout 0.2 --ema 0.9968 --epochs 4"
            [h1280-d0.4-e4]="--hidden 1280 --lr 3e-3 --dropout 0.4 --ema 0.9968 --epochs 4"
            [h1280-d0.3-lr2e-3-e4]="--hidden 1280 --lr 2e-3 --dropout 0.3 --ema 0.9968 --epochs 4"
            [h1536-d0.2-e3]="--hidden 1536 --lr 2.5e-3 --dropout 0.2 --ema 0.9968 --epochs 3"
            [h1536-d0.3-e3]="--hidden 1536 --lr 2.5e-3 --dropout 0.3 --ema 0.9968 --epochs 3"
            [h2048-d0.3-e1.7]="--hidden 2048 --lr 2e-3 --dropout 0.3 --ema 0.9968 --epochs 1.7"
            [h1024-d0.15-e5-seed2]="--hidden 1024 --lr 3e-3 --dropout 0.15 --ema 0.9968 --epochs 5 --seed 2"
            [h1280-d0.3-e4-seed2]="--hidden 1280 --lr 3e-3 --dropout 0.3 --ema 0.9968 --epochs 4 --seed 2"
        ) ;;
    *) echo "unknown stage $stage (beyond, wider, widest)"; exit 2 ;;
esac

python3 -m charrnn data get tinyshakespeare > "$out/data.log" 2>&1 || { cat "$out/data.log"; exit 1; }
for name in "${!POINTS[@]}"; do
    # shellcheck disable=SC2086  # the options are words
    timeout "$seconds" python3 -m charrnn train --seed 1 ${POINTS[$name]} --batch-size 32 --eval-every 1255 \
        --threads 1 --json --quiet --out "$runs/$name" > "$runs/$name.json" 2> "$runs/$name.err" &
done
wait
for name in "${!POINTS[@]}"; do
    echo "$name: $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(round(d['best']['nats_per_char'], 4), 'in', round(d['elapsed_s']), 's')" "$runs/$name.json" 2>/dev/null || echo unfinished)"
done | tee "$out/summary.txt"
tar czf "$out/curves.tgz" --exclude='*.pt' -C "$runs" .
