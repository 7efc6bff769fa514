"""Accuracy against similarity to IN-1K, one point per concept: the curve and its numbers.

The fit is isotonic regression (``sklearn.isotonic.IsotonicRegression``, non-decreasing in
similarity): the one assumption is that a concept nearer IN-1K is no harder, and the fit
takes whatever shape the data have, a step at a level's edge or a plateau near IN-1K as
well as a slope. A logistic GLM would impose a sigmoid, and its binomial errors would count
a concept's test images as independent draws, while concepts vary far more than that
(overdispersion): its band would be too narrow.

Summary numbers, each with a 95% interval from a bootstrap over concepts (percentiles of
``resamples`` refits on concepts drawn with replacement):

* ``slope``: the least-squares line's slope, in top-1 points per 0.1 of similarity (the
  average fall, positive when nearer concepts are recognised better);
* ``crossing``: the similarity at which the isotonic fit reaches ``half`` (half the model's
  IN-1K top-1), NaN where the fit stays above or below it over the concepts' range;
  its interval is NaN when more than 2.5% of the refits do not cross (it would reach past
  the range);
* ``r2_similarity``, ``r2_linear``: the share of the per-concept variance the isotonic fit
  and the line explain; ``r2_level``: what the level alone explains (each level's mean).

A paired bootstrap compares two models: the same concepts drawn for both, the difference
of each number per refit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.isotonic import IsotonicRegression

STATISTICS = ("slope", "crossing", "r2_similarity", "r2_linear", "r2_level")
SLOPE_UNIT = 0.1  # the slope is per this much similarity
GRID_POINTS = 101
UNDEFINED_TOLERANCE = 0.025  # the share of refits without a crossing above which its interval is NaN


@dataclass
class Curve:
    grid: np.ndarray  # similarities the fit and band are drawn at
    fitted: np.ndarray  # the isotonic fit on all concepts, at grid
    band: np.ndarray  # [2, grid] the 2.5% and 97.5% percentiles of the refits
    statistics: dict[str, float]  # on all concepts
    resampled: dict[str, np.ndarray]  # each statistic per refit


def isotonic(similarity: np.ndarray, accuracy: np.ndarray) -> IsotonicRegression:
    return IsotonicRegression(increasing=True, out_of_bounds="clip").fit(similarity, accuracy)


def crossing(grid: np.ndarray, fitted: np.ndarray, level: float) -> float:
    """The smallest similarity where the non-decreasing ``fitted`` reaches ``level`` (linear
    between grid points); NaN when it is at or above it at the start or never reaches it."""
    above = np.flatnonzero(fitted >= level)
    if not np.isfinite(level) or above.size == 0 or above[0] == 0:
        return float("nan")
    right, left = above[0], above[0] - 1
    share = (level - fitted[left]) / (fitted[right] - fitted[left])
    return float(grid[left] + share * (grid[right] - grid[left]))


def explained(accuracy: np.ndarray, predicted: np.ndarray) -> float:
    total = float(((accuracy - accuracy.mean()) ** 2).sum())
    return 1.0 - float(((accuracy - predicted) ** 2).sum()) / total if total > 0 else float("nan")


def level_means(accuracy: np.ndarray, levels: np.ndarray) -> np.ndarray:
    _, inverse = np.unique(levels, return_inverse=True)
    return (np.bincount(inverse, weights=accuracy) / np.bincount(inverse))[inverse]


def statistics(similarity, accuracy, levels, half: float, grid: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
    """The summary numbers of one set of concepts, and the isotonic fit at ``grid``."""
    fit = isotonic(similarity, accuracy)
    if np.ptp(similarity) > 0:
        slope, intercept = np.polyfit(similarity, accuracy, 1)
        line = slope * similarity + intercept
    else:
        slope, line = float("nan"), np.full_like(accuracy, accuracy.mean())
    on_grid = fit.predict(grid)
    numbers = {
        "slope": float(slope) * SLOPE_UNIT,
        "crossing": crossing(grid, on_grid, half),
        "r2_similarity": explained(accuracy, fit.predict(similarity)),
        "r2_linear": explained(accuracy, line),
        "r2_level": explained(accuracy, level_means(accuracy, levels)),
    }
    return numbers, on_grid


def draws(count: int, resamples: int, seed: int) -> np.ndarray:
    """[resamples, count] concept indices drawn with replacement; one set serves every model
    of a run, which pairs their refits."""
    return np.random.default_rng(seed).integers(0, count, size=(resamples, count))


def fit_curve(similarity, accuracy, levels, half: float, indices: np.ndarray) -> Curve:
    """The fit, its band and the numbers with their refits on ``indices`` (``draws``)."""
    similarity, accuracy = np.asarray(similarity, float), np.asarray(accuracy, float)
    levels = np.asarray(levels)
    grid = np.linspace(similarity.min(), similarity.max(), GRID_POINTS)
    numbers, fitted = statistics(similarity, accuracy, levels, half, grid)
    curves, resampled = np.empty((len(indices), grid.size)), {name: np.empty(len(indices)) for name in STATISTICS}
    for row, chosen in enumerate(indices):
        values, curves[row] = statistics(similarity[chosen], accuracy[chosen], levels[chosen], half, grid)
        for name, value in values.items():
            resampled[name][row] = value
    band = np.percentile(curves, [2.5, 97.5], axis=0)
    return Curve(grid, fitted, band, numbers, resampled)


def interval(values: np.ndarray) -> tuple[float, float]:
    """The 2.5% and 97.5% percentiles of the refits' values; NaN where too many are undefined."""
    defined = values[np.isfinite(values)]
    if defined.size == 0 or 1 - defined.size / values.size > UNDEFINED_TOLERANCE:
        return float("nan"), float("nan")
    low, high = np.percentile(defined, [2.5, 97.5])
    return float(low), float(high)
