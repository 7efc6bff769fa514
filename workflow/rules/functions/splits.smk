# Splits stage: what the rules of splits.smk use, besides common.smk's: its input
# functions, config checks and the stage's targets (kept apart from the rules, as
# snakemake --lint asks).


def demo_image_source(dataset):
    """The demo image folder of a dataset: in1k, pool (drawn for level sets) or in21k."""
    return dataset if dataset in (naming.IN1K, naming.IN1K_BLURRED, naming.POOL) else "in21k"


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


def image_split_inputs(wildcards):
    """A dataset's concept list (and the demo images or the authors' split pickle); real
    ImageNet folders are params, not inputs: Snakemake would stat millions of files."""
    dataset = wildcards.dataset
    # IN-1K-blurred has IN-1K's concepts
    concepts_of = naming.IN1K if dataset == naming.IN1K_BLURRED else dataset
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


def splits_targets():
    """What a full run makes of this stage (rule all gathers each stage's list); the split
    tables are inputs of later stages."""
    return [PATHS.split_summary()]
