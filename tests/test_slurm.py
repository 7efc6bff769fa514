"""The cluster profile on a real SLURM cluster: one node started for the test, a fake GPU.

The demo, cut down to one model, one level, one seed and two shot counts, runs through
`snakemake --profile slurm` (every rule a SLURM job, the levels stage grouped) up to the probes'
summary, one rule shape of each stage it proves (levels, demo world, splits, shard extraction and
merge, the resident probe, the summary; not the results stage's tables and figures, which are
shapes the summary's already are) and a series checkpoint's shard, and must give the outputs of
the local demo run (the `demo_run` fixture). Every SLURM job starts Snakemake twice (the job, then its step), seconds
each, so the run keeps one job of each shape: ten jobs (a series checkpoint's shard among them, its
merge left out: the merge is a shape the level's merges already are), where the demo's six
datasets made 39.

* byte-equal: the level lists of every level, the ranking, the split tables (pure functions of
  config);
* equal arrays: feature labels, row indices, paths and validity;
* numerically equal: the features (the SLURM jobs may use another thread count, which may
  change float summation order) and the probes' accuracies and chosen hyperparameters;
* free to differ: timings, hosts, HDF5 file bytes (creation order, object addresses).

It needs root and Debian's slurm packages; without them it installs them with
scripts/install-system-deps.sh or fails saying so: it is never skipped.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from slurm_cluster import LocalSlurmCluster

from conftest import SNAKEMAKE, copy_workflow
from imagenet_cog.core.layout import Layout

pytestmark = pytest.mark.slurm

MODEL = "demo_cnn_random"
# A level's demo concepts and images are drawn from its own list and wnids alone, so this level's
# world, splits, features and probes are those of the local run; IN-1K's are not (its concepts
# are the nearest ones of every level's), so it is not run here.
LEVEL = "l1"
SEED = "22"
SHOTS = ["1", "all"]
RUN_LIMIT_S = 1500
# Hyperparameters and accuracies may move by float rounding only.
ACCURACY_TOLERANCE = 1e-6
FEATURE_TOLERANCE = 1e-3


# A series of one checkpoint (a random initialisation saved as a file): its shard of the level's
# test split is a SLURM job that finds the file through the job's environment, not its command.
SERIES, SERIES_PATTERN = "demo_cnn_run", "runs/demo_cnn/checkpoint{step}.safetensors"
SERIES_MODEL = f"{SERIES}@1"
SERIES_SHARD = "00000"


def reduce_demo(config_file: Path) -> None:
    """The demo with one model, one level, one seed, two shot counts, linear probes only, and a
    series of one checkpoint. (``--config`` cannot do this: it merges into the models table and
    passes numbers as strings.)"""
    from safetensors.torch import save_file

    from imagenet_cog.models.registry import ModelSpec, build_model

    config = yaml.safe_load(config_file.read_text())
    config["models"] = {MODEL: config["models"][MODEL],
                        SERIES: {"arch": "demo_cnn", "checkpoints": SERIES_PATTERN, "step_unit": "epoch"}}
    checkpoint = config_file.parent / SERIES_PATTERN.format(step=1)
    checkpoint.parent.mkdir(parents=True)
    save_file(build_model(ModelSpec(SERIES, "demo_cnn", "random:3")).network.state_dict(), checkpoint)
    # the checkpoint on the series protocol alone: not among the models the summary covers
    config["series"] = {"settle_seconds": 0, "full_protocol_steps": []}
    config["datasets"] = [LEVEL]
    config["probes"]["seeds"] = [int(SEED)]
    config["probes"]["shots"] = [shots if shots == "all" else int(shots) for shots in SHOTS]
    config["results"]["baseline_model"] = MODEL
    # the profile is under test, not the stages beside the linear probes
    config["level_sets"]["sets"] = []
    config["probes"]["kinds"] = ["linear"]
    for stage in ("balanced", "in1k_blurred", "label_audit", "finetune"):
        config[stage]["enabled"] = False
    config["analyses"] = {name: {"enabled": False} for name in ("kmeans", "alignment_uniformity", "learnability", "agreement", "raters")}
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))


def cluster_profile(profile: Path) -> None:
    """Shrink the profile's per-job requests to what this one machine offers; everything
    else (executor, status command, GPU requests, groups) stays as users get it."""
    settings = yaml.safe_load(profile.read_text())
    cpus = os.cpu_count() or 1

    def shrink(resources: dict) -> None:
        if "cpus_per_task" in resources:
            resources["cpus_per_task"] = min(int(resources["cpus_per_task"]), cpus)
        if "mem_mb" in resources:
            resources["mem_mb"] = min(int(resources["mem_mb"]), 2000)

    shrink(settings["default-resources"])
    for resources in settings.get("set-resources", {}).values():
        shrink(resources)
    # Rules ask for up to 4 threads; this node may have fewer CPUs.
    settings["max-threads"] = cpus
    # The first status check comes after seconds, not the 40 s meant for real queues. (The plugin
    # returns to this interval after a check that sees a job end and adds 10 s after one that
    # sees none, so a job's end is still seen 5-40 s late here: no setting changes that step.)
    settings["slurm-init-seconds-before-status-checks"] = 2
    settings["latency-wait"] = 5
    profile.write_text(yaml.safe_dump(settings, sort_keys=False))


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory):
    """The reduced demo run through --profile slurm on a local cluster, stopped afterwards."""
    base = tmp_path_factory.mktemp("slurm")
    workdir = copy_workflow(base / "workflow-copy")
    reduce_demo(workdir / "config.yaml")
    cluster_profile(workdir / "slurm" / "config.yaml")
    # a fake GPU per CPU: the GPU rules' jobs (the two shards, train and test) run side by side
    # as the node's CPUs allow, not one after the other
    with LocalSlurmCluster(base / "cluster", gpus=os.cpu_count() or 1) as cluster:
        command = [
            "timeout", "-s", "INT", "-k", "10", str(RUN_LIMIT_S),
            str(SNAKEMAKE), "--profile", "slurm", "--jobs", "4", "--verbose", Layout().results_summary(),
            Layout().feature_shard(SERIES_MODEL, LEVEL, "test", SERIES_SHARD),
        ]
        environment = {
            **cluster.environment,
            "PATH": f"{SNAKEMAKE.parent}:{cluster.environment['PATH']}",
            "PYTHONUNBUFFERED": "1",
        }
        result = subprocess.run(command, cwd=workdir, capture_output=True, text=True, env=environment)
        queue = subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=environment).stdout
        if result.returncode != 0:
            pytest.fail(
                f"snakemake --profile slurm failed ({result.returncode}; 124 = over {RUN_LIMIT_S} s):\n"
                f"{result.stdout[-4000:]}\n{result.stderr[-8000:]}\n"
                f"SLURM job logs:\n{_slurm_job_logs(workdir)}\nqueue:\n{queue}\n{cluster.logs()}"
            )
    return workdir, result.stdout + result.stderr


def _slurm_job_logs(workdir: Path) -> str:
    logs = sorted((workdir / "logs" / "slurm").rglob("*.log"))
    return "\n".join(f"--- {log}\n{log.read_text(errors='replace')[-1500:]}" for log in logs[-6:])


def _datasets(workdir: Path) -> list[str]:
    return yaml.safe_load((workdir / "config.yaml").read_text())["datasets"]


def test_every_rule_ran_as_a_slurm_job(slurm_run):
    workdir, output = slurm_run
    calls = [line for line in output.splitlines() if "sbatch call:" in line]
    # One call per SLURM job: levels (a group), splits, shards, merges, and each probe and
    # results rule on its own. The demo's probes run one resident job per dataset (probes.group:
    # dataset); every other grouping runs one job per dataset and N here (one seed).
    probe_calls = [call for call in calls if "rule_probe" in call]
    group = yaml.safe_load((workdir / "config.yaml").read_text())["probes"]["group"]
    jobs_per_dataset = 1 if group == "dataset" else len(SHOTS)
    assert len(probe_calls) == len(_datasets(workdir)) * jobs_per_dataset, "\n".join(calls)
    assert any("rule_aggregate_probes" in call for call in calls), "\n".join(calls)
    gpu_calls = [call for call in calls if "extract_features" in call or "rule_probe" in call]
    cpu_calls = [call for call in calls if "image_splits" in call or "group_levels" in call]
    assert gpu_calls and cpu_calls
    assert all("--gpus=1" in call for call in gpu_calls), gpu_calls[0]
    assert not any("--gpus" in call or "--gres" in call for call in cpu_calls), cpu_calls[0]
    layout = Layout()
    for dataset in _datasets(workdir):
        for shots in SHOTS:
            assert (workdir / layout.probe_result(MODEL, dataset, shots, SEED)).is_file()
    assert (workdir / layout.results_summary()).is_file()


def test_a_series_checkpoint_is_extracted_by_a_slurm_job_from_the_file_its_environment_names(slurm_run):
    import h5py

    from imagenet_cog.models.registry import file_sha256

    workdir, output = slurm_run
    calls = [line for line in output.splitlines() if "sbatch call:" in line and "rule_extract_features" in line]
    # the level's two shards of the model, and the checkpoint's one
    assert len(calls) == 3 and f"model={SERIES_MODEL}" in output, "\n".join(calls)
    with h5py.File(workdir / Layout().feature_shard(SERIES_MODEL, LEVEL, "test", SERIES_SHARD)) as handle:
        assert handle.attrs["weights"].startswith(f"sha256:{file_sha256(str(workdir / SERIES_PATTERN.format(step=1)))}+")
        assert handle["features"].shape[0] > 0


def test_levels_and_splits_are_byte_equal_to_the_local_run(slurm_run, demo_run):
    workdir, _ = slurm_run
    layout = Layout()
    # the levels stage writes every level's list, whichever levels the run probes
    files = [layout.ranking(), layout.eligibility_report(), layout.level_concepts("in1k")]
    files += [layout.level_concepts(dataset) for dataset in _datasets(demo_run) if dataset != "in1k"]
    files += [layout.image_splits(dataset) for dataset in _datasets(workdir)]
    for name in files:
        assert (workdir / name).read_bytes() == (demo_run / name).read_bytes(), name


def test_features_equal_those_of_the_local_run(slurm_run, demo_run):
    import h5py

    workdir, _ = slurm_run
    layout = Layout()
    for dataset in _datasets(workdir):
        for split in ("train", "test"):
            name = layout.features(MODEL, dataset, split)
            with h5py.File(workdir / name) as ours, h5py.File(demo_run / name) as local:
                for key in ("labels", "index", "valid", "path"):
                    np.testing.assert_array_equal(ours[key][()], local[key][()], err_msg=f"{name}:{key}")
                np.testing.assert_allclose(
                    ours["features"][()].astype(np.float32), local["features"][()].astype(np.float32),
                    rtol=FEATURE_TOLERANCE, atol=FEATURE_TOLERANCE, err_msg=f"{name}:features",
                )
                assert ours.attrs["weights"] == local.attrs["weights"]
                assert ours.attrs["preprocessing"] == local.attrs["preprocessing"]


def test_probe_results_equal_those_of_the_local_run(slurm_run, demo_run):
    workdir, _ = slurm_run
    layout = Layout()
    for dataset in _datasets(workdir):
        for shots in SHOTS:
            name = layout.probe_result(MODEL, dataset, shots, SEED)
            ours = json.loads((workdir / name).read_text())
            local = json.loads((demo_run / name).read_text())
            compared = [key for key in local if _is_outcome(key, local[key])]
            assert "test_top1" in compared
            for key in compared:
                assert math.isclose(ours[key], local[key], rel_tol=ACCURACY_TOLERANCE, abs_tol=ACCURACY_TOLERANCE), (
                    f"{name}: {key} {ours[key]} (SLURM) != {local[key]} (local)"
                )


def _is_outcome(key: str, value) -> bool:
    """Numbers the probe computed, as opposed to how long or where it ran."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not any(word in key for word in ("second", "time", "duration", "host", "device"))
