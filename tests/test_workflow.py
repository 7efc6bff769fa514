"""End to end: the whole workflow on its built-in demo world, as `make demo` runs it."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import snakemake
from imagenet_cog.io import read_lines, read_tsv
from imagenet_cog.aggregate import read_summary
from imagenet_cog.layout import Layout

pytestmark = pytest.mark.e2e

PAPER_ELIGIBILITY_COUNTS = [21841, 20842, 20081, 17254, 14248, 5216, 5146]


@pytest.fixture(scope="module")
def demo_config(demo_run):
    from snakemake.utils import validate

    config = yaml.safe_load((demo_run / "config.yaml").read_text())
    validate(config, str(demo_run / "workflow" / "schemas" / "config.schema.yaml"))
    return config


def test_eligibility_report_reproduces_the_paper(demo_run):
    report = read_tsv(demo_run / Layout().eligibility_report())
    assert [int(row["remaining"]) for row in report] == PAPER_ELIGIBILITY_COUNTS


def test_five_levels_of_1000_with_decreasing_similarity(demo_run):
    layout = Layout()
    ranking = {row["wnid"]: float(row["sim_in1k"]) for row in read_tsv(demo_run / layout.ranking())}
    levels = [read_lines(demo_run / layout.level_concepts(f"l{k}")) for k in range(1, 6)]
    assert [len(set(level)) for level in levels] == [1000] * 5
    assert len(set().union(*levels)) == 5000
    for nearer, further in zip(levels, levels[1:]):
        assert min(ranking[w] for w in nearer) >= max(ranking[w] for w in further)
    assert min(ranking[w] for w in levels[0]) > max(ranking[w] for w in levels[-1])
    assert len(read_lines(demo_run / layout.level_concepts("in1k"))) == 1000


def test_every_configured_output_exists(demo_run, demo_config):
    layout = Layout()
    for dataset in demo_config["datasets"]:
        rows = read_tsv(demo_run / layout.image_splits(dataset))
        assert {row["split"] for row in rows} == {"train", "test"}
        for model in demo_config["models"]:
            for split in ("train", "test"):
                assert (demo_run / layout.features(model, dataset, split)).stat().st_size > 0
            for shots in demo_config["probes"]["shots"]:
                for seed in demo_config["probes"]["seeds"]:
                    result = json.loads((demo_run / layout.probe_result(model, dataset, str(shots), str(seed))).read_text())
                    assert 0.0 <= result["test_top1"] <= 100.0
                    assert result["n_trials"] == demo_config["probes"]["trials"]
                    assert result["random_weights"] is True
    for target in layout.result_targets(demo_config["datasets"]):
        assert (demo_run / target).stat().st_size > 0, target
    assert (demo_run / layout.levels_figure("png")).stat().st_size > 0


def test_every_configured_probe_kind_ran(demo_run, demo_config):
    """The demo runs each other kind (000 C.2, C.3) on its own shots and seeds, at small d."""
    layout, probes = Layout(), demo_config["probes"]
    kinds = [kind for kind in probes["kinds"] if kind not in ("linear", "pca")]
    kinds += [f"pca-{dim}" for dim in probes["pca_dims"]] if "pca" in probes["kinds"] else []
    assert {"mlp", "mlp_noact"} <= set(kinds) and any(kind.startswith("pca-") for kind in kinds)
    for model in demo_config["models"]:
        for dataset in demo_config["datasets"]:
            for kind in kinds:
                for shots in probes["other_kinds_shots"]:
                    for seed in probes["other_kinds_seeds"]:
                        path = demo_run / layout.probe_result(model, dataset, str(shots), str(seed), kind)
                        result = json.loads(path.read_text())
                        assert result["probe"] == kind and 0.0 <= result["test_top1"] <= 100.0
                        if kind.startswith("pca-"):
                            assert result["feature_dim"] == int(kind.split("-")[1])
    summary = read_summary(demo_run / layout.results_summary())
    assert set(summary["probe"]) == {"linear", *kinds} and summary["complete"].all()


def test_rerun_does_nothing(demo_run):
    result = snakemake(demo_run, "--cores", "2", "--dry-run")
    assert "Nothing to be done" in result.stdout + result.stderr


def test_report_builds(demo_run):
    snakemake(demo_run, "--report", "report.html")
    html = (demo_run / "report.html").read_text(errors="replace")
    assert len(html) > 10_000
    assert "ImageNet-CoG" in html
