"""Our top-1 against the paper's published top-1 (supp. Tables 5-10, resources/published_top1.tsv).

A configured model with a ``paper_name`` is compared, cell by cell (dataset x N), with that
row of the paper; models without one are left out. ``diff`` = ours - published (points).

Which differences the seeds do not explain: the paper gives mean and std (ddof=0) over 5
seeds, rounded to 0.1, so a printed std of 0.0 only says "below 0.05" and is taken as 0.05.
With n >= 2 seeds of ours the test is Welch's t-test from the two means, stds (both turned
into sample stds, ddof=1) and seed counts (``scipy.stats.ttest_ind_from_stats``,
``equal_var=False``). With one seed of ours there is no std of ours: the test asks whether
our value lies outside the 95% prediction interval of one more seed of the paper's
distribution, t = diff / (s * sqrt(1 + 1/5)) with 4 degrees of freedom. The p-values of all
compared cells are Holm-corrected together; a cell is marked where the corrected p < 0.05.
The tests see only seed noise: a difference from data, splits or software shows as a mark.
Given our models' exposure classes (``--exposures``), the figure sets apart those pretrained beyond
IN-1K (``results.exposure``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import stats

from imagenet_cog.core.command_line import add_summary_options
from imagenet_cog.core.layout import PUBLISHED_FIGURE, Layout
from imagenet_cog.core.naming import dataset_title, shots_title
from imagenet_cog.core.plots import ModelStyles, save_figure, set_theme
from imagenet_cog.core.tables import MISSING, RANDOM_WEIGHTS_NOTE, SIGNIFICANT_MARK, write_table, write_tidy_table
from imagenet_cog.results.exposure import add_exposures_option, figure_marks, read_exposures
from imagenet_cog.results.paper import resolve_paper_names
from imagenet_cog.results.statistics import ALPHA, holm
from imagenet_cog.results.summary import lin_rows, read_summary
from imagenet_cog.results.tables import display_label

PUBLISHED_SEEDS = 5
# the paper prints one decimal: a std printed as 0.0 is below 0.05
PUBLISHED_STD_FLOOR = 0.05
PUBLISHED_COLUMNS = ["model", "dataset", "shots", "mean", "std"]
COMPARISON_COLUMNS = [
    "model", "label", "paper_name", "dataset", "shots", "n_seeds", "mean", "std",
    "published_mean", "published_std", "diff", "t", "df", "p_value", "p_holm", "differs", "note",
]
NO_MODEL_NOTE = (
    "No configured model has a paper_name (or none has a complete result on a dataset and N of "
    "the paper), so nothing is compared. Set models.<name>.paper_name to the model's name in "
    "supp. Tables 5-10 (resources/published_top1.tsv)."
)
RULE_NOTE = (
    f"{SIGNIFICANT_MARK} the seeds do not explain the difference: Welch t-test of our seeds against "
    f"the paper's 5 (one seed of ours: outside the paper's 95% prediction interval), "
    f"Holm-corrected over all compared cells, p < 0.05; a printed std of 0.0 counts as 0.05."
)


def read_published(path: str | Path) -> pd.DataFrame:
    published = pd.read_csv(path, sep="\t", comment="#", dtype={"model": str, "dataset": str, "shots": str})
    missing = [column for column in PUBLISHED_COLUMNS if column not in published.columns]
    if missing:
        raise ValueError(f"{path}: not a table of published top-1 (lacks {', '.join(missing)}).")
    return published


def difference_test(diff: float, n_seeds: int, std: float, published_std: float) -> tuple[float, float, float]:
    """(t, degrees of freedom, two-sided p) of one cell (see the module docstring)."""
    published_sample_std = max(published_std, PUBLISHED_STD_FLOOR) * math.sqrt(PUBLISHED_SEEDS / (PUBLISHED_SEEDS - 1))
    if n_seeds >= 2:
        sample_std = std * math.sqrt(n_seeds / (n_seeds - 1))
        result = stats.ttest_ind_from_stats(
            diff, sample_std, n_seeds, 0.0, published_sample_std, PUBLISHED_SEEDS, equal_var=False
        )
        first, second = sample_std**2 / n_seeds, published_sample_std**2 / PUBLISHED_SEEDS
        df = (first + second) ** 2 / (first**2 / (n_seeds - 1) + second**2 / (PUBLISHED_SEEDS - 1))
        return float(result.statistic), float(df), float(result.pvalue)
    df = PUBLISHED_SEEDS - 1
    t = diff / (published_sample_std * math.sqrt(1 + 1 / PUBLISHED_SEEDS))
    return t, float(df), float(2 * stats.t.sf(abs(t), df))


def compare(summary: pd.DataFrame, published: pd.DataFrame, mapping: dict[str, str]) -> pd.DataFrame:
    """One row per configured cell of a mapped model that the paper has (module docstring)."""
    paper = published.set_index(["model", "dataset", "shots"])
    rows = []
    for _, cell in summary[summary["model"].isin(list(mapping))].iterrows():
        key = (mapping[cell["model"]], cell["dataset"], str(cell["shots"]))
        if key not in paper.index:
            continue
        row = {
            "model": cell["model"], "label": display_label(cell), "paper_name": key[0], "dataset": cell["dataset"],
            "shots": str(cell["shots"]), "n_seeds": int(cell["n_seeds"]), "mean": cell["mean"], "std": cell["std"],
            "published_mean": float(paper.loc[key, "mean"]), "published_std": float(paper.loc[key, "std"]),
        }
        if not cell["complete"]:
            rows.append({**row, "note": f"{int(cell['n_seeds'])}/{int(cell['expected_seeds'])} seeds: no mean"})
            continue
        row["diff"] = row["mean"] - row["published_mean"]
        t, df, p = difference_test(row["diff"], row["n_seeds"], row["std"], row["published_std"])
        rows.append({**row, "t": t, "df": df, "p_value": p, "note": ""})
    table = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    table["p_holm"] = holm(table["p_value"].to_numpy(float))
    table["differs"] = table["p_holm"] < ALPHA
    table["note"] = table["note"].fillna("")
    return table


def comparison_cell(row: pd.Series) -> str:
    if pd.isna(row["diff"]):
        return f"{MISSING} ({row['note']})"
    mark = SIGNIFICANT_MARK if row["differs"] else ""
    return f"{row['diff']:+.1f} ({row['mean']:.1f} vs {row['published_mean']:.1f}){mark}"


def dataset_table(comparison: pd.DataFrame, dataset: str, shots: list[str]) -> pd.DataFrame:
    """Models x N of "ours - published (ours vs published)" on one dataset."""
    cells = comparison[comparison["dataset"] == dataset]
    if cells.empty:
        return pd.DataFrame({"Model": [MISSING]})
    cells = cells.assign(cell=cells.apply(comparison_cell, axis=1))
    table = cells.pivot(index="model", columns="shots", values="cell")
    columns = [shot for shot in shots if shot in table.columns]
    table = table.reindex(index=list(dict.fromkeys(cells["model"])), columns=columns).fillna(MISSING)
    table.columns = [shots_title(shot) for shot in columns]
    labels = dict(zip(cells["model"], cells["label"] + " (" + cells["paper_name"] + ")"))
    table.insert(0, "Model", [labels[model] for model in table.index])
    return table.reset_index(drop=True)


def comparison_figure(comparison: pd.DataFrame, styles: ModelStyles):
    """Ours against published, one point per compared cell, the diagonal y = x; each model in
    its colour and marker of the other figures, and set apart as there."""
    set_theme()
    fig, ax = plt.subplots(figsize=(5.0, 5.0))
    compared = comparison[comparison["diff"].notna()]
    if compared.empty:
        ax.text(0.5, 0.5, "no model with a paper_name\nand a complete result", ha="center", va="center",
                transform=ax.transAxes, fontsize=9)
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 100)
    else:
        for model, rows in compared.groupby("model", sort=False):
            style = styles.markers(model)
            colour = style["color"]
            ax.errorbar(rows["published_mean"], rows["mean"], xerr=rows["published_std"], yerr=rows["std"],
                        markersize=3.5, capsize=1.5, linewidth=0.8, linestyle="none",
                        **{**style, "label": f"{style['label']} ({rows['paper_name'].iloc[0]})"})
            marked = rows[rows["differs"]]
            ax.scatter(marked["published_mean"], marked["mean"], s=50, facecolors="none", edgecolors=colour)
        low = min(compared["published_mean"].min(), compared["mean"].min()) - 2
        high = max(compared["published_mean"].max(), compared["mean"].max()) + 2
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        title = styles.legend_title(lines=False, models=compared["model"])
        # with a title, below the axes: the note is wider than the square plot
        place = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.15), "title": title, "title_fontsize": 7} if title \
            else {"loc": "upper left"}
        ax.legend(fontsize=7, **place)
    limits = np.array(ax.get_xlim())
    ax.plot(limits, limits, color="black", linestyle="--", linewidth=1.0)
    ax.set_xlabel("Published top-1 (%), supp. Tables 5-10")
    ax.set_ylabel("Our top-1 (%)")
    ax.set_title("Ours against the paper (circled: the seeds do not explain the difference)", fontsize=8)
    ax.set_aspect("equal")
    fig.tight_layout()
    return fig


def write_comparison(summary: pd.DataFrame, published: pd.DataFrame, models: dict[str, dict], layout: Layout,
                     exposures: dict[str, str] | None = None) -> pd.DataFrame:
    mapping = resolve_paper_names(models, list(dict.fromkeys(published["model"])))
    comparison = compare(summary, published, mapping)
    notes = [RULE_NOTE] if not comparison.empty else [NO_MODEL_NOTE]
    if summary.loc[summary["model"].isin(list(mapping)), "random_weights"].any():
        notes.append(RANDOM_WEIGHTS_NOTE)
    write_tidy_table(
        layout, "published_comparison", comparison,
        "Our top-1 against the paper's published top-1 (supp. Tables 5-10), per model, dataset and N.",
        notes,
        {"mean": ".2f", "std": ".2f", "published_mean": ".1f", "published_std": ".1f", "diff": ".2f",
         "t": ".2f", "df": ".1f", "p_value": ".2g", "p_holm": ".2g"},
    )
    shots = list(dict.fromkeys(summary["shots"].astype(str)))
    for dataset in dict.fromkeys(summary["dataset"]):
        table = dataset_table(comparison, dataset, shots)
        write_table(
            layout, f"published_{dataset}", table,
            f"Ours minus published top-1 on {dataset_title(dataset)}, per N, in points "
            f"(our mean vs the paper's mean).",
            notes if len(table.columns) > 1 else [NO_MODEL_NOTE],
        )
    fig = comparison_figure(comparison, ModelStyles(summary, **figure_marks(exposures, summary["model"])))
    save_figure(fig, layout, PUBLISHED_FIGURE)
    plt.close(fig)
    return comparison


def published_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="results-published", description="Compare our top-1 with the paper's published top-1."
    )
    add_summary_options(parser)
    parser.add_argument("--published", required=True, help="resources/published_top1.tsv")
    parser.add_argument("--models", required=True, help="JSON object: model name -> its config entry")
    add_exposures_option(parser)
    args = parser.parse_args(argv)
    comparison = write_comparison(
        lin_rows(read_summary(args.summary)), read_published(args.published), json.loads(args.models),
        Layout(args.results_root), read_exposures(args.exposures),
    )
    compared = int(comparison["diff"].notna().sum())
    print(f"{compared} cells compared, {int(comparison['differs'].sum())} differ" if compared else NO_MODEL_NOTE)
    return 0
