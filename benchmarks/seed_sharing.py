"""Seeds of one dataset and N in one job (``probes.group: shots``) against one job per seed.

For each N, the script runs the whole tuned protocol for every seed twice on the same
generated features: once seed after seed (``imagenet_cog.probes.search.probe_dataset``, what one job
per seed does once the features are read), once all seeds together
(``imagenet_cog.probes.search.probe_seeds``: each round of the searches trains the next candidate
of every seed's study in one pass, the final fits share one pass). It prints, per N, the
wall time of each, the ratio, and the largest difference between the two in any seed's best
validation top-1, test top-1 and chosen learning rate: each seed's study is the sequential
search it would be alone, so these are zero unless a batched product changed a last bit
that a trial's score depends on.

With ``--jobs`` it also times what the workflow runs: the features written as float16 HDF5
files, then ``python -m imagenet_cog probe`` once per seed (``probes.group: seed``) against
once with every seed (``shots``), process start and file reads included
(``resident_probes.py`` times the resident job, ``probes.group: dataset``, too).

    .venv/bin/python benchmarks/seed_sharing.py                          # about 1 minute on 2 cores
    .venv/bin/python benchmarks/seed_sharing.py --device cuda --classes 1000 --dim 2048 --per-class 300 \\
        --shots 1 4 16 all --trials 30 --epochs 100
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
from probe_benchmark import add_problem_arguments, generated_problem, synchronise  # noqa: E402

from imagenet_cog.core.device import resolve_device  # noqa: E402
from imagenet_cog.probes.search import ProbeJob, SearchSettings, probe_dataset, probe_seeds  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[22, 37, 45, 1, 2])
    parser.add_argument("--shots", nargs="+", default=["1", "4", "16", "all"])
    add_problem_arguments(parser)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--jobs", action="store_true", help="also time the probe command: a job per seed vs one job")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device, "probes.device")

    data = generated_problem(args)
    settings = SearchSettings(trials=args.trials, epochs=args.epochs, batch_size=args.batch_size, precision=args.precision)
    print(f"{args.classes} classes x {args.per_class} training / {args.test_per_class} test samples, {args.dim} dimensions, "
          f"seeds {args.seeds}, {args.trials} trials x {args.epochs} epochs, batch {args.batch_size}, {device}, "
          f"{args.threads} thread(s)")
    print("| N | one seed at a time (s) | seeds together (s) | speed-up | max Δ val top-1 | max Δ test top-1 | max Δ log10 lr |")
    print("|---|---|---|---|---|---|---|")
    for shots in args.shots:
        with tempfile.TemporaryDirectory() as alone_folder, tempfile.TemporaryDirectory() as together_folder:
            synchronise(device)
            started = time.perf_counter()
            alone = [
                probe_dataset(ProbeJob(*data, settings=settings, device=str(device)), shots=shots, seed=seed, journal=f"{alone_folder}/{seed}.jsonl")
                for seed in args.seeds
            ]
            synchronise(device)
            alone_s = time.perf_counter() - started
            started = time.perf_counter()
            together = probe_seeds(ProbeJob(*data, settings=settings, device=str(device)), shots=shots, seeds=args.seeds, journals=[f"{together_folder}/{seed}.jsonl" for seed in args.seeds])
            synchronise(device)
            together_s = time.perf_counter() - started

        def largest_difference(field):
            return max(abs(field(a) - field(b)) for a, b in zip(alone, together))

        print(
            f"| {shots} | {alone_s:.2f} | {together_s:.2f} | {alone_s / together_s:.2f}x "
            f"| {largest_difference(lambda r: r['val_top1']):.2f} | {largest_difference(lambda r: r['test_top1']):.2f} "
            f"| {largest_difference(lambda r: np.log10(r['best_params']['lr'])):.3f} |",
            flush=True,
        )
    print("test top-1 per seed (together):", ", ".join(f"{r['seed']}: {r['test_top1']:.2f}" for r in together))
    if args.jobs:
        time_jobs(args, data, settings)


def time_jobs(args, data, settings: SearchSettings) -> None:
    """Wall time of the probe command: one process per seed, then one for all seeds."""
    import json
    import subprocess

    from imagenet_cog.features.store import write_shard

    print("\n| N | a job per seed (s) | one job, all seeds (s) | speed-up | results equal |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for split, (features, labels) in (("train", data[:2]), ("test", data[2:])):
            write_shard(f"{folder}/{split}.h5", features.astype(np.float16), labels, np.arange(labels.size),
                        [f"{split}{row}.jpg" for row in range(labels.size)], np.ones(labels.size, dtype=bool),
                        {"model": "generated", "random_weights": True, "feature_dim": features.shape[1]})
        for shots in args.shots:
            def command(mode: str, seeds: list[int]) -> list[str]:
                return [
                    sys.executable, "-m", "imagenet_cog", "probe", "--train", f"{folder}/train.h5",
                    "--test", f"{folder}/test.h5", "--model", "generated", "--dataset", "l1", "--shots", shots,
                    "--seed", *map(str, seeds), "--output", *(f"{folder}/{mode}-{shots}-{s}.json" for s in seeds),
                    "--study", *(f"{folder}/{mode}-{shots}-{s}.optuna.jsonl" for s in seeds),
                    "--trials", str(settings.trials), "--epochs", str(settings.epochs),
                    "--batch-size", str(settings.batch_size), "--device", args.device,
                    "--precision", settings.precision, "--threads", str(args.threads),
                ]

            started = time.perf_counter()
            for seed in args.seeds:
                subprocess.run(command("alone", [seed]), check=True, capture_output=True)
            alone_s = time.perf_counter() - started
            started = time.perf_counter()
            subprocess.run(command("together", args.seeds), check=True, capture_output=True)
            together_s = time.perf_counter() - started

            def scores(mode: str) -> list:
                return [json.loads(Path(f"{folder}/{mode}-{shots}-{s}.json").read_text())["test_top1"] for s in args.seeds]

            print(f"| {shots} | {alone_s:.2f} | {together_s:.2f} | {alone_s / together_s:.2f}x "
                  f"| {'yes' if scores('alone') == scores('together') else 'no'} |", flush=True)


if __name__ == "__main__":
    main()
