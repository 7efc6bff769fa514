# Variants stage: the paper's checks of its own setup, each switched on in config.yaml and
# built from the stages before it. Logic: imagenet_cog/variants/.
#
# - class-balanced variant (paper supp. A.4, `balanced:`): every concept of every dataset,
#   IN-1K included, sub-sampled to balanced.train_per_concept training images, same test
#   images. Its datasets balanced-<dataset> are views over the default dataset's extracted
#   features (nothing is extracted again) and are probed by the probe rule under their own
#   names.
# - IN-1K-blurred (paper supp. E, Tab. 4, `in1k_blurred:`): the face-blurred release of IN-1K
#   as dataset in1k_blurred, split, extracted and probed exactly like IN-1K from its own
#   image root (data.in1k_blurred_root), and compared with IN-1K.
# - label-noise audit (paper supp. A.3, Fig. 5, `label_audit:`): the final N = all
#   classifier of one dataset labels the test images of another; confident predictions are
#   listed with both labels. The classifiers are the probe jobs' files kept beside their
#   result JSONs (imagenet_cog/probes/classifier.py; not rule outputs, so existing probes
#   stay up to date); a missing one is refitted.


include: "functions/variants.smk"


rule balanced_split:
    input:
        PATHS.image_splits("{dataset}"),
    output:
        PATHS.balanced_split("{dataset}"),
    log:
        PATHS.log("splits/balanced/{dataset}.log"),
    wildcard_constraints:
        dataset=naming.EXTRACTED_DATASET,
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
        train=PATHS.features("{model}", naming.balanced_dataset("{dataset}"), "train"),
        test=PATHS.features("{model}", naming.balanced_dataset("{dataset}"), "test"),
    log:
        PATHS.log("features/{model}/balanced-{dataset}.view.log"),
    wildcard_constraints:
        dataset=naming.EXTRACTED_DATASET,
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
        default=probe_results(
            models=BALANCED_MODELS,
            datasets=DATASETS,
            shots=["all"],
            seeds=BALANCED_SEEDS,
        ),
        balanced=balanced_probe_results(),
    output:
        tables=[
            (
                report_output(
                    PATHS.table("balanced", extension),
                    caption="balanced.rst",
                    category="Class-balanced variant",
                )
                if extension == "csv"
                else PATHS.table("balanced", extension)
            )
            for extension in TABLE_FORMATS
        ],
        figures=[
            (
                report_output(
                    PATHS.figure("balanced", extension),
                    caption="balanced.rst",
                    category="Class-balanced variant",
                )
                if extension == "png"
                else PATHS.figure("balanced", extension)
            )
            for extension in FIGURE_FORMATS
        ],
    log:
        PATHS.log("results/balanced.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        root=results_root,
        models=lambda wildcards: shlex.quote(models_json(models=BALANCED_MODELS)),
        datasets=" ".join(DATASETS),
        seeds=" ".join(BALANCED_SEEDS),
        train_per_concept=BALANCED_SETTINGS["train_per_concept"],
    shell:
        python_command("balanced-results")
        + " --results-root {params.root} --models {params.models} --datasets {params.datasets}"
        " --seeds {params.seeds} --train-per-concept {params.train_per_concept} > {log} 2>&1"


rule blurred_results:
    input:
        in1k=probe_results(
            models=BLURRED_MODELS,
            datasets=[naming.IN1K],
            shots=BLURRED_SHOTS,
            seeds=BLURRED_SEEDS,
        ),
        blurred=blurred_probe_results(),
        summary=PATHS.results_summary(),
    output:
        tables=[
            (
                report_output(
                    PATHS.table(naming.IN1K_BLURRED, extension),
                    caption="in1k_blurred.rst",
                    category="IN-1K-blurred",
                )
                if extension == "csv"
                else PATHS.table(naming.IN1K_BLURRED, extension)
            )
            for extension in TABLE_FORMATS
        ],
        figures=[
            (
                report_output(
                    PATHS.figure(naming.IN1K_BLURRED, extension),
                    caption="in1k_blurred_figure.rst",
                    category="IN-1K-blurred",
                )
                if extension == "png"
                else PATHS.figure(naming.IN1K_BLURRED, extension)
            )
            for extension in FIGURE_FORMATS
        ],
    log:
        PATHS.log("results/in1k_blurred.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        root=results_root,
        models=lambda wildcards: shlex.quote(models_json(models=BLURRED_MODELS)),
        shots=" ".join(BLURRED_SHOTS),
        seeds=" ".join(BLURRED_SEEDS),
    shell:
        python_command("blurred-results") + " --results-root {params.root} --models {params.models} --shots {params.shots}"
        " --seeds {params.seeds} --summary {input.summary} > {log} 2>&1"


rule label_audit:
    input:
        unpack(audit_inputs),
    output:
        predictions=report_output(
            PATHS.audit_predictions("{model}"),
            caption="audit_predictions.rst",
            category="Label-noise audit",
            subcategory="{model}",
        ),
        shares=report_output(
            PATHS.audit_shares("{model}"),
            caption="audit_shares.rst",
            category="Label-noise audit",
            subcategory="{model}",
        ),
        contact_sheet=report_output(
            PATHS.audit_contact_sheet("{model}"),
            caption="audit_contact_sheet.rst",
            category="Label-noise audit",
            subcategory="{model}",
        ),
    log:
        PATHS.log("audit/{model}.log"),
    benchmark:
        PATHS.log("benchmarks/audit/{model}.tsv")
    conda:
        CONDA_ENVIRONMENT
    resources:
        mem_mb=8000,
    params:
        # <root>/audit/<model>/confident_predictions.tsv
        root=lambda wildcards, output: os.path.dirname(os.path.dirname(os.path.dirname(output.predictions))),
        options=audit_options,
        threshold=AUDIT_SETTINGS["threshold"],
        images=AUDIT_SETTINGS["contact_sheet_images"],
        device=config["probes"]["device"],
    shell:
        python_command("label-audit") + " --results-root {params.root} --model {wildcards.model} {params.options}"
        " --concepts {input.concepts} --threshold {params.threshold}"
        " --contact-sheet-images {params.images} --device {params.device}"
        " --predictions {output.predictions} --shares {output.shares}"
        " --contact-sheet {output.contact_sheet} > {log} 2>&1"
