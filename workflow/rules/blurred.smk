# IN-1K-blurred (paper supp. E, Tab. 4): the face-blurred release of IN-1K as dataset
# in1k_blurred, split, extracted and probed exactly like IN-1K from its own image root
# (data.in1k_blurred_root), and compared with IN-1K. See imagenet_cog/variants/blurred.py.

if config["mode"] == "demo":

    rule demo_blurred:
        input:
            images=PATHS.demo_images("in1k"),
            concepts=PATHS.demo_concepts("in1k"),
        output:
            directory(PATHS.demo_images("in1k_blurred")),
        log:
            "logs/splits/demo_blurred.log",
        conda:
            CONDA_ENVIRONMENT
        params:
            dropped=BLURRED_SETTINGS["demo_dropped"],
            seed=config["demo"]["seed"],
        shell:
            python_command("demo-blurred")
            + " --in1k-images {input.images} --concepts {input.concepts} --output {output} --dropped {params.dropped}"
            " --seed {params.seed} > {log} 2>&1"


rule blurred_results:
    input:
        in1k=lambda wildcards: probe_results(
            models=result_models(),
            datasets=["in1k"],
            shots=BLURRED_SHOTS,
            seeds=BLURRED_SEEDS,
        ),
        blurred=lambda wildcards: blurred_probe_results(),
        summary=PATHS.results_summary(),
    output:
        tables=[
            (
                report(
                    PATHS.table("in1k_blurred", extension),
                    caption="../report/in1k_blurred.rst",
                    category="IN-1K-blurred",
                )
                if extension == "csv"
                else PATHS.table("in1k_blurred", extension)
            )
            for extension in TABLE_FORMATS
        ],
        figures=[
            (
                report(
                    PATHS.figure("in1k_blurred", extension),
                    caption="../report/in1k_blurred_figure.rst",
                    category="IN-1K-blurred",
                )
                if extension == "png"
                else PATHS.figure("in1k_blurred", extension)
            )
            for extension in FIGURE_FORMATS
        ],
    log:
        "logs/results/in1k_blurred.log",
    conda:
        CONDA_ENVIRONMENT
    params:
        root=results_root,
        models=lambda wildcards: shlex.quote(models_json()),
        shots=" ".join(BLURRED_SHOTS),
        seeds=" ".join(BLURRED_SEEDS),
    shell:
        python_command("blurred-results") + " --results-root {params.root} --models {params.models} --shots {params.shots}"
        " --seeds {params.seeds} --summary {input.summary} > {log} 2>&1"
