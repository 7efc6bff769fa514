# Plan stage: what plan.smk uses besides common.smk, the plan command's options (kept
# apart from its rule file, as snakemake --lint asks).

import json
import shlex
import sys

from imagenet_cog.plan.table import SERIES_CHECKPOINTS as SERIES_PLAN_KEY


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
    settings = {section: config.get(section) for section in sections}
    # the series checkpoints of the series protocol alone, each priced by it (plan/table.py)
    settings[SERIES_PLAN_KEY] = {
        model: {"series": series.name, **series.protocol.deviation(config["probes"])} for model, series in SERIES_REDUCED.items()
    }
    return json.dumps(settings, sort_keys=True)


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


def check_free_space():
    """The run's start: stopped when what it still writes does not fit on results_dir's disk
    (imagenet_cog.plan.space); `snakemake plan` and needed_synsets are not checked."""
    from pathlib import Path

    from imagenet_cog.plan.footprint import run_files
    from imagenet_cog.plan.rates import read_rates
    from imagenet_cog.plan.space import run_needs, space_problems, ways_on

    asked, _ = command_line_request()
    if asked and asked <= {*PRICING_RULES, PATHS.needed_synsets(), PATHS.needed_synset_tars()}:
        return
    files = run_files(
        json.loads(plan_config_json()),
        Path(config["concepts"]["image_counts"]),
        Path(PATHS.split_summary()),
        read_rates(Path(config["plan"]["rates"])),
    )
    stops, warnings = space_problems(run_needs(PATHS.root, files), ways_on(config["features"]["dtype"]))
    if config["free_space"] == "warn":
        warnings, stops = [f"{stop}\nStarting anyway (free_space: warn)." for stop in stops] + warnings, []
    for warning in warnings:
        print(warning, file=sys.stderr, flush=True)
    if stops:
        raise WorkflowError("\n".join(stops))
