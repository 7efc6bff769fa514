# Fine-tuning stage: what the rules of finetune.smk use, besides common.smk's: its input
# functions, config checks and the stage's targets (kept apart from the rules, as
# snakemake --lint asks).

import json
import shlex

from imagenet_cog.core.layout import FIGURE_FORMATS, FINETUNE_NAME, TABLE_FORMATS
from imagenet_cog.finetune.recipe import Recipe
from imagenet_cog.plan.cost import Dataset, finetune_seconds

FINETUNE_SETTINGS = config["finetune"]
FINETUNE_MODELS = (FINETUNE_SETTINGS["models"] or [config["results"]["baseline_model"]]) if FINETUNE_SETTINGS["enabled"] else []
FINETUNE_DATASETS = FINETUNE_SETTINGS["datasets"] or DATASETS
if FINETUNE_SETTINGS["enabled"]:
    unknown_models = [model for model in FINETUNE_MODELS if model not in config["models"]]
    if unknown_models:
        raise WorkflowError(
            f"config.yaml: finetune.models names {', '.join(unknown_models)}, which 'models' does not define "
            f"({', '.join(MODELS)}); fix the list (null: results.baseline_model)."
        )
    unknown_datasets = [dataset for dataset in FINETUNE_DATASETS if dataset not in DATASETS]
    if unknown_datasets:
        raise WorkflowError(
            f"config.yaml: finetune.datasets names {', '.join(unknown_datasets)}, which are not among 'datasets' "
            f"({', '.join(DATASETS)}); fix the list (null: all of them)."
        )
    if "all" not in SHOTS:
        raise WorkflowError(
            "config.yaml: finetune.enabled compares the fine-tuned networks with the N = all linear probe, but "
            "probes.shots has no 'all'; add it or set finetune.enabled: false."
        )
    # the recipe's own checks (the schema has checked each value), at parse time
    Recipe.from_config(FINETUNE_SETTINGS["recipe"])

# One process per GPU, each with its image loaders; on a CPU one process.
FINETUNE_GPUS = 0 if FINETUNE_SETTINGS["device"] == "cpu" else FINETUNE_SETTINGS["gpus"]
FINETUNE_THREADS = max(FINETUNE_GPUS, 1) * (FINETUNE_SETTINGS["num_workers"] + 1)


def finetune_launcher():
    """The command's start: one Python process, or torchrun's, one per GPU of the job's node."""
    if FINETUNE_GPUS > 1:
        return f"torchrun --standalone --nproc-per-node {FINETUNE_GPUS} -m imagenet_cog finetune"
    return python_command("finetune")


def finetune_minutes(wildcards):
    """The job's limit: the plan's price of it at the limit rates (probes.smk), times their
    margin, spread over the job's GPUs, above a start-up allowance."""
    try:
        train, test = (split_row_count(wildcards.dataset, split) for split in SPLITS)
    except IncompleteCheckpointException:
        return 30  # dry runs before the split tables exist, as the probes' limits
    data = Dataset(wildcards.dataset, train, test, config["levels"]["concepts_per_level"], 0)
    arch = model_spec(wildcards.model).arch
    seconds = finetune_seconds(data, FINETUNE_SETTINGS["recipe"]["epochs"], LIMIT_RATES, arch)
    return int(30 + LIMIT_MARGIN * seconds / 60 / max(FINETUNE_GPUS, 1))


def finetune_results():
    return [PATHS.finetune_result(model, dataset) for model in FINETUNE_MODELS for dataset in FINETUNE_DATASETS]


def finetune_outputs():
    return [PATHS.table(FINETUNE_NAME, extension) for extension in TABLE_FORMATS] + [
        PATHS.figure(FINETUNE_NAME, extension) for extension in FIGURE_FORMATS
    ]


def finetune_models_json():
    return json.dumps({model: {"label": config["models"][model].get("label", model)} for model in FINETUNE_MODELS})


def finetune_targets():
    if not FINETUNE_SETTINGS["enabled"]:
        return []
    return [*finetune_results(), *finetune_outputs()]
