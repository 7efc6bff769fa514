#!/usr/bin/env bash
# The GPU measurements of benchmarks/README.md in one go, each under its own time limit
# (their limits add up to 14 minutes on an H100). Run from the repository root on a GPU node whose
# python3 has torch, torchvision, h5py, numpy, PyYAML and faiss-cpu (Optuna optional):
#
#     OUT=/some/folder bash benchmarks/gpu_suite.sh
#
# Everything is written under "$OUT": one log per benchmark, summary.txt (exit status and
# seconds of each), environment.txt, rates.json, and gpu_suite.md, the figures as the
# "GPU suite" section of benchmarks/README.md; `python3 benchmarks/record_gpu_suite.py "$OUT"
# --readme benchmarks/README.md` puts that section into the README (RECORD=1 does it here).
# DEVICE=cpu SIZE=tiny runs the same commands at tiny sizes on a CPU (tests/test_gpu_suite.py),
# with limits ten times as long (a shared CPU compiles and starts processes slowly).
# WHEELS=folder installs Optuna and TorchCodec from local wheels first where python3 lacks them
# (a GPU node without a package index: `pip download --no-deps optuna torchcodec==0.17.0 -d
# folder` where there is one, and carry the folder); without TorchCodec the device decode
# path decodes on the host and says so (features_device then reports every image decoded on
# the host). Nothing here needs Snakemake.
set -u
: "${OUT:?set OUT to the folder that receives the results}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/workflow:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-full}

for package in optuna torchcodec; do
    if [ -n "${WHEELS:-}" ] && ! "$PYTHON" -c "import $package" 2>/dev/null; then
        "$PYTHON" -m pip install --quiet --no-index --no-deps --find-links "$WHEELS" --target "$OUT/site" "$package" \
            > "$OUT/$package-install.log" 2>&1
    fi
done
[ -d "$OUT/site" ] && export PYTHONPATH="$PYTHONPATH:$OUT/site"

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
    nproc
    "$PYTHON" -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'cuda', torch.version.cuda)"
    "$PYTHON" -c "import optuna; print('optuna', optuna.__version__)" 2>&1 | tail -1
    "$PYTHON" -c "import torchcodec; print('torchcodec', torchcodec.__version__)" 2>&1 | tail -1
    echo "DEVICE=$DEVICE SIZE=$SIZE"
} > "$OUT/environment.txt" 2>&1
: > "$OUT/summary.txt"

run() {  # run NAME SECONDS COMMAND...: log to $OUT/NAME.log, note the status and seconds
    local name=$1 limit=$(($2 * LIMIT_SCALE))
    shift 2
    local started=$SECONDS
    timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
    local status=$?
    echo "$name: exit $status after $((SECONDS - started)) s (limit $limit s)" | tee -a "$OUT/summary.txt"
}

# The paper's protocol with the resident job and the fused step (the device default), for
# the projection; trials_per_batch 1 as the paper's sequential search.
printf 'probes:\n  group: dataset\n  fused: auto\nfeatures:\n  group: split\n' > "$OUT/h100-config.yaml"

LIMIT_SCALE=1
if [ "$SIZE" = tiny ]; then
    LIMIT_SCALE=10
    PROBE_SHAPE=(--classes 20 --dim 32 --per-class 8 --test-per-class 2 --batch-size 64)
    FUSED=("${PROBE_SHAPE[@]}" --epochs 2 --repeats 1)
    FULL=(--classes 10 --per-class 20 --test-per-class 5 --dim 16 --epochs 2 --trials 2)
    IMAGES=(--arch demo_cnn --images 8 --distinct 8 --num-workers 1 --batch-size 4)
    LOADER=(--images 8 --distinct 8 --num-workers 1 --batch-size 4)
    RESIZE=(--batch-size 4 --batches 1 --repeats 1)
    KMEANS=(--rows 2000 --dim 16 --concepts 10 --iterations 3 --compare-rows 2000 --compare-iterations 2 --uniformity-rows 500)
    RESIDENT=(--classes 10 --per-class 20 --test-per-class 5 --dim 16 --trials 2 --epochs 2 --shots 1 all --seeds 22)
    COST=(--quick --models demo_cnn)
    KNN=(--train 2000 --test 200 --dim 16 --classes 10)
    FINETUNE=(--arch demo_cnn --images 16 --batch-size 4 --num-workers 1)
else
    PROBE_SHAPE=(--classes 1000 --dim 2048 --batch-size 1024)
    FUSED=("${PROBE_SHAPE[@]}" --per-class 200 --epochs 2)
    FULL=(--trials 3)
    # 40,000 rows over 2,048 files: ~60 s of steady state at ~700 images/s, the fixed seconds
    # (model, CUDA, workers, first batch, write) under 5% of the run
    IMAGES=(--images 40000 --distinct 2048 --num-workers 14 --batch-size 256 --baseline-images 4096)
    LOADER=(--images 20000 --distinct 2048 --num-workers 14 --batch-size 256)
    RESIZE=(--batch-size 256 --batches 4)
    KMEANS=(--rows 1100000 --dim 2048 --concepts 1000 --iterations 10 --compare-rows 100000 --compare-iterations 3 --uniformity-rows 50000 --threads 16)
    RESIDENT=(--classes 1000 --dim 2048 --per-class 100 --trials 2 --epochs 20 --shots 1 16 all --seeds 22 37 45)
    COST=()
    KNN=(--train 1281167 --test 50000 --dim 2048 --classes 1000)
    FINETUNE=(--images 2048 --batch-size 256 --num-workers 14)
fi

# The fused step against the reference at the protocol's shape: time per step, TFLOP/s and
# GB/s against the device's measured matmul rate and copy bandwidth; one probe per step,
# then the five seeds of a resident job's pass.
run fused_step 60 "$PYTHON" benchmarks/fused_step.py --device "$DEVICE" "${FUSED[@]}"
run fused_step_seeds 45 "$PYTHON" benchmarks/fused_step.py --device "$DEVICE" "${FUSED[@]}" --runs 5
# One (dataset, seed) of the tuned protocol at IN-1K size (1000 x 1100 x 2048, 100 epochs,
# final fit), 3 of its 30 trials: the direct check of the projection's probe terms.
run probe_full 70 "$PYTHON" benchmarks/probe_benchmark.py --device "$DEVICE" --full "${FULL[@]}"
# Extraction of generated JPEGs (ResNet50), fixed seconds apart from the steady rate: the
# reference-style loop against ours (host decode), then ours with the device decode and the
# batched resize; the loaders alone (both host resizes, per worker); the resize alone.
run features_host 150 "$PYTHON" benchmarks/features_benchmark.py --device "$DEVICE" --decode host "${IMAGES[@]}"
run features_device 120 "$PYTHON" benchmarks/features_benchmark.py --device "$DEVICE" --decode device "${IMAGES[@]}" --skip-baseline
run features_loader 60 "$PYTHON" benchmarks/features_benchmark.py --loader-only "${LOADER[@]}"
run batched_resize 20 "$PYTHON" benchmarks/batched_resize.py --device "$DEVICE" "${RESIZE[@]}"
# Fine-tuning (ResNet50): an epoch of generated JPEGs, the torchvision reference's loop against
# ours, and our step alone: the fine-tuning rate the plan projects (finetune_images_per_s).
run finetune 40 "$PYTHON" benchmarks/finetune_benchmark.py --device "$DEVICE" "${FINETUNE[@]}"
# k-means of a level's size with torch on the GPU (no faiss-gpu), and against faiss-cpu from
# the same start on 100k rows.
run kmeans 75 "$PYTHON" benchmarks/kmeans_benchmark.py --device "$DEVICE" --skip-sklearn "${KMEANS[@]}"
# The k-NN probe of IN-1K's size (1,281,167 x 50,000 x 2048, every k of DINO's in one pass);
# its scikit-learn baseline is a CPU measurement (benchmarks/README.md).
run knn 60 "$PYTHON" benchmarks/knn_probe.py --device "$DEVICE" --skip-sklearn "${KNN[@]}"
# Probe jobs grouped per seed, per N and as one resident job (process starts and reads included).
run resident 45 "$PYTHON" benchmarks/resident_probes.py --device "$DEVICE" "${RESIDENT[@]}"
# Every rate of the cost model on this device, and the projected protocol with those rates.
if [ "$DEVICE" = cuda ]; then
    run protocol_cost 100 "$PYTHON" benchmarks/protocol_cost.py --device cuda --skip-host --config "$OUT/h100-config.yaml" \
        --write-rates "$OUT/rates.json" "${COST[@]}"
else
    run protocol_cost 100 "$PYTHON" benchmarks/protocol_cost.py --config "$OUT/h100-config.yaml" \
        --write-rates "$OUT/rates.json" "${COST[@]}"
fi

"$PYTHON" benchmarks/record_gpu_suite.py "$OUT" ${RECORD:+--readme benchmarks/README.md}
