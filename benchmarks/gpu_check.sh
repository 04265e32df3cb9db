#!/usr/bin/env bash
# Every GPU check in one go, for a GPU machine lent for minutes: the whole suite (the CUDA tests too), the
# headline budget run at 180 s, benchmarks/gpu.py, then exercise 7.1's run for as long as it is given.
# Each step has its own time limit; every log lands in OUT as it is written, seven files in all. STEPS
# names the steps to run, in this order (default: all four).
#
#   CHARRNN_DATA_MIRROR=file:///path/to/data bash benchmarks/gpu_check.sh OUT [EXERCISE_SECONDS [SUITE_SECONDS]]
#   STEPS="suite budget" CHARRNN_DATA_MIRROR=... bash benchmarks/gpu_check.sh OUT
#
# Needs a python3 with a CUDA build of torch, click, tqdm, rich, pytest, pytest-xdist and pytest-timeout.
# On 15 workers of an H200's 16-core host the suite, training on the GPU, took over 175 s: the names of
# failing tests are written as they happen (-v), and a test that hangs fails after 150 s (the fault tests
# that fail every write in turn take over 60 s there), so a suite cut short still names them.
set -u
out=$1
exercise_seconds=${2:-110}
suite_seconds=${3:-300}
mkdir -p "$out"
runs=$(mktemp -d)
export PYTHONUNBUFFERED=1
steps=${STEPS:-suite budget benchmark exercise}
step() { echo "== $(date +%T) $*"; }
wanted() { [[ " $steps " == *" $1 "* ]]; }

step machine
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
  grep -m1 'model name' /proc/cpuinfo; echo "cores $(nproc)"
  python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3; } | tee "$out/machine.txt"

if wanted suite; then
step suite
timeout "$suite_seconds" python3 -m pytest -v -n 15 -p no:cacheprovider --timeout 150 -W ignore --tb=short \
    > "$out/suite.log" 2>&1
echo "suite exit $?"; grep -E "(FAILED|ERROR) tests/" "$out/suite.log" | sed 's/^\[gw[0-9]*\] *//' | sort -u
grep -cE "PASSED" "$out/suite.log" | sed 's/^/passed: /'
fi

if wanted budget; then
step budget
timeout 205 python3 -m charrnn train --time-budget 180 --seed 1 --out "$runs/budget" > "$out/budget.log" 2>&1
echo "budget exit $?"
python3 -m charrnn eval-perplexity "$runs/budget/best.pt" >> "$out/budget.log" 2>&1
python3 -m charrnn sample "$runs/budget/best.pt" --prime "ROMEO:" --length 300 --temperature 0.8 --seed 1 \
    >> "$out/budget.log" 2>&1
tail -30 "$out/budget.log"
fi

if wanted benchmark; then
step benchmark
timeout 80 python3 benchmarks/gpu.py > "$out/bench.log" 2>&1
echo "benchmark exit $?"; tail -18 "$out/bench.log"
fi

if wanted exercise; then
step exercise
timeout -s INT "$exercise_seconds" python3 -m charrnn train --layers 2 --hidden 128 --batch-size 50 --seq-len 50 \
    --lr 2e-3 --dropout 0 -o min_lr_ratio 1 --epochs 500 --save-epochs 5,50,500 --eval-every 1205 \
    --precision bf16 --out "$runs/exercise" > "$out/exercise.log" 2>&1
echo "exercise exit $?"; grep "saved epoch" "$out/exercise.log"; tail -3 "$out/exercise.log"
python3 -m charrnn compare "$runs"/exercise/epoch*.pt --prime "ROMEO:" --length 400 --temperature 0.8 --seed 1 \
    --markdown "$out/exercise.md" >> "$out/exercise.log" 2>&1
fi

tar czf "$out/runs.tgz" --exclude='*.pt' -C "$runs" .
step done
