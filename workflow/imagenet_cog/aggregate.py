"""Probe results -> one tidy summary -> the paper's tables (Sec. 4.2, supp. Tables 5-10).

The summary has one row per model x dataset x shots of the configured grid, so a run that
is missing shows up as a row, never as an absent one:

    model, label, category, random_weights, probe, dataset, level_set, shots,
    mean, std, ci95_low, ci95_high, top5_mean, top5_std, n_seeds, expected_seeds, complete,
    missing_seeds

``level_set`` is ``lin`` for IN-1K and Lin's levels, else the level set of a level-set
dataset (``wup-l3``: wup; ``random-07``: random), whose rows follow, over their own shots
and seeds (``level_sets.shots``, ``level_sets.seeds``). The paper's tables and figures use
the ``lin`` rows of the linear probe.

``mean``/``std`` are the test top-1 (percent) over the seeds, ``std`` with ddof=0 (the
population standard deviation, as the authors' result script computes it over its 5 seeds);
``ci95_low``/``ci95_high`` the 95% confidence interval of the mean (Student t, n - 1 degrees
of freedom, sample std; empty with one seed; see ``statistics.mean_interval``).
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
both means over all seeds; their std is the model's own std over seeds, their interval the
95% interval of the paired per-seed difference, and a mark says that the paired t-test
finds the difference after Holm's correction over the table (``statistics.paired_tests``).
Tables show a cell as ``mean ± std [low, high]``.

Besides the summary, ``aggregate-probes`` writes the per-seed results (one row per probe
result) that the paired tests read.
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
from .statistics import SIGNIFICANT_MARK, mean_interval, paired_tests, rank_agreement

SUMMARY_COLUMNS = [
    "model", "label", "category", "random_weights", "probe", "dataset", "shots",
    "mean", "std", "ci95_low", "ci95_high", "top5_mean", "top5_std",
    "n_seeds", "expected_seeds", "complete", "missing_seeds",
]
REQUIRED_RESULT_KEYS = ("model", "dataset", "shots", "seed", "test_top1", "test_top5", "random_weights")
RANDOM_WEIGHTS_MARK = "†"
RANDOM_WEIGHTS_NOTE = "† randomly initialised weights: a sanity baseline, not a pretrained model."
MISSING = "—"


def dataset_title(dataset: str) -> str:
    """The paper's names: IN-1K, L1, L2, ..."""
    return {"in1k": "IN-1K", "in1k_blurred": "IN-1K-b"}.get(dataset, dataset.upper())


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
                        # a job that ran several seeds (probes.seeds_together) timed them all
                        "probe_s": float(timings.get("total_s", math.nan)) / len(result.get("seeds_together") or [seed]),
                    })
    columns = ["model", "probe", "dataset", "shots", "seed", "test_top1", "test_top5", "random_weights", "probe_s"]
    return pd.DataFrame(rows, columns=columns)


def level_set_of(dataset: str) -> str:
    """The level set of a dataset name: ``wup-l3`` -> wup, ``random-07`` -> random, else lin."""
    return dataset.split("-", 1)[0] if "-" in dataset else "lin"


def with_level_set(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary with a ``level_set`` column after ``dataset``."""
    summary = summary.copy()
    summary.insert(summary.columns.get_loc("dataset") + 1, "level_set", [level_set_of(d) for d in summary["dataset"]])
    return summary


def lin_rows(summary: pd.DataFrame, every_probe: bool = False) -> pd.DataFrame:
    """IN-1K and Lin's levels, of the linear probe unless ``every_probe``: what the paper's
    tables and figures show."""
    if "level_set" in summary.columns:
        summary = summary[summary["level_set"] == "lin"]
    if not every_probe and "probe" in summary.columns:
        summary = summary[summary["probe"] == "linear"]
    return summary.reset_index(drop=True)


def linear_seed_results(seed_results: pd.DataFrame) -> pd.DataFrame:
    """The linear probe's per-seed results (those the paired tests pair)."""
    if "probe" not in seed_results.columns:
        return seed_results
    return seed_results[seed_results["probe"] == "linear"].reset_index(drop=True)


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
                low, high = mean_interval(cell["test_top1"]) if complete else (math.nan, math.nan)
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
                    "ci95_low": low,
                    "ci95_high": high,
                    "top5_mean": cell["test_top5"].mean() if complete else math.nan,
                    "top5_std": population_std(cell["test_top5"]) if complete else math.nan,
                    "n_seeds": len(present),
                    "expected_seeds": len(seeds),
                    "complete": complete,
                    "missing_seeds": ";".join(missing),
                })
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def read_aggregate_csv(path: str | Path, columns: Sequence[str], dtype: dict, what: str) -> pd.DataFrame:
    """A CSV that aggregate-probes writes, with a clear error when it lacks ``columns``."""
    table = pd.read_csv(path, dtype=dtype)
    missing = [column for column in columns if column not in table.columns]
    if missing:
        raise ValueError(
            f"{path}: not {what} (lacks {', '.join(missing)}); rebuild it with "
            f"`python -m imagenet_cog aggregate-probes` or snakemake."
        )
    return table


def read_summary(path: str | Path) -> pd.DataFrame:
    summary = read_aggregate_csv(
        path, SUMMARY_COLUMNS, {"shots": str, "missing_seeds": str, "model": str, "dataset": str}, "a results summary"
    )
    summary["missing_seeds"] = summary["missing_seeds"].fillna("")
    summary["complete"] = summary["complete"].astype(bool)
    summary["random_weights"] = summary["random_weights"].astype(bool)
    return summary


SEED_RESULT_COLUMNS = ["model", "dataset", "shots", "seed", "test_top1", "test_top5"]


def read_seed_results(path: str | Path) -> pd.DataFrame:
    return read_aggregate_csv(
        path, SEED_RESULT_COLUMNS, {"model": str, "dataset": str, "shots": str, "seed": str}, "a table of per-seed results"
    )


def with_relative(summary: pd.DataFrame, baseline: str, paired: pd.DataFrame | None = None) -> pd.DataFrame:
    """Adds ``relative`` = mean - the baseline's mean on the same dataset and shots (points).

    With ``paired`` (``statistics.paired_tests``), also the interval of the paired difference
    (``relative_low``/``relative_high``) and ``significant``; the baseline's own rows get
    [0, 0] and no mark.
    """
    reference = summary[summary["model"] == baseline].set_index(["dataset", "shots"])["mean"]
    keys = list(zip(summary["dataset"], summary["shots"]))
    relative = summary.copy()
    relative["baseline_mean"] = [reference.get(key, math.nan) for key in keys]
    relative["relative"] = relative["mean"] - relative["baseline_mean"]
    relative["relative_low"] = math.nan
    relative["relative_high"] = math.nan
    relative["significant"] = False
    if paired is not None:
        tests = paired.set_index(["model", "dataset", "shots"])
        for index, row in relative.iterrows():
            key = (row["model"], row["dataset"], row["shots"])
            if row["model"] == baseline and row["complete"]:
                relative.loc[index, ["relative_low", "relative_high"]] = 0.0
            elif key in tests.index:
                test = tests.loc[key]
                relative.loc[index, ["relative_low", "relative_high"]] = [test["ci95_low"], test["ci95_high"]]
                relative.loc[index, "significant"] = bool(test["significant"])
    return relative


# tables ------------------------------------------------------------------------------------
INTERVAL_COLUMNS = {"mean": ("ci95_low", "ci95_high"), "relative": ("relative_low", "relative_high")}


def format_cell(row: pd.Series, value_column: str = "mean", signed: bool = False) -> str:
    """"mean ± std [low, high]" (95% interval), a mark where significant, or "— (k/n seeds)"
    where a seed is missing."""
    value = row[value_column]
    if not row["complete"] or pd.isna(value):
        if row["complete"]:
            return f"{MISSING} (no baseline)"
        return f"{MISSING} ({int(row['n_seeds'])}/{int(row['expected_seeds'])} seeds)"
    text = f"{value:+.1f}" if signed else f"{value:.1f}"
    if int(row["expected_seeds"]) > 1:
        text += f" ± {row['std']:.1f}"
    low, high = (row.get(column, math.nan) for column in INTERVAL_COLUMNS.get(value_column, ()))
    if pd.notna(low) and pd.notna(high):
        text += f" [{low:.1f}, {high:.1f}]"
    if bool(row.get("significant", False)):
        text += SIGNIFICANT_MARK
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


INTERVAL_NOTE = "[low, high]: 95% confidence interval of the mean over seeds (Student t, n - 1 df)."
SIGNIFICANT_NOTE = (
    f"{SIGNIFICANT_MARK} differs from the baseline: paired t-test over seeds, Holm-corrected over "
    f"every model, dataset and N of the run, p < 0.05 (tables/paired_tests)."
)


def table_notes(frame: pd.DataFrame, extra: Iterable[str] = ()) -> list[str]:
    notes = list(extra)
    if "relative" not in frame.columns and frame["ci95_low"].notna().any():
        notes.append(INTERVAL_NOTE)
    if "significant" in frame.columns and frame["significant"].any():
        notes.append(SIGNIFICANT_NOTE)
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
        .replace(SIGNIFICANT_MARK, r"$^{*}$")
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


def write_tidy_table(
    layout: Layout, name: str, table: pd.DataFrame, caption: str, notes: Sequence[str], formats: dict[str, str]
) -> None:
    """A tidy table: full precision in the CSV; ``formats`` (column -> format spec, e.g. ".2f"),
    empty for NaN, in Markdown and LaTeX."""
    with atomic_output(layout.table(name, "csv")) as temporary:
        table.to_csv(temporary, index=False)
    rendered = table.copy().astype(object)
    for column, spec in formats.items():
        rendered[column] = [format(value, spec) if pd.notna(value) else "" for value in table[column]]
    rendered = rendered.where(rendered.notna(), "")
    write_text(layout.table(name, "md"), markdown_table(rendered, caption, notes))
    write_text(layout.table(name, "tex"), latex_table(rendered, caption, notes))


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


def write_tables(summary: pd.DataFrame, layout: Layout, baseline: str, seed_results: pd.DataFrame) -> None:
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
    seed_results = linear_seed_results(seed_results)
    datasets = list(dict.fromkeys(summary["dataset"]))
    shots = list(dict.fromkeys(summary["shots"]))
    baseline_labels = summary.loc[summary["model"] == baseline, "label"]
    baseline_label = baseline_labels.iloc[0] if len(baseline_labels) else baseline
    relative = with_relative(summary, baseline, paired_tests(seed_results, summary, baseline))
    relative_note = (
        f"Relative: top-1 minus {baseline_label}'s top-1 on the same dataset and N, in points; "
        f"± is the model's own std over seeds, [low, high] the 95% interval of the paired "
        f"per-seed difference."
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
    parser.add_argument("--level-set-datasets", nargs="*", default=[], help="level-set datasets (views) probed")
    parser.add_argument("--level-set-shots", nargs="*", default=["all"])
    parser.add_argument("--level-set-seeds", nargs="*", default=[])
    parser.add_argument("--output", required=True, help="the summary CSV")
    parser.add_argument("--seed-output", required=True, help="the per-seed results CSV (for the paired tests)")
    args = parser.parse_args(argv)
    models = json.loads(args.models)
    runs = load_all_probe_results(args, list(models))
    summary = pd.concat(
        [summarise(runs, models, args.datasets, shots, seeds, kind) for kind, shots, seeds in kind_grids(args)],
        ignore_index=True,
    )
    if args.level_set_datasets:
        set_runs = load_probe_results(args.results_root, list(models), args.level_set_datasets,
                                      args.level_set_shots, args.level_set_seeds)
        set_summary = summarise(set_runs, models, args.level_set_datasets, args.level_set_shots, args.level_set_seeds)
        summary = pd.concat([summary, set_summary], ignore_index=True)
        runs = pd.concat([runs, set_runs], ignore_index=True)
    summary = with_level_set(summary)
    with atomic_output(args.output) as temporary:
        summary.to_csv(temporary, index=False)
    with atomic_output(args.seed_output) as temporary:
        runs.to_csv(temporary, index=False)
    incomplete = summary[~summary["complete"]]
    print(f"{len(summary)} cells from {len(runs)} probe results; {len(incomplete)} incomplete")
    return 0


def tables_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="results-tables", description="Render the summary as CSV, Markdown and LaTeX tables."
    )
    parser.add_argument("--summary", required=True)
    parser.add_argument("--results-root", required=True, help="tables go to <root>/tables/")
    parser.add_argument("--seed-results", required=True, help="per-seed results (aggregate-probes)")
    parser.add_argument("--baseline", required=True, help="model that relative tables subtract")
    args = parser.parse_args(argv)
    write_tables(lin_rows(read_summary(args.summary), every_probe=True), Layout(args.results_root), args.baseline, read_seed_results(args.seed_results))
    return 0


def write_statistics(summary: pd.DataFrame, seed_results: pd.DataFrame, layout: Layout, baseline: str) -> None:
    tests = paired_tests(seed_results, summary, baseline)
    baseline_label = dict(zip(summary["model"], summary["label"])).get(baseline, baseline)
    write_tidy_table(
        layout, "paired_tests", tests,
        f"Each model minus {baseline_label} per dataset and N: mean and 95% interval of the "
        f"per-seed differences (points), paired t-test, Holm-corrected p-value.",
        [
            "Seeds are pairs: probes of the same seed share the validation split and the few-shot sample.",
            f"significant: Holm-corrected p < 0.05 over all {int(tests['p_value'].notna().sum())} tests of this table.",
            "No test (empty p) with fewer than 2 seeds, with equal differences on every seed, or an incomplete cell.",
        ],
        {"mean_diff": ".2f", "std_diff": ".2f", "ci95_low": ".2f", "ci95_high": ".2f", "t": ".2f",
         "p_value": ".2g", "p_holm": ".2g"},
    )
    ranks = rank_agreement(summary)
    write_tidy_table(
        layout, "rank_agreement", ranks,
        "Rank agreement: Kendall's tau-b between the models' top-1 ranking on IN-1K and on each "
        "level, per N, with its two-sided p-value (does IN-1K accuracy predict generalization?).",
        ["Only models with a complete result on both datasets are ranked."],
        {"kendall_tau": ".3f", "p_value": ".2g"},
    )


def statistics_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="results-statistics",
        description="Paired tests of every model against the baseline, and Kendall's tau of rankings.",
    )
    parser.add_argument("--summary", required=True)
    parser.add_argument("--seed-results", required=True, help="per-seed results (aggregate-probes)")
    parser.add_argument("--results-root", required=True, help="tables go to <root>/tables/")
    parser.add_argument("--baseline", required=True)
    args = parser.parse_args(argv)
    write_statistics(lin_rows(read_summary(args.summary)), linear_seed_results(read_seed_results(args.seed_results)), Layout(args.results_root), args.baseline)
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
