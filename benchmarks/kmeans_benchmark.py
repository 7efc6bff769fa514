"""k-means and uniformity at a level-like shape: faiss against scikit-learn's KMeans.

Generated clustered features (``--concepts`` Gaussian concepts in ``--dim`` dimensions,
L2-normalised, as the analyses stage clusters them) are clustered twice with the same k
(the number of concepts), the same number of Lloyd iterations and random initialisation:

* baseline: ``sklearn.cluster.KMeans(init="random", n_init=1, max_iter=iterations, tol=0)``;
* ours: :func:`imagenet_cog.analyses.clustering.fit_kmeans` with the backend the analysis
  picks for ``--device`` (faiss on the CPU; on a GPU faiss-gpu where installed, else the same
  algorithm in torch, ``imagenet_cog.analyses.torch_kmeans``).

It prints the seconds of each, their ratio, and the paper's purity (CoG preprint, Eq. 3) of the
held-out test features assigned to each one's centroids. ``--compare-rows n`` first runs
faiss on the CPU and the torch k-means (on ``--device``) from the same initial centroids on
the first n training rows and prints both times, the largest relative difference of their
objectives and centroids and the share of rows assigned alike. Then it checks the blocked exact
uniformity against the direct O(n^2) formula on a small set (equal to 1e-5) and times it at
``--uniformity-rows`` x ``--dim`` on ``--device``.

    python benchmarks/kmeans_benchmark.py --rows 20000 --dim 512 --concepts 200        # CPU
    python benchmarks/kmeans_benchmark.py --rows 1100000 --dim 2048 --concepts 1000 \\
        --uniformity-rows 50000 --device cuda --skip-sklearn --compare-rows 100000        # a level on a GPU
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from imagenet_cog.analyses.clustering import (
    confusion_matrix,
    fit_kmeans,
    kmeans_backend,
    nearest_centroid,
    paper_purity,
)
from imagenet_cog.analyses.common import l2_normalised
from imagenet_cog.analyses.geometry import uniformity_loss
from imagenet_cog.analyses.torch_kmeans import fit_torch_kmeans
from imagenet_cog.core.device import resolve_device


def clustered_features(rows: int, concepts: int, dim: int, noise: float, seed: int):
    """Concepts around random unit centres, noise chosen so that purity is well below 1."""
    rng = np.random.default_rng(seed)
    centres = l2_normalised(rng.standard_normal((concepts, dim)).astype(np.float32))
    labels = np.arange(rows) % concepts
    features = np.empty((rows, dim), dtype=np.float32)
    for start in range(0, rows, 65536):
        stop = min(rows, start + 65536)
        block = rng.standard_normal((stop - start, dim), dtype=np.float32) * (noise / np.sqrt(dim))
        features[start:stop] = l2_normalised(centres[labels[start:stop]] + block)
    return features, labels


def purity_of(labels: np.ndarray, clusters: np.ndarray, k: int) -> float:
    return paper_purity(confusion_matrix(labels, clusters, k))


def compare_with_faiss(train: np.ndarray, k: int, iterations: int, device) -> None:
    """faiss on the CPU and the torch k-means on ``device`` from the same k initial rows."""
    import faiss
    import torch

    start = train[np.random.default_rng(1).choice(train.shape[0], k, replace=False)]
    reference = faiss.Kmeans(train.shape[1], k, niter=iterations, seed=1, max_points_per_centroid=train.shape[0],
                             min_points_per_centroid=1)
    started = time.perf_counter()
    reference.train(train, init_centroids=start.copy())
    faiss_seconds = time.perf_counter() - started
    fit_torch_kmeans(train[:k], k, 0, 1, device=str(device))  # warm-up: the device and its kernels
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    ours = fit_torch_kmeans(train, k, 1, iterations, device=str(device), initial_centroids=start)
    if device.type == "cuda":
        torch.cuda.synchronize()
    torch_seconds = time.perf_counter() - started
    objective = np.abs(np.array(ours.objective) - reference.obj).max() / reference.obj[-1]
    centroids = np.abs(ours.centroids.cpu().numpy() - reference.centroids).max() / np.abs(reference.centroids).max()
    alike = float((ours.search(train)[1] == reference.index.search(train, 1)[1][:, 0]).mean())
    print(f"same start, {train.shape[0]} x {train.shape[1]}, k = {k}, {iterations} iterations: faiss-cpu "
          f"{faiss_seconds:.2f} s, torch on {device.type} {torch_seconds:.2f} s ({faiss_seconds / torch_seconds:.1f}x); "
          f"largest objective difference {objective:.1e} of the last objective, centroids {centroids:.1e} of the "
          f"largest coordinate, {100 * alike:.3f}% of rows assigned alike, {ours.splits} empty clusters split", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20000, help="training features")
    parser.add_argument("--test-rows", type=int, default=None, help="test features (default: 50 per concept)")
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--concepts", type=int, default=200, help="k")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--noise", type=float, default=4.0, help="noise norm relative to the unit centres")
    parser.add_argument("--uniformity-rows", type=int, default=10000)
    parser.add_argument("--block-size", type=int, default=1024)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-sklearn", action="store_true", help="only ours (the baseline takes hours at full size)")
    parser.add_argument("--compare-rows", type=int, default=0,
                        help="faiss-cpu against the torch k-means from the same start on this many training rows")
    parser.add_argument("--compare-iterations", type=int, default=10)
    args = parser.parse_args()

    import faiss
    import torch

    faiss.omp_set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    torch.set_float32_matmul_precision("highest")  # as the analyses stage: no TF32
    test_rows = args.test_rows or 50 * args.concepts
    features, labels = clustered_features(args.rows + test_rows, args.concepts, args.dim, args.noise, seed=0)
    train, test, test_labels = features[: args.rows], features[args.rows :], labels[args.rows :]
    del features
    backend = kmeans_backend(args.device)
    print(f"train {args.rows} x {args.dim}, test {test_rows}, k = {args.concepts}, {args.iterations} iterations, "
          f"{args.threads} threads, k-means backend {backend}")
    if args.compare_rows:
        compare_with_faiss(train[: args.compare_rows], args.concepts, args.compare_iterations, resolve_device(args.device, "--device"))

    started = time.perf_counter()
    kmeans = fit_kmeans(train, args.concepts, seed=0, iterations=args.iterations, backend=backend)
    ours_seconds = time.perf_counter() - started
    ours_purity = purity_of(test_labels, nearest_centroid(kmeans, test)[1], args.concepts)
    print(f"ours ({backend}): {ours_seconds:8.2f} s ({ours_seconds / args.iterations:.3f} s per iteration)  "
          f"purity {ours_purity:.4f}")

    if not args.skip_sklearn:
        from sklearn.cluster import KMeans

        started = time.perf_counter()
        baseline = KMeans(args.concepts, init="random", n_init=1, max_iter=args.iterations, tol=0.0,
                          algorithm="lloyd", random_state=0).fit(train)
        sklearn_seconds = time.perf_counter() - started
        sklearn_purity = purity_of(test_labels, baseline.predict(test), args.concepts)
        print(f"sklearn : {sklearn_seconds:8.2f} s  purity {sklearn_purity:.4f}")
        print(f"speed-up of ours over scikit-learn: {sklearn_seconds / ours_seconds:.1f}x")

    small, _ = clustered_features(400, 20, 64, args.noise, seed=2)
    small64 = small.astype(np.float64)
    squared = ((small64[:, None, :] - small64[None, :, :]) ** 2).sum(axis=2)
    upper = np.triu_indices(len(small), k=1)
    direct = float(np.log(np.mean(np.exp(-2.0 * squared[upper]))))
    blocked = uniformity_loss(small, 2.0, 64, args.device)
    print(f"uniformity loss, 400 x 64: blocked {blocked:.8f} direct {direct:.8f} |difference| {abs(blocked - direct):.1e}"
          f" ({'equal' if abs(blocked - direct) <= 1e-5 else 'NOT equal'} to 1e-5)")

    features, _ = clustered_features(args.uniformity_rows, args.concepts, args.dim, args.noise, seed=3)
    started = time.perf_counter()
    loss = uniformity_loss(features, 2.0, args.block_size, args.device)
    if args.device != "cpu" and torch.cuda.is_available():
        torch.cuda.synchronize()
    print(f"uniformity, {args.uniformity_rows} x {args.dim} ({args.uniformity_rows * (args.uniformity_rows - 1) // 2:.3e} pairs, "
          f"block {args.block_size}): {time.perf_counter() - started:.2f} s, uniformity {-loss:.4f}")


if __name__ == "__main__":
    main()
