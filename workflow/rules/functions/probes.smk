# Probes stage: what the rules of probes.smk use, besides common.smk's: its input
# functions, config checks and the stage's targets (kept apart from the rules, as
# snakemake --lint asks).

import functools

from snakemake.exceptions import IncompleteCheckpointException


def probe_results(models=None, datasets=None, shots=None, seeds=None, kinds=("linear",)):
    return [
        PATHS.probe_result(model, dataset, shot, seed, kind)
        for kind in kinds
        for model in (models or MODELS)
        for dataset in (datasets or DATASETS)
        for shot in (shots or SHOTS)
        for seed in (seeds or SEEDS)
    ]


# probe kinds ---------------------------------------------------------------------------

PCA_DIMS = [int(dim) for dim in config["probes"]["pca_dims"]]
# pca in probes.kinds stands for one kind per d, pca-<d>
PROBE_KINDS = [
    name
    for kind in config["probes"]["kinds"]
    for name in ([naming.pca_kind(dim) for dim in PCA_DIMS] if kind == "pca" else [kind])
]
if naming.LINEAR not in PROBE_KINDS:
    raise WorkflowError(
        f"config.yaml: probes.kinds is {PROBE_KINDS} without 'linear'; the linear probe is the "
        f"reference the other kinds' tables are relative to: add 'linear' to probes.kinds."
    )
OTHER_KINDS = [kind for kind in PROBE_KINDS if kind != naming.LINEAR]
OTHER_KINDS_SHOTS = [str(shots) for shots in (config["probes"]["other_kinds_shots"] or SHOTS)]
OTHER_KINDS_SEEDS = [str(seed) for seed in (config["probes"]["other_kinds_seeds"] or SEEDS)]
# probes settings that are not the linear probe's (and so must not enter its params)
NOT_LINEAR_PROBE_SETTINGS = (
    "seeds",
    "shots",
    "kinds",
    "other_kinds_shots",
    "other_kinds_seeds",
    "mlp",
    "pca_dims",
    "group",
    "fused",
    "two_stage",
)
# The search settings every probe kind shares, and the linear probe's ranges as the command
# reads them (pca-<d> probes use them too); seeds and shots are wildcards, so a change of
# one of these reruns the probes, not a change of the seeds or shots.
SHARED_PROBE_SETTINGS = {key: value for key, value in config["probes"].items() if key not in NOT_LINEAR_PROBE_SETTINGS}
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


def two_stage_option():
    """probes.two_stage, a protocol deviation: on the command only when set, so that setting it
    reruns the linear probes and the commands of the paper's protocol stay as they were."""
    two_stage = config["probes"]["two_stage"]
    if two_stage is None:
        return ""
    if not (two_stage["short_epochs"] < config["probes"]["epochs"] and two_stage["finalists"] <= config["probes"]["trials"]):
        raise WorkflowError(
            f"config.yaml: probes.two_stage {two_stage} needs short_epochs < probes.epochs "
            f"({config['probes']['epochs']}) and finalists <= probes.trials ({config['probes']['trials']})."
        )
    return f" --two-stage {two_stage['short_epochs']} {two_stage['finalists']}"


def linear_step_options():
    """probes.fused and probes.two_stage reach the linear probe's command only when set (auto
    and null are the command's defaults), so the commands of runs made before they existed
    stay as they were."""
    fused = config["probes"]["fused"]
    return ("" if fused == "auto" else f" --fused {fused}") + two_stage_option()


def probe_command(seeds="{wildcards.seed}", kind=False, shots="{wildcards.shots}"):
    """The shell command of every probe rule: probe, probe_seeds and probe_resident (the
    linear probe, one seed or ``seeds`` of one job, one N or ``shots``:
    ``params.lr_range``/``wd_range``) and probe_kind (the other kinds: ``params.probes``
    holds their ranges and arguments, ``params.pca`` the components file of pca-<d>)."""
    ranges = (
        " --lr-range {params.probes[lr_range]} --wd-range {params.probes[wd_range]} {params.pca}"
        if kind
        else " --lr-range {params.lr_range} --wd-range {params.wd_range}"
    )
    return (
        python_command("probe") + " --train {input.train} --test {input.test} --output {output} --study {params.study}"
        " --model {wildcards.model} --dataset {wildcards.dataset}"
        + (" {params.probes[kind_arguments]}" if kind else "")
        + f" --shots {shots} --seed {seeds}"
        + ("" if kind else linear_step_options())
        + " --trials {params.probes[trials]} --epochs {params.probes[epochs]}"
        " --batch-size {params.probes[batch_size]} --momentum {params.probes[momentum]}"
        + ranges
        + " --val-fraction {params.probes[val_fraction]}"
        " --trials-per-batch {params.probes[trials_per_batch]}"
        " --device {params.probes[device]} --precision {params.probes[precision]}"
        " --threads {threads} > {log} 2>&1"
    )


def kind_probe_settings(kind):
    """The search settings of a kind other than linear: the shared ones, with the kind's
    learning-rate and weight-decay ranges and network; ranges as the command reads them.
    pca-<d> is the linear probe on projected features, with the linear probe's ranges."""
    dim = naming.pca_dim(kind)
    if dim is not None:
        return {
            **SHARED_PROBE_SETTINGS,
            "lr_range": LINEAR_LR_RANGE,
            "wd_range": LINEAR_WD_RANGE,
            "kind_arguments": f"--kind pca --pca-dim {dim}",
        }
    mlp = config["probes"]["mlp"]
    lr_range = mlp["lr_range"] if kind == "mlp" else mlp["noact_lr_range"]
    return {
        **SHARED_PROBE_SETTINGS,
        "lr_range": " ".join(str(value) for value in lr_range),
        "wd_range": " ".join(str(value) for value in mlp["wd_range"]),
        "kind_arguments": f"--kind {kind} --hidden-width {mlp['hidden_width']} --hidden-layers {mlp['hidden_layers']}",
    }


def probe_kind_inputs(wildcards):
    inputs = {
        "train": PATHS.features(wildcards.model, wildcards.dataset, "train"),
        "test": PATHS.features(wildcards.model, wildcards.dataset, "test"),
    }
    if naming.pca_dim(wildcards.kind) is not None:
        inputs["pca"] = PATHS.pca_components(wildcards.model, wildcards.dataset)
    return inputs


def all_probe_results(models=None):
    """The linear probes of the whole grid and the other kinds' on their own shots and seeds."""
    return probe_results(models=models) + probe_results(
        models=models, shots=OTHER_KINDS_SHOTS, seeds=OTHER_KINDS_SEEDS, kinds=OTHER_KINDS
    )


def level_set_probe_results(models=None):
    return probe_results(models=models, datasets=LEVEL_SET_DATASETS, shots=LEVEL_SET_SHOTS, seeds=LEVEL_SET_SEEDS)


def probes_targets():
    """What a full run makes of this stage (rule all gathers each stage's list), the linear
    and other kinds' probes of the whole grid and the level sets' probes (the variants'
    probes are in variants_targets)."""
    return all_probe_results(models=result_models()) + level_set_probe_results(models=result_models())


# job sizes -------------------------------------------------------------------------------

# Feature files present their shards as HDF5 virtual datasets, so their own size says
# nothing; the job sizes below assume float32 features of the registry's (or timm's) width per
# image of the dataset's split lists (a custom factory's width is unknown until it runs:
# ResNet-50's 2048 is assumed; raise it with --set-resources if yours is wider).
ASSUMED_CUSTOM_FEATURE_DIM = 2048


@functools.cache
def model_feature_dim(model):
    from imagenet_cog.models.registry import planned_feature_dim

    return planned_feature_dim(model_spec(model)) or ASSUMED_CUSTOM_FEATURE_DIM


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


# Checked before any job: a d wider than a model's features cannot be had (a d above a
# dataset's training samples is known only once its splits exist: the probe job says so).
for model in MODELS:
    too_wide = [dim for dim in PCA_DIMS if dim > model_feature_dim(model)] if "pca" in config["probes"]["kinds"] else []
    if too_wide:
        raise WorkflowError(
            f"config.yaml: probes.pca_dims has {too_wide}, more principal components than model "
            f"'{model}' has feature dimensions ({model_feature_dim(model)}); remove them from "
            f"probes.pca_dims or 'pca' from probes.kinds."
        )


def probe_runtime_minutes(wildcards):
    """A generous wall-clock limit for schedulers, in proportion to trials x epochs x data.

    Calibrated for a GPU at a conservative 20 GB of features per second of training; CPU jobs
    on real data need far longer (set probes.device: cpu and raise it with --set-resources).
    """
    probes = config["probes"]
    passes_mb = (probes["trials"] + 1) * probes["epochs"] * probe_feature_mb(wildcards)
    return int(30 + passes_mb / (20 * 1024) / 60)


def probe_kind_runtime_minutes(wildcards):
    """The linear probe's limit, scaled for the MLP kinds by their products per sample
    (forward and backward, about 3x the weights) against the linear probe's (2 D C)."""
    minutes = probe_runtime_minutes(wildcards)
    if wildcards.kind not in naming.MLP_KINDS:
        return minutes
    dim, classes = model_feature_dim(wildcards.model), config["levels"]["concepts_per_level"]
    width, layers = config["probes"]["mlp"]["hidden_width"], config["probes"]["mlp"]["hidden_layers"]
    weights = dim * width + (layers - 1) * width * width + width * classes
    return int(30 + (minutes - 30) * 3 * weights / (2 * dim * classes))
