# Levels stage (paper Sec. 3.2-3.3, supp. A): WordNet 3.0 -> concept lists and image counts
# -> eligible unseen concepts -> ranking by Lin similarity to IN-1K -> levels l1..lN.
# Logic: imagenet_cog/{wordnet,concepts,similarity,levels,levels_figure}.py.


rule wordnet_corpus:
    output:
        directory(PATHS.wordnet_corpus()),
    log:
        "logs/levels/wordnet_corpus.log",
    benchmark:
        "logs/benchmarks/levels/wordnet_corpus.tsv"
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
        "logs/levels/concept_catalogue.log",
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
        "logs/levels/image_counts.log",
    benchmark:
        "logs/benchmarks/levels/image_counts.tsv"
    conda:
        CONDA_ENVIRONMENT
    # Counting 21,841 folders waits on the file system, not the CPU.
    threads: 8 if config["data"]["count_images_from_root"] else 1
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
        unpack(published_levels_input),
        wordnet=PATHS.wordnet_corpus(),
        catalogue=PATHS.concept_catalogue(),
        counts=PATHS.image_counts(),
        discarded=config["concepts"]["discarded_wnids"],
    output:
        eligibility=report(
            PATHS.eligibility_report(),
            caption="../report/levels_eligibility.rst",
            category="Levels",
        ),
        ranking=PATHS.ranking(),
        summary=report(PATHS.level_summary(), caption="../report/levels_summary.rst", category="Levels"),
        in1k=PATHS.level_concepts("in1k"),
        levels=[PATHS.level_concepts(level) for level in LEVEL_NAMES],
    log:
        "logs/levels/cut_levels.log",
    benchmark:
        "logs/benchmarks/levels/cut_levels.tsv"
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
        png=report(PATHS.levels_figure("png"), caption="../report/levels_figure.rst", category="Levels"),
        pdf=PATHS.levels_figure("pdf"),
    log:
        "logs/levels/levels_figure.log",
    conda:
        CONDA_ENVIRONMENT
    shell:
        python_command("levels-figure") + " --ranking {input} --outputs {output.png} {output.pdf} > {log} 2>&1"
