"""Probe results -> one tidy summary of the grid (paper Sec. 4.2), and the readers of it.

The summary has one row per model x dataset x shots of the configured grid, so a run that
is missing shows up as a row, never as an absent one:

    model, label, category, random_weights, probe, dataset, level_set, shots,
    mean, std, ci95_low, ci95_high, top5_mean, top5_std, n_seeds, expected_seeds, complete,
    missing_seeds, protocol_deviations

``protocol_deviations`` names the deviations from the paper's protocol (``probes.two_stage``)
of the cell's runs, empty for the exact protocol; the tables mark such cells (‡).

``level_set`` is ``lin`` for IN-1K and Lin's levels, else the level set of a level-set
dataset (``wup-l3``: wup; ``random-07``: random), whose rows follow, over their own shots
and seeds (``level_sets.shots``, ``level_sets.seeds``). The paper's tables and figures use
the ``lin`` rows of the linear probe.

``mean``/``std`` are the test top-1 (percent) over the seeds, ``std`` with ddof=0 (the
population standard deviation, as the authors' result script computes it over its 5 seeds);
``ci95_low``/``ci95_high`` the 95% confidence interval of the mean (Student t, n - 1 degrees
of freedom, sample std, cut to [0, 100]; empty with one seed; see ``statistics.mean_interval``).
A cell is only given a mean when *every* configured seed has a result: with a seed missing
``mean``/``std`` are empty, ``complete`` is False and ``missing_seeds`` lists the seeds, so
an incomplete cell never passes for a mean over fewer seeds.

``probe`` is the probe kind (linear, knn, mlp, mlp_noact, pca-<d>; ``probes.kinds``). The
``knn`` rows (the weighted k-NN classifier) cover the linear probe's grid
(``probes.shots``, ``probes.seeds``; ``--shots``/``--seeds``), since the k-NN runs on the
linear probe's training sets; their top-1/top-5 are those at ``probes.knn.reported_k``
(the summary does not hold k; the result JSONs do), and at N = all every seed gives the same
numbers (no randomness: std 0, a zero-width interval). Every other kind's rows cover their
own shots and seeds (``probes.other_kinds_shots/seeds``).

Relative numbers (:func:`with_relative`) are ``model - baseline`` in percentage points, per
dataset and shots, both means over all seeds; their interval is the 95% interval of the
paired per-seed difference (``statistics.paired_tests``).

Besides the summary, ``aggregate-probes`` writes the per-seed results (one row per probe
result) that the paired tests read.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from imagenet_cog.core.failures import DamagedFileError, ExplainedError
from imagenet_cog.core.io import atomic_output
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.naming import LINEAR, level_set_of
from imagenet_cog.models.registry import is_random_weights
from imagenet_cog.probes.kinds import KINDS
from imagenet_cog.results.statistics import TOP1_RANGE, mean_interval

SUMMARY_COLUMNS = [
    "model", "label", "category", "random_weights", "probe", "dataset", "shots",
    "mean", "std", "ci95_low", "ci95_high", "top5_mean", "top5_std",
    "n_seeds", "expected_seeds", "complete", "missing_seeds",
]
# The protocol deviations (probes.two_stage) of a cell's or run's probes, ";"-joined names,
# empty for the paper's protocol; the last column, so summaries written before it still read.
DEVIATIONS_COLUMN = "protocol_deviations"
REQUIRED_RESULT_KEYS = ("model", "dataset", "shots", "seed", "test_top1", "test_top5", "random_weights")


def model_label(name: str, metadata: dict) -> str:
    return metadata.get("label") or name


# probe results -> summary ----------------------------------------------------------------
class StaleResultError(ExplainedError, ValueError):
    """A probe result written by another version of the probe stage."""


def read_probe_result(path: Path) -> dict:
    try:
        with open(path) as stream:
            result = json.load(stream)
    except json.JSONDecodeError as error:
        raise DamagedFileError(path, f"not valid JSON ({error})") from error
    missing = [key for key in REQUIRED_RESULT_KEYS if key not in result]
    if missing:
        raise StaleResultError(
            f"{path}: probe result lacks {', '.join(missing)}; it was written by another "
            f"version of the probe stage: delete it and re-run its probe job."
        )
    return result


def deviation_names(result: dict) -> str:
    """The protocol deviations a probe result names, sorted and ";"-joined (empty: the paper's protocol)."""
    return ";".join(sorted({deviation["name"] for deviation in result.get("protocol_deviations") or []}))


def load_probe_results(
    root: str, models: Sequence[str], datasets: Sequence[str], shots: Sequence[str], seeds: Sequence[str],
    kind: str = LINEAR,
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
                    # a job that ran several seeds (probes.group shots or dataset; every k-NN job) timed
                    # them all (per N)
                    together = len(result.get("seeds_together") or [seed])
                    rows.append({
                        "model": model, "probe": kind, "dataset": dataset, "shots": str(shot), "seed": str(seed),
                        "test_top1": float(result["test_top1"]),
                        "test_top5": float(result["test_top5"]),
                        "random_weights": bool(result["random_weights"]),
                        "probe_s": float(timings.get("total_s", math.nan)) / together,
                        DEVIATIONS_COLUMN: deviation_names(result),
                    })
    columns = ["model", "probe", "dataset", "shots", "seed", "test_top1", "test_top5", "random_weights", "probe_s",
               DEVIATIONS_COLUMN]
    return pd.DataFrame(rows, columns=columns)


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
        summary = summary[summary["probe"] == LINEAR]
    return summary.reset_index(drop=True)


def kind_seed_results(seed_results: pd.DataFrame, kind: str = LINEAR) -> pd.DataFrame:
    """One probe kind's per-seed results (those the paired tests pair); per-seed results
    written before there were kinds are the linear probe's."""
    if "probe" not in seed_results.columns:
        return seed_results if kind == LINEAR else seed_results.iloc[0:0]
    return seed_results[seed_results["probe"] == kind].reset_index(drop=True)


def population_std(values: pd.Series) -> float:
    return float(values.std(ddof=0))


def summarise(
    runs: pd.DataFrame,
    models: dict[str, dict],
    datasets: Sequence[str],
    shots: Sequence[str],
    seeds: Sequence[str],
    kind: str = LINEAR,
) -> pd.DataFrame:
    """The tidy summary of one probe kind over its full grid (see the module docstring)."""
    seeds = [str(seed) for seed in seeds]
    if DEVIATIONS_COLUMN not in runs.columns:  # results from before probes.two_stage ran the paper's protocol
        runs = runs.assign(**{DEVIATIONS_COLUMN: ""})
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
                low, high = mean_interval(cell["test_top1"], TOP1_RANGE) if complete else (math.nan, math.nan)
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
                    DEVIATIONS_COLUMN: joined_deviations(cell[DEVIATIONS_COLUMN]),
                })
    return pd.DataFrame(rows, columns=[*SUMMARY_COLUMNS, DEVIATIONS_COLUMN])


def joined_deviations(names: pd.Series) -> str:
    """Every deviation any of ``names`` (";"-joined per run) names, sorted and ";"-joined."""
    return ";".join(sorted({name for joined in names.fillna("") for name in str(joined).split(";") if name}))


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
        path, SUMMARY_COLUMNS, {"shots": str, "missing_seeds": str, "model": str, "dataset": str, DEVIATIONS_COLUMN: str},
        "a results summary",
    )
    summary["missing_seeds"] = summary["missing_seeds"].fillna("")
    summary["complete"] = summary["complete"].astype(bool)
    summary["random_weights"] = summary["random_weights"].astype(bool)
    summary[DEVIATIONS_COLUMN] = summary[DEVIATIONS_COLUMN].fillna("") if DEVIATIONS_COLUMN in summary else ""
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



INTERVAL_COLUMNS = {"mean": ("ci95_low", "ci95_high"), "relative": ("relative_low", "relative_high")}


# the kinds whose results get the paper's set of tables and figures (layout.kind_table_names)
KIND_TEXTS = {name: kind.texts for name, kind in KINDS.items() if kind.texts}


def tabled_kinds(summary: pd.DataFrame) -> list[str]:
    """The kinds of ``summary`` with a set of tables and figures of their own, linear first:
    a summary has knn rows exactly when probes.kinds has knn (aggregate-probes writes every
    cell of a configured kind, complete or not)."""
    present = set(summary["probe"]) if "probe" in summary.columns else {LINEAR}
    return [LINEAR, *(kind for kind in KIND_TEXTS if kind != LINEAR and kind in present)]


# command line ------------------------------------------------------------------------------
def grid_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results-root", required=True, help="the workflow's results folder")
    parser.add_argument("--models", required=True, help="JSON object: model name -> its config entry")
    parser.add_argument("--datasets", nargs="+", required=True)
    parser.add_argument("--shots", nargs="+", required=True)
    parser.add_argument("--seeds", nargs="+", required=True)
    parser.add_argument("--kinds", nargs="+", default=[LINEAR], help="probe kinds (linear is always read)")
    parser.add_argument("--other-kinds-shots", nargs="+",
                        help="shots of the kinds other than linear and knn (default --shots)")
    parser.add_argument("--other-kinds-seeds", nargs="+",
                        help="seeds of the kinds other than linear and knn (default --seeds)")
    parser.add_argument("--kind-models", nargs="+", default=[], metavar="KIND=MODEL,MODEL",
                        help="the models a kind probes, where fewer than --models (probes.kind_models)")


# kinds that run on the linear probe's grid (--shots, --seeds), not on --other-kinds-shots/seeds
LINEAR_GRID_KINDS = tuple(name for name, kind in KINDS.items() if kind.linear_grid)


def kind_grids(args: argparse.Namespace) -> list[tuple[str, list[str], list[str]]]:
    """(kind, shots, seeds) of every configured probe kind, linear first."""
    others = [kind for kind in args.kinds if kind != LINEAR]
    return [(LINEAR, args.shots, args.seeds)] + [
        (kind, args.shots, args.seeds) if kind in LINEAR_GRID_KINDS
        else (kind, args.other_kinds_shots or args.shots, args.other_kinds_seeds or args.seeds)
        for kind in others
    ]


def models_of_kind(args: argparse.Namespace, models: dict, kind: str) -> dict:
    """The entries of ``models`` that ``kind`` probes (--kind-models; a kind not named: all)."""
    chosen = dict(option.split("=", 1) for option in args.kind_models).get(kind)
    return models if chosen is None else {model: models[model] for model in chosen.split(",") if model in models}


def load_all_probe_results(args: argparse.Namespace, models: dict) -> pd.DataFrame:
    frames = [
        load_probe_results(args.results_root, list(models_of_kind(args, models, kind)), args.datasets, shots, seeds, kind)
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
    parser.add_argument("--level-set-models", nargs="*", help="the models probed on the level sets (default --models)")
    parser.add_argument("--output", required=True, help="the summary CSV")
    parser.add_argument("--seed-output", required=True, help="the per-seed results CSV (for the paired tests)")
    args = parser.parse_args(argv)
    models = json.loads(args.models)
    runs = load_all_probe_results(args, models)
    summary = pd.concat(
        [summarise(runs, models_of_kind(args, models, kind), args.datasets, shots, seeds, kind)
         for kind, shots, seeds in kind_grids(args)],
        ignore_index=True,
    )
    if args.level_set_datasets:
        set_models = {model: models[model] for model in args.level_set_models or models if model in models}
        set_runs = load_probe_results(args.results_root, list(set_models), args.level_set_datasets,
                                      args.level_set_shots, args.level_set_seeds)
        set_summary = summarise(set_runs, set_models, args.level_set_datasets, args.level_set_shots, args.level_set_seeds)
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

