"""The paper's result figures from the tidy summary (ICCV paper, Figs. 3, 4, 10 and 11).

- ``top1_levels``: top-1 on IN-1K and each level with all training images, one line per
  model (Fig. 3a).
- ``relative_levels``: the same minus the baseline, one panel per model category (Figs. 3b-e).
- ``few_shot``: top-1 against N images per concept (log2 axis, "All" last), one panel per
  dataset (Figs. 4a-c, 10).
- ``few_shot_relative``: the same minus the baseline (Figs. 4d-f, 11).
- ``pca``, ``pca_relative``: top-1 of PCA + linear probes against the number d of principal
  components (log2 axis, "All" = the linear probe on every dimension), one panel per
  dataset, absolute and minus the baseline (CoG preprint, Fig. 8); empty panels without the
  pca kind.
- ``knn_top1_levels``, ``knn_relative_levels``, ``knn_few_shot``, ``knn_few_shot_relative``:
  the first four for the weighted k-NN (``knn`` in probes.kinds), its top-1 at
  ``probes.knn.reported_k``, relative to the baseline's k-NN; at N = all the k-NN has no
  randomness, so its bars there have zero width.

Error bars (levels figures) and bands (few-shot figures) are the 95% confidence intervals of
the mean over seeds (Student t; relative figures: of the paired per-seed difference to the
baseline); with one seed there is none. A cell with a missing seed has no mean and leaves a
gap in its line. Given each model's exposure class (``--exposures``), every figure sets apart the
models pretrained beyond IN-1K (``results.exposure``).
"""

from __future__ import annotations

import argparse
import math
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from imagenet_cog.core import plots
from imagenet_cog.core.command_line import add_summary_options
from imagenet_cog.core.layout import Layout, kind_result_name
from imagenet_cog.core.naming import LINEAR, PCA, PCA_PREFIX, dataset_title, pca_dim
from imagenet_cog.probes.kinds.kind import KindTexts
from imagenet_cog.results.exposure import add_exposures_option, figure_marks, read_exposures
from imagenet_cog.results.statistics import DIFFERENCE_RANGE, TOP1_RANGE, paired_tests
from imagenet_cog.results.summary import (
    INTERVAL_COLUMNS,
    KIND_TEXTS,
    kind_seed_results,
    lin_rows,
    read_seed_results,
    read_summary,
    tabled_kinds,
    with_relative,
)

LINEAR_TEXTS = KIND_TEXTS[LINEAR]
SHOTS_LABEL = "N training images per concept (log$_2$ scale)"


def top1_label(texts: KindTexts = LINEAR_TEXTS) -> str:
    return f"{texts.top1} (%)"


def relative_label(baseline_label: str, texts: KindTexts = LINEAR_TEXTS) -> str:
    return f"{texts.axis} relative to {baseline_label} (points)"


def shot_positions(shots: Sequence[str]) -> dict[str, float]:
    """x positions: log2(N) for numbers, one step after the largest N for "all"."""
    numbers = sorted(int(shot) for shot in shots if shot != "all")
    positions = {str(number): math.log2(number) for number in numbers}
    if "all" in shots:
        positions["all"] = (math.log2(numbers[-1]) + 1) if numbers else 0.0
    return positions


def shot_tick_label(shot: str) -> str:
    return "All" if shot == "all" else shot


def baseline_line(ax, baseline_label: str) -> None:
    ax.axhline(0.0, color="black", linewidth=1.0, linestyle="--", label=f"{baseline_label} (baseline)")


def interval(rows: pd.DataFrame, value: str) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper ends of the 95% interval of ``value`` (NaN where there is none)."""
    low, high = INTERVAL_COLUMNS[value]
    if low not in rows.columns:
        nothing = np.full(len(rows), np.nan)
        return nothing, nothing
    # statistics.mean_interval cuts intervals to what a top-1 (or a difference of two) can be;
    # a summary written before it did is cut here
    bounds = TOP1_RANGE if value == "mean" else DIFFERENCE_RANGE
    return np.clip(rows[low].to_numpy(float), *bounds), np.clip(rows[high].to_numpy(float), *bounds)


def draw_levels(ax, frame: pd.DataFrame, datasets: Sequence[str], styles: plots.ModelStyles, value: str) -> None:
    x = np.arange(len(datasets))
    for model, rows in frame.groupby("model", sort=False):
        rows = rows.set_index("dataset").reindex(datasets)
        style = styles[model]
        mean = rows[value].to_numpy(float)
        low, high = interval(rows, value)
        # matplotlib draws no bar for a NaN length; a zero-width interval (every seed the same,
        # as the k-NN's at N = all) may sit a rounding error beside its mean, which it refuses
        yerr = np.clip(np.vstack([mean - low, high - mean]), 0.0, None)
        ax.errorbar(x, mean, yerr=yerr, markersize=4, linewidth=1.2, capsize=2, **style)
    ax.set_xticks(x, [dataset_title(dataset) for dataset in datasets])
    ax.set_xlim(-0.3, len(datasets) - 0.7)


def draw_few_shot(ax, frame: pd.DataFrame, positions: dict[str, float], styles: plots.ModelStyles, value: str) -> None:
    order = list(positions)
    for model, rows in frame.groupby("model", sort=False):
        rows = rows.set_index("shots").reindex(order)
        x = np.array([positions[shot] for shot in order])
        mean = rows[value].to_numpy(float)
        low, high = interval(rows, value)
        style = styles[model]
        ax.plot(x, mean, markersize=3.5, linewidth=1.2, **style)
        ax.fill_between(x, low, high, color=style["color"], alpha=0.2, linewidth=0)
    ax.set_xticks([positions[shot] for shot in order], [shot_tick_label(shot) for shot in order])


def baseline_title(summary: pd.DataFrame, baseline: str) -> str:
    labels = summary.loc[summary["model"] == baseline, "label"]
    return labels.iloc[0] if len(labels) else baseline


def top1_levels_figure(summary: pd.DataFrame, texts: KindTexts = LINEAR_TEXTS, exposures: dict[str, str] | None = None):
    """Fig. 3a: absolute top-1 per dataset, all training images (``texts``: the kind's wording;
    ``exposures``: the models' classes, those beyond IN-1K set apart)."""
    datasets = list(dict.fromkeys(summary["dataset"]))
    fig, axes = plots.panel_grid(1, 1)
    fig.set_size_inches(max(4.5, 0.9 * len(datasets) + 2.5), 4.2)
    ax = axes[0, 0]
    full = summary[summary["shots"] == "all"]
    styles = plots.ModelStyles(summary, **figure_marks(exposures, summary["model"]))
    if full.empty:
        plots.no_data(ax, "no N=all results configured (probes.shots)")
    else:
        draw_levels(ax, full, datasets, styles, "mean")
    ax.set_xlabel(plots.DATASET_LABEL)
    ax.set_ylabel(top1_label(texts))
    ax.set_title(f"{texts.title} with all training images")
    plots.figure_legend(fig, axes, styles.legend_title())
    return fig


def relative_levels_figure(
    summary: pd.DataFrame, baseline: str, paired: pd.DataFrame | None = None, texts: KindTexts = LINEAR_TEXTS,
    exposures: dict[str, str] | None = None,
):
    """Figs. 3b-e: top-1 minus the baseline's, one panel per model category."""
    datasets = list(dict.fromkeys(summary["dataset"]))
    relative = with_relative(summary[summary["shots"] == "all"], baseline, paired)
    others = relative[relative["model"] != baseline]
    categories = list(dict.fromkeys(others["category"])) or ["(no model besides the baseline)"]
    fig, axes = plots.panel_grid(len(categories), 2)
    styles = plots.ModelStyles(summary, **figure_marks(exposures, summary["model"]))
    label = baseline_title(summary, baseline)
    for ax, category in zip(axes.flat, categories):
        rows = others[others["category"] == category]
        if rows.empty or rows["relative"].isna().all():
            plots.no_data(ax, f"no complete N=all results of {baseline} and these models")
        draw_levels(ax, rows, datasets, styles, "relative")
        baseline_line(ax, label)
        ax.set_title(category.capitalize())
        ax.set_xlabel(plots.DATASET_LABEL if len(categories) == 1 else "Dataset")
        ax.set_ylabel(relative_label(label, texts))
    plots.figure_legend(fig, axes, styles.legend_title(models=others["model"]))
    return fig


def few_shot_figure(
    summary: pd.DataFrame, baseline: str | None = None, paired: pd.DataFrame | None = None,
    texts: KindTexts = LINEAR_TEXTS, exposures: dict[str, str] | None = None,
):
    """Figs. 4 and 10 (absolute) or, with ``baseline``, Figs. 4d-f and 11 (relative)."""
    datasets = list(dict.fromkeys(summary["dataset"]))
    positions = shot_positions(list(dict.fromkeys(summary["shots"])))
    frame = summary if baseline is None else with_relative(summary, baseline, paired)
    value = "mean" if baseline is None else "relative"
    if baseline is not None:
        frame = frame[frame["model"] != baseline]
    fig, axes = plots.panel_grid(len(datasets), 3)
    styles = plots.ModelStyles(summary, **figure_marks(exposures, summary["model"]))
    for ax, dataset in zip(axes.flat, datasets):
        rows = frame[frame["dataset"] == dataset]
        if rows.empty:
            plots.no_data(ax, "no model besides the baseline")
        draw_few_shot(ax, rows, positions, styles, value)
        if baseline is not None:
            baseline_line(ax, baseline_title(summary, baseline))
        ax.set_title(dataset_title(dataset))
        ax.set_xlabel(SHOTS_LABEL)
        ax.set_ylabel(top1_label(texts) if baseline is None else relative_label(baseline_title(summary, baseline), texts))
    plots.figure_legend(fig, axes, styles.legend_title(models=frame["model"]))
    return fig


PCA_LABEL = "Principal components d (log$_2$ scale)"


def pca_figure(summary: pd.DataFrame, baseline: str | None = None, exposures: dict[str, str] | None = None):
    """CoG preprint, Fig. 8: the few-shot layout with d in place of N, at N = all."""
    full = summary[summary["shots"] == "all"]
    pca = full[full["probe"].str.startswith(PCA_PREFIX)].assign(shots=lambda frame: frame["probe"].map(lambda kind: str(pca_dim(kind))))
    frame = pd.concat([pca, full[full["probe"] == LINEAR]], ignore_index=True)
    if pca.empty:
        fig, axes = plots.panel_grid(1, 1)
        plots.no_data(axes.flat[0], "no pca probes (probes.kinds)")
        return fig
    fig = few_shot_figure(frame, baseline, exposures=exposures)
    for ax in fig.axes:
        if ax.get_xlabel() == SHOTS_LABEL:
            ax.set_xlabel(PCA_LABEL)
    return fig


def kind_figures(summary: pd.DataFrame, baseline: str, seed_results: pd.DataFrame | None, kind: str,
                 exposures: dict[str, str] | None = None) -> dict:
    """One kind's figures (``layout.KIND_FIGURES``, named for the kind) from its rows of
    ``summary``; relative ones get interval bars only with ``seed_results``."""
    summary = summary[summary["probe"] == kind]
    paired = None if seed_results is None else paired_tests(kind_seed_results(seed_results, kind), summary, baseline)
    texts = KIND_TEXTS[kind]
    figures = {
        "top1_levels": top1_levels_figure(summary, texts, exposures),
        "relative_levels": relative_levels_figure(summary, baseline, paired, texts, exposures),
        "few_shot": few_shot_figure(summary, texts=texts, exposures=exposures),
        "few_shot_relative": few_shot_figure(summary, baseline, paired, texts, exposures),
    }
    return {kind_result_name(name, kind): fig for name, fig in figures.items()}


def build_figures(summary: pd.DataFrame, baseline: str, seed_results: pd.DataFrame | None = None,
                  exposures: dict[str, str] | None = None) -> dict:
    """The result figures (``layout.result_figure_names``): the linear probe's, the pca
    figures from the pca-<d> rows, and the k-NN's where the summary has knn rows; with
    ``exposures``, the models pretrained beyond IN-1K set apart in each."""
    plots.set_theme()
    figures = {
        **kind_figures(summary, baseline, seed_results, LINEAR, exposures),
        PCA: pca_figure(summary, exposures=exposures),
        f"{PCA}_relative": pca_figure(summary, baseline, exposures),
    }
    for kind in tabled_kinds(summary):
        if kind != LINEAR:
            figures.update(kind_figures(summary, baseline, seed_results, kind, exposures))
    return figures


def figures_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="results-figures", description="Draw the paper's result figures (PNG and PDF)."
    )
    add_summary_options(parser, seed_results=True)
    add_exposures_option(parser)
    args = parser.parse_args(argv)
    layout = Layout(args.results_root)
    summary = lin_rows(read_summary(args.summary), every_probe=True)
    figures = build_figures(summary, args.baseline, read_seed_results(args.seed_results), read_exposures(args.exposures))
    for name, fig in figures.items():
        plots.save_figure(fig, layout, name)
        plt.close(fig)
    return 0
