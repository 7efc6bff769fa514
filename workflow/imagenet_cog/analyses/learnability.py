"""Learnability of each concept in feature space (Laina et al. 2020, Eq. 1-2, "semantic coherence").

For each concept of a dataset, ``tasks`` forced-choice tasks are drawn from its test
images: ``references`` (M) reference images of the concept, and two queries, one more image
of the concept and one negative. The model "answers" with the query whose mean cosine
similarity to the references is higher (an exact tie is settled by a seeded coin flip:
the features cannot tell the queries apart). Each task is answered twice, with the same
references and positive query, against two kinds of negatives:

- ``random``: an image of a concept drawn uniformly from the other concepts of the dataset;
- ``hard``: an image of the concept whose test-feature centroid (of L2-normalised
  features) is nearest in Euclidean distance (Laina et al. 2020, Eq. 2).

Accuracy per dataset is the share of correct answers over all concepts' tasks, with a
Clopper-Pearson 95% interval (Laina et al. 2020, Sec. 5.1; scipy's exact binomial interval); per concept
in a TSV. The draws come from a generator seeded by (``seed``, concept label), so a
concept's tasks do not depend on the other concepts. A concept needs M + 1 test images.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
from scipy.stats import binomtest

from imagenet_cog.core.command_line import add_job_options, setup_logging
from imagenet_cog.core.io import read_tsv, write_json, write_tsv
from imagenet_cog.core.stack import stack_versions

from .common import AnalysisInputError, l2_normalised, load_split, metric, provenance

log = logging.getLogger("imagenet_cog.analyses.learnability")

NEGATIVE_KINDS = ("random", "hard")
CONCEPT_COLUMNS = ["label", "wnid", "n_test", "tasks", "random_correct", "random_accuracy",
                   "hard_negative_label", "hard_negative_wnid", "hard_correct", "hard_accuracy"]


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    interval = binomtest(int(successes), int(trials)).proportion_ci(confidence_level=confidence, method="exact")
    return float(interval.low), float(interval.high)


def nearest_concepts(features: np.ndarray, labels: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """For each class (in ``classes`` order) the other class with the nearest centroid."""
    centroids = np.stack([features[labels == label].mean(axis=0) for label in classes]).astype(np.float64)
    squared = (centroids**2).sum(axis=1)
    distances = squared[:, None] + squared[None, :] - 2.0 * centroids @ centroids.T
    np.fill_diagonal(distances, np.inf)
    return classes[np.argmin(distances, axis=1)]


def run_tasks(features: np.ndarray, labels: np.ndarray, tasks: int, references: int, seed: int,
              where: str) -> list[dict]:
    """Per concept: correct answers out of ``tasks`` for each negative kind."""
    features = l2_normalised(features)
    classes, counts = np.unique(labels, return_counts=True)
    if classes.size < 2:
        raise AnalysisInputError(f"{where}: learnability needs at least 2 concepts, not {classes.size}.")
    short = classes[counts < references + 1]
    if short.size:
        raise AnalysisInputError(
            f"{where}: learnability needs M + 1 = {references + 1} test images per concept "
            f"(analyses.learnability.references: {references}), but {short.size} concepts have "
            f"fewer (as few as {counts.min()}); lower analyses.learnability.references below "
            f"{counts.min()} or give the concepts more test images (splits.test_per_concept)."
        )
    members = {label: np.flatnonzero(labels == label) for label in classes}
    hard = dict(zip(classes.tolist(), nearest_concepts(features, labels, classes).tolist()))
    rows = []
    for label in classes.tolist():
        rng = np.random.default_rng([seed, label])
        others = classes[classes != label]
        correct = dict.fromkeys(NEGATIVE_KINDS, 0)
        for _ in range(tasks):
            chosen = rng.choice(members[label], references + 1, replace=False)
            prototype = features[chosen[:references]].mean(axis=0)
            positive = float(features[chosen[references]] @ prototype)
            negatives = {
                "random": rng.choice(members[rng.choice(others)]),
                "hard": rng.choice(members[hard[label]]),
            }
            for kind, negative in negatives.items():
                score = float(features[negative] @ prototype)
                correct[kind] += int(positive > score or (positive == score and rng.random() < 0.5))
        rows.append({"label": label, "n_test": int(members[label].size), "tasks": tasks,
                     "hard_negative_label": hard[label], **{f"{kind}_correct": correct[kind] for kind in NEGATIVE_KINDS}})
    return rows


def learnability_metrics(rows: list[dict]) -> list[dict]:
    records = []
    for kind in NEGATIVE_KINDS:
        successes = sum(row[f"{kind}_correct"] for row in rows)
        trials = sum(row["tasks"] for row in rows)
        low, high = clopper_pearson(successes, trials)
        records.append(metric(f"learnability_{kind}", successes / trials, low, high))
    return records


def concept_names(split_table: str) -> dict[int, str]:
    """label -> wnid from a dataset's split table."""
    return {int(row["label"]): row["wnid"] for row in read_tsv(split_table)}


def learnability_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="analyses-learnability", description="Forced-choice learnability in feature space.")
    add_job_options(parser, "test")
    parser.add_argument("--splits", required=True, help="the dataset's split table (labels -> wnids)")
    parser.add_argument("--output", required=True, help="result JSON")
    parser.add_argument("--concepts", required=True, help="per-concept TSV")
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--references", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    setup_logging()
    try:
        test = load_split(args.test)
        rows = run_tasks(test.features, test.labels, args.tasks, args.references, args.seed, f"{args.test}")
    except AnalysisInputError as error:
        log.error("%s", error)
        return 1
    wnids = concept_names(args.splits)
    write_tsv(args.concepts, CONCEPT_COLUMNS, (
        [row["label"], wnids.get(row["label"], ""), row["n_test"], row["tasks"],
         row["random_correct"], f"{row['random_correct'] / row['tasks']:.4f}",
         row["hard_negative_label"], wnids.get(row["hard_negative_label"], ""),
         row["hard_correct"], f"{row['hard_correct'] / row['tasks']:.4f}"]
        for row in rows
    ))
    write_json(args.output, {
        "analysis": "learnability",
        "model": args.model,
        "dataset": args.dataset,
        "random_weights": bool(test.metadata.get("random_weights")),
        "metrics": learnability_metrics(rows),
        "interval": "Clopper-Pearson 95% (exact binomial) over all tasks of the dataset",
        "settings": {"tasks": args.tasks, "references": args.references, "seed": args.seed,
                     "similarity": "mean cosine similarity of a query to the references"},
        "test": provenance(test),
        "versions": stack_versions(),
    })
    return 0
