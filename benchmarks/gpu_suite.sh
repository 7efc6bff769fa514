#!/usr/bin/env bash
# The GPU measurements of benchmarks/README.md in one go, each under its own time limit
# (under 10 minutes in all). Run from the repository root on a GPU node whose
# python3 has torch, torchvision, h5py, numpy and PyYAML (timm brings the last two):
#
#     OUT=/some/folder bash benchmarks/gpu_suite.sh
#
# Everything is written under "$OUT" (one log per benchmark, rates.json, environment.txt).
# Optuna is optional: without it probe_benchmark --full draws its 30 candidates
# log-uniformly instead of by TPE (same work, same time). WHEELS=folder installs Optuna
# from local wheels first when python3 lacks it. Nothing here needs Snakemake.
set -u
: "${OUT:?set OUT to the folder that receives the results}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/workflow${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-python3}

if [ -n "${WHEELS:-}" ] && ! "$PYTHON" -c "import optuna" 2>/dev/null; then
    "$PYTHON" -m pip install --quiet --no-index --find-links "$WHEELS" --target "$OUT/site" optuna \
        > "$OUT/optuna-install.log" 2>&1 && export PYTHONPATH="$PYTHONPATH:$OUT/site"
fi

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
    nproc
    "$PYTHON" -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'cuda', torch.version.cuda)"
    "$PYTHON" -c "import optuna; print('optuna', optuna.__version__)" 2>&1 | tail -1
} > "$OUT/environment.txt" 2>&1

run() {  # run NAME SECONDS COMMAND...: log to $OUT/NAME.log, note the status and seconds
    local name=$1 limit=$2
    shift 2
    local started=$SECONDS
    timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
    local status=$?
    echo "$name: exit $status after $((SECONDS - started)) s (limit $limit s)" | tee -a "$OUT/summary.txt"
}

# The tuned protocol at IN-1K size (1000 x 1100 x 2048, 100 epochs, final fit) with 10 of its
# 30 trials: all 30 took 326 s on an H100 (benchmarks/README.md), too long for this suite.
run probe_full 170 "$PYTHON" benchmarks/probe_benchmark.py --device cuda --full --trials 10
# Extraction of 2048 generated JPEGs, ResNet50: reference-style loop against ours (host decode),
# then ours with the device decode.
run features_host 90 "$PYTHON" benchmarks/features_benchmark.py --device cuda --decode host \
    --images 2048 --num-workers 8 --batch-size 256
run features_device 70 "$PYTHON" benchmarks/features_benchmark.py --device cuda --decode device \
    --images 2048 --num-workers 8 --batch-size 256 --skip-baseline
# Five seeds of one dataset and N trained together against one at a time (needs Optuna).
run seed_sharing 100 "$PYTHON" benchmarks/seed_sharing.py --device cuda --classes 1000 --dim 2048 \
    --per-class 100 --trials 5 --epochs 100 --shots 1 16 all
# Rates of every stage on this GPU and on this node's CPU, and the projected protocol.
run protocol_cost 150 "$PYTHON" benchmarks/protocol_cost.py --device cuda --write-rates "$OUT/rates.json"

grep -h -v " INFO \| WARNING " "$OUT"/probe_full.log "$OUT"/features_*.log "$OUT"/seed_sharing.log "$OUT"/protocol_cost.log \
    > "$OUT/results.txt" 2>/dev/null

