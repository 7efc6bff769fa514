# Splits stage: which images each dataset uses for training and testing (paper supp. A),
# from each dataset's image root (in demo mode, the demo world's images, demo.smk).
# Logic: imagenet_cog/splits/.


include: "functions/splits.smk"


# Real data in a tar layout: where each image's bytes lie in the root's tars, read once.
rule index_images:
    output:
        PATHS.image_index("{source}"),
    log:
        PATHS.log("splits/index-{source}.log"),
    benchmark:
        PATHS.log("benchmarks/splits/index-{source}.tsv")
    wildcard_constraints:
        source="in21k|in1k|in1k_blurred",
    conda:
        CONDA_ENVIRONMENT
    threads: 4
    # measured: 322 MB for the 6.1 M images of a run's needed synsets, 180 MB for IN-1K's 1.33 M
    # (docs/scale.md); ~0.6 GB for all 14.2 M of Fall 2011
    resources:
        mem_mb=2000,
    params:
        root=lambda wildcards: config["data"][f"{wildcards.source}_root"],
        layout=lambda wildcards: root_layout(wildcards.source),
    shell:
        python_command("index-images") + " --source {wildcards.source} --root {params.root:q}"
        " --layout {params.layout} --processes {threads} --output {output} > {log} 2>&1"


# Real data: the whole run's concepts against the copy, before any split (nothing is
# decoded, deleted or re-run; a failure names every missing or short concept at once).
rule preflight:
    input:
        unpack(preflight_inputs),
    output:
        PATHS.preflight(),
    log:
        PATHS.log("splits/preflight.log"),
    benchmark:
        PATHS.log("benchmarks/splits/preflight.tsv")
    conda:
        CONDA_ENVIRONMENT
    threads: 4
    params:
        options=preflight_options,
        release=IN21K_RELEASE,
        settings=config["splits"],
    shell:
        python_command("preflight") + " {params.options} --release {params.release}"
        " --test-per-concept {params.settings[test_per_concept]}"
        " --max-train-per-concept {params.settings[max_train_per_concept]}"
        " --fall11-counts {input.counts} --threads {threads} --output {output} > {log} 2>&1"


# The IN-21K synsets the configured run needs, from the levels alone: to fetch or extract
# just those (snakemake needed_synsets).
rule needed_synsets:
    input:
        concepts=lambda wildcards: [concept_list(dataset) for dataset in run_image_datasets()],
        catalogue=PATHS.concept_catalogue(),
        counts=config["concepts"]["image_counts"],
    output:
        table=PATHS.needed_synsets(),
        tars=PATHS.needed_synset_tars(),
    log:
        PATHS.log("splits/needed_synsets.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        datasets=lambda wildcards: " ".join(
            f"--dataset {dataset}={concept_list(dataset)}"
            for dataset in run_image_datasets()
            if image_source(dataset) == naming.IN21K
        )
        + hub_copy_options(),
        release=IN21K_RELEASE,
    shell:
        python_command("needed-synsets") + " {params.datasets} --catalogue {input.catalogue}"
        " --fall11-counts {input.counts} --release {params.release} --table {output.table}"
        " --list {output.tars} > {log} 2>&1"


checkpoint image_splits:
    input:
        unpack(image_split_inputs),
    output:
        table=PATHS.image_splits("{dataset}"),
    log:
        PATHS.log("splits/{dataset}.log"),
    benchmark:
        PATHS.log("benchmarks/splits/{dataset}.tsv")
    wildcard_constraints:
        dataset=naming.EXTRACTED_DATASET,
    conda:
        CONDA_ENVIRONMENT
    threads: SPLIT_THREADS
    resources:
        mem_mb=2000,
    params:
        root=lambda wildcards: image_root(wildcards.dataset),
        root_setting=lambda wildcards: image_root_setting(wildcards.dataset),
        settings=lambda wildcards: split_settings(wildcards.dataset),
        published=lambda wildcards, input: split_source_options(wildcards.dataset, input),
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
        report_output(PATHS.split_summary(), caption="splits_summary.rst", category="Splits"),
    log:
        PATHS.log("splits/summary.log"),
    benchmark:
        PATHS.log("benchmarks/splits/summary.tsv")
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
