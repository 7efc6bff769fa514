# ImageNet-CoG: concept generalization of frozen visual features (Sariyildiz et al., ICCV 2021).
#
#   levels   WordNet 3.0 -> eligible unseen concepts -> Lin ranking -> levels L1..L5 -> splits
#   features each model x dataset x split, sharded, into HDF5
#   probes   Optuna-tuned logistic-regression probes per model x dataset x shots x seed
#   results  tables, figures and the Snakemake report
#
# Run from this folder: `snakemake --cores 8` (the demo in config.yaml), or on SLURM with
# `snakemake --profile slurm`. See README.md.

from snakemake.utils import min_version, validate

min_version("9.3")


configfile: "config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/levels.smk"
include: "workflow/rules/splits.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/probes.smk"
include: "workflow/rules/results.smk"


rule all:
    input:
        final_outputs(),
        all_feature_shards,
    default_target: True
