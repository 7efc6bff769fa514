"""Faults: each ends with a message naming the cause and the fix, and loses no finished result.

Unit level where the fault lives in one function (bad images, a full disk, files cut short);
workflow level where Snakemake's part matters (a config rejected before any job starts, a
whole run killed in the middle of a probe search).
Faults the stage tests already cover (corrupt JPEG headers, images or synset folders
missing, a wrong ImageNet root, checkpoint keys that do not fit, a killed extraction) are
not repeated here.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import torch
import yaml
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState
from PIL import Image
from test_features import extract, tiny  # noqa: F401  (tiny is a fixture)

from conftest import SNAKEMAKE, copy_of_demo, copy_workflow, make_world, snakemake, snakemake_environment
from imagenet_cog import cli
from imagenet_cog.core import failures
from imagenet_cog.core.disks import block_size
from imagenet_cog.core.failures import (
    REASONS_VARIABLE,
    SPARE_BYTES,
    SPARE_PREFIX,
    SPARES,
    ExplainedError,
    full_disk_reason,
    prepare_reasons,
    reason_of,
    reasons_report,
    report_failure,
)
from imagenet_cog.core.io import atomic_output, write_json, write_tsv
from imagenet_cog.core.layout import Layout
from imagenet_cog.features.store import merge_shards, read_features, write_shard
from imagenet_cog.plan.footprint import Files
from imagenet_cog.plan.space import Need, held_on_disk, run_needs, space_problems, ways_on
from imagenet_cog.plan.table import human_bytes
from imagenet_cog.probes.search import DamagedJournalError, open_study
from imagenet_cog.results.summary import read_probe_result

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
        extract(tiny, table, shard, max_undecodable_fraction=0.2)  # 2 of 15 left out, not the shard
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
    assert f"{broken}: not a readable HDF5 file" in message and f"snakemake --cores all --forcerun {broken}" in message
    assert not (tmp_path / "train.h5").exists()


def test_zero_byte_feature_file_is_named_when_read(tmp_path):
    empty = tmp_path / "train.h5"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"train\.h5: not a readable HDF5 file .*--forcerun .*train\.h5"):
        read_features(empty)


def test_truncated_shard_behind_a_merged_file_is_named_not_read_as_zeros(tmp_path):
    shards = [small_shard(tmp_path / f"shard-{index:05d}.h5") for index in range(2)]
    merged = tmp_path / "train.h5"
    merge_shards(shards, merged)
    cut_short(shards[1])
    with pytest.raises(ValueError) as raised:
        read_features(merged)
    assert f"--forcerun {shards[1]}" in str(raised.value)


@pytest.mark.parametrize("content", ["", '{"test_top1": 71.2, "val_top1": '])
def test_truncated_probe_result_is_named_by_the_summary(tmp_path, content):
    result = tmp_path / "seed-22.json"
    result.write_text(content)
    with pytest.raises(ValueError) as raised:
        read_probe_result(result)
    assert f"{result}: not valid JSON" in str(raised.value) and f"--forcerun {result}" in str(raised.value)


# a failed job's reason on the run's screen ------------------------------------------------------


def full_disk_from_atomic_output(path: Path) -> OSError:
    def fill_disk():
        with atomic_output(path):
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as raised:
        fill_disk()
    return raised.value


def test_reasons_are_the_messages_of_errors_raised_on_purpose_and_of_a_full_disk(tmp_path):
    assert reason_of(ExplainedError("x.h5: cut short; rebuild it")) == "x.h5: cut short; rebuild it"
    # a full disk is worded alike for every job it stops (the file it failed on is in the job's log)
    worded = full_disk_from_atomic_output(tmp_path / "table.tsv")
    assert worded.strerror.startswith(f"{tmp_path / 'table.tsv'}: the disk is full")
    assert reason_of(worded).startswith("the disk is full: the filesystem at /") and "re-run Snakemake" in reason_of(worded)
    raw = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "results/logs/x.log")
    assert reason_of(raw) == reason_of(worded)
    assert reason_of(RuntimeError(H5PY_DISK_FULL)) == reason_of(worded)
    try:
        try:
            raise RuntimeError(H5PY_DISK_FULL)
        except RuntimeError as cause:
            raise ValueError("a library's own error") from cause
    except ValueError as wrapped:
        assert reason_of(wrapped) == reason_of(worded)
    assert reason_of(ValueError("an unexpected error")) is None
    assert reason_of(KeyError("features")) is None


def test_a_job_that_fails_on_purpose_writes_its_reason_and_keeps_the_traceback_in_its_log(tmp_path):
    shard = small_shard(tmp_path / "shard-00000.h5")
    cut_short(shard)
    log, reasons = tmp_path / "merge.log", tmp_path / "reasons"
    with open(log, "w") as stream:
        run = subprocess.run([sys.executable, "-m", "imagenet_cog", "merge-shards", "--output", str(tmp_path / "train.h5"),
                              str(shard)], stdout=stream, stderr=subprocess.STDOUT, cwd=tmp_path, timeout=120,
                             env={**snakemake_environment(), REASONS_VARIABLE: str(reasons)})
    assert run.returncode == 1
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "DamagedFileError" in text
    # named as Snakemake names it, from the run's folder
    assert text.rstrip().endswith("--forcerun shard-00000.h5 (on SLURM: --profile slurm in place of --cores all)")
    (written,) = reasons.iterdir()
    entry = json.loads(written.read_text())
    assert entry["log"] == str(log) and entry["reason"].startswith(f"{shard}: not a readable HDF5 file")
    told = reasons_report(reasons)
    assert told.count(entry["reason"]) == 1 and "Traceback" not in told and str(log) in told


def test_a_reason_is_told_once_for_every_job_it_stopped(tmp_path):
    for number, reason in enumerate(["a.h5: cut short", "a.h5: cut short", "b.h5: cut short"]):
        (tmp_path / f"{number}.json").write_text(json.dumps(
            {"reason": reason, "command": "python -m imagenet_cog probe", "log": f"/logs/seed-{number}.log"}))
    told = reasons_report(tmp_path)
    assert told.count("a.h5: cut short") == 1 and told.count("b.h5: cut short") == 1
    assert "(/logs/seed-0.log and 1 other job)" in told and "(/logs/seed-2.log)" in told
    assert reasons_report(tmp_path / "none") == ""


def test_an_unexpected_error_is_raised_as_it_is_and_leaves_no_reason(tmp_path, monkeypatch):
    monkeypatch.setenv(REASONS_VARIABLE, str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "broken-command", "json:loads")
    with pytest.raises(TypeError):
        cli.run(["broken-command"])
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_feature_file_is_told_once_on_the_screen_with_the_command_that_rebuilds_it(demo_run, tmp_path):
    """A finished demo, then a view's test split cut to half (an interrupted copy): the probe
    reading it runs again (the file is newer) and fails; the screen says why, once, and the
    command it gives plans the file's rebuild and what was made from it."""
    workdir = copy_of_demo(demo_run, tmp_path / "copy")
    layout = Layout()
    damaged = layout.features("demo_cnn", "balanced-l1", "test")
    cut_short(workdir / damaged)
    failed = snakemake(workdir, layout.probe_result("demo_cnn", "balanced-l1", "all", "22"), "--cores", "1", check=False)
    screen = failed.stdout + failed.stderr
    assert failed.returncode != 0
    reason = f"{damaged}: not a readable HDF5 file"
    assert screen.count(reason) == 1 and "truncated file" in screen, screen[-3000:]
    assert "Traceback" not in screen and "DamagedFileError" not in screen
    log = workdir / layout.log("probes/demo_cnn/balanced-l1/shots-all/seed-22.log")
    assert "Traceback (most recent call last)" in log.read_text() and reason in log.read_text()
    (command,) = re.findall(r"snakemake --cores all --forcerun \S+", screen)
    assert command == f"snakemake --cores all --forcerun {damaged}"
    planned = snakemake(workdir, *command.split()[1:], "--dry-run").stdout
    for rule in ("balanced_view", "probe", "balanced_results"):
        assert re.search(rf"^{rule}\s+1$", planned, re.MULTILINE), planned


# an Optuna journal cut short ---------------------------------------------------------------------


def finished_trials(journal: Path, count: int) -> None:
    study = open_study(str(journal), "study", 7)
    for number in range(count):
        trial = study.ask({"lr": FloatDistribution(0.1, 10.0, log=True)})
        study.tell(trial, float(number))


def test_a_journal_cut_mid_record_loses_that_record_only(tmp_path, caplog):
    journal = tmp_path / "seed-7.optuna.jsonl"
    finished_trials(journal, 3)
    whole = journal.read_bytes()
    journal.write_bytes(whole[:-20])  # the last trial's result, cut mid-record
    with caplog.at_level("WARNING"):
        study = open_study(str(journal), "study", 7)
    assert "its last record was cut short" in caplog.text
    assert [trial.state for trial in study.trials] == [TrialState.COMPLETE] * 2 + [TrialState.FAIL]
    finished_trials(journal, 1)  # appended after the cut record's place, readable again
    assert len(open_study(str(journal), "study", 7).trials) == 4


def test_a_journal_damaged_in_the_middle_is_named_with_its_removal(tmp_path):
    journal = tmp_path / "seed-7.optuna.jsonl"
    finished_trials(journal, 3)
    lines = journal.read_bytes().split(b"\n")
    lines[2] = lines[2][:15]
    journal.write_bytes(b"\n".join(lines))
    with pytest.raises(DamagedJournalError) as raised:
        open_study(str(journal), "study", 7)
    assert f"{journal}: not a readable Optuna journal" in str(raised.value) and f"rm {journal}" in str(raised.value)


# a disk too small for the run -------------------------------------------------------------------


def free_space(free: int):
    """A stand-in for shutil.disk_usage: every filesystem has ``free`` bytes free."""
    return lambda folder: SimpleNamespace(free=free)


def test_a_run_that_does_not_fit_its_disk_is_stopped_with_both_figures_and_the_ways_on(tmp_path):
    needs = [Need(str(tmp_path / "results"), "this run writes about 32.0 GB to results_dir results", 32e9),
             Need(str(tmp_path), "the temporary folder needs room", 0)]
    stops, warnings = space_problems(needs, ways_on("float32"), free_space(int(20e9)))
    assert warnings == [] and len(stops) == 1  # one filesystem: both needs together
    assert "32.0 GB to results_dir results" in stops[0] and "has 20.0 GB free" in stops[0]
    assert "the filesystem at /" in stops[0]
    for way in ("--config results_dir=", "features.dtype: float16", "--config free_space=warn"):
        assert way in stops[0]
    assert "float16" not in ways_on("float16")


def test_what_a_run_still_writes_is_its_files_in_whole_blocks_less_what_results_dir_takes(tmp_path):
    (tmp_path / "results" / "features").mkdir(parents=True)
    (tmp_path / "results" / "features" / "train.h5").write_bytes(b"x" * 1000)
    block = block_size(tmp_path)
    files = [Files("the plan's bytes_written", 2, 5e6), Files("logs", 10, 0)]
    whole = 2 * math.ceil(2.5e6 / block) * block + 10 * block
    held = held_on_disk(tmp_path / "results")
    assert held >= block  # the file takes a block, however few its bytes
    written, temporary = run_needs(str(tmp_path / "results"), files)
    assert written.bytes == whole - held and temporary.bytes == 0
    assert f"its 12 files and folders in whole {block}-byte blocks" in written.what
    assert f"less the {human_bytes(held)} results_dir takes" in written.what
    assert run_needs(str(tmp_path / "not-made-yet"), files)[0].bytes == whole


def test_a_run_with_little_to_spare_is_warned_and_one_with_room_is_not(tmp_path):
    needs = [Need(str(tmp_path), "this run writes about 32.0 GB", 32e9)]
    stops, warnings = space_problems(needs, ways_on("float16"), free_space(int(33e9)))
    assert stops == [] and len(warnings) == 1 and "has 33.0 GB free" in warnings[0]
    assert space_problems(needs, ways_on("float16"), free_space(int(40e9))) == ([], [])


# a disk that fills, on a small filesystem of its own ---------------------------------------------


@contextlib.contextmanager
def small_filesystem(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``folder``: a real disk's ENOSPC in a few kB (mounting
    needs root, as the SLURM test's cluster does)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    assert mounted.returncode == 0, f"mounting a tmpfs needs root: {mounted.stderr}"
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def fill(folder: Path, leave: int = 0) -> None:
    """Zeros under ``folder`` until its filesystem has ``leave`` bytes free (whole pages)."""
    with open(folder / "filler", "wb", buffering=0) as stream:
        with contextlib.suppress(OSError):
            stream.write(bytes(max(shutil.disk_usage(folder).free - leave, 0)))
    assert shutil.disk_usage(folder).free == leave


def plot_to(path: Path) -> None:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots()
    axes.imshow(np.random.default_rng(0).random((256, 256)))
    try:
        figure.savefig(path)
    finally:
        plt.close(figure)


def hdf5_to(path: Path) -> None:
    with h5py.File(path, "w") as stream:
        stream.create_dataset("features", data=np.ones((256, 256), np.float32))


LIBRARY_WRITES = {
    "torch.save": lambda path: torch.save(torch.ones(65536), path),
    "h5py": hdf5_to,
    "Optuna's journal": lambda path: finished_trials(path, 3),
    "matplotlib": plot_to,
    "PIL": lambda path: Image.fromarray(np.random.default_rng(0).integers(0, 256, (256, 256, 3), np.uint8)).save(path, "PNG"),
    "an atomic write": lambda path: write_json(path, {"rows": list(range(65536))}),
}


@pytest.mark.parametrize("library", LIBRARY_WRITES)
def test_a_write_that_finds_the_disk_full_is_told_so_naming_the_filesystem(tmp_path, monkeypatch, library):
    """Each library's own error on a full tmpfs (torch.save's is no OSError) is the full-disk
    reason, naming the filesystem and worded alike for every job."""
    with small_filesystem(tmp_path / "small", "1m") as disk:
        monkeypatch.setenv(REASONS_VARIABLE, str(disk / "logs" / "reasons"))
        fill(disk)
        with pytest.raises(Exception) as raised:
            LIBRARY_WRITES[library](disk / "output")
        assert reason_of(raised.value) == full_disk_reason(disk), repr(raised.value)
        assert f"the filesystem at {disk} has no space left" in full_disk_reason(disk)


def test_a_run_start_removes_the_reasons_and_keeps_the_spares_it_laid(tmp_path):
    prepare_reasons(tmp_path)
    spares = {path: path.stat().st_mtime_ns for path in tmp_path.iterdir()}
    assert len(spares) == SPARES and all(path.read_bytes() == b" " * SPARE_BYTES for path in spares)
    (tmp_path / "0123456789abcdef.json").write_text("{}")
    prepare_reasons(tmp_path)  # a finished run's files untouched by the next run's start
    assert {path: path.stat().st_mtime_ns for path in tmp_path.iterdir()} == spares
    assert reasons_report(tmp_path) == ""


def test_a_reason_a_full_disk_has_no_room_for_is_kept_in_a_spare_and_told_once(tmp_path, monkeypatch):
    with small_filesystem(tmp_path / "small", "1m") as disk:
        reasons = disk / "logs" / "reasons"
        prepare_reasons(reasons)
        monkeypatch.setenv(REASONS_VARIABLE, str(reasons))
        fill(disk)
        for job in range(SPARES + 1):
            monkeypatch.setattr(failures, "job_log", lambda job=job: f"/logs/job-{job}.log")  # each its own
            with pytest.raises(OSError) as raised:
                write_json(disk / f"result-{job}.json", {"rows": list(range(65536))})
            assert report_failure(f"python -m imagenet_cog job-{job}", raised.value)
        assert shutil.disk_usage(disk).free == 0 and not list(reasons.glob(f"{SPARE_PREFIX}*"))
        told = reasons_report(reasons)
    # the spares' jobs named, the one after them not; the same reason once
    assert told.count(full_disk_reason(disk)) == 1 and f"(/logs/job-0.log and {SPARES - 1} other jobs)" in told, told


def test_the_72_mb_case_stops_before_its_first_job(tmp_path):
    """The demo with results/ on a 72 MB filesystem (75.5 MB free): its finished folder takes
    ~95 MB there, so the free-space check stops it, naming the filesystem, before any job."""
    workdir = copy_workflow(tmp_path / "copy")
    with small_filesystem(workdir / "results", "72m") as results:
        stopped = snakemake(workdir, "--cores", "1", check=False)
        assert list(results.iterdir()) == []
    screen = stopped.stdout + stopped.stderr
    assert stopped.returncode != 0 and "Not enough free space: this run writes about" in screen, screen[-3000:]
    assert f"the filesystem at {results} has 75.5 MB free" in screen and "--config free_space=warn" in screen
    assert not re.search(r"^\s*(local)?rule \w+:$", stopped.stdout, re.MULTILINE)


def test_a_job_that_finds_the_disk_full_says_so_once_on_the_screen(tmp_path):
    """With free_space: warn, a run starts on a 1 MB filesystem left with room for its spare
    reason files alone: WordNet's copy (37 MB) fails at its first block, and the screen names the
    filesystem once, though not a byte more fits there."""
    workdir = copy_workflow(tmp_path / "copy")
    with small_filesystem(workdir / "results", "1m") as results:
        fill(results, leave=SPARES * SPARE_BYTES)
        failed = snakemake(workdir, "--cores", "1", "--config", "free_space=warn", "--", Layout().wordnet_corpus(),
                           check=False)
        assert shutil.disk_usage(results).free == 0
    screen = failed.stdout + failed.stderr
    assert failed.returncode != 0 and "Starting anyway (free_space: warn)" in screen
    assert "Why a job failed" in screen and screen.count(full_disk_reason(results)) == 1, screen[-3000:]
    assert "results/logs/levels/wordnet_corpus.log" in screen.split(full_disk_reason(results))[1]


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
    ({"models": {"mystery": {"arch": "timm/vit_tiny_patch16_22", "weights": "random"}}}, "vit_tiny_patch16_224"),
    ({"models": {"mystery": {"arch": "resnet50", "preprocessing": "model"}}}, "settings of timm models"),
])
def test_bad_config_is_rejected_before_any_job(fresh_copy, settings, named):
    overlay = fresh_copy / "bad.yaml"
    overlay.write_text(yaml.safe_dump(settings))
    result = snakemake(fresh_copy, "--cores", "1", "--configfile", str(overlay), check=False, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert named in output, output[-3000:]
    assert len(output.splitlines()) <= 25, output  # one screen (#54)
    assert not (fresh_copy / "results").exists()
    assert "rule " not in result.stdout


# a run killed in the middle of a probe search -----------------------------------------------


def test_run_killed_mid_search_resumes_the_study_and_loses_nothing(demo_run, tmp_path):
    """SIGKILL to Snakemake and its jobs at once (a node lost, an OOM killer): the re-run
    keeps every finished output and the probe's finished trials, and redoes only the rest."""
    workdir = copy_of_demo(demo_run, tmp_path / "copy")
    layout = Layout()
    # a probe with a job of its own (the demo's IN-1K and levels run their seeds together)
    key = ("demo_cnn", "wup-l3", "all", "22")
    result, journal = workdir / layout.probe_result(*key), workdir / layout.probe_study(*key)
    log = workdir / layout.log("probes/demo_cnn/wup-l3/shots-all/seed-22.log")
    classifier = workdir / layout.probe_classifier("demo_cnn", "wup-l3", "22")  # rewritten by the re-run
    # the job's benchmark is under results/ too (the run's results_dir) and rewritten by the re-run
    benchmark = workdir / layout.log("benchmarks/probes/demo_cnn/wup-l3/shots-all/seed-22.tsv")
    # the finished run's log already names its trials
    for stale in (result, journal, log, classifier, benchmark):
        stale.unlink()
    finished = {path: path.stat().st_mtime_ns for path in (workdir / "results").rglob("*") if path.is_file()}
    # long trials, so that the kill surely lands between the first trial and the last
    slow = workdir / "slow-probes.yaml"
    slow.write_text(yaml.safe_dump({"probes": {"trials": 4, "epochs": 2000}}))
    # the target first: --configfile takes every argument after it
    arguments = [layout.probe_result(*key), "--cores", "1", "--configfile", str(slow)]
    output = tmp_path / "killed-run.txt"
    with open(output, "w") as sink:
        run = subprocess.Popen([str(SNAKEMAKE), *arguments], cwd=workdir, env=snakemake_environment(),
                               start_new_session=True, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while run.poll() is None and time.monotonic() < deadline:
            if log.exists() and "trial 0:" in log.read_text():
                break
            time.sleep(0.1)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    assert run.returncode == -signal.SIGKILL, output.read_text()[-3000:]
    assert not result.exists(), "the probe finished before the run could be killed"
    assert journal.exists()

    snakemake(workdir, "--unlock")
    snakemake(workdir, *arguments)
    resumed = json.loads(result.read_text())
    assert resumed["n_trials"] == 4 and 1 <= resumed["study"]["resumed_trials"] < 4, resumed["study"]
    # nothing finished before the kill was touched, and nothing else was planned
    assert {path: path.stat().st_mtime_ns for path in finished} == finished
    assert "Nothing to be done" in snakemake(workdir, *arguments, "--dry-run").stdout
