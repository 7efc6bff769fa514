"""Unseen-concept detection (imagenet_cog.analyses.detection): each score against a hand
computation, the k-NN distance against a brute-force one, AUROC and FPR@95 against counts
over every pair and every threshold on the project's own scores, ties included."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from imagenet_cog.analyses.common import AnalysisInputError
from imagenet_cog.analyses.detection import auroc, fpr_at_tpr, kth_neighbour_distance, mcm_scores, probe_scores
from imagenet_cog.analyses.detection_report import aggregated


def pairwise_auroc(known, unknown):
    """P(known scores above unknown) + half P(equal), over every pair."""
    known, unknown = np.asarray(known, float)[:, None], np.asarray(unknown, float)[None, :]
    return 100.0 * float(((known > unknown) + 0.5 * (known == unknown)).mean())


def counted_fpr95(known, unknown):
    """FPR at the highest threshold among the scores that keeps >= 95% of the known images."""
    known, unknown = np.asarray(known, float), np.asarray(unknown, float)
    for threshold in sorted(set(known) | set(unknown), reverse=True):
        if (known >= threshold).mean() >= 0.95:
            return 100.0 * float((unknown >= threshold).mean())
    raise AssertionError("unreachable: the lowest score keeps every image")


def test_probe_scores_by_hand():
    features = torch.tensor([[3.0, 4.0], [0.0, 2.0]])  # normalised: [0.6, 0.8], [0, 1]
    weight, bias = torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.tensor([0.5, -0.5])
    scores = probe_scores(features, weight, bias)
    logits = np.array([[0.6 + 0.5, 1.6 - 0.5], [0.5, 2.0 - 0.5]])
    np.testing.assert_allclose(scores["max_logit"], logits.max(axis=1), rtol=1e-6)
    np.testing.assert_allclose(scores["energy"], np.log(np.exp(logits).sum(axis=1)), rtol=1e-6)
    np.testing.assert_allclose(scores["msp"], np.exp(logits.max(axis=1)) / np.exp(logits).sum(axis=1), rtol=1e-6)


def test_mcm_by_hand():
    features = torch.tensor([[2.0, 0.0]])
    text = torch.tensor([[1.0, 1.0], [0.0, 1.0]])  # columns [1, 0] and [1, 1] / sqrt(2)
    cosines = np.array([1.0, 1 / math.sqrt(2)])
    for temperature in (1.0, 0.01):
        expected = np.exp(cosines / temperature).max() / np.exp(cosines / temperature).sum()
        np.testing.assert_allclose(mcm_scores(features, text, temperature), [expected], rtol=1e-6)


@pytest.mark.parametrize("k", [1, 3, 70])
def test_kth_neighbour_against_brute_force(k, monkeypatch):
    import imagenet_cog.analyses.detection as detection

    monkeypatch.setattr(detection, "QUERY_BLOCK", 7)  # several query and training blocks
    monkeypatch.setattr(detection, "TRAIN_BLOCK", 16)
    generator = torch.Generator().manual_seed(0)
    train, queries = torch.randn(70, 5, generator=generator), torch.randn(23, 5, generator=generator)
    unit = torch.nn.functional.normalize
    brute = torch.cdist(unit(queries, dim=1).double(), unit(train, dim=1).double()).sort(dim=1).values[:, k - 1]
    np.testing.assert_allclose(kth_neighbour_distance(queries, train, k), brute.numpy(), atol=1e-5)


def test_k_larger_than_the_training_set_is_refused():
    with pytest.raises(AnalysisInputError, match="analyses.detection.k"):
        kth_neighbour_distance(torch.ones(2, 3), torch.ones(4, 3), 5)


def own_scores():
    """MSP of a saturated classifier (many exact ties at 1.0) and rounded k-NN distances."""
    generator = torch.Generator().manual_seed(1)
    weight = 40.0 * torch.randn(4, 6, generator=generator)
    known = probe_scores(torch.randn(60, 6, generator=generator), weight, torch.zeros(4))["msp"]
    unknown = probe_scores(torch.randn(45, 6, generator=generator), weight, torch.zeros(4))["msp"]
    train = torch.randn(30, 6, generator=generator)
    knn_known = -np.round(kth_neighbour_distance(torch.randn(40, 6, generator=generator), train, 2), 1)
    knn_unknown = -np.round(kth_neighbour_distance(torch.randn(33, 6, generator=generator), train, 2), 1)
    return [(known, unknown), (knn_known, knn_unknown), (np.array([1, 1, 2, 2]), np.array([1, 2, 2, 0]))]


@pytest.mark.parametrize("case", range(3))
def test_auroc_and_fpr95_against_counts_with_ties(case):
    known, unknown = own_scores()[case]
    assert len(set(known) & set(unknown)) > 0 or case == 0
    assert auroc(known, unknown) == pytest.approx(pairwise_auroc(known, unknown), abs=1e-9)
    assert fpr_at_tpr(known, unknown) == pytest.approx(counted_fpr95(known, unknown), abs=1e-9)


def test_metrics_at_the_extremes():
    assert auroc([2, 3], [0, 1]) == 100.0 and fpr_at_tpr([2, 3], [0, 1]) == 0.0
    assert auroc([0, 1], [2, 3]) == 0.0 and fpr_at_tpr([0, 1], [2, 3]) == 100.0
    assert auroc([1, 1], [1, 1]) == 50.0


def test_aggregated_over_seeds():
    rows = pd.DataFrame([
        {"model": "m", "score": "msp", "seed": seed, "dataset": "l1", "auroc": value, "fpr95": 100 - value,
         "n_known": 4, "n_unknown": 4} for seed, value in (("1", 60.0), ("2", 70.0), ("3", 80.0))
    ] + [{"model": "m", "score": "knn_distance", "seed": "", "dataset": "l1", "auroc": 55.0, "fpr95": 90.0,
          "n_known": 4, "n_unknown": 4}])
    summary = aggregated(rows).set_index("score")
    assert summary.loc["msp", "auroc_mean"] == pytest.approx(70.0)
    assert summary.loc["msp", "auroc_std"] == pytest.approx(10.0)
    assert summary.loc["msp", "auroc_ci95_low"] < 70.0 < summary.loc["msp", "auroc_ci95_high"] <= 100.0
    assert summary.loc["knn_distance", "n_seeds"] == 1 and math.isnan(summary.loc["knn_distance", "auroc_ci95_low"])
