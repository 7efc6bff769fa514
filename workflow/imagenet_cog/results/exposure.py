"""Each model's exposure class where results compare models: the tables' column and its note, the
figures' marks.

The Snakefile resolves what each model was pretrained on and its class (``models/pretraining.py``) and
gives each command that shows the class ``--exposures``: a JSON object, model -> class. Only the class:
a declaration that changes a model's datasets but not its class reruns none of these commands. The
leaderboard, which shows the datasets, takes ``--pretraining``.

A table that compares models carries an Exposure column, a model the option leaves out undeclared.
A figure that compares models sets apart those whose class is not ``none`` (``figure_marks``, the
keywords of ``core.plots.ModelStyles``: dash-dotted lines, open markers, the class after the name), as
the CoG paper sets apart its web-data models ("not directly comparable", Sec. 4.1); a job that only
draws figures is given the option only where one of its models is set apart, so that a run of
``none`` models keeps its figure jobs' commands. No matplotlib here: the table commands import this.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Iterable, Mapping

import pandas as pd

from imagenet_cog.models.pretraining import EXPOSURES, MEANINGS, NONE, UNDECLARED

# the column of a table with a model per row: "Exposure" where the table's headers are titles, "exposure"
# in a tidy table (lower-case headers, as the leaderboard's CSV)
EXPOSURE_COLUMN = "Exposure"
TIDY_EXPOSURE_COLUMN = "exposure"
DOCS = "docs/models.md, 'What a model was pretrained on'"
APART = "pretrained beyond IN-1K, not directly comparable with the others (CoG paper, Sec. 4.1)"


def add_exposures_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--exposures", help="JSON object: each model's exposure class (none, labels, images, web, "
                                            f"undeclared; {DOCS}); absent: no Exposure column, no model set apart")


def read_exposures(text: str | None) -> dict[str, str] | None:
    """model -> class of a command's --exposures (None without it); a class the workflow lacks is refused."""
    if text is None:
        return None
    exposures = json.loads(text)
    unknown = sorted(set(exposures.values()) - set(EXPOSURES))
    if unknown:
        raise ValueError(f"--exposures: {', '.join(unknown)} is not an exposure class ({', '.join(EXPOSURES)}).")
    return exposures


def exposure_column(exposures: Mapping[str, str], models: Iterable[str]) -> list[str]:
    """The class of each of ``models``, in their order; undeclared where the option says nothing."""
    return [exposures.get(model, UNDECLARED) for model in models]


def with_exposure(table: pd.DataFrame, exposures: Mapping[str, str] | None, models: Iterable[str], after: str,
                  column: str = EXPOSURE_COLUMN) -> pd.DataFrame:
    """``table`` (a row per entry of ``models``) with the class after its column ``after``; as it
    was without ``exposures``."""
    if exposures is None:
        return table
    models = list(models)
    table = table.copy()
    table.insert(table.columns.get_loc(after) + 1, column, exposure_column(exposures, models))
    return table


def exposure_notes(exposures: Mapping[str, str] | None, models: Iterable[str], column: str = EXPOSURE_COLUMN) -> list[str]:
    """What the column's classes mean, those of ``models``; none without the column."""
    if exposures is None:
        return []
    present = set(exposure_column(exposures, models))
    meanings = "; ".join(f"{exposure}: {MEANINGS[exposure]}" for exposure in EXPOSURES if exposure in present)
    note = f"{column}: what the model's pretraining saw of the levels' concepts ({meanings}; {DOCS})."
    if present - {NONE}:
        note += (" Only models of exposure none keep the benchmark's premise: the others are not directly "
                 "comparable with them (CoG paper, Sec. 4.1).")
    return [note]


def set_apart(exposures: Mapping[str, str] | None, models: Iterable[str]) -> dict[str, str]:
    """model -> class of those of ``models`` whose class is not none: the models a figure sets apart."""
    if exposures is None:
        return {}
    models = list(models)
    return {model: exposure for model, exposure in zip(models, exposure_column(exposures, models)) if exposure != NONE}


def figure_marks(exposures: Mapping[str, str] | None, models: Iterable[str]) -> dict[str, Any]:
    """``core.plots.ModelStyles``' keywords for a figure of ``models``: those whose class is not none
    set apart, their class after their name, the legend saying why and what each class means."""
    return {"apart": set_apart(exposures, dict.fromkeys(models)), "note": APART,
            "words": {exposure: MEANINGS[exposure] for exposure in EXPOSURES if exposure != NONE}}
