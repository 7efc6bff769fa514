"""The ``probe-knn`` command: the k-NN probe of one model and dataset, every N and seed.

One job reads the dataset's features once, prepares them on the probe device once and
scores the k-NN classifier (:mod:`imagenet_cog.probes.knn`) for each N and seed on the same
training images the linear probe's final fit uses (:func:`imagenet_cog.probes.search.run_selections`:
N per concept drawn with the seed, every training image at N = all). At N = all nothing is
drawn, so the seeds share one computation and their results hold the same numbers.

Result JSON (``Layout.probe_result(..., kind="knn")``), the linear probe's fields where they apply:
    model, dataset, probe ("knn"), shots, seed, random_weights,
    test_top1, test_top5 (percent, at knn.reported_k: what the summary and tables read),
    knn {reported_k, per_k [{k, neighbours (min(k, n_train)), test_top1, test_top5}]},
    n_train, n_test, n_classes, feature_dim,
    settings {k, reported_k, temperature, similarity, weighting, test_block, train_block},
    timings {total_s (this N, all its seeds), load_s (reading and preparing the features, once per job)},
    seeds_together (the seeds of this N), versions (``core.stack``),
    device, matmul_precision ("float32": the products, TF32 off).
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
import torch

from imagenet_cog.core.command_line import add_compute_options, add_job_options, setup_logging
from imagenet_cog.core.device import resolve_device
from imagenet_cog.core.io import write_json
from imagenet_cog.core.naming import KNN
from imagenet_cog.core.stack import stack_versions
from imagenet_cog.features.store import read_features, read_labels
from imagenet_cog.probes.knn import SIMILARITIES, WEIGHTINGS, KnnSettings, knn_scores
from imagenet_cog.probes.search import (
    FINAL_SHOTS_STREAM,
    ProbeDataError,
    contiguous_labels,
    few_shot_subset,
    normalised_on_device,
)

log = logging.getLogger("imagenet_cog.probes.knn_probe")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog probe-knn", description=__doc__.split("\n")[0])
    add_job_options(parser, "train", "test")
    parser.add_argument("--output", required=True, nargs="+",
                        help="result JSON per N and seed: every seed of the first N, then of the next")
    parser.add_argument("--shots", required=True, nargs="+", help="training images per concept, or 'all'")
    parser.add_argument("--seed", type=int, required=True, nargs="+", help="the seeds of the few-shot draws")
    defaults = KnnSettings()
    parser.add_argument("--k", type=int, nargs="+", default=list(defaults.k), help="neighbours, every k scored")
    parser.add_argument("--reported-k", type=int, default=defaults.reported_k,
                        help="the k whose accuracies are the result's test_top1 and test_top5")
    parser.add_argument("--temperature", type=float, default=defaults.temperature, help="votes weigh exp(s / T)")
    parser.add_argument("--similarity", choices=SIMILARITIES, default=defaults.similarity)
    parser.add_argument("--weighting", choices=WEIGHTINGS, default=defaults.weighting)
    parser.add_argument("--test-block", type=int, default=defaults.test_block, help="test images per block")
    parser.add_argument("--train-block", type=int, default=defaults.train_block, help="training images per product")
    add_compute_options(parser, "each test feature's nearest training features are found")
    return parser


def main(argv: list[str]) -> int:
    """``probe-knn``: every N and seed of one model and dataset; each result JSON written atomically."""
    args = _parser().parse_args(argv)
    setup_logging()
    if len(args.output) != len(args.shots) * len(args.seed) or len(set(args.seed)) != len(args.seed):
        raise SystemExit("--output takes one file per N and seed (every seed of each N in turn); the seeds must differ")
    torch.set_num_threads(max(1, args.threads))
    try:
        settings = KnnSettings(k=tuple(args.k), reported_k=args.reported_k, temperature=args.temperature,
                               similarity=args.similarity, weighting=args.weighting, test_block=args.test_block,
                               train_block=args.train_block)
        outputs = iter(args.output)
        for results in knn_grid(args, settings):
            for result in results:
                write_json(next(outputs), result)
                log.info("%s %s knn shots=%s seed=%d: k=%d test_top1=%.2f test_top5=%.2f", args.model, args.dataset,
                         result["shots"], result["seed"], settings.reported_k, result["test_top1"], result["test_top5"])
    except (ProbeDataError, ValueError) as error:
        log.error("%s", error)
        return 1
    return 0


def training_rows(train_labels: np.ndarray, shots: str, seed: int, where: str) -> np.ndarray | None:
    """The training rows of the k-NN's pool for (N, seed): the linear probe's final-fit
    sample (None: every row, N = all)."""
    if shots == "all":
        return None
    return few_shot_subset(train_labels, np.arange(train_labels.size), int(shots), seed, FINAL_SHOTS_STREAM,
                           f"{where}, training set")


def knn_grid(args: argparse.Namespace, settings: KnnSettings):
    """Yields each N's results (one per seed, in --seed order) as soon as they are scored."""
    started = time.perf_counter()
    where = f"{args.dataset} ({args.train})"
    file_labels = read_labels(args.train)
    pools = {(shots, seed): training_rows(file_labels, shots, seed, where) for shots in args.shots for seed in args.seed}
    held = None if any(rows is None for rows in pools.values()) else np.unique(np.concatenate(list(pools.values())))
    train, test = read_features(args.train, rows=held), read_features(args.test)
    train_y, test_y, num_classes = contiguous_labels(file_labels, test.labels, args.test)
    device = resolve_device(args.device, "probes.device")
    cosine = settings.similarity == "cosine"
    train_features = normalised_on_device(train.features, device, "float32", where, normalise=cosine)
    test_features = normalised_on_device(test.features, device, "float32", args.test, normalise=cosine)
    held_rows = np.arange(file_labels.size) if held is None else held
    train_labels = torch.from_numpy(train_y[held_rows]).to(device)
    test_labels = torch.from_numpy(test_y).to(device)
    load_s = time.perf_counter() - started
    shared = {
        "model": args.model, "dataset": args.dataset, "probe": KNN,
        "random_weights": bool(train.metadata.get("random_weights", False)),
        "n_test": int(test_y.size), "n_classes": num_classes, "feature_dim": int(train.features.shape[1]),
        "settings": settings.as_result(),
        "versions": stack_versions(),
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "matmul_precision": "float32",
    }
    for shots in args.shots:
        began = time.perf_counter()
        scored = {}
        for seed in args.seed:
            rows = pools[(shots, seed)]
            if rows is None and scored:  # N = all: the same pool for every seed
                scored[seed] = scored[next(iter(scored))]
                continue
            pool = slice(None) if rows is None else torch.from_numpy(np.searchsorted(held_rows, rows)).to(device)
            per_k = knn_scores(train_features[pool], train_labels[pool], test_features, test_labels, num_classes, settings)
            scored[seed] = (per_k, int(held_rows.size if rows is None else rows.size))
        timings = {"total_s": time.perf_counter() - began, "load_s": load_s}
        yield [run_result(shared, shots, seed, *scored[seed], settings, timings, args.seed) for seed in args.seed]


def run_result(shared: dict, shots: str, seed: int, per_k: list[dict], n_train: int, settings: KnnSettings,
               timings: dict, seeds: list[int]) -> dict:
    """One run's result JSON (the module doc's fields)."""
    reported = next(entry for entry in per_k if entry["k"] == settings.reported_k)
    return {
        **{key: shared[key] for key in ("model", "dataset", "probe", "random_weights")},
        "shots": shots if shots == "all" else int(shots),
        "seed": seed,
        "test_top1": reported["test_top1"],
        "test_top5": reported["test_top5"],
        KNN: {"reported_k": settings.reported_k, "per_k": per_k},
        "n_train": n_train,
        **{key: shared[key] for key in ("n_test", "n_classes", "feature_dim", "settings")},
        "timings": dict(timings),
        "seeds_together": list(seeds),
        **{key: shared[key] for key in ("versions", "device", "matmul_precision")},
    }
