"""Probe jobs grouped three ways (``probes.group``): a job per seed, per N, or one resident job.

Writes generated clustered features (``probe_benchmark.clustered_features``) as float16 HDF5
files like the workflow's, then runs ``python -m imagenet_cog probe`` for every N of
``--shots`` and every seed of ``--seeds`` as the workflow's jobs run it:

* ``seed``: one process per N and seed (``probes.group: seed``);
* ``shots``: one process per N running every seed (``probes.group: shots``);
* ``dataset``: one resident process running every N and seed (``probes.group: dataset``),
  the features read and prepared once.

It prints the wall time of each grouping (process starts, reads and all included), the
ratios, and whether every run's trials, chosen (lr, weight decay) and test top-1 are equal
across the three (each run keeps its own study, draws and result whatever the grouping).

    python benchmarks/resident_probes.py                       # ~2 minutes on 2 cores
    python benchmarks/resident_probes.py --classes 200 --dim 1024 --per-class 100 --spread 9 --threads 2
    python3 benchmarks/resident_probes.py --device cuda --classes 1000 --dim 2048 --per-class 300 --trials 5 --epochs 100
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from probe_benchmark import add_problem_arguments, generated_problem

from imagenet_cog.features.store import write_shard

GROUPS = ("seed", "shots", "dataset")


def write_features(folder: Path, args) -> None:
    train_x, train_y, test_x, test_y = generated_problem(args)
    for split, (features, chosen_labels) in (("train", (train_x, train_y)), ("test", (test_x, test_y))):
        chosen = features.astype(np.float16)
        write_shard(folder / f"{split}.h5", chosen, chosen_labels, np.arange(chosen_labels.size),
                    [f"{split}{row}.jpg" for row in range(chosen_labels.size)], np.ones(chosen_labels.size, dtype=bool),
                    {"model": "generated", "random_weights": True, "feature_dim": args.dim})


def jobs(group: str, shots: list[str], seeds: list[int]) -> list[tuple[list[str], list[int]]]:
    """The (shots, seeds) of each job of a grouping."""
    if group == "seed":
        return [([n], [seed]) for n in shots for seed in seeds]
    if group == "shots":
        return [([n], seeds) for n in shots]
    return [(shots, seeds)]


def command(folder: Path, group: str, shots: list[str], seeds: list[int], args) -> list[str]:
    runs = [f"{folder}/{group}-{n}-{seed}" for n in shots for seed in seeds]
    return [
        sys.executable, "-m", "imagenet_cog", "probe", "--train", str(folder / "train.h5"), "--test", str(folder / "test.h5"),
        "--model", "generated", "--dataset", "l1", "--shots", *shots, "--seed", *map(str, seeds),
        "--output", *(f"{run}.json" for run in runs), "--study", *(f"{run}.optuna.jsonl" for run in runs),
        "--trials", str(args.trials), "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
        "--device", args.device, "--precision", args.precision, "--threads", str(args.threads), "--fused", args.fused,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[22, 37, 45])
    parser.add_argument("--shots", nargs="+", default=["1", "4", "16", "all"])
    add_problem_arguments(parser)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--fused", default="auto", choices=["auto", "on", "off"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    print(f"{args.classes} classes x {args.per_class} training / {args.test_per_class} test samples, {args.dim} dims, "
          f"N {' '.join(args.shots)}, seeds {args.seeds}, {args.trials} trials x {args.epochs} epochs, batch "
          f"{args.batch_size}, {args.device}, {args.threads} thread(s)", flush=True)
    seconds, results = {}, {}
    with tempfile.TemporaryDirectory(prefix="resident-") as name:
        folder = Path(name)
        write_features(folder, args)
        for group in GROUPS:
            started = time.perf_counter()
            for shots, seeds in jobs(group, args.shots, args.seeds):
                subprocess.run(command(folder, group, shots, seeds, args), check=True, capture_output=True)
            seconds[group] = time.perf_counter() - started
            results[group] = [json.loads(Path(f"{folder}/{group}-{n}-{seed}.json").read_text())
                              for n in args.shots for seed in args.seeds]

    def comparable(result: dict) -> tuple:
        return ([(t["lr"], t["weight_decay"], t["val_top1"]) for t in result["trials"]], result["best_params"],
                result["test_top1"], result["test_top5"])

    equal = all(comparable(a) == comparable(b) == comparable(c) for a, b, c in zip(*results.values()))
    print("| grouping | jobs | wall s | speed-up vs a job per seed |")
    print("|---|---|---|---|")
    for group in GROUPS:
        print(f"| {group} | {len(jobs(group, args.shots, args.seeds))} | {seconds[group]:.1f} | "
              f"{seconds['seed'] / seconds[group]:.2f}x |")
    resident = results["dataset"][0]["resident_job"]
    print(f"every run's trials, parameters and test scores equal across the groupings: {'yes' if equal else 'NO'}; "
          f"the resident job read and prepared its features in {resident['load_s']:.2f} s; probe step: "
          f"{results['dataset'][0]['probe_step']}")


if __name__ == "__main__":
    main()
