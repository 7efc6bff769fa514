# Level sets (paper Sec. 3.3, supp. D.1, Fig. 7): other rankings of the eligible concepts
# (WordNet measures, word2vec), random draws, and their datasets as views over features
# already extracted for Lin's levels and the pool. See imagenet_cog/{level_sets,
# word_vectors,views,level_set_results}.py. Nothing here runs when level_sets.sets is empty.


rule level_set:
    input:
        unpack(level_set_inputs),
    output:
        ranking=PATHS.level_set_ranking("{level_set}"),
        summary=report(
            PATHS.level_set_summary("{level_set}"),
            caption="../report/level_set_summary.rst",
            category="Level sets",
            subcategory="{level_set}",
        ),
        overlap=report(
            PATHS.level_set_overlap("{level_set}"),
            caption="../report/level_set_overlap.rst",
            category="Level sets",
            subcategory="{level_set}",
        ),
        levels=[PATHS.dataset_concepts(f"{{level_set}}-{level}") for level in LEVEL_NAMES],
    log:
        "logs/levels/{level_set}/level_set.log",
    benchmark:
        "logs/benchmarks/levels/{level_set}/level_set.tsv"
    conda:
        CONDA_ENVIRONMENT
    # gensim holds the whole embeddings file (Wikipedia2Vec's 300-d export: ~6 GB)
    resources:
        mem_mb=lambda wildcards: 16000 if wildcards.level_set == "word2vec" else 3000,
    params:
        levels={key: config["levels"][key] for key in ("num_levels", "concepts_per_level")},
        # only word2vec reads these, so changing them re-runs only the word2vec set
        word2vec=lambda wildcards, input: (
            f"--embeddings {shlex.quote(input.embeddings)}" + (" --binary" if LEVEL_SET_SETTINGS["word2vec"]["binary"] else "")
            if wildcards.level_set == "word2vec"
            else ""
        ),
    shell:
        python_command("level-set") + " --measure {wildcards.level_set} --wordnet {input.wordnet} --catalogue {input.catalogue}"
        " --lin-ranking {input.lin_ranking} --lin-levels {input.lin_levels}"
        " --num-levels {params.levels[num_levels]} --concepts-per-level {params.levels[concepts_per_level]}"
        " {params.word2vec} --ranking {output.ranking} --summary {output.summary}"
        " --overlap {output.overlap} --level-outputs {output.levels} > {log} 2>&1"


rule level_set_figure:
    input:
        PATHS.level_set_ranking("{level_set}"),
    output:
        png=report(
            PATHS.level_set_figure("{level_set}", "png"),
            caption="../report/level_set_figure.rst",
            category="Level sets",
            subcategory="{level_set}",
        ),
        pdf=PATHS.level_set_figure("{level_set}", "pdf"),
    log:
        "logs/levels/{level_set}/levels_figure.log",
    conda:
        CONDA_ENVIRONMENT
    params:
        measure=lambda wildcards: shlex.quote(MEASURE_TITLES[wildcards.level_set]),
    shell:
        python_command("levels-figure")
        + " --ranking {input} --measure {params.measure} --outputs {output.png} {output.pdf} > {log} 2>&1"


rule random_level:
    input:
        lin_ranking=PATHS.ranking(),
        lin_levels=[PATHS.level_concepts(level) for level in LEVEL_NAMES],
    output:
        concepts=PATHS.random_draw("{draw}"),
        overlap=PATHS.random_draw_overlap("{draw}"),
    log:
        "logs/levels/random/draw-{draw}.log",
    conda:
        CONDA_ENVIRONMENT
    params:
        random=LEVEL_SET_SETTINGS["random"]["concepts"],
        seed=LEVEL_SET_SETTINGS["random"]["seed"],
    shell:
        python_command("random-level")
        + " --lin-ranking {input.lin_ranking} --lin-levels {input.lin_levels} --draw {wildcards.draw}"
        " --concepts {params.random} --seed {params.seed} --output {output.concepts}"
        " --overlap {output.overlap} > {log} 2>&1"


# The pool: in real runs every eligible concept outside Lin's levels (at most the gaps'
# 146), whichever sets need some, so that adding a set never re-extracts it; in demo mode a
# fixed spread of concepts with generated images (level_sets.demo_pool_concepts).
if config["mode"] == "demo":

    rule demo_pool:
        input:
            ranking=PATHS.ranking(),
            drawn=[PATHS.demo_concepts(dataset) for dataset in DATASETS],
        output:
            images=directory(PATHS.demo_images("pool")),
            concepts=PATHS.demo_concepts("pool"),
        log:
            "logs/splits/demo_pool.log",
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
            "logs/splits/demo_word_vectors.log",
        conda:
            CONDA_ENVIRONMENT
        shell:
            python_command("demo-embeddings") + " --catalogue {input} --output {output} > {log} 2>&1"

else:

    rule pool_concepts:
        input:
            PATHS.ranking(),
        output:
            PATHS.level_concepts("pool"),
        log:
            "logs/levels/pool_concepts.log",
        conda:
            CONDA_ENVIRONMENT
        shell:
            python_command("pool-concepts") + " --lin-ranking {input} --output {output} > {log} 2>&1"


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
        dataset=VIEW_DATASET,
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
