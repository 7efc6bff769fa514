"""The ``series-results`` command: every series' long table, its numbers per step, its
verdicts per level and its figure (:mod:`.table`, :mod:`.summary`, :mod:`.figure`).

Writes ``tables/series.csv``, ``tables/series_steps.*``, ``tables/series_summary.*`` and
``figures/series.*`` under ``--results-root``. Each series' grid (in ``--series``: the N and
seeds each probe kind ran, on ``--datasets``) is the protocol its checkpoints ran, stated in the
tables' captions; ``--concept-tables`` (the checkpoints' ``analyses-concepts`` tables) give
each checkpoint's per-concept curve and its slope, fitted as ``concept-results`` fits the
result models' (:mod:`imagenet_cog.analyses.concept_report`).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import pandas as pd

from imagenet_cog.analyses.concept_curve import interval
from imagenet_cog.analyses.concept_report import (
    concept_table,
    curve_points,
    fit_models,
    per_concept,
    read_seed_tables,
    similarities,
)
from imagenet_cog.core.command_line import setup_logging
from imagenet_cog.core.io import atomic_output
from imagenet_cog.core.layout import SERIES_FIGURE, SERIES_STEPS, SERIES_SUMMARY, SERIES_TABLE, Layout
from imagenet_cog.core.plots import save_figure, set_theme
from imagenet_cog.core.tables import write_tidy_table
from imagenet_cog.models.series import Series

from .figure import series_figure
from .summary import series_summary, step_numbers
from .table import series_from_json, series_table

log = logging.getLogger("imagenet_cog.series.results")

SLOPE_COLUMNS = ["model", "value", "ci95_low", "ci95_high"]
# the tables' columns of top-1 points (and RankMe) and of slopes, as their Markdown and LaTeX show them
STEP_POINTS = ["top1_mean", "top1_ci95_low", "top1_ci95_high", "top5_mean", "in1k_top1_mean", "gap_in1k", "effective_rank"]
STEP_SLOPES = ["concept_slope", "concept_slope_ci95_low", "concept_slope_ci95_high"]
SUMMARY_POINTS = ["best_top1", "best_ci95_low", "best_ci95_high", "final_top1", "final_ci95_low", "final_ci95_high",
                  "final_minus_best", "diff_ci95_low", "diff_ci95_high"]


def concept_slopes(seed_tables: Sequence[Path], ranking: Path, levels: Sequence[str], resamples: int,
                   seed: int) -> pd.DataFrame:
    """Each checkpoint's per-concept curve over Lin's ``levels``: its slope with the 95% interval
    of ``resamples`` bootstrap draws of concepts (none without tables)."""
    if not seed_tables:
        return pd.DataFrame(columns=SLOPE_COLUMNS)
    lin, _ = similarities(ranking, {})
    points = curve_points(concept_table(per_concept(read_seed_tables(seed_tables)), lin, {}, {}), levels)
    rows = []
    for model, curve in fit_models(points, {}, resamples, seed).items():
        low, high = interval(curve.resampled["slope"])
        rows.append({"model": model, "value": curve.statistics["slope"], "ci95_low": low, "ci95_high": high})
    return pd.DataFrame(rows, columns=SLOPE_COLUMNS)


def protocol_text(series: Sequence[tuple[Series, dict]]) -> str:
    return "; ".join(
        f"{one.name}: " + ", ".join(f"{kind} at N = {', '.join(runs['shots'])}, seeds {', '.join(runs['seeds'])}"
                                     for kind, runs in grid.items())
        for one, grid in series
    )


def write_outputs(layout: Layout, table: pd.DataFrame, steps: pd.DataFrame, summary: pd.DataFrame, protocol: str) -> None:
    with atomic_output(layout.table(SERIES_TABLE, "csv")) as temporary:
        table.to_csv(temporary, index=False)
    write_tidy_table(
        layout, SERIES_STEPS, steps,
        f"Each checkpoint of each series at its step: test top-1 over the seeds with its 95% interval, the gap to "
        f"IN-1K at the same step, the per-concept curve's slope (linear probe, N = all) and RankMe. The series' "
        f"protocol: {protocol}.",
        ["A step with same_as set holds the results of the identical checkpoint it names.",
         "Concept slope: top-1 points per 0.1 Lin similarity, 95% bootstrap interval over concepts (docs/series.md)."],
        {column: ".2f" for column in STEP_POINTS} | {column: ".3f" for column in STEP_SLOPES},
    )
    write_tidy_table(
        layout, SERIES_SUMMARY, summary,
        f"Each series per probe kind, N and dataset: the best step and the final checkpoint against it, and RankMe's "
        f"Spearman correlation with top-1 over the checkpoints. The series' protocol: {protocol}.",
        ["The best step is chosen on the test images' top-1: it describes the series, it is no held-out estimate, "
         "and the final-below-best test (one-sided paired t over seeds, Holm-corrected) is optimistic for it "
         "(docs/series.md). Hyperparameters are chosen on validation rows."],
        {column: ".2f" for column in SUMMARY_POINTS}
        | {"t": ".2f", "p_value": ".3g", "p_holm": ".3g", "rankme_spearman": ".2f", "rankme_p_value": ".3g"},
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog series-results", description=__doc__.split("\n")[0])
    parser.add_argument("--results-root", required=True)
    parser.add_argument("--series", required=True,
                        help="JSON: series name -> step_unit, checkpoints and grid (probe kind -> shots, seeds), the rule's")
    parser.add_argument("--datasets", nargs="+", required=True)
    parser.add_argument("--concept-tables", nargs="*", type=Path, default=[],
                        help="the checkpoints' per-concept accuracy tables (analyses-concepts)")
    parser.add_argument("--ranking", type=Path, help="levels/ranking.tsv (Lin), with --concept-tables")
    parser.add_argument("--levels", nargs="*", default=[], help="Lin's levels, the curve's concepts")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap draws of the slope's interval")
    parser.add_argument("--seed", type=int, default=0, help="of the bootstrap draws")
    parser.add_argument("--no-effective-rank", action="store_true", help="leave RankMe out (none computed)")
    return parser


def series_results_command(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    setup_logging()
    layout = Layout(args.results_root)
    series = series_from_json(args.series)
    table = series_table(layout, series, args.datasets, ranks=not args.no_effective_rank)
    slopes = concept_slopes(args.concept_tables, args.ranking, args.levels, args.resamples, args.seed)
    steps = step_numbers(table, slopes)
    summary = series_summary(table, steps)
    write_outputs(layout, table, steps, summary, protocol_text(series))
    set_theme()
    fig = series_figure(steps, summary)
    save_figure(fig, layout, SERIES_FIGURE)
    plt.close(fig)
    for row in summary[summary["note"] != ""].itertuples():
        log.info("%s %s N=%s %s: best step %s, final %s: %s", row.series, row.probe, row.shots, row.dataset,
                 row.best_step, row.final_step, row.note)
    return 0
