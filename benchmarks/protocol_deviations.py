"""Opt-in protocol deviations against the paper's protocol: accuracy and cost of each.

Runs the tuned protocol (``imagenet_cog.probes.search.probe_dataset``: validation split, Optuna
search, final fit, test score) per seed twice on the same data: the paper's (every trial
at full length) and the two-stage search (``probes.two_stage``: every trial at
``--short-epochs``, the ``--finalists`` best again at full length, the best of those
chosen). Prints per seed the test and validation top-1 of both, the epochs each trained
(search and final fit) and the wall time, then the mean paired difference (deviation minus
paper, with its standard deviation over seeds) and the ratio of epochs.

Data: generated clustered features (``probe_benchmark.clustered_features``, the default:
the benchmark problem of benchmarks/README.md's search figures), or feature files of a run
(``--features results/features/<model>/<dataset>``, several allowed: every dataset of the
demo, for instance), whose probes then use ``--config``'s probe settings.

    python benchmarks/protocol_deviations.py                                  # ~2 minutes
    python benchmarks/protocol_deviations.py --config config.yaml --short-epochs 8 --finalists 2 \\
        --features results/features/demo_cnn/l1 results/features/demo_cnn/l5    # the demo's features
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import yaml
from probe_benchmark import add_problem_arguments, generated_problem

from imagenet_cog.features.store import read_features
from imagenet_cog.probes.search import ProbeJob, SearchSettings, probe_dataset


def problems(args) -> list[tuple[str, tuple]]:
    """(name, (train features, train labels, test features, test labels)) of each problem."""
    if args.features:
        loaded = []
        for folder in args.features:
            train, test = read_features(Path(folder) / "train.h5"), read_features(Path(folder) / "test.h5")
            loaded.append((str(folder), (train.features, train.labels, test.features, test.labels)))
        return loaded
    return [("generated", generated_problem(args))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", nargs="+", help="folders holding train.h5 and test.h5 (default: generated)")
    parser.add_argument("--config", type=Path, help="a workflow config whose probes settings to use")
    add_problem_arguments(parser, classes=50)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--short-epochs", type=int, default=10)
    parser.add_argument("--finalists", type=int, default=3)
    parser.add_argument("--shots", default="all")
    parser.add_argument("--seeds", type=int, nargs="+", default=[22, 37, 45, 77, 93])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    settings = SearchSettings(trials=args.trials, epochs=args.epochs, batch_size=args.batch_size)
    if args.config:
        probes = (yaml.safe_load(args.config.read_text()) or {}).get("probes", {})
        settings = replace(settings, **{key: probes[key] for key in ("trials", "epochs", "batch_size") if key in probes})
    deviation = replace(settings, two_stage=(args.short_epochs, args.finalists))
    print(f"paper: {settings.trials} trials x {settings.epochs} epochs; two-stage: {settings.trials} trials x "
          f"{args.short_epochs} epochs, then {args.finalists} x {settings.epochs}; batch {settings.batch_size}, "
          f"N = {args.shots}, seeds {args.seeds}, {args.threads} thread(s)", flush=True)
    for name, data in problems(args):
        rows = []
        with tempfile.TemporaryDirectory(prefix="deviations-") as folder:
            for seed in args.seeds:
                measured = []
                for label, chosen in (("paper", settings), ("two_stage", deviation)):
                    started = time.perf_counter()
                    result = probe_dataset(ProbeJob(*data, settings=chosen, device="cpu"), shots=args.shots, seed=seed, journal=f"{folder}/{label}-{seed}.jsonl")
                    measured.append((result, time.perf_counter() - started))
                rows.append((seed, *measured))
        paper_epochs = settings.trials * settings.epochs + settings.epochs
        two_stage_epochs = settings.trials * args.short_epochs + args.finalists * settings.epochs + settings.epochs
        print(f"\n{name}: {data[0].shape[0]} training rows, {len(np.unique(data[1]))} classes, {data[0].shape[1]} dims")
        print("| seed | paper test / val top-1 | two-stage test / val top-1 | paper s | two-stage s |")
        print("|---|---|---|---|---|")
        for seed, (paper, paper_s), (two_stage, two_stage_s) in rows:
            print(f"| {seed} | {paper['test_top1']:.2f} / {paper['val_top1']:.2f} | {two_stage['test_top1']:.2f} / "
                  f"{two_stage['val_top1']:.2f} | {paper_s:.1f} | {two_stage_s:.1f} |")
        test = np.array([two_stage["test_top1"] - paper["test_top1"] for _, (paper, _), (two_stage, _) in rows])
        print(f"two-stage minus paper, test top-1: {test.mean():+.2f} +- {test.std(ddof=1) if test.size > 1 else 0:.2f} "
              f"points (mean +- std over {test.size} seeds); epochs trained {two_stage_epochs} against {paper_epochs} "
              f"({paper_epochs / two_stage_epochs:.1f}x fewer); wall: two-stage {sum(r[2][1] for r in rows):.1f} s, "
              f"paper {sum(r[1][1] for r in rows):.1f} s")


if __name__ == "__main__":
    main()
