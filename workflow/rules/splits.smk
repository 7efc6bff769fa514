# Splits stage: which images each dataset uses for training and testing (paper supp. A).
# In demo mode the images are generated first (rule demo_world) in ImageNet's layouts, so
# the same split code reads them. See imagenet_cog/splits/image_splits.py and imagenet_cog/demo/world.py.


rule demo_world:
    input:
        ranking=PATHS.ranking(),
        levels=demo_level_lists(),
    output:
        in21k=directory(PATHS.demo_images("in21k")),
        in1k=directory(PATHS.demo_images("in1k")),
        concepts=[PATHS.demo_concepts(dataset) for dataset in DATASETS],
        pretraining=PATHS.demo_pretraining_concepts(),
        preview=report(PATHS.demo_preview(), caption="../report/demo_world.rst", category="Demo world"),
    log:
        "logs/splits/demo_world.log",
    benchmark:
        "logs/benchmarks/splits/demo_world.tsv"
    conda:
        CONDA_ENVIRONMENT
    params:
        level_concepts=lambda wildcards, input: " ".join(
            f"--level-concepts {dataset}={path}" for dataset, path in zip(demo_level_datasets(), input.levels)
        ),
        demo_concepts=" ".join(f"--demo-concepts {dataset}={PATHS.demo_concepts(dataset)}" for dataset in DATASETS),
        demo=demo_world_settings(),
        in1k_concepts=in1k_concepts_option(),
    shell:
        python_command("demo-world") + " --ranking {input.ranking} {params.level_concepts} {params.demo_concepts}"
        " --in21k-images {output.in21k} --in1k-images {output.in1k} --preview {output.preview}"
        " --pretraining-concepts {output.pretraining}"
        " --concepts-per-dataset {params.demo[concepts_per_dataset]}"
        "{params.in1k_concepts}"
        " --train-images {params.demo[train_images_per_concept]}"
        " --test-images {params.demo[test_images_per_concept]}"
        " --image-size {params.demo[image_size]} --seed {params.demo[seed]}"
        " > {log} 2>&1"


# The demo's small network learns the demo's IN-1K concepts; its checkpoint is then a
# model's weights like any other (config.yaml: models.demo_cnn).
rule pretrain_demo_model:
    input:
        images=PATHS.demo_images("in1k"),
        concepts=PATHS.demo_pretraining_concepts(),
    output:
        PATHS.demo_checkpoint(),
    log:
        "logs/demo/pretrain_demo_model.log",
    benchmark:
        "logs/benchmarks/demo/pretrain_demo_model.tsv"
    conda:
        CONDA_ENVIRONMENT
    params:
        pretraining=config["demo"]["pretraining"],
    shell:
        python_command("pretrain-demo") + " --images {input.images} --concepts {input.concepts} --output {output}"
        " --epochs {params.pretraining[epochs]} --batch-size {params.pretraining[batch_size]}"
        " --learning-rate {params.pretraining[learning_rate]} --seed {params.pretraining[seed]}"
        " --texture-jitter {params.pretraining[texture_jitter]} --threads {threads} > {log} 2>&1"


checkpoint image_splits:
    input:
        unpack(image_split_inputs),
    output:
        table=PATHS.image_splits("{dataset}"),
    log:
        "logs/splits/{dataset}.log",
    benchmark:
        "logs/benchmarks/splits/{dataset}.tsv"
    wildcard_constraints:
        dataset=EXTRACTED_DATASET,
    conda:
        CONDA_ENVIRONMENT
    threads: 4
    resources:
        mem_mb=2000,
    params:
        root=lambda wildcards: image_root(wildcards.dataset),
        root_setting=lambda wildcards: image_root_setting(wildcards.dataset),
        settings=lambda wildcards: split_settings(wildcards.dataset),
        published=lambda wildcards, input: (f"--published-splits {input.published}" if "published" in input.keys() else ""),
    shell:
        python_command("image-splits") + " --dataset {wildcards.dataset} --concepts {input.concepts} --root {params.root:q}"
        " --root-setting {params.root_setting:q} --seed {params.settings[seed]}"
        " --test-per-concept {params.settings[test_per_concept]}"
        " --max-train-per-concept {params.settings[max_train_per_concept]}"
        " {params.published} --threads {threads} --output {output.table} > {log} 2>&1"


rule split_summary:
    input:
        tables=[PATHS.image_splits(dataset) for dataset in DATASETS + BLURRED_DATASETS],
    output:
        report(PATHS.split_summary(), caption="../report/splits_summary.rst", category="Splits"),
    log:
        "logs/splits/summary.log",
    conda:
        CONDA_ENVIRONMENT
    params:
        # IN-1K-blurred: also the IN-1K images it lacks (an option only then, so that a run
        # without it keeps its summary)
        tables=lambda wildcards, input: " ".join(
            [f"--table {dataset}={path}" for dataset, path in zip(DATASETS + BLURRED_DATASETS, input.tables)]
            + (["--missing-vs in1k_blurred=in1k"] if BLURRED_DATASETS else [])
        ),
    shell:
        python_command("split-summary") + " {params.tables} --output {output} > {log} 2>&1"
