# Series stage: what the rules of series.smk use, besides common.smk's and the earlier
# stages': the checkpoint series, the grid their checkpoints are probed on, the files their
# results read, and the stage's targets (kept apart from the rules, as snakemake --lint asks).

import dataclasses
import json
import shlex

from imagenet_cog.core.layout import SERIES_FIGURE, SERIES_STEPS, SERIES_SUMMARY, SERIES_TABLE, TABLE_FORMATS

# RankMe's sample of IN-1K training rows: the paper's size (more rows than any feature width
# here, docs/series.md) and a fixed seed, so that every checkpoint is read on the same images.
EFFECTIVE_RANK_ROWS = 25600
EFFECTIVE_RANK_SEED = 0


def series_grid(series):
    """What a series' checkpoints were probed on (functions/probes.smk, series_probe_results):
    the linear probe at the series' N and seeds, the kinds with jobs of their own (the k-NN) on
    the run's grid; each kind's N and seeds."""
    protocol = series.protocol
    grid = {naming.LINEAR: {"shots": list(protocol.shots), "seeds": protocol.probe_seeds(SEEDS)}}
    if protocol.knn:
        grid.update({kind.name: {"shots": SHOTS, "seeds": SEEDS} for kind in OWN_JOB_KINDS})
    return grid


def series_sources(series):
    """The models whose results a series' checkpoints read: each checkpoint's own, or the model
    whose identical content stands for it (an earlier step, or a configured model)."""
    return list(dict.fromkeys(checkpoint.same_as or checkpoint.model for checkpoint in series.checkpoints))


def series_source_models():
    return list(dict.fromkeys(model for series in SERIES.values() for model in series_sources(series)))


def series_curve_models():
    """The series' models whose per-concept accuracy gives a step its curve's slope."""
    scored = {*series_concept_models(), *concept_models()}
    return [model for model in series_source_models() if model in scored]


def series_results_inputs(wildcards):
    return {
        "probes": [
            PATHS.probe_result(model, dataset, shots, seed, kind)
            for series in SERIES.values()
            for model in series_sources(series)
            for kind, runs in series_grid(series).items()
            for dataset in DATASETS
            for shots in runs["shots"]
            for seed in runs["seeds"]
        ],
        "ranks": [PATHS.effective_rank(model) for model in series_source_models()],
        "concepts": [PATHS.concept_accuracy(model) for model in series_curve_models()],
        "ranking": [PATHS.ranking()] if series_curve_models() else [],
    }


def series_json():
    """The series for series-results, each checkpoint's step, model and stand-in and the grid
    they ran: not a file's path, so that a renamed or moved checkpoint reruns no table."""
    entries = {}
    for name, series in SERIES.items():
        checkpoints = [
            {key: value for key, value in dataclasses.asdict(checkpoint).items() if key != "path"}
            for checkpoint in series.checkpoints
        ]
        entries[name] = {"step_unit": series.step_unit, "checkpoints": checkpoints, "grid": series_grid(series)}
    return json.dumps(entries, sort_keys=True)


def series_results_arguments(wildcards):
    # the per-concept curve's slope of each checkpoint, drawn as concept-results draws the run's
    curve = (
        f" --ranking {PATHS.ranking()} --levels {' '.join(concept_levels())} --resamples {CONCEPTS_CONFIG['resamples']} --seed {CONCEPTS_CONFIG['seed']}"
        if series_curve_models()
        else ""
    )
    return f"--results-root {PATHS.root} --series {shlex.quote(series_json())} --datasets {' '.join(DATASETS)}{curve}"


def series_report(name, extension, caption, labels):
    """One of series-results' files registered for the report."""
    path = PATHS.table(name, extension) if extension in TABLE_FORMATS else PATHS.figure(name, extension)
    return report_output(path, caption=caption, category="Checkpoint series", labels=labels)


def series_targets():
    """Every series' RankMe per checkpoint, tables and figure; none when the config names no series."""
    if not SERIES:
        return []
    return [*(PATHS.effective_rank(model) for model in series_source_models()), *PATHS.series_outputs()]
