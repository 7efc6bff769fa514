"""Every shard of a split in one job (features.group: split): the shard files of one job per
shard and their merged view, and a job run again keeps the shards that are current."""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
from test_features import extract, make_world, tiny  # noqa: F401 - the fixture

from imagenet_cog.features.extract import ExtractionOptions, SplitImages, shard_rows
from imagenet_cog.features.extract_split import extract_split, shard_is_current
from imagenet_cog.features.store import read_features

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROW_DATASETS = ("features", "labels", "index", "valid")


def split_job(spec, table, folder, **options):
    images = SplitImages(table, table.parent / "images", "l1", "train")
    return extract_split(spec, images, 4, str(folder / "shard-{shard}.h5"), folder / "train.h5",
                         ExtractionOptions(batch_size=4, device="cpu", **options))


def test_one_job_writes_the_shards_of_one_job_per_shard(tmp_path, tiny):  # noqa: F811
    table = make_world(tmp_path, concepts=3, train=3, test=1)  # 9 training rows: shards of 4, 4 and 1
    attributes = split_job(tiny, table, tmp_path / "split")
    assert attributes["num_shards"] == 3
    for shard in range(3):
        own = tmp_path / "own" / f"shard-{shard:05d}.h5"
        extract(tiny, table, own, shard=shard, shard_size=4)
        with h5py.File(own) as alone, h5py.File(tmp_path / "split" / f"shard-{shard:05d}.h5") as grouped:
            for name in ROW_DATASETS:
                assert alone[name][...].tobytes() == grouped[name][...].tobytes()
            ignored = {"code_version", "host_decoded"}
            assert {k: v for k, v in alone.attrs.items() if k not in ignored} == {
                k: v for k, v in grouped.attrs.items() if k not in ignored}
    merged = read_features(tmp_path / "split" / "train.h5")
    assert merged.features.shape == (9, 6) and merged.labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_run_again_it_keeps_current_shards_and_redoes_the_rest(tmp_path, tiny):  # noqa: F811
    table = make_world(tmp_path, concepts=3, train=3, test=1)
    folder = tmp_path / "split"
    split_job(tiny, table, folder)
    shards = [folder / f"shard-{shard:05d}.h5" for shard in range(3)]
    (folder / "train.h5").unlink()
    shards[1].unlink()  # a killed job left shards 0 and 2
    before = {path: path.stat().st_mtime_ns for path in (shards[0], shards[2])}
    split_job(tiny, table, folder)
    assert all(path.stat().st_mtime_ns == mtime for path, mtime in before.items()), "current shards are kept"
    assert shards[1].is_file() and (folder / "train.h5").is_file()
    # other settings make every shard stale: all are extracted again
    split_job(tiny, table, folder, dtype="float32")
    assert all(path.stat().st_mtime_ns != before[path] for path in before)
    with h5py.File(shards[0]) as handle:
        assert handle["features"].dtype == np.float32


def test_a_shard_is_current_only_with_its_rows_and_settings(tmp_path, tiny):  # noqa: F811
    table = make_world(tmp_path, concepts=2, train=4, test=1)
    folder = tmp_path / "split"
    split_job(tiny, table, folder)
    path = folder / "shard-00000.h5"
    with h5py.File(path) as handle:
        attributes = {key: handle.attrs[key] for key in ("weights", "preprocessing", "dataset", "split", "shard",
                                                          "shard_size", "features_dtype", "extraction_settings")}
    rows = shard_rows(table, "train", 0, 4)
    assert shard_is_current(path, attributes, rows)
    assert not shard_is_current(path, {**attributes, "weights": "random:2"}, rows)
    assert not shard_is_current(path, attributes, shard_rows(table, "train", 1, 4))
    assert not shard_is_current(folder / "missing.h5", attributes, rows)
    path.write_bytes(b"not HDF5")
    assert not shard_is_current(path, attributes, rows)


def test_the_command_extracts_and_merges_a_split(tmp_path, tiny):  # noqa: F811
    table = make_world(tmp_path, concepts=2, train=3, test=1)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "modules"), *sys.path])}
    command = [sys.executable, "-m", "imagenet_cog", "extract-split", "--split-table", str(table), "--image-root",
               str(tmp_path / "images"), "--dataset", "l1", "--split", "train", "--shard-size", "4",
               "--shard-template", str(tmp_path / "out" / "shard-{shard}.h5"), "--model-name", "tiny", "--arch", "custom",
               "--factory", "tiny_backbones:tiny", "--weights", "random:1", "--device", "cpu",
               "--output", str(tmp_path / "out" / "train.h5")]
    subprocess.run(command, check=True, capture_output=True, env=environment, timeout=300)
    assert read_features(tmp_path / "out" / "train.h5").features.shape == (6, 6)
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["shard-00000.h5", "shard-00001.h5", "train.h5"]
    command[command.index("--shard-template") + 1] = str(tmp_path / "out" / "shard.h5")
    failed = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)
    assert failed.returncode == 2 and "must contain {shard}" in failed.stderr
