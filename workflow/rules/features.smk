# Features stage: frozen-backbone features (paper Sec. 3.4.1, supp. B.1), one job per
# (model, dataset, split, shard) so that a cluster runs shards side by side and a failed or
# changed model re-runs only its own shards; and the level sets' datasets as views over
# them (nothing is extracted twice). Logic: imagenet_cog/features/, imagenet_cog/models/.


include: "functions/features.smk"


rule extract_features:
    input:
        unpack(lambda wildcards: image_index_input(wildcards.dataset)),
        split_table=PATHS.image_splits("{dataset}"),
        images=lambda wildcards: image_root(wildcards.dataset),
        checkpoint=model_checkpoint_input,
    output:
        PATHS.feature_shard("{model}", "{dataset}", "{split}", "{shard}"),
    log:
        "logs/features/{model}/{dataset}/{split}/shard-{shard}.log",
    benchmark:
        "logs/benchmarks/features/{model}/{dataset}/{split}/shard-{shard}.tsv"
    wildcard_constraints:
        dataset=naming.EXTRACTED_DATASET,
    conda:
        CONDA_ENVIRONMENT
    # One thread runs the model, the others decode images; with fewer cores than asked
    # for, Snakemake lowers threads and the loader workers follow.
    threads: config["features"]["num_workers"] + 1
    resources:
        gpu=0 if config["features"]["device"] == "cpu" else 1,
        # Model and framework (~2 GB), 4 prefetched uint8 batches per worker, the shard's features.
        mem_mb=lambda wildcards, threads: 4000 + threads * 600,
        runtime=15 + config["features"]["shard_size"] // 400,
    params:
        arch=lambda wildcards: model_spec(wildcards.model).arch,
        weights=lambda wildcards: model_spec(wildcards.model).weights,
        weights_identity=lambda wildcards: model_weights_identity(wildcards.model),
        preprocessing=lambda wildcards: model_preprocessing(wildcards.model),
        factory=extract_command_options,
        weights_identity_option=lambda wildcards: weights_identity_option(wildcards.model),
        shard=lambda wildcards: int(wildcards.shard),
        shard_size=config["features"]["shard_size"],
        batch_size=config["features"]["batch_size"],
        dtype=config["features"]["dtype"],
        device=config["features"]["device"],
        mixed_precision=str(config["features"]["mixed_precision"]).lower(),
    shell:
        python_command("extract") + " --split-table {input.split_table} --image-root {input.images:q}"
        " --dataset {wildcards.dataset} --split {wildcards.split}"
        " --shard {params.shard} --shard-size {params.shard_size}"
        " --model-name {wildcards.model} --arch {params.arch} --weights {params.weights:q}"
        " {params.factory} {params.weights_identity_option}"
        " --batch-size {params.batch_size} --num-workers $(({threads} - 1)) --threads {threads}"
        " --dtype {params.dtype} --device {params.device}"
        " --mixed-precision {params.mixed_precision}" + decode_option() + " --output {output} > {log} 2>&1"


rule merge_features:
    input:
        feature_shards,
    output:
        PATHS.features("{model}", "{dataset}", "{split}"),
    log:
        "logs/features/{model}/{dataset}/{split}.merge.log",
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
# run extracts only the rest.
if config["features"]["group"] == "split":

    ruleorder: extract_split > merge_features

    rule extract_split:
        input:
            unpack(lambda wildcards: image_index_input(wildcards.dataset)),
            split_table=PATHS.image_splits("{dataset}"),
            images=lambda wildcards: image_root(wildcards.dataset),
            checkpoint=model_checkpoint_input,
        output:
            PATHS.features("{model}", "{dataset}", "{split}"),
        log:
            "logs/features/{model}/{dataset}/{split}.log",
        benchmark:
            "logs/benchmarks/features/{model}/{dataset}/{split}.tsv"
        wildcard_constraints:
            dataset=naming.EXTRACTED_DATASET,
        conda:
            CONDA_ENVIRONMENT
        threads: config["features"]["num_workers"] + 1
        resources:
            gpu=0 if config["features"]["device"] == "cpu" else 1,
            mem_mb=lambda wildcards, threads: 4000 + threads * 600,
            runtime=split_extraction_minutes,
        params:
            arch=lambda wildcards: model_spec(wildcards.model).arch,
            weights=lambda wildcards: model_spec(wildcards.model).weights,
            weights_identity=lambda wildcards: model_weights_identity(wildcards.model),
            preprocessing=lambda wildcards: model_preprocessing(wildcards.model),
            factory=extract_command_options,
            weights_identity_option=lambda wildcards: weights_identity_option(wildcards.model),
            shard_template=lambda wildcards: PATHS.feature_shard(wildcards.model, wildcards.dataset, wildcards.split, "{shard}"),
            shard_size=config["features"]["shard_size"],
            batch_size=config["features"]["batch_size"],
            dtype=config["features"]["dtype"],
            device=config["features"]["device"],
            mixed_precision=str(config["features"]["mixed_precision"]).lower(),
            decode=decode_option(),
        shell:
            python_command("extract-split") + " --split-table {input.split_table} --image-root {input.images:q}"
            " --dataset {wildcards.dataset} --split {wildcards.split}"
            " --shard-size {params.shard_size} --shard-template {params.shard_template:q}"
            " --model-name {wildcards.model} --arch {params.arch} --weights {params.weights:q}"
            " {params.factory} {params.weights_identity_option}"
            " --batch-size {params.batch_size} --num-workers $(({threads} - 1)) --threads {threads}"
            " --dtype {params.dtype} --device {params.device}"
            " --mixed-precision {params.mixed_precision}{params.decode} --output {output} > {log} 2>&1"


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
        "logs/features/{model}/{dataset}/{split}.view.log",
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
