"""End to end on ImageNet as it is distributed: a Winter 2021-shaped IN-21K (one outer tar of
synset tars; a folder of synset tars) lacking synsets as that release does, and ILSVRC2012's
training tar of class tars, flat validation tar and devkit.

* the workflow runs to its tables on the tars, with the authors' published levels and splits;
* the features equal, bit for bit, those extracted from the same images in folders;
* the pre-flight check names every missing concept of a run in one error before any split,
  then an index older than the tars added; a cut image is flagged and named; a corrupt index
  stops the one job that reads it, naming index, archive and member, and the rest is kept.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from imagenet_world import (
    synset_images,
    tar_bytes,
    write_folders,
    write_ilsvrc2012,
    write_in1k_folders,
    write_outer_tar,
    write_synset_tars,
)
from test_plan_footprint import estimate_and_disk

from conftest import copy_workflow, snakemake
from imagenet_cog.core.io import read_tsv, write_lines
from imagenet_cog.core.layout import Layout
from imagenet_cog.splits.summary import split_summary

pytestmark = pytest.mark.e2e

LAYOUT = Layout()
MODEL = "demo_cnn_random"
# eight IN-1K classes stand for the 1000 (concepts.in1k_synsets)
IN1K = ["n01440764", "n01443537", "n01484850", "n01491361", "n01494475", "n01496331", "n01498041", "n01514668"]
# published levels of three concepts each; the run probes l1 and l2, the copy lacks l3-l5
LEVELS = [
    ["n01318894", "n01321123", "n01321579"],
    ["n01321770", "n01322343", "n01322604"],
    ["n01323068", "n01323155", "n01323261"],
    ["n01323355", "n01323493", "n01323599"],
    ["n01323781", "n01324305", "n01324431"],
]
IMAGES_PER_SYNSET = 8
TRAIN_PER_CLASS, VAL_PER_CLASS = 3, 2
DATASETS = ["in1k", "l1", "l2"]


def published_splits(images) -> dict:
    """The authors' shape: per wnid numpy arrays of paths, some with a leading slash; one
    image of each synset in neither split."""
    splits = {}
    for wnid, files in images.items():
        names = sorted(files)
        splits[wnid] = {"train": np.array([f"/{wnid}/{name}" for name in names[2:-1]]),
                        "test": np.array([f"{wnid}/{name}" for name in names[:2]])}
    return splits


def run_config(base: Path, in21k_root: Path, in1k_root: Path, published: bool = True) -> dict:
    levels = {"source": "published", "published_levels": str(base / "cog_levels_mapping_file.pkl"),
              "num_levels": 5, "concepts_per_level": 3}
    if published:
        levels["published_splits"] = str(base / "cog_concepts_split_file.pkl")
    return {
        "mode": "imagenet",
        # jobs fork from one process that imported torch (on for the demo; a real run's jobs work
        # for minutes): what they compute is a cold job's (tests/test_warm_start.py), and what this
        # world proves is the readers, not how a job starts
        "warm_start": "always",
        "datasets": DATASETS,
        "concepts": {"in1k_synsets": str(base / "in1k_synsets.txt")},
        "levels": levels,
        "data": {"in21k_root": str(in21k_root), "in1k_root": str(in1k_root), "in21k_release": "winter21"},
        "splits": {"test_per_concept": 2, "max_train_per_concept": 6},
        # the demo's pretrained network and its checkpoints are made in demo mode only
        "models": {"demo_cnn": None, "demo_clip": None, "demo_cnn_training": None},
        "results": {"baseline_model": MODEL},
        "features": {"shard_size": 8},
        "level_sets": {"sets": []},
        "probes": {"seeds": [22], "shots": [1, "all"], "trials": 2, "epochs": 3, "kinds": ["linear"], "val_fraction": 0.4,
                   "other_kinds_shots": None, "other_kinds_seeds": None},
        "balanced": {"enabled": False},
        "in1k_blurred": {"enabled": False},
        "label_audit": {"enabled": False},
        # the fine-tuning control (on in the demo's config) reads the tars too, on every dataset of
        # this world (the demo's two are not all among them): batches this world holds
        "finetune": {"datasets": None, "recipe": {"epochs": 1, "batch_size": 4}},
        "analyses": {"kmeans": {"enabled": False}, "agreement": {"enabled": False},
                     "alignment_uniformity": {"enabled": False}, "learnability": {"enabled": False},
                     "raters": {"enabled": False},
                     # the demo's lists name the demo_cnn this run leaves out
                     # the per-concept curve reads each image's concept from its path; its interval
                     # needs no more draws here than the schema's fewest
                     "detection": {"models": None}, "concepts": {"models": None, "resamples": 100},
                     # the demo's captioning of L1 reads the tars too; no k-means clusters to describe
                     "captions": {"clusters": False}},
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    """The same images as the release's tars and extracted; the levels and splits pickles."""
    base = tmp_path_factory.mktemp("imagenet")
    in21k = synset_images([wnid for level in LEVELS[:2] for wnid in level], IMAGES_PER_SYNSET, seed=3, size=40)
    # synsets no run here needs, as the release holds thousands
    others = synset_images(["n09999991", "n09999992"], 2, seed=4, size=40)
    train, val = synset_images(IN1K, TRAIN_PER_CLASS, seed=5, size=40), synset_images(IN1K, VAL_PER_CLASS, seed=6, size=40)
    write_lines(base / "in1k_synsets.txt", IN1K)
    (base / "cog_levels_mapping_file.pkl").write_bytes(pickle.dumps(LEVELS))
    (base / "cog_concepts_split_file.pkl").write_bytes(pickle.dumps(published_splits(in21k)))
    return {
        "base": base, "in21k": in21k,
        "outer_tar": write_outer_tar(base / "winter21_whole.tar", {**in21k, **others}),
        "ilsvrc2012": base / "ilsvrc2012", "labels": write_ilsvrc2012(base / "ilsvrc2012", train, val),
        "in21k_folders": write_folders(base / "in21k_folders", in21k),
        "in1k_folders": write_in1k_folders(base / "in1k_folders", train, val),
    }


def feature_files(model: str = MODEL) -> list[str]:
    return [LAYOUT.features(model, dataset, split) for dataset in DATASETS for split in ("train", "test")]


def reader_targets(datasets: list[str]) -> list[str]:
    """What a world proves, as targets: every job that reads its images (index, splits,
    extraction, fine-tuning, captioning) and the probes' summary and tables over them, and the
    per-concept curve, which reads each image's concept from its path. Not the figures, the
    statistics or detection: they read only tables and features, as in the demo, which runs them."""
    return [LAYOUT.results_summary(), "result_tables", "concept_results", LAYOUT.captions("coca-demo", "l1"),
            *(LAYOUT.finetune_result(MODEL, dataset) for dataset in datasets)]


@pytest.fixture(scope="module")
def tars_run(world, tmp_path_factory) -> Path:
    workdir = copy_workflow(tmp_path_factory.mktemp("tars") / "workflow-copy")
    (workdir / "tars.yaml").write_text(yaml.safe_dump(run_config(world["base"], world["outer_tar"], world["ilsvrc2012"])))
    snakemake(workdir, *reader_targets(DATASETS), "--cores", "2", "--configfile", "tars.yaml")
    return workdir


def finetuned_on_every_test_image(workdir: Path, datasets: list[str]) -> bool:
    """Whether the fine-tuning control ran on every dataset, testing every test image."""
    for dataset in datasets:
        result = json.loads((workdir / LAYOUT.finetune_result(MODEL, dataset)).read_text())
        rows = read_tsv(workdir / LAYOUT.image_splits(dataset))
        if result["test_images"] != sum(row["split"] == "test" for row in rows) or result["test_undecodable"]:
            return False
    return True


def test_the_workflow_runs_to_its_tables_on_the_release_tars(tars_run, world):
    assert (tars_run / LAYOUT.results_summary()).is_file()
    assert finetuned_on_every_test_image(tars_run, DATASETS)
    for source in ("in21k", "in1k"):
        assert (tars_run / f"results/images/{source}.index.h5").is_file()
    preflight = read_tsv(tars_run / "results/splits/preflight.tsv")
    assert {row["status"] for row in preflight} == {"ok"} and len(preflight) == len(IN1K) + 6
    # the published split, member by member of the outer tar
    level = read_tsv(tars_run / LAYOUT.image_splits("l1"))
    wnid = LEVELS[0][0]
    names = sorted(world["in21k"][wnid])
    assert [row["path"] for row in level if row["wnid"] == wnid and row["split"] == "test"] == [
        f"winter21_whole/{wnid}.tar/{name}" for name in names[:2]]
    # IN-1K's validation images from the flat tar, labelled by the devkit
    in1k = read_tsv(tars_run / LAYOUT.image_splits("in1k"))
    test = {row["path"].split("/", 1)[1]: row["wnid"] for row in in1k if row["split"] == "test"}
    assert test == world["labels"]
    assert all(row["path"].startswith(f"ILSVRC2012_img_train.tar/{row['wnid']}.tar/") for row in in1k if row["split"] == "train")
    with h5py.File(tars_run / LAYOUT.features(MODEL, "l1", "test"), "r") as handle:
        assert list(handle["path"].asstr()[:2]) == [f"winter21_whole/{wnid}.tar/{name}" for name in names[:2]]
        assert handle.attrs["image_layout"] == "tar" and handle.attrs["image_root"] == str(world["outer_tar"])
    # the demo's captioning of L1 (analyses.captions) reads the same members of the outer tar
    captions = read_tsv(tars_run / LAYOUT.captions("coca-demo", "l1"))
    assert {row["path"] for row in captions} == {row["path"] for row in level if row["split"] == "test"}
    assert concept_wnids(tars_run) == {(dataset, wnid) for dataset in ("l1", "l2") for wnid in LEVELS[int(dataset[1]) - 1]}


def concept_wnids(workdir: Path) -> set[tuple[str, str]]:
    """(dataset, wnid) of the per-concept table: each image's concept read from its path."""
    with open(workdir / LAYOUT.table("concepts", "csv")) as table:
        return {(row["dataset"], row["wnid"]) for row in csv.DictReader(table)}


def test_the_free_space_estimate_covers_what_the_run_takes_on_its_disk(tars_run, tmp_path):
    """The estimate of the whole run (plan/footprint.py, with this world's sizes: its split
    summary, made here from its tables) against what the run of the readers' targets left, as a
    disk of 4 kB blocks counts it: 42 MB, 40.6 MB of it the levels stage's (WordNet's corpus)."""
    summary = tmp_path / "summary.tsv"
    split_summary([*(f"--table={dataset}={tars_run / LAYOUT.image_splits(dataset)}" for dataset in DATASETS),
                   "--output", str(summary)])
    estimate, taken = estimate_and_disk(tars_run, "--configfile", "tars.yaml", split_summary=summary)
    assert taken <= estimate <= 1.25 * taken, (estimate, taken)


def test_features_from_the_tars_equal_those_from_the_same_images_in_folders(tars_run, world, tmp_path):
    workdir = copy_workflow(tmp_path / "workflow-copy")
    (workdir / "folders.yaml").write_text(
        yaml.safe_dump(run_config(world["base"], world["in21k_folders"], world["in1k_folders"])))
    snakemake(workdir, *feature_files(), "--cores", "2", "--configfile", "folders.yaml")
    for path in feature_files():
        with h5py.File(tars_run / path, "r") as tars, h5py.File(workdir / path, "r") as folders:
            assert np.array_equal(tars["features"][...], folders["features"][...]), path
            assert np.array_equal(tars["labels"][...], folders["labels"][...]), path
            assert tars["valid"][...].all() and folders["valid"][...].all()
            names = [[value.rsplit("/", 1)[1] for value in handle["path"].asstr()[...]] for handle in (tars, folders)]
            assert names[0] == names[1], path
            assert folders.attrs["image_layout"] == "folders"


def test_preflight_names_every_missing_concept_then_the_outdated_index(world, tmp_path):
    """A folder of synset tars lacking one concept of each probed level: one error before
    any split; the tars added: the index named as out of date; rebuilt: the run goes on, and
    the image an interrupted download cut is flagged invalid, its archive and member named."""
    missing = [LEVELS[0][1], LEVELS[1][2]]
    tars = world["base"] / "winter21_whole"
    write_synset_tars(tars, {wnid: files for wnid, files in world["in21k"].items() if wnid not in missing})
    cut = LEVELS[0][0]
    whole = tar_bytes(world["in21k"][cut])
    last_name = sorted(world["in21k"][cut])[-1]
    (tars / f"{cut}.tar").write_bytes(whole[: whole.rindex(world["in21k"][cut][last_name][:64]) + 100])
    workdir = copy_workflow(tmp_path / "workflow-copy")
    config = run_config(world["base"], tars, world["ilsvrc2012"], published=False)
    config["data"]["max_undecodable_fraction"] = 0.5  # the cut image is left out, not the shard
    (workdir / "tars.yaml").write_text(yaml.safe_dump(config))
    targets = [LAYOUT.features(MODEL, dataset, split) for dataset in ("l1", "l2") for split in ("train", "test")]

    failed = snakemake(workdir, *targets, "--cores", "2", "--configfile", "tars.yaml", check=False)
    assert failed.returncode != 0
    log = (workdir / LAYOUT.log("splits/preflight.log")).read_text()
    assert log.count("error:") == 1 and "2 concepts missing from your copy" in log
    assert f"in {LAYOUT.needed_synset_tars()})" in log  # the tar list's real place
    for wnid, level in zip(missing, ("l1", "l2")):
        assert f"  {wnid} ({level}); Fall 2011: " in log
    assert not (workdir / "results/splits/l1.tsv").exists() and not (workdir / LAYOUT.log("features")).exists()

    write_synset_tars(tars, {wnid: world["in21k"][wnid] for wnid in missing})
    stale = snakemake(workdir, *targets, "--cores", "2", "--configfile", "tars.yaml", check=False)
    assert stale.returncode != 0
    log = (workdir / LAYOUT.log("splits/preflight.log")).read_text()
    assert "2 tars added" in log and "Delete results/images/in21k.index.h5 and re-run" in log

    os.remove(workdir / "results/images/in21k.index.h5")
    snakemake(workdir, *targets, "--cores", "2", "--configfile", "tars.yaml")
    rows = read_tsv(workdir / LAYOUT.image_splits("l1"))
    cut_path = f"{cut}.tar/{last_name}"
    assert cut_path in [row["path"] for row in rows]
    split = next(row["split"] for row in rows if row["path"] == cut_path)
    with h5py.File(workdir / LAYOUT.features(MODEL, "l1", split), "r") as handle:
        paths = list(handle["path"].asstr()[...])
        assert not handle["valid"][paths.index(cut_path)] and handle["valid"][...].sum() == len(paths) - 1
    logs = "".join(path.read_text() for path in (workdir / LAYOUT.log("features") / MODEL / "l1" / split).glob("shard-*.log"))
    assert f"{tars / f'{cut}.tar'} member {last_name}" in logs


def test_a_corrupt_index_stops_the_job_reading_it_and_keeps_the_rest(tars_run, world, tmp_path):
    workdir = Path(shutil.copytree(tars_run, tmp_path / "copy", symlinks=True, copy_function=shutil.copy2))
    index = workdir / "results/images/in21k.index.h5"
    shard = workdir / LAYOUT.feature_shard(MODEL, "l2", "test", "00000")
    with h5py.File(shard, "r") as handle:
        first = handle["path"].asstr()[0]
    with h5py.File(index, "r+") as handle:
        folders = list(handle["folders/path"].asstr()[...])
        folder = folders.index(first.rsplit("/", 1)[0])
        start = int(handle["folders/start"][folder])
        names = [name.decode() for name in handle["members/name"][start:start + int(handle["folders/count"][folder])]]
        row = start + names.index(first.rsplit("/", 1)[1])
        handle["members/offset"][row] += 512
    kept = {path: path.stat().st_mtime_ns for path in (workdir / "results/features").rglob("shard-*.h5") if path != shard}
    os.remove(shard)
    # the lost shard by name: a missing intermediate file whose merge is up to date is not made again
    failed = snakemake(workdir, str(shard.relative_to(workdir)), *reader_targets(DATASETS), "--cores", "2",
                       "--configfile", "tars.yaml", check=False)
    assert failed.returncode != 0
    log = (workdir / LAYOUT.log(f"features/{MODEL}/l2/test/shard-00000.log")).read_text()
    assert "image index results/images/in21k.index.h5" in log and f"{first} should be {first.rsplit('/', 1)[1]}" in log
    assert str(world["outer_tar"]) in log and "Delete results/images/in21k.index.h5 and re-run" in log
    assert {path: path.stat().st_mtime_ns for path in kept} == kept
    assert (workdir / LAYOUT.results_summary()).is_file()


def test_config_imagenet_yaml_is_valid_and_plans_a_run(world, tmp_path):
    workdir = copy_workflow(tmp_path / "workflow-copy")
    shutil.copytree(Path(__file__).resolve().parents[1] / "config", workdir / "config")
    (workdir / "here.yaml").write_text(yaml.safe_dump(
        {"data": {"in21k_root": str(world["outer_tar"]), "in1k_root": str(world["ilsvrc2012"])}}))
    plan = snakemake(workdir, "-n", "--cores", "8", "--configfile", "config/imagenet.yaml", "here.yaml")
    for rule in ("index_images", "cut_levels", "preflight"):
        assert f"rule {rule}:" in plan.stdout, rule
    plan = snakemake(workdir, "needed_synsets", "-n", "--cores", "1", "--configfile", "config/imagenet.yaml", "here.yaml")
    assert "rule needed_synsets:" in plan.stdout and "rule index_images:" not in plan.stdout
    # before the download: the IN-21K root an empty folder the listed tars will go to
    (tmp_path / "to-fill").mkdir()
    (workdir / "empty.yaml").write_text(yaml.safe_dump({"data": {"in21k_root": str(tmp_path / "to-fill")}}))
    plan = snakemake(workdir, "needed_synsets", "-n", "--cores", "1", "--configfile", "config/imagenet.yaml", "here.yaml",
                     "empty.yaml")
    assert "rule needed_synsets:" in plan.stdout and "rule index_images:" not in plan.stdout


def test_counting_a_winter21_copy_keeps_the_shipped_counts_unless_insisted(world, tmp_path):
    """The levels must not silently change on Winter 2021: count_images_from_root true keeps
    the shipped Fall 2011 counts there; insist counts folders, and a tar layout cannot be counted."""
    workdir = copy_workflow(tmp_path / "workflow-copy")
    config = run_config(world["base"], world["in21k_folders"], world["in1k_folders"], published=False)
    config["levels"] = {"source": "wordnet"}
    for setting, expected in ((True, "--counts"), ("insist", "--count-root")):
        config["data"]["count_images_from_root"] = setting
        (workdir / "count.yaml").write_text(yaml.safe_dump(config))
        plan = snakemake(workdir, LAYOUT.image_counts(), "-n", "-p", "--cores", "1", "--configfile", "count.yaml")
        assert expected in plan.stdout, setting
        assert ("shipped Fall 2011 counts are used" in plan.stdout + plan.stderr) == (setting is True)
    config["data"]["in21k_root"] = str(world["outer_tar"])
    (workdir / "count.yaml").write_text(yaml.safe_dump(config))
    refused = snakemake(workdir, LAYOUT.image_counts(), "-n", "--cores", "1", "--configfile", "count.yaml", check=False)
    assert refused.returncode != 0
    assert "counts synset folders, but data.in21k_root is in the tar layout" in refused.stdout + refused.stderr
