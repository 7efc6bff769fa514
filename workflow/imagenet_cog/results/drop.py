"""The concept-generalization drop (CoG preprint, Fig. 3c): how much of its IN-1K top-1 a model
loses on each level.

Per model and level, with all training images (or, without N=all, the largest N): the drop
in points (IN-1K top-1 minus the level's) and the drop as a percentage of the model's own
IN-1K top-1, as a table (``generalization_drop``) and a figure of the relative top-1, one
line per model, 0% on IN-1K. The paper's "lose 25-35% of their classification power" is the
L5 column of that table. Given each model's exposure class, the table says it and the figure sets
apart the models pretrained beyond IN-1K (``results.exposure``).
"""

from __future__ import annotations

import argparse

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from imagenet_cog.core import plots
from imagenet_cog.core.command_line import add_summary_options
from imagenet_cog.core.layout import DROP_NAME, Layout
from imagenet_cog.core.naming import IN1K, dataset_title, shots_title
from imagenet_cog.core.tables import write_tidy_table
from imagenet_cog.results.exposure import (
    EXPOSURE_COLUMN,
    add_exposures_option,
    exposure_notes,
    figure_marks,
    read_exposures,
    with_exposure,
)
from imagenet_cog.results.statistics import generalization_drop
from imagenet_cog.results.summary import lin_rows, read_summary

REFERENCE = IN1K


def drop_shots(summary: pd.DataFrame) -> str:
    """N=all where configured (as the paper), else the largest N."""
    shots = list(dict.fromkeys(summary["shots"].astype(str)))
    return "all" if "all" in shots else max(shots, key=int)


def drop_table(summary: pd.DataFrame, exposures: dict[str, str] | None = None) -> tuple[pd.DataFrame, str]:
    """Models x (IN-1K top-1, then points and percent lost on each level) at ``drop_shots``; with
    ``exposures`` (model -> its exposure), an Exposure column after the model's."""
    shots = drop_shots(summary)
    drops = generalization_drop(summary[summary["shots"].astype(str) == shots], REFERENCE)
    models = list(dict.fromkeys(summary["model"]))
    labels = dict(zip(summary["model"], summary["label"]))
    table = with_exposure(pd.DataFrame({"model": models, "Model": [labels[model] for model in models]}), exposures,
                          models, "Model")
    reference = summary[(summary["dataset"] == REFERENCE) & (summary["shots"].astype(str) == shots)]
    table["IN-1K top-1"] = table["model"].map(dict(zip(reference["model"], reference["mean"])))
    for dataset in dict.fromkeys(drops["dataset"]):
        rows = drops[drops["dataset"] == dataset].set_index("model")
        table[f"{dataset_title(dataset)} drop (points)"] = table["model"].map(rows["drop_points"])
        table[f"{dataset_title(dataset)} drop (%)"] = table["model"].map(rows["drop_percent"])
    return table.drop(columns="model"), shots


def drop_figure(summary: pd.DataFrame, exposures: dict[str, str] | None = None):
    """Each model's top-1 relative to its own IN-1K top-1, across the datasets."""
    shots = drop_shots(summary)
    datasets = list(dict.fromkeys(summary["dataset"]))
    drops = generalization_drop(summary[summary["shots"].astype(str) == shots], REFERENCE)
    fig, axes = plots.panel_grid(1, 1)
    fig.set_size_inches(max(4.5, 0.9 * len(datasets) + 2.5), 4.2)
    ax = axes[0, 0]
    styles = plots.ModelStyles(summary, **figure_marks(exposures, summary["model"]))
    if REFERENCE not in datasets or drops["drop_percent"].isna().all():
        plots.no_data(ax, "no complete IN-1K and level results to compare")
    else:
        x = np.arange(len(datasets))
        for model, rows in drops.groupby("model", sort=False):
            relative = rows.set_index("dataset")["drop_percent"].reindex(datasets)
            relative[REFERENCE] = 0.0
            ax.plot(x, -relative.to_numpy(float), markersize=4, linewidth=1.2, **styles[model])
        ax.set_xticks(x, [dataset_title(dataset) for dataset in datasets])
    ax.axhline(0.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xlabel(plots.DATASET_LABEL)
    ax.set_ylabel("Top-1 relative to the model's IN-1K top-1 (%)")
    ax.set_title(f"Concept-generalization drop, {shots_title(shots)}")
    plots.figure_legend(fig, axes, styles.legend_title())
    return fig


def drop_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="results-drop", description="The drop from IN-1K to each level, per model (table and figure)."
    )
    add_summary_options(parser)
    add_exposures_option(parser)
    args = parser.parse_args(argv)
    summary = lin_rows(read_summary(args.summary))
    layout = Layout(args.results_root)
    exposures = read_exposures(args.exposures)
    table, shots = drop_table(summary, exposures)
    write_tidy_table(
        layout, DROP_NAME, table,
        f"Concept-generalization drop ({shots_title(shots)}): IN-1K top-1 minus each level's top-1, "
        f"in points and in percent of the model's own IN-1K top-1.",
        ["Means over seeds; a model without complete IN-1K and level results has empty cells.",
         *exposure_notes(exposures, dict.fromkeys(summary["model"]))],
        {column: ".1f" for column in table.columns if column not in ("Model", EXPOSURE_COLUMN)},
    )
    plots.set_theme()
    fig = drop_figure(summary, exposures)
    plots.save_figure(fig, layout, DROP_NAME)
    plt.close(fig)
    return 0
