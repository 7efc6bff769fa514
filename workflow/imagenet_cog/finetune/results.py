"""The ``finetune-results`` command: the fine-tuning control's table and the paper's Fig. 6.

Per model and dataset: the fine-tuned network's top-1 and top-5, the frozen features' linear
probe (N = all, mean over the probe seeds, from the results summary) and the frozen top-1
relative to the fine-tuned one, in percent (CoG supp. C.2, Fig. 6: "Pre-extracted" against
"Fine-tuned" at 100). Frozen features that lose more of what fine-tuning reaches on the far
levels are the paper's evidence that the drop comes from the representation, not from the
levels being harder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from imagenet_cog.core import plots
from imagenet_cog.core.command_line import compared_results_arguments
from imagenet_cog.core.layout import FINETUNE_NAME, Layout
from imagenet_cog.core.naming import dataset_title
from imagenet_cog.core.tables import RANDOM_WEIGHTS_MARK, write_table
from imagenet_cog.results.summary import lin_rows, read_summary

RESULT_KEYS = ("model", "dataset", "top1", "top5", "test_images", "train_images", "recipe")


def read_results(paths: Sequence[Path]) -> pd.DataFrame:
    """One row per fine-tuning result JSON."""
    rows = []
    for path in paths:
        result = json.loads(Path(path).read_text())
        missing = [key for key in RESULT_KEYS if key not in result]
        if missing:
            raise ValueError(f"{path}: not a fine-tuning result (no {', '.join(missing)}); delete it and re-run.")
        rows.append({"model": result["model"], "dataset": result["dataset"], "finetuned": result["top1"],
                     "finetuned_top5": result["top5"], "epochs": result["recipe"]["epochs"],
                     "train_images": result["train_images"], "test_images": result["test_images"],
                     # the most training images an epoch left out, and the test images left out
                     # (data.max_undecodable_fraction); results older than the count read 0
                     "undecodable_images": max((epoch.get("undecodable", 0) for epoch in result.get("history", [])),
                                               default=0) + result.get("test_undecodable", 0)})
    return pd.DataFrame(rows)


def compared(finetuned: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """The fine-tuned results beside the frozen linear probe's N = all means (their 95%
    intervals too) and ``relative`` = frozen / fine-tuned in percent."""
    frozen = lin_rows(summary)
    frozen = frozen[frozen["shots"] == "all"][["model", "label", "random_weights", "dataset", "mean", "std",
                                               "ci95_low", "ci95_high"]]
    table = finetuned.merge(frozen, on=["model", "dataset"], how="left")
    scale = 100.0 / table["finetuned"].where(table["finetuned"] > 0)
    table["relative"] = table["mean"] * scale
    table["relative_low"], table["relative_high"] = table["ci95_low"] * scale, table["ci95_high"] * scale
    return table


def table_of(rows: pd.DataFrame, models: dict) -> pd.DataFrame:
    def label(row) -> str:
        text = models.get(row["model"], {}).get("label", row["model"])
        return text + (RANDOM_WEIGHTS_MARK if row["random_weights"] is True else "")

    return pd.DataFrame({
        "model": rows.apply(label, axis=1), "dataset": rows["dataset"].map(dataset_title),
        "fine-tuned top-1": rows["finetuned"].round(2), "fine-tuned top-5": rows["finetuned_top5"].round(2),
        "frozen linear top-1": rows["mean"].round(2), "frozen std": rows["std"].round(2),
        "frozen / fine-tuned (%)": rows["relative"].round(1), "epochs": rows["epochs"],
        "train images": rows["train_images"], "test images": rows["test_images"],
        "undecodable images": rows["undecodable_images"],
    })


def finetune_figure(rows: pd.DataFrame, datasets: Sequence[str]):
    """(a) top-1 of the fine-tuned networks and of the frozen features' linear probe;
    (b) the frozen top-1 relative to the fine-tuned one (Fig. 6)."""
    fig, axes = plots.panel_grid(2, 2)
    absolute, relative = axes.flat[0], axes.flat[1]
    x = np.arange(len(datasets))
    labelled = rows.dropna(subset=["label"])
    if labelled.empty:
        for ax in (absolute, relative):
            plots.no_data(ax, "no frozen linear probe at N = all for the fine-tuned models")
    styles = plots.ModelStyles(labelled) if not labelled.empty else None
    for model, frame in labelled.groupby("model", sort=False):
        frame = frame.set_index("dataset").reindex(datasets)
        style = styles[model]
        absolute.plot(x, frame["finetuned"], color=style["color"], marker=style["marker"], markersize=4,
                      label=f"{style['label']}, fine-tuned")
        absolute.plot(x, frame["mean"], color=style["color"], marker=style["marker"], markersize=4, linestyle="--",
                      label=f"{style['label']}, pre-extracted")
        values = frame["relative"].to_numpy(float)
        error = np.clip(np.vstack([values - frame["relative_low"].to_numpy(float),
                                   frame["relative_high"].to_numpy(float) - values]), 0.0, None)
        relative.errorbar(x, values, yerr=np.nan_to_num(error), color=style["color"], marker=style["marker"],
                          markersize=4, capsize=2, linestyle="--", label=f"{style['label']}, pre-extracted")
    relative.axhline(100.0, color="black", linewidth=1.0, label="fine-tuned (100%)")
    for ax, ylabel, title in ((absolute, "Top-1 accuracy (%)", "(a) Fine-tuned and pre-extracted"),
                              (relative, "Top-1 relative to fine-tuned (%)", "(b) Relative to fine-tuning (Fig. 6)")):
        ax.set_xticks(x, [dataset_title(dataset) for dataset in datasets])
        ax.set_xlabel(plots.DATASET_LABEL if ax is absolute else "Dataset")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    plots.figure_legend(fig, axes)
    return fig


def finetune_results_command(argv: Sequence[str]) -> int:
    """The fine-tuned models' top-1 beside the frozen linear probe's, as a table and Fig. 6."""
    args = compared_results_arguments(argv, "finetune-results", finetune_results_command.__doc__, "fine-tuned models", "fine-tuning")
    layout = Layout(args.results_root)
    rows = compared(read_results(args.results), read_summary(args.summary))
    caption = ("Fine-tuning control (CoG supp. C.2, Fig. 6): top-1 (%) of each model fine-tuned on each dataset's "
               "training split and tested on its test split, beside the linear probe on its frozen features (N = all, "
               "mean and std over the probe seeds), and the frozen top-1 relative to the fine-tuned one.")
    notes = ["Frozen / fine-tuned near 100% on IN-1K and falling towards L5: the frozen representation, not the "
             "level's difficulty, loses the far concepts (the paper's reading of Fig. 6)."]
    write_table(layout, FINETUNE_NAME, table_of(rows, json.loads(args.models)), caption, notes)
    plots.set_theme()
    fig = finetune_figure(rows, args.datasets)
    plots.save_figure(fig, layout, FINETUNE_NAME)
    plt.close(fig)
    for _, row in rows.iterrows():
        print(f"{row['model']} {row['dataset']}: fine-tuned {row['finetuned']:.2f}, frozen {row['mean']:.2f}, "
              f"relative {row['relative']:.1f}%")
    return 0
