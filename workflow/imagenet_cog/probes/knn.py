"""The weighted k-nearest-neighbour classifier on frozen features (the k-NN probe).

The evaluation the self-supervised papers report beside the linear probe (Wu et al. 2018,
as DINO, iBOT and VISSL run it): features L2-normalised (``similarity: cosine``; ``dot``
keeps them raw), the k training images most similar to a test image vote for their class
with weight exp(similarity / T) (``weighting: exponential``; ``uniform``: one vote each),
and the classes ranked by their votes give the top-1 and top-5 predictions. Nothing is
trained or searched, so one pass over the test set scores every k at once: the neighbours
are found for the largest k, and each smaller k reads its first k of them.

Memory is bounded by the blocks: the similarities of ``test_block`` test images to
``train_block`` training images at a time, their top-k kept per block and merged, so the
full test x train matrix (50,000 x 1,281,167 floats for IN-1K, 256 GB) never exists. The
products run in float32 (TF32 off on a GPU): a neighbour's rank can turn on the last bits of
a similarity, and at 2 x 2048 x 50,000 x 1.28 M flops per training set the full-precision
product is seconds on a GPU.

Ties, named:
- Votes: classes with equal votes rank by class index, lowest first, as scikit-learn's
  ``KNeighborsClassifier.predict`` picks the first maximum.
- Neighbours: training images exactly as similar as the k-th neighbour may or may not be
  among the k (torch.topk, like scikit-learn's partition, does not order equal values); a
  prediction can turn on it only when such images carry different labels. Generated or real
  features of distinct images practically never tie; duplicated images do.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from imagenet_cog.core.device import float32_matmul_precision

SIMILARITIES = ("cosine", "dot")
WEIGHTINGS = ("exponential", "uniform")
TOP_KS = (1, 5)


@dataclass(frozen=True)
class KnnSettings:
    """The k-NN probe's settings (``probes.knn``); defaults are DINO's evaluation."""

    k: tuple[int, ...] = (10, 20, 100, 200)
    reported_k: int = 20
    temperature: float = 0.07
    similarity: str = "cosine"
    weighting: str = "exponential"
    test_block: int = 1024
    train_block: int = 262144

    def __post_init__(self):
        problems = []
        if not self.k or min(self.k) < 1 or len(set(self.k)) != len(self.k):
            problems.append(f"probes.knn.k must be distinct positive integers, not {list(self.k)}")
        if self.reported_k not in self.k:
            problems.append(f"probes.knn.reported_k ({self.reported_k}) must be one of probes.knn.k {list(self.k)}")
        if not self.temperature > 0:
            problems.append(f"probes.knn.temperature must be positive, not {self.temperature}")
        if self.similarity not in SIMILARITIES or self.weighting not in WEIGHTINGS:
            problems.append(f"probes.knn.similarity must be one of {SIMILARITIES} and weighting one of {WEIGHTINGS}")
        if self.test_block < 1 or self.train_block < 1:
            problems.append("probes.knn.test_block and train_block must be positive")
        if problems:
            raise ValueError("; ".join(problems) + "; fix config.yaml.")

    def as_result(self) -> dict:
        """The settings as a result JSON records them."""
        return {**asdict(self), "k": list(self.k)}


def nearest_neighbours(queries: torch.Tensor, train: torch.Tensor, count: int, train_block: int):
    """The ``count`` training rows most similar (inner product) to each query row, most similar
    first: (similarities [Q, count], row indices [Q, count]). Training rows are taken
    ``train_block`` at a time, each block's best merged with the best so far."""
    best_similarities = best_rows = None
    for start in range(0, train.shape[0], train_block):
        similarities = queries @ train[start : start + train_block].T
        top = similarities.topk(min(count, similarities.shape[1]), dim=1)
        rows = top.indices + start
        if best_similarities is not None:
            merged = torch.cat([best_similarities, top.values], dim=1)
            merged_rows = torch.cat([best_rows, rows], dim=1)
            top = merged.topk(min(count, merged.shape[1]), dim=1)
            rows = merged_rows.gather(1, top.indices)
        best_similarities, best_rows = top.values, rows
    return best_similarities, best_rows


def class_ranking(similarities: torch.Tensor, labels: torch.Tensor, k: int, num_classes: int,
                  settings: KnnSettings) -> torch.Tensor:
    """Classes ranked by the votes of each query's first ``k`` neighbours ([Q, num_classes],
    best first; equal votes by class index). Exponential weights are taken relative to each
    query's nearest neighbour: the same ranking as exp(s / T), without overflow for raw
    (``dot``) similarities."""
    nearest = similarities[:, :k]
    if settings.weighting == "exponential":
        weights = torch.exp((nearest - nearest[:, :1]) / settings.temperature).double()
    else:
        weights = torch.ones_like(nearest, dtype=torch.float64)
    votes = torch.zeros(nearest.shape[0], num_classes, dtype=torch.float64, device=nearest.device)
    votes.scatter_add_(1, labels[:, :k], weights)
    return torch.sort(votes, dim=1, descending=True, stable=True).indices


def ranked_classes(train: torch.Tensor, train_labels: torch.Tensor, test: torch.Tensor, num_classes: int,
                   settings: KnnSettings):
    """Yields, per block of test rows, (first row, {k: the classes ranked best first, [B, <= 5]})
    for every k of ``settings``, with ``train`` as the neighbours' pool (a k above its size:
    every training row votes). ``train``/``test`` are prepared features on one device."""
    largest = min(max(settings.k), train.shape[0])
    shown = min(max(TOP_KS), num_classes)
    # float32 products, TF32 off: a neighbour's rank can turn on a similarity's last bits
    with float32_matmul_precision("highest", test.device):
        for start in range(0, test.shape[0], settings.test_block):
            similarities, rows = nearest_neighbours(
                test[start : start + settings.test_block], train, largest, settings.train_block
            )
            labels = train_labels[rows]
            yield start, {
                k: class_ranking(similarities, labels, min(k, largest), num_classes, settings)[:, :shown]
                for k in settings.k
            }


def knn_scores(train: torch.Tensor, train_labels: torch.Tensor, test: torch.Tensor, test_labels: torch.Tensor,
               num_classes: int, settings: KnnSettings) -> list[dict]:
    """Test top-1 and top-5 (percent) of every k of ``settings`` (:func:`ranked_classes`):
    [{k, neighbours, test_top1, test_top5}] in the order of ``settings.k``."""
    hits = torch.zeros(len(settings.k), len(TOP_KS), dtype=torch.float64, device=test.device)
    for start, rankings in ranked_classes(train, train_labels, test, num_classes, settings):
        truth = test_labels[start : start + settings.test_block, None]
        for position, k in enumerate(settings.k):
            for column, top in enumerate(TOP_KS):
                hits[position, column] += (rankings[k][:, :top] == truth).any(dim=1).sum()
    accuracy = (100.0 * hits / max(test.shape[0], 1)).tolist()
    largest = min(max(settings.k), train.shape[0])
    return [
        {"k": k, "neighbours": min(k, largest), "test_top1": accuracy[position][0], "test_top5": accuracy[position][1]}
        for position, k in enumerate(settings.k)
    ]
