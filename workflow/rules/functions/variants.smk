# Variants stage: what the rules of variants.smk use, besides common.smk's: its input
# functions, config checks and the stage's targets (kept apart from the rules, as
# snakemake --lint asks).

import os
import shlex

from imagenet_cog.core.layout import FIGURE_FORMATS, TABLE_FORMATS

# class-balanced variant (supp. A.4) --------------------------------------------------------

BALANCED_SETTINGS = config["balanced"]
BALANCED_SEEDS = [str(seed) for seed in (BALANCED_SETTINGS["seeds"] or config["probes"]["seeds"][:1])]
BALANCED_MODELS = stage_models("balanced") if BALANCED_SETTINGS["enabled"] else []
if BALANCED_SETTINGS["enabled"]:
    if "all" not in SHOTS:
        raise WorkflowError(
            "config.yaml: balanced.enabled compares N = all probes, but probes.shots has no 'all'; "
            "add it or set balanced.enabled: false."
        )
    if not set(BALANCED_SEEDS) <= set(SEEDS):
        raise WorkflowError(
            f"config.yaml: balanced.seeds {BALANCED_SEEDS} must be among probes.seeds {SEEDS}, whose default "
            f"probes they are compared with."
        )


def balanced_probe_results():
    return probe_results(
        models=BALANCED_MODELS,
        datasets=[naming.balanced_dataset(dataset) for dataset in DATASETS],
        shots=["all"],
        seeds=BALANCED_SEEDS,
    )


def balanced_outputs():
    return [PATHS.table("balanced", extension) for extension in TABLE_FORMATS] + [
        PATHS.figure("balanced", extension) for extension in FIGURE_FORMATS
    ]


def balanced_targets():
    if not BALANCED_SETTINGS["enabled"]:
        return []
    return [*(PATHS.balanced_split(dataset) for dataset in DATASETS), *balanced_probe_results(), *balanced_outputs()]


# IN-1K-blurred (supp. E) ----------------------------------------------------------------------

BLURRED_SHOTS = [str(shots) for shots in (BLURRED_SETTINGS["shots"] or config["probes"]["shots"])]
BLURRED_SEEDS = [str(seed) for seed in (BLURRED_SETTINGS["seeds"] or config["probes"]["seeds"])]
if BLURRED_DATASETS and not (set(BLURRED_SHOTS) <= set(SHOTS) and set(BLURRED_SEEDS) <= set(SEEDS)):
    raise WorkflowError(
        f"config.yaml: in1k_blurred.shots {BLURRED_SHOTS} and seeds {BLURRED_SEEDS} must be among probes.shots "
        f"{SHOTS} and probes.seeds {SEEDS}, whose IN-1K probes they are compared with."
    )


def blurred_probe_results():
    return probe_results(models=BLURRED_MODELS, datasets=BLURRED_DATASETS, shots=BLURRED_SHOTS, seeds=BLURRED_SEEDS)


def blurred_targets():
    if not BLURRED_DATASETS:
        return []
    return [
        *blurred_probe_results(),
        *(PATHS.table(naming.IN1K_BLURRED, extension) for extension in TABLE_FORMATS),
        *(PATHS.figure(naming.IN1K_BLURRED, extension) for extension in FIGURE_FORMATS),
    ]


# label-noise audit (supp. A.3) ------------------------------------------------------------

AUDIT_SETTINGS = config["label_audit"]


def audit_pairs():
    """[classifier dataset, image dataset] pairs: label_audit.pairs, or by default every
    configured level's on IN-1K and IN-1K's on the last configured level."""
    if AUDIT_SETTINGS["pairs"] is not None:
        pairs = [tuple(pair) for pair in AUDIT_SETTINGS["pairs"]]
    else:
        levels = [dataset for dataset in DATASETS if dataset != naming.IN1K]
        pairs = [(level, naming.IN1K) for level in levels] + ([(naming.IN1K, levels[-1])] if levels else [])
        if naming.IN1K not in DATASETS:
            pairs = []
    for pair in pairs:
        unknown = [dataset for dataset in pair if dataset not in DATASETS]
        if unknown:
            raise WorkflowError(
                f"config.yaml: label_audit.pairs has {list(pair)}, but {', '.join(unknown)} is not in "
                f"'datasets' ({', '.join(DATASETS)}); fix the pair or add the dataset."
            )
    return pairs


AUDIT_PAIRS = audit_pairs() if AUDIT_SETTINGS["enabled"] else []
AUDIT_MODELS = stage_models("label_audit") if AUDIT_PAIRS else []
if AUDIT_PAIRS and "all" not in SHOTS:
    raise WorkflowError(
        "config.yaml: label_audit.enabled needs the N = all probes, but probes.shots has no 'all'; "
        "add it or set label_audit.enabled: false."
    )


def audit_inputs(wildcards):
    sources = sorted({source for source, _ in AUDIT_PAIRS})
    targets = sorted({target for _, target in AUDIT_PAIRS})
    return {
        "results": [PATHS.probe_result(wildcards.model, source, "all", seed) for source in sources for seed in SEEDS],
        "train": [PATHS.features(wildcards.model, source, "train") for source in sources],
        "test": [PATHS.features(wildcards.model, target, "test") for target in targets],
        "concepts": PATHS.concept_catalogue(),
        "images": [image_root(target) for target in targets],
        **{f"index_{target}": path for target in targets for path in image_index(target).values()},
    }


def audit_options(wildcards, input):
    """The pairs, seeds, image roots and image indexes (tar layouts) of the audit command."""
    targets = sorted({target for _, target in AUDIT_PAIRS})
    return " ".join(
        [f"--pair {source} {target}" for source, target in AUDIT_PAIRS]
        + ["--seeds " + " ".join(SEEDS)]
        + [f"--image-root {shlex.quote(f'{target}={image_root(target)}')}" for target in targets]
        + [f"--image-index {target}={input[f'index_{target}']}" for target in targets if f"index_{target}" in input.keys()]
    )


def audit_targets():
    return [
        path
        for model in AUDIT_MODELS
        for path in (PATHS.audit_predictions(model), PATHS.audit_shares(model), PATHS.audit_contact_sheet(model))
    ]


def variants_targets():
    """What a full run makes of this stage (rule all gathers each stage's list), the files
    of each variant switched on."""
    return [*balanced_targets(), *blurred_targets(), *audit_targets()]
