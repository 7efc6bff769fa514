# ImageNet-CoG: concept generalization of frozen visual features (Sariyildiz et al., ICCV 2021).
#
# One rule file per stage, in stage order, each with its package under workflow/imagenet_cog/:
#   levels   WordNet 3.0 -> eligible unseen concepts -> Lin ranking -> levels L1..L5; level sets
#   demo     the built-in demo's generated images and its pretrained network (mode: demo)
#   splits   the train/test images of each dataset
#   features each model x dataset x split, sharded, into HDF5; level-set datasets as views
#   probes   Optuna-tuned logistic-regression probes per model x dataset x shots x seed
#   results  tables, figures and the Snakemake report
#   analyses k-means, alignment/uniformity, learnability and clustering agreement per model x
#            dataset; forced-choice sheets for human raters
#   series   a training run's checkpoints as one series: RankMe per checkpoint, top-1 per level
#            against step, the best step and the final checkpoint against it
#   variants class-balanced, IN-1K-blurred and the label-noise audit
#   finetune the fine-tuning control: backbones trained on each dataset, the frozen probe
#            relative to them (finetune.enabled)
#   plan     what a run costs before it starts (snakemake plan; no image read)
# Each includes its input functions, checks and targets from rules/functions/<stage>.smk;
# common.smk (and the files it includes from common/) holds what they share. docs/architecture.md
# draws the whole.
#
# Run from this folder: `snakemake --cores 8` (the demo in config.yaml), or on SLURM with
# `snakemake --profile slurm`. See README.md.

import os
import sys

from snakemake.utils import min_version

# The workflow's own package, importable without installation.
sys.path.insert(0, os.path.join(workflow.basedir, "workflow"))

min_version("9.3")


# From this folder, or from any other (`-s path/to/Snakefile`, `--directory run/`): the working
# directory's config.yaml when it has one, else this workflow's own (the demo); --configfile
# files are laid over it and the schema's defaults fill what none of them sets. Every output,
# log and benchmark is written under results_dir (default results/) in the working directory.
configfile: "config.yaml" if os.path.exists("config.yaml") else os.path.join(workflow.basedir, "config.yaml")


# A file laid over config.yaml removes one of its models by setting it to null (the paper's
# config removes the demo's models so).
from imagenet_cog.models.registry import kept_models

config["models"] = kept_models(config.get("models", {}))


# Checked against the schema, its defaults filled in; an error is one screen naming the file
# that set the key (imagenet_cog.core.config_check).
from imagenet_cog.core.config_check import ConfigError, check_config, config_sources, load_schema

CONFIG_SOURCES = config_sources(workflow.configfiles, workflow.overwrite_configfiles, workflow.config_settings.config)
try:
    check_config(config, load_schema(os.path.join(workflow.basedir, "workflow/schemas/config.schema.yaml")), CONFIG_SOURCES)
except ConfigError as error:
    raise WorkflowError(str(error)) from None


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/levels.smk"
include: "workflow/rules/demo.smk"
include: "workflow/rules/splits.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/probes.smk"
include: "workflow/rules/results.smk"
include: "workflow/rules/analyses.smk"
include: "workflow/rules/series.smk"
include: "workflow/rules/variants.smk"
include: "workflow/rules/finetune.smk"
include: "workflow/rules/plan.smk"


refuse_what_the_run_lacks()


# Before the first job: a run whose files do not fit on its disk stops (free_space in the
# schema). Warm start (warm_start, imagenet_cog/warm_start.py): on a local run the jobs fork
# from one process that imported torch once, instead of each importing it. A local run's
# scheduler goes without Snakemake's default job rate limit (common/jobs.smk says why). The models that
# break the benchmark's premise (pretrained beyond IN-1K, or undeclared) are named first, a note.
onstart:
    note_pretraining()
    check_free_space()
    forget_failure_reasons()
    drop_the_default_job_rate_limit()
    start_warm_start()


onsuccess:
    stop_warm_start()


# A job that failed on purpose (imagenet_cog.core.failures) is told by its reason, once.
onerror:
    stop_warm_start()
    show_failure_reasons()


# Each stage's own list of what a full run makes (the rest are inputs of later stages).
rule all:
    default_target: True
    input:
        levels_targets(),
        splits_targets(),
        features_targets,
        probes_targets(),
        results_targets(),
        analyses_targets(),
        series_targets(),
        variants_targets(),
        finetune_targets(),
