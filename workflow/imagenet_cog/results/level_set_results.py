"""Top-1 per level for every level set, like the paper's supp. Fig. 7, and its table.

From the tidy summary's level-set rows at one N (``all`` by default): per model, one line
per ranked set (Lin and each configured measure) over levels L1..Ln, and the random draws
as a horizontal band: the mean over draws of each draw's seed-mean top-1, +- the population
standard deviation over draws (the draws are not ordered, so the band spans every level).
"""

from __future__ import annotations

import argparse
import math

import matplotlib.pyplot as plt
import pandas as pd

from imagenet_cog.core.command_line import add_summary_options
from imagenet_cog.core.layout import LEVEL_SETS_NAME, Layout
from imagenet_cog.core.naming import IN1K, LINEAR, MEASURE_TITLES, RANDOM, level_number, view_parts
from imagenet_cog.core.plots import save_figure
from imagenet_cog.core.tables import write_table
from imagenet_cog.results.summary import read_summary


def level_set_frame(summary: pd.DataFrame, shots: str) -> pd.DataFrame:
    """model, label, level_set, level (1..n, NaN for random draws), mean of the linear probe's
    level rows at ``shots`` (the level sets are probed linearly; Lin's levels also have the
    other kinds' rows, which the table's pivot would otherwise average in)."""
    frame = summary[(summary["shots"] == shots) & (summary["dataset"] != IN1K) & (summary["probe"] == LINEAR)].copy()
    frame["level"] = [
        math.nan if level_set == RANDOM else level_number(view_parts(d)[1] if "-" in d else d)
        for d, level_set in zip(frame["dataset"], frame["level_set"])
    ]
    return frame


def random_band(frame: pd.DataFrame) -> pd.DataFrame:
    """Per model: mean and population std over random draws of the draws' mean top-1."""
    draws = frame[frame["level_set"] == "random"]
    grouped = draws.groupby("model")["mean"]
    return pd.DataFrame({"random_mean": grouped.mean(), "random_std": grouped.std(ddof=0), "draws": grouped.count()})


def level_set_table(frame: pd.DataFrame) -> pd.DataFrame:
    ranked = frame[frame["level_set"] != "random"]
    table = ranked.pivot_table(index=["label", "level_set"], columns="level", values="mean", sort=False)
    table.columns = [f"L{int(c)}" for c in table.columns]
    table = table.reset_index().rename(columns={"label": "model", "level_set": "level set"})
    band = random_band(frame)
    labels = frame.drop_duplicates("model").set_index("model")["label"]
    rows = []
    for model, row in band.iterrows():
        rows.append({"model": labels[model], "level set": f"random ({int(row['draws'])} draws)",
                     **{c: f"{row['random_mean']:.1f} ± {row['random_std']:.1f}" for c in table.columns[2:]}})
    table["level set"] = [MEASURE_TITLES.get(v, v) for v in table["level set"]]
    for column in table.columns[2:]:
        table[column] = [f"{v:.1f}" if isinstance(v, float) and not math.isnan(v) else "—" for v in table[column]]
    return pd.concat([table, pd.DataFrame(rows)], ignore_index=True).sort_values("model", kind="stable")


def level_set_figure(frame: pd.DataFrame, shots: str):
    models = list(dict.fromkeys(frame["model"]))
    labels = frame.drop_duplicates("model").set_index("model")["label"]
    band = random_band(frame)
    columns = min(3, max(1, len(models)))
    rows = math.ceil(len(models) / columns) if models else 1
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows + 0.8), squeeze=False)
    sets = [s for s in dict.fromkeys(frame["level_set"]) if s != "random"]
    # orange is the random band's
    colours = dict(zip(sets, plt.get_cmap("tab10")([i for i in range(10) if i != 1][: len(sets)])))
    for ax, model in zip(axes.flat, models):
        cells = frame[frame["model"] == model]
        levels = sorted(int(level) for level in cells["level"].dropna().unique())
        if model in band.index and not math.isnan(band.loc[model, "random_mean"]):
            mean, std = band.loc[model, "random_mean"], band.loc[model, "random_std"]
            span = (min(levels, default=1) - 0.2, max(levels, default=1) + 0.2)
            ax.fill_between(span, mean - std, mean + std, color="tab:orange", alpha=0.25, linewidth=0)
            ax.plot(span, [mean, mean], color="tab:orange", label=f"random ({int(band.loc[model, 'draws'])} draws)")
        for level_set in sets:
            line = cells[cells["level_set"] == level_set].dropna(subset=["level"]).sort_values("level")
            ax.plot(line["level"], line["mean"], marker="o", color=colours[level_set],
                    label=MEASURE_TITLES.get(level_set, level_set))
        ax.set_title(labels[model])
        ax.set_xticks(levels, [f"L{level}" for level in levels])
        ax.set_ylabel(f"top-1 (%), N={shots}")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(models):]:
        ax.axis("off")
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=max(1, min(2 * columns, len(names))), frameon=False)
    fig.tight_layout(rect=(0, 0.8 / (3.2 * rows + 0.8) + 0.02, 1, 1))
    return fig


def level_sets_results_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog level-sets-results",
        description="Fig. 7-like figure and table: top-1 per level for every level set.",
    )
    add_summary_options(parser)
    parser.add_argument("--shots", default="all", help="the N shown")
    args = parser.parse_args(argv)
    layout = Layout(args.results_root)
    frame = level_set_frame(read_summary(args.summary), args.shots)
    table = level_set_table(frame)
    caption = (f"Top-1 (%) per level of each level set at N={args.shots}; random: mean ± std over draws "
               f"of the draws' mean over seeds.")
    write_table(layout, LEVEL_SETS_NAME, table, caption, [])
    save_figure(level_set_figure(frame, args.shots), layout, LEVEL_SETS_NAME, dpi=150, tight=False)
    print(f"{len(table)} rows; figure of {frame['model'].nunique()} models")
    return 0
