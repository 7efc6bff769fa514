"""The levels along the ranking, like Fig. 2 of the paper: sim_IN1K of every eligible
concept in rank order, with each level's ranks shaded."""

from __future__ import annotations

import argparse
from itertools import groupby

import matplotlib.pyplot as plt

from imagenet_cog.core.io import read_tsv
from imagenet_cog.core.naming import is_level, level_number
from imagenet_cog.core.plots import save_figure_file


def level_runs(labels: list[str]) -> list[tuple[str, int, int]]:
    """(label, first rank, last rank) of each run of equal labels (ranks from 1)."""
    runs, rank = [], 1
    for label, group in groupby(labels):
        size = len(list(group))
        runs.append((label, rank, rank + size - 1))
        rank += size
    return runs


def draw_levels_figure(ranking: list[dict[str, str]], outputs: list[str], measure: str = "Lin") -> None:
    ranks = [int(row["rank"]) for row in ranking]
    similarity = [float(row["sim_in1k"]) for row in ranking]
    labels = [row["level"] for row in ranking]
    level_names = sorted({label for label in labels if is_level(label)}, key=level_number)
    colours = dict(zip(level_names, plt.get_cmap("viridis")([i / max(1, len(level_names) - 1) * 0.9 for i in range(len(level_names))])))

    figure, axis = plt.subplots(figsize=(7.0, 3.2))
    labelled = set()
    for label, first, last in level_runs(labels):
        if label not in colours:
            continue
        axis.axvspan(first - 0.5, last + 0.5, color=colours[label], alpha=0.25, linewidth=0)
        if label not in labelled:
            axis.text((first + last) / 2, 1.02, f"L{label[1:]}", ha="center", va="bottom",
                      transform=axis.get_xaxis_transform(), fontsize=9)
            labelled.add(label)
    axis.plot(ranks, similarity, color="black", linewidth=1.2)
    axis.set_xlim(0.5, len(ranks) + 0.5)
    if measure in ("Lin", "Wu-Palmer", "path"):
        axis.set_ylim(0, 1)
    axis.set_xlabel(f"eligible unseen concepts, ranked ({len(ranks)})")
    axis.set_ylabel(r"$\mathrm{sim}_{\mathrm{IN\text{-}1K}}$" + f" ({measure})")
    axis.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    for path in outputs:
        save_figure_file(figure, path)
    plt.close(figure)


def levels_figure_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog levels-figure",
        description="Plot sim_IN1K along the ranking with the levels shaded (paper Fig. 2).",
    )
    parser.add_argument("--ranking", required=True, help="ranking.tsv from cut-levels")
    parser.add_argument("--outputs", nargs="+", required=True, help="image files; the suffix picks the format (png, pdf)")
    parser.add_argument("--measure", default="Lin", help="the similarity's name on the y axis")
    args = parser.parse_args(argv)
    draw_levels_figure(read_tsv(args.ranking), args.outputs, args.measure)
    return 0
