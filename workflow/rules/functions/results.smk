# Results stage: what the rules of results.smk use, besides common.smk's: its input
# functions, config checks and the stage's targets (kept apart from the rules, as
# snakemake --lint asks).

import json
import os
import shlex

from imagenet_cog.core.layout import (
    DROP_NAME,
    FIGURE_FORMATS,
    LEADERBOARD_NAME,
    PUBLISHED_FIGURE,
    STATISTICS_TABLES,
    TABLE_FORMATS,
    kind_result_name,
    published_table_names,
    result_figure_names,
    result_table_names,
)
from imagenet_cog.results.paper import published_model_names, resolve_paper_names
from imagenet_cog.results.protocol import run_protocol

if config["results"]["baseline_model"] not in config["models"]:
    raise WorkflowError(
        f"config.yaml: results.baseline_model '{config['results']['baseline_model']}' is not "
        f"a key of 'models' ({', '.join(MODELS)}); set it to one of them."
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


# The tables and figures of a kind besides linear with a set of its own (its module's texts:
# the k-NN's) exist only when probes.kinds has it: a run without it plans exactly
# the outputs it had. Their commands see the kind in the summary's rows (no new param or
# option, so finished runs stay current).
TABLED_KINDS = [name for name in PROBE_KINDS if name != naming.LINEAR and kind_of_result(name).texts]
RESULT_TABLE_NAMES = result_table_names(DATASETS, TABLED_KINDS)
RESULT_FIGURE_NAMES = result_figure_names(TABLED_KINDS)


def result_probe_files():
    """Probe results the summary reads; with results.allow_missing only those that exist,
    so that tables can be made while some probe jobs failed or are still to run."""
    expected = all_probe_results(models=result_models()) + level_set_probe_results(models=result_models())
    if config["results"]["allow_missing"]:
        return [path for path in expected if os.path.exists(path)]
    return expected


def kind_models_option():
    """--kind-models for the kinds that probe other models than the result models
    (probes.kind_models); none when every kind probes them all, the command as it was."""
    differing = [f"{kind}={','.join(models)}" for kind, models in KIND_MODELS.items() if models != result_models()]
    return f" --kind-models {' '.join(differing)}" if differing else ""


def grid_arguments():
    return (
        f"--results-root {PATHS.root} --models {shlex.quote(models_json())} "
        f"--datasets {' '.join(DATASETS)} --shots {' '.join(SHOTS)} --seeds {' '.join(SEEDS)} "
        f"--kinds {' '.join(PROBE_KINDS)} --other-kinds-shots {' '.join(OTHER_KINDS_SHOTS)} "
        f"--other-kinds-seeds {' '.join(OTHER_KINDS_SEEDS)}{kind_models_option()}"
    )


def level_set_grid_arguments():
    """The level-set probes the summary also covers (none: no option, the Lin-only command)."""
    if not LEVEL_SET_DATASETS:
        return ""
    models = f" --level-set-models {' '.join(LEVEL_SET_MODELS)}" if LEVEL_SET_MODELS != result_models() else ""
    return (
        f"--level-set-datasets {' '.join(LEVEL_SET_DATASETS)} --level-set-shots {' '.join(LEVEL_SET_SHOTS)} "
        f"--level-set-seeds {' '.join(LEVEL_SET_SEEDS)}{models}"
    )


def tabled_kind_of(name):
    """The kind (of TABLED_KINDS) a result table is named for (layout.kind_result_name), or
    None for the linear probe's and the other kinds' tables."""
    return next((kind for kind in TABLED_KINDS if name.startswith(f"{kind}_")), None)


def table_report(name):
    """A table's CSV as a report entry (its Markdown and LaTeX versions lie next to it)."""
    probe_kind_tables = {
        "probe_kinds": "MLP probes relative to linear",
        "pca_top1": "PCA + linear, top-1",
        "pca_relative": "PCA + linear, relative to baseline",
        **{kind_result_name("vs_linear", kind): f"{KINDS[kind].title} beside linear, top-1" for kind in TABLED_KINDS},
        **{kind_result_name("rank_agreement", kind): f"Kendall's tau {KINDS[kind].title} vs linear" for kind in TABLED_KINDS},
    }
    if name in probe_kind_tables:
        return report_output(
            PATHS.table(name, "csv"),
            caption=f"table_{name}.rst",
            category="Tables",
            subcategory="Probe kinds",
            labels={"table": probe_kind_tables[name], "dataset": "IN-1K and levels"},
        )
    tabled = tabled_kind_of(name)
    plain = name.removeprefix(f"{tabled}_") if tabled else name
    absolute = plain.startswith("top1_")
    across_levels = plain.endswith("_levels")
    dataset = "IN-1K and levels" if across_levels else plain.split("_", 1)[1].upper().replace("IN1K", "IN-1K")
    kind = ("Top-1" if absolute else "Relative to baseline") + (", all images" if across_levels else " per N")
    if tabled:
        kind = f"{KINDS[tabled].title} {kind[0].lower()}{kind[1:]}"
    caption = f"table_{f'{tabled}_' if tabled else ''}{'top1' if absolute else 'relative'}_{'levels' if across_levels else 'dataset'}.rst"
    return report_output(
        PATHS.table(name, "csv"),
        caption=caption,
        category="Tables",
        subcategory=kind,
        labels={"table": kind, "dataset": dataset},
    )


def published_report(name):
    """published_comparison (every compared cell) or published_<dataset> as a report entry."""
    dataset = name.split("_", 1)[1]
    across = dataset == "comparison"
    return report_output(
        PATHS.table(name, "csv"),
        caption=f"{'published_comparison' if across else 'published_dataset'}.rst",
        category="Tables",
        subcategory="Ours - published",
        labels={
            "table": "ours vs published, every cell" if across else "ours - published per N",
            "dataset": "all" if across else dataset.upper().replace("IN1K", "IN-1K"),
        },
    )


# The leaderboard's sources beyond the results stage's own tables: option name (its
# command's --<name>, dashes for underscores) -> a function listing the files of this run. A
# later stage whose files the leaderboard reads adds its entry (the analyses stage: the
# per-concept tables, the detection seed tables); the rule's input function reads them once
# every stage's file is read.
LEADERBOARD_SOURCES = {"off_grid_results": off_grid_results}


def leaderboard_inputs(wildcards):
    return {
        "summary": PATHS.results_summary(),
        "seeds": PATHS.seed_results(),
        "published": PUBLISHED_TOP1,
        **{name: files() for name, files in LEADERBOARD_SOURCES.items()},
    }


def leaderboard_sources(wildcards, input):
    """--<source> FILES of each source the run has."""
    return " ".join(f"--{name.replace('_', '-')} {' '.join(input[name])}" for name in LEADERBOARD_SOURCES if input[name])


def results_targets():
    """What a full run makes of this stage (rule all gathers each stage's list), the
    tables, figures and timings, and the level sets' table and figure when level sets are
    configured."""
    level_set_results = (
        [
            PATHS.level_sets_figure("png"),
            PATHS.level_sets_figure("pdf"),
            *(PATHS.level_sets_table(extension) for extension in TABLE_FORMATS),
        ]
        if LEVEL_SET_DATASETS
        else []
    )
    return [
        *PATHS.result_targets(DATASETS, TABLED_KINDS),
        *level_set_results,
        *off_grid_tables(),
        *PATHS.leaderboard_outputs(),
    ]
