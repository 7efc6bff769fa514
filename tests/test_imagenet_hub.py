"""End to end on ImageNet as the Hugging Face Hub serves it: IN-21K from a copy shaped as
``timm/imagenet-22k-wds`` (training and validation webdataset shards, samples shuffled across
them, ``class_name`` json, ``_info.json``), IN-1K from one shaped as ``ILSVRC/imagenet-1k``
(parquet files in ``data/``).

* the workflow runs to its tables, the authors' published splits matched image by image,
  the release known to be Fall 2011 and every shard named as needed;
* the features equal, bit for bit, those extracted from the same images in folders;
* an ``_info.json`` that disagrees with the shards stops the index, naming both, and keeps
  everything finished.
"""

from __future__ import annotations

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
    val_set,
    write_folders,
    write_in1k_folders,
    write_info,
    write_parquet_files,
    write_wds_shards,
)
from test_imagenet_tars import (
    IN1K,
    LEVELS,
    MODEL,
    concept_wnids,
    finetuned_on_every_test_image,
    published_splits,
    reader_targets,
    run_config,
)

from conftest import copy_workflow, snakemake
from imagenet_cog.core.io import read_lines, read_tsv, write_lines
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.shards import class_list

pytestmark = pytest.mark.e2e

LAYOUT = Layout()
IMAGES_PER_SYNSET, VALIDATION_PER_SYNSET = 8, 2
TRAIN_PER_CLASS, VAL_PER_CLASS = 3, 2
# what the second run (folders) extracts to compare
COMPARED = [("l1", "test"), ("in1k", "test")]
# one level is enough here: the tars' test runs two
DATASETS = ["in1k", "l1"]


def by_class(names: dict[str, str], files: dict[str, bytes]) -> dict[str, dict[str, bytes]]:
    images: dict[str, dict[str, bytes]] = {}
    for name, wnid in names.items():
        images.setdefault(wnid, {})[name] = files[name]
    return images


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> dict:
    """The same images as the Hub's copies and extracted; the levels and splits pickles."""
    base = tmp_path_factory.mktemp("hub")
    in21k = synset_images(LEVELS[0], IMAGES_PER_SYNSET, seed=3, size=40)
    # the 22k copy's validation shards hold some images of each concept, the training shards the rest
    held_out = {wnid: dict(sorted(files.items())[-VALIDATION_PER_SYNSET:]) for wnid, files in in21k.items()}
    kept = {wnid: {name: data for name, data in files.items() if name not in held_out[wnid]} for wnid, files in in21k.items()}
    classes = class_list("imagenet22k")
    wds = base / "imagenet-22k-wds"
    lengths = {"train": write_wds_shards(wds, "imagenet22k", "train", kept, 3, classes=classes),
               "validation": write_wds_shards(wds, "imagenet22k", "validation", held_out, 2, classes=classes, seed=1)}
    write_info(wds, lengths)
    train, val = synset_images(IN1K, TRAIN_PER_CLASS, seed=5, size=40), synset_images(IN1K, VAL_PER_CLASS, seed=6, size=40)
    labels, val_files = val_set(val)
    parquet = base / "imagenet-1k"
    write_parquet_files(parquet, "train", train, 2, class_list("imagenet"))
    write_parquet_files(parquet, "validation", by_class(labels, val_files), 1, class_list("imagenet"))
    write_lines(base / "in1k_synsets.txt", IN1K)
    (base / "cog_levels_mapping_file.pkl").write_bytes(pickle.dumps(LEVELS))
    (base / "cog_concepts_split_file.pkl").write_bytes(pickle.dumps(published_splits(in21k)))
    return {"base": base, "in21k": in21k, "wds": wds, "parquet": parquet, "labels": labels, "lengths": lengths,
            "in21k_folders": write_folders(base / "in21k_folders", in21k),
            "in1k_folders": write_in1k_folders(base / "in1k_folders", train, val)}


def hub_config(hub: dict, in21k_root: Path, in1k_root: Path) -> dict:
    config = run_config(hub["base"], in21k_root, in1k_root)
    config["data"]["in21k_release"] = "auto"
    config["datasets"] = DATASETS
    return config


@pytest.fixture(scope="module")
def hub_run(hub, tmp_path_factory) -> Path:
    workdir = copy_workflow(tmp_path_factory.mktemp("hub") / "workflow-copy")
    (workdir / "hub.yaml").write_text(yaml.safe_dump(hub_config(hub, hub["wds"], hub["parquet"])))
    snakemake(workdir, *reader_targets(DATASETS), "needed_synsets", "--cores", "2", "--configfile", "hub.yaml")
    return workdir


def test_the_workflow_runs_to_its_tables_on_the_hub_copies(hub_run, hub):
    assert (hub_run / LAYOUT.results_summary()).is_file()
    assert finetuned_on_every_test_image(hub_run, DATASETS)
    preflight = read_tsv(hub_run / "results/splits/preflight.tsv")
    assert {row["status"] for row in preflight} == {"ok"} and len(preflight) == len(IN1K) + 3
    log = (hub_run / LAYOUT.log("splits/preflight.log")).read_text()
    assert "(layout wds) holds" in log and f"(layout parquet) holds {len(IN1K) * TRAIN_PER_CLASS} training and" in log
    # the published split, image by image, named as in an extracted copy
    wnid = LEVELS[0][0]
    names = sorted(hub["in21k"][wnid])
    level = read_tsv(hub_run / LAYOUT.image_splits("l1"))
    assert [row["path"] for row in level if row["wnid"] == wnid and row["split"] == "test"] == [
        f"{wnid}/{name}" for name in names[:2]]
    in1k = read_tsv(hub_run / LAYOUT.image_splits("in1k"))
    test = {row["path"]: row["wnid"] for row in in1k if row["split"] == "test"}
    assert test == {f"val/{wnid}/{name}": wnid for name, wnid in hub["labels"].items()}
    with h5py.File(hub_run / LAYOUT.features(MODEL, "in1k", "test"), "r") as handle:
        assert handle.attrs["image_layout"] == "parquet" and handle["valid"][...].all()
    # the copy is Fall 2011, and every shard is needed
    assert read_lines(hub_run / "results/splits/needed_synsets.txt") == sorted(
        name for lengths in hub["lengths"].values() for name in lengths)
    needed = (hub_run / LAYOUT.log("splits/needed_synsets.log")).read_text()
    assert "of Fall 2011" in needed and "all 5 training and validation shards are needed" in needed
    assert concept_wnids(hub_run) == {("l1", wnid) for wnid in LEVELS[0]}


def test_features_from_the_hub_copies_equal_those_from_the_same_images_in_folders(hub_run, hub, tmp_path):
    workdir = copy_workflow(tmp_path / "workflow-copy")
    (workdir / "folders.yaml").write_text(yaml.safe_dump(hub_config(hub, hub["in21k_folders"], hub["in1k_folders"])))
    targets = [LAYOUT.features(MODEL, dataset, split) for dataset, split in COMPARED]
    snakemake(workdir, *targets, "--cores", "2", "--configfile", "folders.yaml")
    for path in targets:
        with h5py.File(hub_run / path, "r") as shards, h5py.File(workdir / path, "r") as folders:
            assert np.array_equal(shards["features"][...], folders["features"][...]), path
            assert np.array_equal(shards["labels"][...], folders["labels"][...]), path
            assert shards["valid"][...].all() and folders["valid"][...].all()
            # the original file names, as an extracted copy has them
            assert list(shards["path"].asstr()[...]) == list(folders["path"].asstr()[...]), path


def test_an_info_json_that_disagrees_with_the_shards_stops_the_index_and_keeps_the_rest(hub_run, hub, tmp_path):
    workdir = Path(shutil.copytree(hub_run, tmp_path / "copy", symlinks=True, copy_function=shutil.copy2))
    kept = {path: path.stat().st_mtime_ns for path in (workdir / "results").rglob("*.h5") if "images" not in path.parts}
    os.remove(workdir / "results/images/in21k.index.h5")
    info = hub["wds"] / "_info.json"
    original = info.read_text()
    lengths = {split: dict(files) for split, files in hub["lengths"].items()}
    first = sorted(lengths["train"])[0]
    lengths["train"][first] += 1
    lengths["validation"].pop(sorted(lengths["validation"])[-1])
    try:
        write_info(hub["wds"], lengths)
        failed = snakemake(workdir, "results/images/in21k.index.h5", "--cores", "2", "--configfile", "hub.yaml",
                           check=False)
    finally:
        info.write_text(original)
    assert failed.returncode != 0
    log = (workdir / LAYOUT.log("splits/index-in21k.log")).read_text()
    assert f"{info} disagrees with the shards" in log
    assert "1 shards in the root are not listed (first: imagenet22k-validation-0001.tar)" in log
    assert f"(first: {first}, {hub['lengths']['train'][first]} samples, {hub['lengths']['train'][first] + 1} listed)" in log
    assert not (workdir / "results/images/in21k.index.h5").exists()
    assert {path: path.stat().st_mtime_ns for path in kept} == kept
