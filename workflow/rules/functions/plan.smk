# Plan stage: what plan.smk uses besides common.smk, the plan command's options (kept
# apart from its rule file, as snakemake --lint asks).

import json
import shlex


def plan_config_json():
    """The settings the cost model reads; the data roots and checkpoints are not among them,
    so a plan runs before any download."""
    sections = (
        "mode",
        "datasets",
        "levels",
        "level_sets",
        "splits",
        "demo",
        "models",
        "features",
        "probes",
        "balanced",
        "in1k_blurred",
        "label_audit",
        "analyses",
        "finetune",
        # the baseline: the fine-tuned model when finetune.models is null
        "results",
    )
    return json.dumps({section: config.get(section) for section in sections}, sort_keys=True)


def plan_arguments():
    """The plan command's options: the rates, the GPUs (plan_gpus), this run's split summary and
    benchmark files (read when they exist: exact sizes, measured times)."""
    settings = config["plan"]
    options = [
        "--config",
        plan_config_json(),
        "--image-counts",
        config["concepts"]["image_counts"],
        "--split-summary",
        PATHS.split_summary(),
        "--rates",
        settings["rates"],
        "--gpus",
        str(config["plan_gpus"]),
        "--benchmarks",
        PATHS.benchmarks(),
        "--output",
        PATHS.plan(),
    ]
    if settings["compare_loader_workers"]:
        options += ["--compare-loader-workers", *map(str, settings["compare_loader_workers"])]
    if settings["write_rates"]:
        options += ["--write-rates", settings["write_rates"]]
    if settings["device_name"]:
        options += ["--device-name", settings["device_name"]]
    return shlex.join(options)
