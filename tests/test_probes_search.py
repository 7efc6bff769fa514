"""The tuned probe protocol: splits, few-shot sampling, the resumable study, the probe command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import normalize
from threadpoolctl import threadpool_limits

from imagenet_cog.features.store import write_shard
from imagenet_cog.probes.search import (
    FINAL_SHOTS_STREAM,
    SEARCH_SHOTS_STREAM,
    ProbeDataError,
    ProbeJob,
    SearchSettings,
    few_shot_subset,
    open_study,
    probe_dataset,
    scored_trials,
    study_name,
    validation_split,
)

QUICK = SearchSettings(trials=4, epochs=5, batch_size=32)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def blobs(classes=4, per_class=30, dim=8, seed=0, spread=1.0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim)) * 2
    labels = np.repeat(np.arange(classes), per_class)
    return (centres[labels] + spread * rng.normal(size=(labels.size, dim))).astype(np.float32), labels


@pytest.fixture(scope="module")
def digits():
    features, labels = load_digits(return_X_y=True)
    return train_test_split(features.astype(np.float32), labels, test_size=0.3, random_state=0, stratify=labels)


def sklearn_tuned_on_validation(train_x, train_y, test_x, test_y, fit_part, validation_part):
    scores = {
        c: LogisticRegression(C=c, max_iter=5000).fit(train_x[fit_part], train_y[fit_part])
        .score(train_x[validation_part], train_y[validation_part])
        for c in (0.1, 1, 10, 100, 1000, 10000)
    }
    best_c = max(scores, key=scores.get)
    return scores, 100 * LogisticRegression(C=best_c, max_iter=5000).fit(train_x, train_y).score(test_x, test_y)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_digits_accuracy_matches_tuned_sklearn_logistic_regression(digits, tmp_path, precision):
    train_x, test_x, train_y, test_y = digits
    settings = SearchSettings(trials=20, epochs=60, batch_size=128, precision=precision)
    ours = probe_dataset(ProbeJob(train_x, train_y, test_x, test_y, settings=settings, device="cpu"), shots="all", seed=22, journal=str(tmp_path / "study.jsonl"))
    # sklearn's C picked on the same validation split, then refitted on the whole training set
    fit_part, validation_part = validation_split(train_y, settings.val_fraction, 22)
    train_n, test_n = normalize(train_x), normalize(test_x)
    # one BLAS thread: on a busy machine lbfgs otherwise spends seconds spinning threads
    with threadpool_limits(1):
        scores, reference = sklearn_tuned_on_validation(train_n, train_y, test_n, test_y, fit_part, validation_part)
    assert abs(ours["test_top1"] - reference) <= 1.0, (ours["test_top1"], reference, scores)
    assert ours["n_trials"] == 20 and ours["n_train"] == len(train_y) and ours["n_test"] == len(test_y)
    assert ours["n_classes"] == 10 and ours["feature_dim"] == 64
    assert ours["val_top1"] == max(trial["val_top1"] for trial in ours["trials"])
    assert ours["test_top1"] <= ours["test_top5"] <= 100
    assert ours["matmul_precision"] == precision and ours["settings"]["precision"] == precision


def test_validation_split_is_disjoint_complete_and_per_class():
    labels = np.repeat(np.arange(5), [10, 11, 14, 20, 3])
    train, validation = validation_split(labels, 0.2, seed=22)
    assert np.intersect1d(train, validation).size == 0
    assert np.array_equal(np.sort(np.concatenate([train, validation])), np.arange(labels.size))
    assert np.bincount(labels[validation], minlength=5).tolist() == [2, 2, 2, 4, 0]
    again, _ = validation_split(labels, 0.2, seed=22)
    other, _ = validation_split(labels, 0.2, seed=37)
    assert np.array_equal(train, again) and not np.array_equal(train, other)


def test_few_shot_subsets_have_exactly_n_per_class_and_repeat_for_a_seed():
    labels = np.repeat(np.arange(4), 25)
    candidates, _ = validation_split(labels, 0.2, seed=5)
    subset = few_shot_subset(labels, candidates, 4, 5, SEARCH_SHOTS_STREAM, "l1")
    assert np.bincount(labels[subset]).tolist() == [4, 4, 4, 4]
    assert np.isin(subset, candidates).all()
    assert np.array_equal(subset, few_shot_subset(labels, candidates, 4, 5, SEARCH_SHOTS_STREAM, "l1"))
    assert not np.array_equal(subset, few_shot_subset(labels, candidates, 4, 6, SEARCH_SHOTS_STREAM, "l1"))


def test_too_few_samples_for_the_shots_is_a_clear_error():
    labels = np.repeat(np.arange(3), [8, 8, 3])
    with pytest.raises(ProbeDataError, match=r"l4 \(feats.h5\), training set: class 2 has 3 samples, fewer than shots=4"):
        few_shot_subset(labels, np.arange(labels.size), 4, 0, FINAL_SHOTS_STREAM, "l4 (feats.h5), training set")


def test_test_labels_take_no_part_in_selection(tmp_path):
    train_x, train_y = blobs(seed=1, spread=2.0)
    test_x, test_y = blobs(seed=2, spread=2.0)
    runs = [
        probe_dataset(ProbeJob(train_x, train_y, test_x, labels, settings=QUICK, device="cpu"), shots="all", seed=22, journal=str(tmp_path / f"study-{index}.jsonl"))
        for index, labels in enumerate([test_y, np.roll(test_y, 7)])
    ]
    assert runs[0]["trials"] == runs[1]["trials"]
    assert runs[0]["best_params"] == runs[1]["best_params"]
    assert runs[0]["test_top1"] != runs[1]["test_top1"]


def test_few_shot_probe_uses_n_per_class_with_a_full_size_validation_set(tmp_path):
    train_x, train_y = blobs(per_class=30)
    result = probe_dataset(ProbeJob(train_x, train_y, *blobs(seed=3), settings=QUICK, device="cpu"), shots="2", seed=37, journal=str(tmp_path / "study.jsonl"))
    assert result["shots"] == 2 and result["n_train"] == 2 * 4
    with pytest.raises(ProbeDataError, match="search split.*class 0 has 24 samples, fewer than shots=25"):
        probe_dataset(ProbeJob(train_x, train_y, *blobs(seed=3), settings=QUICK, device="cpu"), shots="25", seed=37, journal=str(tmp_path / "other.jsonl"))


def test_interrupted_study_resumes_to_exactly_the_requested_trials(tmp_path):
    data = (*blobs(), *blobs(seed=4))
    journal = str(tmp_path / "study.jsonl")
    first = probe_dataset(ProbeJob(*data, settings=replace(QUICK, trials=2), device="cpu"), shots="all", seed=45, journal=journal)
    resumed = probe_dataset(ProbeJob(*data, settings=replace(QUICK, trials=5), device="cpu"), shots="all", seed=45, journal=journal)
    assert first["study"]["name"] == resumed["study"]["name"]
    assert resumed["study"]["resumed_trials"] == 2 and resumed["n_trials"] == 5
    assert resumed["trials"][:2] == first["trials"]
    # the resumed sampler does not replay the first proposals of the fresh one
    assert len({trial["lr"] for trial in resumed["trials"]}) == 5
    changed = probe_dataset(ProbeJob(*data, settings=replace(QUICK, trials=5, epochs=6), device="cpu"), shots="all", seed=45, journal=journal)
    assert changed["study"]["name"] != first["study"]["name"] and changed["study"]["resumed_trials"] == 0


def test_a_study_is_bound_to_the_precision_its_trials_ran_at(tmp_path):
    data = (*blobs(), *blobs(seed=4))
    journal = str(tmp_path / "study.jsonl")
    names = {}
    for precision in ("float32", "bfloat16"):
        result = probe_dataset(ProbeJob(*data, settings=replace(QUICK, trials=2, precision=precision), device="cpu"), shots="all", seed=45, journal=journal)
        assert result["study"]["resumed_trials"] == 0 and result["matmul_precision"] == precision
        names[precision] = result["study"]["name"]
    assert names["float32"] != names["bfloat16"]
    # "auto" resumes whichever study matches what it resolves to on this machine
    auto = probe_dataset(ProbeJob(*data, settings=replace(QUICK, trials=2), device="cpu"), shots="all", seed=45, journal=journal)
    assert auto["study"]["name"] == names[auto["matmul_precision"]] and auto["study"]["resumed_trials"] == 2


def test_diverging_learning_rates_are_scored_not_fatal(tmp_path):
    settings = replace(QUICK, lr_range=(1e37, 1e38), trials=3, trials_per_batch=2)
    result = probe_dataset(ProbeJob(*blobs(), *blobs(seed=4), settings=settings, device="cpu"), shots="all", seed=22, journal=str(tmp_path / "study.jsonl"))
    assert result["n_trials"] == 3
    assert all(trial["diverged"] for trial in result["trials"])
    assert all(0 <= trial["val_top1"] <= 100 for trial in result["trials"])
    assert 0 <= result["test_top1"] <= 100


def test_trials_per_batch_runs_the_requested_number_of_trials(tmp_path):
    result = probe_dataset(ProbeJob(*blobs(), *blobs(seed=4), settings=replace(QUICK, trials=5, trials_per_batch=3), device="cpu"), shots="all", seed=77, journal=str(tmp_path / "study.jsonl"))
    assert [trial["number"] for trial in result["trials"]] == [0, 1, 2, 3, 4]
    assert len({trial["lr"] for trial in result["trials"]}) == 5


def write_feature_file(path: Path, features: np.ndarray, labels: np.ndarray) -> None:
    write_shard(path, features.astype(np.float16), labels, np.arange(labels.size),
                [f"img{index}.jpg" for index in range(labels.size)], np.ones(labels.size, dtype=bool),
                {"model": "toy", "random_weights": True, "feature_dim": features.shape[1]})


def probe_command(tmp_path: Path, shots: str = "all", trials: int = 4, epochs: int = 5,
                  extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "imagenet_cog", "probe", "--train", str(tmp_path / "train.h5"),
            "--test", str(tmp_path / "test.h5"), "--output", str(tmp_path / "result.json"),
            "--study", str(tmp_path / "study.jsonl"), "--model", "toy", "--dataset", "l3",
            "--shots", shots, "--seed", "93", "--trials", str(trials), "--epochs", str(epochs),
            "--batch-size", "64", "--device", "cpu", *extra]


def grid_command(tmp_path: Path, shots: list[str], seeds: list[int], **settings) -> list[str]:
    """probe_command for every N of ``shots`` and seed of ``seeds`` in one job, each run's result
    and study named ``<N>-<seed>``."""
    command = probe_command(tmp_path, **settings)
    names = [f"{n}-{seed}" for n in shots for seed in seeds]
    replacements = {"--output": [str(tmp_path / f"{name}.json") for name in names],
                    "--study": [str(tmp_path / f"{name}.jsonl") for name in names],
                    "--shots": shots, "--seed": [str(seed) for seed in seeds]}
    for option, values in replacements.items():
        at = command.index(option)
        command[at + 1:at + 2] = values
    return command


def test_probe_command_writes_the_documented_result(tmp_path):
    write_feature_file(tmp_path / "train.h5", *blobs())
    write_feature_file(tmp_path / "test.h5", *blobs(seed=4))
    subprocess.run(probe_command(tmp_path), check=True, capture_output=True, timeout=120)
    result = json.loads((tmp_path / "result.json").read_text())
    assert {"model", "dataset", "shots", "seed", "best_params", "val_top1", "test_top1", "test_top5",
            "n_trials", "trials", "n_train", "n_test", "n_classes", "feature_dim", "random_weights",
            "timings", "versions", "device"} <= result.keys()
    assert (result["model"], result["dataset"], result["shots"], result["seed"]) == ("toy", "l3", "all", 93)
    assert set(result["best_params"]) == {"lr", "weight_decay"} and result["random_weights"] is True
    assert set(result["timings"]) == {"search_s", "final_s", "total_s"}
    assert set(result["trials"][0]) == {"number", "lr", "weight_decay", "val_top1", "diverged"}

    failed = subprocess.run(probe_command(tmp_path, shots="64"), capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1
    assert f"l3 ({tmp_path / 'train.h5'})" in failed.stderr and "fewer than shots=64" in failed.stderr


def test_non_finite_features_are_a_clear_error(tmp_path):
    train_x, train_y = blobs()
    train_x[5, 3] = np.nan
    with pytest.raises(ProbeDataError, match="l2 train.h5: the features contain NaN"):
        probe_dataset(ProbeJob(train_x, train_y, *blobs(seed=4), settings=QUICK, device="cpu", where="l2 train.h5"), shots="all", seed=22, journal=str(tmp_path / "study.jsonl"))


def test_linear_study_names_are_those_from_before_other_kinds():
    """Finished linear studies must resume under the same name: the kind fields do not enter it."""
    features, labels = blobs()
    name = study_name(features, labels, QUICK, "all", 45)
    assert name == study_name(features, labels, replace(QUICK, hidden_width=7), "all", 45)
    assert name != study_name(features, labels, replace(QUICK, kind="mlp"), "all", 45)
    assert name != study_name(features, labels, replace(QUICK, kind="mlp_noact"), "all", 45)
    before_other_kinds = ("trials", "epochs", "batch_size", "momentum", "lr_range", "wd_range",
                          "val_fraction", "trials_per_batch", "precision")
    assert QUICK.defining() == {key: getattr(QUICK, key) for key in before_other_kinds}


@pytest.mark.parametrize("kind", ["mlp", "mlp_noact"])
def test_mlp_kinds_search_and_score(tmp_path, kind):
    features, labels = blobs(per_class=40)
    test = np.arange(labels.size) % 4 == 0  # the same classes' centres: blobs(seed=...) moves them
    data = (features[~test], labels[~test], features[test], labels[test])
    settings = replace(QUICK, kind=kind, hidden_width=16, epochs=30, lr_range=(0.01, 0.3))
    result = probe_dataset(ProbeJob(*data, settings=settings, device="cpu"), shots="all", seed=45, journal=str(tmp_path / "s.jsonl"))
    assert result["n_trials"] == 4 and result["settings"]["kind"] == kind
    assert result["test_top1"] > 90.0


def test_pca_probe_command_projects_onto_d_components_and_rejects_a_d_too_large(tmp_path):
    from imagenet_cog.probes.pca import fit_pca, write_components

    features, labels = blobs(per_class=40, dim=16)
    write_feature_file(tmp_path / "train.h5", features, labels)
    write_feature_file(tmp_path / "test.h5", features[::3], labels[::3])
    write_components(str(tmp_path / "pca.h5"), fit_pca(features))
    pca = ("--kind", "pca", "--pca-components", str(tmp_path / "pca.h5"))
    subprocess.run(probe_command(tmp_path, extra=(*pca, "--pca-dim", "4")), check=True, capture_output=True, timeout=120)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["probe"] == "pca-4" and result["feature_dim"] == 4 and result["settings"]["pca_dim"] == 4
    failed = subprocess.run(probe_command(tmp_path, extra=(*pca, "--pca-dim", "17")), check=False,
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and "probes.pca_dims asks for d=17" in failed.stderr
    assert json.loads((tmp_path / "result.json").read_text())["probe"] == "pca-4", "a failed job deletes nothing"


def test_a_lock_left_by_a_killed_job_does_not_stall_the_study(tmp_path, monkeypatch):
    """SIGKILL while Optuna holds its journal lock leaves the lock's symlink behind (relative,
    as the workflow names journals): the next job of that result removes it and resumes."""
    monkeypatch.chdir(tmp_path)
    journal = Path("probes") / "study.jsonl"
    first = open_study(str(journal), "probe-stale-lock", seed=5)
    first.optimize(lambda trial: trial.suggest_float("x", 0.0, 1.0), n_trials=2)
    (tmp_path / "probes" / "study.jsonl.lock").symlink_to(journal)  # what a killed holder leaves
    started = time.monotonic()
    resumed = open_study(str(journal), "probe-stale-lock", seed=5)
    resumed.optimize(lambda trial: trial.suggest_float("x", 0.0, 1.0), n_trials=1)
    assert len(resumed.trials) == 3 and time.monotonic() - started < 20
    assert not (tmp_path / "probes" / "study.jsonl.lock").is_symlink()


@pytest.mark.parametrize("shots", ["3", "all"])
def test_seeds_together_give_each_seed_the_result_of_its_own_run(tmp_path, shots):
    from imagenet_cog.probes.search import ProbeJob, probe_seeds

    train, test = blobs(classes=5, per_class=40, spread=2.0), blobs(classes=5, per_class=10, spread=2.0, seed=4)
    settings = replace(QUICK, trials=5, trials_per_batch=2)
    seeds = [22, 37, 45]
    # seed 37 was searched before (2 of its 5 trials): it resumes, the others start afresh
    for mode in ("together", "alone"):
        probe_dataset(ProbeJob(*train, *test, settings=replace(settings, trials=2), device="cpu"), shots=shots, seed=37, journal=str(tmp_path / f"{mode}-37.jsonl"))
    together = probe_seeds(ProbeJob(*train, *test, settings=settings, device="cpu"), shots=shots, seeds=seeds, journals=[str(tmp_path / f"together-{seed}.jsonl") for seed in seeds])
    for seed, shared in zip(seeds, together):
        alone = probe_dataset(ProbeJob(*train, *test, settings=settings, device="cpu"), shots=shots, seed=seed, journal=str(tmp_path / f"alone-{seed}.jsonl"))
        assert shared["seed"] == seed and shared["seeds_together"] == seeds
        assert shared["study"]["name"] == alone["study"]["name"]
        assert [(t["lr"], t["weight_decay"], t["val_top1"]) for t in shared["trials"]] == [
            (t["lr"], t["weight_decay"], t["val_top1"]) for t in alone["trials"]
        ]
        assert (shared["test_top1"], shared["test_top5"], shared["n_train"]) == (alone["test_top1"], alone["test_top5"], alone["n_train"])
        assert shared["study"]["resumed_trials"] == (2 if seed == 37 else 0)
    assert len({result["test_top1"] for result in together} | {str(r["best_params"]) for r in together}) > 1


def test_probe_command_runs_several_seeds_into_their_own_files(tmp_path):
    write_feature_file(tmp_path / "train.h5", *blobs())
    write_feature_file(tmp_path / "test.h5", *blobs(seed=4))
    command = probe_command(tmp_path, shots="5")
    for option, values in (("--output", ["a.json", "b.json"]), ("--study", ["a.jsonl", "b.jsonl"]), ("--seed", ["93", "94"])):
        at = command.index(option)
        command[at + 1 : at + 2] = [str(tmp_path / value) if option != "--seed" else value for value in values]
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    results = [json.loads((tmp_path / name).read_text()) for name in ("a.json", "b.json")]
    assert [(r["seed"], r["shots"], r["seeds_together"]) for r in results] == [(93, 5, [93, 94]), (94, 5, [93, 94])]
    assert [Path(r["study"]["journal"]).name for r in results] == ["a.jsonl", "b.jsonl"]
    at = command.index("--study")
    del command[at + 2]  # one journal for two seeds
    failed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert failed.returncode != 0 and "one value per seed" in failed.stderr


def test_tf32_products_are_scoped_to_a_gpu_job_and_the_setting_restored():
    import torch

    from imagenet_cog.probes.search import probe_matmul_precision

    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        with probe_matmul_precision(torch.device("cuda")):
            assert torch.get_float32_matmul_precision() == "high"
        assert torch.get_float32_matmul_precision() == "highest"
        with probe_matmul_precision(torch.device("cpu")):
            assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision(before)
