# Features stage: frozen-backbone features (paper Sec. 3.4.1, supp. B.1), one job per
# (model, dataset, split, shard) so that a cluster runs shards side by side and a failed or
# changed model re-runs only its own shards. See imagenet_cog/features/extract.py and features.py.


rule extract_features:
    input:
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
        dataset=EXTRACTED_DATASET,
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
        factory=lambda wildcards: model_factory_option(wildcards.model),
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
        dataset=EXTRACTED_DATASET,
    conda:
        CONDA_ENVIRONMENT
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        python_command("merge-shards") + " --output {output} {input} > {log} 2>&1"
