# Probes stage: a logistic-regression probe per model x dataset x shots x seed, its (lr,
# weight decay) tuned by Optuna on a validation split of the training features, then
# refitted on the training set and scored once on the test set (CoG (ICCV 2021) Sec. 3.4.3,
# supp. B.2); and the other probe kinds (MLP, PCA + linear) of the CoG preprint (arXiv v1, 2020),
# supp. C.2, C.3; and the k-NN probe of the self-supervised papers (probe_knn). Every search
# rule runs the `probe` command, its options built once by probe_options in
# functions/probes.smk. Logic: imagenet_cog/probes/ (probe.py the command, search.py the
# protocol and result JSON, linear.py the SGD, knn.py and knn_probe.py the k-NN).
#
# The Optuna journal (PATHS.probe_study) is deliberately not an output: Snakemake deletes
# the outputs of a failed job, and the journal is what lets a re-run resume the search.
#
# Settings (docs/architecture.md, "Staleness-only params"): a probe rule's `settings` are
# params.probes (with lr_range and wd_range for the linear probe), the probes.* settings the
# linear kind's module allows (imagenet_cog/probes/kinds/linear.py). They keep the name
# `probes` rather than `settings`: the command text names them, and Snakemake reruns every
# job whose rule's command text changed (docs/probes.md, "What reruns a probe").


include: "functions/probes.smk"


# One run per job: the level sets' and variants' probes, and IN-1K's and the levels' under
# probes.group: seed.
rule probe:
    input:
        **LINEAR_PROBE_INPUT,
    output:
        PATHS.probe_result("{model}", "{dataset}", "{shots}", "{seed}"),
    log:
        PATHS.log("probes/{model}/{dataset}/shots-{shots}/seed-{seed}.log"),
    benchmark:
        PATHS.log("benchmarks/probes/{model}/{dataset}/shots-{shots}/seed-{seed}.tsv")
    conda:
        CONDA_ENVIRONMENT
    threads: PROBE_THREADS
    resources:
        **probe_resources(),
    params:
        **linear_probe_params("seed"),
    shell:
        probe_command()


if PROBE_GROUP == "shots":

    # All seeds of one (model, dataset, N) of IN-1K and the levels in one job: the features
    # are read once, the seeds' searches train their candidates in shared passes and so do
    # their final fits (imagenet_cog/probes/search.py, probe_seeds). Each seed keeps its own study,
    # journal and result file; the other datasets (level sets, variants) keep one job per seed.
    ruleorder: probe_seeds > probe

    rule probe_seeds:
        input:
            **LINEAR_PROBE_INPUT,
        output:
            [PATHS.probe_result("{model}", "{dataset}", "{shots}", seed) for seed in SEEDS],
        log:
            PATHS.log("probes/{model}/{dataset}/shots-{shots}/seeds.log"),
        benchmark:
            PATHS.log("benchmarks/probes/{model}/{dataset}/shots-{shots}/seeds.tsv")
        wildcard_constraints:
            dataset="|".join(DATASETS),
            model=GRID_MODEL_PATTERN,
        conda:
            CONDA_ENVIRONMENT
        threads: PROBE_THREADS
        resources:
            **probe_resources(runs=len(SEEDS)),
        params:
            **linear_probe_params("shots"),
        shell:
            probe_command("{params.seeds}")


if PROBE_GROUP == "dataset":

    # The resident job: every N and seed of one (model, dataset) of IN-1K and the levels in one
    # job, on the features read and prepared on the device once (imagenet_cog/probes/search.py,
    # probe_grid), N after N, each N's seeds in shared passes, each N's results written when
    # done. Each run keeps its own study, journal and result; a killed job run again resumes
    # every study from its journal and refits only the final probes.
    ruleorder: probe_resident > probe

    rule probe_resident:
        input:
            **LINEAR_PROBE_INPUT,
        output:
            [PATHS.probe_result("{model}", "{dataset}", shots, seed) for shots in SHOTS for seed in SEEDS],
        log:
            PATHS.log("probes/{model}/{dataset}/resident.log"),
        benchmark:
            PATHS.log("benchmarks/probes/{model}/{dataset}/resident.tsv")
        wildcard_constraints:
            dataset="|".join(DATASETS),
            model=GRID_MODEL_PATTERN,
        conda:
            CONDA_ENVIRONMENT
        threads: PROBE_THREADS
        resources:
            **probe_resources(runs=len(SHOTS) * len(SEEDS)),
        params:
            **linear_probe_params("dataset"),
        shell:
            probe_command("{params.seeds}", shots="{params.shots}")


# The other probe kinds (the CoG preprint, supp. C.2, C.3): the same search, final fit
# and result JSON, with the kind's network and learning-rate range, under a folder named
# after the kind. params.probes holds the kind's settings (kind_probe_settings).
rule probe_kind:
    input:
        unpack(probe_kind_inputs),
    output:
        PATHS.probe_result("{model}", "{dataset}", "{shots}", "{seed}", "{kind}"),
    log:
        PATHS.log("probes/{model}/{dataset}/{kind}/shots-{shots}/seed-{seed}.log"),
    benchmark:
        PATHS.log("benchmarks/probes/{model}/{dataset}/{kind}/shots-{shots}/seed-{seed}.tsv")
    conda:
        CONDA_ENVIRONMENT
    threads: PROBE_THREADS
    resources:
        **probe_resources(runtime=probe_kind_runtime_minutes),
    params:
        study=lambda wildcards: PATHS.probe_study(
            wildcards.model, wildcards.dataset, wildcards.shots, wildcards.seed, wildcards.kind
        ),
        probes=lambda wildcards: kind_probe_settings(wildcards.kind),
        pca=lambda wildcards, input: f"--pca-components {input.components}" if "components" in input.keys() else "",
    shell:
        probe_command(kind=True)


# The kinds scored by a command of their own (their module's own_job: the k-NN, probes.kinds:
# knn, imagenet_cog/probes/knn.py): rule probe_<kind>, every N and seed of one model and dataset
# of IN-1K and the levels in one job, the features read and prepared once; each (N, seed) scored
# on the linear probe's final-fit images. Nothing is searched, so no journal.
for own_job_kind in OWN_JOB_KINDS:

    rule:
        name:
            naming.own_job_rule(own_job_kind.name)
        input:
            **LINEAR_PROBE_INPUT,
        output:
            [PATHS.probe_result("{model}", "{dataset}", shots, seed, own_job_kind.name) for shots in SHOTS for seed in SEEDS],
        log:
            PATHS.log(f"probes/{{model}}/{{dataset}}/{own_job_kind.name}.log"),
        benchmark:
            PATHS.log(f"benchmarks/probes/{{model}}/{{dataset}}/{own_job_kind.name}.tsv")
        wildcard_constraints:
            dataset="|".join(DATASETS),
        conda:
            CONDA_ENVIRONMENT
        threads: PROBE_THREADS
        resources:
            gpu=PROBE_GPUS,
            mem_mb=probe_mem_mb,
            runtime=own_job_runtime_minutes(own_job_kind.name),
        params:
            **own_job_params(own_job_kind),
        shell:
            OWN_JOB_SHELL


# The kinds off the summary's grid (zero-shot): each one's rules in a file of their own.
for off_grid_kind in OFF_GRID_KINDS:

    include: off_grid_kind.off_grid.rules


# Principal components of a dataset's training features, once for every d and seed of the
# pca-<d> probes (the CoG preprint, supp. C.2; imagenet_cog/probes/pca.py).
rule pca_components:
    input:
        PATHS.features("{model}", "{dataset}", "train"),
    output:
        PATHS.pca_components("{model}", "{dataset}"),
    log:
        PATHS.log("probes/{model}/{dataset}/pca-components.log"),
    benchmark:
        PATHS.log("benchmarks/pca/{model}/{dataset}.tsv")
    conda:
        CONDA_ENVIRONMENT
    threads: PROBE_THREADS
    resources:
        gpu=PROBE_GPUS,
        mem_mb=probe_mem_mb,
    params:
        device=config["probes"]["device"],
    shell:
        python_command("pca-components")
        + " --train {input} --output {output} --device {params.device} --threads {threads} > {log} 2>&1"


# Named target: `snakemake probes` builds the linear and other kinds' probes of the grid.
rule probes:
    input:
        all_probe_results(models=result_models()),
        off_grid_results(),
