"""The ``analyses-concepts`` command: each unseen concept's test accuracy under a model's probes.

For one model, every dataset asked for (Lin's levels and the level-set datasets) and every
probe seed: the kept N = all linear classifier (:mod:`imagenet_cog.probes.classifier`, read
beside its result JSON or refitted as the label-noise audit does) labels the dataset's test
images; per concept, its test images, how many the classifier puts first (top-1) and among
its first five (top-5), and the concept it most often puts first instead (ties: the smaller
wnid) with how many times. One TSV row per (dataset, seed, concept), ``SEED_COLUMNS``; the
tables and the curve are the ``concept-results`` command's (:mod:`.concept_report`).
"""

from __future__ import annotations

import argparse
import logging
from typing import Sequence

import numpy as np

from imagenet_cog.core.command_line import add_device_option, setup_logging
from imagenet_cog.core.io import write_tsv
from imagenet_cog.core.layout import Layout
from imagenet_cog.features.store import image_features
from imagenet_cog.probes.classifier import Classifier, ClassifierError, load_or_refit

log = logging.getLogger("imagenet_cog.analyses.concept_accuracy")

SEED_COLUMNS = ["model", "dataset", "seed", "wnid", "n_test", "top1_correct", "top5_correct", "confused_wnid",
                "confused_count"]
TOP_K = 5
ROW_BLOCK = 8192  # test images scored at once: a block's logits stay under ~40 MB for 1000 classes


def ranked_predictions(classifier: Classifier, features: np.ndarray, k: int = TOP_K) -> np.ndarray:
    """[images, min(k, C)] class indices, best first, of the L2-normalised features (as trained)."""
    k = min(k, classifier.weight.shape[0])
    weight, bias = classifier.weight.astype(np.float32), classifier.bias.astype(np.float32)
    ranked = np.empty((len(features), k), dtype=np.int64)
    for start in range(0, len(features), ROW_BLOCK):
        block = np.asarray(features[start:start + ROW_BLOCK], dtype=np.float32)
        block = block / np.maximum(np.linalg.norm(block, axis=1, keepdims=True), 1e-12)
        logits = block @ weight.T + bias
        top = np.argpartition(-logits, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(logits, top, axis=1), axis=1, kind="stable")
        ranked[start:start + len(block)] = np.take_along_axis(top, order, axis=1)
    return ranked


def concept_rows(classifier: Classifier, features: np.ndarray, wnids: Sequence[str]) -> list[dict]:
    """Per concept of the test images (``wnids``: each image's concept): n_test, top-1 and top-5
    correct counts, the most frequent wrong first guess and its count."""
    index = {wnid: position for position, wnid in enumerate(classifier.class_wnids)}
    unknown = sorted(set(wnids) - set(index))
    if unknown:
        raise ClassifierError(f"test images of {unknown[:3]} ({len(unknown)} concepts), which the classifier "
                              f"of {classifier.run['dataset']} has no class for")
    truth = np.array([index[wnid] for wnid in wnids])
    ranked = ranked_predictions(classifier, features)
    first, in_top = ranked[:, 0], (ranked == truth[:, None]).any(axis=1)
    rows = []
    for concept in np.unique(truth):
        mine = truth == concept
        wrong = first[mine & (first != concept)]
        counts = np.bincount(wrong, minlength=len(index)) if wrong.size else None
        tied = np.flatnonzero(counts == counts.max()) if counts is not None else []
        confused = min(tied, key=lambda candidate: classifier.class_wnids[candidate]) if len(tied) else None
        rows.append({
            "wnid": classifier.class_wnids[concept], "n_test": int(mine.sum()),
            "top1_correct": int((first[mine] == concept).sum()), "top5_correct": int(in_top[mine].sum()),
            "confused_wnid": classifier.class_wnids[confused] if confused is not None else "",
            "confused_count": int(counts[confused]) if counts is not None else 0,
        })
    return rows


def model_rows(model: str, datasets: dict[str, Sequence[str]], layout: Layout, device: str = "cpu") -> list[list]:
    """The seed table's rows of ``model``: ``datasets`` maps each dataset to its probe seeds."""
    table = []
    for dataset, seeds in datasets.items():
        features, _, wnids = image_features(layout.features(model, dataset, "test"))
        for seed in seeds:
            classifier = load_or_refit(layout.probe_result(model, dataset, "all", seed),
                                       layout.features(model, dataset, "train"), device)
            for row in concept_rows(classifier, features, wnids):
                table.append([model, dataset, seed, *(row[column] for column in SEED_COLUMNS[3:])])
        log.info("%s %s: %d concepts, %d seeds", model, dataset, len(set(wnids)), len(seeds))
    return table


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog analyses-concepts", description=__doc__.split("\n")[0])
    parser.add_argument("--results-root", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--dataset", nargs="+", action="append", required=True, metavar=("DATASET", "SEED"),
                        help="a dataset and its probe seeds (repeatable)")
    add_device_option(parser, "a missing N = all classifier is refitted")
    parser.add_argument("--output", required=True)
    return parser


def concept_accuracy_command(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    setup_logging()
    datasets = {entry[0]: entry[1:] for entry in args.dataset}
    missing = [dataset for dataset, seeds in datasets.items() if not seeds]
    if missing:
        log.error("--dataset %s names no seed: give each dataset its probe seeds", " ".join(missing))
        return 2
    try:
        rows = model_rows(args.model, datasets, Layout(args.results_root), args.device)
    except ClassifierError as error:
        log.error("%s", error)
        return 1
    write_tsv(args.output, SEED_COLUMNS, rows)
    return 0
