"""The resident probe job (probes.group: dataset): every N and seed of one model and dataset
in one process on features read once, each run's result that of its own job."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest
from test_probes_search import QUICK, blobs, grid_command, write_feature_file

from imagenet_cog.probes.search import ProbeJob, probe_grid, probe_seeds

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SHOTS, SEEDS = ["3", "all"], [22, 37]


def journals(folder, prefix: str) -> list[list[str]]:
    return [[str(folder / f"{prefix}-{shots}-{seed}.jsonl") for seed in SEEDS] for shots in SHOTS]


def comparable(result: dict) -> tuple:
    trials = [(t["lr"], t["weight_decay"], t["val_top1"], t["diverged"]) for t in result["trials"]]
    return (result["shots"], result["seed"], result["study"]["name"], trials, result["best_params"], result["test_top1"],
            result["test_top5"], result["n_train"])


def test_every_run_of_the_resident_job_is_that_of_its_own_job(tmp_path):
    train, test = blobs(classes=5, per_class=40, spread=2.0), blobs(classes=5, per_class=10, spread=2.0, seed=4)
    settings = replace(QUICK, trials=3)
    resident = list(probe_grid(ProbeJob(*train, *test, settings=settings, device="cpu"), shots=SHOTS, seeds=SEEDS, journals=journals(tmp_path, "resident")))
    assert [[(r["shots"], r["seed"]) for r in group] for group in resident] == [[(3, 22), (3, 37)], [("all", 22), ("all", 37)]]
    for shots, group, own_journals in zip(SHOTS, resident, journals(tmp_path, "own")):
        own = probe_seeds(ProbeJob(*train, *test, settings=settings, device="cpu"), shots=shots, seeds=SEEDS, journals=own_journals)
        assert [comparable(r) for r in group] == [comparable(r) for r in own]
        for result in group:
            assert result["resident_job"]["shots"] == [3, "all"] and result["resident_job"]["seeds"] == SEEDS
            assert result["resident_job"]["load_s"] >= 0 and result["seeds_together"] == SEEDS
            assert result["probe_step"] == "unfused"  # fused: auto, which is off on a CPU
            assert "resident_job" not in own[0]


def test_a_resident_job_run_again_resumes_every_study_from_its_journal(tmp_path):
    """A killed resident job leaves its journals: run again, it trains no trial already scored."""
    train, test = blobs(classes=4, per_class=30, spread=2.0), blobs(classes=4, per_class=8, spread=2.0, seed=4)
    settings = replace(QUICK, trials=2)
    paths = journals(tmp_path, "job")
    first = [r for group in probe_grid(ProbeJob(*train, *test, settings=settings, device="cpu"), shots=SHOTS, seeds=SEEDS, journals=paths) for r in group]
    again = [r for group in probe_grid(ProbeJob(*train, *test, settings=replace(settings, trials=3), device="cpu"), shots=SHOTS, seeds=SEEDS, journals=paths) for r in group]
    for before, after in zip(first, again):
        assert after["study"]["resumed_trials"] == 2 and after["study"]["name"] == before["study"]["name"]
        assert after["trials"][:2] == before["trials"] and len(after["trials"]) == 3


def test_the_probe_command_runs_every_n_and_seed_into_their_own_files(tmp_path):
    write_feature_file(tmp_path / "train.h5", *blobs(classes=4, per_class=30))
    write_feature_file(tmp_path / "test.h5", *blobs(classes=4, per_class=8, seed=4))
    names = [f"{shots}-{seed}" for shots in SHOTS for seed in SEEDS]
    command = grid_command(tmp_path, SHOTS, SEEDS, trials=2, epochs=3)
    subprocess.run(command, check=True, capture_output=True, timeout=180)
    results = [json.loads((tmp_path / f"{name}.json").read_text()) for name in names]
    assert [(r["shots"], r["seed"]) for r in results] == [(3, 22), (3, 37), ("all", 22), ("all", 37)]
    assert all(r["model"] == "toy" and r["resident_job"]["shots"] == [3, "all"] for r in results)
    assert (tmp_path / "all-22.classifier.npz").is_file() and not (tmp_path / "3-22.classifier.npz").exists()
    at = command.index("--study")
    del command[at + 1]  # a journal short
    failed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert failed.returncode != 0 and "one per N and seed" in failed.stderr
