# Fine-tuning stage (finetune.enabled): the control of CoG supp. C.2, Fig. 6. Each fine-tuned
# model (finetune.models, default the baseline) is trained whole, with a new head, on each
# dataset's training split and tested on its test split; the frozen features' linear probe
# is then tabled and plotted relative to it. Logic: imagenet_cog/finetune/.


include: "functions/finetune.smk"


# One job per model and dataset, on one GPU or, with finetune.gpus > 1, on one node's GPUs
# through torchrun. Its epoch checkpoint is no output: a killed job leaves it, and the job
# run again resumes from it (docs/finetune.md).
rule finetune_backbone:
    input:
        unpack(image_index_inputs),
        split_table=PATHS.image_splits("{dataset}"),
        images=lambda wildcards: image_root(wildcards.dataset),
        checkpoint=model_checkpoint_inputs,
    output:
        PATHS.finetune_result("{model}", "{dataset}"),
    log:
        PATHS.log("finetune/{model}/{dataset}.log"),
    benchmark:
        PATHS.log("benchmarks/finetune/{model}/{dataset}.tsv")
    wildcard_constraints:
        dataset=naming.EXTRACTED_DATASET,
    conda:
        CONDA_ENVIRONMENT
    threads: FINETUNE_THREADS
    resources:
        gpu=FINETUNE_GPUS,
        mem_mb=FINETUNE_SETTINGS["mem_mb"],
        runtime=finetune_minutes,
    params:
        arch=lambda wildcards: model_spec(wildcards.model).arch,
        weights=lambda wildcards: command_weights(wildcards.model),
        # staleness-only: new weights (a checkpoint's digest) fine-tune again
        settings_weights=lambda wildcards: model_weights_identity(wildcards.model),
        options=extract_command_options,
        weights_identity_option=lambda wildcards: weights_identity_option(wildcards.model),
        recipe=shlex.quote(json.dumps(FINETUNE_SETTINGS["recipe"], sort_keys=True)),
        seed=FINETUNE_SETTINGS["seed"],
        device=FINETUNE_SETTINGS["device"],
        mixed_precision=str(FINETUNE_SETTINGS["mixed_precision"]).lower(),
        processes=max(FINETUNE_GPUS, 1),
        checkpoint=lambda wildcards: PATHS.finetune_checkpoint(wildcards.model, wildcards.dataset),
    shell:
        finetune_launcher() + " --split-table {input.split_table} --image-root {input.images:q} --dataset {wildcards.dataset}"
        " --model-name {wildcards.model} --arch {params.arch} --weights {params.weights:q}"
        " {params.options} {params.weights_identity_option} --recipe {params.recipe} --seed {params.seed}"
        " --device {params.device} --mixed-precision {params.mixed_precision}"
        " --num-workers $(( {threads} / {params.processes} - 1 )) --threads {threads}"
        " --checkpoint {params.checkpoint:q} --output {output} > {log} 2>&1"


rule finetune_results:
    input:
        results=finetune_results(),
        summary=PATHS.results_summary(),
    output:
        tables=[
            (
                report_output(
                    PATHS.table(FINETUNE_NAME, extension),
                    caption="finetune_table.rst",
                    category="Fine-tuning control",
                )
                if extension == "csv"
                else PATHS.table(FINETUNE_NAME, extension)
            )
            for extension in TABLE_FORMATS
        ],
        figures=[
            (
                report_output(
                    PATHS.figure(FINETUNE_NAME, extension),
                    caption="finetune_figure.rst",
                    category="Fine-tuning control",
                )
                if extension == "png"
                else PATHS.figure(FINETUNE_NAME, extension)
            )
            for extension in FIGURE_FORMATS
        ],
    log:
        PATHS.log("results/finetune.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        root=results_root,
        models=lambda wildcards: shlex.quote(finetune_models_json()),
        datasets=" ".join(FINETUNE_DATASETS),
    shell:
        python_command("finetune-results") + " --results-root {params.root} --summary {input.summary}"
        " --models {params.models} --datasets {params.datasets} --results {input.results} > {log} 2>&1"


# Named target: `snakemake finetune` fine-tunes and tables the configured models.
rule finetune:
    input:
        finetune_targets(),
