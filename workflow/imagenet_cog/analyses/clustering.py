"""k-means clustering of the features (CoG preprint, Sec. 3.4, 4.3.1, supp. D.1).

Centroids are learnt with faiss (on a GPU without faiss-gpu, with the same algorithm in
torch: :mod:`.torch_kmeans`; the result's ``backend`` says which) on the training features
of a dataset, k = its number of concepts, once per seed; the run with the lowest inertia (sum of squared distances of the
training features to their nearest centroid) is kept, and the test features are assigned to
its centroids. Features are L2-normalised first (``l2_normalise``), as for the probes and
the alignment/uniformity analysis: models' feature norms differ by orders of magnitude and
vary between images, and k-means on raw features would mostly cluster by norm.

Metrics of the test assignments against the concept labels, from the confusion matrix
``C[i, j]`` = test images of concept i in cluster j:

- ``paper_purity`` (CoG preprint, Eq. 3): per concept the largest share of its test images that falls
  in one cluster, ``max_j C[i, j] / n_i``, averaged over concepts. The paper writes
  ``1/K sum_i max_j C[i, j]``; divided by the images per concept it is the 0-1 number the
  paper reports (e.g. 0.659 on IN-1K).
- ``cluster_purity``: the usual purity, ``sum_j max_i C[i, j] / N``.
- ``entropy_purity`` (Laina et al.): per cluster ``1 - H(labels in the cluster) / log K``, averaged
  over clusters weighted by their test images.
- ``nmi``, ``ami``, ``ari``: scikit-learn's normalised and adjusted mutual information and
  adjusted Rand index.

Each metric's ``value`` is that of the lowest-inertia run; its ``spread`` is the standard
deviation (ddof=0) of the metric over the runs of all seeds.

On a machine without a GPU, ``train_per_concept`` fits the centroids on at most that many
training images of each concept, drawn with ``subsample_seed``; the JSON records it.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from imagenet_cog.core.command_line import add_compute_options, add_job_options, setup_logging
from imagenet_cog.core.io import write_json, write_tsv
from imagenet_cog.core.stack import stack_versions

from .common import AnalysisInputError, l2_normalised, load_split, metric, provenance

log = logging.getLogger("imagenet_cog.analyses.clustering")

CLUSTERING_METRICS = ("paper_purity", "cluster_purity", "entropy_purity", "nmi", "ami", "ari")


@dataclass(frozen=True)
class KMeansSettings:
    seeds: tuple[int, ...] = (0, 1, 2)
    iterations: int = 100
    l2_normalise: bool = True
    train_per_concept: int | None = None
    subsample_seed: int = 0
    device: str = "auto"


# metrics ---------------------------------------------------------------------------------
def confusion_matrix(labels: np.ndarray, clusters: np.ndarray, num_clusters: int | None = None) -> np.ndarray:
    """C[i, j]: samples of the i-th label (sorted) in cluster j."""
    classes, label_index = np.unique(labels, return_inverse=True)
    columns = int(num_clusters if num_clusters is not None else clusters.max() + 1)
    matrix = np.zeros((classes.size, columns), dtype=np.int64)
    np.add.at(matrix, (label_index, clusters), 1)
    return matrix


def paper_purity(confusion: np.ndarray) -> float:
    """CoG preprint, Eq. 3 normalised per concept: mean over concepts of max_j C[i, j] / n_i."""
    return float(np.mean(confusion.max(axis=1) / confusion.sum(axis=1)))


def cluster_purity(confusion: np.ndarray) -> float:
    """sum_j max_i C[i, j] / N."""
    return float(confusion.max(axis=0).sum() / confusion.sum())


def entropy_purity(confusion: np.ndarray) -> float:
    """Laina et al. 2020: 1 - H(labels in cluster) / log K, averaged over clusters weighted by size."""
    concepts = confusion.shape[0]
    if concepts < 2:
        return 1.0
    sizes = confusion.sum(axis=0)
    occupied = sizes > 0
    shares = confusion[:, occupied] / sizes[occupied]
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(shares > 0, shares * np.log(shares), 0.0).sum(axis=0)
    purity = 1.0 - entropy / np.log(concepts)
    return float(np.sum(purity * sizes[occupied]) / sizes.sum())


def clustering_metrics(labels: np.ndarray, clusters: np.ndarray, num_clusters: int) -> dict[str, float]:
    # sklearn, faiss and torch are imported where they are used: analyses/report.py imports this
    # module for its metric names, and the report commands start without them
    from sklearn.metrics import (
        adjusted_mutual_info_score,
        adjusted_rand_score,
        normalized_mutual_info_score,
    )

    confusion = confusion_matrix(labels, clusters, num_clusters)
    return {
        "paper_purity": paper_purity(confusion),
        "cluster_purity": cluster_purity(confusion),
        "entropy_purity": entropy_purity(confusion),
        "nmi": float(normalized_mutual_info_score(labels, clusters)),
        "ami": float(adjusted_mutual_info_score(labels, clusters)),
        "ari": float(adjusted_rand_score(labels, clusters)),
    }


# k-means -----------------------------------------------------------------------------------
KMEANS_BACKENDS = ("faiss-gpu", "torch-cuda", "faiss-cpu")


def kmeans_backend(device: str) -> str:
    """faiss on the GPU where faiss sees one; else torch on the GPU where torch sees one
    (faiss-gpu not installed: :mod:`.torch_kmeans`, the same algorithm); else faiss on the CPU."""
    import faiss
    import torch

    if device == "cpu":
        return "faiss-cpu"
    if (faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0) > 0:
        return "faiss-gpu"
    if torch.cuda.is_available():
        return "torch-cuda"
    if device == "cuda":
        raise AnalysisInputError(
            "analyses.device is 'cuda' but neither faiss nor torch sees a GPU; run the job on a GPU "
            "node or set analyses.device to auto or cpu."
        )
    return "faiss-cpu"


def per_concept_subsample(labels: np.ndarray, per_concept: int, seed: int) -> np.ndarray:
    """Sorted indices of at most ``per_concept`` samples of each label, drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    chosen = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        chosen.append(members if members.size <= per_concept else rng.choice(members, per_concept, replace=False))
    return np.sort(np.concatenate(chosen))


def fit_kmeans(features: np.ndarray, k: int, seed: int, iterations: int, backend: str):
    """k-means on every given row (no faiss-side subsampling) with ``backend``
    (:data:`KMEANS_BACKENDS`); returns faiss's Kmeans or a TorchKMeans."""
    if backend == "torch-cuda":
        from .torch_kmeans import fit_torch_kmeans

        return fit_torch_kmeans(features, k, seed, iterations, device="cuda")
    import faiss

    kmeans = faiss.Kmeans(
        features.shape[1], k, niter=iterations, seed=seed, gpu=backend == "faiss-gpu", verbose=False,
        max_points_per_centroid=max(1, -(-features.shape[0] // k)), min_points_per_centroid=1,
    )
    kmeans.train(np.ascontiguousarray(features, dtype=np.float32))
    return kmeans


def nearest_centroid(kmeans, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(squared distance, index) of each row's nearest centroid."""
    from .torch_kmeans import TorchKMeans

    if isinstance(kmeans, TorchKMeans):
        return kmeans.search(features)
    distances, indices = kmeans.index.search(np.ascontiguousarray(features, dtype=np.float32), 1)
    return distances[:, 0].astype(np.float64), indices[:, 0].astype(np.int64)


def cluster_dataset(
    train_features: np.ndarray, train_labels: np.ndarray, test_features: np.ndarray, test_labels: np.ndarray,
    settings: KMeansSettings, where: str,
) -> tuple[dict[str, Any], np.ndarray]:
    """The analysis result (without provenance) and the test assignments of the kept run."""
    k = int(np.unique(np.concatenate([train_labels, test_labels])).size)
    fit_rows = np.arange(train_labels.size)
    if settings.train_per_concept is not None:
        fit_rows = per_concept_subsample(train_labels, settings.train_per_concept, settings.subsample_seed)
    if k > fit_rows.size:
        raise AnalysisInputError(
            f"{where}: k = {k} concepts but only {fit_rows.size} training samples to fit the "
            f"centroids on; give every concept training images, or raise "
            f"analyses.kmeans.train_per_concept (null: all training images)."
        )
    if not settings.seeds:
        raise AnalysisInputError("analyses.kmeans.seeds is empty; give at least one seed.")
    if settings.l2_normalise:
        train_features, test_features = l2_normalised(train_features), l2_normalised(test_features)
    backend = kmeans_backend(settings.device)
    runs, assignments = [], {}
    for seed in settings.seeds:
        started = time.perf_counter()
        kmeans = fit_kmeans(train_features[fit_rows], k, seed, settings.iterations, backend)
        inertia = float(nearest_centroid(kmeans, train_features[fit_rows])[0].sum())
        _, clusters = nearest_centroid(kmeans, test_features)
        runs.append({"seed": int(seed), "inertia": inertia, "fit_s": round(time.perf_counter() - started, 3),
                     **clustering_metrics(test_labels, clusters, k)})
        assignments[seed] = clusters
        log.info("%s seed %d: inertia %.4f, paper purity %.4f", where, seed, inertia, runs[-1]["paper_purity"])
    best = min(runs, key=lambda run: run["inertia"])
    metrics = [
        metric(name, best[name], spread=float(np.std([run[name] for run in runs]))) for name in CLUSTERING_METRICS
    ]
    result = {
        "analysis": "kmeans",
        "metrics": metrics,
        "k": k,
        "kept_seed": best["seed"],
        "runs": runs,
        "n_fit": int(fit_rows.size),
        "n_test": int(test_labels.size),
        "faiss_gpu": backend == "faiss-gpu",
        "backend": backend,
        "settings": {**asdict(settings), "seeds": list(settings.seeds)},
    }
    return result, assignments[best["seed"]]


# command line ------------------------------------------------------------------------------
def kmeans_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="analyses-kmeans", description="k-means of one model's features of one dataset.")
    add_job_options(parser, "train", "test")
    parser.add_argument("--output", required=True, help="result JSON")
    parser.add_argument("--assignments", required=True, help="TSV of the test images' clusters")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(KMeansSettings.seeds))
    parser.add_argument("--iterations", type=int, default=KMeansSettings.iterations)
    parser.add_argument("--no-l2-normalise", action="store_true")
    parser.add_argument("--train-per-concept", type=int, default=None)
    parser.add_argument("--subsample-seed", type=int, default=0)
    add_compute_options(parser, "k-means runs (on a GPU, torch's; on the CPU, faiss')")
    args = parser.parse_args(argv)
    setup_logging()
    import faiss

    faiss.omp_set_num_threads(max(1, args.threads))
    settings = KMeansSettings(
        seeds=tuple(args.seeds), iterations=args.iterations, l2_normalise=not args.no_l2_normalise,
        train_per_concept=args.train_per_concept, subsample_seed=args.subsample_seed, device=args.device,
    )
    try:
        train, test = load_split(args.train), load_split(args.test)
        result, clusters = cluster_dataset(
            train.features, train.labels, test.features, test.labels, settings, f"{args.model} {args.dataset}"
        )
    except AnalysisInputError as error:
        log.error("%s", error)
        return 1
    result.update(model=args.model, dataset=args.dataset, random_weights=bool(train.metadata.get("random_weights")),
                  train=provenance(train), test=provenance(test), versions=stack_versions())
    write_tsv(args.assignments, ["path", "label", "cluster"],
              zip(test.paths, test.labels.tolist(), clusters.tolist()))
    write_json(args.output, result)
    return 0
