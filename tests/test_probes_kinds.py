"""The probe-kind registry (imagenet_cog.probes.kinds): the schema's kinds are its kinds,
every probes.* key is claimed (so a new one reruns nothing by accident), and the linear
kind's allow-list is what the probe command reads from params.probes."""

from __future__ import annotations

import re
from dataclasses import asdict

import pytest
import yaml

from conftest import REPOSITORY
from imagenet_cog.probes.kinds import JOB_SETTINGS, KINDS, SEARCHED_KINDS, kind_of_result
from imagenet_cog.probes.probe import _parser, search_settings
from imagenet_cog.probes.search import SearchSettings

SCHEMA = yaml.safe_load((REPOSITORY / "workflow" / "schemas" / "config.schema.yaml").read_text())
PROBES_SCHEMA = SCHEMA["properties"]["probes"]["properties"]
PROBE_FUNCTIONS = REPOSITORY / "workflow" / "rules" / "functions" / "probes.smk"


def test_the_schema_offers_exactly_the_registered_kinds_in_their_order():
    assert PROBES_SCHEMA["kinds"]["items"]["enum"] == list(KINDS)


def test_every_probes_key_of_the_schema_is_a_kinds_setting_or_a_job_setting():
    claimed = {key for kind in KINDS.values() for key in kind.settings} | set(JOB_SETTINGS)
    assert claimed == set(PROBES_SCHEMA)
    assert not {key for kind in KINDS.values() for key in kind.settings} & set(JOB_SETTINGS)


def test_the_linear_allow_list_is_what_the_probe_command_reads_from_its_params():
    read = set(re.findall(r"\{params\.probes\[(\w+)\]\}", PROBE_FUNCTIONS.read_text()))
    # kind_arguments: the other kinds' network and --kind, formed by kind_probe_settings
    assert read - {"kind_arguments"} == set(KINDS["linear"].settings)


def test_pca_stands_for_one_kind_per_dimension_and_the_others_for_themselves():
    probes = {"pca_dims": [32, 256]}
    assert KINDS["pca"].result_names(probes) == ["pca-32", "pca-256"]
    assert [KINDS[name].result_names(probes) for name in ("linear", "mlp", "mlp_noact", "knn")] == [
        ["linear"], ["mlp"], ["mlp_noact"], ["knn"]
    ]
    assert kind_of_result("pca-256") is KINDS["pca"]
    assert kind_of_result("mlp_noact") is KINDS["mlp_noact"]


def test_the_knn_has_its_own_command_and_the_others_are_searched():
    assert SEARCHED_KINDS == ("linear", "mlp", "mlp_noact", "pca")


@pytest.mark.parametrize(
    ("kind", "absent"),
    [
        # the linear probe's study names are those it had before other kinds existed
        ("linear", {"kind", "hidden_width", "hidden_layers", "pca_dim"}),
        ("pca", {"hidden_width", "hidden_layers"}),
        ("mlp", {"pca_dim"}),
        ("mlp_noact", {"pca_dim"}),
    ],
)
def test_a_kinds_studies_are_named_without_the_fields_it_does_not_use(kind, absent):
    defining = SearchSettings(kind=kind).defining()
    assert not absent & set(defining)
    assert {"trials", "epochs", "lr_range"} <= set(defining)


PROBES = {"lr_range": [0.1, 100], "wd_range": [1e-12, 1e-4], "pca_dims": [8],
          "mlp": {"hidden_width": 64, "hidden_layers": 2, "lr_range": [0.1, 100], "noact_lr_range": [0.01, 10],
                  "wd_range": [1e-8, 1e-4]}}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("pca-8", {"kind": "pca", "pca_dim": 8, "lr_range": (0.1, 100.0), "wd_range": (1e-12, 1e-4)}),
        ("mlp", {"kind": "mlp", "hidden_width": 64, "hidden_layers": 2, "lr_range": (0.1, 100.0)}),
        ("mlp_noact", {"kind": "mlp_noact", "hidden_width": 64, "lr_range": (0.01, 10.0), "wd_range": (1e-8, 1e-4)}),
    ],
)
def test_a_kinds_command_settings_give_the_probe_command_its_kind_and_ranges(name, expected):
    settings = kind_of_result(name).command_settings(PROBES, name)
    argv = ["--train", "t.h5", "--test", "e.h5", "--output", "o.json", "--study", "s.jsonl", "--model", "m",
            "--dataset", "l1", "--shots", "all", "--seed", "0", *settings["kind_arguments"].split(),
            "--lr-range", *settings["lr_range"].split(), "--wd-range", *settings["wd_range"].split()]
    searched = asdict(search_settings(_parser().parse_args(argv)))
    assert {key: searched[key] for key in expected} == expected


def test_a_kind_finds_what_is_wrong_with_its_settings():
    knn = KINDS["knn"].settings_problem
    assert knn({"knn": {"k": [5, 10, 20], "reported_k": 10}}) is None
    problem = knn({"knn": {"k": [5, 10], "reported_k": 20}})
    assert "probes.knn.reported_k 20 is not one of probes.knn.k [5, 10]" in problem and "add it to k" in problem


def test_a_configured_kinds_settings_problem_stops_the_workflow_before_any_job(tmp_path):
    from conftest import copy_workflow, refused_overlay

    workdir = copy_workflow(tmp_path / "copy")
    output = refused_overlay(workdir, {"probes": {"kinds": ["linear", "knn"], "knn": {"k": [5, 10], "reported_k": 20}}})
    assert "config.yaml: probes.knn.reported_k 20 is not one of probes.knn.k [5, 10]" in output
    assert not (workdir / "results").exists()


def test_zero_shot_runs_for_the_models_with_a_text_tower_and_stops_a_run_without_one(tmp_path):
    from conftest import copy_workflow, refused_overlay

    has_text_tower = KINDS["zeroshot"].off_grid.applies_to
    assert has_text_tower({"arch": "open_clip/ViT-B-32"})
    assert has_text_tower({"arch": "open_clip/ViT-B-32", "image_features": "embedding"})
    assert not has_text_tower({"arch": "open_clip/ViT-B-16-SigLIP", "image_features": "pooled"})
    assert not has_text_tower({"arch": "resnet50"}) and not has_text_tower({"arch": "timm/vit_base_patch16_224"})
    assert KINDS["zeroshot"].off_grid and not KINDS["zeroshot"].searched
    workdir = copy_workflow(tmp_path / "copy")
    output = refused_overlay(workdir, {"models": {"demo_clip": {"image_features": "pooled"}},
                                       "probes": {"zeroshot": {"names": {"l9": "mine.tsv"}}}})
    assert "probes.kinds has zeroshot, but no model has a text tower" in output and "open_clip/<name>" in output
    output = refused_overlay(workdir, {"probes": {"zeroshot": {"names": {"l9": "mine.tsv"}}}})
    assert "probes.zeroshot.names names 'l9' (mine.tsv), which is neither a dataset" in output
    assert not (workdir / "results").exists()


def test_a_kind_off_the_grid_has_its_rule_file_and_prices_every_job_of_a_model():
    """Its rules are in the file its module names (probes.smk includes it) and every rule there
    is the kind's; the plan prices the jobs its module lists at rates a rates file holds."""
    from imagenet_cog.plan.cost import RATE_KEYS, Dataset

    rules = REPOSITORY / "workflow" / "rules"
    probes = {"zeroshot": {"templates": "simple", "open_set": True}}
    datasets = [Dataset("in1k", 40, 20, 4, 0), Dataset("l1", 40, 20, 4, 0)]
    for kind in (kind for kind in KINDS.values() if kind.off_grid):
        assert "\nrule " in (rules / kind.off_grid.rules).read_text()
        jobs = kind.off_grid.jobs(datasets, 512, 2, probes)
        # a classifier and a scoring job for each dataset and the open set
        assert len(jobs) == 6 and sum(job.results for job in jobs) == 3
        assert {key for job in jobs for key in job.work} <= set(RATE_KEYS + kind.off_grid.rates)
