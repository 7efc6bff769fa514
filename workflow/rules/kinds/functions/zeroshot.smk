# The zero-shot kind (imagenet_cog/probes/kinds/zeroshot.py): what the rules of
# kinds/zeroshot.smk use, besides the stages' functions before it: its models, the sets of
# concepts it names, its input functions and its targets (kept apart from the rules, as
# snakemake --lint asks).

import os
import shlex

from imagenet_cog.core.layout import FIGURE_FORMATS, TABLE_FORMATS
from imagenet_cog.models.registry import has_text_tower
from imagenet_cog.probes.kinds.zeroshot import named_sets

ZEROSHOT_SETTINGS = config["probes"][naming.ZEROSHOT]
# the workflow's one environment, as this folder's rule file names it (Snakemake reads a
# rule's conda file relative to the file that defines the rule)
ZEROSHOT_CONDA_ENVIRONMENT = os.path.join("..", CONDA_ENVIRONMENT)
ZEROSHOT_MODELS = stage_models("probes.zeroshot", needs_text_tower=True)
# a run whose results leave its image-text models out (results.models) has no zero-shot jobs;
# one with no image-text model at all asked for a kind it cannot run
if not any(has_text_tower(config["models"][model]) for model in MODELS):
    raise WorkflowError(
        "config.yaml: probes.kinds has zeroshot, but no model has a text tower to name concepts with: add an "
        "image-text model (arch: open_clip/<name>, image_features: embedding), or take zeroshot out of probes.kinds."
    )
ZEROSHOT_NAMED = named_sets(DATASETS, ZEROSHOT_SETTINGS)


def named_datasets(named):
    """The datasets a names table covers: one, or (open-set) every configured one."""
    return DATASETS if named == naming.OPEN_SET else [named]


def check_names_table(path, named):
    """A user's names table, read now: a broken one, one naming two concepts alike, or one
    naming other concepts than its dataset's (when the levels stage has listed them) is
    refused before any job, with its file, lines and fix."""
    from imagenet_cog.core.io import read_lines
    from imagenet_cog.core.names_table import NamesTableError, duplicate_names, foreign_concepts, read_names_table

    lists = {dataset: dataset_concepts(dataset) for dataset in dict.fromkeys(DATASETS + LEVEL_NAMES)}
    listed = {dataset: read_lines(concepts) for dataset, concepts in lists.items() if os.path.isfile(concepts)}
    try:
        names = read_names_table(path)
        problem = duplicate_names(path, names)
        if not problem and all(dataset in listed for dataset in named_datasets(named)):
            own = [wnid for dataset in named_datasets(named) for wnid in listed[dataset]]
            problem = foreign_concepts(path, names, named, own, listed)
    except NamesTableError as error:
        problem = str(error)
    if problem:
        raise WorkflowError(problem)


for named, table in ZEROSHOT_SETTINGS["names"].items():
    if named not in DATASETS + [naming.OPEN_SET]:
        raise WorkflowError(
            f"config.yaml: probes.zeroshot.names names {named!r} ({table}), which is neither a dataset of "
            f"'datasets' ({', '.join(DATASETS)}) nor {naming.OPEN_SET}: name one of them."
        )
    if os.path.isfile(table):
        check_names_table(table, named)
    else:
        note_missing(
            "names tables",
            f"probes.zeroshot.names.{named}",
            f"config: probes.zeroshot.names.{named} = {table!r} does not exist; fix the path or remove the entry "
            "(the concept_names rule then writes the table).",
        )
# the tables and figures of rule zeroshot_results
ZEROSHOT_TABLES = {
    naming.ZEROSHOT: "zero-shot beside linear",
    **({f"{naming.ZEROSHOT}_open_set": "open-set zero-shot"} if naming.OPEN_SET in ZEROSHOT_NAMED else {}),
}
ZEROSHOT_FIGURES = [naming.ZEROSHOT, f"{naming.ZEROSHOT}_vs_nshot"]


def concept_names_inputs(wildcards):
    """The probed concepts of each dataset a names table covers (the split tables' lists) and
    the IN-1K list its curated names are matched to."""
    return {
        "concepts": [
            image_split_inputs(SimpleNamespace(dataset=dataset))["concepts"] for dataset in named_datasets(wildcards.named)
        ],
        "in1k_synsets": concept_list_inputs(wildcards)["in1k_synsets"],
    }


def zeroshot_names_table(named):
    """The names table a zero-shot classifier is built from: the user's (probes.zeroshot.names)
    or the one rule concept_names writes."""
    return ZEROSHOT_SETTINGS["names"].get(named) or PATHS.concept_names(named)


def zeroshot_classifier_inputs(wildcards):
    """A classifier's names table, its model's checkpoint (when a file), the concept lists of
    the datasets the table names and of the others (whose concepts a wrong table names)."""
    named = named_datasets(wildcards.named)
    return {
        "names": zeroshot_names_table(wildcards.named),
        "checkpoint": model_checkpoint_inputs(wildcards),
        "concepts": [dataset_concepts(dataset) for dataset in named],
        "other_concepts": [dataset_concepts(dataset) for dataset in DATASETS if dataset not in named],
    }


def other_concepts_option(wildcards):
    """--other-concepts DATASET=FILE of every dataset the table does not name."""
    named = named_datasets(wildcards.named)
    pairs = [f"{dataset}={dataset_concepts(dataset)}" for dataset in DATASETS if dataset not in named]
    return f"--other-concepts {' '.join(pairs)}" if pairs else ""


def zeroshot_results():
    """Every zero-shot result of the run: each text-tower model on each dataset and the open set."""
    return [PATHS.zeroshot_result(model, named) for model in ZEROSHOT_MODELS for named in ZEROSHOT_NAMED]


def zeroshot_probe_inputs(wildcards):
    """A dataset's test features and split table (label -> wnid), or every dataset's for the open set."""
    datasets = named_datasets(wildcards.named)
    return {
        "test": [PATHS.features(wildcards.model, dataset, "test") for dataset in datasets],
        "splits": [PATHS.image_splits(dataset) for dataset in datasets],
        "classifier": PATHS.zeroshot_classifier(wildcards.model, wildcards.named),
        "names": zeroshot_names_table(wildcards.named),
    }


def zeroshot_mem_mb(wildcards):
    """The host holds the features of the datasets scored (both splits counted: a bound)."""
    datasets = named_datasets(wildcards.named)
    return int(2000 + sum(probe_feature_mb(SimpleNamespace(model=wildcards.model, dataset=dataset)) for dataset in datasets))


def zeroshot_tables():
    """The zero-shot tables and figures, where a model is scored."""
    if not ZEROSHOT_MODELS:
        return []
    return [PATHS.table(name, extension) for name in ZEROSHOT_TABLES for extension in TABLE_FORMATS] + [
        PATHS.figure(name, extension) for name in ZEROSHOT_FIGURES for extension in FIGURE_FORMATS
    ]


OFF_GRID_TARGETS.append(OffGridTargets(results=zeroshot_results, tables=zeroshot_tables))
