# What every stage's rules share: the configuration (files shipped beside the Snakefile,
# checks that span stages), the global lists, the results layout (PATHS), the wildcard
# constraints (imagenet_cog.core.naming, the one place dataset and kind names are made) and
# the jobs' environment. Each stage's input functions, checks and targets are in
# functions/<stage>.smk, which its rule file includes; the Snakefile includes the stages in
# order, so a stage may use what the stages before it define (as its rules read their
# outputs), never what a later one does.

import datetime
import functools
import json
import os
import re
import shlex
import shutil
import sys

from imagenet_cog.core import naming
from imagenet_cog.core.config_check import with_source
from imagenet_cog.core.layout import Layout


def shipped_file(path):
    """A relative path to a file this workflow ships (resources/...) is read beside the
    Snakefile when the working directory holds no file of that name."""
    if os.path.isabs(path) or os.path.exists(path):
        return path
    beside = os.path.join(workflow.basedir, path)
    return beside if os.path.exists(beside) else path


for section, key in (
    ("concepts", "image_counts"),
    ("concepts", "discarded_wnids"),
    ("results", "published_top1"),
    ("plan", "rates"),
):
    config[section][key] = shipped_file(config[section][key])


# Every output, log and benchmark of this run, under its own folder (results_dir).
PATHS = Layout(config["results_dir"].rstrip("/"))
# What this run lacks before its jobs can run (an image root, a checkpoint, a published pickle,
# a names table, word vectors): each stage notes its own (note_lack) while the Snakefile is read,
# and the Snakefile refuses them all in one message at its end (refuse_what_the_run_lacks), in
# a dry run as in a real one, before any job or input function meets them one job at a time.
# `snakemake plan` and `snakemake needed_synsets` price a run before its downloads: let through.
RUN_LACKS = {}
PRICING_RULES = ("plan", "needed_synsets")
# the kinds refused also for a listing or named targets: every job of a model reads its checkpoint
MISFITS = "checkpoints that do not fit their arch"
CHECKPOINT_LACKS = ("checkpoints", MISFITS)


def note_lack(kind, name, check, *arguments):
    """``check(*arguments)``, its WorkflowError noted as something the run lacks (``kind``:
    "image roots", "checkpoints", ...; ``name``: which one) rather than raised now."""
    try:
        return check(*arguments)
    except WorkflowError as error:
        note_missing(kind, name, str(error))


def note_missing(kind, name, message):
    RUN_LACKS.setdefault(kind, []).append((name, message))


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

MODELS = list(config["models"])
DATASETS = list(config["datasets"])
LEVEL_NAMES = naming.level_names(config["levels"]["num_levels"])
SPLITS = ["train", "test"]
SHOTS = [str(shots) for shots in config["probes"]["shots"]]
SEEDS = [str(seed) for seed in config["probes"]["seeds"]]
# One environment for every rule (--sdm conda); the package itself comes from the checkout.
CONDA_ENVIRONMENT = "../../envs/imagenet-cog.yaml"

for dataset in DATASETS:
    if dataset != naming.IN1K and dataset not in LEVEL_NAMES:
        raise WorkflowError(
            with_source(
                f"config.yaml: dataset '{dataset}' is not IN-1K or one of the "
                f"{len(LEVEL_NAMES)} levels ({', '.join(LEVEL_NAMES)}); fix 'datasets' or 'levels.num_levels'.",
                ["datasets"],
                CONFIG_SOURCES,
            )
        )


# IN-1K-blurred (supp. E, variants.smk): an optional dataset beside IN-1K, its own image
# root, split (splits.smk) and extracted (features.smk) like IN-1K
BLURRED_SETTINGS = config["in1k_blurred"]
BLURRED_DATASETS = [naming.IN1K_BLURRED] if BLURRED_SETTINGS["enabled"] else []
if BLURRED_DATASETS and naming.IN1K not in DATASETS:
    raise WorkflowError(
        "config.yaml: in1k_blurred.enabled compares IN-1K-blurred with IN-1K, but 'datasets' has no in1k; "
        "add it or set in1k_blurred.enabled: false."
    )


wildcard_constraints:
    model="|".join(re.escape(model) for model in MODELS),
    dataset=f"{naming.EXTRACTED_DATASET}|{naming.VIEW_DATASET}|{naming.BALANCED_DATASET}",
    level_set=naming.LEVEL_SET_PATTERN,
    draw=naming.DRAW_PATTERN,
    level=naming.LEVEL_PATTERN,
    split=naming.SPLIT_PATTERN,
    shard=naming.SHARD_PATTERN,
    shots=naming.SHOTS_PATTERN,
    seed=naming.SEED_PATTERN,
    kind=naming.KIND_PATTERN,


# Jobs import the package from this checkout (so jobs on cluster nodes and in conda
# environments run the same code as the Snakefile). Set in the environment jobs inherit,
# not in their shell commands: a path there would make Snakemake see changed code, and
# re-run everything, whenever the project folder is moved or copied.
os.environ["PYTHONPATH"] = os.pathsep.join(
    path for path in (os.path.join(workflow.basedir, "workflow"), os.environ.get("PYTHONPATH")) if path
)


# How many images a job may leave out undecoded: in the environment, not the command, so that
# a limit raised after a failure re-runs no finished job (imagenet_cog.core.undecodable).
from imagenet_cog.core.undecodable import LIMIT_VARIABLE

os.environ[LIMIT_VARIABLE] = str(config["data"]["max_undecodable_fraction"])


# Where a job that fails on purpose (a damaged file, a full disk) writes its reason, which the
# run's screen shows once at its end (imagenet_cog.core.failures; onstart and onerror below).
from imagenet_cog.core.failures import REASONS_VARIABLE

os.environ[REASONS_VARIABLE] = os.path.abspath(PATHS.failure_reasons())


# Declared, so that executors which start jobs in a fresh environment (SLURM, remote
# storage) pass them on to them.
envvars:
    "PYTHONPATH",
    LIMIT_VARIABLE,
    REASONS_VARIABLE,
    SERIES_WEIGHTS_VARIABLE,


def command_line_request():
    """The targets (rules or files) the snakemake command names, and whether it only lists or
    draws the workflow (--list-rules, --lint, --rulegraph, ...): Snakemake tells the workflow
    only once the Snakefile is read, too late for one message before any job, so they are read
    from its command line with its own parser."""
    import sys

    from snakemake.cli import get_argument_parser
    from imagenet_cog.core.snakemake_insides import LISTING_OPTIONS

    known, _ = get_argument_parser().parse_known_args(sys.argv[1:])
    listing = any(getattr(known, option, None) for option in LISTING_OPTIONS)
    return set(known.targets), listing


def pricing_only(asked):
    """Whether the targets asked for are the pricing rules' alone."""
    return bool(asked) and asked <= {*PRICING_RULES, PATHS.needed_synsets(), PATHS.needed_synset_tars()}


def refuse_what_the_run_lacks():
    """The whole run is refused for all it lacks; a listing, or named targets (the levels of a
    run whose images are not there yet), only for missing checkpoints (and those that do not fit
    their arch), which every job of a model reads and a listing of the paper's models must name."""
    from imagenet_cog.core.config_check import lacking_message

    if not RUN_LACKS or not workflow.is_main_process:
        return
    asked, listing = command_line_request()
    if pricing_only(asked):
        return
    lacks = (
        RUN_LACKS if not (asked or listing) else {kind: found for kind, found in RUN_LACKS.items() if kind in CHECKPOINT_LACKS}
    )
    if lacks:
        raise WorkflowError(lacking_message(lacks, " and ".join(f"`snakemake {rule}`" for rule in PRICING_RULES)))


def python_command(command):
    """The shell prefix of a rule running one of the package's commands."""
    return f"python -m imagenet_cog {command}"


# This run's warm-start server (imagenet_cog/warm_start.py), when it has one.
WARM_START = {}


def jobs_are_local_processes():
    """Whether this run's jobs are processes of this machine (not a cluster's, not a job's own run)."""
    return workflow.local_exec and not (workflow.remote_exec or workflow.subprocess_exec)


# The server's imports (torch, pandas, seaborn...: ~5 CPU-seconds) cost more than the imports of
# the two jobs of a run that small: under auto, such a run starts its jobs cold.
WARM_START_MIN_JOBS = 3


def warm_start_wanted():
    """warm_start (schema): only where jobs are processes of this machine; auto means a demo run
    of a few jobs or more, whose jobs import for longer than they work (real jobs work for minutes)."""
    setting = config["warm_start"]
    if not jobs_are_local_processes() or setting == "never":
        return False
    # the run's jobs, known at onstart (jobs a checkpoint adds come on top)
    return setting == "always" or (config["mode"] == "demo" and len(workflow.dag) >= WARM_START_MIN_JOBS)


def drop_the_default_job_rate_limit():
    """A local run goes without Snakemake's default job rate limit: with it, every scheduling round
    while jobs wait for cores schedules another one a second later, and each job's end starts such
    a chain, so the demo's 380 jobs took 25,699 rounds (18 s of CPU in job selection alone; the
    limiter's known fault, snakemake/snakemake PR 3744). Its cores limit a local run's jobs; a
    cluster run, or a limit set on the command line, keeps it: it paces submissions."""
    from imagenet_cog.core import snakemake_insides

    if jobs_are_local_processes():
        snakemake_insides.drop_the_default_job_rate_limit(workflow.scheduler)


def start_warm_start():
    from imagenet_cog.warm_start import TABLES_AND_FIGURES_PRELOAD, start_server
    from imagenet_cog.models.registry import is_hf_arch, is_open_clip_arch, is_timm_arch

    if not warm_start_wanted():
        return
    python = shutil.which("python")
    if python is None:
        return
    archs = [spec["arch"] for spec in config["models"].values()]
    uses_open_clip = any(is_open_clip_arch(arch) for arch in archs)
    # open_clip builds its image towers with timm
    uses_timm = uses_open_clip or any(is_timm_arch(arch) for arch in archs)
    uses_transformers = any(is_hf_arch(arch) for arch in archs)
    preload = [*TABLES_AND_FIGURES_PRELOAD] + (["timm"] if uses_timm else []) + (["open_clip"] if uses_open_clip else [])
    preload += ["transformers"] if uses_transformers else []
    # one log a run, as Snakemake's own: a run leaves the logs of the runs before it untouched
    log = PATHS.log(f"warm_start/{datetime.datetime.now():%Y-%m-%dT%H%M%S.%f}.log")
    WARM_START["server"] = start_server(python, log, preload)
    WARM_START["log"] = log


def forget_failure_reasons():
    """The run's start: the reasons of an earlier run's failed jobs are not this run's; spare
    reason files wait for a disk that fills."""
    from imagenet_cog.core.failures import prepare_reasons

    prepare_reasons(PATHS.failure_reasons())


def show_failure_reasons():
    """The run's end after a failure: why each job failed on purpose, each reason once."""
    from imagenet_cog.core.failures import reasons_report

    told = reasons_report(PATHS.failure_reasons())
    if told:
        print(told, file=sys.stderr, flush=True)


def stop_warm_start():
    if "server" in WARM_START:
        from imagenet_cog.warm_start import stop_server

        stop_server(WARM_START.pop("server"), WARM_START.pop("log"))


def result_models():
    """The models the probes target, tables and figures cover: results.models, else all but
    the series checkpoints of the series protocol alone (SERIES_REDUCED)."""
    selected = config["results"]["models"]
    if selected is None:
        return [model for model in MODELS if model not in SERIES_REDUCED]
    reduced = [model for model in selected if model in SERIES_REDUCED]
    if reduced:
        raise WorkflowError(
            f"results.models names {', '.join(reduced)}, a series checkpoint of the series protocol; name its step in "
            "series.full_protocol_steps (or the series' own) to give it the full protocol."
        )
    return defined_models("results.models", selected)


def defined_models(key, selected):
    """``selected``, the list at config key ``key``, refused if it names a model 'models' lacks."""
    unknown = [model for model in selected if model not in config["models"]]
    if unknown:
        raise WorkflowError(
            f"{key} names {', '.join(unknown)}, which 'models' does not define "
            f"({', '.join(MODELS)}); fix the list or add those models."
        )
    return list(selected)


def config_at(setting):
    """The config section at a dotted path ("analyses.kmeans")."""
    return functools.reduce(lambda section, key: section[key], setting.split("."), config)


def stage_models(setting, needs_text_tower=False):
    """The models a stage runs for: the ``models`` list of the config section at ``setting``
    (a dotted path such as "level_sets" or "probes.zeroshot"), or the list at ``setting``
    itself ("probes.kind_models.knn"), null meaning every result model.
    A stage that reads a text tower (zero-shot, describability by a model) takes only the
    models that have one: by default those among the result models, while a list naming
    another model is refused, so that a stage never silently runs for fewer models than named."""
    from imagenet_cog.models.registry import has_text_tower

    section = config_at(setting)
    key = f"{setting}.models" if isinstance(section, dict) else setting
    selected = section.get("models") if isinstance(section, dict) else section
    if selected is None:
        return [model for model in result_models() if not needs_text_tower or has_text_tower(config["models"][model])]
    selected = defined_models(key, selected)
    if needs_text_tower:
        textless = [model for model in selected if not has_text_tower(config["models"][model])]
        if textless:
            raise WorkflowError(
                f"{key} names {', '.join(textless)}, which has no text tower in its image features' "
                "space (an open_clip/<name> arch with image_features: embedding); take it out of the list."
            )
    return selected


# the models of IN-1K-blurred (in1k_blurred.models): extracted by the features stage and
# probed by the variants stage
BLURRED_MODELS = stage_models(setting="in1k_blurred") if BLURRED_DATASETS else []


# A rule's outputs in the report (snakemake --report): captions are files of workflow/report/.
REPORT_CAPTIONS = os.path.join(workflow.basedir, "workflow", "report")


def report_output(path, caption, category, subcategory=None, labels=None):
    """``path`` registered for the report with its caption file (named relative to the rule
    file being read, as Snakemake resolves it), category, subcategory and labels."""
    rule_folder = workflow.current_basedir.get_path_or_uri(secret_free=False)
    caption_file = os.path.relpath(os.path.join(REPORT_CAPTIONS, caption), rule_folder)
    return report(path, caption=caption_file, category=category, subcategory=subcategory, labels=labels)


def tidy_report(path, caption, table, subcategory):
    """A report entry for a table other than the paper's tables (results, zero-shot)."""
    return report_output(
        path,
        caption=caption,
        category="Tables",
        subcategory=subcategory,
        labels={"table": table, "dataset": "all"},
    )


def figure_report(name, caption):
    return report_output(
        PATHS.figure(name, "png"),
        caption=caption,
        category="Figures",
        labels={"figure": name},
    )


def results_root(wildcards, output):
    """The results folder of a job writing tables or figures, from its first output (<root>/tables/.. or
    <root>/figures/..): where its command writes the rest."""
    return os.path.dirname(os.path.dirname(output[0]))


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
    """--pretraining of the results commands: the result models' datasets and exposure, and with
    ``with_published`` the paper's published models' (the leaderboard ranks them by it too)."""
    published = {name: PRETRAINING_CATALOGUE.of_paper(name) for name in PRETRAINING_CATALOGUE.papers} if with_published else None
    return shlex.quote(pretraining_json({model: PRETRAINING[model] for model in result_models()}, published))


def note_pretraining():
    """The run's start: the models pretrained beyond IN-1K, or that say nothing of it (a note, not a stop)."""
    note = premise_note(PRETRAINING)
    if note:
        print(note, file=sys.stderr, flush=True)
