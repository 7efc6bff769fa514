# Results stage: probe results -> tidy summary -> tables, figures, timings (paper Sec. 4.2),
# all registered for `snakemake --report report.html`; plus the named targets tables and
# figures. Logic: imagenet_cog/results/.
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


include: "functions/results.smk"


rule aggregate_probes:
    input:
        result_probe_files(),
    output:
        summary=report_output(
            PATHS.results_summary(),
            caption="summary.rst",
            category="Tables",
            subcategory="Summary",
            labels={"table": "summary (tidy CSV)", "dataset": "all"},
        ),
        seeds=tidy_report(PATHS.seed_results(), "seed_results.rst", "every probe result (tidy CSV)", "Summary"),
    log:
        PATHS.log("results/aggregate_probes.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        grid=grid_arguments(),
        level_sets=level_set_grid_arguments(),
    shell:
        python_command("aggregate-probes")
        + " {params.grid} {params.level_sets} --output {output.summary} --seed-output {output.seeds} > {log} 2>&1"


# Top-1 per level of every level set (paper supp. Fig. 7), at the first of level_sets.shots.
rule level_sets_results:
    input:
        PATHS.results_summary(),
    output:
        figure=report_output(
            PATHS.level_sets_figure("png"),
            caption="figure_level_sets.rst",
            category="Figures",
            labels={"figure": "level_sets"},
        ),
        pdf=PATHS.level_sets_figure("pdf"),
        table=report_output(
            PATHS.level_sets_table("csv"),
            caption="table_level_sets.rst",
            category="Tables",
            subcategory="Level sets",
            labels={"table": "level sets", "dataset": "levels of every level set"},
        ),
        others=[PATHS.level_sets_table(extension) for extension in TABLE_FORMATS if extension != "csv"],
    log:
        PATHS.log("results/level_sets_results.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        root=results_root,
        shots=LEVEL_SET_SHOTS[0],
    shell:
        python_command("level-sets-results")
        + " --summary {input} --results-root {params.root} --shots {params.shots} > {log} 2>&1"


rule result_tables:
    input:
        summary=PATHS.results_summary(),
        seeds=PATHS.seed_results(),
    output:
        [
            table_report(name) if extension == "csv" else PATHS.table(name, extension)
            for name in RESULT_TABLE_NAMES
            for extension in TABLE_FORMATS
        ],
    log:
        PATHS.log("results/result_tables.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        root=results_root,
        baseline=config["results"]["baseline_model"],
        exposures=exposures_option(),
    shell:
        python_command("results-tables")
        + " --summary {input.summary} --seed-results {input.seeds} --results-root {params.root}"
        + " --baseline {params.baseline} --exposures {params.exposures} > {log} 2>&1"


# The figures set apart the models pretrained beyond IN-1K; a run of none models gives no
# --exposures (figure_exposures in common.smk), its command as it was.
rule result_figures:
    input:
        summary=PATHS.results_summary(),
        seeds=PATHS.seed_results(),
    output:
        [figure_report(name, f"figure_{name}.rst") for name in RESULT_FIGURE_NAMES],
        [PATHS.figure(name, "pdf") for name in RESULT_FIGURE_NAMES],
    log:
        PATHS.log("results/result_figures.log"),
    benchmark:
        PATHS.log("benchmarks/results/result_figures.tsv")
    conda:
        CONDA_ENVIRONMENT
    params:
        **figure_exposures_params(),
        root=results_root,
        baseline=config["results"]["baseline_model"],
    shell:
        python_command("results-figures")
        + " --summary {input.summary} --seed-results {input.seeds} --results-root {params.root}"
        + " --baseline {params.baseline}"
        + figure_exposures_placeholder()
        + " > {log} 2>&1"


# Paired tests of every model against the baseline (Holm-corrected) and Kendall's tau
# between the ranking on IN-1K and on each level.
rule result_statistics:
    input:
        summary=PATHS.results_summary(),
        seeds=PATHS.seed_results(),
    output:
        tidy_report(PATHS.table("paired_tests", "csv"), "paired_tests.rst", "paired tests vs baseline", "Statistics"),
        tidy_report(PATHS.table("rank_agreement", "csv"), "rank_agreement.rst", "Kendall's tau IN-1K vs levels", "Statistics"),
        [PATHS.table(name, extension) for name in STATISTICS_TABLES for extension in TABLE_FORMATS if extension != "csv"],
    log:
        PATHS.log("results/result_statistics.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        root=results_root,
        baseline=config["results"]["baseline_model"],
        exposures=exposures_option(),
    shell:
        python_command("results-statistics")
        + " --summary {input.summary} --seed-results {input.seeds} --results-root {params.root}"
        + " --baseline {params.baseline} --exposures {params.exposures} > {log} 2>&1"


# The drop from IN-1K to each level per model (CoG preprint, Fig. 3c).
rule result_drop:
    input:
        PATHS.results_summary(),
    output:
        tidy_report(PATHS.table(DROP_NAME, "csv"), "generalization_drop_table.rst", "drop from IN-1K", "Generalization drop"),
        [PATHS.table(DROP_NAME, extension) for extension in TABLE_FORMATS if extension != "csv"],
        figure_report(DROP_NAME, "generalization_drop_figure.rst"),
        PATHS.figure(DROP_NAME, "pdf"),
    log:
        PATHS.log("results/result_drop.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        root=results_root,
        exposures=exposures_option(),
    shell:
        python_command("results-drop")
        + " --summary {input} --results-root {params.root} --exposures {params.exposures} > {log} 2>&1"


# Ours against the paper's published top-1 for the models with a paper_name.
rule result_published:
    input:
        summary=PATHS.results_summary(),
        published=PUBLISHED_TOP1,
    output:
        [published_report(name) for name in published_table_names(DATASETS)],
        [
            PATHS.table(name, extension)
            for name in published_table_names(DATASETS)
            for extension in TABLE_FORMATS
            if extension != "csv"
        ],
        figure_report(PUBLISHED_FIGURE, "published_figure.rst"),
        PATHS.figure(PUBLISHED_FIGURE, "pdf"),
    log:
        PATHS.log("results/result_published.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        **figure_exposures_params(),
        root=results_root,
        models=shlex.quote(models_json(with_paper_name=True)),
    shell:
        python_command("results-published")
        + " --summary {input.summary} --published {input.published} --models {params.models}"
        + " --results-root {params.root}"
        + figure_exposures_placeholder()
        + " > {log} 2>&1"


# Every model of the run beside the paper's published ones: 95% intervals, ranks with their
# ties, provenance, protocol digest and exposure (docs/leaderboard.md); the page links from the report.
rule leaderboard:
    input:
        unpack(leaderboard_inputs),
    output:
        table=tidy_report(PATHS.table(LEADERBOARD_NAME, "csv"), "leaderboard.rst", "leaderboard (long CSV)", "Leaderboard"),
        others=PATHS.leaderboard_outputs()[1:-1],
        page=report_output(
            PATHS.leaderboard_page(),
            caption="leaderboard.rst",
            category="Tables",
            subcategory="Leaderboard",
            labels={"table": "leaderboard (page)", "dataset": "all"},
        ),
    log:
        PATHS.log("results/leaderboard.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        root=results_root,
        models=shlex.quote(models_json(with_paper_name=True)),
        protocol=shlex.quote(json.dumps(run_protocol(config), sort_keys=True)),
        detection_score=config["analyses"]["detection"]["scores"][0],
        sources=leaderboard_sources,
        pretraining=pretraining_option(with_published=True),
    shell:
        python_command("results-leaderboard")
        + " --results-root {params.root} --summary {input.summary} --seed-results {input.seeds}"
        + " --published {input.published} --models {params.models} --protocol {params.protocol}"
        + " --pretraining {params.pretraining}"
        + " --detection-score {params.detection_score} {params.sources} > {log} 2>&1"


# Reads the benchmark files of the extraction and probe jobs, which exist once the probe
# results (its inputs) do; they are not declared inputs because no rule lists them as outputs.
rule result_timings:
    input:
        result_probe_files(),
    output:
        csv=report_output(
            PATHS.timings("csv"),
            caption="timings.rst",
            category="Timings",
            labels={"table": "seconds per model and dataset"},
        ),
        markdown=PATHS.timings("md"),
    log:
        PATHS.log("results/result_timings.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        grid=grid_arguments(),
        # relative to the run's results folder (--results-root of the grid): the same value
        # for every results_dir, so that Snakemake sees no changed param in a finished run
        benchmarks=os.path.relpath(PATHS.benchmarks(), PATHS.root),
    shell:
        python_command("results-timings")
        + " {params.grid} --benchmark-root {params.benchmarks} --output {output.csv} > {log} 2>&1"


# Named targets: `snakemake tables` and `snakemake figures` build this stage's tables and
# figures for the configured selection.
rule tables:
    input:
        PATHS.results_summary(),
        PATHS.seed_results(),
        PATHS.result_tables(DATASETS, TABLED_KINDS),
        PATHS.statistics_tables(),
        [PATHS.table(DROP_NAME, extension) for extension in TABLE_FORMATS],
        [PATHS.table(name, extension) for name in published_table_names(DATASETS) for extension in TABLE_FORMATS],
        PATHS.timings("csv"),
        PATHS.timings("md"),


rule figures:
    input:
        PATHS.result_figures(TABLED_KINDS),
        [PATHS.figure(name, extension) for name in (DROP_NAME, PUBLISHED_FIGURE) for extension in FIGURE_FORMATS],
