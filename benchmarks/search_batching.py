"""Does training several search candidates together (``probes.trials_per_batch``) change what the search finds?

With ``trials_per_batch`` k > 1 the probe search asks Optuna's TPE sampler for k (lr, weight
decay) candidates at once (``study.ask()`` k times before any ``tell``) and trains them in one
batched pass; k = 1 is the paper's sequential search, where every proposal sees all earlier
results. This script runs the whole tuned protocol (``imagenet_cog.probes.search.probe_dataset``: the
validation split, the trials, the final fit on the full training set, the test score) on
generated clustered features for each k and each seed, and prints per k the mean and standard
deviation over seeds of the best validation top-1, the final test top-1 and the wall time,
and the per-seed (paired) differences against k = 1. Each seed generates its own features
(``probe_benchmark.clustered_features``) and seeds the search with the same number, so the
runs of one seed differ only in k.

    .venv/bin/python benchmarks/search_batching.py              # about 1-2 minutes on 2 cores
    .venv/bin/python benchmarks/search_batching.py --ks 1 5 10 --epochs 100
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_benchmark import clustered_features  # noqa: E402

from imagenet_cog.probes.search import ProbeJob, SearchSettings, probe_dataset  # noqa: E402


def problem(args, seed: int):
    """Train and test features (numpy, float32) and labels of one seed's clustered problem."""
    per_class = args.per_class + args.test_per_class
    features, labels = clustered_features(args.classes, per_class, args.dim, seed, args.spread)
    is_test = (torch.arange(labels.numel()) % per_class) >= args.per_class
    return (
        features[~is_test].numpy(), labels[~is_test].numpy(),
        features[is_test].numpy(), labels[is_test].numpy(),
    )


def run(args, data, seed: int, k: int) -> dict:
    settings = SearchSettings(
        trials=args.trials, epochs=args.epochs, batch_size=args.batch_size, trials_per_batch=k
    )
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        result = probe_dataset(ProbeJob(*data, settings=settings, device="cpu"), shots="all", seed=seed, journal=f"{folder}/study.jsonl")
        wall = time.perf_counter() - started
    lrs = np.log10([t["lr"] for t in result["trials"]])
    return {
        "val": result["val_top1"],
        "test": result["test_top1"],
        "wall": wall,
        "lr": result["best_params"]["lr"],
        "wd": result["best_params"]["weight_decay"],
        # how many of the trials came within 1 point of the best validation top-1
        "near_best": sum(t["val_top1"] >= result["val_top1"] - 1.0 for t in result["trials"]),
        "lr_spread": float(lrs.std()),
    }


def mean_std(values) -> str:
    values = np.asarray(values, dtype=float)
    return f"{values.mean():6.2f} ± {values.std(ddof=1) if values.size > 1 else 0.0:5.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 5, 10], help="trials_per_batch values; the first is the reference")
    parser.add_argument("--seeds", type=int, nargs="+", default=[22, 37, 45])
    parser.add_argument("--classes", type=int, default=50)
    parser.add_argument("--per-class", type=int, default=60, help="training samples per class (20%% of them validate)")
    parser.add_argument("--test-per-class", type=int, default=20)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--spread", type=float, default=5.0,
                        help="per-dimension cluster noise (centres are standard normal); 5 gives ~60%% top-1")
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1, help="one thread measures steadily on a shared machine")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    results: dict[int, list[dict]] = {k: [] for k in args.ks}
    for seed in args.seeds:
        data = problem(args, seed)
        for k in args.ks:
            row = run(args, data, seed, k)
            results[k].append(row)
            print(f"seed {seed} k={k:2d}: best val {row['val']:6.2f}%  test {row['test']:6.2f}%  "
                  f"lr {row['lr']:8.3g}  wd {row['wd']:8.2g}  trials within 1 pt of best {row['near_best']:2d}  "
                  f"sd(log10 lr) {row['lr_spread']:.2f}  {row['wall']:6.2f} s", flush=True)

    print(f"\nproblem: {args.classes} classes x {args.per_class} train / {args.test_per_class} test, {args.dim} dims, "
          f"spread {args.spread}; {args.trials} trials of {args.epochs} epochs, batch {args.batch_size}, "
          f"{args.threads} thread(s); seeds {args.seeds}; mean ± std over seeds, differences paired by seed")
    reference = results[args.ks[0]]
    print(f"{'k':>3} | {'best val top-1':>15} | {'test top-1':>15} | {'wall s':>15} | "
          f"{'Δval vs k=' + str(args.ks[0]):>15} | {'Δtest':>15} | {'wall ratio':>10}")
    for k in args.ks:
        rows = results[k]
        d_val = [r["val"] - q["val"] for r, q in zip(rows, reference)]
        d_test = [r["test"] - q["test"] for r, q in zip(rows, reference)]
        ratio = sum(r["wall"] for r in rows) / sum(q["wall"] for q in reference)
        print(f"{k:>3} | {mean_std([r['val'] for r in rows]):>15} | {mean_std([r['test'] for r in rows]):>15} | "
              f"{mean_std([r['wall'] for r in rows]):>15} | {mean_std(d_val):>15} | {mean_std(d_test):>15} | "
              f"{ratio:>9.2f}x")


if __name__ == "__main__":
    main()
