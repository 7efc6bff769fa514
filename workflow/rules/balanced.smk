# Class-balanced variant (paper supp. A.4): every concept of every dataset, IN-1K included,
# sub-sampled to balanced.train_per_concept training images, same test images. Its datasets
# balanced-<dataset> are views over the default dataset's extracted features (nothing is
# extracted again) and are probed by the probe rule under their own names. See
# imagenet_cog/variants/balanced.py.


rule balanced_split:
    input:
        PATHS.image_splits("{dataset}"),
    output:
        PATHS.balanced_split("{dataset}"),
    log:
        "logs/splits/balanced/{dataset}.log",
    wildcard_constraints:
        dataset=EXTRACTED_DATASET,
    conda:
        CONDA_ENVIRONMENT
    params:
        train_per_concept=BALANCED_SETTINGS["train_per_concept"],
        seed=BALANCED_SETTINGS["seed"],
    shell:
        python_command("balanced-split") + " --table {input} --train-per-concept {params.train_per_concept} --seed {params.seed}"
        " --output {output} > {log} 2>&1"


rule balanced_view:
    input:
        balanced=PATHS.balanced_split("{dataset}"),
        table=PATHS.image_splits("{dataset}"),
        train=PATHS.features("{model}", "{dataset}", "train"),
        test=PATHS.features("{model}", "{dataset}", "test"),
    output:
        train=PATHS.features("{model}", "balanced-{dataset}", "train"),
        test=PATHS.features("{model}", "balanced-{dataset}", "test"),
    log:
        "logs/features/{model}/balanced-{dataset}.view.log",
    wildcard_constraints:
        dataset=EXTRACTED_DATASET,
    conda:
        CONDA_ENVIRONMENT
    resources:
        mem_mb=2000,
    shell:
        python_command("balanced-view") + " --dataset balanced-{wildcards.dataset} --balanced-table {input.balanced}"
        " --source {wildcards.dataset} --source-table {input.table}"
        " --source-features {input.train} {input.test} --outputs {output.train} {output.test} > {log} 2>&1"


rule balanced_results:
    input:
        default=lambda wildcards: probe_results(
            models=result_models(),
            datasets=DATASETS,
            shots=["all"],
            seeds=BALANCED_SEEDS,
        ),
        balanced=lambda wildcards: balanced_probe_results(),
    output:
        tables=[
            (
                report(
                    PATHS.table("balanced", extension),
                    caption="../report/balanced.rst",
                    category="Class-balanced variant",
                )
                if extension == "csv"
                else PATHS.table("balanced", extension)
            )
            for extension in TABLE_FORMATS
        ],
        figures=[
            (
                report(
                    PATHS.figure("balanced", extension),
                    caption="../report/balanced.rst",
                    category="Class-balanced variant",
                )
                if extension == "png"
                else PATHS.figure("balanced", extension)
            )
            for extension in FIGURE_FORMATS
        ],
    log:
        "logs/results/balanced.log",
    conda:
        CONDA_ENVIRONMENT
    params:
        root=results_root,
        models=lambda wildcards: shlex.quote(models_json()),
        datasets=" ".join(DATASETS),
        seeds=" ".join(BALANCED_SEEDS),
        train_per_concept=BALANCED_SETTINGS["train_per_concept"],
    shell:
        python_command("balanced-results")
        + " --results-root {params.root} --models {params.models} --datasets {params.datasets}"
        " --seeds {params.seeds} --train-per-concept {params.train_per_concept} > {log} 2>&1"
