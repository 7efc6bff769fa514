"""The ``concept-results`` command: per-concept accuracy tables, the curve against similarity, outliers.

* ``tables/concepts.csv``: per model, dataset and concept (the ``analyses-concepts`` seed
  tables, :mod:`.concept_accuracy`): the level set's similarity measure and its value, Lin's
  similarity, the nearest IN-1K concept (Lin's), n_test, top-1 and top-5 (%) mean, std and
  95% interval over the probe seeds (:func:`imagenet_cog.results.statistics.mean_interval`),
  and the concept most often put first instead of it with its share of the test images;
* ``tables/concept_curve.*``: per model, over the concepts of Lin's levels, the numbers of
  :mod:`.concept_curve` with their bootstrap intervals, and each model's paired bootstrap
  difference to the baseline model;
* ``tables/concept_outliers.*``: per model, the concepts furthest above and below its curve;
* ``figures/concept_curve.*``: top-1 against Lin similarity, a point per concept, each
  model's isotonic fit with its 95% band, the levels' similarity ranges marked; given each model's
  exposure class (``--exposures``), the fits of the models pretrained beyond IN-1K set apart
  (``results.exposure``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from imagenet_cog.analyses.concept_accuracy import SEED_COLUMNS
from imagenet_cog.analyses.concept_curve import STATISTICS, Curve, draws, fit_curve, interval
from imagenet_cog.analyses.detection_report import model_label, styles
from imagenet_cog.core.command_line import setup_logging
from imagenet_cog.core.io import atomic_output, read_tsv
from imagenet_cog.core.layout import CONCEPT_CURVE, CONCEPT_OUTLIERS, CONCEPT_TABLE, Layout
from imagenet_cog.core.naming import IN1K, LIN, RANDOM, dataset_title, level_set_of
from imagenet_cog.core.plots import save_figure, set_theme
from imagenet_cog.core.tables import write_tidy_table
from imagenet_cog.results.exposure import add_exposures_option, read_exposures
from imagenet_cog.results.statistics import TOP1_RANGE, mean_intervals

log = logging.getLogger("imagenet_cog.analyses.concept_report")

KEYS = ["model", "dataset", "wnid"]

STATISTIC_TITLES = {
    "slope": "slope (top-1 points per 0.1 Lin similarity)",
    "crossing": "Lin similarity where the fit crosses half the IN-1K top-1",
    "r2_similarity": "variance explained by similarity (isotonic fit)",
    "r2_linear": "variance explained by similarity (line)",
    "r2_level": "variance explained by the level alone",
}


def read_seed_tables(paths: Sequence[Path]) -> pd.DataFrame:
    frames = [pd.read_csv(path, sep="\t", dtype={"seed": str, "confused_wnid": str}, keep_default_na=False)
              for path in paths]
    for path, frame in zip(paths, frames):
        if list(frame.columns) != SEED_COLUMNS:
            raise ValueError(f"{path}: columns {list(frame.columns)}, not {SEED_COLUMNS}; delete it and re-run "
                             "analyses_concepts.")
    return pd.concat(frames, ignore_index=True)


def over_seeds(seeds: pd.DataFrame, column: str, prefix: str) -> pd.DataFrame:
    """Per concept (KEYS), the percentage ``column`` / n_test: mean, std (ddof 1), 95% interval."""
    wide = seeds.assign(value=100.0 * seeds[column] / seeds["n_test"]).pivot(index=KEYS, columns="seed", values="value")
    low, high = mean_intervals(wide.to_numpy(), TOP1_RANGE)
    return pd.DataFrame({f"{prefix}_mean": wide.mean(axis=1), f"{prefix}_std": wide.std(axis=1, ddof=1),
                         f"{prefix}_ci95_low": low, f"{prefix}_ci95_high": high}, index=wide.index)


def most_confused(seeds: pd.DataFrame) -> pd.DataFrame:
    """Per concept, the concept whose count, summed over the seeds where it was that seed's
    most-confused, is largest (ties: the smaller wnid), and its share of every seed's test images."""
    summed = (seeds[seeds["confused_wnid"] != ""].groupby([*KEYS, "confused_wnid"], as_index=False)["confused_count"]
              .sum().sort_values([*KEYS, "confused_count", "confused_wnid"], ascending=[True] * 3 + [False, True])
              .drop_duplicates(KEYS).set_index(KEYS))
    tested = seeds.groupby(KEYS)["n_test"].sum()
    frame = pd.DataFrame({"confused_wnid": summed["confused_wnid"]}, index=tested.index).fillna("")
    frame["confused_share"] = (100.0 * summed["confused_count"].reindex(tested.index) / tested).fillna(0.0)
    return frame


def per_concept(seeds: pd.DataFrame) -> pd.DataFrame:
    """Per (model, dataset, wnid): n_test, the seeds, top-1 and top-5 over them, the most-confused concept."""
    counts = seeds.groupby(KEYS).agg(n_test=("n_test", "first"), n_seeds=("seed", "size"))
    parts = [counts, over_seeds(seeds, "top1_correct", "top1"), over_seeds(seeds, "top5_correct", "top5"),
             most_confused(seeds)]
    return pd.concat(parts, axis=1).reset_index()


def similarities(ranking: Path, level_set_rankings: dict[str, Path]) -> tuple[dict, dict]:
    """wnid -> Lin ranking row; (level set, wnid) -> that set's similarity."""
    lin = {row["wnid"]: row for row in read_tsv(ranking)}
    measured = {(name, row["wnid"]): float(row["sim_in1k"])
                for name, path in level_set_rankings.items() for row in read_tsv(path)}
    return lin, measured


def concept_table(concepts: pd.DataFrame, lin: dict, measured: dict, models: dict) -> pd.DataFrame:
    def measure(dataset):  # a random draw has no measure: only Lin's similarity
        name = level_set_of(dataset)
        return "" if name == RANDOM else name

    # published levels (levels.source: published) may hold concepts the run's own ranking has not
    # ranked: they keep their accuracy, with no similarity, and stay off the curve
    unranked = {"name": "", "sim_in1k": math.nan, "nearest_in1k_wnid": "", "nearest_in1k_name": ""}

    def ranked(wnid):
        return lin.get(wnid, unranked)

    def value(dataset, wnid):
        name = measure(dataset)
        if name == LIN:
            return float(ranked(wnid)["sim_in1k"])
        return measured.get((name, wnid), math.nan)

    missing = sorted(set(concepts["wnid"]) - set(lin))
    if missing:
        log.warning("%d concepts (%s...) are not in the Lin ranking (levels/ranking.tsv): no similarity, off the curve",
                    len(missing), ", ".join(missing[:3]))
    table = concepts.copy()
    table.insert(1, "label", [model_label(models, model) for model in table["model"]])
    table.insert(4, "name", [ranked(wnid)["name"] for wnid in table["wnid"]])
    table.insert(5, "measure", [measure(dataset) for dataset in table["dataset"]])
    table.insert(6, "similarity", [value(d, w) for d, w in zip(table["dataset"], table["wnid"])])
    table.insert(7, "lin_similarity", [float(ranked(wnid)["sim_in1k"]) for wnid in table["wnid"]])
    table.insert(8, "nearest_in1k_wnid", [ranked(wnid)["nearest_in1k_wnid"] for wnid in table["wnid"]])
    table.insert(9, "nearest_in1k_name", [ranked(wnid)["nearest_in1k_name"] for wnid in table["wnid"]])
    table["confused_name"] = [ranked(wnid)["name"] for wnid in table["confused_wnid"]]
    return table


def curve_points(table: pd.DataFrame, levels: Sequence[str]) -> pd.DataFrame:
    """Lin's levels' concepts that every model has (a model missing one would unpair the bootstrap):
    model, dataset, wnid, lin_similarity, top1_mean."""
    rows = table[table["dataset"].isin(levels) & table["lin_similarity"].notna()]
    counts = rows.groupby(["dataset", "wnid"])["model"].nunique()
    shared = counts[counts == rows["model"].nunique()].index
    kept = rows.set_index(["dataset", "wnid"]).loc[shared].reset_index()
    if len(shared) < len(counts):
        log.warning("%d concepts left out of the curve: not every model has them", len(counts) - len(shared))
    return kept.sort_values(["model", "dataset", "wnid"])


def fit_models(points: pd.DataFrame, halves: dict[str, float], resamples: int, seed: int) -> dict[str, Curve]:
    """Each model's curve, the concepts drawn alike for every model (pairing the refits)."""
    curves, indices = {}, None
    for model, rows in points.groupby("model", sort=False):
        if indices is None:
            indices = draws(len(rows), resamples, seed)
        curves[model] = fit_curve(rows["lin_similarity"].to_numpy(), rows["top1_mean"].to_numpy(),
                                  rows["dataset"].to_numpy(), halves.get(model, math.nan), indices)
    return curves


def curve_table(curves: dict[str, Curve], halves: dict, baseline: str, models: dict, n_concepts: int) -> pd.DataFrame:
    """Per model and statistic: value, 95% interval, and the paired difference to the baseline."""
    records = []
    for model, curve in curves.items():
        for name in STATISTICS:
            low, high = interval(curve.resampled[name])
            record = {"model": model, "label": model_label(models, model), "statistic": name,
                      "description": STATISTIC_TITLES[name], "n_concepts": n_concepts,
                      "half_in1k_top1": halves.get(model, math.nan), "value": curve.statistics[name],
                      "ci95_low": low, "ci95_high": high}
            paired = baseline in curves and model != baseline
            difference = curve.resampled[name] - curves[baseline].resampled[name] if paired else None
            record["diff_baseline"] = curve.statistics[name] - curves[baseline].statistics[name] if paired else math.nan
            record["diff_ci95_low"], record["diff_ci95_high"] = interval(difference) if paired else (math.nan, math.nan)
            records.append(record)
    return pd.DataFrame(records)


def outliers(table: pd.DataFrame, points: pd.DataFrame, curves: dict[str, Curve], count: int) -> pd.DataFrame:
    """Per model, the ``count`` concepts furthest above and below its curve."""
    frames = []
    for model, rows in points.groupby("model", sort=False):
        curve = curves[model]
        fitted = np.interp(rows["lin_similarity"], curve.grid, curve.fitted)
        rows = rows.assign(fitted=fitted, residual=rows["top1_mean"] - fitted)
        for side, ascending in (("above", False), ("below", True)):
            chosen = rows.sort_values(["residual", "wnid"], ascending=[ascending, True]).head(count)
            frames.append(chosen.assign(side=side, rank=np.arange(1, len(chosen) + 1)))
    columns = ["model", "label", "side", "rank", "dataset", "wnid", "name", "lin_similarity", "top1_mean", "fitted",
               "residual", "nearest_in1k_name", "confused_name", "confused_share"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def curve_figure(points: pd.DataFrame, curves: dict[str, Curve], halves: dict, models: dict, levels: Sequence[str],
                 exposures: dict[str, str] | None = None):
    """Top-1 against Lin similarity (IN-1K to the left): concepts, fits, bands, the levels' ranges."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    names = list(curves)
    look = styles(names, {model: model_label(models, model) for model in names}, exposures)
    spans = points.groupby("dataset")["lin_similarity"].agg(["min", "max"]).reindex(levels).dropna()
    for position, (dataset, span) in enumerate(spans.iterrows()):
        ax.axvspan(span["min"], span["max"], color="grey", alpha=0.12 if position % 2 == 0 else 0.06, linewidth=0)
        ax.text((span["min"] + span["max"]) / 2, 1.01, dataset_title(dataset), transform=ax.get_xaxis_transform(),
                ha="center", va="bottom", fontsize=7)
    for model in names:
        rows, curve, style = points[points["model"] == model], curves[model], look[model]
        ax.scatter(rows["lin_similarity"], rows["top1_mean"], color=style["color"], marker=style["marker"], s=8,
                   alpha=0.35, linewidths=0)
        ax.plot(curve.grid, curve.fitted, **look.line(model))
        ax.fill_between(curve.grid, curve.band[0], curve.band[1], color=style["color"], alpha=0.2, linewidth=0)
        if math.isfinite(halves.get(model, math.nan)):
            ax.axhline(halves[model], color=style["color"], linestyle=":", linewidth=0.8)
    ax.invert_xaxis()
    ax.set_xlabel("Lin similarity to IN-1K (further from IN-1K to the right)")
    ax.set_ylabel("Top-1 of the concept, N = all (%)")
    title = look.legend_title(markers=False)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=min(len(names), 3), frameon=False, fontsize=7,
              **({"title": title, "title_fontsize": 7} if title else {}))
    return fig


def in1k_halves(layout: Layout, models: Sequence[str], seeds: Sequence[str]) -> dict[str, float]:
    """Half of each model's IN-1K top-1: its linear probe at N = all, mean over ``seeds``."""
    halves = {}
    for model in models:
        top1 = [json.loads(Path(layout.probe_result(model, IN1K, "all", seed)).read_text())["test_top1"]
                for seed in seeds]
        halves[model] = float(np.mean(top1)) / 2 if top1 else math.nan
    return halves


def write_outputs(layout: Layout, table, summary, extremes, fig, resamples: int, baseline: str) -> None:
    with atomic_output(layout.table(CONCEPT_TABLE, "csv")) as temporary:
        table.to_csv(temporary, index=False)
    write_tidy_table(
        layout, CONCEPT_CURVE, summary,
        f"Per-concept top-1 against Lin similarity to IN-1K: the numbers of each model's curve over Lin's levels' "
        f"concepts, with 95% intervals from {resamples} bootstrap draws of concepts, and the paired difference to "
        f"the baseline ({baseline}).",
        ["Slope: least-squares, top-1 points per 0.1 similarity (positive: nearer concepts are recognised better). "
         "Crossing: empty where the fit stays on one side of half the IN-1K top-1 (docs/analyses.md)."],
        {column: ".3f" for column in ("value", "ci95_low", "ci95_high", "diff_baseline", "diff_ci95_low",
                                      "diff_ci95_high", "half_in1k_top1")},
    )
    write_tidy_table(
        layout, CONCEPT_OUTLIERS, extremes,
        "The concepts furthest above and below each model's curve (top-1 minus the isotonic fit, points), with the "
        "concept each is most often taken for and that share of its test images.", [],
        {column: ".2f" for column in ("lin_similarity", "top1_mean", "fitted", "residual", "confused_share")},
    )
    save_figure(fig, layout, CONCEPT_CURVE)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog concept-results", description=__doc__.split("\n")[0])
    parser.add_argument("--results-root", required=True)
    parser.add_argument("--models", required=True, help="JSON: the config entries of the models")
    parser.add_argument("--seed-tables", nargs="+", type=Path, required=True, help="analyses-concepts' TSVs")
    parser.add_argument("--ranking", type=Path, required=True, help="levels/ranking.tsv (Lin)")
    parser.add_argument("--level-set-ranking", action="append", default=[], metavar="SET=TSV")
    parser.add_argument("--levels", nargs="+", required=True, help="Lin's levels, the curve's concepts")
    parser.add_argument("--in1k-seeds", nargs="*", default=[],
                        help="the seeds of the IN-1K probes at N = all, whose top-1 the crossing halves (none: no crossing)")
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--outliers", type=int, default=20)
    add_exposures_option(parser)
    return parser


def concept_results_command(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    setup_logging()
    models, layout = json.loads(args.models), Layout(args.results_root)
    lin, measured = similarities(args.ranking, dict(entry.split("=", 1) for entry in args.level_set_ranking))
    table = concept_table(per_concept(read_seed_tables(args.seed_tables)), lin, measured, models)
    points = curve_points(table, args.levels)
    halves = in1k_halves(layout, list(dict.fromkeys(points["model"])), args.in1k_seeds)
    curves = fit_models(points, halves, args.resamples, args.seed)
    summary = curve_table(curves, halves, args.baseline, models, int(points.groupby("model").size().max()))
    set_theme()
    fig = curve_figure(points, curves, halves, models, args.levels, read_exposures(args.exposures))
    write_outputs(layout, table, summary, outliers(table, points, curves, args.outliers), fig, args.resamples,
                  args.baseline)
    plt.close(fig)
    for row in summary[summary["statistic"] == "slope"].itertuples():
        print(f"{row.model}: {row.value:.2f} top-1 points per 0.1 similarity [{row.ci95_low:.2f}, {row.ci95_high:.2f}]")
    return 0
