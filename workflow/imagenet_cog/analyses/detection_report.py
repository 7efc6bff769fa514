"""The ``detection-results`` command: the tables and figures of unseen-concept detection.

* ``tables/detection_<score>.*``: per model and level, AUROC and FPR@95 (%), mean and std over
  the probe seeds with the 95% interval of the mean the other tables use
  (:func:`imagenet_cog.results.statistics.mean_interval`); a seed-free score (k-NN, MCM) has one
  value and no interval;
* ``figures/detection.*``: AUROC against the level, one line per model, a panel per score
  (like the CoG paper's Fig. 3 for top-1);
* ``figures/detection_vs_recognition.*``: per score, the top-1 of each level's linear probe at
  N = all (the results summary) against its AUROC, a point per model and level.

Given each model's exposure class (``--exposures``), the tables say it and the figures set apart the
models pretrained beyond IN-1K (``results.exposure``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from imagenet_cog.analyses.detection_scores import SCORE_TITLES, SCORES, SEED_COLUMNS
from imagenet_cog.core.command_line import add_summary_options
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.naming import dataset_title
from imagenet_cog.core.plots import ModelStyles, figure_legend, no_data, panel_grid, save_figure, set_theme
from imagenet_cog.core.tables import RANDOM_WEIGHTS_MARK, write_tidy_table
from imagenet_cog.results.exposure import (
    TIDY_EXPOSURE_COLUMN,
    add_exposures_option,
    exposure_notes,
    figure_marks,
    read_exposures,
    with_exposure,
)
from imagenet_cog.results.statistics import TOP1_RANGE, mean_interval
from imagenet_cog.results.summary import lin_rows, read_summary

FIGURE = "detection"
VERSUS_FIGURE = "detection_vs_recognition"
METRICS = {"auroc": "AUROC", "fpr95": "FPR@95"}


def table_name(score: str) -> str:
    return f"detection_{score}"


def read_seed_tables(paths: Sequence[Path]) -> pd.DataFrame:
    frames = [pd.read_csv(path, sep="\t", dtype={"seed": str}, keep_default_na=False) for path in paths]
    for path, frame in zip(paths, frames):
        if list(frame.columns) != SEED_COLUMNS:
            raise ValueError(f"{path}: columns {list(frame.columns)}, not {SEED_COLUMNS}; delete it and re-run "
                             f"analyses_detection.")
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=SEED_COLUMNS)


def aggregated(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (model, score, dataset): mean, std (ddof 1) and 95% interval of each metric over seeds."""
    records = []
    for (model, score, dataset), group in rows.groupby(["model", "score", "dataset"], sort=False):
        record = {"model": model, "score": score, "dataset": dataset, "n_seeds": len(group)}
        for metric in METRICS:
            values = group[metric].to_numpy(float)
            low, high = mean_interval(values, TOP1_RANGE)
            record |= {f"{metric}_mean": values.mean(), f"{metric}_std": values.std(ddof=1) if len(values) > 1 else math.nan,
                       f"{metric}_ci95_low": low, f"{metric}_ci95_high": high}
        records.append(record)
    return pd.DataFrame(records)


def model_label(models: dict, model: str) -> str:
    entry = models.get(model, {})
    return entry.get("label", model) + (RANDOM_WEIGHTS_MARK if str(entry.get("weights", "")).startswith("random") else "")


def score_table(summary: pd.DataFrame, score: str, models: dict, exposures: dict[str, str] | None = None) -> pd.DataFrame:
    """A row per model and level; each model's class after its label with ``exposures``."""
    rows = summary[summary["score"] == score]
    table = rows.drop(columns="score").copy()
    table.insert(1, "label", [model_label(models, model) for model in rows["model"]])
    table["dataset"] = table["dataset"].map(dataset_title)
    return with_exposure(table, exposures, rows["model"], "label", TIDY_EXPOSURE_COLUMN)


def styles(models: Sequence[str], labels: dict, exposures: dict[str, str] | None = None) -> ModelStyles:
    """The models' styles (``labels``: their names as shown), those pretrained beyond IN-1K set apart."""
    frame = pd.DataFrame({"model": models, "label": [labels[model] for model in models], "random_weights": False})
    return ModelStyles(frame, **figure_marks(exposures, frame["model"]))


def detection_figure(summary: pd.DataFrame, datasets: Sequence[str], models: dict, scores: Sequence[str],
                     exposures: dict[str, str] | None = None):
    """AUROC (mean over seeds, 95% interval shaded) against the level, one panel per score."""
    fig, axes = panel_grid(len(scores), 3)
    names = list(dict.fromkeys(summary["model"]))
    look = styles(names, {model: model_label(models, model) for model in names}, exposures)
    x = np.arange(len(datasets))
    for ax, score in zip(axes.flat, scores):
        rows = summary[summary["score"] == score]
        if rows.empty:
            no_data(ax, "no model has this score")
        for model, frame in rows.groupby("model", sort=False):
            frame, style = frame.set_index("dataset").reindex(datasets), look[model]
            ax.plot(x, frame["auroc_mean"], markersize=4, **style)
            ax.fill_between(x, frame["auroc_ci95_low"], frame["auroc_ci95_high"], color=style["color"], alpha=0.15)
        ax.axhline(50.0, color="grey", linestyle=":", linewidth=1.0)
        ax.set_xticks(x, [dataset_title(dataset) for dataset in datasets])
        ax.set_xlabel("Level (further from IN-1K to the right)")
        ax.set_ylabel("AUROC, IN-1K vs level (%)")
        ax.set_title(SCORE_TITLES[score])
    figure_legend(fig, axes, look.legend_title())
    return fig


def versus_figure(summary: pd.DataFrame, top1: pd.DataFrame, models: dict, scores: Sequence[str],
                  exposures: dict[str, str] | None = None):
    """Top-1 of each level's linear probe (N = all) against its AUROC, one panel per score."""
    fig, axes = panel_grid(len(scores), 3)
    joined = summary.merge(top1, on=["model", "dataset"], how="inner")
    names = list(dict.fromkeys(summary["model"]))
    look = styles(names, {model: model_label(models, model) for model in names}, exposures)
    for ax, score in zip(axes.flat, scores):
        rows = joined[joined["score"] == score]
        if rows.empty:
            no_data(ax, "no linear probe result at N = all")
        for model, frame in rows.groupby("model", sort=False):
            ax.scatter(frame["auroc_mean"], frame["top1"], s=18, **look.points(model))
            for _, row in frame.iterrows():
                ax.annotate(dataset_title(row["dataset"]), (row["auroc_mean"], row["top1"]), fontsize=6,
                            xytext=(2, 2), textcoords="offset points")
        ax.set_xlabel("AUROC, IN-1K vs level (%)")
        ax.set_ylabel("Top-1 of the level's probe, N = all (%)")
        ax.set_title(SCORE_TITLES[score])
    figure_legend(fig, axes, look.legend_title(lines=False))
    return fig


def linear_top1(summary_path: Path) -> pd.DataFrame:
    rows = lin_rows(read_summary(summary_path))
    return rows[rows["shots"] == "all"][["model", "dataset", "mean"]].rename(columns={"mean": "top1"})


def detection_results_command(argv: Sequence[str]) -> int:
    """The detection tables (one per score) and the two figures."""
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog detection-results",
                                     description=detection_results_command.__doc__)
    add_summary_options(parser)
    parser.add_argument("--models", required=True, help="JSON: the config entries of the models")
    parser.add_argument("--datasets", nargs="+", required=True, help="the levels, in the figures' order")
    parser.add_argument("--scores", nargs="+", choices=SCORES, required=True)
    parser.add_argument("--seed-tables", nargs="+", type=Path, required=True, help="the per-seed TSVs")
    add_exposures_option(parser)
    args = parser.parse_args(argv)
    layout, models, exposures = Layout(args.results_root), json.loads(args.models), read_exposures(args.exposures)
    summary = aggregated(read_seed_tables(args.seed_tables))
    formats = {column: ".2f" for column in summary.columns if column.startswith(tuple(METRICS))}
    for score in args.scores:
        caption = (f"Detecting unseen concepts by {SCORE_TITLES[score]}: IN-1K's test images are the known class, "
                   "each level's the unseen one; AUROC and FPR at 95% TPR (%), mean, std and 95% interval over the "
                   "probe seeds.")
        table = score_table(summary, score, models, exposures)
        notes = ["k-NN and MCM do not depend on the probe: one value, no interval. Higher AUROC and lower FPR@95: "
                 "the level is easier to tell from IN-1K (docs/analyses.md, \"Detecting unseen concepts\").",
                 *exposure_notes(exposures, dict.fromkeys(table["model"]), TIDY_EXPOSURE_COLUMN)]
        write_tidy_table(layout, table_name(score), table, caption, notes, formats)
    set_theme()
    for name, fig in ((FIGURE, detection_figure(summary, args.datasets, models, args.scores, exposures)),
                      (VERSUS_FIGURE, versus_figure(summary, linear_top1(args.summary), models, args.scores, exposures))):
        save_figure(fig, layout, name)
        plt.close(fig)
    for row in summary.itertuples():
        print(f"{row.model} {row.score} {row.dataset}: AUROC {row.auroc_mean:.2f}, FPR@95 {row.fpr95_mean:.2f}")
    return 0
