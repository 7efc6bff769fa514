"""The leaderboard: every model of a run beside the paper's 31 published ones, with 95%
intervals, ranks with their ties, provenance and the protocol each number was measured under.

A *cell* is one number of one model: a measure (``MEASURES``) on a dataset at an N, its mean
over seeds and 95% interval. A reproduced cell comes from this run's tables: top-1 from the
results summary (the linear probe on IN-1K and Lin's levels, every N), the drop from the first
level to the last (each seed's L1 top-1 minus its L5 top-1, in points and in % of its L1
top-1, mean over seeds with a t interval), the per-concept curve's slope and interval
(``tables/concept_curve.csv``), the detection AUROC of each level (the per-seed tables of
``analyses-detection``, mean and t interval as ``tables/detection_<score>.csv``) and the
top-1 of a probe kind off the grid (zero-shot: one value, no seeds; Wilson's interval over its
test images). A published cell is the
paper's mean and std over 5 seeds (``resources/published_top1.tsv``), its interval the t
interval of that mean. A reproduced model with a ``paper_name`` carries its published top-1
and the difference beside each of its top-1 cells.

Beside the cells go their *samples*, what a paired comparison of two models resamples: each
seed's value, and for top-1 at N = all on a level and for the slope, each concept's top-1
(mean over seeds, ``tables/concepts.csv``; for the slope with its Lin similarity). Ranks and
ties are :mod:`.leaderboard_ranks`', the tables and the page :mod:`.leaderboard_page`'s, the
commands :mod:`.leaderboard`'s.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import special, stats

from imagenet_cog.core.naming import IN1K, is_level
from imagenet_cog.models.pretraining import UNDECLARED, Pretraining
from imagenet_cog.results.paper import resolve_paper_names
from imagenet_cog.results.protocol import PAPER_DIGEST
from imagenet_cog.results.statistics import DIFFERENCE_RANGE, TOP1_RANGE, mean_interval
from imagenet_cog.results.summary import kind_seed_results
from imagenet_cog.results.tables import display_label

REPRODUCED, PUBLISHED = "reproduced", "published"
# measure -> (title, whether a higher value ranks first)
MEASURES = {
    "top1": ("top-1 (%)", True),
    "drop_points": ("drop L1 to L5 (points)", False),
    "drop_percent": ("drop L1 to L5 (% of L1)", False),
    "concept_slope": ("per-concept slope", False),
    "detection_auroc": ("detection AUROC (%)", True),
}
OFF_GRID_MEASURE = "{kind}_top1"
# the dataset of the measures over all of Lin's levels (the slope)
ALL_LEVELS = "levels"
MODEL_COLUMNS = ["model", "label", "category", "provenance", "protocol", "paper_name", "today", "exposure",
                 "pretraining_data"]
# a model no --pretraining names (imagenet_cog.models.pretraining)
NOT_STATED = Pretraining(None, UNDECLARED)
CELL_COLUMNS = ["model", "dataset", "measure", "shots", "value", "ci95_low", "ci95_high", "std_error", "n_seeds",
                "published_value", "published_diff"]
# what a sample is a value of: one seed's, one concept's
SEED_UNIT, CONCEPT_UNIT = "seed", "concept"
SAMPLE_COLUMNS = ["model", "dataset", "measure", "shots", "unit", "key", "value", "x"]
# the paper's category prefixes (supp. Tables 5-10), as config/paper_models.yaml names them
PAPER_CATEGORIES = {"a": "architecture", "s": "self-supervision", "r": "regularization", "d": "data"}
PAPER_SEEDS = 5
PAPER_STD_FLOOR = 0.05  # a std printed as 0.0 is below 0.05 (as results.published takes it)
PUBLISHED_PREFIX = "paper:"


def higher_first(measure: str) -> bool:
    """Whether a higher value of ``measure`` ranks first (a kind off the grid's top-1: yes)."""
    return MEASURES.get(measure, ("", True))[1]


def t_interval(mean: float, std_error: float, n: int, bounds: tuple[float, float]) -> tuple[float, float]:
    if n < 2 or not math.isfinite(std_error):
        return math.nan, math.nan
    half = float(special.stdtrit(n - 1, 0.975)) * std_error
    return max(mean - half, bounds[0]), min(mean + half, bounds[1])


def cell(model, dataset, measure, shots, values, bounds=TOP1_RANGE, **extra) -> dict:
    """A cell of ``values`` (one per seed): mean, t interval, standard error, count."""
    values = np.asarray(values, dtype=float)
    low, high = mean_interval(values, bounds)
    std_error = float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan
    return {"model": model, "dataset": dataset, "measure": measure, "shots": shots, "value": float(values.mean()),
            "ci95_low": low, "ci95_high": high, "std_error": std_error, "n_seeds": len(values), **extra}


def model_rows(summary: pd.DataFrame, models: dict, protocol: str, pretraining: dict[str, Pretraining]) -> pd.DataFrame:
    """One row per reproduced model, in config order, with its exposure (``pretraining``: model ->
    what it was pretrained on)."""
    rows = summary.drop_duplicates("model")
    return pd.DataFrame([{
        "model": row.model, "label": display_label(pd.Series(row._asdict())), "category": row.category,
        "provenance": REPRODUCED, "protocol": protocol, "paper_name": (models.get(row.model) or {}).get("paper_name") or "",
        "today": not (models.get(row.model) or {}).get("paper_name"),
        "exposure": pretraining.get(row.model, NOT_STATED).exposure,
        "pretraining_data": pretraining.get(row.model, NOT_STATED).data_text(),
    } for row in rows.itertuples()], columns=MODEL_COLUMNS)


def top1_cells(summary: pd.DataFrame, seed_results: pd.DataFrame) -> tuple[list[dict], list[dict]]:
    """Top-1 of every complete cell of the summary's linear probe on IN-1K and Lin's levels, with
    the summary's mean and interval; each seed's top-1 as samples."""
    seeds = kind_seed_results(seed_results)
    cells, samples = [], []
    for row in summary[summary["complete"]].itertuples():
        chosen = seeds[(seeds["model"] == row.model) & (seeds["dataset"] == row.dataset) & (seeds["shots"] == row.shots)]
        values = chosen["test_top1"].to_numpy(float)
        std_error = float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan
        cells.append({"model": row.model, "dataset": row.dataset, "measure": "top1", "shots": row.shots,
                      "value": row.mean, "ci95_low": row.ci95_low, "ci95_high": row.ci95_high,
                      "std_error": std_error, "n_seeds": int(row.n_seeds)})
        samples += [{"model": row.model, "dataset": row.dataset, "measure": "top1", "shots": row.shots, "unit": SEED_UNIT,
                     "key": seed, "value": value} for seed, value in zip(chosen["seed"], values)]
    return cells, samples


def drop_cells(seed_results: pd.DataFrame, first: str, last: str) -> tuple[list[dict], list[dict]]:
    """Per model, each seed's top-1 on ``first`` minus on ``last`` at N = all (points, % of ``first``)."""
    seeds = kind_seed_results(seed_results)
    seeds = seeds[seeds["shots"] == "all"]
    wide = seeds.pivot_table(index=["model", "seed"], columns="dataset", values="test_top1").reset_index()
    cells, samples = [], []
    if first not in wide or last not in wide:
        return cells, samples
    wide = wide.dropna(subset=[first, last])
    for model, rows in wide.groupby("model", sort=False):
        points = (rows[first] - rows[last]).to_numpy(float)
        percent = 100.0 * points / rows[first].to_numpy(float)
        for measure, values in (("drop_points", points), ("drop_percent", percent)):
            cells.append(cell(model, last, measure, "all", values, DIFFERENCE_RANGE))
            samples += [{"model": model, "dataset": last, "measure": measure, "shots": "all", "unit": SEED_UNIT,
                         "key": seed, "value": value} for seed, value in zip(rows["seed"], values)]
    return cells, samples


def concept_samples(concepts: pd.DataFrame, levels: list[str]) -> list[dict]:
    """Each concept's top-1 (mean over seeds) on Lin's levels: the samples of top-1 at N = all,
    and with Lin similarity those of the slope (the concepts every model has, as the curve's)."""
    rows = concepts[concepts["dataset"].isin(levels)]
    samples = [{"model": row.model, "dataset": row.dataset, "measure": "top1", "shots": "all", "unit": CONCEPT_UNIT,
                "key": row.wnid, "value": row.top1_mean} for row in rows.itertuples()]
    curve = rows[rows["lin_similarity"].notna()]
    shared = curve.groupby(["dataset", "wnid"])["model"].transform("nunique") == curve["model"].nunique()
    samples += [{"model": row.model, "dataset": ALL_LEVELS, "measure": "concept_slope", "shots": "all",
                 "unit": CONCEPT_UNIT, "key": f"{row.dataset}/{row.wnid}", "value": row.top1_mean, "x": row.lin_similarity}
                for row in curve[shared].itertuples()]
    return samples


def slope_cells(curve: pd.DataFrame) -> list[dict]:
    """Each model's slope as tables/concept_curve.csv has it (bootstrap interval over concepts)."""
    rows = curve[curve["statistic"] == "slope"]
    return [{"model": row.model, "dataset": ALL_LEVELS, "measure": "concept_slope", "shots": "all", "value": row.value,
             "ci95_low": row.ci95_low, "ci95_high": row.ci95_high, "std_error": math.nan, "n_seeds": math.nan}
            for row in rows.itertuples()]


def detection_cells(detection: pd.DataFrame, score: str) -> tuple[list[dict], list[dict]]:
    """AUROC (%) of ``score`` per model and level, mean and interval over the probe seeds (one
    value for a seed-free score)."""
    rows = detection[detection["score"] == score]
    cells, samples = [], []
    for (model, dataset), group in rows.groupby(["model", "dataset"], sort=False):
        values = group["auroc"].to_numpy(float)
        cells.append(cell(model, dataset, "detection_auroc", "all", values))
        if len(values) > 1:
            samples += [{"model": model, "dataset": dataset, "measure": "detection_auroc", "shots": "all",
                         "unit": SEED_UNIT, "key": seed, "value": value} for seed, value in zip(group["seed"], values)]
    return cells, samples


def off_grid_cells(paths: list[Path]) -> list[dict]:
    """Top-1 of a probe kind off the grid (zero-shot): one value per model and dataset (no seeds
    to spread over), its interval Wilson's and its standard error a proportion's over the test
    images."""
    cells = []
    for path in paths:
        result = json.loads(Path(path).read_text())
        if "test_top1" not in result:  # the open set: every dataset's images at once
            continue
        share, count = result["test_top1"] / 100.0, int(result["n_test"])
        interval = stats.binomtest(round(share * count), count).proportion_ci(method="wilson")
        cells.append({"model": result["model"], "dataset": result["dataset"],
                      "measure": OFF_GRID_MEASURE.format(kind=result["probe"]), "shots": "all",
                      "value": float(result["test_top1"]), "ci95_low": 100.0 * interval.low,
                      "ci95_high": 100.0 * interval.high,
                      "std_error": 100.0 * math.sqrt(share * (1 - share) / count), "n_seeds": 1})
    return cells


def published_category(name: str) -> str:
    match = re.match(r"^([asrd])-", name)
    return PAPER_CATEGORIES[match.group(1)] if match else "baseline"


def published_rows(published: pd.DataFrame, datasets: list[str],
                   pretraining: dict[str, Pretraining]) -> tuple[pd.DataFrame, list[dict]]:
    """The paper's models (their exposure from ``pretraining``, by name) and their top-1 cells (and
    drops) on ``datasets``, every N it has."""
    models = pd.DataFrame([{"model": PUBLISHED_PREFIX + name, "label": name, "category": published_category(name),
                            "provenance": PUBLISHED, "protocol": PAPER_DIGEST, "paper_name": name, "today": False,
                            "exposure": pretraining.get(name, NOT_STATED).exposure,
                            "pretraining_data": pretraining.get(name, NOT_STATED).data_text()}
                           for name in dict.fromkeys(published["model"])], columns=MODEL_COLUMNS)
    cells, chosen = [], published[published["dataset"].isin(datasets)]
    sample_std = chosen["std"].clip(lower=PAPER_STD_FLOOR) * math.sqrt(PAPER_SEEDS / (PAPER_SEEDS - 1))
    for row, std in zip(chosen.itertuples(), sample_std):
        std_error = std / math.sqrt(PAPER_SEEDS)
        low, high = t_interval(row.mean, std_error, PAPER_SEEDS, TOP1_RANGE)
        cells.append({"model": PUBLISHED_PREFIX + row.model, "dataset": row.dataset, "measure": "top1",
                      "shots": row.shots, "value": row.mean, "ci95_low": low, "ci95_high": high,
                      "std_error": std_error, "n_seeds": PAPER_SEEDS})
    return models, cells + published_drops(cells, datasets)


def published_drops(cells: list[dict], datasets: list[str]) -> list[dict]:
    """The drop from the first level to the last of each published model, from the two means;
    its standard error as if the two levels' seeds were independent (the paper pairs none)."""
    levels = [dataset for dataset in datasets if is_level(dataset)]
    if len(levels) < 2:
        return []
    at_all = {(c["model"], c["dataset"]): c for c in cells if c["shots"] == "all"}
    drops = []
    for model in dict.fromkeys(c["model"] for c in cells):
        first, last = at_all.get((model, levels[0])), at_all.get((model, levels[-1]))
        if first is None or last is None:
            continue
        points = first["value"] - last["value"]
        std_error = math.hypot(first["std_error"], last["std_error"])
        for measure, value, error in (("drop_points", points, std_error),
                                      ("drop_percent", 100.0 * points / first["value"], 100.0 * std_error / first["value"])):
            low, high = t_interval(value, error, PAPER_SEEDS, DIFFERENCE_RANGE)
            drops.append({"model": model, "dataset": last["dataset"], "measure": measure, "shots": "all",
                          "value": value, "ci95_low": low, "ci95_high": high, "std_error": error, "n_seeds": PAPER_SEEDS})
    return drops


def with_published(cells: pd.DataFrame, published: pd.DataFrame, models: dict) -> pd.DataFrame:
    """Each reproduced top-1 cell of a model with a paper_name: its published mean and ours minus it."""
    mapping = resolve_paper_names(models, list(dict.fromkeys(published["model"])))
    paper = published.set_index(["model", "dataset", "shots"])["mean"]
    keys = [(mapping.get(model), dataset, shots) if measure == "top1" else None
            for model, dataset, shots, measure in zip(cells["model"], cells["dataset"], cells["shots"], cells["measure"])]
    cells = cells.copy()
    cells["published_value"] = [float(paper[key]) if key and key in paper.index else math.nan for key in keys]
    cells["published_diff"] = cells["value"] - cells["published_value"]
    return cells


def run_datasets(summary: pd.DataFrame) -> list[str]:
    """IN-1K and Lin's levels of the run, in its order."""
    return [dataset for dataset in dict.fromkeys(summary["dataset"]) if dataset == IN1K or is_level(dataset)]
