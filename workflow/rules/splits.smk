# Splits stage: which images each dataset uses for training and testing (paper supp. A),
# from each dataset's image root (in demo mode, the demo world's images, demo.smk).
# Logic: imagenet_cog/splits/.


include: "functions/splits.smk"


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
        dataset=naming.EXTRACTED_DATASET,
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
