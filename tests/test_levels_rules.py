"""The levels rules under Snakemake: the stage on its own, re-running when a setting that
defines the levels changes, and running on the authors' published levels."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from typing import Iterator

import pytest

from conftest import copy_workflow, snakemake
from imagenet_cog.core.io import read_lines, read_tsv
from imagenet_cog.core.layout import Layout

pytestmark = pytest.mark.heavy

LAYOUT = Layout()
TARGETS = [LAYOUT.levels_figure("png"), *(LAYOUT.level_concepts(f"l{k}") for k in range(1, 6))]


@pytest.fixture(scope="module")
def levels_run(tmp_path_factory) -> Iterator[Path]:
    # `--config` takes every later argument: targets go before it.
    # Rules call `python -m imagenet_cog`: this interpreter's, as `make` arranges it.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        workdir = copy_workflow(tmp_path_factory.mktemp("levels") / "workflow-copy")
        snakemake(workdir, "--cores", "2", *TARGETS)
        yield workdir


def test_stage_writes_every_output(levels_run):
    for path in (LAYOUT.eligibility_report(), LAYOUT.level_summary(), LAYOUT.levels_figure("pdf"),
                 LAYOUT.concept_catalogue(), LAYOUT.image_counts(), LAYOUT.level_concepts("in1k")):
        assert (levels_run / path).stat().st_size > 0, path
    assert (levels_run / LAYOUT.wordnet_corpus() / "corpora" / "wordnet" / "lexnames").is_file()
    for log in ("wordnet_corpus", "concept_catalogue", "image_counts", "cut_levels", "levels_figure"):
        assert (levels_run / LAYOUT.log(f"levels/{log}.log")).is_file(), log
    assert "5146 eligible concepts" in (levels_run / LAYOUT.log("levels/cut_levels.log")).read_text()


def test_changed_level_settings_rerun_the_cut_only(levels_run, tmp_path):
    # --config would pass 900 as a string; a second config file keeps YAML types.
    override = tmp_path / "override.yaml"
    override.write_text("levels:\n  min_images: 900\n")
    dry = snakemake(levels_run, "--cores", "1", "--dry-run", *TARGETS, "--configfile", str(override))
    assert "rule cut_levels:" in dry.stdout and "rule levels_figure:" in dry.stdout
    assert "rule wordnet_corpus:" not in dry.stdout and "rule image_counts:" not in dry.stdout
    unchanged = snakemake(levels_run, "--cores", "1", "--dry-run", *TARGETS)
    assert "rule cut_levels:" not in unchanged.stdout


def test_published_levels_source(levels_run, tmp_path):
    ranking = read_tsv(levels_run / LAYOUT.ranking())
    # Stand-in for the authors' pickle: every other concept, five lists of 1000.
    chosen = [row["wnid"] for row in ranking][::-1][:5000]
    levels = [chosen[k * 1000 : (k + 1) * 1000] for k in range(5)]
    pickled = tmp_path / "levels.pkl"
    pickled.write_bytes(pickle.dumps(levels))
    config = f"levels={{'source': 'published', 'published_levels': '{pickled}'}}"
    snakemake(levels_run, "--cores", "2", *TARGETS, "--config", config)
    assert [read_lines(levels_run / LAYOUT.level_concepts(f"l{k}")) for k in range(1, 6)] == levels
    labels = {row["wnid"]: row["level"] for row in read_tsv(levels_run / LAYOUT.ranking())}
    assert labels[levels[0][0]] == "l1" and labels[ranking[0]["wnid"]] == "-"
    missing = snakemake(levels_run, "--cores", "1", "--dry-run", *TARGETS,
                        "--config", "levels={'source': 'published'}", check=False)
    assert missing.returncode != 0 and "levels.published_levels is not set" in missing.stdout + missing.stderr
