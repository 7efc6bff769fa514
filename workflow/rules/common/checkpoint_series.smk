import os
import sys

from imagenet_cog.core.config_check import with_source

# Checkpoints that this workflow's own jobs write, which a model (or a series' {step: path} map)
# may name as its weights before they exist: in demo mode the demo's pretrained network and the
# epochs its pretraining keeps (demo.pretraining.keep_epochs).
WORKFLOW_CHECKPOINTS = (
    {PATHS.demo_checkpoint(), *map(PATHS.demo_epoch_checkpoint, config["demo"]["pretraining"]["keep_epochs"])}
    if config["mode"] == "demo"
    else set()
)


def workflow_checkpoints():
    return WORKFLOW_CHECKPOINTS


# A training run's checkpoints as a series (models.<name>.checkpoints; imagenet_cog.models.series):
# each evaluated checkpoint becomes a model <name>@<step> of config["models"], the series entry
# itself none; SERIES holds each series (its steps, duplicates, protocol) for the stages that
# plan and table it. A checkpoint's path never reaches a job's command: the jobs find it in
# their environment (SERIES_WEIGHTS_VARIABLE), so that a moved folder reruns nothing.
from imagenet_cog.models.series import WEIGHTS_VARIABLE as SERIES_WEIGHTS_VARIABLE
from imagenet_cog.models.registry import checkpoint_sha256
from imagenet_cog.models.series import (
    SeriesError,
    checkpoint_entry,
    expand_series,
    is_series_entry,
    stand_in_models,
    weights_variable,
)

from imagenet_cog.probes.kinds import KINDS as PROBE_KIND_REGISTRY

# The kinds with jobs of their own (the k-NN): rule probe_<kind> each (probes.smk), one job per
# model and dataset of IN-1K and the levels scoring every N and seed. A series runs them too
# (series.knn), so a model standing in for one of its checkpoints must.
OWN_JOB_KINDS = [kind for kind in PROBE_KIND_REGISTRY.values() if kind.own_job]
SERIES = {}
for series_name, series_entry in [(name, entry) for name, entry in config["models"].items() if is_series_entry(entry)]:
    try:
        # the schema fills weights in every entry: refused only where a config file sets it
        if any("weights" in ((settings.get("models") or {}).get(series_name) or {}) for _, settings in CONFIG_SOURCES):
            raise SeriesError(
                f"config.yaml: model '{series_name}' names both weights and checkpoints; a series' weights are its "
                "checkpoints: remove weights."
            )
        # a job's own reading of the Snakefile (on SLURM, every job's) runs one model: it skips
        # digesting every checkpoint for duplicates, which only the run's planning needs
        digest = checkpoint_sha256 if workflow.is_main_process else os.path.realpath
        series, lacks = expand_series(
            series_name,
            series_entry,
            config["series"],
            digest,
            checkpoints_dir=config["checkpoints_dir"],
            made_by_workflow=workflow_checkpoints(),
            stand_ins=stand_in_models(
                series_entry,
                config,
                digest,
                own_job_kinds=[kind.name for kind in OWN_JOB_KINDS],
                made_by_workflow=workflow_checkpoints(),
            ),
        )
    except SeriesError as error:
        raise WorkflowError(with_source(str(error), ["models", series_name], CONFIG_SOURCES))
    for lack in lacks:
        note_missing("checkpoints", series_name, with_source(f"config.yaml: {lack}", ["models", series_name], CONFIG_SOURCES))
    SERIES[series_name] = series
    del config["models"][series_name]
    config["models"].update({checkpoint.model: checkpoint_entry(series_entry, checkpoint) for checkpoint in series.evaluated()})
# Every evaluated series checkpoint, and those that take the series protocol alone: model -> its series
SERIES_CHECKPOINTS = {checkpoint.model: series for series in SERIES.values() for checkpoint in series.evaluated()}
SERIES_REDUCED = {checkpoint.model: series for series in SERIES.values() for checkpoint in series.reduced()}
os.environ[SERIES_WEIGHTS_VARIABLE] = weights_variable(SERIES.values())
if workflow.is_main_process:
    for series in SERIES.values():
        for line in series.screen_lines():
            print(line, file=sys.stderr, flush=True)
