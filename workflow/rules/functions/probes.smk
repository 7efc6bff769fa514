# Probes stage: what the rules of probes.smk use, besides common.smk's: its input
# functions, config checks and the stage's targets (kept apart from the rules, as
# snakemake --lint asks).

import functools
import re
from collections import namedtuple
from types import SimpleNamespace

from snakemake.exceptions import IncompleteCheckpointException

from imagenet_cog.plan.cost import Dataset, own_job_seconds, probe_run_seconds
from imagenet_cog.plan.rates import read_rates
from imagenet_cog.probes.kinds import KINDS, kind_of_result


def probe_results(models=None, datasets=None, shots=None, seeds=None, kinds=(naming.LINEAR,)):
    return [
        PATHS.probe_result(model, dataset, shot, seed, kind)
        for kind in kinds
        for model in (MODELS if models is None else models)
        for dataset in (datasets or DATASETS)
        for shot in (shots or SHOTS)
        for seed in (seeds or SEEDS)
    ]


# probe kinds ---------------------------------------------------------------------------

# each configured kind's result folders (pca stands for one kind per d, pca-<d>)
PROBE_KINDS = [name for kind in config["probes"]["kinds"] for name in KINDS[kind].result_names(config["probes"])]
if naming.LINEAR not in PROBE_KINDS:
    raise WorkflowError(
        f"config.yaml: probes.kinds is {PROBE_KINDS} without 'linear'; the linear probe is the "
        f"reference the other kinds' tables are relative to: add 'linear' to probes.kinds."
    )
# what a configured kind's module finds wrong with its settings, said before any job runs
for kind in config["probes"]["kinds"]:
    problem = KINDS[kind].settings_problem(config["probes"]) if KINDS[kind].settings_problem else None
    if problem:
        raise WorkflowError(f"config.yaml: {problem}")
# The kinds off the summary's grid (their module's off_grid: zero-shot), configured: each one's
# rules, input functions and targets are in its rule file (probes.smk includes it), which adds
# what it makes to OFF_GRID_TARGETS.
OFF_GRID_KINDS = [KINDS[kind] for kind in config["probes"]["kinds"] if KINDS[kind].off_grid]
OffGridTargets = namedtuple("OffGridTargets", ["results", "tables"])
OFF_GRID_TARGETS = []
PROBE_KINDS = [name for name in PROBE_KINDS if not kind_of_result(name).off_grid]
# the kinds of probe_kind, on their own shots and seeds; the others run on the linear probe's grid
OTHER_KINDS = [name for name in PROBE_KINDS if not kind_of_result(name).linear_grid]
LINEAR_GRID_KINDS = [name for name in PROBE_KINDS if kind_of_result(name).linear_grid]
# The models each kind probes: the linear probe every result model, the others those of
# probes.kind_models.<kind> (pca-<d>: pca's), checked before any job.
KIND_MODELS = {
    name: result_models() if name == naming.LINEAR else stage_models(f"probes.kind_models.{kind_of_result(name).name}")
    for name in PROBE_KINDS
}
OTHER_KINDS_SHOTS = [str(shots) for shots in (config["probes"]["other_kinds_shots"] or SHOTS)]
OTHER_KINDS_SEEDS = [str(seed) for seed in (config["probes"]["other_kinds_seeds"] or SEEDS)]
# The search settings every probe kind shares, and the linear probe's ranges as the command
# reads them (pca-<d> probes use them too): the linear kind's allow-list (its module in
# imagenet_cog/probes/kinds), so that a probes.* key a later version adds reruns nothing it
# does not shape. Seeds and shots are wildcards: a change of one of them reruns no probe.
SHARED_PROBE_SETTINGS = {key: value for key, value in config["probes"].items() if key in KINDS[naming.LINEAR].settings}
LINEAR_LR_RANGE = " ".join(str(value) for value in config["probes"]["lr_range"])
LINEAR_WD_RANGE = " ".join(str(value) for value in config["probes"]["wd_range"])
if "seeds_together" in config["probes"]:
    raise WorkflowError(
        "config.yaml: probes.seeds_together was replaced by probes.group: write 'group: shots' for "
        "'seeds_together: true' (one job per model, dataset and N running every seed), 'group: seed' for false, "
        "or 'group: dataset' for one resident job per model and dataset running every N and seed."
    )
PROBE_GROUP = config["probes"]["group"]
# On a GPU the host only feeds a probe job; on a CPU the matrix products use every thread given.
PROBE_THREADS = 8 if config["probes"]["device"] == "cpu" else 1
PROBE_GPUS = 0 if config["probes"]["device"] == "cpu" else 1


# The probe command's options -------------------------------------------------------------
#
# Every probe rule runs the `probe` command (imagenet_cog/probes/probe.py), its options built
# here from config once, by probe_command. The shell text it returns is what Snakemake's
# `code` rerun trigger compares with the text recorded for every finished job, verbatim
# (snakemake/persistence: a rule's unformatted shell command), and the params its
# placeholders name are what the `params` trigger compares: changing either reruns every
# probe of the rule, so options appear in the text only where a setting needs them
# (linear_step_options) and the params keep their names (docs/probes.md, "What reruns a probe").


def two_stage_option():
    """probes.two_stage, a protocol deviation: on the command only when set, so that setting it
    reruns the linear probes and the commands of the paper's protocol stay as they were."""
    two_stage = config["probes"]["two_stage"]
    if two_stage is None:
        return []
    if not (two_stage["short_epochs"] < config["probes"]["epochs"] and two_stage["finalists"] <= config["probes"]["trials"]):
        raise WorkflowError(
            f"config.yaml: probes.two_stage {two_stage} needs short_epochs < probes.epochs "
            f"({config['probes']['epochs']}) and finalists <= probes.trials ({config['probes']['trials']})."
        )
    return [("--two-stage", f"{two_stage['short_epochs']} {two_stage['finalists']}")]


def linear_step_options():
    """probes.fused and probes.two_stage reach the linear probe's command only when set (auto
    and null are the command's defaults), so the commands of runs made before they existed
    stay as they were."""
    fused = config["probes"]["fused"]
    return ([] if fused == "auto" else [("--fused", fused)]) + two_stage_option()


def probe_options(seeds="{wildcards.seed}", shots="{wildcards.shots}", kind=False):
    """The probe command's options as (flag, value) pairs (flag None: the value holds its own
    flags), in the order of the recorded commands. The linear rules (probe, probe_seeds,
    probe_resident) make one run, ``seeds`` of one N or ``seeds`` of each of ``shots``, their
    search settings in ``params.probes`` and ranges in ``params.lr_range``/``wd_range``;
    probe_kind (``kind``) reads its kind's ranges and network from ``params.probes`` and the
    pca-<d> kinds' components file from ``params.pca``."""
    ranges = "{params.probes[lr_range]}", "{params.probes[wd_range]}"
    return [
        ("--train", "{input.train}"),
        ("--test", "{input.test}"),
        ("--output", "{output}"),
        ("--study", "{params.study}"),
        ("--model", "{wildcards.model}"),
        ("--dataset", "{wildcards.dataset}"),
        *([(None, "{params.probes[kind_arguments]}")] if kind else []),
        ("--shots", shots),
        ("--seed", seeds),
        *([] if kind else linear_step_options()),
        ("--trials", "{params.probes[trials]}"),
        ("--epochs", "{params.probes[epochs]}"),
        ("--batch-size", "{params.probes[batch_size]}"),
        ("--momentum", "{params.probes[momentum]}"),
        ("--lr-range", ranges[0] if kind else "{params.lr_range}"),
        ("--wd-range", ranges[1] if kind else "{params.wd_range}"),
        *([(None, "{params.pca}")] if kind else []),
        ("--val-fraction", "{params.probes[val_fraction]}"),
        ("--trials-per-batch", "{params.probes[trials_per_batch]}"),
        ("--device", "{params.probes[device]}"),
        ("--precision", "{params.probes[precision]}"),
        ("--threads", "{threads}"),
    ]


def probe_command(seeds="{wildcards.seed}", shots="{wildcards.shots}", kind=False):
    """The shell command of a probe rule: probe_options joined, the log redirected."""
    options = probe_options(seeds=seeds, shots=shots, kind=kind)
    joined = "".join(f" {flag} {value}" if flag else f" {value}" for flag, value in options)
    return f"{python_command('probe')}{joined} > {{log}} 2>&1"


# The linear probe's job shapes (probes.group) ----------------------------------------------
#
# `probe` makes one run (model, dataset, N, seed) and always exists: the level sets and the
# variants are probed run by run. probes.group: shots adds `probe_seeds` (every seed of one N
# in one job) and probes.group: dataset `probe_resident` (every N and seed of a dataset in one
# job) for IN-1K and the levels, chosen over `probe` by ruleorder. The three share their
# inputs, resources and settings; they differ in the runs a job makes (its outputs, log,
# --shots and --seed).
LINEAR_PROBE_INPUT = {
    "train": PATHS.features("{model}", "{dataset}", "train"),
    "test": PATHS.features("{model}", "{dataset}", "test"),
}


def linear_probe_runs(group, wildcards):
    """(N, seed) of each run a job of ``group`` (seed, shots, dataset) makes, in output order."""
    if group == "seed":
        return [(wildcards.shots, wildcards.seed)]
    shots = [wildcards.shots] if group == "shots" else SHOTS
    return [(shot, seed) for shot in shots for seed in SEEDS]


def linear_probe_params(group):
    """The linear probe params of ``group`` (seed, shots, dataset): each run's study journal, the seeds
    and N the command is given, and the settings (params.probes, lr_range, wd_range: this
    rule's settings in the sense of docs/architecture.md, "Staleness-only params"). A run with
    series takes each model's settings (series_probe_settings: the same dict for every other
    model, so that no finished probe reruns)."""
    params = {
        "study": lambda wildcards: " ".join(
            PATHS.probe_study(wildcards.model, wildcards.dataset, shot, seed)
            for shot, seed in linear_probe_runs(group, wildcards)
        ),
        "probes": (lambda wildcards: series_probe_settings(wildcards.model)) if SERIES_REDUCED else SHARED_PROBE_SETTINGS,
        "lr_range": LINEAR_LR_RANGE,
        "wd_range": LINEAR_WD_RANGE,
    }
    if group != "seed":
        params["seeds"] = " ".join(SEEDS)
    if group == "dataset":
        params["shots"] = " ".join(SHOTS)
    return params


def probe_resources(runs=1, runtime=None):
    """A probe job's resources: its device, host memory and a wall-clock limit for schedulers,
    ``runs`` times that of one run (``runtime``: one run's, default the linear probe's)."""
    one_run = runtime or probe_runtime_minutes
    return {
        "gpu": PROBE_GPUS,
        "mem_mb": probe_mem_mb,
        "runtime": one_run if runs == 1 else lambda wildcards: runs * one_run(wildcards),
    }


def kind_probe_settings(kind):
    """The search settings of a kind other than linear: the shared ones, with the kind's
    learning-rate and weight-decay ranges and --kind options (its module's command_settings)."""
    return {**SHARED_PROBE_SETTINGS, **kind_of_result(kind).command_settings(config["probes"], kind)}


# The shell command of every kind's own job, one text for every such rule: a kind's command and
# options are its rule's params, bound when the rule is made. A shell expression naming the loop's
# kind (probes.smk) would be evaluated again when a job runs, and name the last kind.
OWN_JOB_SHELL = (
    python_command("{params.command}") + " --train {input.train} --test {input.test} --output {output} --model {wildcards.model}"
    " --dataset {wildcards.dataset} --shots {params.shots} --seed {params.seeds}{params.options}"
    " --device {params.device} --threads {threads} > {log} 2>&1"
)


def own_job_params(kind):
    """A kind's own job's params: its command, and its settings as the command's options
    (changing one reruns its jobs and nothing else), and the grid and device it runs on."""
    return {
        "command": kind.own_job.command,
        "options": kind.own_job.options(config["probes"]),
        "shots": " ".join(SHOTS),
        "seeds": " ".join(SEEDS),
        "device": config["probes"]["device"],
    }


# The probe jobs' wall-clock limits (probe, probe_kind, probe_<kind>: probe_knn) are the plan's cost model's
# price of the job. The shipped H100 rates price them, not plan.rates: a job's limit does not
# move with the device the plan is for, and these hold every kind's rates, which a rates file
# may lack.
LIMIT_RATES = read_rates(shipped_file("resources/rates/h100.yaml")).values
# A limit is not an estimate: a device a quarter as fast as the rates' still finishes in time.
LIMIT_MARGIN = 4


def priced_limit_minutes(wildcards, job_seconds, validation_fraction=0.0):
    """A wall-clock limit for schedulers: the plan's cost model prices the job (``job_seconds``,
    plan/cost.py's price of one job) at LIMIT_RATES, times LIMIT_MARGIN, above a start-up
    allowance. Each dataset is taken to have the levels' concepts_per_level classes (the
    few-shot training sets' size); a balanced dataset holds at most its default dataset's rows."""
    try:
        train, test = (split_row_count(naming.balanced_source(wildcards.dataset), split) for split in SPLITS)
    except IncompleteCheckpointException:
        return 30  # dry runs before the split tables exist (see probe_feature_mb)
    validation = int(validation_fraction * train)
    data = Dataset(wildcards.dataset, train, test, config["levels"]["concepts_per_level"], validation)
    seconds = job_seconds(data, model_feature_dim(wildcards.model), config["probes"], config["features"]["dtype"], LIMIT_RATES)
    return int(30 + LIMIT_MARGIN * seconds / 60)


def own_job_runtime_minutes(kind):
    """The limit of a job of ``kind`` (a kind with jobs of its own): every N and seed of a
    dataset, nothing held out."""
    return lambda wildcards: priced_limit_minutes(wildcards, functools.partial(own_job_seconds, kind))


def probe_kind_inputs(wildcards):
    inputs = {
        "train": PATHS.features(wildcards.model, wildcards.dataset, "train"),
        "test": PATHS.features(wildcards.model, wildcards.dataset, "test"),
    }
    if kind_of_result(wildcards.kind).projected:
        inputs["components"] = PATHS.pca_components(wildcards.model, wildcards.dataset)
    return inputs


def off_grid_results():
    """The results of the kinds off the grid (their probes)."""
    return [path for targets in OFF_GRID_TARGETS for path in targets.results()]


def off_grid_tables():
    """The tables and figures of the kinds off the grid."""
    return [path for targets in OFF_GRID_TARGETS for path in targets.tables()]


def kind_probe_results(kind, models=None):
    """A kind's probes of its grid (the linear probe's shots and seeds, or the other kinds'),
    for the models the kind probes (KIND_MODELS) among ``models`` (None: all)."""
    linear_grid = kind in LINEAR_GRID_KINDS
    return probe_results(
        models=[model for model in KIND_MODELS[kind] if models is None or model in models],
        shots=SHOTS if linear_grid else OTHER_KINDS_SHOTS,
        seeds=SEEDS if linear_grid else OTHER_KINDS_SEEDS,
        kinds=(kind,),
    )


def all_probe_results(models=None):
    """The linear (and k-NN) probes of the whole grid and the other kinds' on their own shots
    and seeds, each kind for its models."""
    return [path for kind in [*LINEAR_GRID_KINDS, *OTHER_KINDS] for path in kind_probe_results(kind, models)]


def level_set_probe_results(models=None):
    """The level sets' probes, for the models of level_sets.models among ``models`` (None: all)."""
    return probe_results(
        models=[model for model in LEVEL_SET_MODELS if models is None or model in models],
        datasets=LEVEL_SET_DATASETS,
        shots=LEVEL_SET_SHOTS,
        seeds=LEVEL_SET_SEEDS,
    )


def probes_targets():
    """What a full run makes of this stage (rule all gathers each stage's list), the linear
    and other kinds' probes of the whole grid and the level sets' probes (the variants'
    probes are in variants_targets), and the series checkpoints' probes."""
    return all_probe_results(models=result_models()) + level_set_probe_results(models=result_models()) + series_probe_results()


# series checkpoints (models.<name>.checkpoints, common/checkpoint_series.smk's SERIES) ------------------------
#
# A checkpoint of the series protocol alone (SERIES_REDUCED) is probed on the run's datasets:
# the linear probe at series.shots on the first series.seeds of probes.seeds with at most
# series.trials trials, each run a `probe` job (the grouped rules make the run's whole grid: their
# models are the others, GRID_MODEL_PATTERN), and the kinds with jobs of their own (series.knn: the
# k-NN) on the run's grid, which their one job per dataset scores at once.
GRID_MODEL_PATTERN = "|".join(re.escape(model) for model in MODELS if model not in SERIES_REDUCED) or "(?!)"


def series_probe_settings(model):
    """A model's linear probe settings: a series checkpoint's with its series' trials."""
    if model not in SERIES_REDUCED:
        return SHARED_PROBE_SETTINGS
    return {**SHARED_PROBE_SETTINGS, "trials": SERIES_REDUCED[model].protocol.probe_trials(config["probes"]["trials"])}


def series_probe_results():
    """Every series checkpoint's probes of the series protocol; a step of the full protocol's
    too (the series' N beside the run's, with the run's trials), so that every step of the
    series has the series' numbers."""
    paths = []
    for model, series in SERIES_CHECKPOINTS.items():
        protocol = series.protocol
        paths += probe_results(models=[model], shots=list(protocol.shots), seeds=protocol.probe_seeds(SEEDS))
        if protocol.knn:
            paths += probe_results(models=[model], kinds=[kind.name for kind in OWN_JOB_KINDS])
    return paths


def check_series_trials():
    """probes.two_stage's finalists are among each search's trials, a series' fewer ones too."""
    two_stage = config["probes"]["two_stage"]
    for series in SERIES.values():
        trials = series.protocol.probe_trials(config["probes"]["trials"])
        if two_stage is not None and two_stage["finalists"] > trials:
            raise WorkflowError(
                f"config.yaml: probes.two_stage keeps {two_stage['finalists']} finalists, more than the {trials} "
                f"trials of series {series.name}; raise series.trials or lower the finalists."
            )


check_series_trials()


# job sizes -------------------------------------------------------------------------------

# Feature files present their shards as HDF5 virtual datasets, so their own size says
# nothing; the job sizes below assume float32 features of the registry's (or timm's) width per
# image of the dataset's split lists (a custom factory's width is unknown until it runs:
# ResNet-50's 2048 is assumed; raise it with --set-resources if yours is wider).
ASSUMED_CUSTOM_FEATURE_DIM = 2048


@functools.cache
def model_feature_dim(model):
    from imagenet_cog.models.registry import planned_feature_dim

    return planned_feature_dim(model_spec(model, check_checkpoint=False)) or ASSUMED_CUSTOM_FEATURE_DIM


def probe_feature_mb(wildcards):
    try:
        # a balanced dataset holds at most its default dataset's rows
        rows = sum(split_row_count(naming.balanced_source(wildcards.dataset), split) for split in SPLITS)
    except IncompleteCheckpointException:
        # Before the split tables exist (a dry run of a fresh copy) Snakemake 9 substitutes
        # a bare 0 for the resource and crashes on it; real runs size probes only once the
        # split tables exist, so this size is shown in dry runs only.
        return 0.0
    return rows * model_feature_dim(wildcards.model) * 4 / 2**20


def probe_mem_mb(wildcards):
    """The host holds the features read from disk; on a CPU also the normalised copies."""
    copies = 1 if config["probes"]["device"] != "cpu" else 3
    return int(2000 + copies * probe_feature_mb(wildcards))


# Checked before any job: what a configured kind's settings cannot do with a model's features
# (its module's width_problem: a pca d wider than the features). A model noted among what the
# run lacks (a transformers release not there) is refused with it, its width unknown.
for kind in config["probes"]["kinds"]:
    for model in [model for model in MODELS if CONFIGURED_SPECS[model] is not None] if KINDS[kind].width_problem else []:
        problem = KINDS[kind].width_problem(config["probes"], model, model_feature_dim(model))
        if problem:
            raise WorkflowError(f"config.yaml: {problem}")


def probe_runtime_minutes(wildcards):
    """The limit of one linear probe run, priced on all the training images (the largest N; a
    limit, not an estimate). CPU jobs on real data need far longer (set probes.device: cpu and
    raise it with --set-resources)."""
    return priced_limit_minutes(wildcards, probe_run_seconds, config["probes"]["val_fraction"])


def probe_kind_runtime_minutes(wildcards):
    """The linear probe's limit, its time beyond the start-up allowance scaled by the kind's
    work per sample against the linear probe's (its module's work_factor: the MLP kinds')."""
    minutes = probe_runtime_minutes(wildcards)
    work_factor = kind_of_result(wildcards.kind).work_factor
    if work_factor is None:
        return minutes
    factor = work_factor(model_feature_dim(wildcards.model), config["levels"]["concepts_per_level"], config["probes"])
    return int(30 + (minutes - 30) * factor)
