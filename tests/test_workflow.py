"""End to end: the whole workflow on its built-in demo world, as `make demo` runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import snakemake
from imagenet_cog.io import read_lines, read_tsv
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


def test_level_set_outputs(demo_run, demo_config):
    """Each configured level set: ranking, levels, summary, figure and overlap with Lin; its
    views read only already-extracted features; its probes; the Fig. 7-like figure and table."""
    import h5py
    import pandas as pd

    layout = Layout()
    sets = demo_config["level_sets"]["sets"]
    lin_levels = [set(read_lines(demo_run / layout.level_concepts(f"l{k}"))) for k in range(1, 6)]
    for name in (s for s in sets if s != "random"):
        ranking = read_tsv(demo_run / layout.level_set_ranking(name))
        assert len(ranking) == (5000 if name == "word2vec" else 5146)
        levels = [read_lines(demo_run / layout.dataset_concepts(f"{name}-l{k}")) for k in range(1, 6)]
        assert [len(level) for level in levels] == [1000] * 5
        overlap = read_tsv(demo_run / layout.level_set_overlap(name))
        assert [[int(row[f"l{j}"]) for j in range(1, 6)] for row in overlap] == [
            [len(lin & set(level)) for level in levels] for lin in lin_levels
        ]
        assert (demo_run / layout.level_set_figure(name, "png")).stat().st_size > 0
    draws = demo_config["level_sets"]["random"]["draws"]
    for draw in range(1, draws + 1):
        assert len(read_lines(demo_run / layout.random_draw(f"{draw:02d}"))) == demo_config["level_sets"]["random"]["concepts"]
    views = [f"{name}-l{k}" for name in sets if name != "random" for k in range(1, 6)]
    views += [f"random-{draw:02d}" for draw in range(1, draws + 1)]
    extracted = {"pool", *demo_config["datasets"]}
    for model in demo_config["models"]:
        for view in views:
            with h5py.File(demo_run / layout.features(model, view, "train")) as handle:
                assert handle["features"].is_virtual
                assert {Path(s.file_name).parts[-3] for s in handle["features"].virtual_sources()} <= extracted
            for seed in demo_config["level_sets"]["seeds"]:
                result = json.loads((demo_run / layout.probe_result(model, view, "all", str(seed))).read_text())
                assert 0.0 <= result["test_top1"] <= 100.0
    summary = pd.read_csv(demo_run / layout.results_summary())
    assert set(summary["level_set"]) == {"lin", *sets}
    assert set(summary[summary["level_set"] == "lin"]["dataset"]) == set(demo_config["datasets"])
    for path in (layout.level_sets_figure("png"), layout.level_sets_figure("pdf"), layout.level_sets_table("csv")):
        assert (demo_run / path).stat().st_size > 0
    table = pd.read_csv(demo_run / layout.level_sets_table("csv"))
    assert len(table) == len(demo_config["models"]) * len(sets) + len(demo_config["models"])  # Lin, sets; random 1 row


def test_rerun_does_nothing(demo_run):
    result = snakemake(demo_run, "--cores", "2", "--dry-run")
    assert "Nothing to be done" in result.stdout + result.stderr


def test_report_builds(demo_run):
    snakemake(demo_run, "--report", "report.html")
    html = (demo_run / "report.html").read_text(errors="replace")
    assert len(html) > 10_000
    assert "ImageNet-CoG" in html
