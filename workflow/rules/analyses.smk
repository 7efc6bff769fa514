# Analyses stage: representation analyses of the features already extracted (the CoG preprint
# Sec. 4.3 and supp. D; Laina et al. 2020 Sec. 3 and 5.1), per model x dataset, each switched on or
# off under `analyses:` in config.yaml, and forced-choice sheets for human raters. See
# imagenet_cog/analyses/ for what each computes.
#
#   snakemake analyses                     every switched-on analysis, its tables and figures
#   snakemake analyses --configfile a.yaml with e.g. "analyses: {learnability: {enabled: false}}"
#
# Each analysis's settings are params of its own rule only, so changing one re-runs that
# analysis and the summary, tables and figures, nothing else.


include: "functions/analyses.smk"


rule analyses_kmeans:
    input:
        train=PATHS.features("{model}", "{dataset}", "train"),
        test=PATHS.features("{model}", "{dataset}", "test"),
    output:
        result=PATHS.analysis_result("{model}", "{dataset}", "kmeans"),
        assignments=PATHS.kmeans_assignments("{model}", "{dataset}"),
    log:
        PATHS.log("analyses/{model}/{dataset}/kmeans.log"),
    benchmark:
        PATHS.log("analyses/benchmarks/{model}/{dataset}/kmeans.tsv")
    conda:
        CONDA_ENVIRONMENT
    threads: ANALYSES_CONFIG["threads"]
    params:
        settings=ANALYSES_CONFIG["kmeans"],
        device=ANALYSES_CONFIG["device"],
        seeds=" ".join(str(seed) for seed in ANALYSES_CONFIG["kmeans"]["seeds"]),
        options=(
            ("" if ANALYSES_CONFIG["kmeans"]["l2_normalise"] else " --no-l2-normalise")
            + (
                f" --train-per-concept {ANALYSES_CONFIG['kmeans']['train_per_concept']}"
                if ANALYSES_CONFIG["kmeans"]["train_per_concept"]
                else ""
            )
        ),
    shell:
        python_command("analyses-kmeans") + " --train {input.train} --test {input.test} --output {output.result}"
        " --assignments {output.assignments} --model {wildcards.model} --dataset {wildcards.dataset}"
        " --seeds {params.seeds} --iterations {params.settings[iterations]}"
        " --subsample-seed {params.settings[subsample_seed]}{params.options}"
        " --device {params.device} --threads {threads} > {log} 2>&1"


rule analyses_alignment_uniformity:
    input:
        test=PATHS.features("{model}", "{dataset}", "test"),
    output:
        PATHS.analysis_result("{model}", "{dataset}", "alignment_uniformity"),
    log:
        PATHS.log("analyses/{model}/{dataset}/alignment_uniformity.log"),
    benchmark:
        PATHS.log("analyses/benchmarks/{model}/{dataset}/alignment_uniformity.tsv")
    conda:
        CONDA_ENVIRONMENT
    threads: ANALYSES_CONFIG["threads"]
    params:
        settings=ANALYSES_CONFIG["alignment_uniformity"],
        device=ANALYSES_CONFIG["device"],
    shell:
        python_command("analyses-geometry")
        + " --test {input.test} --output {output} --model {wildcards.model} --dataset {wildcards.dataset}"
        " --alpha {params.settings[alpha]} --t {params.settings[t]} --block-size {params.settings[block_size]}"
        " --device {params.device} --threads {threads} > {log} 2>&1"


rule analyses_learnability:
    input:
        test=PATHS.features("{model}", "{dataset}", "test"),
        splits=PATHS.image_splits("{dataset}"),
    output:
        result=PATHS.analysis_result("{model}", "{dataset}", "learnability"),
        concepts=PATHS.learnability_concepts("{model}", "{dataset}"),
    log:
        PATHS.log("analyses/{model}/{dataset}/learnability.log"),
    benchmark:
        PATHS.log("analyses/benchmarks/{model}/{dataset}/learnability.tsv")
    conda:
        CONDA_ENVIRONMENT
    params:
        settings=ANALYSES_CONFIG["learnability"],
    shell:
        python_command("analyses-learnability") + " --test {input.test} --splits {input.splits} --output {output.result}"
        " --concepts {output.concepts} --model {wildcards.model} --dataset {wildcards.dataset}"
        " --tasks {params.settings[tasks]} --references {params.settings[references]}"
        " --seed {params.settings[seed]} > {log} 2>&1"


rule analyses_agreement:
    input:
        lambda wildcards: [PATHS.kmeans_assignments(model, wildcards.dataset) for model in ANALYSES_MODELS],
    output:
        PATHS.agreement_matrix("{dataset}"),
    log:
        PATHS.log("analyses/agreement/{dataset}.log"),
    conda:
        CONDA_ENVIRONMENT
    threads: ANALYSES_CONFIG["threads"]
    params:
        models=" ".join(ANALYSES_MODELS),
    shell:
        python_command("analyses-agreement")
        + " --models {params.models} --assignments {input} --output {output} --threads {threads} > {log} 2>&1"


rule analyses_summary:
    input:
        analysis_results(),
    output:
        report_output(
            PATHS.analyses_summary(),
            caption="analyses_summary.rst",
            category="Analyses",
            subcategory="Tables",
            labels={"table": "summary (tidy CSV)", "dataset": "all"},
        ),
    log:
        PATHS.log("analyses/analyses_summary.log"),
    conda:
        CONDA_ENVIRONMENT
    shell:
        python_command("analyses-summary") + " --results {input} --output {output} > {log} 2>&1"


rule analyses_tables:
    input:
        summary=PATHS.analyses_summary(),
        agreement=list(agreement_matrices().values()),
    output:
        [
            (analysis_table_report(name) if extension == "csv" else PATHS.table(name, extension))
            for name in analysis_table_names(analyses_switched_on(), DATASETS)
            for extension in TABLE_FORMATS
        ],
    log:
        PATHS.log("analyses/analyses_tables.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        arguments=analyses_rendering_arguments(),
    shell:
        python_command("analyses-tables") + " --summary {input.summary} {params.arguments} > {log} 2>&1"


rule analyses_figures:
    input:
        summary=PATHS.analyses_summary(),
        agreement=list(agreement_matrices().values()),
    output:
        [analysis_figure_report(name) for name in analysis_figure_names(analyses_switched_on())],
        [PATHS.figure(name, "pdf") for name in analysis_figure_names(analyses_switched_on())],
    log:
        PATHS.log("analyses/analyses_figures.log"),
    benchmark:
        PATHS.log("analyses/benchmarks/analyses_figures.tsv")
    conda:
        CONDA_ENVIRONMENT
    params:
        arguments=analyses_rendering_arguments(figures=True),
    shell:
        python_command("analyses-figures") + " --summary {input.summary} {params.arguments} > {log} 2>&1"


# detecting unseen concepts (docs/analyses.md) -------------------------------------------
# One job per model: IN-1K's test images against each level's, scored by the IN-1K probe at
# N = all of every seed (its classifier file, kept beside the result JSON, is read as the
# label-noise audit reads it), the k-th nearest IN-1K training feature and, for image-text
# models, MCM. Then one job for the tables per score and the two figures.


rule analyses_detection:
    input:
        unpack(detection_inputs),
    output:
        result=PATHS.detection_result("{model}"),
        seeds=PATHS.detection_seeds("{model}"),
    log:
        PATHS.log("analyses/{model}/detection.log"),
    benchmark:
        PATHS.log("analyses/benchmarks/{model}/detection.tsv")
    wildcard_constraints:
        model=detection_model_pattern(),
    conda:
        CONDA_ENVIRONMENT
    threads: ANALYSES_CONFIG["threads"]
    params:
        datasets=" ".join(detection_levels()),
        scores=" ".join(DETECTION_CONFIG["scores"]),
        k=DETECTION_CONFIG["k"],
        temperature=DETECTION_CONFIG["temperature"],
        options=detection_options,
        device=ANALYSES_CONFIG["device"],
    shell:
        python_command("analyses-detection") + " --model {wildcards.model} --train {input.train} --known {input.known}"
        " --datasets {params.datasets} --unknown {input.unknown} {params.options} --scores {params.scores}"
        " --k {params.k} --temperature {params.temperature} --device {params.device} --threads {threads}"
        " --output {output.result} --seed-table {output.seeds} > {log} 2>&1"


rule detection_results:
    input:
        seeds=lambda wildcards: [PATHS.detection_seeds(model) for model in detection_models()],
        summary=PATHS.results_summary(),
    output:
        [detection_table_report(score) for score in detection_scores()],
        [PATHS.table(f"detection_{score}", extension) for score in detection_scores() for extension in ("md", "tex")],
        [detection_figure_report(name) for name in DETECTION_FIGURES],
        [PATHS.figure(name, "pdf") for name in DETECTION_FIGURES],
    log:
        PATHS.log("analyses/detection_results.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        root=results_root,
        models=lambda wildcards: shlex.quote(models_json()),
        datasets=" ".join(detection_levels()),
        scores=" ".join(detection_scores()),
        exposures=lambda wildcards: exposures_option(detection_models()),
    shell:
        python_command("detection-results") + " --results-root {params.root} --models {params.models}"
        " --datasets {params.datasets} --scores {params.scores} --seed-tables {input.seeds}"
        " --summary {input.summary} --exposures {params.exposures} > {log} 2>&1"


# concept generalization as a curve (docs/analyses.md) ------------------------------------
# One job per model: every level's and level-set dataset's test images scored by the N = all
# probe of each seed (its classifier file, read or refitted as the label-noise audit does);
# then one job for the per-concept table, the curve against Lin similarity, its numbers and
# the outliers.


rule analyses_concepts:
    input:
        unpack(concept_inputs),
    output:
        PATHS.concept_accuracy("{model}"),
    log:
        PATHS.log("analyses/{model}/concepts.log"),
    benchmark:
        PATHS.log("analyses/benchmarks/{model}/concepts.tsv")
    wildcard_constraints:
        model=concept_model_pattern(),
    conda:
        CONDA_ENVIRONMENT
    params:
        # <root>/analyses/<model>/concepts.tsv
        root=lambda wildcards, output: os.path.dirname(os.path.dirname(os.path.dirname(output[0]))),
        datasets=concept_dataset_options,
        device=config["probes"]["device"],
    shell:
        python_command("analyses-concepts") + " --results-root {params.root} --model {wildcards.model}"
        " {params.datasets} --device {params.device} --output {output} > {log} 2>&1"


rule concept_results:
    input:
        unpack(concept_results_inputs),
    output:
        concept_report(CONCEPT_TABLE, "csv", "concepts.rst", {"table": "per-concept accuracy", "dataset": "levels"}),
        concept_report(CONCEPT_CURVE, "csv", "concept_curve_table.rst", {"table": "curve", "dataset": "Lin's levels"}),
        concept_report(CONCEPT_OUTLIERS, "csv", "concept_outliers.rst", {"table": "outliers", "dataset": "Lin's levels"}),
        concept_report(CONCEPT_CURVE, "png", "concept_curve.rst", {"figure": "concept_curve"}),
        [PATHS.table(name, extension) for name in (CONCEPT_CURVE, CONCEPT_OUTLIERS) for extension in ("md", "tex")],
        PATHS.figure(CONCEPT_CURVE, "pdf"),
    log:
        PATHS.log("analyses/concept_results.log"),
    benchmark:
        PATHS.log("analyses/benchmarks/concept_results.tsv")
    conda:
        CONDA_ENVIRONMENT
    params:
        arguments=concept_results_arguments,
    shell:
        python_command("concept-results") + " {params.arguments} --seed-tables {input.seeds}"
        " --ranking {input.ranking} > {log} 2>&1"


# Named target: `snakemake analyses` builds the stage for the configured selection.
rule analyses:
    input:
        analysis_outputs(),
        detection_outputs(),
        concept_outputs(),


# human forced-choice sheets (Laina et al. 2020, Sec. 3) ---------------------------------
# Per dataset, HTML pages for human raters (images embedded, so a page can be mailed or
# moved) and the answer key apart from them. Raters' answers are scored outside the
# workflow: `python -m imagenet_cog score-raters --answers *.csv --key <key.tsv> ...`.
# Not in the report: a full-size study embeds tens of MB of images per dataset.
# Describability pages show analyses.raters.description (the gloss by default; an automatic
# description needs auto_descriptions): its options ({params.descriptions}, empty for the
# gloss) entered the shell text once, which re-ran each finished rater_sheets job (6 on the
# finished demo, measured with snakemake -n); the default adds nothing to `settings`.


rule rater_sheets:
    input:
        unpack(rater_sheet_inputs),
    output:
        sheets=directory(PATHS.rater_sheets("{dataset}")),
        key=PATHS.rater_key("{dataset}"),
    log:
        PATHS.log("analyses/raters/{dataset}.log"),
    benchmark:
        PATHS.log("analyses/benchmarks/raters/{dataset}.tsv")
    wildcard_constraints:
        dataset=naming.DEFAULT_DATASET,
    conda:
        CONDA_ENVIRONMENT
    params:
        root=lambda wildcards: image_root(wildcards.dataset),
        index=lambda wildcards, input: f"--image-index {input.index}" if "index" in input.keys() else "",
        features=lambda wildcards, input: f"--features {input.features}" if "features" in input.keys() else "",
        settings=rater_sheet_settings(),
        negatives=" ".join(config["analyses"]["raters"]["negatives"]),
        variants=" ".join(config["analyses"]["raters"]["variants"]),
        descriptions=rater_sheet_description_options,
    shell:
        python_command("rater-sheets")
        + " --dataset {wildcards.dataset} --split-table {input.split_table} --image-root {params.root:q}"
        " {params.index} --catalogue {input.catalogue} {params.features}"
        " --concepts {params.settings[concepts_per_dataset]}"
        " --tasks-per-concept {params.settings[tasks_per_concept]}"
        " --references {params.settings[references]} --negatives {params.negatives}"
        " --variants {params.variants} --seed {params.settings[seed]}"
        " --image-size {params.settings[image_size]}"
        " --sheets {output.sheets} --key {output.key} {params.descriptions} > {log} 2>&1"


# `snakemake raters`: the sheets of every configured dataset, enabled or not.
rule raters:
    input:
        rater_sheet_outputs(),


# class-level captioning (Laina et al. 2020, Sec. 4) --------------------------------------
# A CoCa model captions each dataset's test images once; Eq. 4 picks each concept's and each
# k-means cluster's description among its captions (docs/analyses.md).


rule caption_images:
    input:
        unpack(caption_inputs),
    output:
        PATHS.captions("{captioner}", "{dataset}"),
    log:
        PATHS.log("analyses/captions/{captioner}/{dataset}/captions.log"),
    benchmark:
        PATHS.log("analyses/benchmarks/captions/{captioner}/{dataset}/captions.tsv")
    wildcard_constraints:
        captioner=re.escape(CAPTIONER),
        dataset=naming.DEFAULT_DATASET,
    conda:
        CONDA_ENVIRONMENT
    threads: ANALYSES_CONFIG["threads"]
    params:
        root=lambda wildcards: image_root(wildcards.dataset),
        reading=lambda wildcards: image_reading_options(wildcards.dataset, "--image-"),
        captioner=lambda wildcards: captioner_options(),
        generation=generation_options(),
        per_group=CAPTIONS["images_per_concept"],
        batch_size=CAPTIONS["batch_size"],
        device=ANALYSES_CONFIG["device"],
    shell:
        python_command("caption-images") + " {params.captioner} --split-table {input.split_table} --image-root {params.root:q}"
        " --dataset {wildcards.dataset} {params.reading} {params.generation} --per-group {params.per_group}"
        " --batch-size {params.batch_size} --device {params.device} --threads {threads}"
        " --output {output} > {log} 2>&1"


rule auto_descriptions:
    input:
        PATHS.captions("{captioner}", "{dataset}"),
    output:
        auto_description_report(PATHS.auto_descriptions("{captioner}", "{dataset}"), "concepts"),
    log:
        PATHS.log("analyses/captions/{captioner}/{dataset}/descriptions.log"),
    benchmark:
        PATHS.log("analyses/benchmarks/captions/{captioner}/{dataset}/descriptions.tsv")
    wildcard_constraints:
        captioner=re.escape(CAPTIONER),
        dataset=naming.DEFAULT_DATASET,
    conda:
        CONDA_ENVIRONMENT
    threads: ANALYSES_CONFIG["threads"]
    params:
        captioner=lambda wildcards: captioner_options(),
        device=ANALYSES_CONFIG["device"],
    shell:
        python_command("auto-descriptions") + " {params.captioner} --captions {input} --device {params.device}"
        " --threads {threads} --output {output} > {log} 2>&1"


rule auto_descriptions_clusters:
    input:
        captions=PATHS.captions("{captioner}", "{dataset}"),
        assignments=PATHS.kmeans_assignments("{model}", "{dataset}"),
    output:
        auto_description_report(PATHS.auto_descriptions("{captioner}", "{dataset}", "{model}"), "k-means clusters of {model}"),
    log:
        PATHS.log("analyses/captions/{captioner}/{dataset}/clusters/{model}.log"),
    benchmark:
        PATHS.log("analyses/benchmarks/captions/{captioner}/{dataset}/clusters/{model}.tsv")
    wildcard_constraints:
        captioner=re.escape(CAPTIONER),
        dataset=naming.DEFAULT_DATASET,
    conda:
        CONDA_ENVIRONMENT
    threads: ANALYSES_CONFIG["threads"]
    params:
        captioner=lambda wildcards: captioner_options(),
        device=ANALYSES_CONFIG["device"],
    shell:
        python_command("auto-descriptions") + " {params.captioner} --captions {input.captions} --assignments {input.assignments}"
        " --device {params.device} --threads {threads} --output {output} > {log} 2>&1"


# `snakemake captions`: the captions and descriptions of the configured datasets, enabled or not.
rule captions:
    input:
        caption_outputs(),


# describability answered by an image-text model (Laina et al. 2020, Eq. 3, Tab. 2) -------
# Each open_clip model with image_features embedding answers the describability tasks of
# every dataset's rater key: the query image whose embedding is nearer the description's
# text embedding, with the gloss and, when a captioner is connected (auto_descriptions in
# functions/analyses.smk), the automatic description. `snakemake describability`.


rule analyses_model_describability:
    input:
        unpack(model_describability_inputs),
    output:
        result=PATHS.analysis_result("{model}", "{dataset}", "model_describability"),
        answers=PATHS.model_describability_answers("{model}", "{dataset}"),
    log:
        PATHS.log("analyses/{model}/{dataset}/model_describability.log"),
    benchmark:
        PATHS.log("analyses/benchmarks/{model}/{dataset}/model_describability.tsv")
    wildcard_constraints:
        model=describability_model_pattern(),
        dataset=naming.DEFAULT_DATASET,
    conda:
        CONDA_ENVIRONMENT
    params:
        model=lambda wildcards: describability_model_options(wildcards.model),
        device=ANALYSES_CONFIG["device"],
        descriptions=lambda wildcards, input: (f"--descriptions {input.descriptions}" if "descriptions" in input.keys() else ""),
    shell:
        python_command("model-describability")
        + " --key {input.key} --catalogue {input.catalogue} {params.descriptions} --test {input.test}"
        " --model-name {wildcards.model} {params.model} --dataset {wildcards.dataset}"
        " --device {params.device} --answers {output.answers} --output {output.result} > {log} 2>&1"


rule analyses_describability_table:
    input:
        unpack(describability_table_inputs),
    output:
        report_output(
            PATHS.table("analyses_describability", "csv"),
            caption="analyses_describability.rst",
            category="Analyses",
            subcategory="Tables",
            labels={"table": "describability", "dataset": "IN-1K and levels"},
        ),
        PATHS.table("analyses_describability", "md"),
        PATHS.table("analyses_describability", "tex"),
    log:
        PATHS.log("analyses/analyses_describability_table.log"),
    benchmark:
        PATHS.log("analyses/benchmarks/analyses_describability_table.tsv")
    conda:
        CONDA_ENVIRONMENT
    params:
        arguments=describability_table_arguments,
    shell:
        python_command("model-describability-table") + " --results {input.results} {params.arguments} > {log} 2>&1"


# `snakemake describability`: the models' answers and the table, when a model answers.
rule describability:
    input:
        model_describability_outputs(),
