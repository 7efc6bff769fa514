# The zero-shot kind (probes.kinds: zeroshot; imagenet_cog/probes/kinds/zeroshot.py), every rule
# of it: an image-text model's text tower turns each dataset's names table into a classifier,
# which scores the dataset's test features. Nothing is fitted: one result per model and dataset,
# off the summary's grid of N and seeds. probes.smk includes this file when the kind is
# configured; its commands are the stages' (levels, features, probes, results).


include: "functions/zeroshot.smk"


# The names a zero-shot classifier calls a dataset's concepts by, or every dataset's together
# (open-set): an editable table (imagenet_cog/levels/concept_names.py).
rule concept_names:
    input:
        unpack(concept_names_inputs),
        wordnet=PATHS.wordnet_corpus(),
    output:
        PATHS.concept_names("{named}"),
    log:
        PATHS.log("levels/names/{named}.log"),
    benchmark:
        PATHS.log("benchmarks/levels/names/{named}.tsv")
    wildcard_constraints:
        named=naming.NAMED_CONCEPTS_PATTERN,
    conda:
        ZEROSHOT_CONDA_ENVIRONMENT
    params:
        datasets=lambda wildcards: " ".join(named_datasets(wildcards.named)),
    shell:
        python_command("concept-names") + " --dataset {params.datasets} --concepts {input.concepts}"
        " --wordnet {input.wordnet} --in1k-synsets {input.in1k_synsets:q} --output {output} > {log} 2>&1"


# The text features of a dataset's concepts, as the image features are its images'. The file
# keeps its provenance and is rewritten only when weights, names or templates change
# (imagenet_cog/features/zeroshot_classifier.py).
rule zeroshot_classifier:
    input:
        unpack(zeroshot_classifier_inputs),
    output:
        PATHS.zeroshot_classifier("{model}", "{named}"),
    log:
        PATHS.log("features/{model}/zeroshot/{named}.log"),
    benchmark:
        PATHS.log("benchmarks/features/{model}/zeroshot/{named}.tsv")
    wildcard_constraints:
        named=naming.NAMED_CONCEPTS_PATTERN,
    conda:
        ZEROSHOT_CONDA_ENVIRONMENT
    resources:
        gpu=EXTRACTION_RESOURCES["gpu"],
        mem_mb=4000,
    params:
        arch=lambda wildcards: model_spec(wildcards.model).arch,
        weights=lambda wildcards: command_weights(wildcards.model),
        trusted=lambda wildcards: trusted_globals_option(wildcards.model),
        # staleness-only: new weights rebuild the classifier
        settings_weights=lambda wildcards: model_weights_identity(wildcards.model),
        templates=ZEROSHOT_SETTINGS["templates"],
        device=config["features"]["device"],
        other_concepts=other_concepts_option,
    shell:
        python_command("zeroshot-classifier") + " --model-name {wildcards.model} --arch {params.arch}"
        " --weights {params.weights:q} {params.trusted} --names {input.names:q} --templates {params.templates}"
        " --named {wildcards.named} --concepts {input.concepts} {params.other_concepts}"
        " --device {params.device} --output {output} > {log} 2>&1"


# A text-tower model's test features of one dataset scored by its classifier of the dataset's
# names (imagenet_cog/probes/zeroshot_probe.py).
rule probe_zeroshot:
    input:
        unpack(zeroshot_probe_inputs),
    output:
        PATHS.zeroshot_result("{model}", "{named}"),
    log:
        PATHS.log("probes/{model}/{named}/zeroshot.log"),
    benchmark:
        PATHS.log("benchmarks/probes/{model}/{named}/zeroshot.tsv")
    wildcard_constraints:
        named=naming.DEFAULT_DATASET,
    conda:
        ZEROSHOT_CONDA_ENVIRONMENT
    resources:
        gpu=PROBE_GPUS,
        mem_mb=zeroshot_mem_mb,
    params:
        device=config["probes"]["device"],
    shell:
        python_command("probe-zeroshot") + " --model {wildcards.model} --dataset {wildcards.named}"
        " --test {input.test} --splits {input.splits} --classifier {input.classifier}"
        " --device {params.device} --output {output} > {log} 2>&1"


# The open set: every dataset's test images among all the run's concepts (IN-1K and the
# levels in one classifier), with where each dataset's errors go. Its own rule, not a loop
# over the two: Snakemake evaluates a rule's shell expression again when the job runs, so a
# loop variable there would be the last loop's.
rule probe_zeroshot_open_set:
    input:
        unpack(zeroshot_probe_inputs),
    output:
        PATHS.zeroshot_result("{model}", "{named}"),
    log:
        PATHS.log("probes/{model}/{named}/zeroshot.log"),
    benchmark:
        PATHS.log("benchmarks/probes/{model}/{named}/zeroshot.tsv")
    wildcard_constraints:
        named=naming.OPEN_SET,
    conda:
        ZEROSHOT_CONDA_ENVIRONMENT
    resources:
        gpu=PROBE_GPUS,
        mem_mb=zeroshot_mem_mb,
    params:
        datasets=" ".join(DATASETS),
        device=config["probes"]["device"],
    shell:
        python_command("probe-zeroshot-open-set") + " --model {wildcards.model} --dataset {params.datasets}"
        " --test {input.test} --splits {input.splits} --classifier {input.classifier} --names {input.names:q}"
        " --device {params.device} --output {output} > {log} 2>&1"


# The image-text models' zero-shot top-1 beside their linear probe, the N at which the few-shot
# probe overtakes it, and the open set's errors by destination (imagenet_cog/results/zeroshot.py).
# The models' entries as the aggregates take them (models_json: no pretraining_data, paper_name or
# reading options, which the command does not show); each model's exposure class beside it
# (exposures_option: a declaration reruns this job only where it changes a zero-shot model's class).
rule zeroshot_results:
    input:
        results=zeroshot_results(),
        summary=PATHS.results_summary(),
    output:
        tables=[
            (
                tidy_report(PATHS.table(name, extension), f"{name}.rst", title, "Zero-shot")
                if extension == "csv"
                else PATHS.table(name, extension)
            )
            for name, title in ZEROSHOT_TABLES.items()
            for extension in TABLE_FORMATS
        ],
        figures=[
            figure_report(name, f"{name}_figure.rst") if extension == "png" else PATHS.figure(name, extension)
            for name in ZEROSHOT_FIGURES
            for extension in FIGURE_FORMATS
        ],
    log:
        PATHS.log("results/zeroshot.log"),
    conda:
        ZEROSHOT_CONDA_ENVIRONMENT
    params:
        root=results_root,
        models=shlex.quote(models_json(models=ZEROSHOT_MODELS)),
        datasets=" ".join(DATASETS),
        exposures=exposures_option(ZEROSHOT_MODELS),
    shell:
        python_command("zeroshot-results") + " --results-root {params.root} --summary {input.summary}"
        " --models {params.models} --datasets {params.datasets} --results {input.results}"
        " --exposures {params.exposures} > {log} 2>&1"
