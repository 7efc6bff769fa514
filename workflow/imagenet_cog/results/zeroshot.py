"""The ``zeroshot-results`` command: the zero-shot probe's tables and figures.

* ``tables/zeroshot.*``: per image-text model and dataset, the zero-shot top-1 and top-5
  beside the linear probe on the same features (N = all, mean over seeds) and the N at which
  the few-shot linear probe overtakes zero-shot (:func:`crossover`);
* ``tables/zeroshot_open_set.*``: each dataset's test images classified among all the run's
  concepts: top-1, top-5 and where the errors go (the same dataset, IN-1K, another level);
* ``figures/zeroshot.*``: (a) zero-shot, open-set and linear top-1 across the levels; (b)
  the open set's errors by destination;
* ``figures/zeroshot_vs_nshot.*``: per dataset, the linear probe's top-1 against N with the
  zero-shot top-1 as a line and the crossover marked.

Given each model's exposure class (``--exposures``), both tables say it and the figures set apart the
models pretrained beyond IN-1K (``results.exposure``): image-text models mostly are.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from imagenet_cog.core.command_line import compared_results_arguments
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.naming import IN1K, OPEN_SET, ZEROSHOT, dataset_title
from imagenet_cog.core.plots import ModelStyles, figure_legend, no_data, panel_grid, save_figure, set_theme
from imagenet_cog.core.tables import RANDOM_WEIGHTS_MARK, write_table
from imagenet_cog.results.exposure import (
    TIDY_EXPOSURE_COLUMN,
    add_exposures_option,
    exposure_notes,
    figure_marks,
    read_exposures,
    with_exposure,
)
from imagenet_cog.results.summary import lin_rows, read_summary

OPEN_SET_NAME = f"{ZEROSHOT}_open_set"
VERSUS_NAME = f"{ZEROSHOT}_vs_nshot"
ERROR_DESTINATIONS = {"same": "same dataset", IN1K: "IN-1K", "other_level": "another level"}


def read_results(paths: Sequence[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-dataset zero-shot rows, open-set rows) from the result JSONs."""
    closed, opened = [], []
    for path in paths:
        result = json.loads(Path(path).read_text())
        if result.get("probe") != ZEROSHOT:
            raise ValueError(f"{path}: not a zero-shot result (probe {result.get('probe')!r}); delete it and re-run.")
        common = {"model": result["model"], "random_weights": bool(result["random_weights"])}
        if result["dataset"] == OPEN_SET:
            opened += [{**common, "dataset": dataset, "top1": scores["test_top1"], "top5": scores["test_top5"],
                        **{f"errors_{key}": scores["errors"][key] for key in ERROR_DESTINATIONS}}
                       for dataset, scores in result["datasets"].items()]
        else:
            closed.append({**common, "dataset": result["dataset"], "top1": result["test_top1"],
                           "top5": result["test_top5"], "classes": result["n_classes"], "test_images": result["n_test"]})
    return pd.DataFrame(closed), pd.DataFrame(opened)


def shots_order(shots: str) -> float:
    return math.inf if shots == "all" else float(shots)


def crossover(curve: pd.DataFrame, zeroshot: float) -> tuple[str, float]:
    """(the first N of the grid whose mean top-1 reaches ``zeroshot``, that N interpolated in
    log2 N between the grid's two Ns around it). ``curve``: the linear probe's rows of one
    model and dataset (shots, mean). Neither is given ("", nan) where no N reaches it; the
    interpolation is left out (nan) where the first N is the grid's smallest or N = all."""
    points = sorted(zip(curve["shots"], curve["mean"]), key=lambda point: shots_order(point[0]))
    for index, (shots, mean) in enumerate(points):
        if mean >= zeroshot:
            if index == 0 or shots == "all":
                return shots, math.nan
            below_shots, below_mean = points[index - 1]
            low, high = math.log2(float(below_shots)), math.log2(float(shots))
            step = (zeroshot - below_mean) / (mean - below_mean)
            return shots, 2 ** (low + step * (high - low))
    return "", math.nan


def compared(closed: pd.DataFrame, opened: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """The zero-shot rows with the linear probe's N = all mean, the open-set top-1 and the crossover."""
    linear = lin_rows(summary)
    rows = []
    for _, row in closed.iterrows():
        curve = linear[(linear["model"] == row["model"]) & (linear["dataset"] == row["dataset"])]
        at_all = curve[curve["shots"] == "all"]
        first, interpolated = crossover(curve, row["top1"]) if not curve.empty else ("", math.nan)
        open_row = opened[(opened["model"] == row["model"]) & (opened["dataset"] == row["dataset"])] \
            if not opened.empty else opened
        rows.append({**row.to_dict(), "linear_all": at_all["mean"].iloc[0] if not at_all.empty else math.nan,
                     "open_set_top1": open_row["top1"].iloc[0] if not open_row.empty else math.nan,
                     "crossover": first, "crossover_interpolated": interpolated})
    return pd.DataFrame(rows)


def model_label(models: dict, model: str, random_weights: bool) -> str:
    return models.get(model, {}).get("label", model) + (RANDOM_WEIGHTS_MARK if random_weights else "")


def zeroshot_table(rows: pd.DataFrame, models: dict, exposures: dict[str, str] | None = None) -> pd.DataFrame:
    """A row per model and dataset; each model's class after its name with ``exposures``."""
    table = pd.DataFrame({
        "model": [model_label(models, m, r) for m, r in zip(rows["model"], rows["random_weights"])],
        "dataset": rows["dataset"].map(dataset_title),
        "zero-shot top-1": rows["top1"].round(2), "zero-shot top-5": rows["top5"].round(2),
        "open-set top-1": rows["open_set_top1"].round(2), "linear top-1 (N = all)": rows["linear_all"].round(2),
        "linear overtakes at N": rows["crossover"].replace("", "never"),
        "N interpolated": [f"{value:.1f}" if math.isfinite(value) else "" for value in rows["crossover_interpolated"]],
        "concepts": rows["classes"], "test images": rows["test_images"],
    })
    return with_exposure(table, exposures, rows["model"], "model", TIDY_EXPOSURE_COLUMN)


def open_set_table(opened: pd.DataFrame, closed: pd.DataFrame, models: dict,
                   exposures: dict[str, str] | None = None) -> pd.DataFrame:
    rows = opened.merge(closed[["model", "dataset", "top1"]].rename(columns={"top1": "closed"}), on=["model", "dataset"],
                        how="left")
    table = pd.DataFrame({
        "model": [model_label(models, m, r) for m, r in zip(rows["model"], rows["random_weights"])],
        "dataset": rows["dataset"].map(dataset_title),
        "closed-set top-1": rows["closed"].round(2), "open-set top-1": rows["top1"].round(2),
        "open-set top-5": rows["top5"].round(2),
        **{f"errors: {title} (%)": rows[f"errors_{key}"].round(2) for key, title in ERROR_DESTINATIONS.items()},
    })
    return with_exposure(table, exposures, rows["model"], "model", TIDY_EXPOSURE_COLUMN)


def styled(rows: pd.DataFrame, models: dict, exposures: dict[str, str] | None) -> ModelStyles:
    labelled = rows.assign(label=[models.get(model, {}).get("label", model) for model in rows["model"]])
    return ModelStyles(labelled, **figure_marks(exposures, labelled["model"]))


def zeroshot_figure(rows: pd.DataFrame, opened: pd.DataFrame, datasets: Sequence[str], models: dict,
                    exposures: dict[str, str] | None = None):
    """(a) zero-shot, open-set and linear (N = all) top-1 across the datasets; (b) the open
    set's errors by destination, a bar group per model."""
    fig, axes = panel_grid(2, 2)
    absolute, errors = axes.flat[0], axes.flat[1]
    x = np.arange(len(datasets))
    styles = styled(rows, models, exposures)
    for model, frame in rows.groupby("model", sort=False):
        frame, style = frame.set_index("dataset").reindex(datasets), styles.markers(model)
        for column, linestyle, what in (("top1", "-", "zero-shot"), ("open_set_top1", ":", "open-set zero-shot"),
                                        ("linear_all", "--", "linear, N = all")):
            absolute.plot(x, frame[column], markersize=4, linestyle=linestyle,
                          **{**style, "label": f"{style['label']}, {what}"})
    if opened.empty:
        no_data(errors, "no open-set results (probes.zeroshot.open_set: false)")
    else:
        names = list(dict.fromkeys(opened["model"]))
        width = 0.8 / len(names)
        colours = dict(zip(ERROR_DESTINATIONS, ("#bbbbbb", "#d62728", "#1f77b4")))
        for index, model in enumerate(names):
            frame = opened[opened["model"] == model].set_index("dataset").reindex(datasets)
            bottom = np.zeros(len(datasets))
            for key, title in ERROR_DESTINATIONS.items():
                values = np.nan_to_num(frame[f"errors_{key}"].to_numpy(float))
                errors.bar(x - 0.4 + width * (index + 0.5), values, width, bottom=bottom, color=colours[key],
                           edgecolor=styles[model]["color"], label=f"open-set errors: {title}")
                bottom += values
        errors.set_ylabel("Test images (%)")
    for ax, title in ((absolute, "(a) Zero-shot and linear top-1"), (errors, "(b) Where open-set errors go")):
        ax.set_xticks(x, [dataset_title(dataset) for dataset in datasets])
        ax.set_xlabel("Dataset")
        ax.set_title(title)
    absolute.set_ylabel("Top-1 accuracy (%)")
    figure_legend(fig, axes, styles.legend_title(lines=False))
    return fig


def versus_figure(rows: pd.DataFrame, summary: pd.DataFrame, datasets: Sequence[str], models: dict,
                  exposures: dict[str, str] | None = None):
    """Per dataset: the linear probe's mean top-1 (95% interval) against N, the zero-shot
    top-1 of the same model as a horizontal line, the crossover as a dotted vertical line."""
    fig, axes = panel_grid(len(datasets), 3)
    linear = lin_rows(summary)
    styles = styled(rows, models, exposures)
    for ax, dataset in zip(axes.flat, datasets):
        shown = rows[rows["dataset"] == dataset]
        curves = linear[(linear["dataset"] == dataset) & linear["model"].isin(shown["model"])]
        if curves.empty:
            no_data(ax, "no linear probe results")
        grid = sorted(dict.fromkeys(curves["shots"]), key=shots_order)
        for _, row in shown.iterrows():
            style = styles.markers(row["model"])
            curve = curves[curves["model"] == row["model"]].set_index("shots").reindex(grid)
            position = np.arange(len(grid))
            ax.plot(position, curve["mean"], markersize=4, **{**style, "label": f"{style['label']}, linear probe"})
            ax.fill_between(position, curve["ci95_low"], curve["ci95_high"], color=style["color"], alpha=0.15)
            ax.axhline(row["top1"], color=style["color"], linestyle="--", linewidth=1.0,
                       label=f"{style['label']}, zero-shot")
            if row["crossover"] in grid:
                ax.axvline(grid.index(row["crossover"]), color=style["color"], linestyle=":", linewidth=1.0)
        ax.set_xticks(np.arange(len(grid)), grid)
        ax.set_xlabel("Training images per concept (N)")
        ax.set_ylabel("Top-1 accuracy (%)")
        ax.set_title(dataset_title(dataset))
    figure_legend(fig, axes, styles.legend_title(lines=False))
    return fig


def zeroshot_results_command(argv: Sequence[str]) -> int:
    """The zero-shot probe's tables and figures, beside the linear probe on the same features."""
    args = compared_results_arguments(argv, "zeroshot-results", zeroshot_results_command.__doc__, "image-text models",
                                      "zero-shot", add_exposures_option)
    layout, models, exposures = Layout(args.results_root), json.loads(args.models), read_exposures(args.exposures)
    closed, opened = read_results(args.results)
    summary = read_summary(args.summary)
    rows = compared(closed, opened, summary)
    caption = ("Zero-shot classification by the concepts' names (image-text models): top-1 and top-5 (%) of each "
               "dataset's test images among its own concepts and among all the run's (open set), beside the linear "
               "probe on the same image features (N = all, mean over seeds), and the N at which the few-shot linear "
               "probe's mean top-1 first reaches zero-shot's (interpolated in log2 N between the grid's Ns).")
    exposure_note = exposure_notes(exposures, closed["model"], TIDY_EXPOSURE_COLUMN)
    notes = ["IN-1K's concepts take open_clip's curated class names, the levels' WordNet's lemmas, told apart by "
             "hypernyms where two share a name (docs/probes.md, \"Zero-shot\").", *exposure_note]
    write_table(layout, ZEROSHOT, zeroshot_table(rows, models, exposures), caption, notes)
    if not opened.empty:
        write_table(layout, OPEN_SET_NAME, open_set_table(opened, closed, models, exposures),
                    "Open-set zero-shot: each dataset's test images classified among all the run's concepts (IN-1K "
                    "and the levels together), and where its errors go, in % of its test images.",
                    ["An error into another dataset is a concept the model confuses across levels; errors into IN-1K "
                     "show far concepts taken for the seen ones.", *exposure_note])
    set_theme()
    for name, fig in ((ZEROSHOT, zeroshot_figure(rows, opened, args.datasets, models, exposures)),
                      (VERSUS_NAME, versus_figure(rows, summary, args.datasets, models, exposures))):
        save_figure(fig, layout, name)
        plt.close(fig)
    for _, row in rows.iterrows():
        print(f"{row['model']} {row['dataset']}: zero-shot {row['top1']:.2f}, linear (N = all) {row['linear_all']:.2f}, "
              f"linear overtakes at N = {row['crossover'] or 'never'}")
    return 0
