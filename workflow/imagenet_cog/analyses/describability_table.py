"""The describability table per level (Laina et al. 2020, Tab. 2), ``model-describability-table``.

Per level and negative kind, the forced-choice accuracy with the WordNet gloss and with the
automatic description (:mod:`.descriptions`), answered by human raters where their answers
were scored (``score-raters``' TSV of sheets showing that description, one per source) and
by each image-text model (``model-describability``, :mod:`.describability`), with the
Clopper-Pearson 95% interval (the learnability table's cell: percent [low, high]).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence

import pandas as pd

from imagenet_cog.core.io import read_tsv
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.naming import dataset_title
from imagenet_cog.core.tables import MISSING, RANDOM_WEIGHTS_MARK, RANDOM_WEIGHTS_NOTE, write_table
from imagenet_cog.models.registry import is_random_weights

from .common import AnalysisInputError
from .descriptions import SOURCE_TITLES, SOURCES
from .raters import DESCRIBABILITY, NEGATIVE_KINDS

TABLE = "analyses_describability"
HUMAN = "human"


def human_scores(path: str | os.PathLike) -> dict[tuple[str, str], tuple[float, float, float]]:
    """(dataset, negatives) -> (accuracy, low, high) of raters' describability answers, from
    a score-raters TSV."""
    rows = read_tsv(path)
    needed = {"dataset", "variant", "negatives", "accuracy", "ci_low", "ci_high"}
    if not rows or not needed <= set(rows[0]):
        raise AnalysisInputError(f"{path}: not a score-raters TSV (columns {', '.join(sorted(needed))} expected).")
    return {(row["dataset"], row["negatives"]): (float(row["accuracy"]), float(row["ci_low"]), float(row["ci_high"]))
            for row in rows if row["variant"] == DESCRIBABILITY}


def interval_text(value: float, low: float, high: float) -> str:
    """The learnability table's cell: percent, with the 95% interval."""
    return f"{100 * value:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def describability_table(results: Sequence[Mapping], models: Mapping[str, Mapping], datasets: Sequence[str],
                         humans: Mapping[str, Mapping[tuple[str, str], tuple[float, float, float]]]) -> pd.DataFrame:
    """Rows: level, negative kind, who answered (humans where their answers were scored, then
    each model); columns: accuracy with the gloss and with the automatic description."""
    cells: dict[tuple[str, str, str], dict[str, str]] = {}
    for result in results:
        for record in result["metrics"]:
            _, source, negatives = record["metric"].rsplit("_", 2)
            cells.setdefault((result["dataset"], negatives, result["model"]), {})[source] = interval_text(
                record["value"], record["low"], record["high"])
    for source, scores in humans.items():
        for (dataset, negatives), (value, low, high) in scores.items():
            cells.setdefault((dataset, negatives, HUMAN), {})[source] = interval_text(value, low, high)
    labels = {model: (entry.get("label") or model)
              + (RANDOM_WEIGHTS_MARK if is_random_weights(str(entry.get("weights", ""))) else "")
              for model, entry in models.items()}
    rows = []
    for dataset in datasets:
        for negatives in NEGATIVE_KINDS:
            for who in (HUMAN, *models):
                if (dataset, negatives, who) not in cells:
                    continue
                cell = cells[dataset, negatives, who]
                rows.append({"Level": dataset_title(dataset), "Negatives": negatives,
                             "Answered by": "human raters" if who == HUMAN else labels[who],
                             **{SOURCE_TITLES[source]: cell.get(source, MISSING) for source in SOURCES}})
    return pd.DataFrame(rows, columns=["Level", "Negatives", "Answered by", *(SOURCE_TITLES[source] for source in SOURCES)])


def table_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog model-describability-table",
        description="The describability table per level (Laina et al. 2020, Tab. 2): gloss vs automatic "
                    "description, answered by raters (where scored) and by each image-text model.",
    )
    parser.add_argument("--results", nargs="*", default=[], help="model-describability result JSONs")
    parser.add_argument("--results-root", required=True)
    parser.add_argument("--models", required=True, help="JSON object: model name -> its config entry")
    parser.add_argument("--datasets", nargs="+", required=True)
    for source in SOURCES:
        parser.add_argument(f"--human-{source}", help=f"score-raters TSV of sheets showing the {SOURCE_TITLES[source]}")
    args = parser.parse_args(argv)
    try:
        humans = {source: human_scores(getattr(args, f"human_{source}"))
                  for source in SOURCES if getattr(args, f"human_{source}")}
        results = []
        for path in args.results:
            with open(path) as stream:
                results.append(json.load(stream))
    except (AnalysisInputError, OSError, json.JSONDecodeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    configured = json.loads(args.models)
    # the models with results, in config order (then any other, by name)
    answered = {result["model"] for result in results}
    models = {model: configured.get(model, {}) for model in [*configured, *sorted(answered - set(configured))]
              if model in answered}
    table = describability_table(results, models, args.datasets, humans)
    notes = ["Forced choice between a query image of the concept and a negative's, given the concept's description "
             "(Laina et al. 2020, Eq. 3); accuracy (%) with Clopper-Pearson 95% intervals. A model answers the image "
             "whose embedding has the higher cosine similarity to the description's text embedding."]
    if not humans:
        notes.append("No raters' answers were scored: every row is a model's.")
    if any(is_random_weights(str(entry.get("weights", ""))) for entry in models.values()):
        notes.append(RANDOM_WEIGHTS_NOTE)
    write_table(Layout(args.results_root), TABLE, table,
                "Describability per level: WordNet gloss vs automatic description", notes)
    print(f"{len(table)} rows from {len(args.results)} results" + (f" and raters' scores ({', '.join(humans)})" if humans else ""))
    return 0
