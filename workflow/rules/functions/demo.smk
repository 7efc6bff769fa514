# Demo stage: what the rules of demo.smk use, besides common.smk's: its input
# functions, config checks and the stage's targets (kept apart from the rules, as
# snakemake --lint asks).


def demo_world_settings():
    """What the demo world's images depend on: demo settings without pretraining, and
    in1k_concepts only when set, so that runs from before those keys stay up to date."""
    return {
        key: value
        for key, value in config["demo"].items()
        if key != "pretraining" and not (key == "in1k_concepts" and value is None)
    }


def in1k_concepts_option():
    count = config["demo"]["in1k_concepts"]
    return "" if count is None else f" --in1k-concepts {count}"


def demo_level_datasets():
    """The datasets whose level lists the demo world reads: IN-1K always (the demo's IN-1K
    concepts are the nearest ones of the chosen level concepts), and the configured levels."""
    return [naming.IN1K, *(dataset for dataset in DATASETS if dataset != naming.IN1K)]


def demo_level_lists():
    return [PATHS.level_concepts(dataset) for dataset in demo_level_datasets()]


# the pretraining's checkpoints kept besides its last (demo.pretraining.keep_epochs)
KEPT_EPOCHS = sorted(config["demo"]["pretraining"]["keep_epochs"])
if any(epoch >= config["demo"]["pretraining"]["epochs"] for epoch in KEPT_EPOCHS):
    raise WorkflowError(
        f"config.yaml: demo.pretraining.keep_epochs {KEPT_EPOCHS} must come before the last epoch "
        f"({config['demo']['pretraining']['epochs']}), whose weights are the checkpoint itself; fix the list."
    )
