"""What a configuration asks of the workflow, counted before any image is read: the datasets
(sizes from a run's split summary, else from the shipped image counts or the demo's
settings), each model's feature width (the registry's, or a library model's on the meta device), and
the linear probes of the protocol, the level sets and the class-balanced variant, and the
kinds with jobs of their own (probes.kinds: the k-NN) on the protocol's datasets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagenet_cog.core import naming
from imagenet_cog.models.registry import ModelSpec, planned_feature_dim
from imagenet_cog.plan.cost import OWN_JOB_KINDS, Dataset, estimated_level, in1k_dataset, level_train_counts, summary_datasets

# paper Sec. 3.2: 5,146 eligible concepts, 1000 per level; the rest are the level sets' pool
PAPER_ELIGIBLE_CONCEPTS = 5146


@dataclass(frozen=True)
class ProbedDatasets:
    """Datasets probed under one stage's probe settings (None: extracted, not probed);
    ``extracted`` ones are also extracted (views are probed on other datasets' features);
    ``own_job_kinds``: each also has a job of these kinds (the k-NN) on the linear probe's grid."""

    stage: str
    datasets: list[Dataset]
    probes: dict | None
    extracted: bool
    own_job_kinds: tuple[str, ...] = ()


def demo_dataset(name: str, config: dict, concepts: int | None = None) -> Dataset:
    demo = config["demo"]
    classes = concepts or demo["concepts_per_dataset"]
    train = classes * demo["train_images_per_concept"]
    return Dataset(name, train, classes * demo["test_images_per_concept"], classes,
                   classes * int(config["probes"]["val_fraction"] * demo["train_images_per_concept"]))


def default_datasets(config: dict, image_counts: Path, split_summary: Path | None) -> tuple[list[Dataset], str]:
    """The config's datasets and where their sizes come from."""
    val_fraction = config["probes"]["val_fraction"]
    names = list(config["datasets"])
    if split_summary and Path(split_summary).is_file():
        exact = {data.name: data for data in summary_datasets(split_summary, val_fraction)}
        if all(name in exact for name in names):
            return [exact[name] for name in names], f"exact, from {split_summary}"
    if config["mode"] == "demo":
        return [demo_dataset(name, config) for name in names], "the demo's settings"
    splits = config["splits"]
    per_concept = level_train_counts(image_counts, splits["test_per_concept"], splits["max_train_per_concept"])
    datasets = [in1k_dataset(val_fraction) if name == naming.IN1K else
                estimated_level(name, per_concept, val_fraction, test_per_concept=splits["test_per_concept"])
                for name in names]
    return datasets, f"estimated from {image_counts} (mean eligible concept)"


def level_set_names(config: dict) -> list[str]:
    sets = config["level_sets"]["sets"]
    levels = naming.level_names(config["levels"]["num_levels"])
    names = [f"{level_set}-{level}" for level_set in sets if level_set != naming.RANDOM for level in levels]
    if naming.RANDOM in sets:
        names += [f"{naming.RANDOM}-{draw:02d}" for draw in range(1, config["level_sets"]["random"]["draws"] + 1)]
    return names


def like(template: Dataset, name: str, classes: int) -> Dataset:
    """A dataset of ``classes`` concepts sized like the mean concept of ``template``."""
    scale = classes / template.classes
    return Dataset(name, round(template.train * scale), round(template.test * scale), classes,
                   round(template.validation * scale))


def probed_datasets(config: dict, image_counts: Path, split_summary: Path | None) -> tuple[list[ProbedDatasets], str]:
    """Every probed dataset group of a config, and where the sizes come from. probes.group
    groups the probes of IN-1K and the levels; the level sets and the variants keep one job
    per seed (workflow/rules/probes.smk); the kinds with jobs of their own (the k-NN) run on IN-1K and the levels only."""
    datasets, basis = default_datasets(config, image_counts, split_summary)
    probes = config["probes"]
    own_job_kinds = tuple(kind for kind in OWN_JOB_KINDS if kind in probes["kinds"])
    groups = [ProbedDatasets("probes", datasets, probes, True, own_job_kinds)]
    levels = [data for data in datasets if data.name != naming.IN1K]
    sets = config["level_sets"]
    if sets["sets"] and levels:
        concepts = config["demo"]["concepts_per_dataset"] if config["mode"] == "demo" else levels[0].classes
        random_concepts = concepts if config["mode"] == "demo" else sets["random"]["concepts"]
        views = [like(levels[0], name, random_concepts if name.startswith(naming.RANDOM) else concepts)
                 for name in level_set_names(config)]
        pool_concepts = (sets["demo_pool_concepts"] if config["mode"] == "demo"
                         else PAPER_ELIGIBLE_CONCEPTS - len(levels) * levels[0].classes)
        groups.append(ProbedDatasets("level sets", [like(levels[0], naming.POOL, pool_concepts)], None, True))
        groups.append(ProbedDatasets("level sets", views, {**probes, "shots": sets["shots"], "group": "seed",
                                                           "seeds": sets["seeds"] or probes["seeds"]}, False))
    balanced = config["balanced"]
    if balanced["enabled"]:
        per_concept = balanced["train_per_concept"]
        views = [Dataset(naming.balanced_dataset(data.name), data.classes * per_concept, data.test, data.classes,
                         data.classes * int(probes["val_fraction"] * per_concept)) for data in datasets]
        groups.append(ProbedDatasets("balanced", views, {**probes, "shots": ["all"], "group": "seed",
                                                         "seeds": balanced["seeds"] or probes["seeds"][:1]}, False))
    return groups, basis


def model_widths(models: dict) -> tuple[dict[str, tuple[str, int]], dict[str, str]]:
    """(model -> (arch, feature width)) of every model whose width is known before its
    checkpoint is fetched, and (model -> why not) of the others."""
    widths, unpriced = {}, {}
    for name, entry in models.items():
        spec = ModelSpec.of_entry(name, entry)
        try:
            dim = planned_feature_dim(spec)
        except (ValueError, ImportError, RuntimeError, FileNotFoundError) as error:
            # FileNotFoundError: a transformers release neither the Hub nor the cache gives
            unpriced[name] = f"its width is unknown ({error})"
            continue
        if dim is None:
            unpriced[name] = f"arch {entry['arch']}: a custom factory's width is known only once it is built"
        else:
            widths[name] = (entry["arch"], dim)
    return widths, unpriced
