"""Stale-only re-runs: after a finished demo run, a change re-runs exactly what it affects.

Each test copies the finished demo run (outputs, modification times and Snakemake's
records of params and code), makes one change, and reads the jobs Snakemake plans from a
dry run. Changes of settings are made as users make them: a YAML file given with
``--configfile`` (Snakemake merges it into config.yaml key by key).
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml

from conftest import (
    copy_of_demo,
    other_kind_probe_count,
    other_kind_probes_per_dataset,
    planned_jobs,
    read_run_config,
    snakemake,
    stage_model_names,
)
from imagenet_cog.core.layout import Layout

pytestmark = pytest.mark.e2e

AGGREGATES = {
    "aggregate_probes", "result_tables", "result_figures", "result_timings",
    "result_statistics", "result_drop", "result_published", "level_sets_results",
    "finetune_results",  # the fine-tuning control's table reads the frozen probe from the summary
    "leaderboard",  # reads the summary, and the per-concept and detection tables
}
# Rules that collect every analysis result of a dataset or of all datasets.
ANALYSIS_COLLECTORS = {"analyses_agreement", "analyses_summary", "analyses_tables", "analyses_figures", "analyses", "all"}
# Rules that collect every probe: run whenever any probe result changes (the label-noise
# audit reads a model's N = all results and features).
# label_audit, analyses_detection and analyses_concepts read a model's N = all probes and
# features, as the aggregates read every result: any change to those re-runs them.
COLLECTORS = AGGREGATES | ANALYSIS_COLLECTORS | {
    "all", "probes", "tables", "figures", "label_audit", "balanced_results", "blurred_results", "zeroshot_results",
    "analyses_detection", "detection_results", "analyses_concepts", "concept_results",
}
# The series' RankMe and tables read its checkpoints' and their stand-in's (demo_cnn, the
# series' last step) features and results: whatever reruns those reruns them.
COLLECTORS |= {"effective_rank", "series_results"}
# Rules of one (model, dataset) that read its features.
FEATURE_READERS = {"probe", "analyses_kmeans", "analyses_alignment_uniformity", "analyses_learnability"}
ANALYSES = ("kmeans", "alignment_uniformity", "learnability")
def rules_of(jobs) -> set[str]:
    return {rule for rule, _ in jobs}


def level_set_datasets(config: dict) -> list[str]:
    sets = config.get("level_sets", {}).get("sets", [])
    levels = [f"l{k}" for k in range(1, config["levels"]["num_levels"] + 1)]
    draws = config["level_sets"]["random"]["draws"] if "random" in sets else 0
    return [f"{name}-{level}" for name in sets if name != "random" for level in levels] + [
        f"random-{draw:02d}" for draw in range(1, draws + 1)
    ]


def level_set_probe_count(config: dict, models: int | None = None) -> int:
    settings = config["level_sets"]
    seeds = settings.get("seeds") or config["probes"]["seeds"]
    models = models or len(stage_model_names(config, "level_sets"))
    return models * len(level_set_datasets(config)) * len(settings["shots"]) * len(seeds)


LIN_PROBE_RULES = {"seed": "probe", "shots": "probe_seeds", "dataset": "probe_resident"}


def lin_probe_rule(config: dict) -> str:
    """The rule of IN-1K's and the levels' linear probes (probes.group): one job per seed, one
    per (model, dataset, N) running every seed, or one resident job per (model, dataset)."""
    return LIN_PROBE_RULES[config["probes"].get("group", "seed")]


def lin_probe_count(config: dict, models: int | None = None) -> int:
    """Jobs of IN-1K's and the levels' linear probes (rule ``lin_probe_rule``)."""
    probes = config["probes"]
    group = probes.get("group", "seed")
    per_dataset = {"seed": len(probes["shots"]) * len(probes["seeds"]), "shots": len(probes["shots"]), "dataset": 1}[group]
    return (models or len(config["models"])) * len(config["datasets"]) * per_dataset


def knn_rules(config: dict) -> set[str]:
    """probe_knn, when the config runs the k-NN probe: one job per (model, dataset) taking
    every N and seed, so whatever reruns a dataset's probes reruns it."""
    return {"probe_knn"} if "knn" in config["probes"]["kinds"] else set()


def caption_cluster_rules(config: dict) -> set[str]:
    """auto_descriptions_clusters, when the config describes k-means clusters by captions:
    a model's clusters of a captioned dataset follow its k-means."""
    captions, kmeans = config["analyses"].get("captions", {}), config["analyses"].get("kmeans", {})
    described = captions.get("enabled") and captions.get("clusters", True) and kmeans.get("enabled", True)
    return {"auto_descriptions_clusters"} if described else set()


def describability_rules(config: dict) -> set[str]:
    """The describability an image-text model answers (the demo's CLIP): it reads the rater
    sheets' key, so whatever remakes the sheets runs it again."""
    answering = any(entry["arch"].startswith("open_clip/") for entry in config["models"].values())
    enabled = config["analyses"].get("model_describability", {}).get("enabled", True)
    return {"analyses_model_describability", "analyses_describability_table"} if answering and enabled else set()


def probe_jobs(jobs) -> dict[str, int]:
    """Planned jobs of the linear probe rules."""
    per_rule = Counter(rule for rule, _ in jobs)
    return {rule: per_rule[rule] for rule in LIN_PROBE_RULES.values()}


def expected_probe_jobs(config: dict, other_datasets: int, lin: int) -> dict[str, int]:
    """``other_datasets`` jobs of rule probe (level sets, variants) and ``lin`` of IN-1K and
    the levels, under whichever rule runs those."""
    expected = dict.fromkeys(LIN_PROBE_RULES.values(), 0)
    expected["probe"] = other_datasets
    expected[lin_probe_rule(config)] += lin
    return expected


def balanced_probe_count(config: dict, models: int | None = None) -> int:
    """Probes of the class-balanced variant (N = all, its seeds), when switched on."""
    settings = config.get("balanced", {})
    if not settings.get("enabled"):
        return 0
    seeds = settings.get("seeds") or config["probes"]["seeds"][:1]
    return (models or len(stage_model_names(config, "balanced"))) * len(config["datasets"]) * len(seeds)


def blurred_datasets(config: dict) -> list[str]:
    """IN-1K-blurred, an extracted dataset beside 'datasets' when switched on."""
    return ["in1k_blurred"] if config.get("in1k_blurred", {}).get("enabled") else []


def blurred_probe_count(config: dict, models: int | None = None) -> int:
    settings = config.get("in1k_blurred", {})
    if not settings.get("enabled"):
        return 0
    shots = settings.get("shots") or config["probes"]["shots"]
    seeds = settings.get("seeds") or config["probes"]["seeds"]
    return (models or len(stage_model_names(config, "in1k_blurred"))) * len(shots) * len(seeds)


@pytest.fixture
def finished_copy(demo_run, tmp_path) -> Path:
    """A private copy of the finished demo run, modification times kept."""
    return copy_of_demo(demo_run, tmp_path / "copy")


@pytest.fixture(scope="module")
def shared_planning_copy(demo_run, tmp_path_factory) -> Path:
    return copy_of_demo(demo_run, tmp_path_factory.mktemp("planning") / "copy")


@pytest.fixture
def planning_copy(shared_planning_copy) -> Path:
    """One copy of the finished demo for the tests that only plan (dry runs, their overlays
    written beside it): a copy is 2 CPU-seconds. A test that changes the run takes
    finished_copy; one that changed this copy fails here."""
    before = run_files(shared_planning_copy)
    yield shared_planning_copy
    assert run_files(shared_planning_copy) == before, "a planning test changed the shared copy: give it finished_copy"


def run_files(workdir: Path) -> dict[str, tuple[int, int]]:
    """Size and modification time of every file of the run's results and workflow (its
    bytecode aside: importing the copy's package may write it)."""
    files = {}
    for path in [*(workdir / "results").rglob("*"), *(workdir / "workflow").rglob("*")]:
        if path.is_file() and "__pycache__" not in path.parts:
            files[str(path)] = (path.stat().st_size, path.stat().st_mtime_ns)
    return files


@pytest.fixture(scope="module")
def demo_config(demo_run) -> dict:
    return read_run_config(demo_run / "config.yaml")


def model_of_every_stage(config: dict) -> str:
    """A model that every stage of ``config`` runs for (the demo leaves its random control
    out of the variants, the other probe kinds and the analyses)."""
    settings = ["level_sets", "balanced", "in1k_blurred", "label_audit", "analyses",
                *(f"probes.kind_models.{kind}" for kind in config["probes"]["kind_models"])]
    return next(model for model in config["models"] if all(model in stage_model_names(config, s) for s in settings))


def finetune_rules(config: dict, model: str) -> set[str]:
    """finetune_backbone, when ``model`` is one the fine-tuning control fine-tunes (finetune.models,
    null meaning the baseline)."""
    finetune = config.get("finetune", {})
    finetuned = finetune.get("models") or [config["results"]["baseline_model"]]
    return {"finetune_backbone"} if finetune.get("enabled") and model in finetuned else set()


def rater_sheet_rules(config: dict, model: str) -> set[str]:
    """rater_sheets and the describability that answers their key, when ``model`` gives the
    sheets' hard negatives (analyses.raters.model, null meaning the baseline)."""
    raters = config["analyses"].get("raters", {})
    picked = raters.get("model") or config["results"]["baseline_model"]
    return {"rater_sheets"} | describability_rules(config) if raters.get("enabled") and model == picked else set()


def overlay(workdir: Path, settings: dict) -> str:
    """``settings`` laid over the finished demo's config, its checkpoint series taken out: these
    tests are about the result models' stages (a series' own reruns are test_series_workflow's),
    and a change to the stand-in's stages would otherwise plan the series' checkpoints too."""
    series = {name: None for name, entry in yaml.safe_load((workdir / "config.yaml").read_text())["models"].items()
              if "checkpoints" in entry}
    path = workdir / "overlay.yaml"
    path.write_text(yaml.safe_dump({**settings, "models": {**series, **settings.get("models", {})}}))
    return str(path)


def test_nothing_changed_nothing_runs(planning_copy):
    assert planned_jobs(planning_copy) == []


def test_changed_weights_rerun_only_that_model(planning_copy, demo_config):
    changed = model_of_every_stage(demo_config)
    sheets = rater_sheet_rules(demo_config, changed)
    jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"models": {changed: {"weights": "random:1"}}}))
    per_rule = Counter(rule for rule, _ in jobs)
    # its level-set views read its features: they and their probes re-run too
    assert rules_of(jobs) - COLLECTORS == {
        "extract_features", "merge_features", "level_set_view", "balanced_view", "probe_kind", "pca_components",
        lin_probe_rule(demo_config),
    } | FEATURE_READERS | knn_rules(demo_config) | caption_cluster_rules(demo_config) | finetune_rules(demo_config, changed) | sheets
    assert {wildcards["model"] for rule, wildcards in jobs if rule not in COLLECTORS | sheets} == {changed}
    datasets, splits = [*demo_config["datasets"], "pool"], 2
    assert per_rule["merge_features"] == (len(datasets) + len(blurred_datasets(demo_config))) * splits
    assert per_rule["level_set_view"] == len(level_set_datasets(demo_config)) * splits
    assert probe_jobs(jobs) == expected_probe_jobs(
        demo_config,
        level_set_probe_count(demo_config, 1) + balanced_probe_count(demo_config, 1) + blurred_probe_count(demo_config, 1),
        lin_probe_count(demo_config, 1),
    )
    assert per_rule["probe_kind"] == len(demo_config["datasets"]) * other_kind_probes_per_dataset(demo_config)
    assert per_rule["pca_components"] == len(demo_config["datasets"])
    assert per_rule["probe_knn"] == len(demo_config["datasets"]) * len(knn_rules(demo_config))
    shards = sorted((planning_copy / "results" / "features" / changed).rglob("shard-*.h5"))
    assert per_rule["extract_features"] == len(shards)
    assert AGGREGATES <= rules_of(jobs)
    for analysis in ANALYSES:
        assert per_rule[f"analyses_{analysis}"] == len(demo_config["datasets"])  # not the pool


def test_another_host_resize_re_extracts_every_shard_and_nothing_upstream(planning_copy, demo_config):
    jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"features": {"host_resize": "tensor"}}))
    # the series' checkpoints' shards (model <series>@<step>) aside: the overlay takes the series out
    shards = [path for path in sorted((planning_copy / "results" / "features").rglob("shard-*.h5")) if "@" not in str(path)]
    per_rule = Counter(rule for rule, _ in jobs)
    assert per_rule["extract_features"] == len(shards)
    assert {"extract_features", "merge_features", "probe"} <= rules_of(jobs)
    assert not rules_of(jobs) & {"demo_world", "pretrain_demo_model", "concept_catalogue", "cut_levels", "index_images",
                                 "preflight", "caption_images", "finetune_backbone"}


def test_changed_probe_settings_rerun_only_probes(planning_copy, demo_config):
    for change in ({"trials": demo_config["probes"]["trials"] + 1}, {"epochs": demo_config["probes"]["epochs"] + 1}):
        jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"probes": change}))
        assert rules_of(jobs) - COLLECTORS == {"probe", "probe_kind", lin_probe_rule(demo_config)}, change
        others = level_set_probe_count(demo_config) + balanced_probe_count(demo_config) + blurred_probe_count(demo_config)
        assert probe_jobs(jobs) == expected_probe_jobs(demo_config, others, lin_probe_count(demo_config)), change
        assert Counter(rule for rule, _ in jobs)["probe_kind"] == other_kind_probe_count(demo_config)


def test_other_kinds_settings_never_rerun_the_linear_probe(planning_copy, demo_config):
    """The linear probe's jobs, paths and params are those from before other kinds existed:
    configuring, changing or dropping other kinds plans no linear probe job."""
    grid = len(stage_model_names(demo_config, "probes.kind_models.mlp_noact")) * len(demo_config["datasets"])
    only_linear = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"probes": {
        "kinds": ["linear"], "other_kinds_shots": None, "other_kinds_seeds": None}}))
    assert not {*LIN_PROBE_RULES.values(), "probe_kind"} & rules_of(only_linear)
    noact_range = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"probes": {"mlp": {
        **demo_config["probes"]["mlp"], "noact_lr_range": [0.02, 5.0]}}}))
    assert rules_of(noact_range) - COLLECTORS == {"probe_kind"}
    assert {wildcards["kind"] for rule, wildcards in noact_range if rule == "probe_kind"} == {"mlp_noact"}
    probes = demo_config["probes"]
    assert Counter(rule for rule, _ in noact_range)["probe_kind"] == grid * len(probes["other_kinds_shots"]) * len(probes["other_kinds_seeds"])
    width = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"probes": {"mlp": {
        **demo_config["probes"]["mlp"], "hidden_width": demo_config["probes"]["mlp"]["hidden_width"] + 1}}}))
    assert rules_of(width) - COLLECTORS == {"probe_kind"}
    assert not any(wildcards["kind"].startswith("pca-") for rule, wildcards in width if rule == "probe_kind")


def test_knn_settings_rerun_only_the_knn_jobs_and_the_knn_kind_is_separable(planning_copy, demo_config):
    """probes.knn reruns the k-NN jobs and nothing else of the probes; without knn in
    probes.kinds no probe job runs (so adding it to a finished run adds only its own jobs)."""
    assert knn_rules(demo_config), "the demo runs the k-NN probe"
    knn = {**demo_config["probes"]["knn"], "temperature": 0.1}
    jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"probes": {"knn": knn}}))
    assert rules_of(jobs) - COLLECTORS == {"probe_knn"}
    knn_models = stage_model_names(demo_config, "probes.kind_models.knn")
    assert Counter(rule for rule, _ in jobs)["probe_knn"] == len(knn_models) * len(demo_config["datasets"])
    kinds = [kind for kind in demo_config["probes"]["kinds"] if kind != "knn"]
    without = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"probes": {"kinds": kinds}}))
    assert rules_of(without) <= COLLECTORS


# A second kind with jobs of its own, registered before the k-NN: the k-NN's command with one
# neighbour. Each own-job rule must run its own kind's command, whichever kind the registry names last.
ONE_NEIGHBOUR_KIND = """
import dataclasses


def one_neighbour_options(probes):
    return knn.command_options({**probes, "knn": {**probes["knn"], "k": [1], "reported_k": 1}})


KINDS = {"knn_one": dataclasses.replace(knn.KIND, name="knn_one",
                                        own_job=dataclasses.replace(knn.KIND.own_job, options=one_neighbour_options)),
         **KINDS}
"""


def test_each_own_job_rule_runs_its_own_kinds_command(finished_copy, demo_config):
    with (finished_copy / "workflow/imagenet_cog/probes/kinds/__init__.py").open("a") as registry:
        registry.write(ONE_NEIGHBOUR_KIND)
    layout, model, dataset = Layout(), stage_model_names(demo_config, "probes.kind_models.knn")[0], "l1"
    grid = [(shots, str(seed)) for shots in demo_config["probes"]["shots"] for seed in demo_config["probes"]["seeds"]]
    targets = {kind: [layout.probe_result(model, dataset, str(shots), seed, kind) for shots, seed in grid]
               for kind in ("knn_one", "knn")}
    # the targets first: --forcerun takes every argument after it, and would run every k-NN job and
    # the tables and figures of the default target instead of these two kinds' jobs of one dataset
    snakemake(finished_copy, *targets["knn_one"], *targets["knn"], "--cores", "2", "--forcerun", "probe_knn")
    for kind, reported_k in (("knn_one", 1), ("knn", demo_config["probes"]["knn"]["reported_k"])):
        for path in targets[kind]:
            result = json.loads((finished_copy / path).read_text())
            assert result["knn"]["reported_k"] == reported_k, f"{path} was written by another kind's command"


def test_an_added_pca_dim_runs_only_its_probes(planning_copy, demo_config):
    dims = [*demo_config["probes"]["pca_dims"], 4]
    jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"probes": {"pca_dims": dims}}))
    assert rules_of(jobs) - COLLECTORS == {"probe_kind"}, "the components are reused, not recomputed"
    assert {wildcards["kind"] for rule, wildcards in jobs if rule == "probe_kind"} == {"pca-4"}


def test_an_added_kind_seed_runs_only_its_probes(planning_copy, demo_config):
    seeds = [*demo_config["probes"]["other_kinds_seeds"], 99]
    jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"probes": {"other_kinds_seeds": seeds}}))
    assert rules_of(jobs) - COLLECTORS == {"probe_kind"}
    assert {wildcards["seed"] for rule, wildcards in jobs if rule == "probe_kind"} == {"99"}


def test_one_job_per_seed_or_per_dataset_gives_the_same_results(finished_copy, demo_config):
    """probes.group (the demo's: dataset, one resident job per model and dataset running every
    N and seed of IN-1K and the levels) switched to one job per seed; level sets and variants
    keep their one-seed jobs. A run's result is the one its own job gives, searched afresh
    alone where the resident job searched it in passes shared with the other seeds."""
    probes = demo_config["probes"]
    assert probes["group"] == "dataset", "the demo runs resident probe jobs"
    switched = {"probes": {"group": "seed"}}
    jobs = planned_jobs(finished_copy, "--configfile", overlay(finished_copy, switched))
    assert rules_of(jobs) - COLLECTORS == {"probe"}, "its command differs, so Snakemake refits"
    models, datasets = len(demo_config["models"]), demo_config["datasets"]
    assert Counter(rule for rule, _ in jobs)["probe"] == models * len(datasets) * len(probes["shots"]) * len(probes["seeds"])
    assert {wildcards["dataset"] for rule, wildcards in jobs if rule == "probe"} == set(datasets)

    layout = Layout()
    runs = [("demo_cnn", "l1", shots, str(seed)) for shots in ("1", "all") for seed in probes["seeds"]]
    targets = [layout.probe_result(*run) for run in runs]
    shared = {target: json.loads((finished_copy / target).read_text()) for target in targets}
    for run in runs:  # no journal: the searches run again, now one job per seed
        (finished_copy / layout.probe_study(*run)).unlink()
    snakemake(finished_copy, "--cores", "2", *targets, "--configfile", overlay(finished_copy, switched))
    for target in targets:
        alone = json.loads((finished_copy / target).read_text())
        assert shared[target]["seeds_together"] == probes["seeds"] and alone["seeds_together"] == [alone["seed"]]
        assert shared[target]["resident_job"]["shots"] == probes["shots"] and "resident_job" not in alone
        assert alone["study"]["resumed_trials"] == 0
        assert alone["study"]["name"] == shared[target]["study"]["name"]
        assert [trial["val_top1"] for trial in alone["trials"]] == [trial["val_top1"] for trial in shared[target]["trials"]]
        assert (alone["best_params"], alone["test_top1"]) == (shared[target]["best_params"], shared[target]["test_top1"])


def test_an_added_seed_runs_only_the_probes_that_take_it(planning_copy, demo_config):
    """Grouped, the jobs of IN-1K and the levels take every seed: they run again (searches
    done resume from their journals); level sets and variants name their own."""
    seeds = [*demo_config["probes"]["seeds"], 99]
    jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"probes": {"seeds": seeds}}))
    assert rules_of(jobs) - COLLECTORS == {lin_probe_rule(demo_config)} | knn_rules(demo_config)
    if lin_probe_rule(demo_config) == "probe":
        assert {wildcards["seed"] for rule, wildcards in jobs if rule == "probe"} == {"99"}
    assert probe_jobs(jobs) == expected_probe_jobs(demo_config, 0, lin_probe_count(demo_config) // len(demo_config["probes"]["seeds"])
                                                   if demo_config["probes"]["group"] == "seed" else lin_probe_count(demo_config))


def test_an_added_shot_count_runs_only_its_probes(planning_copy, demo_config):
    shots = [*demo_config["probes"]["shots"], 2]
    assert 2 not in demo_config["probes"]["shots"]
    jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"probes": {"shots": shots}}))
    assert rules_of(jobs) - COLLECTORS == {lin_probe_rule(demo_config)} | knn_rules(demo_config)
    if demo_config["probes"]["group"] == "dataset":
        # the resident job of each model and dataset takes every N: it runs again, the
        # searches already done resuming from their journals
        assert probe_jobs(jobs) == expected_probe_jobs(demo_config, 0, lin_probe_count(demo_config))
        return
    assert {wildcards["shots"] for rule, wildcards in jobs if rule == lin_probe_rule(demo_config)} == {"2"}
    assert probe_jobs(jobs) == expected_probe_jobs(
        demo_config, 0, lin_probe_count({**demo_config, "probes": {**demo_config["probes"], "shots": [2]}})
    )


def test_changed_rater_settings_rerun_only_the_sheets(planning_copy, demo_config):
    tasks = demo_config["analyses"]["raters"]["tasks_per_concept"] + 1
    jobs = planned_jobs(planning_copy, "--configfile",
                        overlay(planning_copy, {"analyses": {"raters": {"tasks_per_concept": tasks}}}))
    assert rules_of(jobs) - {"all"} == {"rater_sheets"} | describability_rules(demo_config)
    assert sorted(w["dataset"] for rule, w in jobs if rule == "rater_sheets") == sorted(demo_config["datasets"])
    # Switching the sheets off only takes them out of rule all's targets.
    assert planned_jobs(planning_copy, "--configfile",
                        overlay(planning_copy, {"analyses": {"raters": {"enabled": False}}})) == []


def test_changed_level_setting_reruns_everything_below_the_levels(planning_copy, demo_config):
    levels = demo_config["levels"]
    jobs = planned_jobs(planning_copy, "--configfile",
                        overlay(planning_copy, {"levels": {"min_images": levels["min_images"] + 1}}))
    rules = rules_of(jobs)
    # WordNet, the concept catalogue and the image counts do not depend on the cut.
    assert not rules & {"wordnet_corpus", "concept_catalogue", "image_counts"}
    assert {"cut_levels", "levels_figure", "demo_world", "image_splits"} <= rules
    # The split tables are a checkpoint: the shards below them are planned once they exist,
    # so a dry run shows the merges and probes of every model and dataset.
    merges = {(w["model"], w["dataset"], w["split"]) for rule, w in jobs if rule == "merge_features"}
    extracted = (  # the pool for the level sets' models, IN-1K-blurred for its own
        len(demo_config["models"]) * len(demo_config["datasets"]) + len(stage_model_names(demo_config, "level_sets"))
        + len(stage_model_names(demo_config, "in1k_blurred")) * len(blurred_datasets(demo_config))
    )
    assert len(merges) == extracted * 2
    assert probe_jobs(jobs) == expected_probe_jobs(
        demo_config,
        level_set_probe_count(demo_config) + balanced_probe_count(demo_config) + blurred_probe_count(demo_config),
        lin_probe_count(demo_config),
    )


def test_a_deleted_shard_reruns_it_and_its_readers(finished_copy, demo_config):
    layout = Layout()
    model, dataset, split = model_of_every_stage(demo_config), "l1", "train"
    shard = finished_copy / layout.feature_shard(model, dataset, split, "00000")
    shard.unlink()
    jobs = planned_jobs(finished_copy)
    assert [w for rule, w in jobs if rule == "extract_features"] == [
        {"model": model, "dataset": dataset, "split": split, "shard": "00000"}
    ]
    assert [w for rule, w in jobs if rule == "merge_features"] == [{"model": model, "dataset": dataset, "split": split}]
    # Every view of that model and split reads l1's merged file: views and their probes follow.
    views = [w for rule, w in jobs if rule == "level_set_view"]
    assert sorted(w["dataset"] for w in views) == sorted(level_set_datasets(demo_config))
    assert {(w["model"], w["split"]) for w in views} == {(model, split)}
    # so do the balanced variant's view of that dataset and its probes
    assert [w for rule, w in jobs if rule == "balanced_view"] == [{"model": model, "dataset": dataset}]
    balanced = balanced_probe_count(demo_config, 1) // len(demo_config["datasets"])
    probes = [w for rule, w in jobs if rule in LIN_PROBE_RULES.values()]
    assert {(w["model"], w["dataset"]) for w in probes} == {(model, dataset), (model, f"balanced-{dataset}")} | {
        (model, d) for d in level_set_datasets(demo_config)
    }
    assert probe_jobs(jobs) == expected_probe_jobs(
        demo_config, level_set_probe_count(demo_config, 1) + balanced, lin_probe_count(demo_config, 1) // len(demo_config["datasets"])
    )
    others = [w for rule, w in jobs if rule in ("probe_kind", "pca_components")]
    assert {(w["model"], w["dataset"]) for w in others} == {(model, dataset)}
    assert len([w for rule, w in jobs if rule == "probe_kind"]) == other_kind_probes_per_dataset(demo_config)
    assert rules_of(jobs) - COLLECTORS == {
        "extract_features", "merge_features", "level_set_view", "balanced_view", "probe", "analyses_kmeans",
        "probe_kind", "pca_components", lin_probe_rule(demo_config),
    } | knn_rules(demo_config) | caption_cluster_rules(demo_config)
    assert [w for rule, w in jobs if rule == "probe_knn"] == [{"model": model, "dataset": dataset}]
    # Of the analyses, only k-means reads training features.
    readers = [(rule, w) for rule, w in jobs if rule in FEATURE_READERS - {"probe"}]
    assert [(rule, w["model"], w["dataset"]) for rule, w in readers] == [("analyses_kmeans", model, dataset)]


def test_changed_results_settings_rerun_only_their_aggregates(planning_copy, demo_config):
    other = next(model for model in demo_config["models"] if model != demo_config["results"]["baseline_model"])
    jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"results": {"baseline_model": other}}))
    # the rater sheets pick hard negatives with the baseline's features (analyses.raters.model: null);
    # the fine-tuning control fine-tunes the baseline (finetune.models: null); the concept curve's
    # paired differences are to the baseline (and the leaderboard reads the curve's table)
    assert rules_of(jobs) == {"result_tables", "result_figures", "result_statistics", "rater_sheets",
                              "finetune_backbone", "finetune_results", "concept_results", "leaderboard",
                              "all"} | describability_rules(demo_config)
    # every model named, in config order (not sorted): the merged config lists the overlay's
    # keys first, and the order of models is part of the aggregates' parameters
    models = {model: ({"paper_name": "VGG19"} if model == other else {}) for model in demo_config["models"]}
    (planning_copy / "paper_name.yaml").write_text(yaml.safe_dump({"models": models}, sort_keys=False))
    jobs = planned_jobs(planning_copy, "--configfile", str(planning_copy / "paper_name.yaml"))
    assert rules_of(jobs) == {"result_published", "leaderboard", "all"}


def test_a_declared_pretraining_data_reruns_only_the_jobs_that_show_it(planning_copy, demo_config):
    """A model's pretraining data reaches only the jobs that show it or its exposure class: a new class
    reruns the tables and figures that compare that model (no extraction, probe or analysis; not the
    zero-shot results, whose model it is not); new datasets of the same class, only the leaderboard
    (which shows them); what its release's row already says, nothing."""
    model = demo_config["results"]["baseline_model"]
    path = planning_copy / "pretraining.yaml"

    def declaring(name, data):
        # every model named, in config order: the order of models is part of the aggregates' parameters
        models = {other: ({"pretraining_data": data} if other == name else {}) for other in demo_config["models"]}
        path.write_text(yaml.safe_dump({"models": models}, sort_keys=False))
        return rules_of(planned_jobs(planning_copy, "--configfile", str(path)))

    assert declaring(model, ["in21k-images", "in1k"]) == {
        "result_tables", "result_drop", "result_statistics", "result_figures", "result_published", "leaderboard",
        "analyses_tables", "analyses_figures", "detection_results", "concept_results", "all"}
    control = next(name for name, entry in demo_config["models"].items() if entry.get("weights") == "random"
                   and name in stage_model_names(demo_config, "results"))
    assert declaring(control, ["in1k"]) == {"leaderboard", "all"}
    assert declaring(model, ["in1k"]) <= {"all"}


def test_a_changed_analysis_setting_reruns_only_that_analysis(planning_copy, demo_config):
    tasks = demo_config["analyses"]["learnability"]["tasks"] + 1
    jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"analyses": {"learnability": {"tasks": tasks}}}))
    assert rules_of(jobs) - ANALYSIS_COLLECTORS == {"analyses_learnability"}
    assert "analyses_agreement" not in rules_of(jobs)
    analysed = stage_model_names(demo_config, "analyses")
    assert Counter(rule for rule, _ in jobs)["analyses_learnability"] == len(analysed) * len(demo_config["datasets"])


def test_an_analysis_switched_off_or_added_runs_only_its_jobs(finished_copy, demo_config):
    without = overlay(finished_copy, {"analyses": {"alignment_uniformity": {"enabled": False}}})
    # Switched off: only the summary, tables and figures change (they list fewer inputs).
    assert rules_of(planned_jobs(finished_copy, "--configfile", without)) <= ANALYSIS_COLLECTORS - {"analyses_agreement"}
    # A run that never had it: its results absent, the rest made without it.
    layout = Layout()
    analysed = stage_model_names(demo_config, "analyses")
    for model in analysed:
        for dataset in demo_config["datasets"]:
            (finished_copy / layout.analysis_result(model, dataset, "alignment_uniformity")).unlink()
    snakemake(finished_copy, "--cores", "2", "--configfile", without)
    # Added: its own jobs and the collectors, nothing else.
    jobs = planned_jobs(finished_copy)
    assert rules_of(jobs) - ANALYSIS_COLLECTORS == {"analyses_alignment_uniformity"}
    assert "analyses_agreement" not in rules_of(jobs)
    assert Counter(rule for rule, _ in jobs)["analyses_alignment_uniformity"] == len(analysed) * len(demo_config["datasets"])


def test_a_lost_analysis_result_is_made_again_alone(finished_copy, demo_config):
    layout = Layout()
    model = stage_model_names(demo_config, "analyses")[-1]
    (finished_copy / layout.analysis_result(model, "l1", "learnability")).unlink()
    jobs = planned_jobs(finished_copy)
    assert [(rule, w) for rule, w in jobs if rule not in ANALYSIS_COLLECTORS] == [
        ("analyses_learnability", {"model": model, "dataset": "l1"})
    ]


# A timm model by name, with random weights, at the demo's 32 pixels (a ViT built for that size).
TIMM_MODEL = {"arch": "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k", "weights": "random:2", "input_size": 32,
              "category": "architecture", "label": "ViT-Ti (timm, random)"}


def joined_to_every_stage_list(demo_config, added):
    """The demo's stage lists (which name its CNNs) with ``added`` joined to each, so that the
    added model takes every path they take."""
    settings = {section: {"models": [*demo_config[section]["models"], added]}
                for section in ("level_sets", "in1k_blurred", "balanced", "label_audit", "analyses")
                if demo_config[section].get("models") is not None}
    settings["probes"] = {"kind_models": {kind: [*listed, added] for kind, listed in
                                          demo_config["probes"]["kind_models"].items() if listed is not None}}
    return settings


def test_an_added_model_runs_only_its_own_jobs(planning_copy, demo_config):
    added = "vit_tiny"
    settings = {"models": {added: TIMM_MODEL}, **joined_to_every_stage_list(demo_config, added)}
    jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, settings))
    per_model = [(rule, w) for rule, w in jobs if rule not in COLLECTORS]
    assert {rule for rule, _ in per_model} == {
        "extract_features", "merge_features", "level_set_view", "balanced_view", "probe_kind", "pca_components",
        lin_probe_rule(demo_config),
    } | FEATURE_READERS | knn_rules(demo_config) | caption_cluster_rules(demo_config)
    assert {w["model"] for _, w in per_model} == {added}
    per_rule = Counter(rule for rule, _ in jobs)
    for analysis in ANALYSES:
        assert per_rule[f"analyses_{analysis}"] == len(demo_config["datasets"])
    assert per_rule["analyses_agreement"] == len(demo_config["datasets"])


def test_a_timm_model_by_name_runs_end_to_end_and_its_preprocessing_is_its_identity(finished_copy, demo_config):
    """The timm route in a real run: IN-1K's features and probes of a timm model named in the
    config, its features timm's pre-logits of the demo's images; finished, it plans nothing;
    preprocessing: model re-extracts it, and so do other tokens, but not the default written out."""
    import h5py
    import timm
    import torch

    from imagenet_cog.features.extract import ImageRows
    from imagenet_cog.models.registry import ModelSpec, planned_preprocessing

    added, layout = "vit_tiny", Layout()
    # one probe job per seed: the resident job would probe every N and seed for the one result read
    one_probe = {"probes": {"group": "seed"}}
    settings = overlay(finished_copy, {"models": {added: TIMM_MODEL}, **one_probe})
    seed = demo_config["probes"]["seeds"][0]
    targets = [layout.features(added, "in1k", split) for split in ("train", "test")] + [
        layout.probe_result(added, "in1k", "all", str(seed))]
    snakemake(finished_copy, "--cores", "2", *targets, "--configfile", settings)
    result = json.loads((finished_copy / targets[-1]).read_text())
    assert 0 <= result["test_top1"] <= 100

    shard = finished_copy / layout.feature_shard(added, "in1k", "test", "00000")
    with h5py.File(shard) as handle:
        attributes = {key: handle.attrs[key] for key in ("arch", "weights", "preprocessing", "feature_dim", "timm_model")}
        features = torch.from_numpy(handle["features"][...].astype("float32"))
        paths = list(handle["path"].asstr()[...])
    assert attributes["arch"] == TIMM_MODEL["arch"] and attributes["weights"] == "random:2"
    assert attributes["feature_dim"] == 192 and attributes["timm_model"] == "vit_tiny_patch16_224.augreg_in21k_ft_in1k"
    assert json.loads(attributes["preprocessing"]) == {
        "size": 32, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "interpolation": "bicubic", "mode": "paper"}
    # timm's own network with the same seed, on the same preprocessed images
    preprocessing = planned_preprocessing(ModelSpec(added, TIMM_MODEL["arch"], input_size=32))
    rows = ImageRows(finished_copy / layout.demo_images("in1k"), paths, preprocessing)
    pixels = torch.stack([rows[position][0] for position in range(len(rows))]).float()
    batch = (pixels / 255 - 0.5) / 0.5
    torch.manual_seed(2)
    reference = timm.create_model("vit_tiny_patch16_224.augreg_in21k_ft_in1k", img_size=32).eval()
    with torch.inference_mode():
        expected = reference.forward_head(reference.forward_features(batch), pre_logits=True)
    # the shards hold float16
    torch.testing.assert_close(features, expected, rtol=2e-3, atol=2e-3)

    assert planned_jobs(finished_copy, *targets, "--configfile", settings) == []
    model_preprocessing = overlay(finished_copy, {"models": {added: {**TIMM_MODEL, "preprocessing": "model"}}, **one_probe})
    jobs = planned_jobs(finished_copy, *targets, "--configfile", model_preprocessing)
    assert {rule for rule, _ in jobs} == {"extract_features", "merge_features", lin_probe_rule(one_probe)}
    assert {w["model"] for _, w in jobs} == {added}
    # the tokens read are the features' identity too; pre_logits written out is the default
    spelled_out = overlay(finished_copy, {"models": {added: {**TIMM_MODEL, "tokens": "pre_logits", "blocks": 1}}, **one_probe})
    assert planned_jobs(finished_copy, *targets, "--configfile", spelled_out) == []
    tokens = overlay(finished_copy, {"models": {added: {**TIMM_MODEL, "tokens": "cls+avgpool", "blocks": 2}}, **one_probe})
    jobs = planned_jobs(finished_copy, *targets, "--configfile", tokens)
    assert {rule for rule, _ in jobs} == {"extract_features", "merge_features", lin_probe_rule(one_probe)}


def save_transformers_vit(folder: Path, seed: int) -> None:
    """A small random ViT at the demo's 32 pixels as save_pretrained writes it, its image processor beside it."""
    import torch
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    torch.manual_seed(seed)
    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
                       patch_size=8)
    ViTModel(config, add_pooling_layer=False).save_pretrained(folder)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)


def test_a_transformers_folder_runs_end_to_end_and_a_copy_of_it_reruns_nothing(finished_copy):
    """The transformers route in a real run: a save_pretrained folder named in the config
    (arch: hf/./models/...), its IN-1K features extracted; finished, the folder replaced by a
    copy of itself (other files, other modification times) plans nothing, as its identity is its
    content; other weights in it re-extract that model alone."""
    import h5py

    added, layout = "hf_vit", Layout()
    folder = finished_copy / "models" / "hf-vit"
    save_transformers_vit(folder, seed=4)
    settings = overlay(finished_copy, {"models": {added: {"arch": "hf/./models/hf-vit", "label": "ViT (transformers)"}}})
    targets = [layout.features(added, "in1k", split) for split in ("train", "test")]
    snakemake(finished_copy, "--cores", "2", *targets, "--configfile", settings)
    with h5py.File(finished_copy / layout.feature_shard(added, "in1k", "test", "00000")) as handle:
        attributes = {key: handle.attrs[key] for key in ("arch", "hf_model", "hf_model_type", "tokens", "feature_dim")}
    assert attributes == {"arch": "hf/./models/hf-vit", "hf_model": "./models/hf-vit", "hf_model_type": "vit",
                          "tokens": "cls", "feature_dim": 32}

    shutil.copytree(folder, folder.with_name("copied"), copy_function=shutil.copy)
    shutil.rmtree(folder)
    folder.with_name("copied").rename(folder)
    assert planned_jobs(finished_copy, *targets, "--configfile", settings) == []
    save_transformers_vit(folder, seed=5)
    jobs = planned_jobs(finished_copy, *targets, "--configfile", settings)
    assert {rule for rule, _ in jobs} == {"extract_features", "merge_features"} and {w["model"] for _, w in jobs} == {added}


# level sets --------------------------------------------------------------------------------

ALL_SETS = {"sets": ["wup", "path", "jcn", "word2vec", "random"], "random": {"draws": 15}}


def test_adding_level_sets_extracts_nothing_and_reruns_no_probe(planning_copy, demo_config):
    """The issue's target: more measures and 15 random draws over features already extracted
    plan no extraction, no merge, no split and no probe of Lin's levels or of the sets that
    were there; only the new sets' rankings, views and probes (and the aggregates)."""
    jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"level_sets": ALL_SETS}))
    assert rules_of(jobs) - COLLECTORS == {"level_set", "level_set_figure", "random_level", "level_set_view", "probe"}
    assert {w["level_set"] for rule, w in jobs if rule == "level_set"} == {"path", "jcn"}
    before = set(level_set_datasets(demo_config))
    after = {**demo_config, "level_sets": {**demo_config["level_sets"], **ALL_SETS,
                                           "random": {**demo_config["level_sets"]["random"], "draws": 15}}}
    added = set(level_set_datasets(after)) - before
    probed = {w["dataset"] for rule, w in jobs if rule == "probe"}
    assert probed == added and not probed & set(demo_config["datasets"])
    assert {w["dataset"] for rule, w in jobs if rule == "level_set_view"} == added
    assert {w["draw"] for rule, w in jobs if rule == "random_level"} == {f"{k:02d}" for k in range(3, 16)}


def test_level_sets_on_a_finished_lin_run_extract_only_the_pool(finished_copy, demo_config):
    """A run finished before level sets existed: Lin's outputs only. Adding every set plans
    the pool's images, split and features (concepts never extracted) and nothing for Lin."""
    layout, results = Layout(), finished_copy / "results"
    level_set_outputs = [
        results / "demo" / "pool", results / "demo" / "concepts" / "pool.txt", results / "splits" / "pool.tsv",
        finished_copy / layout.word_vectors_demo(), finished_copy / layout.level_sets_figure("png"),
        finished_copy / layout.level_sets_figure("pdf"),
        *(finished_copy / layout.level_sets_table(extension) for extension in ("csv", "md", "tex")),
        # the zero-shot names tables (levels/names) are Lin's datasets', not a level set's
        *(path for path in (results / "levels").iterdir() if path.is_dir() and path.name not in ("nltk_data", "names")),
        *(results / "features").glob("*/*-*"), *(results / "features").glob("*/pool"), *(results / "probes").glob("*/*-*"),
    ]
    # the class-balanced variant's views and probes are not level sets, nor is the zero-shot open set
    level_set_outputs = [path for path in level_set_outputs
                         if not path.name.startswith("balanced-") and path.name != "open-set"]
    for path in level_set_outputs:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    # Lin's outputs alone are a finished run: only the aggregates (whose command changed) run.
    lin_only = planned_jobs(finished_copy, "--configfile", overlay(finished_copy, {"level_sets": {"sets": []}}))
    assert rules_of(lin_only) <= COLLECTORS
    jobs = planned_jobs(finished_copy, "--configfile", overlay(finished_copy, {"level_sets": ALL_SETS}))
    extracted = {w["dataset"] for rule, w in jobs if rule in ("extract_features", "merge_features", "image_splits")}
    assert extracted == {"pool"}
    assert not rules_of(jobs) & {"cut_levels", "demo_world", "levels_figure", "wordnet_corpus", "concept_catalogue"}
    assert not {w["dataset"] for rule, w in jobs if rule == "probe"} & set(demo_config["datasets"])


def test_changed_random_draws_rerun_only_their_own_views_and_probes(planning_copy, demo_config):
    seed = demo_config["level_sets"]["random"].get("seed", 0) + 1
    jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"level_sets": {"random": {"seed": seed}}}))
    assert rules_of(jobs) - COLLECTORS == {"random_level", "level_set_view", "probe"}
    draws = [d for d in level_set_datasets(demo_config) if d.startswith("random-")]
    assert {w["dataset"] for rule, w in jobs if rule in ("level_set_view", "probe")} == set(draws)
    assert {"aggregate_probes", "level_sets_results"} <= rules_of(jobs)


def test_changed_word_vectors_rerun_only_the_word2vec_set(finished_copy, demo_config):
    vectors = finished_copy / Layout().word_vectors_demo()
    vectors.touch()
    jobs = planned_jobs(finished_copy)
    assert rules_of(jobs) - COLLECTORS == {"level_set", "level_set_figure", "level_set_view", "probe"}
    assert {w["level_set"] for rule, w in jobs if rule in ("level_set", "level_set_figure")} == {"word2vec"}
    assert {w["dataset"].split("-")[0] for rule, w in jobs if rule in ("level_set_view", "probe")} == {"word2vec"}


def test_changed_audit_settings_rerun_only_the_audit(planning_copy, demo_config):
    for change in ({"threshold": 0.5}, {"contact_sheet_images": 3}, {"pairs": [["l5", "in1k"]]}):
        jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"label_audit": change}))
        assert rules_of(jobs) == {"label_audit", "all"}, change
        audited = sorted(stage_model_names(demo_config, "label_audit"))
        assert sorted(w["model"] for rule, w in jobs if rule == "label_audit") == audited, change


def test_the_audit_on_a_run_finished_before_it_refits_classifiers_and_reruns_no_probe(finished_copy, demo_config):
    """Probes finished before the audit existed kept no classifier: adding the audit plans
    only its own jobs, which refit the classifiers beside the result JSONs (of the audited
    models, label_audit.models)."""
    layout = Layout()
    kept = sorted(
        finished_copy / layout.probe_classifier(model, dataset, str(seed))
        for model in stage_model_names(demo_config, "label_audit") for dataset in demo_config["datasets"] for seed in demo_config["probes"]["seeds"]
    )
    assert all(path.is_file() for path in kept), "N = all probes keep their classifier"
    for path in kept:
        path.unlink()
    shutil.rmtree(finished_copy / "results" / "audit")
    jobs = planned_jobs(finished_copy)
    assert rules_of(jobs) == {"label_audit", "all"}
    snakemake(finished_copy, "--cores", "2")
    assert all(path.is_file() for path in kept)
    assert planned_jobs(finished_copy) == []


def test_the_balanced_variant_reads_existing_features_and_reruns_only_its_own_jobs(planning_copy, demo_config):
    """A changed sub-sample (or the variant switched on) extracts nothing: its datasets are
    views over the default features, and only its own probes run again."""
    change = {"balanced": {"train_per_concept": demo_config["balanced"]["train_per_concept"] - 1}}
    jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, change))
    assert rules_of(jobs) - {"all"} == {"balanced_split", "balanced_view", "probe", "balanced_results"}
    assert {w["dataset"] for rule, w in jobs if rule == "probe"} == {f"balanced-{d}" for d in demo_config["datasets"]}
    per_rule = Counter(rule for rule, _ in jobs)
    assert per_rule["balanced_split"] == len(demo_config["datasets"])
    assert per_rule["balanced_view"] == len(demo_config["datasets"]) * len(stage_model_names(demo_config, "balanced"))
    # switched off, nothing runs; the variant's files stay beside the default ones
    assert planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"balanced": {"enabled": False}})) == []


def test_changed_blurred_images_rerun_only_in1k_blurred(planning_copy, demo_config):
    change = {"in1k_blurred": {"demo_dropped": demo_config["in1k_blurred"].get("demo_dropped", 3) + 1}}
    jobs = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, change))
    assert "demo_blurred" in rules_of(jobs)
    assert rules_of(jobs) <= {
        "demo_blurred", "image_splits", "split_summary", "extract_features", "merge_features", "probe",
        "blurred_results", "all",
    }
    assert {w["dataset"] for rule, w in jobs if "dataset" in w} == {"in1k_blurred"}
    # switched off, only the split summary (one dataset fewer) is made again
    switched_off = planned_jobs(planning_copy, "--configfile", overlay(planning_copy, {"in1k_blurred": {"enabled": False}}))
    assert rules_of(switched_off) == {"split_summary", "all"}
