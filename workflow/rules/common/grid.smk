# The run's grid: its models, datasets, levels, N and seeds, the wildcard constraints, and the
# models each stage runs for.

import functools
import re

from imagenet_cog.core import naming
from imagenet_cog.core.config_check import with_source

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
