"""Class-balanced variant (paper supp. A.4): every concept with the same number of training images.

The paper sub-samples every concept of every level, and of IN-1K, to 732 training images
(the fewest any IN-1K concept has) and keeps the same 50 test images. Here the variant's
dataset ``balanced-<dataset>`` (``balanced-in1k``, ``balanced-l3``, ...) is:

* a split table (``Layout.balanced_split``) with the rows of the default one
  (``Layout.image_splits``): ``train_per_concept`` training rows of each concept, drawn
  with a generator seeded by (seed, wnid) alone, and every test row; same columns, labels
  and row order, so it is a subset of the default table;
* feature files that are views (:mod:`imagenet_cog.features.views`) over the default dataset's
  extracted shards, holding only those rows: nothing is extracted again.

Its probes, result JSONs and Optuna journals live under the ``balanced-<dataset>`` name,
beside the default ones, so both variants share one results tree.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from imagenet_cog.core.io import read_tsv, write_tsv
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.naming import balanced_dataset
from imagenet_cog.core.sampling import derived_rng
from imagenet_cog.features.views import write_view
from imagenet_cog.splits.image_splits import HEADER, SplitError


def balanced_rows(
    table: Sequence[Mapping[str, str]], train_per_concept: int, seed: int, where: str
) -> list[Mapping[str, str]]:
    """The default table's rows kept by the variant, in the table's order."""
    train_of: dict[str, list[str]] = defaultdict(list)
    for row in table:
        if row["split"] == "train":
            train_of[row["wnid"]].append(row["path"])
    short = {wnid: len(paths) for wnid, paths in train_of.items() if len(paths) < train_per_concept}
    if short:
        wnid, count = min(short.items(), key=lambda item: item[1])
        raise SplitError(
            f"{where}: {len(short)} concepts have fewer than balanced.train_per_concept="
            f"{train_per_concept} training images (e.g. {wnid}: {count}); lower balanced.train_per_concept "
            f"to at most {count} in config.yaml."
        )
    kept = set()
    for wnid, paths in train_of.items():
        chosen = derived_rng("balanced", seed, wnid).choice(len(paths), size=train_per_concept, replace=False)
        kept.update(paths[index] for index in chosen)
    return [row for row in table if row["split"] == "test" or row["path"] in kept]


def balanced_split_command(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog balanced-split", description=__doc__.split("\n")[0])
    parser.add_argument("--table", required=True, help="the dataset's default split table")
    parser.add_argument("--train-per-concept", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    try:
        rows = balanced_rows(read_tsv(args.table), args.train_per_concept, args.seed, args.table)
    except SplitError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    write_tsv(args.output, HEADER, ([row[column] for column in HEADER] for row in rows))
    return 0


def balanced_view_command(argv: Sequence[str]) -> int:
    """Feature views of a balanced dataset's train and test splits over the default shards."""
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog balanced-view", description=balanced_view_command.__doc__)
    parser.add_argument("--dataset", required=True, help="the variant's name, e.g. balanced-l3")
    parser.add_argument("--balanced-table", required=True)
    parser.add_argument("--source", required=True, help="the default dataset, e.g. l3")
    parser.add_argument("--source-table", required=True)
    parser.add_argument("--source-features", nargs=2, required=True, metavar=("TRAIN", "TEST"))
    parser.add_argument("--outputs", nargs=2, required=True, metavar=("TRAIN", "TEST"))
    args = parser.parse_args(argv)
    table = read_tsv(args.balanced_table)
    concepts = sorted({row["wnid"] for row in table})
    for split, features, output in zip(("train", "test"), args.source_features, args.outputs):
        keep = {row["path"] for row in table if row["split"] == split}
        written = write_view(output, args.dataset, split, concepts,
                             [(args.source, Path(args.source_table), Path(features))], keep_paths=keep)
        print(f"{args.dataset} {split}: {written['rows']} rows of {written['concepts']} concepts from {args.source}")
    return 0


def comparison_table(layout, models: Mapping[str, Mapping], datasets: Sequence[str], seeds: Sequence[str]):
    """Per model and dataset: mean N = all top-1 over ``seeds``, default and balanced."""
    # pandas and matplotlib (~3 s with the plot helpers) only for balanced-results: the
    # balanced-split and balanced-view jobs of this module start without them
    import pandas as pd

    def mean_top1(model: str, dataset: str) -> float:
        values = [json.loads(Path(layout.probe_result(model, dataset, "all", seed)).read_text())["test_top1"] for seed in seeds]
        return sum(values) / len(values)

    rows = []
    for model, entry in models.items():
        for dataset in datasets:
            default, balanced = mean_top1(model, dataset), mean_top1(model, balanced_dataset(dataset))
            rows.append({"model": entry.get("label", model), "dataset": dataset, "default": round(default, 2),
                         "balanced": round(balanced, 2), "balanced - default": round(balanced - default, 2)})
    return pd.DataFrame(rows)


def comparison_figure(table):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    colours = plt.get_cmap("tab10")
    for number, (model, rows) in enumerate(table.groupby("model", sort=False)):
        ax.plot(rows["dataset"], rows["default"], marker="o", color=colours(number), label=f"{model} default")
        ax.plot(rows["dataset"], rows["balanced"], marker="s", linestyle="--", color=colours(number),
                label=f"{model} balanced")
    ax.set_ylabel("top-1 (%), N = all")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def balanced_results_command(argv: Sequence[str]) -> int:
    from imagenet_cog.core.plots import save_figure
    from imagenet_cog.core.tables import write_table

    parser = argparse.ArgumentParser(prog="python -m imagenet_cog balanced-results",
                                     description="Default vs class-balanced top-1 per model and dataset (supp. A.4).")
    parser.add_argument("--results-root", required=True)
    parser.add_argument("--models", required=True, help="JSON: the models' config entries")
    parser.add_argument("--datasets", nargs="+", required=True)
    parser.add_argument("--seeds", nargs="+", required=True)
    parser.add_argument("--train-per-concept", type=int, required=True)
    args = parser.parse_args(argv)
    layout = Layout(args.results_root)
    table = comparison_table(layout, json.loads(args.models), args.datasets, args.seeds)
    caption = (f"Top-1 (%) at N = all, mean over seeds {', '.join(args.seeds)}: default splits and the class-balanced "
               f"variant ({args.train_per_concept} training images per concept everywhere, same test images).")
    write_table(layout, "balanced", table, caption, [])
    save_figure(comparison_figure(table), layout, "balanced", dpi=150, tight=False)
    print(f"{len(table)} rows")
    return 0
