"""The series' figure: top-1 per level against step, and each level relative to IN-1K.

One row of two panels per series, probe kind and N: left, the mean test top-1 of IN-1K and
each level at each step with its 95% interval over the seeds as a band (none with one seed)
and the best step of each marked (chosen on test: descriptive); right, each level's top-1
minus IN-1K's at the same step (points), the gap that concept generalization is about. A step
whose checkpoint stands in for another is drawn with an open marker.
"""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from imagenet_cog.core import plots
from imagenet_cog.core.naming import IN1K, dataset_title, shots_title

from .summary import repeats

ROW_KEYS = ["series", "probe", "shots"]


def dataset_colours(datasets: list[str]) -> dict[str, tuple]:
    """IN-1K in black, the levels from near to far along one sequential palette."""
    levels = [dataset for dataset in datasets if dataset != IN1K]
    colours = dict(zip(levels, sns.color_palette("viridis_r", len(levels))))
    return {IN1K: (0.0, 0.0, 0.0), **colours}


def draw_dataset(ax, rows: pd.DataFrame, value: str, colour, label: str, band: bool) -> None:
    rows = rows.sort_values("step")
    ax.plot(rows["step"], rows[value], color=colour, label=label, linewidth=1.2)
    evaluated = ~repeats(rows)
    ax.scatter(rows["step"][evaluated], rows[value][evaluated], color=colour, s=12, zorder=3)
    ax.scatter(rows["step"][~evaluated], rows[value][~evaluated], facecolors="white", edgecolors=[colour], s=12, zorder=3)
    if band and rows["top1_ci95_low"].notna().any():
        ax.fill_between(rows["step"], rows["top1_ci95_low"], rows["top1_ci95_high"], color=colour, alpha=0.15, linewidth=0)


def series_figure(steps: pd.DataFrame, summary: pd.DataFrame):
    """The figure of the module docstring, from ``summary.step_numbers`` and ``series_summary``."""
    rows = list(steps.groupby(ROW_KEYS, sort=False))
    fig, axes = plots.panel_grid(2 * max(len(rows), 1), 2)
    if not rows:
        plots.no_data(axes[0, 0], "no series results")
        return fig
    colours = dataset_colours(list(dict.fromkeys(steps["dataset"])))
    best = summary.set_index(["series", "probe", "shots", "dataset"])["best_step"]
    for (key, group), (absolute, relative) in zip(rows, axes):
        series, probe, shots = key
        unit = group["step_unit"].iloc[0].replace("_", " ")
        for dataset, colour in colours.items():
            at = group[group["dataset"] == dataset]
            if at.empty:
                continue
            draw_dataset(absolute, at, "top1_mean", colour, dataset_title(dataset), band=True)
            marked = at[at["step"] == best.get((series, probe, shots, dataset))]
            absolute.scatter(marked["step"], marked["top1_mean"], marker="*", s=60, color=colour, zorder=4)
            if dataset != IN1K:
                draw_dataset(relative, at, "gap_in1k", colour, dataset_title(dataset), band=False)
        absolute.scatter([], [], marker="*", s=60, color="grey", label="best step (chosen on test)")
        absolute.set_title(f"{series}: {probe}, {shots_title(shots)}", fontsize=8)
        absolute.set_ylabel("Test top-1 (%)")
        relative.axhline(0.0, color="black", linewidth=0.6)
        relative.set_title("relative to IN-1K at the same step", fontsize=8)
        relative.set_ylabel("Top-1 minus IN-1K top-1 (points)")
        for ax in (absolute, relative):
            ax.set_xlabel(f"step ({unit})")
    plots.figure_legend(fig, axes)
    return fig
