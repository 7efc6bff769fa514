"""Probe results -> one tidy summary -> the paper's tables (Sec. 4.2, supp. Tables 5-10).

The summary has one row per model x dataset x shots of the configured grid, so a run that
is missing shows up as a row, never as an absent one:

    model, label, category, random_weights, probe, dataset, shots,
    mean, std, top5_mean, top5_std, n_seeds, expected_seeds, complete, missing_seeds

``mean``/``std`` are the test top-1 (percent) over the seeds, ``std`` with ddof=0 (the
population standard deviation, as the authors' result script computes it over its 5 seeds).
A cell is only given a mean when *every* configured seed has a result: with a seed missing
``mean``/``std`` are empty, ``complete`` is False and ``missing_seeds`` lists the seeds, so
an incomplete cell never passes for a mean over fewer seeds. Rendered tables show such a
cell as ``— (3/5 seeds)``.

``probe`` is the probe kind (linear, mlp, mlp_noact; ``probes.kinds``); the paper's tables
and figures are the linear probe's, and the other kinds' rows cover their own shots and
seeds (``probes.other_kinds_shots/seeds``). Table ``probe_kinds`` (000 Tab. 3) gives each
other kind's top-1 relative to the linear probe's at N=all: 100 x (kind - linear) / linear;
tables ``pca_top1`` / ``pca_relative`` (000 Tab. 5, Fig. 8) the pca-<d> probes' top-1
against d, absolute and minus the baseline's at the same d.

Relative numbers are ``model - baseline`` in percentage points, per dataset and shots,
both means over all seeds; their std is the model's own std over seeds.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from .io import atomic_output, write_text
from .layout import Layout
from .models import is_random_weights

SUMMARY_COLUMNS = [
    "model", "label", "category", "random_weights", "probe", "dataset", "shots",
    "mean", "std", "top5_mean", "top5_std",
    "n_seeds", "expected_seeds", "complete", "missing_seeds",
]
REQUIRED_RESULT_KEYS = ("model", "dataset", "shots", "seed", "test_top1", "test_top5", "random_weights")
RANDOM_WEIGHTS_MARK = "†"
RANDOM_WEIGHTS_NOTE = "† randomly initialised weights: a sanity baseline, not a pretrained model."
MISSING = "—"


def dataset_title(dataset: str) -> str:
    """The paper's names: IN-1K, L1, L2, ..."""
    return "IN-1K" if dataset == "in1k" else dataset.upper()


def shots_title(shots: str) -> str:
    return "All" if shots == "all" else f"N={shots}"


def model_label(name: str, metadata: dict) -> str:
    return metadata.get("label") or name


# probe results -> summary ----------------------------------------------------------------
def read_probe_result(path: Path) -> dict:
    try:
        with open(path) as stream:
            result = json.load(stream)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{path}: not valid JSON ({error}); delete it and re-run its probe job."
        ) from error
    missing = [key for key in REQUIRED_RESULT_KEYS if key not in result]
    if missing:
        raise ValueError(
            f"{path}: probe result lacks {', '.join(missing)}; it was written by another "
            f"version of the probe stage: delete it and re-run its probe job."
        )
    return result


def load_probe_results(
    root: str, models: Sequence[str], datasets: Sequence[str], shots: Sequence[str], seeds: Sequence[str],
    kind: str = "linear",
) -> pd.DataFrame:
    """One row per probe result file of the grid that exists (model, probe, dataset, shots, seed, ...)."""
    layout = Layout(root)
    rows = []
    for model in models:
        for dataset in datasets:
            for shot in shots:
                for seed in seeds:
                    path = Path(layout.probe_result(model, dataset, shot, seed, kind))
                    if not path.exists():
                        continue
                    result = read_probe_result(path)
                    timings = result.get("timings") or {}
                    rows.append({
                        "model": model, "probe": kind, "dataset": dataset, "shots": str(shot), "seed": str(seed),
                        "test_top1": float(result["test_top1"]),
                        "test_top5": float(result["test_top5"]),
                        "random_weights": bool(result["random_weights"]),
                        "probe_s": float(timings.get("total_s", math.nan)),
                    })
    columns = ["model", "probe", "dataset", "shots", "seed", "test_top1", "test_top5", "random_weights", "probe_s"]
    return pd.DataFrame(rows, columns=columns)


def population_std(values: pd.Series) -> float:
    return float(values.std(ddof=0))


def summarise(
    runs: pd.DataFrame,
    models: dict[str, dict],
    datasets: Sequence[str],
    shots: Sequence[str],
    seeds: Sequence[str],
    kind: str = "linear",
) -> pd.DataFrame:
    """The tidy summary of one probe kind over its full grid (see the module docstring)."""
    seeds = [str(seed) for seed in seeds]
    rows = []
    for model, metadata in models.items():
        model_runs = runs[(runs["model"] == model) & (runs["probe"] == kind)]
        random_weights = bool(model_runs["random_weights"].any()) or is_random_weights(str(metadata.get("weights", "")))
        for dataset in datasets:
            for shot in shots:
                cell = model_runs[(model_runs["dataset"] == dataset) & (model_runs["shots"] == str(shot))]
                present = set(cell["seed"])
                missing = [seed for seed in seeds if seed not in present]
                complete = not missing
                rows.append({
                    "model": model,
                    "label": model_label(model, metadata),
                    "category": metadata.get("category") or "other",
                    "random_weights": random_weights,
                    "probe": kind,
                    "dataset": dataset,
                    "shots": str(shot),
                    "mean": cell["test_top1"].mean() if complete else math.nan,
                    "std": population_std(cell["test_top1"]) if complete else math.nan,
                    "top5_mean": cell["test_top5"].mean() if complete else math.nan,
                    "top5_std": population_std(cell["test_top5"]) if complete else math.nan,
                    "n_seeds": len(present),
                    "expected_seeds": len(seeds),
                    "complete": complete,
                    "missing_seeds": ";".join(missing),
                })
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def read_summary(path: str | Path) -> pd.DataFrame:
    summary = pd.read_csv(path, dtype={"shots": str, "missing_seeds": str, "model": str, "dataset": str})
    missing = [column for column in SUMMARY_COLUMNS if column not in summary.columns]
    if missing:
        raise ValueError(
            f"{path}: not a results summary (lacks {', '.join(missing)}); rebuild it with "
            f"`python -m imagenet_cog aggregate-probes` or snakemake."
        )
    summary["missing_seeds"] = summary["missing_seeds"].fillna("")
    summary["complete"] = summary["complete"].astype(bool)
    summary["random_weights"] = summary["random_weights"].astype(bool)
    return summary


def with_relative(summary: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Adds ``relative`` = mean - the baseline's mean on the same dataset and shots (points)."""
    reference = summary[summary["model"] == baseline].set_index(["dataset", "shots"])["mean"]
    keys = list(zip(summary["dataset"], summary["shots"]))
    relative = summary.copy()
    relative["baseline_mean"] = [reference.get(key, math.nan) for key in keys]
    relative["relative"] = relative["mean"] - relative["baseline_mean"]
    return relative


# tables ------------------------------------------------------------------------------------
def format_cell(row: pd.Series, value_column: str = "mean", signed: bool = False) -> str:
    """"mean ± std", or "— (k/n seeds)" where a seed is missing."""
    value = row[value_column]
    if not row["complete"] or pd.isna(value):
        if row["complete"]:
            return f"{MISSING} (no baseline)"
        return f"{MISSING} ({int(row['n_seeds'])}/{int(row['expected_seeds'])} seeds)"
    text = f"{value:+.1f}" if signed else f"{value:.1f}"
    if int(row["expected_seeds"]) > 1:
        text += f" ± {row['std']:.1f}"
    return text


def display_label(row: pd.Series) -> str:
    return f"{row['label']}{RANDOM_WEIGHTS_MARK}" if row["random_weights"] else str(row["label"])


def pivot_cells(
    frame: pd.DataFrame, columns: str, column_order: Sequence[str], title, value_column: str, signed: bool
) -> pd.DataFrame:
    """Models (in config order) x ``columns`` of rendered cells."""
    frame = frame.copy()
    frame["cell"] = frame.apply(format_cell, axis=1, value_column=value_column, signed=signed)
    labels = dict(zip(frame["model"], frame.apply(display_label, axis=1)))
    # pivoted on the unique model key: two models may share a display label
    table = frame.pivot(index="model", columns=columns, values="cell")
    table = table.reindex(index=list(labels), columns=list(column_order))
    table.columns = [title(column) for column in table.columns]
    table.insert(0, "Model", [labels[model] for model in table.index])
    return table.reset_index(drop=True)


def table_notes(frame: pd.DataFrame, extra: Iterable[str] = ()) -> list[str]:
    notes = list(extra)
    if frame.get("relative") is not None and (frame["complete"] & frame["relative"].isna()).any():
        notes.append(f"{MISSING} (no baseline): the baseline has no complete result for that cell.")
    if frame["random_weights"].any():
        notes.append(RANDOM_WEIGHTS_NOTE)
    if (~frame["complete"]).any():
        notes.append(f"{MISSING} (k/n seeds): only k of the n configured seeds have a result; no mean is given.")
    return notes


def markdown_table(table: pd.DataFrame, caption: str, notes: Sequence[str]) -> str:
    header = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "|".join(["---"] + ["---:"] * (len(table.columns) - 1)) + "|"
    body = ["| " + " | ".join(str(value) for value in row) + " |" for row in table.itertuples(index=False)]
    lines = [f"**{caption}**", "", header, rule, *body]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


LATEX_ESCAPES = {"&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "{": r"\{", "}": r"\}"}


def latex_escape(text: str) -> str:
    text = "".join(LATEX_ESCAPES.get(character, character) for character in str(text))
    return (
        text.replace(RANDOM_WEIGHTS_MARK, r"$^\dagger$")
        .replace("±", r"$\pm$")
        .replace(MISSING, "--")
    )


def latex_table(table: pd.DataFrame, caption: str, notes: Sequence[str]) -> str:
    columns = "l" + "r" * (len(table.columns) - 1)
    lines = [
        r"% needs \usepackage{booktabs}",
        r"\begin{table}[t]", r"\centering", r"\small",
        rf"\begin{{tabular}}{{{columns}}}", r"\toprule",
        " & ".join(latex_escape(column) for column in table.columns) + r" \\", r"\midrule",
    ]
    lines += [" & ".join(latex_escape(value) for value in row) + r" \\" for row in table.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    caption_text = latex_escape(caption) + "".join(" " + latex_escape(note) for note in notes)
    lines += [rf"\caption{{{caption_text}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def write_table(layout: Layout, name: str, table: pd.DataFrame, caption: str, notes: Sequence[str]) -> None:
    with atomic_output(layout.table(name, "csv")) as temporary:
        table.to_csv(temporary, index=False)
    write_text(layout.table(name, "md"), markdown_table(table, caption, notes))
    write_text(layout.table(name, "tex"), latex_table(table, caption, notes))


KIND_TITLES = {"linear": "LogReg", "mlp": "MLP", "mlp_noact": "MLP-NoAct"}


def probe_kinds_table(summary: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """000 Tab. 3: per model, each other kind's top-1 relative to the linear probe's, in
    percent of the linear top-1, per dataset at N=all; and the table's notes."""
    full = summary[summary["shots"] == "all"]
    datasets = list(dict.fromkeys(summary["dataset"]))
    kinds = [kind for kind in dict.fromkeys(summary["probe"]) if kind in ("mlp", "mlp_noact")]
    linear = full[full["probe"] == "linear"].set_index(["model", "dataset"])["mean"]
    table = pd.DataFrame({"Model": list(dict.fromkeys(full.loc[full["probe"] == "linear"].apply(display_label, axis=1)))})
    models = list(dict.fromkeys(full.loc[full["probe"] == "linear", "model"]))
    for kind in kinds:
        cells = full[full["probe"] == kind].set_index(["model", "dataset"])
        for dataset in datasets:
            column = []
            for model in models:
                key = (model, dataset)
                if key not in cells.index or key not in linear.index or not cells.loc[key, "complete"] or pd.isna(linear[key]):
                    column.append(MISSING)
                else:
                    column.append(f"{100.0 * (cells.loc[key, 'mean'] - linear[key]) / linear[key]:+.1f}")
            table[f"{KIND_TITLES[kind]} {dataset_title(dataset)}"] = column
    notes = [
        f"{MISSING}: a probe (or one of its seeds) is missing, or probes.kinds / "
        "probes.other_kinds_shots do not ask for it at N=all."
    ]
    if not kinds:
        notes.append("probes.kinds has no MLP kind: add mlp and/or mlp_noact for this table.")
    return table, notes


def pca_dim(probe: str) -> int | None:
    return int(probe.split("-", 1)[1]) if probe.startswith("pca-") else None


def pca_tables(summary: pd.DataFrame, baseline: str) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """000 Tab. 5: top-1 of PCA + linear probes per model and dataset against d, the last
    column the linear probe on all dimensions; absolute, and relative to ``baseline``."""
    full = summary[summary["shots"] == "all"]
    dims = sorted(dim for dim in map(pca_dim, dict.fromkeys(summary["probe"])) if dim is not None)
    columns = [(f"pca-{dim}", f"d={dim}") for dim in dims] + [("linear", "All dims")]
    absolute_rows, relative_rows = [], []
    linear = full[full["probe"] == "linear"]
    for _, row in linear.iterrows():
        absolute = {"Model": display_label(row), "Dataset": dataset_title(row["dataset"])}
        relative = dict(absolute)
        for probe, title in columns:
            cells = full[(full["probe"] == probe) & (full["dataset"] == row["dataset"])].set_index("model")
            own = cells["mean"].get(row["model"], math.nan) if bool(cells["complete"].get(row["model"], False)) else math.nan
            reference = cells["mean"].get(baseline, math.nan) if bool(cells["complete"].get(baseline, False)) else math.nan
            absolute[title] = MISSING if pd.isna(own) else f"{own:.1f}"
            relative[title] = MISSING if pd.isna(own) or pd.isna(reference) else f"{own - reference:+.1f}"
        absolute_rows.append(absolute)
        relative_rows.append(relative)
    notes = [
        f"{MISSING}: a probe (or one of its seeds) is missing, or probes.kinds / probes.pca_dims / "
        "probes.other_kinds_shots do not ask for it at N=all."
    ]
    if not dims:
        notes.append("probes.kinds has no 'pca': add it (and probes.pca_dims) for this table.")
    return pd.DataFrame(absolute_rows), pd.DataFrame(relative_rows), notes


def write_tables(summary: pd.DataFrame, layout: Layout, baseline: str) -> None:
    table, notes = probe_kinds_table(summary)
    write_table(
        layout, "probe_kinds", table,
        "Top-1 of the MLP probes relative to the linear probe (LogReg), all training images: "
        "100 x (kind - LogReg) / LogReg, in percent (paper 000, Tab. 3).",
        notes,
    )
    baseline_rows = summary.loc[summary["model"] == baseline, "label"]
    pca_baseline = baseline_rows.iloc[0] if len(baseline_rows) else baseline
    pca_absolute, pca_relative, pca_notes = pca_tables(summary, baseline)
    write_table(
        layout, "pca_top1", pca_absolute,
        "Top-1 accuracy (%) of linear probes on features projected onto their first d principal "
        "components, all training images (paper 000, Tab. 5, Fig. 8).",
        pca_notes,
    )
    write_table(
        layout, "pca_relative", pca_relative,
        f"PCA + linear top-1 relative to {pca_baseline} at the same d, all training images, in points.",
        pca_notes,
    )
    summary = summary[summary["probe"] == "linear"]
    datasets = list(dict.fromkeys(summary["dataset"]))
    shots = list(dict.fromkeys(summary["shots"]))
    baseline_labels = summary.loc[summary["model"] == baseline, "label"]
    baseline_label = baseline_labels.iloc[0] if len(baseline_labels) else baseline
    relative = with_relative(summary, baseline)
    relative_note = (
        f"Relative: top-1 minus {baseline_label}'s top-1 on the same dataset and N, in points; "
        f"± is the model's own std over seeds."
    )
    full = summary[summary["shots"] == "all"]
    if full.empty:
        note = [f"{MISSING}: probes.shots has no 'all', so no run used every training image."]
        table = pd.DataFrame({"Model": list(dict.fromkeys(summary.apply(display_label, axis=1)))})
        for dataset in datasets:
            table[dataset_title(dataset)] = MISSING
        for name in ("top1_levels", "relative_levels"):
            write_table(layout, name, table, "Top-1 accuracy with all training images: not configured.", note)
    else:
        write_table(
            layout, "top1_levels",
            pivot_cells(full, "dataset", datasets, dataset_title, "mean", False),
            "Top-1 accuracy (%) of linear classifiers trained on all training images, per dataset "
            "(mean ± std over seeds).",
            table_notes(full),
        )
        write_table(
            layout, "relative_levels",
            pivot_cells(relative[relative["shots"] == "all"], "dataset", datasets, dataset_title, "relative", True),
            f"Top-1 accuracy relative to {baseline_label}, all training images, per dataset.",
            table_notes(relative[relative["shots"] == "all"], [relative_note]),
        )
    for dataset in datasets:
        cells = summary[summary["dataset"] == dataset]
        write_table(
            layout, f"top1_{dataset}",
            pivot_cells(cells, "shots", shots, shots_title, "mean", False),
            f"Top-1 accuracy (%) of linear classifiers on {dataset_title(dataset)} with N training "
            f"images per concept (mean ± std over seeds).",
            table_notes(cells),
        )
        write_table(
            layout, f"relative_{dataset}",
            pivot_cells(relative[relative["dataset"] == dataset], "shots", shots, shots_title, "relative", True),
            f"Top-1 accuracy on {dataset_title(dataset)} relative to {baseline_label}, per N.",
            table_notes(relative[relative["dataset"] == dataset], [relative_note]),
        )


# timings -----------------------------------------------------------------------------------
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


def timings_table(runs: pd.DataFrame, benchmarks: pd.DataFrame, models: dict[str, dict]) -> pd.DataFrame:
    """Per model and dataset: seconds of each benchmarked stage, and probe seconds from the JSONs."""
    probe = runs.groupby(["model", "dataset"], sort=False).agg(
        probe_runs=("seed", "size"), probe_s_from_results=("probe_s", "sum")
    )
    stages = benchmarks.pivot_table(index=["model", "dataset"], columns="stage", values="seconds", aggfunc="sum")
    stages.columns = [f"{stage}_s" for stage in stages.columns]
    table = probe.join(stages, how="outer")[[*stages.columns, *probe.columns]].reset_index()
    table.insert(1, "label", [model_label(model, models.get(model, {})) for model in table["model"]])
    order = {model: index for index, model in enumerate(models)}
    table = table.sort_values(["model", "dataset"], key=lambda column: column.map(order) if column.name == "model" else column)
    return table.round(1)


# command line ------------------------------------------------------------------------------
def grid_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results-root", required=True, help="the workflow's results folder")
    parser.add_argument("--models", required=True, help="JSON object: model name -> its config entry")
    parser.add_argument("--datasets", nargs="+", required=True)
    parser.add_argument("--shots", nargs="+", required=True)
    parser.add_argument("--seeds", nargs="+", required=True)
    parser.add_argument("--kinds", nargs="+", default=["linear"], help="probe kinds (linear is always read)")
    parser.add_argument("--other-kinds-shots", nargs="+", help="shots of the kinds other than linear (default --shots)")
    parser.add_argument("--other-kinds-seeds", nargs="+", help="seeds of the kinds other than linear (default --seeds)")


def kind_grids(args: argparse.Namespace) -> list[tuple[str, list[str], list[str]]]:
    """(kind, shots, seeds) of every configured probe kind, linear first."""
    others = [kind for kind in args.kinds if kind != "linear"]
    return [("linear", args.shots, args.seeds)] + [
        (kind, args.other_kinds_shots or args.shots, args.other_kinds_seeds or args.seeds) for kind in others
    ]


def load_all_probe_results(args: argparse.Namespace, models: Sequence[str]) -> pd.DataFrame:
    frames = [
        load_probe_results(args.results_root, models, args.datasets, shots, seeds, kind)
        for kind, shots, seeds in kind_grids(args)
    ]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def aggregate_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="aggregate-probes", description="Summarise probe results over seeds into one tidy CSV."
    )
    grid_arguments(parser)
    parser.add_argument("--output", required=True, help="the summary CSV")
    args = parser.parse_args(argv)
    models = json.loads(args.models)
    runs = load_all_probe_results(args, list(models))
    summary = pd.concat(
        [summarise(runs, models, args.datasets, shots, seeds, kind) for kind, shots, seeds in kind_grids(args)],
        ignore_index=True,
    )
    with atomic_output(args.output) as temporary:
        summary.to_csv(temporary, index=False)
    incomplete = summary[~summary["complete"]]
    print(f"{len(summary)} cells from {len(runs)} probe results; {len(incomplete)} incomplete")
    return 0


def tables_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="results-tables", description="Render the summary as CSV, Markdown and LaTeX tables."
    )
    parser.add_argument("--summary", required=True)
    parser.add_argument("--results-root", required=True, help="tables go to <root>/tables/")
    parser.add_argument("--baseline", required=True, help="model that relative tables subtract")
    args = parser.parse_args(argv)
    write_tables(read_summary(args.summary), Layout(args.results_root), args.baseline)
    return 0


def timings_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="results-timings", description="Per-model extraction and probe seconds."
    )
    grid_arguments(parser)
    parser.add_argument("--benchmark-root", required=True, help="folder of Snakemake benchmark files")
    parser.add_argument("--output", required=True, help="the timings CSV; a .md rendering is written beside it")
    args = parser.parse_args(argv)
    models = json.loads(args.models)
    runs = load_all_probe_results(args, list(models))
    benchmarks = benchmark_seconds(Path(args.benchmark_root), list(models), args.datasets)
    table = timings_table(runs, benchmarks, models)
    with atomic_output(args.output) as temporary:
        table.to_csv(temporary, index=False)
    markdown = markdown_table(
        table.astype(object).where(table.notna(), "").astype(str), "Seconds per model and dataset (Snakemake benchmarks; probe JSON timings)", []
    )
    write_text(Path(args.output).with_suffix(".md"), markdown)
    return 0
