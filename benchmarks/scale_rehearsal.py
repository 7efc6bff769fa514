"""The scale rehearsal's steps that need no GPU and no model (docs/scale.md), each
timed, with its peak memory, on a run's split tables at the paper's size:

* ``features``: one model's features written at the split tables' full row counts (random
  values: one random block of a shard's size, reused; ``--width`` may be below the model's to
  fit a disk, and the table says so) through the project's shard writer
  (``features.store.write_shard``, the shards ``extract``/``extract-split`` write), then each
  split's shards merged into its virtual datasets by the command the rules run
  (``merge-shards``), under ``/usr/bin/time``;
* ``results``: result JSONs fabricated for every model, dataset, N and seed of a config (the
  31 paper models' full grid with ``config/paper_models.yaml``), in the layout and format the
  probe jobs write, for the results stage to run on.

    python benchmarks/scale_rehearsal.py features --results /tmp/reh/results --model resnet50
    python benchmarks/scale_rehearsal.py results --results /tmp/reh/results \\
        --configfile config/imagenet.yaml config/paper_models.yaml
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY / "workflow"))

from imagenet_cog.core.io import write_json  # noqa: E402
from imagenet_cog.core.layout import Layout  # noqa: E402
from imagenet_cog.core.naming import LINEAR  # noqa: E402
from imagenet_cog.features.extract import shard_rows, split_rows  # noqa: E402
from imagenet_cog.features.store import code_version, write_shard  # noqa: E402


def timed(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak resident memory (MB) of a command, from GNU time."""
    result = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", result.stderr).group(1)
    seconds = sum(float(part) * 60 ** power for power, part in enumerate(reversed(wall.split(":"))))
    peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr).group(1)) // 1024
    return seconds, peak


def write_split_features(layout: Layout, model: str, dataset: str, split: str, block: np.ndarray,
                         attributes: dict) -> tuple[int, int, float]:
    """One split's shards at its full row count; (rows, shards, seconds)."""
    started = time.perf_counter()
    table = layout.image_splits(dataset)
    selected = split_rows(table, split)
    shard_size = len(block)
    shards = max(1, -(-len(selected) // shard_size))
    for shard in range(shards):
        rows = shard_rows(table, split, shard, shard_size, selected)
        write_shard(layout.feature_shard(model, dataset, split, str(shard)), block[:len(rows.paths)], rows.labels,
                    rows.index, rows.paths, np.ones(len(rows.paths), dtype=bool),
                    {**attributes, "dataset": dataset, "split": split, "shard": shard, "shard_size": shard_size})
    return len(selected), shards, time.perf_counter() - started


def features_command(args: argparse.Namespace) -> None:
    layout = Layout(str(args.results))
    block = np.random.default_rng(0).standard_normal((args.shard_size, args.width), dtype=np.float32).astype(args.dtype)
    attributes = {"model": args.model, "arch": args.model, "weights": "scale-rehearsal (random values)",
                  "random_weights": False, "preprocessing": "{}", "feature_dim": args.width,
                  "features_dtype": args.dtype, "code_version": code_version()}
    print("dataset\tsplit\trows\tshards\twrite_s\tmerge_s\tmerge_peak_mb", flush=True)
    for dataset in args.datasets:
        for split in ("train", "test"):
            rows, shards, written = write_split_features(layout, args.model, dataset, split, block, attributes)
            paths = [layout.feature_shard(args.model, dataset, split, str(shard)) for shard in range(shards)]
            seconds, peak = timed([sys.executable, "-m", "imagenet_cog", "merge-shards", "--output",
                                   layout.features(args.model, dataset, split), *paths])
            print(f"{dataset}\t{split}\t{rows}\t{shards}\t{written:.1f}\t{seconds:.1f}\t{peak}", flush=True)


def result_json(model: str, dataset: str, shots: str, seed: int, rng: np.random.Generator) -> dict:
    """A linear probe's result as the probe command writes it, with fabricated scores."""
    top1 = float(rng.uniform(20, 80))
    return {
        "model": model, "dataset": dataset, "probe": LINEAR, "shots": shots, "seed": seed,
        "best_params": {"lr": 0.1, "weight_decay": 1e-5}, "val_top1": top1, "test_top1": top1,
        "test_top5": min(100.0, top1 + 20), "random_weights": False, "n_trials": 30,
        "timings": {"search_s": 1.0, "final_s": 1.0, "total_s": 2.0},
        "protocol_deviations": [], "fabricated": "scale rehearsal: not a probe's result",
    }


def results_command(args: argparse.Namespace) -> None:
    import yaml
    from snakemake.utils import update_config

    # as Snakemake merges them: config.yaml, then each file given, nested keys merged
    config = yaml.safe_load((REPOSITORY / "config.yaml").read_text())
    for path in args.configfile:
        update_config(config, yaml.safe_load(Path(path).read_text()) or {})
    layout, rng = Layout(str(args.results)), np.random.default_rng(0)
    models = [name for name, entry in config["models"].items() if entry is not None]
    probes = config["probes"]
    written = 0
    for model in models:
        for dataset in config["datasets"]:
            for shots in map(str, probes["shots"]):
                for seed in probes["seeds"]:
                    write_json(layout.probe_result(model, dataset, shots, str(seed)),
                               result_json(model, dataset, shots, seed, rng))
                    written += 1
    print(f"{written} result JSONs of {len(models)} models under {args.results}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    features = commands.add_parser("features", help="write and merge one model's features at full row counts")
    features.add_argument("--results", type=Path, required=True, help="the run's results_dir (its splits/ are read)")
    features.add_argument("--model", default="resnet50")
    features.add_argument("--width", type=int, default=2048, help="feature width (ResNet-50's 2048)")
    features.add_argument("--dtype", default="float16", choices=("float16", "float32"))
    features.add_argument("--shard-size", type=int, default=10000, help="features.shard_size")
    features.add_argument("--datasets", nargs="+", default=["in1k", "l1", "l2", "l3", "l4", "l5"])
    results = commands.add_parser("results", help="fabricate the result JSONs of a config's whole grid")
    results.add_argument("--results", type=Path, required=True)
    results.add_argument("--configfile", nargs="+", required=True, help="config files, later ones over earlier")
    args = parser.parse_args(argv)
    (features_command if args.command == "features" else results_command)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
