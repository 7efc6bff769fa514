# Plan stage: what a run costs before it starts. `snakemake plan` prices the configured
# run (jobs, images read, bytes written, trial-epochs, GPU-hours on the device of
# plan.rates, wall time on plan.gpus GPUs) without reading an image, writes
# <results_dir>/plan.tsv and prints it; after a run it also sets each rule's measured time
# against its projection. Logic: imagenet_cog/plan/.


include: "functions/plan.smk"


# No declared output: a plan is a report of the config, the rates and the benchmark files
# so far, read by no rule, so `snakemake plan` runs it whenever asked (the command writes
# plan.tsv atomically itself).
rule plan:
    log:
        PATHS.log("plan.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        options=plan_arguments(),
    shell:
        python_command("plan") + " {params.options} 2> {log}"
