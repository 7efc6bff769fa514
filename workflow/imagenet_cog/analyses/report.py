"""Analysis JSONs -> one tidy summary -> tables and figures (CoG preprint, Figs. 5, 6, 10).

Summary CSV (``Layout.analyses_summary``): one row per model x dataset x metric,

    model, dataset, metric, value, low, high, spread

``low``/``high`` are a confidence interval where the metric has one (learnability:
Clopper-Pearson 95%), ``spread`` the standard deviation over seeds where it has one
(k-means: over the seeds' runs). The summary adds ``alignment_uniformity_ratio_rel_in1k``:
a model's alignment/uniformity ratio divided by its ratio on IN-1K (CoG preprint, Fig. 6).
Every analysis JSON with a ``metrics`` list is collected, whichever analysis wrote it.

Given each model's exposure class (``--exposures``), the tables say it after the model's name and the
figures set apart the models pretrained beyond IN-1K (``results.exposure``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from imagenet_cog.analyses.clustering import CLUSTERING_METRICS
from imagenet_cog.core.io import atomic_output
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.naming import IN1K, dataset_title
from imagenet_cog.core.plots import DATASET_LABEL, ModelStyles, figure_legend, no_data, panel_grid, save_figure, set_theme
from imagenet_cog.core.tables import MISSING, RANDOM_WEIGHTS_MARK, RANDOM_WEIGHTS_NOTE, write_table
from imagenet_cog.models.registry import is_random_weights
from imagenet_cog.results.exposure import (
    EXPOSURE_COLUMN,
    add_exposures_option,
    exposure_column,
    exposure_notes,
    figure_marks,
    read_exposures,
    with_exposure,
)

SUMMARY_COLUMNS = ["model", "dataset", "metric", "value", "low", "high", "spread"]
RATIO_REL_IN1K = "alignment_uniformity_ratio_rel_in1k"
GEOMETRY_METRICS = ("alignment", "uniformity", "alignment_uniformity_ratio", RATIO_REL_IN1K)
LEARNABILITY_METRICS = ("learnability_random", "learnability_hard")
METRIC_TITLES = {
    "paper_purity": "Purity (CoG preprint, Eq. 3)", "cluster_purity": "Purity (per cluster)",
    "entropy_purity": "Entropy purity (Laina et al.)", "nmi": "NMI", "ami": "AMI", "ari": "ARI",
    "alignment": "Alignment", "uniformity": "Uniformity", "alignment_uniformity_ratio": "Alignment/uniformity",
    RATIO_REL_IN1K: "Align./unif. rel. IN-1K",
    "learnability_random": "Random negatives", "learnability_hard": "Hard negatives",
}
PURITY_NOTE = "Purity (CoG preprint, Eq. 3): per concept, the largest share of its test images in one cluster, averaged over concepts."


# summary -------------------------------------------------------------------------------------
def summary_rows(result_paths: Sequence[str]) -> pd.DataFrame:
    rows = []
    for path in result_paths:
        result = json.loads(Path(path).read_text())
        if "metrics" not in result or "model" not in result or "dataset" not in result:
            raise ValueError(f"{path}: not an analysis result (no model, dataset or metrics); delete it and re-run.")
        for record in result["metrics"]:
            rows.append({"model": result["model"], "dataset": result["dataset"], **{
                column: record.get(column) for column in SUMMARY_COLUMNS[2:]}})
    summary = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    return pd.concat([summary, relative_to_in1k(summary)], ignore_index=True)


def relative_to_in1k(summary: pd.DataFrame) -> pd.DataFrame:
    ratios = summary[summary["metric"] == "alignment_uniformity_ratio"]
    in1k = ratios[ratios["dataset"] == IN1K].set_index("model")["value"]
    relative = ratios[ratios["model"].isin(in1k.index)].copy()
    relative["value"] = relative["value"].astype(float) / relative["model"].map(in1k).astype(float)
    relative["metric"] = RATIO_REL_IN1K
    return relative[SUMMARY_COLUMNS]


def read_analyses_summary(path: str | Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype={"model": str, "dataset": str, "metric": str})


# tables ----------------------------------------------------------------------------------------
def model_labels(models: dict[str, dict]) -> dict[str, str]:
    return {
        model: (entry.get("label") or model) + (RANDOM_WEIGHTS_MARK if is_random_weights(str(entry.get("weights", ""))) else "")
        for model, entry in models.items()
    }


def notes_for(models: dict[str, dict], extra: Sequence[str] = (), exposures: dict[str, str] | None = None) -> list[str]:
    notes = [*extra, *exposure_notes(exposures, models)]
    if any(is_random_weights(str(entry.get("weights", ""))) for entry in models.values()):
        notes.append(RANDOM_WEIGHTS_NOTE)
    return notes


def metric_table(summary: pd.DataFrame, models: dict[str, dict], datasets: Sequence[str], metrics: Sequence[str],
                 cell, exposures: dict[str, str] | None = None) -> pd.DataFrame:
    """Rows model x metric (config order), columns datasets, cells rendered by ``cell(row)``; each
    model's class after its name with ``exposures``."""
    labels = model_labels(models)
    indexed = summary.set_index(["model", "metric", "dataset"])
    rows = []
    for model in models:
        for name in metrics:
            row = {"Model": labels[model], "Metric": METRIC_TITLES.get(name, name)}
            for dataset in datasets:
                key = (model, name, dataset)
                row[dataset_title(dataset)] = cell(indexed.loc[key]) if key in indexed.index else MISSING
            rows.append(row)
    table = pd.DataFrame(rows, columns=["Model", "Metric", *(dataset_title(dataset) for dataset in datasets)])
    return with_exposure(table, exposures, [model for model in models for _ in metrics], "Model")


def spread_cell(row: pd.Series) -> str:
    if pd.isna(row["value"]):
        return MISSING
    return f"{row['value']:.3f}" + ("" if pd.isna(row["spread"]) else f" ± {row['spread']:.3f}")


def significant_cell(row: pd.Series) -> str:
    """Four significant digits: alignment and uniformity span orders of magnitude."""
    return MISSING if pd.isna(row["value"]) else f"{row['value']:.4g}"


def interval_cell(row: pd.Series) -> str:
    if pd.isna(row["value"]):
        return MISSING
    return f"{100 * row['value']:.1f} [{100 * row['low']:.1f}, {100 * row['high']:.1f}]"


def agreement_table(matrix: pd.DataFrame, models: dict[str, dict], exposures: dict[str, str] | None = None) -> pd.DataFrame:
    """The models' clusterings against each other and the labels ("concepts": no class)."""
    labels = {**model_labels(models), "concepts": "Concepts (labels)"}
    table = matrix.map(lambda value: f"{100 * value:.1f}")
    names = list(table.index)
    table.index = [labels.get(name, name) for name in table.index]
    table.columns = [labels.get(name, name) for name in table.columns]
    table = table.rename_axis("Model").reset_index()
    if exposures is not None:
        classes = exposure_column(exposures, names)
        table.insert(1, EXPOSURE_COLUMN, ["" if name == "concepts" else exposure for name, exposure in zip(names, classes)])
    return table


def write_analysis_tables(summary: pd.DataFrame, layout: Layout, models: dict[str, dict], datasets: Sequence[str],
                          analyses: Sequence[str], agreement: dict[str, str], exposures: dict[str, str] | None = None) -> None:
    """The tables of the analyses switched on, each with the models' classes given ``exposures``."""
    if "kmeans" in analyses:
        write_table(
            layout, "analyses_clustering",
            metric_table(summary, models, datasets, CLUSTERING_METRICS, spread_cell, exposures),
            "k-means clustering of the test features (k = concepts; centroids of the lowest-inertia "
            "of the seeds' runs, learnt on the training features): value ± std over seeds.",
            notes_for(models, [PURITY_NOTE], exposures),
        )
    if "alignment_uniformity" in analyses:
        write_table(
            layout, "analyses_geometry",
            metric_table(summary, models, datasets, GEOMETRY_METRICS, significant_cell, exposures),
            "Alignment (lower: a concept's test images lie closer) and uniformity (-log E exp(-2|x-y|^2), "
            "higher: more uniform) of the L2-normalised test features, over all pairs.",
            notes_for(models, ["Align./unif. rel. IN-1K: the ratio divided by the model's ratio on IN-1K."], exposures),
        )
    if "learnability" in analyses:
        write_table(
            layout, "analyses_learnability",
            metric_table(summary, models, datasets, LEARNABILITY_METRICS, interval_cell, exposures),
            "Learnability in feature space (Laina et al. 2020, Eq. 1-2): forced-choice accuracy (%) with random and "
            "hard negatives, [Clopper-Pearson 95% interval].",
            notes_for(models, exposures=exposures),
        )
    for dataset, path in agreement.items():
        matrix = pd.read_csv(path, index_col="model")
        write_table(
            layout, f"analyses_agreement_{dataset}", agreement_table(matrix, models, exposures),
            f"Adjusted NMI (%) between the k-means clusterings of the test images of {dataset_title(dataset)}, "
            f"and against the concept labels.",
            notes_for(models, exposures=exposures),
        )


# figures ---------------------------------------------------------------------------------------
def styles_for(models: dict[str, dict], exposures: dict[str, str] | None = None) -> ModelStyles:
    frame = pd.DataFrame({
        "model": list(models),
        "label": [entry.get("label") or model for model, entry in models.items()],
        "random_weights": [is_random_weights(str(entry.get("weights", ""))) for entry in models.values()],
    })
    return ModelStyles(frame, **figure_marks(exposures, frame["model"]))


def draw_metric(ax, summary: pd.DataFrame, name: str, datasets: Sequence[str], styles: ModelStyles,
                models: dict[str, dict], scale: float = 1.0) -> None:
    """One line per model across datasets; error bars from the interval, else the spread."""
    rows = summary[summary["metric"] == name]
    if rows.empty:
        no_data(ax, f"no {METRIC_TITLES.get(name, name)} results")
    x = np.arange(len(datasets))
    for model in models:
        cells = rows[rows["model"] == model].set_index("dataset").reindex(datasets)
        values = scale * cells["value"].to_numpy(float)
        if cells["low"].notna().any():
            errors = np.abs(np.vstack([values - scale * cells["low"].to_numpy(float),
                                       scale * cells["high"].to_numpy(float) - values]))
        else:
            errors = scale * np.nan_to_num(cells["spread"].to_numpy(float))
        ax.errorbar(x, values, yerr=errors, markersize=4, linewidth=1.2, capsize=2, **styles[model])
    ax.set_xticks(x, [dataset_title(dataset) for dataset in datasets])
    ax.set_xlim(-0.3, len(datasets) - 0.7)


def levels_figure(summary, datasets, models, panels: Sequence[tuple[str, str, float]], title: str, exposures=None):
    styles = styles_for(models, exposures)
    fig, axes = panel_grid(len(panels), len(panels))
    for ax, (name, ylabel, scale) in zip(axes.flat, panels):
        draw_metric(ax, summary, name, datasets, styles, models, scale)
        if name.startswith("learnability_"):
            ax.axhline(50.0, color="black", linewidth=1.0, linestyle="--", label="chance (50%)")
        ax.set_ylabel(ylabel)
        ax.set_xlabel(DATASET_LABEL if len(panels) == 1 else "Dataset")
        ax.set_title(METRIC_TITLES.get(name, name) if len(panels) > 1 else title)
    figure_legend(fig, axes, styles.legend_title())
    return fig


def alignment_uniformity_figure(summary, datasets, models, exposures=None):
    """CoG preprint, Fig. 10: alignment and uniformity per dataset, and their scatter."""
    styles = styles_for(models, exposures)
    fig, axes = panel_grid(3, 3)
    for ax, name in zip(axes.flat[:2], ("alignment", "uniformity")):
        draw_metric(ax, summary, name, datasets, styles, models)
        ax.set_title(METRIC_TITLES[name])
        ax.set_xlabel("Dataset")
    scatter = axes.flat[2]
    pivot = summary[summary["metric"].isin(["alignment", "uniformity"])].pivot_table(
        index=["model", "dataset"], columns="metric", values="value")
    for model in models:
        if model not in pivot.index.get_level_values(0) or not {"alignment", "uniformity"} <= set(pivot.columns):
            continue
        cells = pivot.loc[model].reindex(datasets)
        scatter.plot(cells["uniformity"], cells["alignment"], markersize=4, linewidth=0.8, **styles[model])
        for dataset, point in cells.dropna().iterrows():
            scatter.annotate(dataset_title(dataset), (point["uniformity"], point["alignment"]), fontsize=6)
    scatter.set_xlabel("Uniformity (higher: more uniform)")
    scatter.set_ylabel("Alignment (lower: better aligned)")
    scatter.set_title("Alignment vs uniformity")
    figure_legend(fig, axes, styles.legend_title())
    return fig


def agreement_figure(agreement: dict[str, str], models: dict[str, dict], exposures: dict[str, str] | None = None):
    """The agreement matrices as heatmaps; a model set apart has its class after its name."""
    styles = styles_for(models, exposures)
    labels = {**{model: styles[model]["label"] for model in models}, "concepts": "Concepts"}
    fig, axes = panel_grid(max(1, len(agreement)), 3)
    for ax, (dataset, path) in zip(axes.flat, agreement.items()):
        matrix = pd.read_csv(path, index_col="model")
        names = [labels.get(name, name) for name in matrix.index]
        sns.heatmap(100 * matrix.to_numpy(float), ax=ax, vmin=0, vmax=100, annot=True, fmt=".0f", cmap="viridis",
                    xticklabels=names, yticklabels=names, cbar=False, annot_kws={"fontsize": 6})
        ax.set_title(f"{dataset_title(dataset)}: adjusted NMI (%)")
        ax.tick_params(labelsize=6)
    if not agreement:
        no_data(axes.flat[0], "no agreement matrices")
    fig.tight_layout()
    note = styles.legend_title(lines=False, markers=False)
    if note:
        fig.text(0.5, 0.0, note, ha="center", va="top", fontsize=6)
    return fig


def build_analysis_figures(summary, models, datasets, analyses, agreement, exposures=None) -> dict:
    """The figures of the analyses switched on; with ``exposures``, the models pretrained beyond
    IN-1K set apart in each."""
    set_theme()
    figures = {}
    if "kmeans" in analyses:
        figures["analyses_purity_levels"] = levels_figure(
            summary, datasets, models, [("paper_purity", "Purity (CoG preprint, Eq. 3)", 1.0)],
            "k-means purity of the test images", exposures)
    if "alignment_uniformity" in analyses:
        figures["analyses_ratio_levels"] = levels_figure(
            summary, datasets, models, [(RATIO_REL_IN1K, "Alignment/uniformity relative to IN-1K", 1.0)],
            "Alignment/uniformity ratio relative to IN-1K", exposures)
        figures["analyses_alignment_uniformity"] = alignment_uniformity_figure(summary, datasets, models, exposures)
    if "learnability" in analyses:
        figures["analyses_learnability_levels"] = levels_figure(
            summary, datasets, models,
            [("learnability_random", "Accuracy (%)", 100.0), ("learnability_hard", "Accuracy (%)", 100.0)],
            "Learnability", exposures)
    if agreement:
        figures["analyses_agreement"] = agreement_figure(agreement, models, exposures)
    return figures


# command line ------------------------------------------------------------------------------------
def summary_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="analyses-summary", description="Collect analysis JSONs into one tidy CSV.")
    parser.add_argument("--results", nargs="*", default=[], help="analysis result JSONs")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    summary = summary_rows(args.results)
    with atomic_output(args.output) as temporary:
        summary.to_csv(temporary, index=False)
    print(f"{len(summary)} rows from {len(args.results)} analysis results")
    return 0


def _rendering_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--summary", required=True)
    parser.add_argument("--results-root", required=True)
    parser.add_argument("--models", required=True, help="JSON object: model name -> its config entry")
    parser.add_argument("--datasets", nargs="+", required=True)
    parser.add_argument("--analyses", nargs="*", default=[], help="the analyses switched on")
    parser.add_argument("--agreement", nargs="*", default=[], help="dataset=matrix.csv pairs")
    add_exposures_option(parser)


def _agreement_files(pairs: Sequence[str]) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in pairs)


def tables_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="analyses-tables", description="Analyses tables (CSV, Markdown, LaTeX).")
    _rendering_arguments(parser)
    args = parser.parse_args(argv)
    write_analysis_tables(read_analyses_summary(args.summary), Layout(args.results_root), json.loads(args.models),
                          args.datasets, args.analyses, _agreement_files(args.agreement), read_exposures(args.exposures))
    return 0


def figures_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="analyses-figures", description="Analyses figures (PNG and PDF).")
    _rendering_arguments(parser)
    args = parser.parse_args(argv)
    figures = build_analysis_figures(read_analyses_summary(args.summary), json.loads(args.models), args.datasets,
                                     args.analyses, _agreement_files(args.agreement), read_exposures(args.exposures))
    for name, fig in figures.items():
        save_figure(fig, Layout(args.results_root), name)
        plt.close(fig)
    return 0
