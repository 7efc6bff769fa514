"""The leaderboard's files: the long table (``tables/leaderboard.csv``), the wide one
(``tables/leaderboard.md``), the samples and protocols a later merge re-ranks from
(``tables/leaderboard_samples.csv``, ``tables/leaderboard_protocols.json``), the releases each
protocol's probe results were computed with (``tables/leaderboard_stacks.json``) and the page
(``leaderboard.html``: one self-contained file, its data, script and style inline).

The wide columns: top-1 on IN-1K and each of Lin's levels at N = all and at the few-shot N
(``few_shot``), the drop from the first level to the last (points, %), the per-concept slope,
the last level's detection AUROC and the last level's top-1 of each probe kind off the grid
(zero-shot). A cell is its mean, 95% interval and rank with its tie group; a missing cell is
empty. The reference protocol is the first run's; a row of another protocol carries
``OTHER_PROTOCOL_MARK`` and is ranked among its own protocol's rows only. Within a protocol, a
cell's rank is among the models of its exposure class (the ``*_all`` columns and the page's
control: among every class), and the wide table lists the classes in ``EXPOSURES``' order.
"""

from __future__ import annotations

import html
import json
import math

import pandas as pd

from imagenet_cog.core.io import atomic_output, write_text
from imagenet_cog.core.layout import LEADERBOARD_NAME, LEADERBOARD_PROTOCOLS, LEADERBOARD_SAMPLES, LEADERBOARD_STACKS, Layout
from imagenet_cog.core.naming import dataset_title
from imagenet_cog.core.tables import markdown_table
from imagenet_cog.models.pretraining import EXPOSURES, MEANINGS
from imagenet_cog.results.leaderboard_cells import (
    ALL_LEVELS,
    MEASURES,
    MODEL_COLUMNS,
    PUBLISHED,
    SAMPLE_COLUMNS,
    higher_first,
)
from imagenet_cog.results.leaderboard_html import page
from imagenet_cog.results.leaderboard_ranks import ALL_RANK_COLUMNS, RANK_COLUMNS

OTHER_PROTOCOL_MARK = "§"
LONG_COLUMNS = ["model", "label", "category", "provenance", "protocol", "paper_name", "today", "exposure",
                "pretraining_data", "dataset", "measure", "shots", "value", "ci95_low", "ci95_high", "n_seeds",
                "std_error", "published_value", "published_diff", *RANK_COLUMNS, *ALL_RANK_COLUMNS, "other_protocol"]
FEW_SHOT_PREFERRED = 4  # the few-shot N shown beside N = all, where the run has it (the paper: Fig. 4's)
NOTES = [
    "Each cell: mean over seeds [95% interval] and #rank, with the ranks of its tie group where "
    "it cannot be told apart from the group's leader (docs/leaderboard.md: a paired bootstrap over "
    "concepts where both models have per-concept results, over seeds otherwise; standard errors "
    "for published rows). An empty cell: not measured.",
    f"{OTHER_PROTOCOL_MARK} another protocol than the first run's (its digest in the protocol column): "
    "ranked among its own protocol's rows only. Published rows are the paper's own numbers "
    "(supp. Tables 5-10), under the paper's protocol.",
    "Drop and slope rank the smallest first: a model that recognises nothing (random weights) has "
    "neither, so read them beside top-1.",
    "Exposure: what a model's pretraining saw of the levels' concepts ("
    + "; ".join(f"{exposure}: {MEANINGS[exposure]}" for exposure in EXPOSURES)
    + "). ImageNet-CoG is designed for models pretrained on IN-1K (CoG paper, Sec. 3.1), and the paper's own "
    "models using web data (d-Semi-Sup., d-Semi-Weakly-Sup., d-CLIP, d-MoPro; green in its figures) are 'not "
    "directly comparable' (Sec. 4.1): each class is ranked within itself, only models of exposure none with "
    "the paper's IN-1K models. The CSV's rank_all (and the page's control) ranks every class together.",
]


def few_shot(shots: list[str]) -> str | None:
    numeric = sorted(int(value) for value in shots if value != "all")
    if not numeric:
        return None
    return str(FEW_SHOT_PREFERRED) if FEW_SHOT_PREFERRED in numeric else str(numeric[0])


def wide_columns(cells: pd.DataFrame, reproduced: list[str], datasets: list[str], levels: list[str]) -> list[dict]:
    """The wide table's columns, those the cells have, in the order of the module docstring; the
    few-shot N one that the ``reproduced`` models have (the paper's rows have every N)."""
    chosen = [("top1", dataset, "all") for dataset in datasets]
    few = few_shot(cells.loc[cells["model"].isin(reproduced), "shots"].astype(str).unique().tolist())
    chosen += [("top1", dataset, few) for dataset in datasets] if few else []
    last = levels[-1] if levels else None
    chosen += [("drop_points", last, "all"), ("drop_percent", last, "all"), ("concept_slope", ALL_LEVELS, "all"),
               ("detection_auroc", last, "all")]
    chosen += [(measure, last, "all") for measure in sorted(set(cells["measure"]) - set(MEASURES))]
    present = set(zip(cells["measure"], cells["dataset"], cells["shots"].astype(str)))
    return [{"key": f"{measure}|{dataset}|{shots}", "measure": measure, "dataset": dataset, "shots": shots,
             "title": column_title(measure, dataset, shots), "higher_first": higher_first(measure)}
            for measure, dataset, shots in chosen if (measure, dataset, shots) in present]


def column_title(measure: str, dataset: str, shots: str) -> str:
    if measure == "top1":
        return f"{dataset_title(dataset)} top-1, N = {shots}"
    if measure in MEASURES:
        title = MEASURES[measure][0]
        return title if dataset == ALL_LEVELS or measure.startswith("drop") else f"{dataset_title(dataset)} {title}"
    return f"{dataset_title(dataset)} {measure.replace('_top1', '').replace('zeroshot', 'zero-shot')} top-1"


def long_table(models: pd.DataFrame, cells: pd.DataFrame, reference: str) -> pd.DataFrame:
    table = cells.merge(models[MODEL_COLUMNS], on="model", how="left")
    table["other_protocol"] = table["protocol"] != reference
    order = {model: position for position, model in enumerate(models["model"])}
    table = table.assign(order=table["model"].map(order)).sort_values(["order", "measure", "dataset", "shots"], kind="stable")
    return table[LONG_COLUMNS].reset_index(drop=True)


def number(value, digits: int = 1) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def cell_text(row: dict, together: bool = False) -> str:
    """"mean [low, high] #rank" (ranks of its tie group: "#2 (1-3)"), published mean and ours - it;
    the rank within the model's exposure class, or ``together`` among every class."""
    if pd.isna(row["value"]):
        return ""
    digits = 2 if row["measure"] == "concept_slope" else 1
    text = number(row["value"], digits)
    if pd.notna(row["ci95_low"]):
        text += f" [{number(row['ci95_low'], digits)}, {number(row['ci95_high'], digits)}]"
    rank, first, last = (row[f"{column}{'_all' if together else ''}"] for column in ("rank", "tie_first", "tie_last"))
    if pd.notna(rank):
        text += f" #{int(rank)}"
        if first != last:
            text += f" ({int(first)}-{int(last)})"
    if pd.notna(row["published_value"]):
        text += f"; paper {number(row['published_value'])}, {row['published_diff']:+.1f}"
    return text


def wide_table(long: pd.DataFrame, models: pd.DataFrame, columns: list[dict], reference: str) -> pd.DataFrame:
    """One row per model (reference protocol first, then by exposure class, then by the first
    column), a cell per column, ranked within its class."""
    keyed = long.assign(key=long["measure"] + "|" + long["dataset"] + "|" + long["shots"].astype(str))
    texts = keyed.assign(text=[cell_text(row) for row in keyed.to_dict("records")])
    texts = texts.pivot(index="model", columns="key", values="text")
    rows = models.assign(other=models["protocol"] != reference, kind=models["exposure"].map(EXPOSURES.index))
    first = keyed[keyed["key"] == columns[0]["key"]].set_index("model")["value"] if columns else pd.Series(dtype=float)
    rows = rows.assign(first=rows["model"].map(first)).sort_values(["other", "kind", "first"],
                                                                   ascending=[True, True, False],
                                                                   na_position="last", kind="stable")
    table = pd.DataFrame({
        "Model": [label + (OTHER_PROTOCOL_MARK if other else "") for label, other in zip(rows["label"], rows["other"])],
        "Exposure": rows["exposure"].tolist(), "Category": rows["category"].tolist(),
        "Provenance": rows["provenance"].tolist(), "Protocol": rows["protocol"].tolist(),
    })
    for column in columns:
        table[column["title"]] = texts.reindex(index=rows["model"], columns=[column["key"]]).iloc[:, 0].fillna("").tolist()
    return table


def page_data(long: pd.DataFrame, models: pd.DataFrame, columns: list[dict], reference: str, protocols: dict,
              stacks: dict, notes: list[str], datasets: list[str]) -> dict:
    """What the page's script renders: the rows (a cell per column key), the columns, the
    protocols and stacks, and the figure's points (top-1 at N = all on each of ``datasets``)."""
    keyed = long.assign(key=long["measure"] + "|" + long["dataset"] + "|" + long["shots"].astype(str))
    figure = [{"key": f"top1|{dataset}|all", "title": dataset_title(dataset)} for dataset in datasets]
    wanted = {column["key"] for column in columns} | {point["key"] for point in figure}
    cells = {}
    for row in keyed[keyed["key"].isin(wanted) & keyed["value"].notna()].to_dict("records"):
        cells.setdefault(row["model"], {})[row["key"]] = {
            "v": row["value"], "lo": none_if_nan(row["ci95_low"]), "hi": none_if_nan(row["ci95_high"]),
            "n": none_if_nan(row["n_seeds"]), "rank": none_if_nan(row["rank"]), "tf": none_if_nan(row["tie_first"]),
            "tl": none_if_nan(row["tie_last"]), "by": row["compared_by"] or "", "pub": none_if_nan(row["published_value"]),
            "diff": none_if_nan(row["published_diff"]), "text": cell_text(row),
            "rank_all": none_if_nan(row["rank_all"]), "by_all": row["compared_by_all"] or "",
            "text_all": cell_text(row, together=True)}
    rows = [{"model": row.model, "label": row.label, "category": row.category, "provenance": row.provenance,
             "protocol": row.protocol, "other": row.protocol != reference, "today": bool(row.today),
             "paper_name": row.paper_name, "exposure": row.exposure, "pretraining_data": row.pretraining_data,
             "cells": cells.get(row.model, {})} for row in models.itertuples()]
    return {"columns": columns, "rows": rows, "reference": reference, "protocols": protocols, "stacks": stacks,
            "notes": notes, "mark": OTHER_PROTOCOL_MARK, "figure": figure, "exposures": list(EXPOSURES),
            "meanings": {exposure: MEANINGS[exposure] for exposure in EXPOSURES}}


def none_if_nan(value):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def write_leaderboard(layout: Layout, models: pd.DataFrame, cells: pd.DataFrame, samples: pd.DataFrame,
                      protocols: dict, stacks: dict, reference: str, datasets: list[str], levels: list[str],
                      left_out: list[str] = ()) -> pd.DataFrame:
    """Every file of the leaderboard (module docstring); returns the long table."""
    long = long_table(models, cells, reference)
    columns = wide_columns(cells, models.loc[models["provenance"] != PUBLISHED, "model"].tolist(), datasets, levels)
    notes = [*NOTES, *(f"Left out, another protocol: {name}." for name in left_out)]
    with atomic_output(layout.table(LEADERBOARD_NAME, "csv")) as temporary:
        long.to_csv(temporary, index=False)
    with atomic_output(layout.table(LEADERBOARD_SAMPLES, "csv")) as temporary:
        samples.reindex(columns=SAMPLE_COLUMNS).to_csv(temporary, index=False)
    write_text(layout.table(LEADERBOARD_PROTOCOLS, "json"), json.dumps(protocols, indent=1, sort_keys=True) + "\n")
    write_text(layout.table(LEADERBOARD_STACKS, "json"), json.dumps(stacks, indent=1, sort_keys=True) + "\n")
    caption = (f"Leaderboard: every model of the run beside the paper's published models; the reference "
               f"protocol is {reference}.")
    write_text(layout.table(LEADERBOARD_NAME, "md"), markdown_table(wide_table(long, models, columns, reference),
                                                                caption, notes))
    data = page_data(long, models, columns, reference, protocols, stacks, notes, datasets)
    write_text(layout.leaderboard_page(), page(html.escape(caption), data))
    return long
