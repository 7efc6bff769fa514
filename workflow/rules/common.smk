# Shared definitions: wildcard patterns, file layout and input functions.
# Paths are built only here, so each stage's rules and the README describe one layout.

import functools
import hashlib
import json
import math
import re
import shlex
import os
from types import SimpleNamespace

from snakemake.exceptions import IncompleteCheckpointException

from imagenet_cog.core.layout import (
    DROP_NAME,
    FIGURE_FORMATS,
    PUBLISHED_FIGURE,
    RESULT_FIGURES,
    STATISTICS_TABLES,
    TABLE_FORMATS,
    Layout,
    analysis_figure_names,
    analysis_table_names,
    published_table_names,
    result_table_names,
)
from imagenet_cog.results.paper import published_model_names, resolve_paper_names
from imagenet_cog.core.naming import MEASURE_TITLES
from imagenet_cog.levels.cut import LevelError
from imagenet_cog.levels.level_sets import check_level_sets


def shipped_file(path):
    """A relative path to a file this workflow ships (resources/...) is read beside the
    Snakefile when the working directory holds no file of that name."""
    if os.path.isabs(path) or os.path.exists(path):
        return path
    beside = os.path.join(workflow.basedir, path)
    return beside if os.path.exists(beside) else path


for section, key in (("concepts", "image_counts"), ("concepts", "discarded_wnids"), ("results", "published_top1")):
    config[section][key] = shipped_file(config[section][key])


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

# A paper_name that names no row of the published tables fails here, before any job.
PUBLISHED_TOP1 = config["results"]["published_top1"]
if any("paper_name" in entry for entry in config["models"].values()):
    if not os.path.exists(PUBLISHED_TOP1):
        raise WorkflowError(
            f"config.yaml: results.published_top1 '{PUBLISHED_TOP1}' does not exist; models with "
            f"a paper_name are compared with it (the shipped file is resources/published_top1.tsv)."
        )
    try:
        resolve_paper_names(config["models"], published_model_names(PUBLISHED_TOP1), PUBLISHED_TOP1)
    except ValueError as error:
        raise WorkflowError(f"config.yaml: {error}") from error


# IN-1K-blurred (supp. E): an optional dataset beside IN-1K, its own image root
BLURRED_SETTINGS = config["in1k_blurred"]
BLURRED_DATASETS = ["in1k_blurred"] if BLURRED_SETTINGS["enabled"] else []
if BLURRED_DATASETS and "in1k" not in DATASETS:
    raise WorkflowError(
        "config.yaml: in1k_blurred.enabled compares IN-1K-blurred with IN-1K, but 'datasets' has no in1k; "
        "add it or set in1k_blurred.enabled: false."
    )
BLURRED_SHOTS = [str(shots) for shots in (BLURRED_SETTINGS["shots"] or config["probes"]["shots"])]
BLURRED_SEEDS = [str(seed) for seed in (BLURRED_SETTINGS["seeds"] or config["probes"]["seeds"])]
if BLURRED_DATASETS and not (set(BLURRED_SHOTS) <= set(SHOTS) and set(BLURRED_SEEDS) <= set(SEEDS)):
    raise WorkflowError(
        f"config.yaml: in1k_blurred.shots {BLURRED_SHOTS} and seeds {BLURRED_SEEDS} must be among probes.shots "
        f"{SHOTS} and probes.seeds {SEEDS}, whose IN-1K probes they are compared with."
    )


# Level sets (imagenet_cog/levels/level_sets.py): datasets "<set>-l<k>" and "random-<NN>" are views
# over the features of Lin's levels and of "pool" (eligible concepts outside Lin's levels,
# extracted only when a configured set may need them).
LEVEL_SET_SETTINGS = config["level_sets"]
try:
    check_level_sets(LEVEL_SET_SETTINGS["sets"])
except LevelError as error:
    raise WorkflowError(f"config.yaml: {error}")
RANKED_LEVEL_SETS = [name for name in LEVEL_SET_SETTINGS["sets"] if name != "random"]
RANDOM_DRAWS = (
    [f"{draw:02d}" for draw in range(1, LEVEL_SET_SETTINGS["random"]["draws"] + 1)]
    if "random" in LEVEL_SET_SETTINGS["sets"]
    else []
)
LEVEL_SET_DATASETS = [f"{name}-{level}" for name in RANKED_LEVEL_SETS for level in LEVEL_NAMES] + [
    f"random-{draw}" for draw in RANDOM_DRAWS
]
LEVEL_SET_SHOTS = [str(shots) for shots in LEVEL_SET_SETTINGS["shots"]]
LEVEL_SET_SEEDS = [str(seed) for seed in (LEVEL_SET_SETTINGS["seeds"] or config["probes"]["seeds"])]
EXTRACTED_DATASET = r"in1k_blurred|in1k|l[1-9][0-9]*|pool"
VIEW_DATASET = r"(?:wup|path|jcn|res|word2vec)-l[1-9][0-9]*|random-[0-9]{2}"
# the class-balanced variant (imagenet_cog/variants/balanced.py): views over a default dataset's features
BALANCED_DATASET = r"balanced-(?:in1k|l[1-9][0-9]*)"


def level_set_of(dataset):
    """The level set a dataset belongs to: lin for IN-1K and Lin's levels."""
    return "random" if dataset.startswith("random-") else dataset.split("-", 1)[0] if "-" in dataset else "lin"


def needs_pool(level_set):
    """Whether a set's views read "pool": word2vec re-ranks Lin's level concepts only; in
    demo mode every set may pick pool concepts, the only ones with images besides Lin's."""
    return config["mode"] == "demo" or level_set != "word2vec"


POOL_NEEDED = any(needs_pool(level_set_of(dataset)) for dataset in LEVEL_SET_DATASETS)


def view_sources(dataset):
    """The extracted datasets a view reads: Lin's levels (in demo mode those with demo
    images: the configured ones) and the pool where the set may need it."""
    levels = [level for level in LEVEL_NAMES if config["mode"] != "demo" or level in DATASETS]
    return levels + (["pool"] if needs_pool(level_set_of(dataset)) else [])


def word_vectors_file():
    """level_sets.word2vec.embeddings, or in demo mode without one, the generated file."""
    path = LEVEL_SET_SETTINGS["word2vec"]["embeddings"]
    if path is None and config["mode"] == "demo":
        return PATHS.word_vectors_demo()
    if path is None:
        raise WorkflowError(
            "config.yaml: level_sets.sets has word2vec but level_sets.word2vec.embeddings is not set; "
            "point it at a word2vec-format file (e.g. Wikipedia2Vec's word2vec export)."
        )
    if not os.path.isfile(path):
        raise WorkflowError(f"config.yaml: level_sets.word2vec.embeddings = {path!r} does not exist; fix the path.")
    with open(path, "rb") as stream:
        header = stream.readline(200).split()
    if len(header) != 2 or not all(field.isdigit() for field in header):
        raise WorkflowError(
            f"config.yaml: level_sets.word2vec.embeddings = {path!r} is not in word2vec format (its first "
            f"line must be '<count> <dimension>'); export the vectors in word2vec format."
        )
    return path


if "word2vec" in LEVEL_SET_SETTINGS["sets"]:
    word_vectors_file()


def check_random_draw_size():
    """A draw larger than the eligible pool fails before any job once the ranking exists
    (before that, the draw's own job fails with the same message)."""
    if not RANDOM_DRAWS or not os.path.exists(PATHS.ranking()):
        return
    with open(PATHS.ranking()) as stream:
        eligible = sum(1 for _ in stream) - 1
    if LEVEL_SET_SETTINGS["random"]["concepts"] > eligible:
        raise WorkflowError(
            f"config.yaml: level_sets.random.concepts is {LEVEL_SET_SETTINGS['random']['concepts']} but only "
            f"{eligible} concepts are eligible ({PATHS.ranking()}); lower it."
        )


check_random_draw_size()


wildcard_constraints:
    model="|".join(re.escape(model) for model in MODELS),
    dataset=f"{EXTRACTED_DATASET}|{VIEW_DATASET}|{BALANCED_DATASET}",
    level_set=r"wup|path|jcn|res|word2vec",
    draw=r"[0-9]{2}",
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


# Declared, so that executors which start jobs in a fresh environment (SLURM, remote
# storage) pass it on to them.
envvars:
    "PYTHONPATH",


def results_root(wildcards, output):
    """The results folder of a results-stage job, from its first output (<root>/tables/.. or
    <root>/figures/..): where its command writes the rest."""
    return os.path.dirname(os.path.dirname(output[0]))


def python_command(command):
    """The shell prefix of a rule running one of the package's commands."""
    return f"python -m imagenet_cog {command}"


# levels stage ----------------------------------------------------------------------


def concept_list_inputs(wildcards):
    """The concept list, name and gloss files: config ``concepts.*`` or the files timm ships,
    resolved here so that a changed list re-runs the levels."""
    from imagenet_cog.levels.concepts import TIMM_FILES, ConceptError, concept_file

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


def demo_image_source(dataset):
    """The demo image folder of a dataset: in1k, pool (drawn for level sets) or in21k."""
    return dataset if dataset in ("in1k", "in1k_blurred", "pool") else "in21k"


# the config key of each dataset's image root (the levels and the pool: IN-21K's)
ROOT_KEYS = {"in1k": "in1k_root", "in1k_blurred": "in1k_blurred_root"}


def image_root(dataset):
    """Folder the image paths of ``dataset``'s split list are relative to."""
    if config["mode"] == "demo":
        return PATHS.demo_images(demo_image_source(dataset))
    key = ROOT_KEYS.get(dataset, "in21k_root")
    root = config["data"][key]
    if not root:
        raise WorkflowError(
            f"config.yaml: mode is 'imagenet' but data.{key} is not set; point it at your " f"ImageNet folder or set mode: demo."
        )
    return root


def image_root_setting(dataset):
    """The config key behind ``image_root(dataset)``, named in the split stage's errors."""
    if config["mode"] == "demo":
        return "mode: demo, generated images"
    return f"data.{ROOT_KEYS.get(dataset, 'in21k_root')}"


def demo_world_settings():
    """What the demo world's images depend on: demo settings without pretraining, and
    in1k_concepts only when set, so that runs from before those keys stay up to date."""
    return {
        key: value
        for key, value in config["demo"].items()
        if key != "pretraining" and not (key == "in1k_concepts" and value is None)
    }


def in1k_concepts_option():
    count = config["demo"]["in1k_concepts"]
    return "" if count is None else f" --in1k-concepts {count}"


def demo_level_datasets():
    """The datasets whose level lists the demo world reads: IN-1K always (the demo's IN-1K
    concepts are the nearest ones of the chosen level concepts), and the configured levels."""
    return ["in1k", *(dataset for dataset in DATASETS if dataset != "in1k")]


def demo_level_lists():
    return [PATHS.level_concepts(dataset) for dataset in demo_level_datasets()]


def uses_published_splits(dataset):
    return (
        dataset not in ("in1k", "pool")
        and config["mode"] == "imagenet"
        and config["levels"]["source"] == "published"
        and bool(config["levels"]["published_splits"])
    )


def image_split_inputs(wildcards):
    """A dataset's concept list (and the demo images or the authors' split pickle); real
    ImageNet folders are params, not inputs: Snakemake would stat millions of files."""
    dataset = wildcards.dataset
    # IN-1K-blurred has IN-1K's concepts
    concepts_of = "in1k" if dataset == "in1k_blurred" else dataset
    if config["mode"] == "demo":
        return {
            "concepts": PATHS.demo_concepts(concepts_of),
            "images": PATHS.demo_images(demo_image_source(dataset)),
        }
    inputs = {"concepts": PATHS.level_concepts(concepts_of)}
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
    return [PATHS.feature_shard(wildcards.model, wildcards.dataset, wildcards.split, f"{index:05d}") for index in range(shards)]


def workflow_checkpoints():
    """Checkpoints that this workflow's own jobs write, which a model may name as its weights
    before they exist; in demo mode the demo's pretrained network."""
    return {PATHS.demo_checkpoint()} if config["mode"] == "demo" else set()


def made_by_workflow(model):
    return model_spec(model).weights in workflow_checkpoints()


def model_checkpoint_input(wildcards):
    """A workflow-made checkpoint is an input of extraction: it is made first, and a new one
    re-extracts the model's features."""
    return [model_spec(wildcards.model).weights] if made_by_workflow(wildcards.model) else []


@functools.cache
def model_spec(model):
    """The registry spec of a ``models:`` entry; fails early on an unknown arch or path."""
    from imagenet_cog.models.registry import ModelSpec

    try:
        return ModelSpec.from_config(
            model, config["models"][model], config["checkpoints_dir"], made_by_workflow=workflow_checkpoints()
        )
    except (ValueError, FileNotFoundError) as error:
        raise WorkflowError(str(error))


# Every model entry is checked now, so that a typo fails the run before any job starts.
for configured_model in MODELS:
    model_spec(configured_model)


@functools.cache
def model_weights_identity(model):
    """Changes exactly when a model's weights do (a checkpoint's sha256 is read once)."""
    from imagenet_cog.models.registry import weights_identity

    if made_by_workflow(model):
        # Its digest is unknown until it is made: the settings that make it stand in for it.
        settings = json.dumps({"demo": demo_world_settings(), "pretraining": config["demo"]["pretraining"]}, sort_keys=True)
        return f"made by the workflow from {hashlib.sha256(settings.encode()).hexdigest()[:16]}"
    return weights_identity(model_spec(model))


def weights_identity_option(model):
    """Extraction fails when a model's weights changed since planning; a checkpoint the
    workflow makes is checked by Snakemake instead (it is an input)."""
    if made_by_workflow(model):
        return ""
    return f"--weights-identity {shlex.quote(model_weights_identity(model))}"


def decode_option():
    """Where JPEGs are decoded changes pixels by at most one grey level (within the shards'
    float16 tolerance), so it is how features are made, not what: the default, auto, adds
    nothing to the command, and shards made before the option existed stay up to date."""
    decode = config["features"]["decode"]
    return "" if decode == "auto" else f" --decode {decode}"


def model_factory_option(model):
    factory = model_spec(model).factory
    return f"--factory {shlex.quote(factory)}" if factory else ""


def model_preprocessing(model):
    """The registry's preprocessing as JSON; a custom model's factory is covered by its identity."""
    from imagenet_cog.models.registry import registry_preprocessing

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
    name for kind in config["probes"]["kinds"] for name in ([f"pca-{dim}" for dim in PCA_DIMS] if kind == "pca" else [kind])
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
NOT_LINEAR_PROBE_SETTINGS = (
    "seeds",
    "shots",
    "kinds",
    "other_kinds_shots",
    "other_kinds_seeds",
    "mlp",
    "pca_dims",
    "seeds_together",
)
# The search settings every probe kind shares, and the linear probe's ranges as the command
# reads them (pca-<d> probes use them too); seeds and shots are wildcards, so a change of
# one of these reruns the probes, not a change of the seeds or shots.
SHARED_PROBE_SETTINGS = {key: value for key, value in config["probes"].items() if key not in NOT_LINEAR_PROBE_SETTINGS}
LINEAR_LR_RANGE = " ".join(str(value) for value in config["probes"]["lr_range"])
LINEAR_WD_RANGE = " ".join(str(value) for value in config["probes"]["wd_range"])
# On a GPU the host only feeds a probe job; on a CPU the matrix products use every thread given.
PROBE_THREADS = 8 if config["probes"]["device"] == "cpu" else 1
PROBE_GPUS = 0 if config["probes"]["device"] == "cpu" else 1


def linear_probe_command(seeds):
    """The probe command of the one-seed and the all-seed jobs; ``seeds`` fills --seed."""
    return (
        python_command("probe") + " --train {input.train} --test {input.test} --output {output} --study {params.study}"
        " --model {wildcards.model} --dataset {wildcards.dataset}"
        f" --shots {{wildcards.shots}} --seed {seeds}"
        " --trials {params.probes[trials]} --epochs {params.probes[epochs]}"
        " --batch-size {params.probes[batch_size]} --momentum {params.probes[momentum]}"
        " --lr-range {params.lr_range} --wd-range {params.wd_range}"
        " --val-fraction {params.probes[val_fraction]}"
        " --trials-per-batch {params.probes[trials_per_batch]}"
        " --device {params.probes[device]} --precision {params.probes[precision]}"
        " --threads {threads} > {log} 2>&1"
    )


def kind_probe_settings(kind):
    """The search settings of a kind other than linear: the shared ones, with the kind's
    learning-rate and weight-decay ranges and network; ranges as the command reads them.
    pca-<d> is the linear probe on projected features, with the linear probe's ranges."""
    if kind.startswith("pca-"):
        return {
            **SHARED_PROBE_SETTINGS,
            "lr_range": LINEAR_LR_RANGE,
            "wd_range": LINEAR_WD_RANGE,
            "kind_arguments": f"--kind pca --pca-dim {kind.split('-', 1)[1]}",
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
    if wildcards.kind.startswith("pca-"):
        inputs["pca"] = PATHS.pca_components(wildcards.model, wildcards.dataset)
    return inputs


def all_probe_results(models=None):
    """The linear probes of the whole grid and the other kinds' on their own shots and seeds."""
    return probe_results(models=models) + probe_results(
        models=models, shots=OTHER_KINDS_SHOTS, seeds=OTHER_KINDS_SEEDS, kinds=OTHER_KINDS
    )


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
    expected = all_probe_results(models=result_models()) + level_set_probe_results(models=result_models())
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
        for dataset in [*DATASETS, *(["pool"] if POOL_NEEDED else []), *BLURRED_DATASETS]
        for split in SPLITS
        for shard in feature_shards(SimpleNamespace(model=model, dataset=dataset, split=split))
    ]


def level_set_probe_results(models=None):
    return probe_results(models=models, datasets=LEVEL_SET_DATASETS, shots=LEVEL_SET_SHOTS, seeds=LEVEL_SET_SEEDS)


def level_set_targets():
    """Every output of the configured level sets (nothing when level_sets.sets is empty)."""
    if not LEVEL_SET_DATASETS:
        return []
    return [
        *(
            path
            for name in RANKED_LEVEL_SETS
            for path in (
                PATHS.level_set_ranking(name),
                PATHS.level_set_summary(name),
                PATHS.level_set_overlap(name),
                PATHS.level_set_figure(name, "png"),
                PATHS.level_set_figure(name, "pdf"),
            )
        ),
        *(PATHS.random_draw_overlap(draw) for draw in RANDOM_DRAWS),
        *level_set_probe_results(models=result_models()),
        PATHS.level_sets_figure("png"),
        PATHS.level_sets_figure("pdf"),
        *(PATHS.level_sets_table(extension) for extension in TABLE_FORMATS),
    ]


def final_outputs():
    return [
        PATHS.levels_figure("png"),
        PATHS.split_summary(),
        *all_probe_results(models=result_models()),
        *PATHS.result_targets(DATASETS),
        *rater_sheet_targets(),
        *analysis_targets(),
        *level_set_targets(),
        *audit_targets(),
        *balanced_targets(),
        *blurred_targets(),
    ]


# probes stage: job sizes ---------------------------------------------------------------

# Feature files present their shards as HDF5 virtual datasets, so their own size says
# nothing; the job sizes below assume float32 features of the registry's width per image of
# the dataset's split lists (a custom factory's width is unknown until it runs: ResNet-50's
# 2048 is assumed; raise it with --set-resources if yours is wider).
ASSUMED_CUSTOM_FEATURE_DIM = 2048


def model_feature_dim(model):
    from imagenet_cog.models.registry import REGISTRY

    arch = model_spec(model).arch
    return REGISTRY[arch].feature_dim if arch in REGISTRY else ASSUMED_CUSTOM_FEATURE_DIM


def probe_feature_mb(wildcards):
    try:
        # a balanced dataset holds at most its default dataset's rows
        rows = sum(split_row_count(wildcards.dataset.removeprefix("balanced-"), split) for split in SPLITS)
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


def models_json(with_paper_name=False):
    """Config entries of the models the results cover, for the aggregation commands; the
    paper_name only for the comparison with published numbers, so that setting one re-runs
    that comparison alone."""
    return json.dumps(
        {
            model: {key: value for key, value in config["models"][model].items() if with_paper_name or key != "paper_name"}
            for model in result_models()
        }
    )


def grid_arguments():
    return (
        f"--results-root {PATHS.root} --models {shlex.quote(models_json())} "
        f"--datasets {' '.join(DATASETS)} --shots {' '.join(SHOTS)} --seeds {' '.join(SEEDS)} "
        f"--kinds {' '.join(PROBE_KINDS)} --other-kinds-shots {' '.join(OTHER_KINDS_SHOTS)} "
        f"--other-kinds-seeds {' '.join(OTHER_KINDS_SEEDS)}"
    )


def level_set_grid_arguments():
    """The level-set probes the summary also covers (none: no option, the Lin-only command)."""
    if not LEVEL_SET_DATASETS:
        return ""
    return (
        f"--level-set-datasets {' '.join(LEVEL_SET_DATASETS)} --level-set-shots {' '.join(LEVEL_SET_SHOTS)} "
        f"--level-set-seeds {' '.join(LEVEL_SET_SEEDS)}"
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


def tidy_report(path, caption, table, subcategory):
    """A report entry for a table of the results stage other than the paper's tables."""
    return report(
        path,
        caption=f"../report/{caption}",
        category="Tables",
        subcategory=subcategory,
        labels={"table": table, "dataset": "all"},
    )


def published_report(name):
    """published_comparison (every compared cell) or published_<dataset> as a report entry."""
    dataset = name.split("_", 1)[1]
    across = dataset == "comparison"
    return report(
        PATHS.table(name, "csv"),
        caption=f"../report/{'published_comparison' if across else 'published_dataset'}.rst",
        category="Tables",
        subcategory="Ours - published",
        labels={
            "table": "ours vs published, every cell" if across else "ours - published per N",
            "dataset": "all" if across else dataset.upper().replace("IN1K", "IN-1K"),
        },
    )


def figure_report(name, caption):
    return report(
        PATHS.figure(name, "png"),
        caption=f"../report/{caption}",
        category="Figures",
        labels={"figure": name},
    )


# analyses stage: human forced-choice sheets -------------------------------------------


def rater_model():
    """The model whose test features give the sheets' hard negatives."""
    model = config["analyses"]["raters"]["model"] or config["results"]["baseline_model"]
    if model not in config["models"]:
        raise WorkflowError(
            f"config.yaml: analyses.raters.model '{model}' is not a key of 'models' "
            f"({', '.join(MODELS)}); set it to one of them (null: results.baseline_model)."
        )
    return model


if "hard" in config["analyses"]["raters"]["negatives"]:
    rater_model()


def rater_sheet_inputs(wildcards):
    """Split table and catalogue; the test features only for hard negatives; in demo mode the
    generated images (real ImageNet folders stay a param: Snakemake would stat every file)."""
    dataset = wildcards.dataset
    inputs = {"split_table": PATHS.image_splits(dataset), "catalogue": PATHS.concept_catalogue()}
    if "hard" in config["analyses"]["raters"]["negatives"]:
        inputs["features"] = PATHS.features(rater_model(), dataset, "test")
    if config["mode"] == "demo":
        inputs["images"] = image_root(dataset)
    return inputs


def rater_sheet_settings():
    """The settings that shape the sheets (params: a change re-runs them); not 'enabled',
    which only says whether rule all asks for them, nor 'model', whose features are an input."""
    raters = config["analyses"]["raters"]
    return {key: raters[key] for key in ("concepts_per_dataset", "tasks_per_concept", "references", "image_size", "seed")}


def rater_sheet_outputs(datasets=None):
    return [path for dataset in (datasets or DATASETS) for path in (PATHS.rater_sheets(dataset), PATHS.rater_key(dataset))]


def rater_sheet_targets():
    """The sheets of every dataset, for rule all, when analyses.raters.enabled."""
    return rater_sheet_outputs() if config["analyses"]["raters"]["enabled"] else []


# analyses stage ----------------------------------------------------------------------------

ANALYSES_CONFIG = config["analyses"]
# Per (model, dataset) analyses switched on, in the order of imagenet_cog.core.layout.ANALYSES.
ENABLED_ANALYSES = [
    analysis for analysis in ("kmeans", "alignment_uniformity", "learnability") if ANALYSES_CONFIG[analysis]["enabled"]
]
if ANALYSES_CONFIG["agreement"]["enabled"] and not ANALYSES_CONFIG["kmeans"]["enabled"]:
    raise WorkflowError(
        "config.yaml: analyses.agreement.enabled compares the models' k-means clusterings, but "
        "analyses.kmeans.enabled is false; switch k-means on or agreement off."
    )


def agreement_enabled():
    return ANALYSES_CONFIG["agreement"]["enabled"] and ANALYSES_CONFIG["kmeans"]["enabled"]


def analyses_switched_on():
    """Names of the analyses, tables and figures to make (agreement included)."""
    return [*ENABLED_ANALYSES, *(["agreement"] if agreement_enabled() else [])]


def test_images_per_concept(dataset):
    """Test images each concept of ``dataset`` has: the demo's or the level split's size;
    IN-1K's official validation set has 50 per class."""
    if config["mode"] == "demo":
        return config["demo"]["test_images_per_concept"]
    return 50 if dataset == "in1k" else config["splits"]["test_per_concept"]


if ANALYSES_CONFIG["learnability"]["enabled"]:
    for dataset in DATASETS:
        references = ANALYSES_CONFIG["learnability"]["references"]
        if references + 1 > test_images_per_concept(dataset):
            raise WorkflowError(
                f"config.yaml: analyses.learnability.references is {references}, but each task needs "
                f"M + 1 = {references + 1} test images of a concept and {dataset} has "
                f"{test_images_per_concept(dataset)} per concept; lower analyses.learnability.references "
                f"to at most {test_images_per_concept(dataset) - 1}."
            )


def analysis_results():
    """Every per-(model, dataset) analysis JSON the summary collects."""
    return [
        PATHS.analysis_result(model, dataset, analysis)
        for model in result_models()
        for dataset in DATASETS
        for analysis in ENABLED_ANALYSES
    ]


def agreement_matrices():
    return {dataset: PATHS.agreement_matrix(dataset) for dataset in DATASETS} if agreement_enabled() else {}


def analysis_side_outputs():
    """The TSVs written beside the analysis JSONs."""
    return [
        path
        for model in result_models()
        for dataset in DATASETS
        for path in (
            *([PATHS.kmeans_assignments(model, dataset)] if "kmeans" in ENABLED_ANALYSES else []),
            *([PATHS.learnability_concepts(model, dataset)] if "learnability" in ENABLED_ANALYSES else []),
        )
    ]


def analysis_targets():
    """Every file of the analyses stage; none when every analysis is switched off. The
    per-(model, dataset) results are listed too: Snakemake re-creates a lost file only when
    a target asks for it, and the summary made from it would otherwise stay as it is."""
    if not analyses_switched_on():
        return []
    return [
        *analysis_results(),
        *analysis_side_outputs(),
        PATHS.analyses_summary(),
        *agreement_matrices().values(),
        *PATHS.analysis_tables(analyses_switched_on(), DATASETS),
        *PATHS.analysis_figures(analyses_switched_on()),
    ]


def analyses_rendering_arguments():
    agreement = " ".join(f"{dataset}={path}" for dataset, path in agreement_matrices().items())
    return (
        f"--results-root {PATHS.root} --models {shlex.quote(models_json())} --datasets {' '.join(DATASETS)} "
        f"--analyses {' '.join(analyses_switched_on())}" + (f" --agreement {agreement}" if agreement else "")
    )


def analysis_table_report(name):
    """An analyses table's CSV as a report entry (Markdown and LaTeX beside it)."""
    caption = "analyses_agreement.rst" if name.startswith("analyses_agreement_") else f"{name}.rst"
    dataset = (
        name.rsplit("_", 1)[1].upper().replace("IN1K", "IN-1K") if name.startswith("analyses_agreement_") else "IN-1K and levels"
    )
    return report(
        PATHS.table(name, "csv"),
        caption=f"../report/{caption}",
        category="Analyses",
        subcategory="Tables",
        labels={"table": name.removeprefix("analyses_"), "dataset": dataset},
    )


def analysis_figure_report(name):
    return report(
        PATHS.figure(name, "png"),
        caption=f"../report/{name}.rst",
        category="Analyses",
        subcategory="Figures",
        labels={"figure": name.removeprefix("analyses_")},
    )


# level sets stage: inputs ------------------------------------------------------------


def level_set_inputs(wildcards):
    inputs = {
        "wordnet": PATHS.wordnet_corpus(),
        "catalogue": PATHS.concept_catalogue(),
        "lin_ranking": PATHS.ranking(),
        "lin_levels": [PATHS.level_concepts(level) for level in LEVEL_NAMES],
    }
    if wildcards.level_set == "word2vec":
        inputs["embeddings"] = word_vectors_file()
    return inputs


# label-noise audit (supp. A.3) ------------------------------------------------------------

AUDIT_SETTINGS = config["label_audit"]


def audit_pairs():
    """[classifier dataset, image dataset] pairs: label_audit.pairs, or by default every
    configured level's on IN-1K and IN-1K's on the last configured level."""
    if AUDIT_SETTINGS["pairs"] is not None:
        pairs = [tuple(pair) for pair in AUDIT_SETTINGS["pairs"]]
    else:
        levels = [dataset for dataset in DATASETS if dataset != "in1k"]
        pairs = [(level, "in1k") for level in levels] + ([("in1k", levels[-1])] if levels else [])
        if "in1k" not in DATASETS:
            pairs = []
    for pair in pairs:
        unknown = [dataset for dataset in pair if dataset not in DATASETS]
        if unknown:
            raise WorkflowError(
                f"config.yaml: label_audit.pairs has {list(pair)}, but {', '.join(unknown)} is not in "
                f"'datasets' ({', '.join(DATASETS)}); fix the pair or add the dataset."
            )
    return pairs


AUDIT_PAIRS = audit_pairs() if AUDIT_SETTINGS["enabled"] else []
if AUDIT_PAIRS and "all" not in SHOTS:
    raise WorkflowError(
        "config.yaml: label_audit.enabled needs the N = all probes, but probes.shots has no 'all'; "
        "add it or set label_audit.enabled: false."
    )


def audit_inputs(wildcards):
    sources = sorted({source for source, _ in AUDIT_PAIRS})
    targets = sorted({target for _, target in AUDIT_PAIRS})
    return {
        "results": [PATHS.probe_result(wildcards.model, source, "all", seed) for source in sources for seed in SEEDS],
        "train": [PATHS.features(wildcards.model, source, "train") for source in sources],
        "test": [PATHS.features(wildcards.model, target, "test") for target in targets],
        "concepts": PATHS.concept_catalogue(),
        "images": [image_root(target) for target in targets],
    }


def audit_options():
    """The pairs, seeds and image roots of the audit command."""
    targets = sorted({target for _, target in AUDIT_PAIRS})
    return " ".join(
        [f"--pair {source} {target}" for source, target in AUDIT_PAIRS]
        + ["--seeds " + " ".join(SEEDS)]
        + [f"--image-root {shlex.quote(f'{target}={image_root(target)}')}" for target in targets]
    )


def audit_targets():
    return [
        path
        for model in (result_models() if AUDIT_PAIRS else [])
        for path in (PATHS.audit_predictions(model), PATHS.audit_shares(model), PATHS.audit_contact_sheet(model))
    ]


# class-balanced variant (supp. A.4) --------------------------------------------------------

BALANCED_SETTINGS = config["balanced"]
BALANCED_SEEDS = [str(seed) for seed in (BALANCED_SETTINGS["seeds"] or config["probes"]["seeds"][:1])]
if BALANCED_SETTINGS["enabled"]:
    if "all" not in SHOTS:
        raise WorkflowError(
            "config.yaml: balanced.enabled compares N = all probes, but probes.shots has no 'all'; "
            "add it or set balanced.enabled: false."
        )
    if not set(BALANCED_SEEDS) <= set(SEEDS):
        raise WorkflowError(
            f"config.yaml: balanced.seeds {BALANCED_SEEDS} must be among probes.seeds {SEEDS}, whose default "
            f"probes they are compared with."
        )


def balanced_probe_results():
    return probe_results(
        models=result_models(), datasets=[f"balanced-{dataset}" for dataset in DATASETS], shots=["all"], seeds=BALANCED_SEEDS
    )


def balanced_outputs():
    return [PATHS.table("balanced", extension) for extension in TABLE_FORMATS] + [
        PATHS.figure("balanced", extension) for extension in FIGURE_FORMATS
    ]


def balanced_targets():
    if not BALANCED_SETTINGS["enabled"]:
        return []
    return [*(PATHS.balanced_split(dataset) for dataset in DATASETS), *balanced_probe_results(), *balanced_outputs()]


# IN-1K-blurred (supp. E) ----------------------------------------------------------------------


def blurred_probe_results(models=None):
    return probe_results(models=models or result_models(), datasets=BLURRED_DATASETS, shots=BLURRED_SHOTS, seeds=BLURRED_SEEDS)


def blurred_targets():
    if not BLURRED_DATASETS:
        return []
    return [
        *blurred_probe_results(),
        *(PATHS.table("in1k_blurred", extension) for extension in TABLE_FORMATS),
        *(PATHS.figure("in1k_blurred", extension) for extension in FIGURE_FORMATS),
    ]
