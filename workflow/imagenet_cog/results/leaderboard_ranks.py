"""Ranks with ties: on each column of the leaderboard (a measure on a dataset at an N), within
each protocol and exposure class, which models cannot be told apart; and within each protocol,
every class together (``ALL_RANK_COLUMNS``).

The models are ordered by their value (a higher top-1 or AUROC first, a smaller drop or slope
first). The first model leads a *tie group*; each next model is compared with the group's
leader: where the 95% interval of their difference contains 0, it joins the group, otherwise it
leads a new one. A model's rank is its place; its group's first and last places are the ranks
it cannot be told apart from (``tie_first``, ``tie_last``).

The difference's interval, by what both models have (``compared_by``):

- ``concepts``: a paired bootstrap over the concepts both have (top-1 at N = all on a level:
  the mean over concepts of their per-concept top-1 differences; the slope: the difference of
  the two least-squares slopes refitted on the same drawn concepts);
- ``seeds``: a paired bootstrap over the seeds both have (the mean of the per-seed differences);
- ``standard errors``: no shared concepts or seeds (a published row, the paper giving mean and
  std only; zero-shot's one value, its error a proportion's over the test images): the
  difference +- t * the root of the two squared standard errors, Welch's degrees of freedom;
- ``untested``: nothing to compare (one seed and no error): counted as a tie.

The bootstrap's percentile interval, ``RESAMPLES`` draws seeded by the column, so that a run's
page is the same at every build. With three seeds it spans the smallest to the largest of the
three differences: two models are told apart only where every seed orders them alike.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import special

from imagenet_cog.results.leaderboard_cells import CONCEPT_UNIT, SEED_UNIT, higher_first

RESAMPLES = 1000
CHUNK = 200  # resamples drawn at once (a real run's slope draws 5,000 concepts each)
COLUMN_KEYS = ["measure", "dataset", "shots"]
RANK_COLUMNS = ["rank", "tie_first", "tie_last", "compared_by"]
# the same ranks with every exposure class of a protocol together
ALL_RANK_COLUMNS = [f"{column}_all" for column in RANK_COLUMNS]
CELL_KEYS = ["model", *COLUMN_KEYS]
CONCEPTS, SEEDS, ERRORS, UNTESTED = "concepts", "seeds", "standard errors", "untested"


class Sample(NamedTuple):
    """A model's values on one column, one per key (a seed, a concept), and a concept's similarity."""

    keys: np.ndarray
    values: np.ndarray
    x: np.ndarray


def slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope of each row of ``y`` on the same row of ``x``."""
    centred = x - x.mean(axis=1, keepdims=True)
    variance = (centred ** 2).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (centred * (y - y.mean(axis=1, keepdims=True))).sum(axis=1) / variance


def bootstrap(first: Sample, second: Sample, slope: bool, rng: np.random.Generator) -> tuple[float, float]:
    """Percentile interval of the paired difference over the keys both samples have."""
    _, mine, theirs = np.intersect1d(first.keys, second.keys, assume_unique=True, return_indices=True)
    a, b, x = first.values[mine], second.values[theirs], first.x[mine]
    differences = []
    for start in range(0, RESAMPLES, CHUNK):
        drawn = rng.integers(0, len(a), size=(min(CHUNK, RESAMPLES - start), len(a)))
        if slope:
            differences.append(slopes(x[drawn], a[drawn]) - slopes(x[drawn], b[drawn]))
        else:
            differences.append((a - b)[drawn].mean(axis=1))
    values = np.concatenate(differences)
    values = values[np.isfinite(values)]
    low, high = np.percentile(values, [2.5, 97.5]) if values.size else (math.nan, math.nan)
    return float(low), float(high)


def error_interval(first: dict, second: dict) -> tuple[float, float]:
    """Welch's interval of the difference of two means from their standard errors."""
    variances = first["std_error"] ** 2, second["std_error"] ** 2
    counts = [row["n_seeds"] if row["n_seeds"] >= 2 else math.inf for row in (first, second)]
    denominator = sum(v ** 2 / (n - 1) for v, n in zip(variances, counts) if math.isfinite(n))
    freedom = sum(variances) ** 2 / denominator if denominator > 0 else math.inf
    half = float(special.stdtrit(freedom, 0.975)) * math.sqrt(sum(variances))
    difference = first["value"] - second["value"]
    return difference - half, difference + half


def difference_interval(first: dict, second: dict, samples: dict, rng) -> tuple[float, float, str]:
    """(low, high, compared_by) of ``first`` minus ``second`` (module docstring)."""
    slope = first["measure"] == "concept_slope"
    for unit, compared_by in ((CONCEPT_UNIT, CONCEPTS), (SEED_UNIT, SEEDS)):
        a, b = samples.get((first["model"], unit)), samples.get((second["model"], unit))
        if a is not None and b is not None and np.intersect1d(a.keys, b.keys).size >= 2:
            return (*bootstrap(a, b, slope, rng), compared_by)
    if math.isfinite(first["std_error"]) and math.isfinite(second["std_error"]):
        return (*error_interval(first, second), ERRORS)
    return math.nan, math.nan, UNTESTED


def rank_group(cells: pd.DataFrame, by_unit: dict, descending: bool, seed: int) -> pd.DataFrame:
    """Ranks and tie groups of one column's cells of one protocol (module docstring);
    ``by_unit``: (model, unit) -> that column's Sample of the model."""
    ordered = cells.sort_values(["value", "model"], ascending=[not descending, True]).reset_index(drop=True)
    records = ordered.to_dict("records")
    rng = np.random.default_rng(seed)
    leaders, compared = [0], [""]
    for position in range(1, len(ordered)):
        low, high, unit = difference_interval(records[leaders[-1]], records[position], by_unit, rng)
        tied = unit == UNTESTED or low <= 0 <= high
        leaders.append(leaders[-1] if tied else position)
        compared.append(unit)
    leaders = np.array(leaders)
    last = {leader: int(np.flatnonzero(leaders == leader).max()) + 1 for leader in set(leaders.tolist())}
    return ordered.assign(rank=np.arange(1, len(ordered) + 1), tie_first=leaders + 1,
                          tie_last=[last[leader] for leader in leaders], compared_by=compared)


def with_ranks(cells: pd.DataFrame, samples: pd.DataFrame, groups: pd.Series, seed: int = 0) -> pd.DataFrame:
    """``cells`` (with NaN values left unranked) with RANK_COLUMNS, each column ranked within each
    group of models (``groups``: model -> its group, such as its protocol's digest)."""
    cells = cells.assign(protocol=cells["model"].map(groups))
    ranked = [cells[cells["value"].isna()].assign(compared_by="")]
    present = cells[cells["value"].notna()]
    grouped = {}
    for (measure, dataset, shots, model, unit), rows in samples.groupby([*COLUMN_KEYS, "model", "unit"], sort=False):
        grouped.setdefault((measure, dataset, shots), {})[(model, unit)] = Sample(
            rows["key"].astype(str).to_numpy(), rows["value"].to_numpy(float), rows["x"].to_numpy(float))
    for number, ((measure, dataset, shots, _), group) in enumerate(
            present.groupby([*COLUMN_KEYS, "protocol"], sort=False)):
        by_unit = grouped.get((measure, dataset, shots), {})
        ranked.append(rank_group(group, by_unit, higher_first(measure), seed + number))
    return pd.concat(ranked, ignore_index=True).drop(columns="protocol")


def with_class_ranks(cells: pd.DataFrame, samples: pd.DataFrame, models: pd.DataFrame) -> pd.DataFrame:
    """``cells`` ranked within each protocol and exposure class (RANK_COLUMNS: the CoG paper ranks
    models trained on more data apart, Sec. 4.1) and within each protocol (ALL_RANK_COLUMNS);
    ``models``: each model's protocol and exposure."""
    by_model = models.set_index("model")
    apart = with_ranks(cells, samples, by_model["protocol"] + "|" + by_model["exposure"])
    together = with_ranks(cells, samples, by_model["protocol"]).rename(columns=dict(zip(RANK_COLUMNS, ALL_RANK_COLUMNS)))
    return apart.merge(together[[*CELL_KEYS, *ALL_RANK_COLUMNS]], on=CELL_KEYS, how="left")
