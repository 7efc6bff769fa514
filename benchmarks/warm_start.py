"""Job starts, cold against warm (``warm_start``): the same probe jobs as new processes that
import torch each, then as forks of one warm-start server (imagenet_cog/warm_start.py).

Writes generated clustered features of a demo-sized dataset (``probe_benchmark``), then runs
``--jobs`` linear-probe jobs (``python -m imagenet_cog probe``, one N and seed each, as the
demo's level-set probes are) one after the other: cold, as jobs start without a server, then
warm, through a server started as a run's onstart starts it. It prints each way's seconds a
job, the ratio, the server's own start (its imports, paid once a run), and whether every
job's trials, chosen parameters and test top-1 are equal both ways.

    python benchmarks/warm_start.py                  # ~1 minute on 2 cores
    python benchmarks/warm_start.py --jobs 20 --classes 64 --dim 512 --epochs 100
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from probe_benchmark import add_problem_arguments
from resident_probes import write_features

from imagenet_cog.warm_start import SOCKET_VARIABLE, start_server, stop_server


def probe_job(folder: Path, run: str, seed: int, args) -> list[str]:
    return [
        "python", "-m", "imagenet_cog", "probe", "--train", str(folder / "train.h5"), "--test", str(folder / "test.h5"),
        "--model", "generated", "--dataset", "l1", "--shots", "all", "--seed", str(seed),
        "--output", f"{folder}/{run}.json", "--study", f"{folder}/{run}.optuna.jsonl",
        "--trials", str(args.trials), "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
        "--device", "cpu", "--threads", "1",
    ]


def run_jobs(folder: Path, way: str, args) -> tuple[float, list[tuple]]:
    """Seconds a job, and each job's outcome."""
    started = time.perf_counter()
    for job in range(args.jobs):
        subprocess.run(probe_job(folder, f"{way}-{job}", job, args), check=True, capture_output=True)
    seconds = (time.perf_counter() - started) / args.jobs
    outcomes = []
    for job in range(args.jobs):
        result = json.loads((folder / f"{way}-{job}.json").read_text())
        outcomes.append(([(t["lr"], t["weight_decay"], t["val_top1"]) for t in result["trials"]],
                         result["best_params"], result["test_top1"]))
    return seconds, outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=8)
    add_problem_arguments(parser, classes=16)
    parser.set_defaults(per_class=16, test_per_class=4, dim=64)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    # the jobs' `python` is this one, as a run's jobs find the venv's first on PATH
    os.environ["PATH"] = os.pathsep.join((os.path.dirname(sys.executable), os.environ["PATH"]))
    os.environ.pop(SOCKET_VARIABLE, None)
    print(f"{args.jobs} probe jobs: {args.classes} classes x {args.per_class} training images, {args.dim} dims, "
          f"{args.trials} trials x {args.epochs} epochs, 1 thread", flush=True)
    with tempfile.TemporaryDirectory(prefix="warm-start-") as name:
        folder = Path(name)
        write_features(folder, args)
        cold, cold_outcomes = run_jobs(folder, "cold", args)
        server = start_server(sys.executable, str(folder / "warm_start.log"), [])
        try:
            warm, warm_outcomes = run_jobs(folder, "warm", args)
        finally:
            stop_server(server, str(folder / "warm_start.log"))
        log = (folder / "warm_start.log").read_text()
    served = len(re.findall(r"^job \d+: probe$", log, re.M))
    imports = re.search(r"imported in ([\d.]+) s", log)
    print("| start | s a job | speed-up |")
    print("|---|---|---|")
    print(f"| cold (a new process importing torch) | {cold:.2f} | 1.00x |")
    print(f"| warm (a fork of the server) | {warm:.2f} | {cold / warm:.2f}x |")
    print(f"the server forked {served} of {args.jobs} jobs and imported its libraries once in "
          f"{imports[1] if imports else '?'} s; every job's trials, parameters and test top-1 equal both ways: "
          f"{'yes' if cold_outcomes == warm_outcomes else 'NO'}")


if __name__ == "__main__":
    main()
