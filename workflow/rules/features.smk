# Features stage: frozen-backbone features (paper Sec. 3.4.1, supp. B.1), one job per
# (model, dataset, split, shard) so that a cluster runs shards side by side and a failed or
# changed model re-runs only its own shards; and the level sets' datasets as views over
# them (nothing is extracted twice). Logic: imagenet_cog/features/, imagenet_cog/models/.


include: "functions/features.smk"


# The two extraction rules, one per job shape: a shard (extract_features) or every shard of a
# split (extract_split, features.group: split). What they share is declared once in
# functions/features.smk: inputs, resources, params and the command's options.
#
# Staleness-only params (docs/architecture.md, "Staleness-only params"): settings_weights and
# settings_preprocessing exist so that new weights or a new preprocessing re-extract; factory
# keeps its old name (the shell text is compared) and options at their defaults are left out
# of the command, so that shards made before they existed stay current.
rule extract_features:
    input:
        unpack(image_index_inputs),
        **EXTRACTION_INPUT,
    output:
        PATHS.feature_shard("{model}", "{dataset}", "{split}", "{shard}"),
    log:
        PATHS.log("features/{model}/{dataset}/{split}/shard-{shard}.log"),
    benchmark:
        PATHS.log("benchmarks/features/{model}/{dataset}/{split}/shard-{shard}.tsv")
    wildcard_constraints:
        dataset=naming.EXTRACTED_DATASET,
    conda:
        CONDA_ENVIRONMENT
    threads: EXTRACTION_THREADS
    resources:
        **EXTRACTION_RESOURCES,
        runtime=SHARD_EXTRACTION_MINUTES,
    params:
        **EXTRACTION_PARAMS,
        shard=lambda wildcards: int(wildcards.shard),
    shell:
        python_command("extract")
        + EXTRACTION_SPLIT_OPTIONS
        + " --shard {params.shard} --shard-size {params.shard_size}"
        + EXTRACTION_MODEL_OPTIONS
        + decode_option()
        + EXTRACTION_OUTPUT


rule merge_features:
    input:
        feature_shards,
    output:
        PATHS.features("{model}", "{dataset}", "{split}"),
    log:
        PATHS.log("features/{model}/{dataset}/{split}.merge.log"),
    wildcard_constraints:
        dataset=naming.EXTRACTED_DATASET,
    conda:
        CONDA_ENVIRONMENT
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        python_command("merge-shards") + " --output {output} {input} > {log} 2>&1"


# features.group: split: every shard of one (model, dataset, split) in one job
# (extract_split.py of the features package): the same shard files, then the merged file, its
# only output. The shards are not outputs, so a failed job keeps those it finished and a new
# run extracts only the rest. Its decode option is a param (decode), extract_features's part of
# the shell text: each as its finished jobs were recorded.
if config["features"]["group"] == "split":

    ruleorder: extract_split > merge_features

    rule extract_split:
        input:
            unpack(image_index_inputs),
            **EXTRACTION_INPUT,
        output:
            PATHS.features("{model}", "{dataset}", "{split}"),
        log:
            PATHS.log("features/{model}/{dataset}/{split}.log"),
        benchmark:
            PATHS.log("benchmarks/features/{model}/{dataset}/{split}.tsv")
        wildcard_constraints:
            dataset=naming.EXTRACTED_DATASET,
        conda:
            CONDA_ENVIRONMENT
        threads: EXTRACTION_THREADS
        resources:
            **EXTRACTION_RESOURCES,
            runtime=split_extraction_minutes,
        params:
            **EXTRACTION_PARAMS,
            shard_template=lambda wildcards: PATHS.feature_shard(wildcards.model, wildcards.dataset, wildcards.split, "{shard}"),
            decode=decode_option(),
        shell:
            python_command("extract-split")
            + EXTRACTION_SPLIT_OPTIONS
            + " --shard-size {params.shard_size} --shard-template {params.shard_template:q}"
            + EXTRACTION_MODEL_OPTIONS
            + "{params.decode}"
            + EXTRACTION_OUTPUT


rule level_set_view:
    input:
        concepts=lambda wildcards: PATHS.dataset_concepts(wildcards.dataset),
        tables=lambda wildcards: [PATHS.image_splits(source) for source in view_sources(wildcards.dataset)],
        features=lambda wildcards: [
            PATHS.features(wildcards.model, source, wildcards.split) for source in view_sources(wildcards.dataset)
        ],
    output:
        PATHS.features("{model}", "{dataset}", "{split}"),
    log:
        PATHS.log("features/{model}/{dataset}/{split}.view.log"),
    wildcard_constraints:
        dataset=naming.VIEW_DATASET,
    conda:
        CONDA_ENVIRONMENT
    resources:
        mem_mb=2000,
    params:
        sources=lambda wildcards, input: " ".join(
            f"--source {source} {table} {features}"
            for source, table, features in zip(view_sources(wildcards.dataset), input.tables, input.features)
        ),
        # demo: the level's concepts with images are few; keep as many as a Lin demo level
        max_concepts=config["demo"]["concepts_per_dataset"] if config["mode"] == "demo" else 0,
    shell:
        python_command("level-set-view") + " --dataset {wildcards.dataset} --split {wildcards.split} --concepts {input.concepts}"
        " {params.sources} --max-concepts {params.max_concepts} --output {output} > {log} 2>&1"


# Named target: `snakemake features` builds this stage for the configured selection.
rule features:
    input:
        [PATHS.features(model, dataset, split) for model in result_models() for dataset in DATASETS for split in SPLITS],
