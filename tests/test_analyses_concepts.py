"""Concept generalization as a curve: per-concept accuracy from a kept classifier, the
isotonic fit and its bootstrap on known curves, and the report's tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from imagenet_cog.analyses.concept_accuracy import concept_rows
from imagenet_cog.analyses.concept_curve import crossing, draws, fit_curve, interval
from imagenet_cog.analyses.concept_report import curve_table, outliers, per_concept
from imagenet_cog.probes.classifier import Classifier

WNIDS = [f"n{index:08d}" for index in range(7)]


def direct_counts(weight, bias, features, truth):
    """Per class, by a loop over images: top-1 and top-5 correct, and every wrong first guess."""
    top1, top5, wrong = np.zeros(len(weight), int), np.zeros(len(weight), int), [[] for _ in weight]
    for x, label in zip(features, truth):
        logits = weight @ (x / np.linalg.norm(x)) + bias
        order = sorted(range(len(weight)), key=lambda c: -logits[c])
        top1[label] += order[0] == label
        top5[label] += label in order[:5]
        if order[0] != label:
            wrong[label].append(order[0])
    return top1, top5, wrong


def test_per_concept_accuracy_is_the_direct_recomputation():
    rng = np.random.default_rng(3)
    weight, bias = rng.normal(size=(7, 16)).astype(np.float32), rng.normal(size=7).astype(np.float32) * 0.1
    truth = np.repeat(np.arange(7), [9, 5, 8, 6, 7, 10, 4])
    features = (weight[truth] * 0.4 + rng.normal(size=(truth.size, 16))).astype(np.float32)
    classifier = Classifier(weight, bias, WNIDS, {"dataset": "l3"})
    rows = concept_rows(classifier, features, [WNIDS[label] for label in truth])
    top1, top5, wrong = direct_counts(weight.astype(float), bias.astype(float), features.astype(float), truth)
    assert [row["wnid"] for row in rows] == WNIDS
    assert [row["n_test"] for row in rows] == [9, 5, 8, 6, 7, 10, 4]
    assert [row["top1_correct"] for row in rows] == top1.tolist()
    assert [row["top5_correct"] for row in rows] == top5.tolist()
    assert 0 < top1.sum() < truth.size and top5.sum() > top1.sum()  # the case tests something
    for row, guesses in zip(rows, wrong):
        counts = np.bincount(guesses, minlength=7) if guesses else np.zeros(7, int)
        assert row["confused_count"] == counts.max()
        assert row["confused_wnid"] == (WNIDS[int(np.argmax(counts))] if guesses else "")


def test_a_test_concept_the_classifier_lacks_is_named():
    classifier = Classifier(np.eye(3, dtype=np.float32), np.zeros(3, np.float32), WNIDS[:3], {"dataset": "l2"})
    with pytest.raises(ValueError, match=r"n00000005.*l2"):
        concept_rows(classifier, np.eye(3, dtype=np.float32), [WNIDS[0], WNIDS[1], WNIDS[5]])


def synthetic(shape, count=300, noise=3.0, seed=0):
    rng = np.random.default_rng(seed)
    similarity = np.sort(rng.uniform(0.2, 0.8, count))
    truth = shape(similarity)
    levels = np.digitize(similarity, [0.32, 0.44, 0.56, 0.68])
    return similarity, truth, truth + rng.normal(0, noise, count), levels


SHAPES = {
    "step": lambda s: np.where(s > 0.5, 70.0, 30.0),
    "line": lambda s: 10.0 + 100.0 * s,
    "sigmoid": lambda s: 20.0 + 60.0 / (1.0 + np.exp(-(s - 0.5) / 0.05)),
}


@pytest.mark.parametrize("name", SHAPES)
def test_the_fit_and_its_band_follow_a_known_curve(name):
    """Away from a jump (0.03 either side of a step) and the ends, the fit is within one noise sd
    (3 points, 300 concepts) of the truth and the band holds the truth at 90% of the grid."""
    similarity, _, accuracy, levels = synthetic(SHAPES[name])
    curve = fit_curve(similarity, accuracy, levels, 25.0, draws(len(similarity), 100, 1))
    truth = SHAPES[name](curve.grid)
    smooth = np.abs(curve.grid - 0.5) > 0.03 if name == "step" else np.ones_like(curve.grid, bool)
    inner = smooth & (curve.grid > 0.23) & (curve.grid < 0.77)  # isotonic fits are biased at the ends
    assert np.abs(curve.fitted - truth)[inner].max() < 3.0
    held = (curve.band[0] - 0.5 <= truth) & (truth <= curve.band[1] + 0.5)
    assert held[inner].mean() >= 0.9
    assert np.all(np.diff(curve.fitted) >= 0)


def test_the_slope_and_its_interval_on_a_line():
    """10 + 100 s: 10 points per 0.1 similarity; the interval holds it and excludes zero; the line
    explains more variance than the levels alone, and the fit crosses 40 at s = 0.3 within one noise
    sd in similarity (5 points / 100 = 0.05)."""
    similarity, _, accuracy, levels = synthetic(SHAPES["line"], count=400, noise=5.0)
    curve = fit_curve(similarity, accuracy, levels, 40.0, draws(len(similarity), 150, 2))
    low, high = interval(curve.resampled["slope"])
    assert low < 10.0 < high and 0 < low and high - low < 3.0
    assert abs(curve.statistics["slope"] - 10.0) < 1.0
    assert curve.statistics["r2_linear"] > curve.statistics["r2_level"] > 0.5
    assert abs(curve.statistics["crossing"] - 0.3) < 0.05
    low, high = interval(curve.resampled["crossing"])
    assert low < 0.3 < high


def test_a_falling_curve_has_a_negative_slope_whose_interval_excludes_zero():
    similarity, _, accuracy, levels = synthetic(lambda s: 90.0 - 80.0 * s, noise=4.0)
    curve = fit_curve(similarity, accuracy, levels, 25.0, draws(len(similarity), 100, 3))
    low, high = interval(curve.resampled["slope"])
    assert high < 0 and low < -8.0 < high


def test_a_crossing_outside_the_range_is_undefined():
    grid = np.linspace(0, 1, 11)
    assert np.isnan(crossing(grid, np.full(11, 60.0), 50.0))  # above everywhere
    assert np.isnan(crossing(grid, np.full(11, 40.0), 50.0))  # never reaches
    assert crossing(grid, grid * 100.0, 45.0) == pytest.approx(0.45)
    assert np.isnan(interval(np.array([0.3] * 90 + [np.nan] * 10))[0])


def seed_rows():
    """Two models, two seeds, six concepts in two levels: model b is a + 10 points."""
    rows = []
    for model, bonus in (("a", 0), ("b", 1)):
        for seed in ("1", "2"):
            for index in range(6):
                rows.append({"model": model, "dataset": f"l{1 + index // 3}", "seed": seed, "wnid": WNIDS[index],
                             "n_test": 10, "top1_correct": 9 - index + bonus - (seed == "2"),
                             "top5_correct": 10, "confused_wnid": WNIDS[(index + 1) % 6],
                             "confused_count": 1 + (seed == "2")})
    return pd.DataFrame(rows)


def test_per_concept_table_over_seeds():
    table = per_concept(seed_rows())
    first = table[(table["model"] == "a") & (table["wnid"] == WNIDS[0])].iloc[0]
    assert first["top1_mean"] == pytest.approx(85.0) and first["top1_std"] == pytest.approx(np.std([90, 80], ddof=1))
    assert first["top1_ci95_low"] < 85.0 < first["top1_ci95_high"] <= 100.0
    assert first["confused_wnid"] == WNIDS[1] and first["confused_share"] == pytest.approx(100.0 * 3 / 20)


def test_paired_difference_and_outliers():
    table = per_concept(seed_rows())
    table["lin_similarity"] = np.tile(np.linspace(0.9, 0.4, 6), 2)
    for column in ("label", "name", "nearest_in1k_name", "confused_name"):
        table[column] = ""
    indices = draws(6, 50, 0)
    curves = {model: fit_curve(rows["lin_similarity"], rows["top1_mean"], rows["dataset"], 40.0, indices)
              for model, rows in table.groupby("model")}
    summary = curve_table(curves, {"a": 40.0, "b": 40.0}, "a", {}, 6).set_index(["model", "statistic"])
    # b is a shifted up: the same slope and fit shape, so every paired difference of the slope is 0
    assert summary.loc[("b", "slope"), "diff_baseline"] == pytest.approx(0.0, abs=1e-9)
    assert summary.loc[("b", "slope"), "diff_ci95_low"] == pytest.approx(0.0, abs=1e-9)
    assert np.isnan(summary.loc[("a", "slope"), "diff_baseline"])
    extremes = outliers(table, table, curves, 2)
    assert len(extremes) == 8 and set(extremes["side"]) == {"above", "below"}
    above = extremes[(extremes["model"] == "a") & (extremes["side"] == "above")]
    assert (above["residual"].diff().dropna() <= 0).all()
