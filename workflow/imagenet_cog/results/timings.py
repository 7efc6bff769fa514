"""Seconds per model and dataset: Snakemake's benchmark files and the probe results' own timings;
beside them the images the extraction left out undecoded (``data.max_undecodable_fraction``),
so that a reader sees what the features lack."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Sequence

import pandas as pd

from imagenet_cog.core.io import atomic_output, write_text
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.tables import markdown_table
from imagenet_cog.features.store import read_metadata
from imagenet_cog.results.summary import grid_arguments, load_all_probe_results, model_label

SPLITS = ("train", "test")


def benchmark_seconds(benchmark_root: Path, models: Sequence[str], datasets: Sequence[str]) -> pd.DataFrame:
    """Seconds per (stage, model, dataset) summed over Snakemake ``benchmark:`` files.

    A file counts for a model and dataset when its path below ``benchmark_root`` has one
    component equal to each; its first component names the stage (e.g. ``features``).
    """
    rows = []
    for path in sorted(benchmark_root.rglob("*.tsv")) if benchmark_root.is_dir() else []:
        parts = path.relative_to(benchmark_root).with_suffix("").parts
        model = next((part for part in parts if part in models), None)
        dataset = next((part for part in parts if part in datasets), None)
        if model is None or dataset is None or len(parts) < 2:
            continue
        measured = pd.read_csv(path, sep="\t")
        if "s" not in measured.columns:
            raise ValueError(f"{path}: not a Snakemake benchmark file (no 's' column); delete it and re-run.")
        rows.append({"stage": parts[0], "model": model, "dataset": dataset, "seconds": float(measured["s"].sum())})
    return pd.DataFrame(rows, columns=["stage", "model", "dataset", "seconds"])


def undecodable_images(results_root: Path, models: Sequence[str], datasets: Sequence[str]) -> pd.DataFrame:
    """Per model and dataset: the images of its feature files (both splits) recorded invalid."""
    layout = Layout(str(results_root))
    rows = []
    for model in models:
        for dataset in datasets:
            paths = [Path(layout.features(model, dataset, split)) for split in SPLITS]
            if all(path.is_file() for path in paths):
                count = sum(int(read_metadata(path).get("num_invalid", 0)) for path in paths)
                rows.append({"model": model, "dataset": dataset, "undecodable_images": count})
    return pd.DataFrame(rows, columns=["model", "dataset", "undecodable_images"])


def timings_table(runs: pd.DataFrame, benchmarks: pd.DataFrame, models: dict[str, dict],
                  undecodable: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per model and dataset: seconds of each benchmarked stage, probe seconds from the JSONs
    and the images its features lack (``undecodable``)."""
    probe = runs.groupby(["model", "dataset"], sort=False).agg(
        probe_runs=("seed", "size"), probe_s_from_results=("probe_s", "sum")
    )
    stages = benchmarks.pivot_table(index=["model", "dataset"], columns="stage", values="seconds", aggfunc="sum")
    stages.columns = [f"{stage}_s" for stage in stages.columns]
    table = probe.join(stages, how="outer")[[*stages.columns, *probe.columns]]
    if undecodable is not None:
        table = table.join(undecodable.set_index(["model", "dataset"]), how="left")
    table = table.reset_index()
    table.insert(1, "label", [model_label(model, models.get(model, {})) for model in table["model"]])
    order = {model: index for index, model in enumerate(models)}
    table = table.sort_values(["model", "dataset"], key=lambda column: column.map(order) if column.name == "model" else column)
    table = table.round(1)
    if "undecodable_images" in table:
        table["undecodable_images"] = table["undecodable_images"].astype("Int64")
    return table



def timings_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="results-timings", description="Per-model extraction and probe seconds."
    )
    grid_arguments(parser)
    parser.add_argument("--benchmark-root", required=True,
                        help="folder of Snakemake benchmark files; a relative one is taken under --results-root")
    parser.add_argument("--output", required=True, help="the timings CSV; a .md rendering is written beside it")
    args = parser.parse_args(argv)
    models = json.loads(args.models)
    runs = load_all_probe_results(args, models)
    benchmarks = benchmark_seconds(Path(args.results_root) / args.benchmark_root, list(models), args.datasets)
    table = timings_table(runs, benchmarks, models, undecodable_images(Path(args.results_root), list(models), args.datasets))
    with atomic_output(args.output) as temporary:
        table.to_csv(temporary, index=False)
    markdown = markdown_table(
        table.astype(object).where(table.notna(), "").astype(str), "Seconds per model and dataset (Snakemake benchmarks; probe JSON timings); images left out undecoded", []
    )
    write_text(Path(args.output).with_suffix(".md"), markdown)
    return 0

