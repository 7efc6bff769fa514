"""A killed probe job resumes to the result of a job never killed, for every kind with a
search: the proposals, the random draws and the numbering of trial k are functions of the
seed and the trials before it, not of how many trials ran in the process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from test_probes_search import QUICK, blobs, grid_command, probe_command, write_feature_file

from imagenet_cog.features.store import read_features, read_labels
from imagenet_cog.probes.pca import fit_pca, read_components, write_components
from imagenet_cog.probes.search import ProbeJob, SearchSettings, open_study, probe_dataset, probe_grid

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.heavy]

# each kind's settings beside QUICK's, and its options on the probe command
KIND_SETTINGS = {
    "linear": {},
    "mlp": {"kind": "mlp", "hidden_width": 32},
    "mlp_noact": {"kind": "mlp_noact", "hidden_width": 32},
    "pca": {"kind": "pca", "pca_dim": 16},
}
PCA_DIM = 16


def comparable(result: dict) -> dict:
    """A result without what records the job's history: its timings, journal and resumed trials."""
    study = {key: value for key, value in result["study"].items() if key not in ("journal", "resumed_trials")}
    return {**{key: value for key, value in result.items() if key not in ("timings", "study")}, "study": study}


def leave_a_trial_running(journal: str, name: str, seed: int) -> None:
    """The journal a job killed in the middle of a trial leaves: the trial asked, never told."""
    open_study(journal, name, seed).ask({"lr": optuna.distributions.FloatDistribution(0.1, 100.0, log=True),
                                         "weight_decay": optuna.distributions.FloatDistribution(1e-12, 1e-4, log=True)})


@pytest.mark.parametrize("kind", list(KIND_SETTINGS))
def test_a_search_stopped_between_or_in_trials_resumes_to_the_uninterrupted_result(tmp_path, kind):
    data = (*blobs(dim=PCA_DIM), *blobs(dim=PCA_DIM, seed=4))
    settings = replace(QUICK, trials=5, **KIND_SETTINGS[kind])

    def run(trials: int, journal: str) -> list[dict]:
        job = ProbeJob(*data, settings=replace(settings, trials=trials), device="cpu")
        return next(probe_grid(job, shots=["all"], seeds=[22, 37], journals=[[f"{journal}-22", f"{journal}-37"]]))

    whole = run(5, str(tmp_path / "whole"))
    stopped = run(2, str(tmp_path / "stopped"))  # what a job killed after its second trial leaves
    for result in stopped:
        leave_a_trial_running(result["study"]["journal"], result["study"]["name"], result["seed"])
    resumed = run(5, str(tmp_path / "stopped"))
    assert [r["study"]["resumed_trials"] for r in resumed] == [2, 2]
    assert [comparable(r) for r in resumed] == [comparable(r) for r in whole]
    assert [t["number"] for t in resumed[0]["trials"]] == [0, 1, 2, 3, 4]


def journal_trials(journal: Path) -> list[TrialState]:
    """The states of the trials of the one study in a journal, read without resuming it."""
    storage = JournalStorage(JournalFileBackend(str(journal)))
    (summary,) = optuna.get_all_study_summaries(storage)
    return [trial.state for trial in optuna.load_study(study_name=summary.study_name, storage=storage).trials]


def kill_when(job: subprocess.Popen, ready, what: str) -> None:
    """SIGKILL the job as soon as ``ready()`` holds (an OOM killer, a lost node)."""
    try:
        deadline = time.monotonic() + 120
        while not ready() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    assert job.returncode == -signal.SIGKILL, f"the job ended before {what}"


def reference(tmp_path: Path, settings: SearchSettings, kind: str, **runs) -> list[list[dict]]:
    """The results of a job never killed, run in this process on the command's feature files."""
    train, test = read_features(str(tmp_path / "train.h5")), read_features(str(tmp_path / "test.h5"))
    train_x, test_x = train.features, test.features
    if kind == "pca":
        components = read_components(str(tmp_path / "pca.h5"))
        train_x, test_x = components.project(train_x, PCA_DIM), components.project(test_x, PCA_DIM)
    job = ProbeJob(train_x, read_labels(str(tmp_path / "train.h5")), test_x, test.labels, settings=settings, device="cpu")
    return list(probe_grid(job, **runs))


@pytest.mark.parametrize("kind", list(KIND_SETTINGS))
def test_a_probe_job_killed_in_a_trial_resumes_to_the_uninterrupted_result(tmp_path, kind):
    write_feature_file(tmp_path / "train.h5", *blobs(classes=10, per_class=60, dim=64))
    write_feature_file(tmp_path / "test.h5", *blobs(classes=10, per_class=10, dim=64, seed=4))
    epochs = 120 if kind in ("linear", "pca") else 40
    extra = {"linear": (), "pca": ("--kind", "pca", "--pca-dim", str(PCA_DIM), "--pca-components", str(tmp_path / "pca.h5"))}
    if kind == "pca":
        write_components(str(tmp_path / "pca.h5"), fit_pca(read_features(str(tmp_path / "train.h5")).features))
    command = probe_command(tmp_path, trials=4, epochs=epochs,
                            extra=extra.get(kind, ("--kind", kind, "--hidden-width", "32")))
    log_path = tmp_path / "first.log"
    with open(log_path, "w") as log:
        job = subprocess.Popen(command, stderr=log, stdout=log)
    kill_when(job, lambda: "trial 1:" in log_path.read_text(), "its second trial")
    # killed in its third or fourth trial (or, rarely, between two)
    assert 2 <= journal_trials(tmp_path / "study.jsonl").count(TrialState.COMPLETE) < 4

    with open(os.devnull, "w") as sink:
        subprocess.run(command, check=True, stdout=sink, stderr=sink, timeout=300)
    resumed = json.loads((tmp_path / "result.json").read_text())
    assert resumed["study"]["resumed_trials"] >= 2 and resumed["probe"] == (f"pca-{PCA_DIM}" if kind == "pca" else kind)
    settings = replace(SearchSettings(), trials=4, epochs=epochs, batch_size=64, **KIND_SETTINGS[kind])
    (whole,) = reference(tmp_path, settings, kind, shots=["all"], seeds=[93], journals=[[str(tmp_path / "whole.jsonl")]])[0]
    assert comparable({key: resumed[key] for key in whole}) == comparable(whole)


def test_a_resident_job_killed_between_its_searches_resumes_to_the_uninterrupted_results(tmp_path):
    write_feature_file(tmp_path / "train.h5", *blobs(classes=10, per_class=60, dim=64))
    write_feature_file(tmp_path / "test.h5", *blobs(classes=10, per_class=10, dim=64, seed=4))
    shots, seeds = ["3", "all"], [22, 37]
    names = [f"{n}-{seed}" for n in shots for seed in seeds]
    command = grid_command(tmp_path, shots, seeds, trials=3, epochs=150)
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_when(job, lambda: all((tmp_path / f"3-{seed}.json").exists() for seed in seeds), "its second N")
    assert not any((tmp_path / f"all-{seed}.json").exists() for seed in seeds)

    subprocess.run(command, check=True, capture_output=True, timeout=300)
    settings = replace(SearchSettings(), trials=3, epochs=150, batch_size=64)
    whole = reference(tmp_path, settings, "linear", shots=shots, seeds=seeds,
                      journals=[[str(tmp_path / f"whole-{name}.jsonl") for name in names[:2]],
                                [str(tmp_path / f"whole-{name}.jsonl") for name in names[2:]]])
    for name, expected in zip(names, [result for group in whole for result in group]):
        resumed = json.loads((tmp_path / f"{name}.json").read_text())
        expected["resident_job"].pop("load_s")
        resumed["resident_job"].pop("load_s")
        assert comparable({key: resumed[key] for key in expected}) == comparable(expected), name
