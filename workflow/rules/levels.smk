# Levels stage (paper Sec. 3.2-3.3, supp. A, D.1): WordNet 3.0 -> concept lists and image
# counts -> eligible unseen concepts -> ranking by Lin similarity to IN-1K -> levels l1..lN;
# and the other level sets: other rankings of the eligible concepts (WordNet measures,
# word2vec) and random draws, whose datasets the features stage builds as views over the
# features of Lin's levels and the pool. Logic: imagenet_cog/levels/. Nothing of the level
# sets runs when level_sets.sets is empty.


include: "functions/levels.smk"


rule wordnet_corpus:
    output:
        directory(PATHS.wordnet_corpus()),
    log:
        PATHS.log("levels/wordnet_corpus.log"),
    benchmark:
        PATHS.log("benchmarks/levels/wordnet_corpus.tsv")
    conda:
        CONDA_ENVIRONMENT
    params:
        # null: NLTK's downloaded data, else /usr/share/wordnet (see imagenet_cog/levels/wordnet.py).
        dict_dir=(f"--dict-dir {shlex.quote(config['wordnet']['dict_dir'])}" if config["wordnet"]["dict_dir"] else ""),
    shell:
        python_command("wordnet-corpus") + " {params.dict_dir} --output {output} > {log} 2>&1"


rule concept_catalogue:
    input:
        unpack(concept_list_inputs),
        wordnet=PATHS.wordnet_corpus(),
    output:
        PATHS.concept_catalogue(),
    log:
        PATHS.log("levels/concept_catalogue.log"),
    conda:
        CONDA_ENVIRONMENT
    shell:
        python_command("concept-catalogue") + " --wordnet {input.wordnet} --in21k-synsets {input.in21k_synsets:q}"
        " --in1k-synsets {input.in1k_synsets:q} --synset-names {input.synset_names:q}"
        " --synset-glosses {input.synset_glosses:q} --output {output} > {log} 2>&1"


rule image_counts:
    input:
        unpack(image_count_inputs),
        catalogue=PATHS.concept_catalogue(),
    output:
        PATHS.image_counts(),
    log:
        PATHS.log("levels/image_counts.log"),
    benchmark:
        PATHS.log("benchmarks/levels/image_counts.tsv")
    conda:
        CONDA_ENVIRONMENT
    # Counting 21,841 folders waits on the file system, not the CPU.
    threads: 8 if COUNT_IMAGES_FROM_ROOT else 1
    params:
        source=lambda wildcards, input: (
            f"--counts {shlex.quote(input.counts)}"
            if "counts" in input.keys()
            else f"--count-root {shlex.quote(config['data']['in21k_root'])}"
        ),
    shell:
        python_command("image-counts") + " --catalogue {input.catalogue} {params.source} --threads {threads}"
        " --output {output} > {log} 2>&1"


rule cut_levels:
    input:
        unpack(published_levels_inputs),
        wordnet=PATHS.wordnet_corpus(),
        catalogue=PATHS.concept_catalogue(),
        counts=PATHS.image_counts(),
        discarded=config["concepts"]["discarded_wnids"],
    output:
        eligibility=report_output(
            PATHS.eligibility_report(),
            caption="levels_eligibility.rst",
            category="Levels",
        ),
        ranking=PATHS.ranking(),
        summary=report_output(PATHS.level_summary(), caption="levels_summary.rst", category="Levels"),
        in1k=PATHS.level_concepts(naming.IN1K),
        levels=[PATHS.level_concepts(level) for level in LEVEL_NAMES],
    log:
        PATHS.log("levels/cut_levels.log"),
    benchmark:
        PATHS.log("benchmarks/levels/cut_levels.tsv")
    conda:
        CONDA_ENVIRONMENT
    resources:
        mem_mb=2000,
    params:
        excluded=" ".join(config["concepts"]["excluded_subtrees"]),
        # What defines the cut; levels.published_splits belongs to the splits stage.
        levels={key: config["levels"][key] for key in ("source", "num_levels", "concepts_per_level", "min_images", "similarity")},
        published=lambda wildcards, input: (
            f"--published-levels {shlex.quote(input.published)}" if "published" in input.keys() else ""
        ),
    shell:
        python_command("cut-levels") + " --wordnet {input.wordnet} --catalogue {input.catalogue} --image-counts {input.counts}"
        " --discarded {input.discarded:q} --excluded-subtrees {params.excluded}"
        " --min-images {params.levels[min_images]} --num-levels {params.levels[num_levels]}"
        " --concepts-per-level {params.levels[concepts_per_level]}"
        " --similarity {params.levels[similarity]} {params.published}"
        " --eligibility-report {output.eligibility} --ranking {output.ranking}"
        " --summary {output.summary} --in1k-output {output.in1k}"
        " --level-outputs {output.levels} > {log} 2>&1"


rule levels_figure:
    input:
        PATHS.ranking(),
    output:
        png=report_output(PATHS.levels_figure("png"), caption="levels_figure.rst", category="Levels"),
        pdf=PATHS.levels_figure("pdf"),
    log:
        PATHS.log("levels/levels_figure.log"),
    conda:
        CONDA_ENVIRONMENT
    shell:
        python_command("levels-figure") + " --ranking {input} --outputs {output.png} {output.pdf} > {log} 2>&1"


rule level_set:
    input:
        unpack(level_set_inputs),
    output:
        ranking=PATHS.level_set_ranking("{level_set}"),
        summary=report_output(
            PATHS.level_set_summary("{level_set}"),
            caption="level_set_summary.rst",
            category="Level sets",
            subcategory="{level_set}",
        ),
        overlap=report_output(
            PATHS.level_set_overlap("{level_set}"),
            caption="level_set_overlap.rst",
            category="Level sets",
            subcategory="{level_set}",
        ),
        levels=[PATHS.dataset_concepts(f"{{level_set}}-{level}") for level in LEVEL_NAMES],
    log:
        PATHS.log("levels/{level_set}/level_set.log"),
    benchmark:
        PATHS.log("benchmarks/levels/{level_set}/level_set.tsv")
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
        png=report_output(
            PATHS.level_set_figure("{level_set}", "png"),
            caption="level_set_figure.rst",
            category="Level sets",
            subcategory="{level_set}",
        ),
        pdf=PATHS.level_set_figure("{level_set}", "pdf"),
    log:
        PATHS.log("levels/{level_set}/levels_figure.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        measure=lambda wildcards: shlex.quote(naming.MEASURE_TITLES[wildcards.level_set]),
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
        PATHS.log("levels/random/draw-{draw}.log"),
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
# fixed spread of concepts with generated images (rule demo_pool, demo.smk).
if config["mode"] != "demo":

    rule pool_concepts:
        input:
            PATHS.ranking(),
        output:
            PATHS.level_concepts(naming.POOL),
        log:
            PATHS.log("levels/pool_concepts.log"),
        conda:
            CONDA_ENVIRONMENT
        shell:
            python_command("pool-concepts") + " --lin-ranking {input} --output {output} > {log} 2>&1"


# Named target: `snakemake levels` builds this stage for the configured selection.
rule levels:
    input:
        PATHS.eligibility_report(),
        PATHS.ranking(),
        [PATHS.level_concepts(level) for level in LEVEL_NAMES],
        PATHS.levels_figure("png"),
        PATHS.levels_figure("pdf"),
        level_set_files(),
