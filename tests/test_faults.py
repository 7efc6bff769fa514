"""Faults: each ends with a message naming the cause and the fix, and loses no finished result.

Unit level where the fault lives in one function (bad images, a full disk, files cut short);
workflow level where Snakemake's part matters (a config rejected before any job starts, a
job killed mid-way and the re-run that follows). Faults the stage tests already cover
(corrupt JPEG headers, images or synset folders missing, a wrong ImageNet root, checkpoint
keys that do not fit) are not repeated here.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from conftest import copy_workflow, snakemake
from imagenet_cog.aggregate import read_probe_result
from imagenet_cog.features import merge_shards, read_features, write_shard
from imagenet_cog.io import write_tsv
from imagenet_cog.layout import Layout
from test_features import extract, make_world, tiny  # noqa: F401  (tiny is a fixture)
from test_staleness import planned_jobs

# What h5py raises when HDF5 cannot write (measured on a full 256 KB tmpfs): a RuntimeError
# carrying the C library's errno text, not an OSError.
H5PY_DISK_FULL = (
    "Can't decrement id ref count (file write failed: time = Sun Nov 22 04:34:05 2026, "
    "filename = '.shard-00000.h5.partial', file descriptor = 3, errno = 28, "
    "error message = 'No space left on device', buf = 0x1, total write size = 32768)"
)


def small_shard(path: Path, rows: int = 64) -> Path:
    write_shard(path, np.ones((rows, 8), np.float16), list(range(rows)), list(range(rows)),
                [f"n0/{row}.JPEG" for row in range(rows)], [True] * rows,
                {"model": "m", "weights": "random", "dataset": "l1", "split": "train"})
    return path


def cut_short(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as stream:
        stream.truncate(size // 2)


# bad images ---------------------------------------------------------------------------------


def test_zero_byte_and_truncated_images_are_recorded_invalid(tmp_path, tiny, caplog):  # noqa: F811
    empty, truncated = "n00000000/n00000000_1.JPEG", "n00000002/n00000002_3.JPEG"
    table = make_world(tmp_path)
    (tmp_path / "images" / empty).write_bytes(b"")
    whole = (tmp_path / "images" / truncated).read_bytes()
    (tmp_path / "images" / truncated).write_bytes(whole[: len(whole) // 3])
    shard = tmp_path / "shard.h5"
    with caplog.at_level("WARNING"):
        extract(tiny, table, shard)
    for name in (empty, truncated):
        assert f"cannot decode {tmp_path / 'images' / name}" in caplog.text
    with h5py.File(shard) as handle:
        paths = list(handle["path"].asstr()[...])
        valid = handle["valid"][...]
        assert {paths[row] for row in np.flatnonzero(~valid)} == {empty, truncated}
        assert handle["features"][np.flatnonzero(valid)].any(axis=1).all()
    kept = read_features(shard)
    assert len(kept.labels) == len(paths) - 2 and sorted(kept.invalid_paths) == sorted([empty, truncated])


# a full disk --------------------------------------------------------------------------------


@pytest.mark.parametrize("failure", [
    RuntimeError(H5PY_DISK_FULL),
    OSError(errno.ENOSPC, "No space left on device"),
])
def test_full_disk_while_writing_a_shard_says_so_and_leaves_nothing(tmp_path, monkeypatch, failure):
    create_dataset = h5py.Group.create_dataset

    def fill_disk(self, name, *args, **kwargs):
        if name == "valid":  # features, labels and index are already in the file
            raise failure
        return create_dataset(self, name, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", fill_disk)
    shard = tmp_path / "features" / "shard-00000.h5"
    with pytest.raises(OSError) as raised:
        small_shard(shard)
    assert raised.value.errno == errno.ENOSPC
    message = str(raised.value)
    assert "disk is full" in message and str(shard) in message and "re-run" in message
    assert list(shard.parent.iterdir()) == []


def test_full_disk_while_writing_a_table_keeps_the_old_one(tmp_path, monkeypatch):
    table = tmp_path / "summary.tsv"
    write_tsv(table, ["model", "top1"], [["resnet50", "71.0"]])
    before = table.read_bytes()

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(OSError, match="disk is full"):
        write_tsv(table, ["model", "top1"], [["resnet50", "72.0"]])
    assert table.read_bytes() == before
    assert [path.name for path in tmp_path.iterdir()] == ["summary.tsv"]


# files cut short (a crash during a copy, a full disk outside the workflow) ----------------------


def test_truncated_shard_is_named_when_merging(tmp_path):
    good, broken = small_shard(tmp_path / "shard-00000.h5"), small_shard(tmp_path / "shard-00001.h5")
    cut_short(broken)
    with pytest.raises(ValueError) as raised:
        merge_shards([good, broken], tmp_path / "train.h5")
    message = str(raised.value)
    assert str(broken) in message and "delete it and re-run" in message
    assert not (tmp_path / "train.h5").exists()


def test_zero_byte_feature_file_is_named_when_read(tmp_path):
    empty = tmp_path / "train.h5"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"train\.h5: not a readable HDF5 file .*delete it and re-run"):
        read_features(empty)


def test_truncated_shard_behind_a_merged_file_is_named_not_read_as_zeros(tmp_path):
    shards = [small_shard(tmp_path / f"shard-{index:05d}.h5") for index in range(2)]
    merged = tmp_path / "train.h5"
    merge_shards(shards, merged)
    cut_short(shards[1])
    with pytest.raises(ValueError) as raised:
        read_features(merged)
    assert str(shards[1]) in str(raised.value) and "delete it and re-run" in str(raised.value)


@pytest.mark.parametrize("content", ["", '{"test_top1": 71.2, "val_top1": '])
def test_truncated_probe_result_is_named_by_the_summary(tmp_path, content):
    result = tmp_path / "seed-22.json"
    result.write_text(content)
    with pytest.raises(ValueError) as raised:
        read_probe_result(result)
    assert str(result) in str(raised.value) and "delete it and re-run its probe job" in str(raised.value)


# a bad config: rejected before any job starts -----------------------------------------------------


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("faults") / "workflow-copy")


@pytest.mark.parametrize("settings, named", [
    ({"features": {"shard_size": "large"}}, "shard_size"),
    ({"features": {"shard_size": 0}}, "shard_size"),
    ({"probes": {"trials": -3}}, "trials"),
    ({"probes": {"shots": [1, "many"]}}, "shots"),
    ({"datasets": ["in1k", "l9x"]}, "datasets"),
    ({"models": {"mystery": {"arch": "resnet5O", "weights": "random"}}}, "resnet5O"),
])
def test_bad_config_is_rejected_before_any_job(fresh_copy, settings, named):
    overlay = fresh_copy / "bad.yaml"
    overlay.write_text(yaml.safe_dump(settings))
    result = snakemake(fresh_copy, "--cores", "1", "--configfile", str(overlay), check=False, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert named in output, output[-3000:]
    assert not (fresh_copy / "results").exists()
    assert "rule " not in result.stdout


# a job killed mid-way -----------------------------------------------------------------------------


def test_killed_extraction_job_leaves_no_shard_and_only_it_reruns(demo_run, tmp_path):
    """The node dies while a shard is extracted (Snakemake and the job killed at once)."""
    layout = Layout()
    workdir = Path(shutil.copytree(demo_run, tmp_path / "copy", symlinks=True, copy_function=shutil.copy2))
    model, dataset, split = "resnet50", "l1", "train"
    shard = workdir / layout.feature_shard(model, dataset, split, "00000")
    reference = read_features(shard)
    shard.unlink()
    log = workdir / "logs" / "features" / model / dataset / split / "shard-00000.log"
    log.unlink(missing_ok=True)
    executable = Path(sys.executable).with_name("snakemake")
    run = subprocess.Popen(
        [str(executable), "--cores", "1", layout.features(model, dataset, split)],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        # The extractor logs the model once built, before the first batch.
        while time.monotonic() < deadline and run.poll() is None:
            if log.exists() and f"model {model}" in log.read_text(errors="replace"):
                break
            time.sleep(0.05)
        assert run.poll() is None, "the run ended before the extraction could be killed"
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
    assert not shard.exists()
    leftovers = [path.name for path in shard.parent.iterdir() if path.name.startswith(".")]
    assert all(name.endswith(".partial") for name in leftovers), leftovers
    # The re-run plans this shard and what reads it, nothing of the finished rest.
    jobs = planned_jobs(workdir, "--rerun-incomplete")
    assert [w for rule, w in jobs if rule == "extract_features"] == [
        {"model": model, "dataset": dataset, "split": split, "shard": "00000"}
    ]
    assert {(w["model"], w["dataset"]) for rule, w in jobs if rule in ("merge_features", "probe")} == {(model, dataset)}
    snakemake(workdir, "--cores", "1", "--rerun-incomplete", layout.features(model, dataset, split))
    redone = read_features(shard)
    np.testing.assert_array_equal(redone.labels, reference.labels)
    np.testing.assert_allclose(redone.features, reference.features, rtol=1e-3, atol=1e-3)


def test_killed_probe_search_resumes_from_its_journal(demo_run, tmp_path):
    """A probe job killed after some trials: the re-run keeps them and runs only the rest."""
    layout = Layout()
    workdir = Path(shutil.copytree(demo_run, tmp_path / "copy", symlinks=True, copy_function=shutil.copy2))
    target = ("resnet50", "l1", "all", "22")
    result, journal = workdir / layout.probe_result(*target), workdir / layout.probe_study(*target)
    result.unlink()
    journal.unlink(missing_ok=True)
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    trials = config["probes"]["trials"]
    # Long epochs make each trial last long enough to kill the job between two of them.
    overlay = workdir / "slow.yaml"
    overlay.write_text(yaml.safe_dump({"probes": {"epochs": 400}}))
    executable = Path(sys.executable).with_name("snakemake")
    command = [str(executable), "--cores", "1", "--configfile", str(overlay), layout.probe_result(*target)]
    run = subprocess.Popen(command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and run.poll() is None and finished_trials(journal) < 1:
            time.sleep(0.05)
        assert run.poll() is None, "the probe ended before it could be killed"
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
    done = finished_trials(journal)
    assert 1 <= done < trials and not result.exists()
    snakemake(workdir, "--cores", "1", "--rerun-incomplete", "--configfile", str(overlay), layout.probe_result(*target))
    payload = json.loads(result.read_text())
    assert payload["n_trials"] == trials
    assert payload["study"]["resumed_trials"] >= done


def finished_trials(journal: Path) -> int:
    """Trials an Optuna journal records as finished (state COMPLETE, PRUNED or FAIL)."""
    if not journal.exists():
        return 0
    finished = 0
    for line in journal.read_text(errors="replace").splitlines():
        try:
            operation = json.loads(line)
        except json.JSONDecodeError:
            continue  # the line being written when the job was killed
        if operation.get("op_code") == 6 and operation.get("state") in (1, 2, 3):
            finished += 1
    return finished
