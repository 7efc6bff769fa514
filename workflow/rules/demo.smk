# The built-in demo (mode: demo): generated images in ImageNet's layouts for a few real
# concepts of each level and IN-1K (rule demo_world), so that the splits, features and
# probes stages run the code they run on real data; the demo's small network pretrained on
# the demo's IN-1K images (a checkpoint like any other, config.yaml: models.demo_cnn); and
# the demo's stand-ins for the level sets' pool, the word2vec file and IN-1K-blurred.
# Logic: imagenet_cog/demo/.


include: "functions/demo.smk"


rule demo_world:
    input:
        ranking=PATHS.ranking(),
        levels=demo_level_lists(),
    output:
        in21k=directory(PATHS.demo_images(naming.IN21K)),
        in1k=directory(PATHS.demo_images(naming.IN1K)),
        concepts=[PATHS.demo_concepts(dataset) for dataset in DATASETS],
        pretraining=PATHS.demo_pretraining_concepts(),
        preview=report_output(PATHS.demo_preview(), caption="demo_world.rst", category="Demo world"),
    log:
        PATHS.log("splits/demo_world.log"),
    benchmark:
        PATHS.log("benchmarks/splits/demo_world.tsv")
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
        images=PATHS.demo_images(naming.IN1K),
        concepts=PATHS.demo_pretraining_concepts(),
    output:
        checkpoint=PATHS.demo_checkpoint(),
        kept_epochs=[PATHS.demo_epoch_checkpoint(epoch) for epoch in KEPT_EPOCHS],
    log:
        PATHS.log("demo/pretrain_demo_model.log"),
    benchmark:
        PATHS.log("benchmarks/demo/pretrain_demo_model.tsv")
    conda:
        CONDA_ENVIRONMENT
    params:
        pretraining=config["demo"]["pretraining"],
        kept_epochs=KEPT_EPOCHS,
    shell:
        python_command("pretrain-demo") + " --images {input.images} --concepts {input.concepts} --output {output.checkpoint}"
        " --epochs {params.pretraining[epochs]} --batch-size {params.pretraining[batch_size]}"
        " --learning-rate {params.pretraining[learning_rate]} --seed {params.pretraining[seed]}"
        " --texture-jitter {params.pretraining[texture_jitter]} --threads {threads}"
        " --keep-epochs {params.kept_epochs} --epoch-outputs {output.kept_epochs} > {log} 2>&1"


if config["mode"] == "demo":

    # The level sets' pool: a fixed spread of eligible concepts outside the demo's level
    # concepts, with generated images (level_sets.demo_pool_concepts).
    rule demo_pool:
        input:
            ranking=PATHS.ranking(),
            drawn=[PATHS.demo_concepts(dataset) for dataset in DATASETS],
        output:
            images=directory(PATHS.demo_images(naming.POOL)),
            concepts=PATHS.demo_concepts(naming.POOL),
        log:
            PATHS.log("splits/demo_pool.log"),
        conda:
            CONDA_ENVIRONMENT
        params:
            concepts=LEVEL_SET_SETTINGS["demo_pool_concepts"],
            demo=config["demo"],
        shell:
            python_command("demo-pool") + " --ranking {input.ranking} --exclude {input.drawn} --count {params.concepts}"
            " --images {output.images} --output {output.concepts}"
            " --train-images {params.demo[train_images_per_concept]}"
            " --test-images {params.demo[test_images_per_concept]}"
            " --image-size {params.demo[image_size]} --seed {params.demo[seed]} > {log} 2>&1"

    rule demo_word_vectors:
        input:
            PATHS.concept_catalogue(),
        output:
            PATHS.word_vectors_demo(),
        log:
            PATHS.log("splits/demo_word_vectors.log"),
        conda:
            CONDA_ENVIRONMENT
        shell:
            python_command("demo-embeddings") + " --catalogue {input} --output {output} > {log} 2>&1"

    # IN-1K-blurred's images (supp. E): the demo's IN-1K images blurred, a few left out.
    rule demo_blurred:
        input:
            images=PATHS.demo_images(naming.IN1K),
            concepts=PATHS.demo_concepts(naming.IN1K),
        output:
            directory(PATHS.demo_images(naming.IN1K_BLURRED)),
        log:
            PATHS.log("splits/demo_blurred.log"),
        conda:
            CONDA_ENVIRONMENT
        params:
            dropped=BLURRED_SETTINGS["demo_dropped"],
            seed=config["demo"]["seed"],
        shell:
            python_command("demo-blurred")
            + " --in1k-images {input.images} --concepts {input.concepts} --output {output} --dropped {params.dropped}"
            " --seed {params.seed} > {log} 2>&1"
