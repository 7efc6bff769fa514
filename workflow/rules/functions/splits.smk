# Splits stage: what the rules of splits.smk use, besides common.smk's: its input
# functions, config checks and the stage's targets (kept apart from the rules, as
# snakemake --lint asks).

import collections
import functools
import os
import shlex
from pathlib import Path

from imagenet_cog.core.image_layouts import ARCHIVE_LAYOUTS, FOLDERS, SHARD_LAYOUTS
from imagenet_cog.core.image_roots import ImageRootError, hub_layout, resolve_layout

# Threads of a split job: on real data its folders are listed that many at once (listing waits
# on the file system, so a few threads repay); the demo's few small folders take one, so that
# its split jobs run beside the pretraining on a small machine rather than wait for every core.
SPLIT_THREADS = 1 if config["mode"] == "demo" else 4


def demo_image_source(dataset):
    """The demo image folder of a dataset: in1k, pool (drawn for level sets) or in21k."""
    return dataset if dataset in (naming.IN1K, naming.IN1K_BLURRED, naming.POOL) else naming.IN21K


# the config key of each dataset's image root (the levels and the pool: IN-21K's)
ROOT_KEYS = {naming.IN1K: "in1k_root", naming.IN1K_BLURRED: "in1k_blurred_root"}


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


def image_source(dataset):
    """The image root a dataset's images come from: in21k, in1k or in1k_blurred."""
    return dataset if dataset in (naming.IN1K, naming.IN1K_BLURRED) else naming.IN21K


@functools.cache
def root_layout(source):
    """The layout of an image root (folders, tars, tar, wds, parquet): data.<source>_layout, or detected
    from what the root holds; the demo's images are folders."""
    if config["mode"] == "demo":
        return FOLDERS
    root = config["data"][f"{source}_root"]
    if not root:
        raise WorkflowError(
            f"config.yaml: mode is 'imagenet' but data.{source}_root is not set; point it at your copy of "
            f"ImageNet (docs/imagenet.md) or set mode: demo."
        )
    try:
        return resolve_layout(source, root, config["data"][f"{source}_layout"])
    except ImageRootError as error:
        raise WorkflowError(f"config: {error}") from None


if config["mode"] == "imagenet":
    for needed_source in sorted({image_source(dataset) for dataset in DATASETS + BLURRED_DATASETS}):
        note_lack("image roots", f"data.{needed_source}_root", root_layout, needed_source)


def hub_copy_options():
    """needed_synsets on a Hub copy's shards (every shard is needed, the samples being
    shuffled across them): its root and layout; nothing for the release's tars. Only the
    Hub copy is looked for: a root still empty, or still being filled with the tars this
    lists, is no error here."""
    root = config["data"]["in21k_root"]
    if config["mode"] != "imagenet" or not root or not os.path.isdir(root):
        return ""
    configured = config["data"]["in21k_layout"]
    layout = hub_layout(Path(root)) if configured == "auto" else configured
    return f" --root {shlex.quote(root)} --layout {layout}" if layout in SHARD_LAYOUTS else ""


def image_layout(dataset):
    return root_layout(image_source(dataset))


def image_index(dataset):
    """The image index of a dataset's root in a tar layout (none for folders). Ancient: an
    index rebuilt after an archive changed re-runs no finished split or shard."""
    source = image_source(dataset)
    if config["mode"] == "demo" or root_layout(source) not in ARCHIVE_LAYOUTS:
        return {}
    return {"index": ancient(PATHS.image_index(source))}


def image_index_inputs(wildcards):
    """The image index of the job's dataset (image_index), as a rule's input."""
    return image_index(wildcards.dataset)


def image_reading_options(dataset, prefix="--"):
    """A tar layout of a dataset's root and its index, for the split command (extraction's
    options: prefix '--image-'); nothing for folders, the commands' default, so that the
    commands of runs finished before tars were read stay as they were."""
    index = image_index(dataset)
    if not index:
        return ""
    return f"{prefix}layout {image_layout(dataset)} {prefix}index {index['index']}"


def split_source_options(dataset, input):
    """The split command's options beyond the concepts and the root: the published splits,
    a tar layout and its index, IN-1K's validation labels. One parameter (named published:
    its name is in the shell command, whose text Snakemake compares, so a new name would
    re-split, then re-extract, every finished run)."""
    published = f"--published-splits {input.published}" if "published" in input.keys() else ""
    options = (published, image_reading_options(dataset), val_labels_option(dataset))
    return " ".join(option for option in options if option)


def needs_pool(level_set):
    """Whether a set's views read "pool": word2vec re-ranks Lin's level concepts only; in
    demo mode every set may pick pool concepts, the only ones with images besides Lin's."""
    return config["mode"] == "demo" or level_set != "word2vec"


POOL_NEEDED = any(needs_pool(naming.level_set_of(dataset)) for dataset in LEVEL_SET_DATASETS)


def run_image_datasets():
    """Every dataset of the run whose images are read (the pool where a level set needs it)."""
    return DATASETS + ([naming.POOL] if POOL_NEEDED else []) + BLURRED_DATASETS


def preflight_datasets():
    """The datasets the pre-flight check looks up: those of the run whose image root is set
    (a dataset without one stops the run when planned, naming the key)."""
    return [dataset for dataset in run_image_datasets() if config["data"][f"{image_source(dataset)}_root"]]


def concept_list(dataset):
    """A dataset's concept list (IN-1K-blurred has IN-1K's concepts)."""
    return PATHS.level_concepts(naming.IN1K if dataset == naming.IN1K_BLURRED else dataset)


def preflight_inputs(wildcards):
    """The concept lists of every dataset of the run, the shipped Fall 2011 counts, the
    index of each root in a tar layout and the authors' split pickle."""
    inputs = {
        "concepts": [concept_list(dataset) for dataset in preflight_datasets()],
        "counts": config["concepts"]["image_counts"],
    }
    for dataset in preflight_datasets():
        for key, path in image_index(dataset).items():
            inputs[f"{key}_{image_source(dataset)}"] = path
    if any(uses_published_splits(dataset) for dataset in DATASETS):
        inputs["published"] = config["levels"]["published_splits"]
    return inputs


def preflight_options(wildcards, input):
    """The preflight command's options: datasets, roots, layouts, indexes and the split sizes."""
    datasets = preflight_datasets()
    sources = sorted({image_source(dataset) for dataset in datasets})
    options = [f"--dataset {dataset}={concept_list(dataset)}" for dataset in datasets]
    options += [f"--root {source}={shlex.quote(config['data'][f'{source}_root'])}" for source in sources]
    options += [f"--layout {source}={root_layout(source)}" for source in sources]
    options += [f"--index {source}={input[f'index_{source}']}" for source in sources if f"index_{source}" in input.keys()]
    if config["data"]["in1k_val_labels"]:
        options.append(f"--val-labels {shlex.quote(config['data']['in1k_val_labels'])}")
    if config["balanced"]["enabled"]:
        options.append(f"--balanced-train {config['balanced']['train_per_concept']} --balanced-datasets {' '.join(DATASETS)}")
    if "published" in input.keys():
        published = [dataset for dataset in DATASETS if uses_published_splits(dataset)]
        options.append(f"--published-splits {input.published} --published-datasets {' '.join(published)}")
    return " ".join(options)


def val_labels_option(dataset):
    """IN-1K's validation labels file, when set (the default: the devkit in the root)."""
    labels = config["data"]["in1k_val_labels"]
    if config["mode"] == "imagenet" and dataset == naming.IN1K and labels:
        return f"--val-labels {shlex.quote(labels)}"
    return ""


def image_root_setting(dataset):
    """The config key behind ``image_root(dataset)``, named in the split stage's errors."""
    if config["mode"] == "demo":
        return "mode: demo, generated images"
    return f"data.{ROOT_KEYS.get(dataset, 'in21k_root')}"


def uses_published_splits(dataset):
    return (
        dataset not in (naming.IN1K, naming.POOL)
        and config["mode"] == "imagenet"
        and config["levels"]["source"] == "published"
        and bool(config["levels"]["published_splits"])
    )


def dataset_concepts(dataset):
    """A dataset's concept list (wnids, one a line): the demo world's concepts or the levels stage's."""
    # IN-1K-blurred has IN-1K's concepts
    concepts_of = naming.IN1K if dataset == naming.IN1K_BLURRED else dataset
    return PATHS.demo_concepts(concepts_of) if config["mode"] == "demo" else PATHS.level_concepts(concepts_of)


def image_split_inputs(wildcards):
    """A dataset's concept list (and the demo images or the authors' split pickle); real
    ImageNet folders are params, not inputs: Snakemake would stat millions of files."""
    dataset = wildcards.dataset
    if config["mode"] == "demo":
        return {
            "concepts": dataset_concepts(dataset),
            "images": PATHS.demo_images(demo_image_source(dataset)),
        }
    # the pre-flight check of the whole run first; ancient: re-checking re-draws no split
    inputs = {
        "concepts": dataset_concepts(dataset),
        "preflight": ancient(PATHS.preflight()),
        **image_index(dataset),
    }
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
    status = os.stat(split_list)
    return split_row_counts(split_list, status.st_mtime_ns, status.st_size)[split]


@functools.cache
def split_row_counts(split_list, mtime_ns, size):
    """Rows per split of a split table, counted once per version of the file: every probe job's
    memory and limit ask for them, and a paper-scale table is 1.3 M lines (the scale rehearsal:
    re-read per job, they made a dry run of the 31 models take minutes)."""
    counts = collections.Counter()
    with open(split_list) as stream:
        next(stream)
        for line in stream:
            counts[line.split("\t", 4)[3].strip()] += 1
    return counts


def splits_targets():
    """What a full run makes of this stage (rule all gathers each stage's list); the split
    tables are inputs of later stages."""
    return [PATHS.split_summary()]
