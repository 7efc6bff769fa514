# Each configured model: its registry spec and checks, its entry for the results commands, its
# checkpoint's fit and its pretraining data.

import functools
import json
import shlex
import sys

from imagenet_cog.core.config_check import with_source

# How a model's checkpoint may be read, not what the model is: no result depends on it. What it was
# pretrained on reaches only the commands that show it, resolved (pretraining_option), so that a
# declaration re-runs those alone.
NOT_FOR_RESULTS = ("trusted_globals", "trust_remote_code", "pretraining_data")


def models_json(with_paper_name=False, models=None):
    """Config entries of ``models`` (default: the models the results cover), for the
    aggregation commands; the paper_name only for the comparison with published numbers, so
    that setting one re-runs that comparison alone; a series checkpoint's without its path
    (its content is its identity: a moved folder reruns nothing)."""
    return json.dumps(
        {
            model: {
                key: value
                for key, value in config["models"][model].items()
                if (with_paper_name or key != "paper_name")
                and key not in NOT_FOR_RESULTS
                and not (key == "weights" and model in SERIES_CHECKPOINTS)
            }
            for model in (result_models() if models is None else models)
        }
    )


# models (imagenet_cog.models): built by the features stage, sized by the probes stage ------


def command_weights(model):
    """A model's weights as its jobs' commands take them: a series checkpoint's by its model
    (the file is in the jobs' environment, SERIES_WEIGHTS_VARIABLE), any other's as configured."""
    from imagenet_cog.models.series import series_weights

    return series_weights(model) if model in SERIES_CHECKPOINTS else model_spec(model).weights


def made_by_workflow(model):
    return model_spec(model).weights in workflow_checkpoints()


@functools.cache
def model_spec(model, check_checkpoint=True):
    """The registry spec of a ``models:`` entry; fails on an unknown arch or, unless told
    not to, a checkpoint file that is not there yet."""
    from imagenet_cog.models.registry import ModelSpec

    try:
        return ModelSpec.from_config(
            model,
            config["models"][model],
            config["checkpoints_dir"],
            made_by_workflow=workflow_checkpoints(),
            check_checkpoint=check_checkpoint,
        )
    except (ValueError, FileNotFoundError) as error:
        raise WorkflowError(with_source(str(error), ["models", model], CONFIG_SOURCES))


# Every model entry is checked now, so that a typo fails the run before any job starts; a
# checkpoint not yet downloaded is noted as a lack (refused with the others once the Snakefile
# is read), so that `snakemake plan` prices a run before it.
CONFIGURED_SPECS = {}
for configured_model in MODELS:
    model_spec(configured_model, check_checkpoint=False)
    CONFIGURED_SPECS[configured_model] = note_lack("checkpoints", configured_model, model_spec, configured_model)


def note_misfits():
    """Each checkpoint file that does not fit its arch (as its extraction job would find: the same
    mapping, of the file's shapes and the network built on the meta device), one line per model or
    series among what the run lacks. The run's own reading alone, not a listing or a pricing: they
    start no job. A file the workflow writes is judged by the job that reads it."""
    from imagenet_cog.models.checkpoint_fit import fit_checked, judged_misfit, refusal_line

    judged = {
        model: spec
        for model, spec in CONFIGURED_SPECS.items()
        if spec is not None and fit_checked(spec) and spec.weights not in workflow_checkpoints()
    }
    if not judged or not workflow.is_main_process:
        return
    asked, listing = command_line_request()
    if listing or pricing_only(asked):
        return
    found = {}
    for model, spec in judged.items():
        reason = judged_misfit(spec, PATHS.checkpoint_fits())
        if reason is not None:
            series = SERIES_CHECKPOINTS.get(model)
            step = next(checkpoint.step for checkpoint in series.checkpoints if checkpoint.model == model) if series else None
            found.setdefault((series.name if series else model, spec.arch), []).append((step, spec.weights, reason))
    for (owner, arch), misfits in found.items():
        note_missing(MISFITS, owner, with_source(refusal_line(owner, arch, misfits), ["models", owner], CONFIG_SOURCES))


note_misfits()


# What each model was pretrained on, and its exposure (imagenet_cog.models.pretraining): the entry's
# pretraining_data, else its release's row of the shipped table. A name the datasets' catalogue lacks
# stops the run here, before any job; the results commands that rank or compare models take each
# model's resolved (pretraining_option), and the run's first screen names those that break the
# benchmark's premise (note_pretraining).
from imagenet_cog.models.pretraining import (
    DATASETS_TABLE,
    RELEASES_TABLE,
    Catalogue,
    PretrainingDataError,
    premise_note,
    pretraining_json,
)

try:
    PRETRAINING_CATALOGUE = Catalogue.read(shipped_file(str(DATASETS_TABLE)), shipped_file(str(RELEASES_TABLE)))
except PretrainingDataError as error:
    raise WorkflowError(str(error)) from None
PRETRAINING = {}
for configured_model in MODELS:
    try:
        PRETRAINING[configured_model] = PRETRAINING_CATALOGUE.of_entry(
            configured_model,
            config["models"][configured_model],
            model_spec(configured_model, check_checkpoint=False).is_checkpoint(),
        )
    except PretrainingDataError as error:
        raise WorkflowError(with_source(str(error), ["models", configured_model], CONFIG_SOURCES)) from None


def pretraining_option(with_published=False):
    """--pretraining of the leaderboard, which shows what each model was pretrained on: the result
    models' datasets and exposure, and with ``with_published`` the paper's published models'."""
    published = {name: PRETRAINING_CATALOGUE.of_paper(name) for name in PRETRAINING_CATALOGUE.papers} if with_published else None
    return shlex.quote(pretraining_json({model: PRETRAINING[model] for model in result_models()}, published))


def exposures_option(models=None):
    """--exposures of the commands that show each model's exposure class, not its datasets (the tables
    and figures that compare models: imagenet_cog.results.exposure): model -> class of ``models``
    (default: the result models), so that a declaration changing a model's datasets but not its
    class reruns none of them."""
    models = result_models() if models is None else models
    return shlex.quote(json.dumps({model: PRETRAINING[model].exposure for model in models}, sort_keys=True))


def figure_exposures(models=None):
    """--exposures of a job that only draws figures, which set apart the models pretrained beyond
    IN-1K: given where one of ``models`` (default: the result models) is, else left out, so that a
    run of none models keeps its figure jobs' commands and params, and so its figures."""
    models = result_models() if models is None else models
    return f" --exposures {exposures_option(models)}" if any(PRETRAINING[model].breaks_premise for model in models) else ""


def figure_exposures_params(models=None):
    """figure_exposures as a rule's params: {"exposures": ...} where it is given, else none."""
    option = figure_exposures(models)
    return {"exposures": option} if option else {}


def figure_exposures_placeholder(models=None):
    """figure_exposures in a rule's shell text, from its params (figure_exposures_params)."""
    return " {params.exposures}" if figure_exposures(models) else ""


def note_pretraining():
    """The run's start: the models pretrained beyond IN-1K, or that say nothing of it (a note, not a stop)."""
    note = premise_note(PRETRAINING)
    if note:
        print(note, file=sys.stderr, flush=True)
