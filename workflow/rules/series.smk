# Series stage: a training run's checkpoints as one series (models: <name>: checkpoints:), each
# checkpoint evaluated as a model of its own (<series>@<step>) by the earlier stages, read back
# here in the order of training: RankMe per checkpoint, the long table, the numbers at each
# step, the verdicts per level and the figure. Logic: imagenet_cog/series/; docs/series.md.
#
#   snakemake series_results       every series' tables and figure


include: "functions/series.smk"


# RankMe of one checkpoint's IN-1K training features: a sample of EFFECTIVE_RANK_ROWS rows,
# seeded, its singular values (10 s on one CPU thread at 2048 dimensions). Any configured
# model's can be asked for by its file; the series' checkpoints' are among the stage's targets.
rule effective_rank:
    input:
        PATHS.features("{model}", naming.IN1K, "train"),
    output:
        PATHS.effective_rank("{model}"),
    log:
        PATHS.log("series/{model}/effective_rank.log"),
    benchmark:
        PATHS.log("benchmarks/series/{model}/effective_rank.tsv")
    conda:
        CONDA_ENVIRONMENT
    threads: ANALYSES_CONFIG["threads"]
    params:
        rows=EFFECTIVE_RANK_ROWS,
        seed=EFFECTIVE_RANK_SEED,
        device=ANALYSES_CONFIG["device"],
    shell:
        python_command("effective-rank") + " --features {input} --output {output} --rows {params.rows}"
        " --seed {params.seed} --device {params.device} --threads {threads} > {log} 2>&1"


rule series_results:
    input:
        unpack(series_results_inputs),
    output:
        series_report(SERIES_TABLE, "csv", "series_table.rst", {"table": "series (long)"}),
        series_report(SERIES_STEPS, "csv", "series_steps.rst", {"table": "series per step"}),
        series_report(SERIES_SUMMARY, "csv", "series_summary.rst", {"table": "series summary"}),
        series_report(SERIES_FIGURE, "png", "series_figure.rst", {"figure": "series"}),
        [PATHS.table(name, extension) for name in (SERIES_STEPS, SERIES_SUMMARY) for extension in ("md", "tex")],
        PATHS.figure(SERIES_FIGURE, "pdf"),
    log:
        PATHS.log("series/series_results.log"),
    conda:
        CONDA_ENVIRONMENT
    params:
        arguments=series_results_arguments,
    shell:
        python_command("series-results") + " {params.arguments} --concept-tables {input.concepts} > {log} 2>&1"
