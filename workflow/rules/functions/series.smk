# Series stage: what the rules of series.smk use, besides common.smk's and the earlier
# stages': the checkpoint series, the grid their checkpoints are probed on, the files their
# results read, and the stage's targets (kept apart from the rules, as snakemake --lint asks).

import dataclasses
import json
import shlex

from imagenet_cog.core.layout import (
    CONCEPT_CURVE,
    SERIES_FIGURE,
    SERIES_STEPS,
    SERIES_SUMMARY,
    SERIES_TABLE,
    TABLE_FORMATS,
)

# The config's checkpoint series, {name: imagenet_cog.models.series.Series}, each checkpoint
# a model of its own (<series>@<step>). common.smk defines it where the config names series;
# until then this stand-in holds none, and the stage plans nothing.
SERIES = globals().get("SERIES", {})

# RankMe's sample of IN-1K training rows: the paper's size (more rows than any feature width
# here, docs/series.md) and a fixed seed, so that every checkpoint is read on the same images.
EFFECTIVE_RANK_ROWS = 25600
EFFECTIVE_RANK_SEED = 0


def series_grid():
    """What a series' checkpoints are probed on and its tables read: the probe kinds on the
    linear probe's grid, the run's datasets, N and seeds."""
    return {"kinds": LINEAR_GRID_KINDS, "datasets": DATASETS, "shots": SHOTS, "seeds": SEEDS}


def evaluated_series_models():
    """The model of every checkpoint evaluated as itself (a checkpoint identical to an earlier
    one is not: its stand-in's files serve it)."""
    return [checkpoint.model for series in SERIES.values() for checkpoint in series.evaluated()]


def series_curve_models():
    """The series' models the per-concept curve covers (analyses.concepts)."""
    return [model for model in evaluated_series_models() if model in concept_models()]


def series_results_inputs(wildcards):
    grid = series_grid()
    models = evaluated_series_models()
    return {
        "probes": [
            PATHS.probe_result(model, dataset, shots, seed, kind)
            for model in models
            for kind in grid["kinds"]
            for dataset in grid["datasets"]
            for shots in grid["shots"]
            for seed in grid["seeds"]
        ],
        "ranks": [PATHS.effective_rank(model) for model in models],
        "curve": [PATHS.table(CONCEPT_CURVE, "csv")] if series_curve_models() else [],
    }


def series_json():
    """The series for series-results, each checkpoint's step, model and stand-in: not its file's
    path, so that a renamed or moved checkpoint changes no param and reruns no table."""
    entries = {}
    for name, series in SERIES.items():
        checkpoints = [
            {key: value for key, value in dataclasses.asdict(checkpoint).items() if key != "path"}
            for checkpoint in series.checkpoints
        ]
        entries[name] = {"step_unit": series.step_unit, "checkpoints": checkpoints}
    return json.dumps(entries, sort_keys=True)


def series_results_arguments(wildcards):
    grid = series_grid()
    curve = f" --concept-curve {PATHS.table(CONCEPT_CURVE, 'csv')}" if series_curve_models() else ""
    return (
        f"--results-root {PATHS.root} --series {shlex.quote(series_json())} --kinds {' '.join(grid['kinds'])}"
        f" --datasets {' '.join(grid['datasets'])} --shots {' '.join(grid['shots'])}"
        f" --seeds {' '.join(grid['seeds'])}{curve}"
    )


def series_report(name, extension, caption, labels):
    """One of series-results' files registered for the report."""
    path = PATHS.table(name, extension) if extension in TABLE_FORMATS else PATHS.figure(name, extension)
    return report_output(path, caption=caption, category="Checkpoint series", labels=labels)


def series_targets():
    """Every series' RankMe per checkpoint, tables and figure; none when the config names no series."""
    if not SERIES:
        return []
    return [*(PATHS.effective_rank(model) for model in evaluated_series_models()), *PATHS.series_outputs()]
