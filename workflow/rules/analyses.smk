# Analyses stage: what the extracted features say beyond the linear probes (issue 10).


# human forced-choice sheets (002 Sec. 3) ------------------------------------------------
# Per dataset, HTML pages for human raters (images embedded, so a page can be mailed or
# moved) and the answer key apart from them. Raters' answers are scored outside the
# workflow: `python -m imagenet_cog score-raters --answers *.csv --key <key.tsv> ...`.
# Not in the report: a full-size study embeds tens of MB of images per dataset.


rule rater_sheets:
    conda:
        CONDA_ENVIRONMENT
    input:
        unpack(rater_sheet_inputs),
    output:
        sheets=directory(PATHS.rater_sheets("{dataset}")),
        key=PATHS.rater_key("{dataset}"),
    wildcard_constraints:
        dataset=r"in1k|l[1-9][0-9]*",
    params:
        root=lambda wildcards: image_root(wildcards.dataset),
        features=lambda wildcards, input: f"--features {input.features}" if "features" in input.keys() else "",
        settings=rater_sheet_settings(),
        negatives=" ".join(config["analyses"]["raters"]["negatives"]),
        variants=" ".join(config["analyses"]["raters"]["variants"]),
    log:
        "logs/analyses/raters/{dataset}.log",
    benchmark:
        "logs/benchmarks/analyses/raters/{dataset}.tsv"
    shell:
        python_command("rater-sheets")
        + " --dataset {wildcards.dataset} --split-table {input.split_table} --image-root {params.root:q}"
        " --catalogue {input.catalogue} {params.features}"
        " --concepts {params.settings[concepts_per_dataset]}"
        " --tasks-per-concept {params.settings[tasks_per_concept]}"
        " --references {params.settings[references]} --negatives {params.negatives}"
        " --variants {params.variants} --seed {params.settings[seed]}"
        " --image-size {params.settings[image_size]}"
        " --sheets {output.sheets} --key {output.key} > {log} 2>&1"


# `snakemake raters`: the sheets of every configured dataset, enabled or not.
rule raters:
    input:
        rater_sheet_outputs(),
