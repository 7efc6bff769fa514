"""The pre-flight check names, in one error, every concept of a run the copy lacks or has too
few images of; the needed synsets come from the levels alone."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
from imagenet_world import synset_images, write_ilsvrc2012, write_synset_tars

from imagenet_cog.core.io import read_lines, read_tsv, write_lines, write_tsv

LEVEL = ["n01530575", "n01531178", "n01532829"]
POOL = ["n02084071", "n02085620"]
IN1K = ["n01440764", "n01443537"]


def run(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagenet_cog", *arguments], capture_output=True, text=True)


@pytest.fixture()
def world(tmp_path):
    """A Winter 2021-like copy lacking one level concept and one pool concept, one level
    concept with too few images, and an IN-1K class without validation images."""
    counts = {"n01530575": 9, "n01531178": 3, "n02085620": 9}  # n01532829 and n02084071 absent
    write_synset_tars(tmp_path / "winter21_whole", synset_images(list(counts), counts))
    train = synset_images(IN1K, 3, seed=1)
    write_ilsvrc2012(tmp_path / "in1k", train, synset_images(IN1K[:1], 2, seed=2))
    for dataset, wnids in (("l1", LEVEL), ("pool", POOL), ("in1k", IN1K)):
        write_lines(tmp_path / f"{dataset}.txt", wnids)
    write_tsv(tmp_path / "fall11.tsv", ["wnid", "n_images"],
              [(wnid, 1300) for wnid in LEVEL + POOL] + [("n01530575", 9)])
    indexes = {}
    for source, root in (("in21k", tmp_path / "winter21_whole"), ("in1k", tmp_path / "in1k")):
        indexes[source] = tmp_path / f"{source}.h5"
        result = run("index-images", "--source", source, "--root", str(root), "--layout", "tars",
                     "--output", str(indexes[source]))
        assert result.returncode == 0, result.stderr
    return tmp_path, indexes


def preflight(tmp_path, indexes, *extra: str, datasets=("l1", "pool", "in1k")) -> subprocess.CompletedProcess:
    return run(
        "preflight", *(f"--dataset={dataset}={tmp_path / f'{dataset}.txt'}" for dataset in datasets),
        f"--root=in21k={tmp_path / 'winter21_whole'}", f"--root=in1k={tmp_path / 'in1k'}",
        "--layout=in21k=tars", "--layout=in1k=tars",
        f"--index=in21k={indexes['in21k']}", f"--index=in1k={indexes['in1k']}",
        "--test-per-concept", "4", "--max-train-per-concept", "10", "--fall11-counts", str(tmp_path / "fall11.tsv"),
        "--release", "winter21", "--output", str(tmp_path / "preflight.tsv"), *extra,
    )


def test_every_missing_or_short_concept_is_named_in_one_error(world):
    tmp_path, indexes = world
    result = preflight(tmp_path, indexes, "--balanced-train", "3", "--balanced-datasets", "l1", "in1k")
    assert result.returncode == 1
    message = result.stderr
    assert message.count("error:") == 1
    assert "nothing was deleted or run" in message
    assert "2 concepts missing from your copy (data.in21k_root = " in message and "release winter21" in message
    assert "  n01532829 (l1); Fall 2011: 1,300 images" in message
    assert "  n02084071 (pool); Fall 2011: 1,300 images" in message
    # 3 images: 4 test + 3 balanced training images needed; the IN-1K class lacks validation images
    assert "1 concept with fewer images than their split needs (data.in21k_root" in message
    assert "  n01531178 (l1): 3 images, 7 needed (4 test + 3 training); Fall 2011: 1,300 images" in message
    assert "  n01443537 (in1k): 3 training and 0 validation images, 3 training and 1 validation needed" in message
    assert "needed_synsets" in message
    assert not (tmp_path / "preflight.tsv").exists()


def test_a_copy_that_fits_writes_the_report(world):
    tmp_path, indexes = world
    write_lines(tmp_path / "l1.txt", ["n01530575"])
    write_lines(tmp_path / "pool.txt", ["n02085620"])
    write_lines(tmp_path / "in1k.txt", ["n01440764"])
    result = preflight(tmp_path, indexes)
    assert result.returncode == 0, result.stderr
    rows = {(row["dataset"], row["wnid"]): row for row in read_tsv(tmp_path / "preflight.tsv")}
    assert rows["l1", "n01530575"] == {"dataset": "l1", "wnid": "n01530575", "images": "9", "val_images": "",
                                       "needed": "5", "fall11_images": "9", "status": "ok", "detail": ""}
    assert rows["in1k", "n01440764"]["val_images"] == "2"
    assert "1 level or pool concepts have another number of images than in Fall 2011 (e.g. n02085620: 9 vs 1300)" in result.stdout


def test_published_splits_are_checked_image_by_image(world):
    tmp_path, indexes = world
    write_lines(tmp_path / "l1.txt", ["n01530575"])
    published = {"n01530575": {"train": [f"/n01530575/n01530575_{k}.JPEG" for k in (1, 2, 11)],
                               "test": ["n01530575_3.JPEG"]}}
    (tmp_path / "splits.pkl").write_bytes(pickle.dumps(published))
    result = preflight(tmp_path, indexes, "--published-splits", str(tmp_path / "splits.pkl"), "--published-datasets", "l1",
                       datasets=("l1",))
    assert result.returncode == 1
    assert "n01530575 (l1): 9 images; 1 of the 4 images of the published split absent (e.g. n01530575_11.JPEG)" in result.stderr


def test_an_index_older_than_its_folder_of_tars_is_named(world):
    tmp_path, indexes = world
    write_synset_tars(tmp_path / "winter21_whole", synset_images(["n01532829"], 9))
    result = preflight(tmp_path, indexes)
    assert result.returncode == 1
    assert "no longer describes data.in21k_root" in result.stderr and "1 tars added (n01532829.tar)" in result.stderr
    assert f"Delete {indexes['in21k']} and re-run" in result.stderr


def test_needed_synsets_come_from_the_levels_alone(tmp_path):
    write_lines(tmp_path / "l1.txt", LEVEL)
    write_lines(tmp_path / "pool.txt", POOL)
    write_tsv(tmp_path / "fall11.tsv", ["wnid", "n_images"], [(wnid, 1000 + n) for n, wnid in enumerate(LEVEL + POOL)])
    write_tsv(tmp_path / "concepts.tsv", ["wnid", "name", "gloss", "in21k", "in1k"],
              [(wnid, f"name {wnid}", "", 1, 0) for wnid in LEVEL + POOL])
    result = run("needed-synsets", f"--dataset=l1={tmp_path / 'l1.txt'}", f"--dataset=pool={tmp_path / 'pool.txt'}",
                 "--catalogue", str(tmp_path / "concepts.tsv"), "--fall11-counts", str(tmp_path / "fall11.tsv"),
                 "--table", str(tmp_path / "needed.tsv"), "--list", str(tmp_path / "needed.txt"))
    assert result.returncode == 0, result.stderr
    assert read_lines(tmp_path / "needed.txt") == [f"{wnid}.tar" for wnid in sorted(LEVEL + POOL)]
    rows = read_tsv(tmp_path / "needed.tsv")
    assert rows[0] == {"wnid": "n01530575", "name": "name n01530575", "tar": "n01530575.tar", "fall11_images": "1000",
                       "datasets": "l1"}
    assert "5 of the 19,167 synsets of Winter 2021 (l1: 3, pool: 2), 5,010 images (Fall 2011 counts)" in result.stdout
