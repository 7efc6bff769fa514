"""A series' long table: one row per checkpoint, probe kind, dataset, N and seed.

Each checkpoint of a series (``models.series``) is evaluated as the model ``<series>@<step>``
through the ordinary stages, so its results are ordinary probe result files
(``Layout.probe_result``); this table gathers them in the order of training, on the
series' own grid (its kinds, datasets, N and seeds: the reduced protocol a series runs).

Columns (``tables/series.csv``):

    series, step, step_unit, model, same_as, probe, dataset, shots, seed, test_top1, test_top5,
    protocol_deviations, effective_rank

A checkpoint whose content equals an earlier step's was not evaluated again: its rows are its
stand-in's results, ``same_as`` naming the stand-in's model (empty for a checkpoint evaluated
as itself). ``protocol_deviations`` is what the probe result files say (the summary's column,
``results.summary``); ``effective_rank`` the checkpoint's RankMe (``.effective_rank``), empty
where the run computed none.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.layout import Layout
from imagenet_cog.models.series import Series, SeriesCheckpoint
from imagenet_cog.results.summary import DEVIATIONS_COLUMN, deviation_names, read_probe_result

TABLE_COLUMNS = [
    "series", "step", "step_unit", "model", "same_as", "probe", "dataset", "shots", "seed",
    "test_top1", "test_top5", DEVIATIONS_COLUMN, "effective_rank",
]


class MissingSeriesResultError(ExplainedError, FileNotFoundError):
    """A checkpoint's result file the series' table needs is not there."""


def series_from_json(text: str) -> list[tuple[Series, dict]]:
    """The series of ``--series``: a JSON object, name -> ``step_unit``, ``checkpoints`` (a list
    of ``SeriesCheckpoint`` fields, without the files' paths, which no table reads: they are left
    empty) and ``grid`` (probe kind -> the ``shots`` and ``seeds`` its checkpoints ran), as the
    rule file writes it; each series with its grid."""
    return [
        (Series(name=name, step_unit=entry["step_unit"],
                checkpoints=tuple(sorted((SeriesCheckpoint(**{"path": "", **checkpoint}) for checkpoint in entry["checkpoints"]),
                                         key=lambda checkpoint: checkpoint.step))),
         entry["grid"])
        for name, entry in json.loads(text).items()
    ]


def evaluated_as(checkpoint: SeriesCheckpoint) -> str:
    """The model whose result files hold this checkpoint's numbers."""
    return checkpoint.same_as or checkpoint.model


def needed(path: Path) -> Path:
    if not path.is_file():
        raise MissingSeriesResultError(f"{path}: not found, and the series' table reads it; make it first: `snakemake {path}`.")
    return path


def read_effective_rank(layout: Layout, model: str) -> float:
    """A model's RankMe, from its ``effective-rank`` result."""
    path = needed(Path(layout.effective_rank(model)))
    return float(json.loads(path.read_text())["effective_rank"])


def series_rows(layout: Layout, series: Series, grid: dict[str, dict], datasets: Sequence[str], ranks: bool) -> list[dict]:
    """The rows of one series on ``grid`` (probe kind -> its shots and seeds) and ``datasets``,
    each checkpoint's in step order; with ``ranks``, each checkpoint's RankMe beside them."""
    rows = []
    for checkpoint in series.checkpoints:
        source = evaluated_as(checkpoint)
        rank = read_effective_rank(layout, source) if ranks else math.nan
        for kind, runs in grid.items():
            for dataset in datasets:
                for shots in runs["shots"]:
                    for seed in runs["seeds"]:
                        result = read_probe_result(needed(Path(layout.probe_result(source, dataset, shots, seed, kind))))
                        rows.append({
                            "series": series.name, "step": checkpoint.step, "step_unit": series.step_unit,
                            "model": checkpoint.model, "same_as": checkpoint.same_as or "", "probe": kind,
                            "dataset": dataset, "shots": str(shots), "seed": str(seed),
                            "test_top1": float(result["test_top1"]), "test_top5": float(result["test_top5"]),
                            DEVIATIONS_COLUMN: deviation_names(result),
                            "effective_rank": rank,
                        })
    return rows


def series_table(layout: Layout, series: Sequence[tuple[Series, dict]], datasets: Sequence[str],
                 ranks: bool = True) -> pd.DataFrame:
    """Every series' rows, each on its own grid (see the module docstring)."""
    rows = [row for one, grid in series for row in series_rows(layout, one, grid, datasets, ranks)]
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)
