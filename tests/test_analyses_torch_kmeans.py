"""The torch k-means (GPU nodes without faiss-gpu) against faiss on the CPU, run here on the
CPU with the code a GPU runs: from the same initial centroids both make the same Lloyd
iterations, so objectives, centroids and assignments agree to float tolerance."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
import torch

from imagenet_cog.analyses.clustering import kmeans_backend, nearest_centroid
from imagenet_cog.analyses.common import l2_normalised
from imagenet_cog.analyses.torch_kmeans import fit_torch_kmeans

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def concepts(rows: int, k: int, dim: int, noise: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((k, dim))
    labels = rng.integers(0, k, rows)
    return l2_normalised((centres[labels] + noise * rng.standard_normal((rows, dim))).astype(np.float32))


def faiss_kmeans(features: np.ndarray, start: np.ndarray, iterations: int):
    kmeans = faiss.Kmeans(features.shape[1], start.shape[0], niter=iterations, seed=1,
                          max_points_per_centroid=features.shape[0], min_points_per_centroid=1)
    kmeans.train(features, init_centroids=start.copy())
    return kmeans


@pytest.mark.parametrize("noise", [0.3, 1.5])
def test_from_the_same_start_torch_makes_faiss_iterations(noise):
    """Separated concepts (noise 0.3) and overlapping ones (1.5): every iteration's objective,
    the centroids and the assignments are faiss's."""
    features = concepts(3000, 12, 24, noise, seed=0)
    start = features[np.random.default_rng(1).choice(len(features), 12, replace=False)]
    reference = faiss_kmeans(features, start, 8)
    ours = fit_torch_kmeans(features, 12, seed=0, iterations=8, device="cpu", initial_centroids=start)
    np.testing.assert_allclose(ours.objective, reference.obj, rtol=1e-5)
    np.testing.assert_allclose(ours.centroids.numpy(), reference.centroids, atol=1e-5)
    distances, assigned = nearest_centroid(ours, features)
    faiss_distances, faiss_assigned = nearest_centroid(reference, features)
    assert (assigned == faiss_assigned).mean() >= 0.999
    np.testing.assert_allclose(distances, faiss_distances, atol=1e-5)


def test_an_empty_cluster_takes_half_of_a_populous_one():
    features = concepts(600, 4, 8, 0.2, seed=3)
    start = np.repeat(features[:1], 4, axis=0)  # four equal centroids: three clusters empty
    result = fit_torch_kmeans(features, 4, seed=0, iterations=6, device="cpu", initial_centroids=start)
    assert result.splits >= 3
    assigned = nearest_centroid(result, features)[1]
    assert np.bincount(assigned, minlength=4).min() > 0
    assert result.objective[-1] < result.objective[0]


def test_the_seeded_start_is_k_distinct_rows_and_repeats():
    features = concepts(500, 5, 8, 0.3, seed=4)
    first = fit_torch_kmeans(features, 5, seed=11, iterations=0, device="cpu")
    again = fit_torch_kmeans(features, 5, seed=11, iterations=3, device="cpu")
    assert torch.equal(fit_torch_kmeans(features, 5, seed=11, iterations=3, device="cpu").centroids, again.centroids)
    rows = {tuple(row) for row in features.tolist()}
    assert all(tuple(row) in rows for row in first.centroids.tolist()) and len({tuple(r) for r in first.centroids.tolist()}) == 5
    with pytest.raises(ValueError, match="at least k rows"):
        fit_torch_kmeans(features[:3], 5, seed=0, iterations=1, device="cpu")


def test_the_cpu_clusters_with_faiss():
    """Without a GPU the analysis keeps faiss on the CPU; asked for a GPU, it says none is there."""
    from imagenet_cog.analyses.common import AnalysisInputError

    assert kmeans_backend("cpu") == "faiss-cpu"
    if not torch.cuda.is_available() and faiss.get_num_gpus() == 0:
        assert kmeans_backend("auto") == "faiss-cpu"
        with pytest.raises(AnalysisInputError, match="neither faiss nor torch sees a GPU"):
            kmeans_backend("cuda")
