#!/usr/bin/env bash
# Learning curves beyond the budget ladder's 2×768, on a GPU: what the characters an hour of CPU training
# buys would score, for wider, deeper and more strongly regularised shapes. Each run stops after a fixed
# number of passes (--epochs), not a wall time, so its scores depend on the characters it saw, not on how
# fast the GPU is or on the other runs sharing it: all of a stage run at once (start MPS first, or they
# take turns). The passes per shape are about what two AMD EPYC cores train in an hour (2×768 at 5,100
# characters/s in bfloat16; in float32, 2×1024 at 1,800 to 1,900, 2×1280 at 1,200, 2×1536 at 720; 2×512:
# ten minutes). Writes OUT/summary.txt, OUT/results.jsonl (one line per run, every evaluation; appended to
# benchmarks/long_curves/results.jsonl) and OUT/curves.tgz (each run's JSON summary and metrics.jsonl).
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
    past-five)  # a GPU's 180 s on tiny Shakespeare: the widest and a deeper shape past the pass limit, with
        # more dropout for more passes (kept in past_five.jsonl, apart from the rule's fit)
        POINTS=(
            [h2048-d0.3-e5]="--hidden 2048 --lr 2e-3 --dropout 0.3 --ema 0.9968 --epochs 5"
            [h2048-d0.4-e9]="--hidden 2048 --lr 2e-3 --dropout 0.4 --ema 0.9982 --epochs 9"
            [h2048-d0.5-e13]="--hidden 2048 --lr 2e-3 --dropout 0.5 --ema 0.9988 --epochs 13"
            [l3-h1536-d0.35-e7]="--layers 3 --hidden 1536 --lr 2.5e-3 --dropout 0.35 --ema 0.9977 --epochs 7"
        ) ;;
    *) echo "unknown stage $stage (beyond, wider, widest, past-five)"; exit 2 ;;
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
python3 - "$runs" "$stage" "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" \
    > "$out/results.jsonl" <<'PYTHON'
import json, pathlib, sys

runs, stage, device = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
for summary_path in sorted(runs.glob("*.json")):
    try:
        summary = json.loads(summary_path.read_text())
    except ValueError:  # stopped by the time limit before its summary
        continue
    model, training = summary["model"], summary["training"]
    evaluations = [{"epoch": round(row["epoch"], 2), "val_loss": round(row["val_loss"], 4),
                    "averaged_val_loss": round(row["averaged_val_loss"], 4)}
                   for row in map(json.loads, (runs / summary_path.stem / "metrics.jsonl").open())
                   if "val_loss" in row]
    print(json.dumps({
        "stage": stage, "name": summary_path.stem, "layers": model["num_layers"], "hidden": model["hidden_size"],
        "dropout": model["dropout"], "weight_drop": model["weight_drop"], "batch_size": training["batch_size"],
        "learning_rate": training["learning_rate"], "ema_decay": training["ema_decay"],
        "epochs": training["epochs"], "seed": training["seed"],
        "best_nats_per_char": round(summary["best"]["nats_per_char"], 4), "evaluations": evaluations,
        "device": f"{device}, float32 (TF32)"}))
PYTHON
tar czf "$out/curves.tgz" --exclude='*.pt' -C "$runs" .
