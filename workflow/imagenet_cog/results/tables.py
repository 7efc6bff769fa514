"""The paper's tables from the tidy summary (Sec. 4.2, supp. Tables 5-10), and the
statistics tables (paired tests, rank agreement).

Tables show a cell as ``mean ± std [low, high]`` (the 95% interval of the mean; relative
tables: of the paired per-seed difference to the baseline) and mark it where the paired
t-test finds the difference after Holm's correction over the table
(``statistics.paired_tests``). A cell with a seed missing reads ``— (3/5 seeds)``.

Table ``probe_kinds`` (CoG preprint, Tab. 3) gives each MLP kind's top-1 relative to the linear
probe's at N=all: 100 x (kind - linear) / linear; tables ``pca_top1`` / ``pca_relative``
(CoG preprint, Tab. 5, Fig. 8) the pca-<d> probes' top-1 against d, absolute and minus the
baseline's at the same d.

A configured kind whose module declares texts of its own (the k-NN: ``knn`` in probes.kinds;
the summary then has its rows) gets the linear probe's set of tables, prefixed with its name
(``knn_top1_levels``, ``knn_relative_levels``, ``knn_top1_<dataset>``, ``knn_relative_<dataset>``;
relative to the baseline's top-1 of the same kind, paired tests over its own per-seed results),
and two comparisons with the linear probe, worded by its module: ``<kind>_vs_linear`` (both
top-1 per model, dataset and N, and their difference) and ``<kind>_rank_agreement`` (Kendall's
tau-b between the models' rankings by the two, per dataset and N;
``statistics.kind_rank_agreement``).
"""

from __future__ import annotations

import argparse
import functools
import math
from typing import Iterable, Sequence

import pandas as pd

from imagenet_cog.core.command_line import add_summary_options
from imagenet_cog.core.layout import Layout, kind_result_name
from imagenet_cog.core.naming import LINEAR, dataset_title, pca_dim, pca_kind, shots_title
from imagenet_cog.core.tables import (
    DEVIATION_MARK,
    MISSING,
    RANDOM_WEIGHTS_MARK,
    RANDOM_WEIGHTS_NOTE,
    SIGNIFICANT_MARK,
    write_table,
    write_tidy_table,
)
from imagenet_cog.probes.kinds import KINDS, kind_of_result
from imagenet_cog.results.exposure import (
    EXPOSURE_COLUMN,
    TIDY_EXPOSURE_COLUMN,
    add_exposures_option,
    exposure_column,
    exposure_notes,
    read_exposures,
    with_exposure,
)
from imagenet_cog.results.statistics import kind_rank_agreement, paired_tests, rank_agreement
from imagenet_cog.results.summary import (
    DEVIATIONS_COLUMN,
    INTERVAL_COLUMNS,
    KIND_TEXTS,
    joined_deviations,
    kind_seed_results,
    lin_rows,
    read_seed_results,
    read_summary,
    tabled_kinds,
    with_relative,
)


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
    deviations = row.get(DEVIATIONS_COLUMN)
    if isinstance(deviations, str) and deviations:
        text += DEVIATION_MARK
    return text


def display_label(row: pd.Series) -> str:
    return f"{row['label']}{RANDOM_WEIGHTS_MARK}" if row["random_weights"] else str(row["label"])


def pivot_cells(
    frame: pd.DataFrame, columns: str, column_order: Sequence[str], title, value_column: str, signed: bool,
    exposures: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Models (in config order) x ``columns`` of rendered cells; with ``exposures`` (model -> its
    exposure), an Exposure column after the model's."""
    frame = frame.copy()
    frame["cell"] = frame.apply(format_cell, axis=1, value_column=value_column, signed=signed)
    labels = dict(zip(frame["model"], frame.apply(display_label, axis=1)))
    # pivoted on the unique model key: two models may share a display label
    table = frame.pivot(index="model", columns=columns, values="cell")
    table = table.reindex(index=list(labels), columns=list(column_order))
    table.columns = [title(column) for column in table.columns]
    if exposures is not None:
        table.insert(0, EXPOSURE_COLUMN, exposure_column(exposures, table.index))
    table.insert(0, "Model", [labels[model] for model in table.index])
    return table.reset_index(drop=True)


INTERVAL_NOTE = (
    "[low, high]: 95% confidence interval of the mean over seeds (Student t, n - 1 df), cut to [0, 100] "
    "where it reaches past what a top-1 can be."
)


def significant_note(family: str = KIND_TEXTS[LINEAR].tests, kind: str = LINEAR) -> str:
    """What the significance mark means; the linear probe's tests are tables/paired_tests."""
    where = " (tables/paired_tests)" if kind == LINEAR else ""
    return (
        f"{SIGNIFICANT_MARK} differs from the baseline: paired t-test over seeds, Holm-corrected over "
        f"{family}, p < 0.05{where}."
    )


def table_notes(frame: pd.DataFrame, extra: Iterable[str] = (), significant: str | None = None) -> list[str]:
    notes = list(extra)
    if "relative" not in frame.columns and frame["ci95_low"].notna().any():
        notes.append(INTERVAL_NOTE)
    if "significant" in frame.columns and frame["significant"].any():
        notes.append(significant or significant_note())
    if frame.get("relative") is not None and (frame["complete"] & frame["relative"].isna()).any():
        notes.append(f"{MISSING} (no baseline): the baseline has no complete result for that cell.")
    if frame["random_weights"].any():
        notes.append(RANDOM_WEIGHTS_NOTE)
    deviations = joined_deviations(frame[DEVIATIONS_COLUMN]) if DEVIATIONS_COLUMN in frame else ""
    if deviations:
        notes.append(f"{DEVIATION_MARK} a protocol deviation ({deviations.replace(';', ', ')}): not the paper's "
                     f"protocol; the runs' result files name it (protocol_deviations).")
    if (~frame["complete"]).any():
        notes.append(f"{MISSING} (k/n seeds): only k of the n configured seeds have a result; no mean is given.")
    return notes



def probe_kinds_table(summary: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """CoG preprint, Tab. 3: per model, each other kind's top-1 relative to the linear probe's, in
    percent of the linear top-1, per dataset at N=all; and the table's notes."""
    full = summary[summary["shots"] == "all"]
    datasets = list(dict.fromkeys(summary["dataset"]))
    kinds = [kind for kind in dict.fromkeys(summary["probe"]) if kind_of_result(kind).in_kinds_table]
    linear = full[full["probe"] == LINEAR].set_index(["model", "dataset"])["mean"]
    table = pd.DataFrame({"Model": list(dict.fromkeys(full.loc[full["probe"] == LINEAR].apply(display_label, axis=1)))})
    models = list(dict.fromkeys(full.loc[full["probe"] == LINEAR, "model"]))
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
            table[f"{KINDS[kind].title} {dataset_title(dataset)}"] = column
    notes = [
        f"{MISSING}: a probe (or one of its seeds) is missing, or probes.kinds / "
        "probes.other_kinds_shots do not ask for it at N=all."
    ]
    if not kinds:
        notes.append("probes.kinds has no MLP kind: add mlp and/or mlp_noact for this table.")
    return table, notes



def pca_tables(summary: pd.DataFrame, baseline: str, exposures: dict[str, str] | None = None
               ) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """CoG preprint, Tab. 5: top-1 of PCA + linear probes per model and dataset against d, the last
    column the linear probe on all dimensions; absolute, and relative to ``baseline``; with
    ``exposures``, each model's class after its name."""
    full = summary[summary["shots"] == "all"]
    dims = sorted(dim for dim in map(pca_dim, dict.fromkeys(summary["probe"])) if dim is not None)
    columns = [(pca_kind(dim), f"d={dim}") for dim in dims] + [(LINEAR, "All dims")]
    absolute_rows, relative_rows = [], []
    linear = full[full["probe"] == LINEAR]
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
        "probes.other_kinds_shots do not ask for it at N=all.",
        *exposure_notes(exposures, linear["model"]),
    ]
    if not dims:
        notes.append("probes.kinds has no 'pca': add it (and probes.pca_dims) for this table.")
    absolute, relative = (with_exposure(pd.DataFrame(rows, columns=["Model", "Dataset", *(title for _, title in columns)]),
                                        exposures, linear["model"], "Model")
                          for rows in (absolute_rows, relative_rows))
    return absolute, relative, notes


def write_tables(summary: pd.DataFrame, layout: Layout, baseline: str, seed_results: pd.DataFrame,
                 exposures: dict[str, str] | None = None) -> None:
    """Every table of results-tables: the kinds' comparisons, then each tabled kind's set
    (linear; knn when configured, an Exposure column with ``exposures``), and each other tabled
    kind against the linear probe."""
    write_probe_kind_tables(summary, layout, baseline, exposures)
    kinds = tabled_kinds(summary)
    for kind in kinds:
        write_kind_tables(summary[summary["probe"] == kind], kind_seed_results(seed_results, kind), layout, baseline,
                          kind, exposures)
    for kind in kinds:
        if kind != LINEAR:
            write_kind_comparison(summary, layout, kind)


def write_probe_kind_tables(summary: pd.DataFrame, layout: Layout, baseline: str,
                            exposures: dict[str, str] | None = None) -> None:
    """The MLP and PCA + linear probes against the linear probe (CoG preprint, Tabs. 3 and 5); the
    PCA tables, which compare models, with their classes (``exposures``)."""
    table, notes = probe_kinds_table(summary)
    write_table(
        layout, "probe_kinds", table,
        "Top-1 of the MLP probes relative to the linear probe (LogReg), all training images: "
        "100 x (kind - LogReg) / LogReg, in percent (CoG preprint, Tab. 3).",
        notes,
    )
    baseline_rows = summary.loc[summary["model"] == baseline, "label"]
    pca_baseline = baseline_rows.iloc[0] if len(baseline_rows) else baseline
    pca_absolute, pca_relative, pca_notes = pca_tables(summary, baseline, exposures)
    write_table(
        layout, "pca_top1", pca_absolute,
        "Top-1 accuracy (%) of linear probes on features projected onto their first d principal "
        "components, all training images (CoG preprint, Tab. 5, Fig. 8).",
        pca_notes,
    )
    write_table(
        layout, "pca_relative", pca_relative,
        f"PCA + linear top-1 relative to {pca_baseline} at the same d, all training images, in points.",
        pca_notes,
    )


def write_kind_tables(
    summary: pd.DataFrame, seed_results: pd.DataFrame, layout: Layout, baseline: str, kind: str = LINEAR,
    exposures: dict[str, str] | None = None,
) -> None:
    """One kind's tables (``layout.kind_table_names``) from its summary rows and per-seed
    results: top-1 and relative to the baseline's top-1 of the same kind, at N = all per
    dataset and per N for each dataset; each model's exposure beside it with ``exposures``."""
    texts = KIND_TEXTS[kind]
    pivot = functools.partial(pivot_cells, exposures=exposures)
    exposure_note = exposure_notes(exposures, dict.fromkeys(summary["model"]))
    name = functools.partial(kind_result_name, kind=kind)
    datasets = list(dict.fromkeys(summary["dataset"]))
    shots = list(dict.fromkeys(summary["shots"]))
    baseline_labels = summary.loc[summary["model"] == baseline, "label"]
    baseline_label = baseline_labels.iloc[0] if len(baseline_labels) else baseline
    relative = with_relative(summary, baseline, paired_tests(seed_results, summary, baseline))
    relative_notes = [
        f"Relative: {texts.score} minus {baseline_label}'s {texts.score} on the same dataset and N, in points; "
        f"± is the model's own std over seeds, [low, high] the 95% interval of the paired "
        f"per-seed difference.",
        *texts.notes,
    ]
    significant = significant_note(texts.tests, kind)

    def notes(frame: pd.DataFrame, extra: Sequence[str] = texts.notes) -> list[str]:
        return table_notes(frame, [*extra, *exposure_note], significant)

    full = summary[summary["shots"] == "all"]
    if full.empty:
        note = [f"{MISSING}: probes.shots has no 'all', so no run used every training image."]
        table = pd.DataFrame({"Model": list(dict.fromkeys(summary.apply(display_label, axis=1)))})
        for dataset in datasets:
            table[dataset_title(dataset)] = MISSING
        for table_name in ("top1_levels", "relative_levels"):
            write_table(layout, name(table_name), table, f"{texts.top1} with all training images: not configured.", note)
    else:
        write_table(
            layout, name("top1_levels"),
            pivot(full, "dataset", datasets, dataset_title, "mean", False),
            f"Top-1 accuracy (%) of {texts.classifiers} {texts.fitted_on} all training images, per dataset "
            "(mean ± std over seeds).",
            notes(full),
        )
        full_relative = relative[relative["shots"] == "all"]
        write_table(
            layout, name("relative_levels"),
            pivot(full_relative, "dataset", datasets, dataset_title, "relative", True),
            f"{texts.top1} relative to {baseline_label}, all training images, per dataset.",
            notes(full_relative, relative_notes),
        )
    for dataset in datasets:
        cells = summary[summary["dataset"] == dataset]
        write_table(
            layout, name(f"top1_{dataset}"),
            pivot(cells, "shots", shots, shots_title, "mean", False),
            f"Top-1 accuracy (%) of {texts.classifiers} on {dataset_title(dataset)} with N training "
            f"images per concept (mean ± std over seeds).",
            notes(cells),
        )
        cells = relative[relative["dataset"] == dataset]
        write_table(
            layout, name(f"relative_{dataset}"),
            pivot(cells, "shots", shots, shots_title, "relative", True),
            f"{texts.top1} on {dataset_title(dataset)} relative to {baseline_label}, per N.",
            notes(cells, relative_notes),
        )


def vs_linear_columns(kind: str) -> list[str]:
    return ["model", "label", "dataset", "shots", f"{kind}_mean", f"{kind}_std", f"{LINEAR}_mean", f"{LINEAR}_std",
            f"{kind}_minus_{LINEAR}"]


def kind_vs_linear(summary: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Per N, dataset and model (in the summary's orders): ``kind``'s and the linear probe's mean
    top-1 and std over seeds, and kind minus linear in points; NaN where a seed of either has no
    result."""
    keys = ["model", "dataset", "shots"]
    linear = summary.loc[summary["probe"] == LINEAR, [*keys, "label", "mean", "std"]]
    other = summary.loc[summary["probe"] == kind, [*keys, "mean", "std"]]
    table = linear.merge(other, on=keys, how="outer", suffixes=(f"_{LINEAR}", f"_{kind}"))
    table = table.rename(columns={f"{stat}_{name}": f"{name}_{stat}" for stat in ("mean", "std") for name in (LINEAR, kind)})
    table["label"] = table["label"].fillna(table["model"])
    table[f"{kind}_minus_{LINEAR}"] = table[f"{kind}_mean"] - table[f"{LINEAR}_mean"]
    orders = {key: {value: index for index, value in enumerate(dict.fromkeys(summary[key]))} for key in keys}
    table = table.sort_values(["shots", "dataset", "model"], key=lambda column: column.map(orders[column.name]))
    return table[vs_linear_columns(kind)].reset_index(drop=True)


def write_kind_comparison(summary: pd.DataFrame, layout: Layout, kind: str) -> None:
    """<kind>_vs_linear and <kind>_rank_agreement: does ``kind`` rank the models as the linear
    probe does? Worded by its module's texts."""
    texts, title = KIND_TEXTS[kind], KINDS[kind].title
    one_decimal = {f"{name}_{stat}": ".1f" for name in (kind, LINEAR) for stat in ("mean", "std")}
    write_tidy_table(
        layout, kind_result_name("vs_linear", kind), kind_vs_linear(summary, kind),
        f"Top-1 accuracy (%) of {texts.named} beside the linear probe's, per N, "
        f"dataset and model: means and stds over seeds, and {title} minus linear in points.",
        [
            "Empty: a seed of either probe has no result (the summary's missing_seeds names it).",
            *texts.comparison_notes,
            *texts.notes,
        ],
        {**one_decimal, f"{kind}_minus_{LINEAR}": "+.1f"},
    )
    write_tidy_table(
        layout, kind_result_name("rank_agreement", kind), kind_rank_agreement(summary, kind, LINEAR),
        f"Rank agreement of the two probes: Kendall's tau-b between the models' ranking by linear top-1 and by "
        f"{texts.ranked_by}, per N and dataset, with its two-sided p-value ({texts.rank_question}).",
        [
            "Only models with a complete result of both probes are ranked; with fewer than 2 distinct "
            "scores there is no tau.",
            "With few models the test has little power: 3 models in the same order give tau = 1 and p = 0.33.",
        ],
        {"kendall_tau": ".3f", "p_value": ".2g"},
    )


def tables_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="results-tables", description="Render the summary as CSV, Markdown and LaTeX tables."
    )
    add_summary_options(parser, seed_results=True)
    add_exposures_option(parser)
    args = parser.parse_args(argv)
    write_tables(lin_rows(read_summary(args.summary), every_probe=True), Layout(args.results_root), args.baseline,
                 read_seed_results(args.seed_results), read_exposures(args.exposures))
    return 0


def write_statistics(summary: pd.DataFrame, seed_results: pd.DataFrame, layout: Layout, baseline: str,
                     exposures: dict[str, str] | None = None) -> None:
    """paired_tests (each model against the baseline, with its class given ``exposures``) and
    rank_agreement (a statistic of every model's ranking together: no model's row)."""
    tests = paired_tests(seed_results, summary, baseline)
    baseline_label = dict(zip(summary["model"], summary["label"])).get(baseline, baseline)
    write_tidy_table(
        layout, "paired_tests", with_exposure(tests, exposures, tests["model"], "label", TIDY_EXPOSURE_COLUMN),
        f"Each model minus {baseline_label} per dataset and N: mean and 95% interval of the "
        f"per-seed differences (points), paired t-test, Holm-corrected p-value.",
        [
            "Seeds are pairs: probes of the same seed share the validation split and the few-shot sample.",
            f"significant: Holm-corrected p < 0.05 over all {int(tests['p_value'].notna().sum())} tests of this table.",
            "No test (empty p) with fewer than 2 seeds, with equal differences on every seed, or an incomplete cell.",
            *exposure_notes(exposures, tests["model"], TIDY_EXPOSURE_COLUMN),
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
    add_summary_options(parser, seed_results=True)
    add_exposures_option(parser)
    args = parser.parse_args(argv)
    write_statistics(lin_rows(read_summary(args.summary)), kind_seed_results(read_seed_results(args.seed_results)),
                     Layout(args.results_root), args.baseline, read_exposures(args.exposures))
    return 0

