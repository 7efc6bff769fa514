"""Statistics over seeds: intervals, paired tests against the baseline, rank agreement.

- ``mean_interval``: the 95% confidence interval of a mean over seeds, Student t with n - 1
  degrees of freedom and the sample std (ddof=1), intersected with the values' range
  (``TOP1_RANGE`` for top-1, ``DIFFERENCE_RANGE`` for differences of it): a mean of
  percentages cannot leave [0, 100], and with three seeds (t = 4.3) the t interval of a
  model near 100% reaches past it. Cutting it there keeps its coverage (the mean is inside
  the range) and is the honest choice here: a proportion's interval (Wilson, Clopper-Pearson)
  would describe the test images' sampling, not the spread over seeds that the interval is
  about. One seed gives no interval; seeds that all agree give the zero-width interval
  [mean, mean].
- ``paired_tests``: each model against the baseline on the same dataset and N. Probes of the
  same seed share the validation split and the few-shot sample, so the seeds are pairs: the
  test is the paired t-test (``scipy.stats.ttest_rel``) on the per-seed differences. With
  fewer than 2 pairs, or differences that are all equal (zero variance, where t is
  undefined; equal up to floating-point rounding, ``ROUNDING``, counts as equal: a model
  that beats the baseline by the same number of test images on every seed would otherwise
  get t ~ 1e12 from the differences' last bits), no test is made: the p-value is empty and
  the cell is never marked. The
  p-values of a run form one family, Holm-corrected (``holm``); a cell is marked where the
  corrected p-value is below ``ALPHA``.
- ``rank_agreement``: Kendall's tau-b (``scipy.stats.kendalltau``) between the models'
  ranking on IN-1K and on each level, per N, with its two-sided p-value;
  ``kind_rank_agreement`` the same between two probe kinds' rankings (k-NN against linear
  top-1) per dataset and N. Both rank only models with a complete result on both sides.
- ``generalization_drop``: per model and level, top-1 on IN-1K minus top-1 on the level
  (points) and that drop as a percentage of the model's IN-1K top-1 (CoG preprint, Fig. 3c).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from imagenet_cog.core.naming import IN1K, LINEAR

ALPHA = 0.05
CONFIDENCE = 0.95
# Top-1 values (percentages) that differ by less than this are equal: far below one test
# image in a million (1e-4 points), far above float64 rounding of percentages (~1e-14).
ROUNDING = 1e-9
# What a top-1 (percent) and a difference of two can be: mean_interval's bounds.
TOP1_RANGE = (0.0, 100.0)
DIFFERENCE_RANGE = (-100.0, 100.0)
# the columns that identify one cell of the grid besides the model; a seed of one cell is
# paired with the same seed of the baseline's cell with equal keys
CELL_KEYS = ("dataset", "shots")
PAIRED_COLUMNS = [
    "model", "label", "dataset", "shots", "n_pairs", "mean_diff", "std_diff", "ci95_low", "ci95_high",
    "t", "p_value", "p_holm", "significant", "note",
]
RANK_COLUMNS = ["shots", "dataset", "n_models", "kendall_tau", "p_value", "note"]
DROP_COLUMNS = ["model", "label", "shots", "dataset", "in1k_mean", "mean", "drop_points", "drop_percent"]


def equal_up_to_rounding(values: np.ndarray) -> bool:
    """Whether all ``values`` equal the first within ``ROUNDING``."""
    return bool(np.all(np.abs(values - values[0]) <= ROUNDING))


def mean_interval(values: Sequence[float], bounds: tuple[float, float],
                  confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Student-t interval of the mean of ``values`` cut to ``bounds``, the range the values
    lie in (NaN, NaN with fewer than 2)."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return math.nan, math.nan
    mean = float(values.mean())
    if equal_up_to_rounding(values):
        return mean, mean
    sem = float(stats.sem(values))
    low, high = stats.t.interval(confidence, len(values) - 1, loc=mean, scale=sem)
    return max(float(low), bounds[0]), min(float(high), bounds[1])


def mean_intervals(values: np.ndarray, bounds: tuple[float, float],
                   confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """``mean_interval`` of each row of ``values`` (NaN: no value) at once, for tables of
    thousands of rows (one t quantile per count, not a scipy call per row)."""
    values = np.asarray(values, dtype=float)
    present = ~np.isnan(values)
    count = present.sum(axis=1)
    low, high = np.full(len(values), math.nan), np.full(len(values), math.nan)
    rows = np.flatnonzero(count >= 2)
    if rows.size == 0:
        return low, high
    chosen, n = values[rows], count[rows]
    mean = np.nanmean(chosen, axis=1)
    first = chosen[np.arange(len(rows)), np.argmax(present[rows], axis=1)]
    equal = np.nanmax(np.abs(chosen - first[:, None]), axis=1) <= ROUNDING
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * np.nanstd(chosen, axis=1, ddof=1) / np.sqrt(n)
    low[rows] = np.where(equal, mean, np.maximum(mean - half, bounds[0]))
    high[rows] = np.where(equal, mean, np.minimum(mean + half, bounds[1]))
    return low, high


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values; NaN entries are not tests and stay NaN.

    The i-th smallest of m p-values is multiplied by m - i + 1 (i from 1), capped at 1, and
    each adjusted value is at least the one before it in that order.
    """
    p_values = np.asarray(p_values, dtype=float)
    adjusted = np.full(p_values.shape, math.nan)
    tested = np.flatnonzero(~np.isnan(p_values))
    order = tested[np.argsort(p_values[tested], kind="stable")]
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def paired_tests(seed_results: pd.DataFrame, summary: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """One row per model other than the baseline x cell (see the module docstring).

    Only cells where both the model and the baseline are complete (every configured seed,
    the summary's ``complete``) are tested, so a test never runs on a subset of seeds.
    """
    keys = [key for key in CELL_KEYS if key in summary.columns]
    complete = summary[summary["complete"]]
    complete_cells = set(zip(complete["model"], *(complete[key].astype(str) for key in keys)))
    labels = dict(zip(summary["model"], summary["label"]))
    values = seed_results.assign(**{key: seed_results[key].astype(str) for key in keys})
    values["seed"] = values["seed"].astype(str)
    baseline_values = values[values["model"] == baseline].set_index([*keys, "seed"])["test_top1"]
    rows = []
    cells = summary[summary["model"] != baseline][["model", *keys]].astype({key: str for key in keys})
    for cell in cells.itertuples(index=False):
        cell = cell._asdict()
        key = tuple(cell[name] for name in keys)
        row = {"model": cell["model"], "label": labels[cell["model"]], **dict(zip(keys, key))}
        if (cell["model"], *key) not in complete_cells or (baseline, *key) not in complete_cells:
            rows.append({**row, "n_pairs": 0, "note": "no complete result of the model or the baseline"})
            continue
        mine = values[(values["model"] == cell["model"])
                      & np.logical_and.reduce([values[name] == value for name, value in zip(keys, key)])]
        mine = mine.set_index([*keys, "seed"])["test_top1"]
        common = mine.index.intersection(baseline_values.index)
        differences = (mine[common] - baseline_values[common]).to_numpy(float)
        row.update(n_pairs=len(differences), mean_diff=float(differences.mean()))
        if len(differences) < 2:
            rows.append({**row, "note": "fewer than 2 seeds: no test"})
            continue
        low, high = mean_interval(differences, DIFFERENCE_RANGE)
        row.update(std_diff=float(differences.std(ddof=1)), ci95_low=low, ci95_high=high)
        if equal_up_to_rounding(differences):
            rows.append({**row, "note": "equal differences on every seed (zero variance): no t-test"})
            continue
        test = stats.ttest_rel(mine[common].to_numpy(float), baseline_values[common].to_numpy(float))
        rows.append({**row, "t": float(test.statistic), "p_value": float(test.pvalue), "note": ""})
    table = pd.DataFrame(rows, columns=PAIRED_COLUMNS)
    table["p_holm"] = holm(table["p_value"].to_numpy(float))
    table["significant"] = table["p_holm"] < ALPHA
    table["note"] = table["note"].fillna("")
    return table


def kendall_row(scores: pd.DataFrame, first: str, second: str) -> dict:
    """n_models, kendall_tau, p_value and note of the models' rankings by columns ``first``
    and ``second`` of ``scores`` (one row per model; NaN: no complete result)."""
    if first not in scores.columns or second not in scores.columns:
        return {"n_models": 0, "note": f"no complete results of {first} and {second}"}
    pairs = scores[[first, second]].dropna()
    if len(pairs) < 2 or pairs[first].nunique() < 2 or pairs[second].nunique() < 2:
        return {"n_models": len(pairs), "note": "fewer than 2 distinct scores: no ranking to compare"}
    result = stats.kendalltau(pairs[first], pairs[second])
    return {"n_models": len(pairs), "kendall_tau": float(result.statistic), "p_value": float(result.pvalue), "note": ""}


def rank_table(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame(rows, columns=RANK_COLUMNS)
    table["note"] = table["note"].fillna("")
    return table


def rank_agreement(summary: pd.DataFrame, reference: str = IN1K) -> pd.DataFrame:
    """Kendall's tau between the ranking on ``reference`` and on each other dataset, per N."""
    rows = []
    complete = summary[summary["complete"]]
    for shots in dict.fromkeys(summary["shots"]):
        at_shots = complete[complete["shots"] == shots].pivot_table(index="model", columns="dataset", values="mean")
        for dataset in dict.fromkeys(summary["dataset"]):
            if dataset != reference:
                rows.append({"shots": shots, "dataset": dataset, **kendall_row(at_shots, reference, dataset)})
    return rank_table(rows)


def kind_rank_agreement(summary: pd.DataFrame, kind: str, reference_kind: str = LINEAR) -> pd.DataFrame:
    """Kendall's tau between the models' ranking by ``reference_kind``'s top-1 and by
    ``kind``'s, per N and dataset (``summary``: the rows of both kinds, column ``probe``)."""
    rows = []
    complete = summary[summary["complete"]]
    for shots in dict.fromkeys(summary["shots"]):
        at_shots = complete[complete["shots"] == shots]
        for dataset in dict.fromkeys(summary["dataset"]):
            scores = at_shots[at_shots["dataset"] == dataset].pivot_table(index="model", columns="probe", values="mean")
            rows.append({"shots": shots, "dataset": dataset, **kendall_row(scores, reference_kind, kind)})
    return rank_table(rows)


def generalization_drop(summary: pd.DataFrame, reference: str = IN1K) -> pd.DataFrame:
    """Drop from ``reference`` to each other dataset, per model and N (module docstring)."""
    reference_means = summary[summary["dataset"] == reference].set_index(["model", "shots"])["mean"]
    levels = summary[summary["dataset"] != reference].copy()
    levels["in1k_mean"] = [reference_means.get(key, math.nan) for key in zip(levels["model"], levels["shots"])]
    levels["drop_points"] = levels["in1k_mean"] - levels["mean"]
    levels["drop_percent"] = 100.0 * levels["drop_points"] / levels["in1k_mean"]
    return levels[DROP_COLUMNS].reset_index(drop=True)
