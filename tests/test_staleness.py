"""Stale-only re-runs: after a finished demo run, a change re-runs exactly what it affects.

Each test copies the finished demo run (outputs, modification times and Snakemake's
records of params and code), makes one change, and reads the jobs Snakemake plans from a
dry run. Changes of settings are made as users make them: a YAML file given with
``--configfile`` (Snakemake merges it into config.yaml key by key).
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml

from conftest import snakemake
from imagenet_cog.layout import Layout

pytestmark = pytest.mark.e2e

AGGREGATES = {"aggregate_probes", "result_tables", "result_figures", "result_timings"}
# Rules that collect every probe: run whenever any probe result changes.
COLLECTORS = AGGREGATES | {"all", "probes", "tables", "figures"}
JOB_HEADER = re.compile(r"^\s*(?:rule|localrule|checkpoint|localcheckpoint) (\w+):\s*$")
WILDCARDS = re.compile(r"^\s*wildcards: (.*)$")


def planned_jobs(workdir: Path, *arguments: str) -> list[tuple[str, dict[str, str]]]:
    """(rule, wildcards) of every job a dry run of ``snakemake *arguments`` plans."""
    result = snakemake(workdir, "--cores", "2", "--dry-run", *arguments)
    jobs: list[tuple[str, dict[str, str]]] = []
    for line in result.stdout.splitlines():
        header = JOB_HEADER.match(line)
        if header:
            jobs.append((header.group(1), {}))
            continue
        wildcards = WILDCARDS.match(line)
        if wildcards and jobs:
            jobs[-1][1].update(pair.split("=", 1) for pair in wildcards.group(1).split(", "))
    if not jobs and "Nothing to be done" not in result.stdout + result.stderr:
        raise AssertionError(f"no jobs parsed from the dry run:\n{result.stdout[-3000:]}")
    return jobs


def rules_of(jobs) -> set[str]:
    return {rule for rule, _ in jobs}


@pytest.fixture
def finished_copy(demo_run, tmp_path) -> Path:
    """A private copy of the finished demo run, modification times kept."""
    return Path(shutil.copytree(demo_run, tmp_path / "copy", symlinks=True, copy_function=shutil.copy2))


@pytest.fixture(scope="module")
def demo_config(demo_run) -> dict:
    return yaml.safe_load((demo_run / "config.yaml").read_text())


def overlay(workdir: Path, settings: dict) -> str:
    path = workdir / "overlay.yaml"
    path.write_text(yaml.safe_dump(settings))
    return str(path)


def test_nothing_changed_nothing_runs(finished_copy):
    assert planned_jobs(finished_copy) == []


def test_changed_weights_rerun_only_that_model(finished_copy, demo_config):
    changed = "deit_small"
    jobs = planned_jobs(finished_copy, "--configfile", overlay(finished_copy, {"models": {changed: {"weights": "random:1"}}}))
    per_rule = Counter(rule for rule, _ in jobs)
    assert rules_of(jobs) - COLLECTORS == {"extract_features", "merge_features", "probe", "probe_kind", "pca_components"}
    assert {wildcards["model"] for rule, wildcards in jobs if rule not in COLLECTORS} == {changed}
    datasets, splits = demo_config["datasets"], 2
    assert per_rule["merge_features"] == len(datasets) * splits
    assert per_rule["probe"] == len(datasets) * len(demo_config["probes"]["shots"]) * len(demo_config["probes"]["seeds"])
    assert per_rule["probe_kind"] == len(datasets) * other_kind_probes_per_dataset(demo_config)
    assert per_rule["pca_components"] == len(datasets)
    shards = sorted((finished_copy / "results" / "features" / changed).rglob("shard-*.h5"))
    assert per_rule["extract_features"] == len(shards)
    assert AGGREGATES <= rules_of(jobs)


def other_kind_probes_per_dataset(config) -> int:
    """Probe jobs of the kinds other than linear per model and dataset in the demo."""
    probes = config["probes"]
    kinds = [kind for kind in probes["kinds"] if kind not in ("linear", "pca")]
    kinds += [f"pca-{dim}" for dim in probes["pca_dims"]] if "pca" in probes["kinds"] else []
    shots = probes.get("other_kinds_shots") or probes["shots"]
    seeds = probes.get("other_kinds_seeds") or probes["seeds"]
    return len(kinds) * len(shots) * len(seeds)


def test_changed_probe_settings_rerun_only_probes(finished_copy, demo_config):
    for change in ({"trials": demo_config["probes"]["trials"] + 1}, {"epochs": demo_config["probes"]["epochs"] + 1}):
        jobs = planned_jobs(finished_copy, "--configfile", overlay(finished_copy, {"probes": change}))
        assert rules_of(jobs) - COLLECTORS == {"probe", "probe_kind"}, change
        grid = len(demo_config["models"]) * len(demo_config["datasets"])
        total = grid * len(demo_config["probes"]["shots"]) * len(demo_config["probes"]["seeds"])
        assert Counter(rule for rule, _ in jobs)["probe"] == total, change
        assert Counter(rule for rule, _ in jobs)["probe_kind"] == grid * other_kind_probes_per_dataset(demo_config)


def test_other_kinds_settings_never_rerun_the_linear_probe(finished_copy, demo_config):
    """The linear probe's jobs, paths and params are those from before other kinds existed:
    configuring, changing or dropping other kinds plans no linear probe job."""
    grid = len(demo_config["models"]) * len(demo_config["datasets"])
    only_linear = planned_jobs(finished_copy, "--configfile", overlay(finished_copy, {"probes": {
        "kinds": ["linear"], "other_kinds_shots": None, "other_kinds_seeds": None}}))
    assert not {"probe", "probe_kind"} & rules_of(only_linear)
    noact_range = planned_jobs(finished_copy, "--configfile", overlay(finished_copy, {"probes": {"mlp": {
        **demo_config["probes"]["mlp"], "noact_lr_range": [0.02, 5.0]}}}))
    assert rules_of(noact_range) - COLLECTORS == {"probe_kind"}
    assert {wildcards["kind"] for rule, wildcards in noact_range if rule == "probe_kind"} == {"mlp_noact"}
    probes = demo_config["probes"]
    assert Counter(rule for rule, _ in noact_range)["probe_kind"] == grid * len(probes["other_kinds_shots"]) * len(probes["other_kinds_seeds"])
    width = planned_jobs(finished_copy, "--configfile", overlay(finished_copy, {"probes": {"mlp": {
        **demo_config["probes"]["mlp"], "hidden_width": demo_config["probes"]["mlp"]["hidden_width"] + 1}}}))
    assert rules_of(width) - COLLECTORS == {"probe_kind"}
    assert not any(wildcards["kind"].startswith("pca-") for rule, wildcards in width if rule == "probe_kind")


def test_an_added_pca_dim_runs_only_its_probes(finished_copy, demo_config):
    dims = [*demo_config["probes"]["pca_dims"], 4]
    jobs = planned_jobs(finished_copy, "--configfile", overlay(finished_copy, {"probes": {"pca_dims": dims}}))
    assert rules_of(jobs) - COLLECTORS == {"probe_kind"}, "the components are reused, not recomputed"
    assert {wildcards["kind"] for rule, wildcards in jobs if rule == "probe_kind"} == {"pca-4"}


def test_an_added_kind_seed_runs_only_its_probes(finished_copy, demo_config):
    seeds = [*demo_config["probes"]["other_kinds_seeds"], 99]
    jobs = planned_jobs(finished_copy, "--configfile", overlay(finished_copy, {"probes": {"other_kinds_seeds": seeds}}))
    assert rules_of(jobs) - COLLECTORS == {"probe_kind"}
    assert {wildcards["seed"] for rule, wildcards in jobs if rule == "probe_kind"} == {"99"}


def test_an_added_seed_runs_only_its_probes(finished_copy, demo_config):
    seeds = [*demo_config["probes"]["seeds"], 99]
    jobs = planned_jobs(finished_copy, "--configfile", overlay(finished_copy, {"probes": {"seeds": seeds}}))
    assert rules_of(jobs) - COLLECTORS == {"probe"}
    assert {wildcards["seed"] for rule, wildcards in jobs if rule == "probe"} == {"99"}
    assert Counter(rule for rule, _ in jobs)["probe"] == (
        len(demo_config["models"]) * len(demo_config["datasets"]) * len(demo_config["probes"]["shots"])
    )


def test_changed_level_setting_reruns_everything_below_the_levels(finished_copy, demo_config):
    levels = demo_config["levels"]
    jobs = planned_jobs(finished_copy, "--configfile",
                        overlay(finished_copy, {"levels": {"min_images": levels["min_images"] + 1}}))
    rules = rules_of(jobs)
    # WordNet, the concept catalogue and the image counts do not depend on the cut.
    assert not rules & {"wordnet_corpus", "concept_catalogue", "image_counts"}
    assert {"cut_levels", "levels_figure", "demo_world", "image_splits"} <= rules
    # The split tables are a checkpoint: the shards below them are planned once they exist,
    # so a dry run shows the merges and probes of every model and dataset.
    merges = {(w["model"], w["dataset"], w["split"]) for rule, w in jobs if rule == "merge_features"}
    assert len(merges) == len(demo_config["models"]) * len(demo_config["datasets"]) * 2
    assert Counter(rule for rule, _ in jobs)["probe"] == (
        len(demo_config["models"]) * len(demo_config["datasets"])
        * len(demo_config["probes"]["shots"]) * len(demo_config["probes"]["seeds"])
    )


def test_a_deleted_shard_reruns_it_and_its_readers(finished_copy, demo_config):
    layout = Layout()
    model, dataset, split = "resnet50", "l1", "train"
    shard = finished_copy / layout.feature_shard(model, dataset, split, "00000")
    shard.unlink()
    jobs = planned_jobs(finished_copy)
    assert [w for rule, w in jobs if rule == "extract_features"] == [
        {"model": model, "dataset": dataset, "split": split, "shard": "00000"}
    ]
    assert [w for rule, w in jobs if rule == "merge_features"] == [{"model": model, "dataset": dataset, "split": split}]
    probes = [w for rule, w in jobs if rule == "probe"]
    assert {(w["model"], w["dataset"]) for w in probes} == {(model, dataset)}
    assert len(probes) == len(demo_config["probes"]["shots"]) * len(demo_config["probes"]["seeds"])
    others = [w for rule, w in jobs if rule in ("probe_kind", "pca_components")]
    assert {(w["model"], w["dataset"]) for w in others} == {(model, dataset)}
    assert len([w for rule, w in jobs if rule == "probe_kind"]) == other_kind_probes_per_dataset(demo_config)
    assert rules_of(jobs) - COLLECTORS == {"extract_features", "merge_features", "probe", "probe_kind", "pca_components"}
