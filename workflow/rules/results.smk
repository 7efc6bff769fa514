# Results stage: probe results -> tidy summary -> tables, figures, timings (paper Sec. 4.2),
# all registered for `snakemake --report report.html`; plus the named target rules.
#
# A subset from the command line, without editing files (Snakemake merges --config and
# --configfile into config.yaml key by key, so sibling keys keep their values):
#   snakemake figures --config datasets='[in1k,l1]'              strings: --config works
#   snakemake tables --config results='{models: [resnet50,dino]}'
#   snakemake probes --configfile few.yaml                        numbers: use a YAML file,
#       with e.g. "probes: {shots: [1, 2, all]}": --config passes the numbers in lists and
#       mappings on as strings, which the schema rejects.
#   snakemake tables --configfile partial.yaml                    "results: {allow_missing: true}":
#       tables from the probe results that exist (failed jobs show as missing seeds).


rule aggregate_probes:
    conda:
        CONDA_ENVIRONMENT
    input:
        result_probe_inputs(),
    output:
        report(
            PATHS.results_summary(),
            caption="../report/summary.rst",
            category="Tables",
            subcategory="Summary",
            labels={"table": "summary (tidy CSV)", "dataset": "all"},
        ),
    params:
        grid=grid_arguments(),
    log:
        "logs/results/aggregate_probes.log",
    shell:
        python_command("aggregate-probes") + " {params.grid} --output {output} > {log} 2>&1"


rule result_tables:
    conda:
        CONDA_ENVIRONMENT
    input:
        PATHS.results_summary(),
    output:
        [table_report(name) if extension == "csv" else PATHS.table(name, extension)
         for name in result_table_names(DATASETS) for extension in TABLE_FORMATS],
    params:
        root=PATHS.root,
        baseline=config["results"]["baseline_model"],
    log:
        "logs/results/result_tables.log",
    shell:
        python_command("results-tables")
        + " --summary {input} --results-root {params.root} --baseline {params.baseline} > {log} 2>&1"


rule result_figures:
    conda:
        CONDA_ENVIRONMENT
    input:
        PATHS.results_summary(),
    output:
        figure_report("top1_levels", "figure_top1_levels.rst"),
        figure_report("relative_levels", "figure_relative_levels.rst"),
        figure_report("few_shot", "figure_few_shot.rst"),
        figure_report("few_shot_relative", "figure_few_shot_relative.rst"),
        figure_report("pca", "figure_pca.rst"),
        figure_report("pca_relative", "figure_pca_relative.rst"),
        [PATHS.figure(name, "pdf") for name in RESULT_FIGURES],
    params:
        root=PATHS.root,
        baseline=config["results"]["baseline_model"],
    log:
        "logs/results/result_figures.log",
    benchmark:
        "logs/benchmarks/results/result_figures.tsv"
    shell:
        python_command("results-figures")
        + " --summary {input} --results-root {params.root} --baseline {params.baseline} > {log} 2>&1"


# Reads the benchmark files of the extraction and probe jobs, which exist once the probe
# results (its inputs) do; they are not declared inputs because no rule lists them as outputs.
rule result_timings:
    conda:
        CONDA_ENVIRONMENT
    input:
        result_probe_inputs(),
    output:
        report(
            PATHS.timings("csv"),
            caption="../report/timings.rst",
            category="Timings",
            labels={"table": "seconds per model and dataset"},
        ),
        PATHS.timings("md"),
    params:
        grid=grid_arguments(),
        benchmarks="logs/benchmarks",
    log:
        "logs/results/result_timings.log",
    shell:
        python_command("results-timings")
        + " {params.grid} --benchmark-root {params.benchmarks} --output {output[0]} > {log} 2>&1"


# Named targets: `snakemake <name>` builds one stage for the configured selection.
rule levels:
    input:
        PATHS.eligibility_report(),
        PATHS.ranking(),
        [PATHS.level_concepts(level) for level in LEVEL_NAMES],
        PATHS.levels_figure("png"),
        PATHS.levels_figure("pdf"),


rule features:
    input:
        [PATHS.features(model, dataset, split) for model in result_models() for dataset in DATASETS for split in SPLITS],


rule probes:
    input:
        all_probe_results(models=result_models()),


rule tables:
    input:
        PATHS.results_summary(),
        PATHS.result_tables(DATASETS),
        PATHS.timings("csv"),
        PATHS.timings("md"),


rule figures:
    input:
        PATHS.result_figures(),
