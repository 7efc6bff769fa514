# Shared definitions: wildcard patterns, file layout and input functions.
# Paths are built only here, so each stage's rules and the README describe one layout.

import functools
import json
import math
import re
import shlex
import os
from types import SimpleNamespace

from snakemake.exceptions import IncompleteCheckpointException

from imagenet_cog.layout import RESULT_FIGURES, TABLE_FORMATS, Layout, result_table_names


MODELS = list(config["models"])
DATASETS = list(config["datasets"])
LEVEL_NAMES = [f"l{k}" for k in range(1, config["levels"]["num_levels"] + 1)]
SPLITS = ["train", "test"]
SHOTS = [str(shots) for shots in config["probes"]["shots"]]
SEEDS = [str(seed) for seed in config["probes"]["seeds"]]
PATHS = Layout("results")
# One environment for every rule (--sdm conda); the package itself comes from the checkout.
CONDA_ENVIRONMENT = "../../envs/imagenet-cog.yaml"

if config["results"]["baseline_model"] not in config["models"]:
    raise WorkflowError(
        f"config.yaml: results.baseline_model '{config['results']['baseline_model']}' is not "
        f"a key of 'models' ({', '.join(MODELS)}); set it to one of them."
    )
for dataset in DATASETS:
    if dataset != "in1k" and dataset not in LEVEL_NAMES:
        raise WorkflowError(
            f"config.yaml: dataset '{dataset}' is not IN-1K or one of the "
            f"{len(LEVEL_NAMES)} levels ({', '.join(LEVEL_NAMES)}); fix 'datasets' or 'levels.num_levels'."
        )


wildcard_constraints:
    model="|".join(re.escape(model) for model in MODELS),
    dataset=r"in1k|l[1-9][0-9]*",
    level=r"l[1-9][0-9]*",
    split=r"train|test",
    shard=r"[0-9]{5}",
    shots=r"[1-9][0-9]*|all",
    seed=r"[0-9]+",
    kind=r"mlp|mlp_noact|pca-[1-9][0-9]*",


# Jobs import the package from this checkout (so jobs on cluster nodes and in conda
# environments run the same code as the Snakefile). Set in the environment jobs inherit,
# not in their shell commands: a path there would make Snakemake see changed code, and
# re-run everything, whenever the project folder is moved or copied.
os.environ["PYTHONPATH"] = os.pathsep.join(
    path for path in (os.path.join(workflow.basedir, "workflow"), os.environ.get("PYTHONPATH")) if path
)


def python_command(command):
    """The shell prefix of a rule running one of the package's commands."""
    return f"python -m imagenet_cog {command}"


# levels stage ----------------------------------------------------------------------


def concept_list_inputs(wildcards):
    """The concept list, name and gloss files: config ``concepts.*`` or the files timm ships,
    resolved here so that a changed list re-runs the levels."""
    from imagenet_cog.concepts import TIMM_FILES, ConceptError, concept_file

    try:
        return {key: str(concept_file(key, config["concepts"][key])) for key in TIMM_FILES}
    except ConceptError as error:
        raise WorkflowError(f"config.yaml: {error}")


def image_count_inputs(wildcards):
    """The counts TSV, unless the images are counted under data.in21k_root (a param: Snakemake
    would stat millions of files)."""
    if config["data"]["count_images_from_root"]:
        if not config["data"]["in21k_root"]:
            raise WorkflowError(
                "config.yaml: data.count_images_from_root is true but data.in21k_root is not set; "
                "point it at ImageNet-21K or set count_images_from_root: false."
            )
        return {}
    return {"counts": config["concepts"]["image_counts"]}


def published_levels_input(wildcards):
    if config["levels"]["source"] != "published":
        return {}
    if not config["levels"]["published_levels"]:
        raise WorkflowError(
            "config.yaml: levels.source is 'published' but levels.published_levels is not set; "
            "point it at the authors' level pickle or set levels.source: wordnet."
        )
    return {"published": config["levels"]["published_levels"]}


def image_root(dataset):
    """Folder the image paths of ``dataset``'s split list are relative to."""
    if config["mode"] == "demo":
        return PATHS.demo_images("in1k" if dataset == "in1k" else "in21k")
    root = config["data"]["in1k_root" if dataset == "in1k" else "in21k_root"]
    if not root:
        key = "in1k_root" if dataset == "in1k" else "in21k_root"
        raise WorkflowError(
            f"config.yaml: mode is 'imagenet' but data.{key} is not set; point it at your "
            f"ImageNet folder or set mode: demo."
        )
    return root


def image_root_setting(dataset):
    """The config key behind ``image_root(dataset)``, named in the split stage's errors."""
    if config["mode"] == "demo":
        return "mode: demo, generated images"
    return "data.in1k_root" if dataset == "in1k" else "data.in21k_root"


def demo_level_datasets():
    """The datasets whose level lists the demo world reads: IN-1K always (the demo's IN-1K
    concepts are the nearest ones of the chosen level concepts), and the configured levels."""
    return ["in1k", *(dataset for dataset in DATASETS if dataset != "in1k")]


def demo_level_lists():
    return [PATHS.level_concepts(dataset) for dataset in demo_level_datasets()]


def uses_published_splits(dataset):
    return (
        dataset != "in1k"
        and config["mode"] == "imagenet"
        and config["levels"]["source"] == "published"
        and bool(config["levels"]["published_splits"])
    )


def image_split_inputs(wildcards):
    """A dataset's concept list (and the demo images or the authors' split pickle); real
    ImageNet folders are params, not inputs: Snakemake would stat millions of files."""
    dataset = wildcards.dataset
    if config["mode"] == "demo":
        return {
            "concepts": PATHS.demo_concepts(dataset),
            "images": PATHS.demo_images("in1k" if dataset == "in1k" else "in21k"),
        }
    inputs = {"concepts": PATHS.level_concepts(dataset)}
    if uses_published_splits(dataset):
        inputs["published"] = config["levels"]["published_splits"]
    return inputs


def split_settings(dataset):
    """What defines a split besides its inputs. The demo world has fewer images per concept
    than the paper's 50 test images, so in demo mode its own test size is used."""
    settings = dict(config["splits"])
    if config["mode"] == "demo":
        settings["test_per_concept"] = config["demo"]["test_images_per_concept"]
    return settings


def split_row_count(dataset, split):
    """Images in one split of a dataset, read once its split list exists (a checkpoint)."""
    split_list = checkpoints.image_splits.get(dataset=dataset).output.table
    with open(split_list) as stream:
        next(stream)
        return sum(1 for line in stream if line.split("\t", 4)[3].strip() == split)


def feature_shards(wildcards):
    """All shard files of one (model, dataset, split)."""
    count = split_row_count(wildcards.dataset, wildcards.split)
    shards = max(1, math.ceil(count / config["features"]["shard_size"]))
    return [
        PATHS.feature_shard(wildcards.model, wildcards.dataset, wildcards.split, f"{index:05d}")
        for index in range(shards)
    ]


@functools.cache
def model_spec(model):
    """The registry spec of a ``models:`` entry; fails early on an unknown arch or path."""
    from imagenet_cog.models import ModelSpec

    try:
        return ModelSpec.from_config(model, config["models"][model])
    except (ValueError, FileNotFoundError) as error:
        raise WorkflowError(str(error))


# Every model entry is checked now, so that a typo fails the run before any job starts.
for configured_model in MODELS:
    model_spec(configured_model)


@functools.cache
def model_weights_identity(model):
    """Changes exactly when a model's weights do (a checkpoint's sha256 is read once)."""
    from imagenet_cog.models import weights_identity

    return weights_identity(model_spec(model))


def model_factory_option(model):
    factory = model_spec(model).factory
    return f"--factory {shlex.quote(factory)}" if factory else ""


def model_preprocessing(model):
    """The registry's preprocessing as JSON; a custom model's factory is covered by its identity."""
    from imagenet_cog.models import registry_preprocessing

    preprocessing = registry_preprocessing(model_spec(model))
    return preprocessing.to_json() if preprocessing else "factory"


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
    for name in ([f"pca-{dim}" for dim in PCA_DIMS] if kind == "pca" else [kind])
]
if "linear" not in PROBE_KINDS:
    raise WorkflowError(
        f"config.yaml: probes.kinds is {PROBE_KINDS} without 'linear'; the linear probe is the "
        f"reference the other kinds' tables are relative to: add 'linear' to probes.kinds."
    )
OTHER_KINDS = [kind for kind in PROBE_KINDS if kind != "linear"]
OTHER_KINDS_SHOTS = [str(shots) for shots in (config["probes"]["other_kinds_shots"] or SHOTS)]
OTHER_KINDS_SEEDS = [str(seed) for seed in (config["probes"]["other_kinds_seeds"] or SEEDS)]
# probes settings that are not the linear probe's (and so must not enter its params)
NOT_LINEAR_PROBE_SETTINGS = ("seeds", "shots", "kinds", "other_kinds_shots", "other_kinds_seeds", "mlp", "pca_dims")


def kind_probe_settings(kind):
    """The search settings of a kind other than linear: the shared ones, with the kind's
    learning-rate and weight-decay ranges and network; ranges as the command reads them.
    pca-<d> is the linear probe on projected features, with the linear probe's ranges."""
    probes = config["probes"]
    shared = {key: value for key, value in probes.items() if key not in NOT_LINEAR_PROBE_SETTINGS}
    if kind.startswith("pca-"):
        return {
            **shared,
            "lr_range": " ".join(str(value) for value in probes["lr_range"]),
            "wd_range": " ".join(str(value) for value in probes["wd_range"]),
            "kind_arguments": f"--kind pca --pca-dim {kind.split('-', 1)[1]}",
        }
    mlp = probes["mlp"]
    lr_range = mlp["lr_range"] if kind == "mlp" else mlp["noact_lr_range"]
    return {
        **shared,
        "lr_range": " ".join(str(value) for value in lr_range),
        "wd_range": " ".join(str(value) for value in mlp["wd_range"]),
        "kind_arguments": f"--kind {kind} --hidden-width {mlp['hidden_width']} --hidden-layers {mlp['hidden_layers']}",
    }


def probe_kind_inputs(wildcards):
    inputs = {
        "train": PATHS.features(wildcards.model, wildcards.dataset, "train"),
        "test": PATHS.features(wildcards.model, wildcards.dataset, "test"),
    }
    if wildcards.kind.startswith("pca-"):
        inputs["pca"] = PATHS.pca_components(wildcards.model, wildcards.dataset)
    return inputs



def all_probe_results(models=None):
    """The linear probes of the whole grid and the other kinds' on their own shots and seeds."""
    return probe_results(models=models) + probe_results(models=models, shots=OTHER_KINDS_SHOTS, seeds=OTHER_KINDS_SEEDS, kinds=OTHER_KINDS)


def result_models():
    """The models the probes target, tables and figures cover: results.models, else all."""
    selected = config["results"]["models"]
    if selected is None:
        return MODELS
    unknown = [model for model in selected if model not in config["models"]]
    if unknown:
        raise WorkflowError(
            f"results.models names {', '.join(unknown)}, which 'models' does not define "
            f"({', '.join(MODELS)}); fix the list or add those models."
        )
    return list(selected)


def result_probe_inputs():
    """Probe results the summary reads; with results.allow_missing only those that exist,
    so that tables can be made while some probe jobs failed or are still to run."""
    expected = all_probe_results(models=result_models())
    if config["results"]["allow_missing"]:
        return [path for path in expected if os.path.exists(path)]
    return expected


def all_feature_shards(wildcards):
    """Every shard behind the probes' feature files, for rule all. A merged file only points
    at its shards, and Snakemake re-creates a deleted file only when a target asks for it:
    listed here, a lost shard is extracted again and the probes reading it re-run."""
    return [
        shard
        for model in result_models()
        for dataset in DATASETS
        for split in SPLITS
        for shard in feature_shards(SimpleNamespace(model=model, dataset=dataset, split=split))
    ]


def final_outputs():
    return [
        PATHS.levels_figure("png"),
        PATHS.split_summary(),
        *all_probe_results(models=result_models()),
        *PATHS.result_targets(DATASETS),
    ]


# probes stage: job sizes ---------------------------------------------------------------

# Feature files present their shards as HDF5 virtual datasets, so their own size says
# nothing; the job sizes below assume float32 features of the registry's width per image of
# the dataset's split lists (a custom factory's width is unknown until it runs: ResNet-50's
# 2048 is assumed; raise it with --set-resources if yours is wider).
ASSUMED_CUSTOM_FEATURE_DIM = 2048


def model_feature_dim(model):
    from imagenet_cog.models import REGISTRY

    arch = model_spec(model).arch
    return REGISTRY[arch].feature_dim if arch in REGISTRY else ASSUMED_CUSTOM_FEATURE_DIM


def probe_feature_mb(wildcards):
    try:
        rows = sum(split_row_count(wildcards.dataset, split) for split in SPLITS)
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
    if not wildcards.kind.startswith("mlp"):
        return minutes
    dim, classes = model_feature_dim(wildcards.model), config["levels"]["concepts_per_level"]
    width, layers = config["probes"]["mlp"]["hidden_width"], config["probes"]["mlp"]["hidden_layers"]
    weights = dim * width + (layers - 1) * width * width + width * classes
    return int(30 + (minutes - 30) * 3 * weights / (2 * dim * classes))


# results stage ---------------------------------------------------------------------------

def models_json():
    """Config entries of the models the results cover, for the aggregation commands."""
    return json.dumps({model: config["models"][model] for model in result_models()})


def grid_arguments():
    return (
        f"--results-root {PATHS.root} --models {shlex.quote(models_json())} "
        f"--datasets {' '.join(DATASETS)} --shots {' '.join(SHOTS)} --seeds {' '.join(SEEDS)} "
        f"--kinds {' '.join(PROBE_KINDS)} --other-kinds-shots {' '.join(OTHER_KINDS_SHOTS)} "
        f"--other-kinds-seeds {' '.join(OTHER_KINDS_SEEDS)}"
    )


def table_report(name):
    """A table's CSV as a report entry (its Markdown and LaTeX versions lie next to it)."""
    probe_kind_tables = {
        "probe_kinds": "MLP probes relative to linear",
        "pca_top1": "PCA + linear, top-1",
        "pca_relative": "PCA + linear, relative to baseline",
    }
    if name in probe_kind_tables:
        return report(
            PATHS.table(name, "csv"),
            caption=f"../report/table_{name}.rst",
            category="Tables",
            subcategory="Probe kinds",
            labels={"table": probe_kind_tables[name], "dataset": "IN-1K and levels"},
        )
    absolute = name.startswith("top1_")
    across_levels = name.endswith("_levels")
    dataset = "IN-1K and levels" if across_levels else name.split("_", 1)[1].upper().replace("IN1K", "IN-1K")
    kind = ("Top-1" if absolute else "Relative to baseline") + (", all images" if across_levels else " per N")
    caption = f"table_{'top1' if absolute else 'relative'}_{'levels' if across_levels else 'dataset'}.rst"
    return report(
        PATHS.table(name, "csv"),
        caption=f"../report/{caption}",
        category="Tables",
        subcategory=kind,
        labels={"table": kind, "dataset": dataset},
    )


def figure_report(name, caption):
    return report(
        PATHS.figure(name, "png"),
        caption=f"../report/{caption}",
        category="Figures",
        labels={"figure": name},
    )
