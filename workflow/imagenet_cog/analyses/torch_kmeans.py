"""k-means with torch on a GPU where faiss-gpu is not installed (the clustering analysis).

faiss-gpu needs CUDA libraries that many GPU nodes' images lack (the H100 node measured in
benchmarks/README.md had torch with CUDA but only faiss-cpu), and faiss-cpu takes ~23 s per
iteration for a level's 1.1M x 2048 features on 16 cores. This is the same algorithm as
``faiss.Kmeans`` as the analysis configures it (every row, no subsampling), in torch:

* start: ``k`` distinct training rows drawn with the seed (faiss draws them with its own
  generator, so the two start from different rows for one seed; given the same initial
  centroids they follow the same iterations, see ``tests/test_analyses_torch_kmeans.py``);
* each of ``iterations`` Lloyd iterations assigns every row to its nearest centroid by
  squared L2 distance (``|x|^2 - 2 x.c + |c|^2``, float32 products with TF32 off, as faiss
  computes it), records the objective (the sum of those distances), and moves each centroid
  to the mean of its rows (summed in float64);
* a centroid left without rows is replaced as faiss does it: a cluster is drawn with
  probability proportional to its rows minus one, its centroid copied, and the two
  perturbed symmetrically by a factor 1 +- 1/1024 (odd and even coordinates opposite), the
  rows assumed split evenly between them.

The analysis then assigns rows with :meth:`TorchKMeans.search`, as it does with faiss's
index.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from imagenet_cog.core.device import float32_matmul_precision

# faiss's relative perturbation of a split centroid
SPLIT_PERTURBATION = 1.0 / 1024
ROWS_PER_CHUNK = 65536


def exact_float32_products():
    """float32 matrix products without TF32, as faiss multiplies, restored afterwards."""
    return float32_matmul_precision("highest")


@dataclass
class TorchKMeans:
    """Centroids [k, d] on the device that fitted them; the objective of each iteration."""

    centroids: torch.Tensor
    objective: list[float] = field(default_factory=list)
    splits: int = 0

    def search(self, features) -> tuple[np.ndarray, np.ndarray]:
        """(squared distance, index) of each row's nearest centroid, as faiss's index gives them."""
        on_device = torch.as_tensor(np.ascontiguousarray(features, dtype=np.float32)).to(self.centroids.device)
        with exact_float32_products():
            distances, indices = nearest_centroids(on_device, self.centroids)
        return distances.double().cpu().numpy(), indices.cpu().numpy().astype(np.int64)


def nearest_centroids(features, centroids, chunk: int = ROWS_PER_CHUNK):
    """(squared distance, index) of the nearest centroid of each row, a chunk of rows at a time."""
    centroid_norms = centroids.pow(2).sum(dim=1)
    distances = torch.empty(features.shape[0], device=features.device)
    indices = torch.empty(features.shape[0], dtype=torch.int64, device=features.device)
    for start in range(0, features.shape[0], chunk):
        rows = features[start:start + chunk]
        squared = torch.addmm(centroid_norms.unsqueeze(0), rows, centroids.t(), alpha=-2.0)
        squared.add_(rows.pow(2).sum(dim=1, keepdim=True))
        nearest = squared.min(dim=1)
        distances[start:start + chunk] = nearest.values.clamp_min_(0.0)
        indices[start:start + chunk] = nearest.indices
    return distances, indices


def fit_torch_kmeans(features, k: int, seed: int, iterations: int, device: str = "cuda",
                     initial_centroids=None) -> TorchKMeans:
    """Lloyd's k-means of ``features`` [n, d] (float32, host or device) on ``device``.

    ``initial_centroids`` [k, d] (optional) replace the seeded draw of k rows.
    """
    data = torch.as_tensor(np.ascontiguousarray(features, dtype=np.float32) if isinstance(features, np.ndarray)
                           else features).to(device=device, dtype=torch.float32)
    rows, dim = data.shape
    if k > rows:
        raise ValueError(f"k-means with k = {k} needs at least k rows, not {rows}")
    if initial_centroids is None:
        generator = torch.Generator().manual_seed(seed)
        chosen = torch.randperm(rows, generator=generator)[:k].to(device)
        centroids = data.index_select(0, chosen)
    else:
        centroids = torch.as_tensor(np.asarray(initial_centroids, dtype=np.float32)).to(device).clone()
        if centroids.shape != (k, dim):
            raise ValueError(f"initial centroids must be [{k}, {dim}], not {list(centroids.shape)}")
    result = TorchKMeans(centroids)
    splitting = np.random.default_rng([seed, 15486557])
    with exact_float32_products():
        for _ in range(iterations):
            distances, assigned = nearest_centroids(data, centroids)
            result.objective.append(float(distances.double().sum()))
            sums = torch.zeros(k, dim, dtype=torch.float64, device=data.device)
            for start in range(0, rows, ROWS_PER_CHUNK):
                sums.index_add_(0, assigned[start:start + ROWS_PER_CHUNK], data[start:start + ROWS_PER_CHUNK].double())
            counts = torch.bincount(assigned, minlength=k)
            centroids = (sums / counts.clamp_min(1).unsqueeze(1)).float()
            result.splits += split_empty_clusters(centroids, counts.cpu().numpy(), splitting)
    result.centroids = centroids
    return result


def split_empty_clusters(centroids, counts: np.ndarray, rng: np.random.Generator) -> int:
    """Give every empty cluster half of a populous one, as faiss does; returns how many."""
    counts = counts.astype(np.int64).copy()
    k = counts.size
    empty = np.flatnonzero(counts == 0)
    if empty.size == 0:
        return 0
    signs = torch.where(torch.arange(centroids.shape[1], device=centroids.device) % 2 == 0, 1.0, -1.0)
    for cluster in empty:
        weights = np.clip(counts - 1, 0, None).astype(np.float64)
        donor = int(rng.choice(k, p=weights / weights.sum())) if weights.sum() > 0 else int(np.argmax(counts))
        source = centroids[donor].clone()
        centroids[cluster] = source * (1 + SPLIT_PERTURBATION * signs)
        centroids[donor] = source * (1 - SPLIT_PERTURBATION * signs)
        counts[cluster] = counts[donor] // 2
        counts[donor] -= counts[cluster]
    return int(empty.size)
