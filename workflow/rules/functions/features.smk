# Features stage: what the rules of features.smk use, besides common.smk's: its input
# functions, config checks and the stage's targets (kept apart from the rules, as
# snakemake --lint asks).

import functools
import hashlib
import json
import math
import shlex
from types import SimpleNamespace

from snakemake.exceptions import IncompleteCheckpointException

from imagenet_cog.models.registry import extract_options, planned_preprocessing, weights_identity


def model_checkpoint_inputs(wildcards):
    """A workflow-made checkpoint is an input of extraction: it is made first, and a new one
    re-extracts the model's features."""
    return [model_spec(wildcards.model).weights] if made_by_workflow(wildcards.model) else []


# The extraction rules' shared definitions (extract_features: one shard; extract_split: every
# shard of a split). Their shell texts and param values are exactly those of the two rules
# before they were shared, so finished extractions stay current (docs/architecture.md,
# "Staleness-only params").
EXTRACTION_INPUT = {
    "split_table": PATHS.image_splits("{dataset}"),
    "images": lambda wildcards: image_root(wildcards.dataset),
    "checkpoint": model_checkpoint_inputs,
}
# One thread runs the model, the others decode images; with fewer cores than asked for,
# Snakemake lowers threads and the loader workers follow.
EXTRACTION_THREADS = config["features"]["num_workers"] + 1
EXTRACTION_RESOURCES = dict(
    gpu=0 if config["features"]["device"] == "cpu" else 1,
    # Model and framework (~2 GB), 4 prefetched uint8 batches per worker, the shard's features.
    mem_mb=lambda wildcards, threads: 4000 + threads * 600,
)
# A shard's time limit: start-up plus its images (features.group: split adds one per shard).
SHARD_EXTRACTION_MINUTES = 15 + config["features"]["shard_size"] // 400
EXTRACTION_PARAMS = dict(
    arch=lambda wildcards: model_spec(wildcards.model).arch,
    weights=lambda wildcards: command_weights(wildcards.model),
    # staleness-only: new weights (a checkpoint's digest) or a new preprocessing re-extract
    settings_weights=lambda wildcards: model_weights_identity(wildcards.model),
    settings_preprocessing=lambda wildcards: model_preprocessing(wildcards.model),
    # the model's and the image root's options; named factory for its place in the shell text
    factory=lambda wildcards: extract_command_options(wildcards),
    weights_identity_option=lambda wildcards: weights_identity_option(wildcards.model),
    shard_size=config["features"]["shard_size"],
    batch_size=config["features"]["batch_size"],
    dtype=config["features"]["dtype"],
    device=config["features"]["device"],
    mixed_precision=str(config["features"]["mixed_precision"]).lower(),
)
EXTRACTION_SPLIT_OPTIONS = (
    " --split-table {input.split_table} --image-root {input.images:q} --dataset {wildcards.dataset} --split {wildcards.split}"
)
EXTRACTION_MODEL_OPTIONS = (
    " --model-name {wildcards.model} --arch {params.arch} --weights {params.weights:q}"
    " {params.factory} {params.weights_identity_option}"
    " --batch-size {params.batch_size} --num-workers $(({threads} - 1)) --threads {threads}"
    " --dtype {params.dtype} --device {params.device}"
    " --mixed-precision {params.mixed_precision}"
)
EXTRACTION_OUTPUT = " --output {output} > {log} 2>&1"


def feature_shards(wildcards):
    """All shard files of one (model, dataset, split)."""
    count = split_row_count(wildcards.dataset, wildcards.split)
    shards = max(1, math.ceil(count / config["features"]["shard_size"]))
    return [PATHS.feature_shard(wildcards.model, wildcards.dataset, wildcards.split, f"{index:05d}") for index in range(shards)]


@functools.cache
def model_weights_identity(model):
    """Changes exactly when a model's weights do (a checkpoint's sha256 is read once)."""
    if made_by_workflow(model):
        # Its digest is unknown until it is made: the settings that make it, and which of the
        # files they make it is (the last epoch's or a kept one's), stand in for it.
        made = {"demo": demo_world_settings(), "pretraining": config["demo"]["pretraining"]}
        if model_spec(model).weights != PATHS.demo_checkpoint():
            made["checkpoint"] = os.path.basename(model_spec(model).weights)
        settings = json.dumps(made, sort_keys=True)
        return f"made by the workflow from {hashlib.sha256(settings.encode()).hexdigest()[:16]}"
    return weights_identity(model_spec(model))


def weights_identity_option(model):
    """Extraction fails when a model's weights changed since planning; a checkpoint the
    workflow makes is checked by Snakemake instead (it is an input)."""
    if made_by_workflow(model):
        return ""
    return f"--weights-identity {shlex.quote(model_weights_identity(model))}"


def decode_option():
    """The decode and host-resize options. Where JPEGs are decoded changes pixels by at most
    one grey level (within the shards' float16 tolerance), so it is how features are made,
    not what: the default, auto, adds nothing to the command, and shards made before the
    option existed stay up to date. One value for both keeps extract_split's params as they
    were recorded (a new param would re-run every finished job)."""
    decode = config["features"]["decode"]
    return ("" if decode == "auto" else f" --decode {decode}") + host_resize_option()


def host_resize_option():
    """The host path's resize changes pixels by a few grey levels: another resize is other
    features, re-extracted. Its default adds nothing to the command, so that shards made
    before the option existed stay up to date."""
    resize = config["features"]["host_resize"]
    return "" if resize == "pil" else f" --host-resize {resize}"


@functools.cache
def model_extract_options(model):
    """A custom model's factory, a timm model's preprocessing and input size. The rule's
    parameter is still called factory: its name is in the shell command, whose text Snakemake
    compares, so renaming it would re-extract every finished model."""
    return shlex.join(extract_options(model_spec(model)))


def extract_command_options(wildcards):
    """The extract commands' options beyond the split and the model's name, arch and weights:
    the model's own (model_extract_options) and a tar layout's (image_reading_options), in
    the parameter still called factory for the reason model_extract_options gives."""
    reading = image_reading_options(wildcards.dataset, "--image-")
    return " ".join(option for option in (model_extract_options(wildcards.model), reading) if option)


def trusted_globals_option(model):
    """The objects a model's checkpoint may hold besides tensors, as the commands take them."""
    trusted = model_spec(model).trusted_globals
    return "--trusted-globals " + " ".join(shlex.quote(name) for name in trusted) if trusted else ""


@functools.cache
def model_preprocessing(model):
    """The registry's or timm's preprocessing as JSON; a custom model's factory is covered by its identity."""
    preprocessing = planned_preprocessing(model_spec(model))
    return preprocessing.to_json() if preprocessing else "factory"


def view_sources(dataset):
    """The extracted datasets a view reads: Lin's levels (in demo mode those with demo
    images: the configured ones) and the pool where the set may need it."""
    levels = [level for level in LEVEL_NAMES if config["mode"] != "demo" or level in DATASETS]
    return levels + ([naming.POOL] if needs_pool(naming.level_set_of(dataset)) else [])


def features_targets(wildcards):
    """Every shard behind the probes' feature files, for rule all. A merged file only points
    at its shards, and Snakemake re-creates a deleted file only when a target asks for it:
    listed here, a lost shard is extracted again and the probes reading it re-run. An input
    function: the shards of a split are counted from its split table. With features.group:
    split the shards are no job's outputs: the merged files are listed."""
    extracted = [
        SimpleNamespace(model=model, dataset=dataset, split=split)
        for model, datasets in (
            *((model, DATASETS) for model in [*result_models(), *SERIES_REDUCED]),
            *((model, [naming.POOL]) for model in (LEVEL_SET_MODELS if POOL_NEEDED else [])),
            *((model, BLURRED_DATASETS) for model in BLURRED_MODELS),
        )
        for dataset in datasets
        for split in SPLITS
    ]
    if config["features"]["group"] == "split":
        return [PATHS.features(w.model, w.dataset, w.split) for w in extracted]
    return [shard for w in extracted for shard in feature_shards(w)]


def split_extraction_minutes(wildcards):
    """The per-shard job's limit times the split's shards (features.group: split)."""
    try:
        shards = len(feature_shards(wildcards))
    except IncompleteCheckpointException:
        return 0  # sized once the split table exists, as probe_feature_mb
    return shards * SHARD_EXTRACTION_MINUTES
