"""A series' numbers at each step and its verdicts per level, from its long table (:mod:`.table`).

Per series, probe kind, N, dataset and step (``tables/series_steps``): the top-1 over the
seeds with its 95% interval (``results.statistics.mean_interval``), the gap to IN-1K (the
level's mean top-1 minus IN-1K's at the same step, points), the checkpoint's RankMe, and on
the linear probe's N = all rows the slope of its per-concept curve with its bootstrap interval
(``tables/concept_curve``, the ``analyses.concepts`` numbers, which are the N = all linear
classifiers'; empty where the run has no curve of that checkpoint).

Per series, probe kind, N and dataset (``tables/series_summary``):

* the best step: the highest mean test top-1 (the earliest step of a tie). It is chosen on the
  test images, so it describes the series and is no held-out estimate: the best of several
  noisy means is biased upward. The probes' own hyperparameters are chosen on validation rows
  as everywhere else;
* whether the final checkpoint is below it: a one-sided paired t-test over the seeds
  (``scipy.stats.ttest_rel``, alternative "less": final minus best < 0), a seed's two probes
  sharing its validation split and few-shot draw; Holm-corrected over every test of the
  table (``results.statistics.holm``), significant below ``ALPHA``. Not testable with one
  seed, or when the differences are equal on every seed (the k-NN at N = all, which draws
  nothing). As the best step was chosen on the same test images, the p-value is optimistic:
  a significant gap says the final checkpoint is worse than the series' best on these images;
  it does not say by how much a step chosen in advance would be;
* Spearman's rank correlation (``scipy.stats.spearmanr``) between RankMe and the mean top-1
  over the series' distinct checkpoints (a step standing in for another counted once):
  whether the label-free number orders the checkpoints as the level's top-1 does. Its
  two-sided p-value is a permutation test's (``scipy.stats.permutation_test``), exact over
  every pairing up to 7 checkpoints, else from ``PERMUTATIONS`` seeded draws: a series has few
  checkpoints, where the t approximation's p-value is far too small (0 for three checkpoints
  in the same order, whose exact p-value is 1/3). Three distinct checkpoints at least.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from imagenet_cog.core.naming import IN1K, LINEAR
from imagenet_cog.results.statistics import ALPHA, DIFFERENCE_RANGE, TOP1_RANGE, equal_up_to_rounding, holm, mean_interval

GROUP = ["series", "probe", "shots", "dataset"]
# the per-concept curve is the N = all linear classifiers' (analyses.concepts)
CURVE_SHOTS = "all"
MIN_SPEARMAN_STEPS = 3
# the Spearman test's permutations: every pairing up to 7 checkpoints (7! = 5040), else this many drawn
PERMUTATIONS = 9999
BEST_SELECTION = "test top-1 (descriptive: chosen on the test images)"
STEP_COLUMNS = [
    "series", "step", "step_unit", "model", "same_as", "probe", "shots", "dataset", "n_seeds",
    "top1_mean", "top1_ci95_low", "top1_ci95_high", "top5_mean", "in1k_top1_mean", "gap_in1k",
    "concept_slope", "concept_slope_ci95_low", "concept_slope_ci95_high", "effective_rank",
]
SUMMARY_COLUMNS = [
    "series", "probe", "shots", "dataset", "n_steps", "n_seeds", "best_selected_on", "best_step", "best_top1",
    "best_ci95_low", "best_ci95_high", "final_step", "final_top1", "final_ci95_low", "final_ci95_high",
    "final_minus_best", "diff_ci95_low", "diff_ci95_high", "t", "p_value", "p_holm", "final_below_best", "note",
    "rankme_spearman", "rankme_p_value", "rankme_steps", "rankme_note",
]


def step_numbers(table: pd.DataFrame, slopes: pd.DataFrame) -> pd.DataFrame:
    """One row per series, kind, N, dataset and step (the module docstring); ``slopes``: the
    concept curve's slope rows (model, value, ci95_low, ci95_high)."""
    keys = [*GROUP, "step"]
    per_step = table.groupby(keys, sort=False).agg(
        step_unit=("step_unit", "first"), model=("model", "first"), same_as=("same_as", "first"),
        n_seeds=("seed", "size"), top1_mean=("test_top1", "mean"), top5_mean=("test_top5", "mean"),
        effective_rank=("effective_rank", "first"),
    ).reset_index()
    intervals = table.groupby(keys, sort=False)["test_top1"].apply(lambda values: mean_interval(values, TOP1_RANGE))
    per_step["top1_ci95_low"] = [intervals[key][0] for key in per_step[keys].itertuples(index=False)]
    per_step["top1_ci95_high"] = [intervals[key][1] for key in per_step[keys].itertuples(index=False)]
    in1k = per_step[per_step["dataset"] == IN1K].set_index(["series", "probe", "shots", "step"])["top1_mean"]
    per_step["in1k_top1_mean"] = [in1k.get(key, math.nan) for key in
                                  per_step[["series", "probe", "shots", "step"]].itertuples(index=False)]
    per_step["gap_in1k"] = (per_step["top1_mean"] - per_step["in1k_top1_mean"]).where(per_step["dataset"] != IN1K)
    curve = slopes.set_index("model")
    on_curve = (per_step["probe"] == LINEAR) & (per_step["shots"] == CURVE_SHOTS)
    stand_in = per_step["same_as"].where(per_step["same_as"] != "", per_step["model"])
    for column, source in (("concept_slope", "value"), ("concept_slope_ci95_low", "ci95_low"),
                           ("concept_slope_ci95_high", "ci95_high")):
        values = [curve[source].get(model, math.nan) for model in stand_in]
        per_step[column] = pd.Series(values, index=per_step.index, dtype=float).where(on_curve)
    return per_step[STEP_COLUMNS]


def seed_values(table: pd.DataFrame, step: int) -> pd.Series:
    """One group's top-1 per seed at ``step``."""
    return table[table["step"] == step].set_index("seed")["test_top1"]


def final_against_best(group: pd.DataFrame, steps: pd.DataFrame) -> dict:
    """The best and final steps of one group and the paired test of final < best."""
    best = steps.sort_values(["top1_mean", "step"], ascending=[False, True]).iloc[0]
    final = steps.sort_values("step").iloc[-1]
    row = {"best_selected_on": BEST_SELECTION, "best_step": best["step"], "best_top1": best["top1_mean"],
           "best_ci95_low": best["top1_ci95_low"], "best_ci95_high": best["top1_ci95_high"],
           "final_step": final["step"], "final_top1": final["top1_mean"],
           "final_ci95_low": final["top1_ci95_low"], "final_ci95_high": final["top1_ci95_high"]}
    best_values, final_values = seed_values(group, best["step"]), seed_values(group, final["step"])
    common = final_values.index.intersection(best_values.index)
    differences = (final_values[common] - best_values[common]).to_numpy(float)
    row["final_minus_best"] = float(differences.mean())
    if stand_in(final) == stand_in(best):
        return {**row, "note": "the final checkpoint is the best"}
    if len(differences) < 2:
        return {**row, "note": "not testable: one seed"}
    row["diff_ci95_low"], row["diff_ci95_high"] = mean_interval(differences, DIFFERENCE_RANGE)
    if equal_up_to_rounding(differences):
        return {**row, "note": "not testable: equal differences on every seed (zero variance)"}
    test = stats.ttest_rel(final_values[common].to_numpy(float), best_values[common].to_numpy(float), alternative="less")
    return {**row, "t": float(test.statistic), "p_value": float(test.pvalue), "note": "paired t-test over seeds, one-sided"}


def stand_in(step: pd.Series) -> str:
    return step["same_as"] or step["model"]


def repeats(steps: pd.DataFrame) -> pd.Series:
    """The steps whose checkpoint repeats an earlier step's content (``same_as`` names a step of
    the series): counted once. A step a configured model stands for is a checkpoint of its own."""
    return steps["same_as"].isin(steps["model"])


def rank_correlation(steps: pd.DataFrame) -> dict:
    """Spearman's rho between RankMe and the mean top-1 over the distinct checkpoints of one group."""
    distinct = steps[~repeats(steps)].dropna(subset=["effective_rank", "top1_mean"])
    row = {"rankme_steps": len(distinct)}
    if len(distinct) < MIN_SPEARMAN_STEPS:
        return {**row, "rankme_note": f"fewer than {MIN_SPEARMAN_STEPS} checkpoints with RankMe"}
    if distinct["effective_rank"].nunique() < 2 or distinct["top1_mean"].nunique() < 2:
        return {**row, "rankme_note": "constant over the checkpoints: no ranking"}
    ranks = (stats.rankdata(distinct["effective_rank"]), stats.rankdata(distinct["top1_mean"]))
    test = stats.permutation_test(ranks, pearson, permutation_type="pairings", vectorized=True,
                                  n_resamples=PERMUTATIONS, random_state=np.random.default_rng(0))
    rho = stats.spearmanr(distinct["effective_rank"], distinct["top1_mean"]).statistic
    return {**row, "rankme_spearman": float(rho), "rankme_p_value": float(test.pvalue), "rankme_note": ""}


def pearson(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """Pearson's r along ``axis``: Spearman's rho of ranks, vectorised for the permutation test."""
    x, y = x - x.mean(axis=axis, keepdims=True), y - y.mean(axis=axis, keepdims=True)
    return (x * y).sum(axis=axis) / np.sqrt((x * x).sum(axis=axis) * (y * y).sum(axis=axis))


def series_summary(table: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per series, kind, N and dataset (the module docstring), Holm over its tests."""
    rows = []
    step_groups = dict(list(steps.groupby(GROUP, sort=False)))
    for key, group in table.groupby(GROUP, sort=False):
        group_steps = step_groups[key]
        rows.append({**dict(zip(GROUP, key)), "n_steps": int((~repeats(group_steps)).sum()),
                     "n_seeds": int(group["seed"].nunique()),
                     **final_against_best(group, group_steps), **rank_correlation(group_steps)})
    summary = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    summary["p_holm"] = holm(summary["p_value"].to_numpy(float))
    summary["final_below_best"] = np.where(summary["p_holm"].isna(), "", np.where(summary["p_holm"] < ALPHA, "yes", "no"))
    summary[["note", "rankme_note"]] = summary[["note", "rankme_note"]].fillna("")
    return summary
