"""The descriptions a concept can be given in describability tasks (Laina et al. 2020, Eq. 3).

Two sources:

* ``gloss``: the concept's WordNet gloss, from the concept catalogue (what the rater sheets
  have always shown);
* ``auto``: an automatic description, from a captioner's file: a TSV with
  exactly the columns ``group``, ``description``, ``score``, ``captions``, one row per
  group, the group being a concept's wnid (or ``cluster-<k>`` for a clustering's groups,
  which no rater sheet shows). Only ``group`` and ``description`` are read here.

The rater sheets show either source or both (:data:`SHEET_CHOICES`); the image-text model
answers the sheets' describability tasks with each source apart (:mod:`.describability`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.io import read_tsv

GLOSS = "gloss"
AUTO = "auto"
BOTH = "both"
SOURCES = (GLOSS, AUTO)
# what a describability page shows: the gloss (the default), the automatic description, or both
SHEET_CHOICES = (GLOSS, AUTO, BOTH)
SOURCE_TITLES = {GLOSS: "WordNet gloss", AUTO: "Automatic description"}
AUTO_COLUMNS = ("group", "description", "score", "captions")


class DescriptionError(ExplainedError, ValueError):
    """A descriptions file that cannot give every concept asked for; the message names it."""


def read_auto_descriptions(path: str | os.PathLike, groups: Iterable[str]) -> dict[str, str]:
    """group -> automatic description for ``groups`` (wnids), from a captioner's TSV."""
    try:
        rows = read_tsv(path)
    except FileNotFoundError as error:
        raise DescriptionError(f"{path}: no such descriptions file.") from error
    if not rows:
        raise DescriptionError(f"{path}: no descriptions (columns {', '.join(AUTO_COLUMNS)} expected).")
    missing_columns = [column for column in AUTO_COLUMNS if column not in rows[0]]
    if missing_columns:
        raise DescriptionError(
            f"{path}: not an automatic descriptions file: column(s) {', '.join(missing_columns)} missing "
            f"(columns {', '.join(AUTO_COLUMNS)} expected)."
        )
    descriptions: dict[str, str] = {}
    for row in rows:
        if row["group"] in descriptions:
            raise DescriptionError(f"{path}: group {row['group']} has two rows; keep one description per group.")
        descriptions[row["group"]] = row["description"].strip()
    wanted = sorted(set(groups))
    missing = [group for group in wanted if group not in descriptions]
    if missing:
        raise DescriptionError(
            f"{path}: no automatic description for {len(missing)} concept(s) ({', '.join(missing[:5])}); "
            f"the file is older than the concepts asked for: delete it and re-run Snakemake."
        )
    empty = [group for group in wanted if not descriptions[group]]
    if empty:
        raise DescriptionError(f"{path}: an empty description for {len(empty)} concept(s) ({', '.join(empty[:5])}).")
    return {group: descriptions[group] for group in wanted}
