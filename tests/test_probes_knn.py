"""The k-NN probe: its predictions equal scikit-learn's and a direct loop's (ties as its module
doc names them), its blocks change nothing, and the probe-knn command scores every N and
seed on the linear probe's final-fit images."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sklearn.neighbors import KNeighborsClassifier
from test_probes_few_shot_reads import CLASSES, DIM, PER_CLASS, write_split

from imagenet_cog.features.store import read_features
from imagenet_cog.probes.knn import KnnSettings, knn_scores, ranked_classes
from imagenet_cog.probes.knn_probe import main
from imagenet_cog.probes.search import run_selections

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def clustered(seed: int, classes: int = 12, train_per_class: int = 30, test_per_class: int = 10, dim: int = 24):
    """Overlapping Gaussian classes: neighbours of many classes, no exact similarity ties."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim))
    train_y = np.repeat(np.arange(classes), train_per_class)
    test_y = np.repeat(np.arange(classes), test_per_class)
    train = (centres[train_y] + 1.5 * rng.normal(size=(train_y.size, dim))).astype(np.float32)
    test = (centres[test_y] + 1.5 * rng.normal(size=(test_y.size, dim))).astype(np.float32)
    return train, train_y, test, test_y


def normalised(features: np.ndarray) -> torch.Tensor:
    tensor = torch.from_numpy(features)
    return tensor / tensor.norm(dim=1, keepdim=True)


def our_rankings(train, train_y, test, settings, classes=12, normalise=True):
    prepare = normalised if normalise else torch.from_numpy
    blocks = list(ranked_classes(prepare(train), torch.from_numpy(train_y), prepare(test), classes, settings))
    return {k: torch.cat([rankings[k] for _, rankings in blocks]).numpy() for k in settings.k}


def loop_ranking(train, train_y, query, k, classes, settings, normalise=True):
    """One query by hand, in float64: neighbours by a stable sort (equal similarities: lower
    row first), votes, classes by a stable sort (equal votes: lower class first)."""
    if normalise:
        train = train / np.linalg.norm(train, axis=1, keepdims=True)
        query = query / np.linalg.norm(query)
    similarities = train.astype(np.float64) @ query.astype(np.float64)
    nearest = np.argsort(-similarities, kind="stable")[:k]
    if settings.weighting == "exponential":
        weights = np.exp((similarities[nearest] - similarities[nearest[0]]) / settings.temperature)
    else:
        weights = np.ones(k)
    votes = np.bincount(train_y[nearest], weights=weights, minlength=classes)
    return np.argsort(-votes, kind="stable")[:5]


def test_exponential_votes_equal_scikit_learns_predictions_for_every_k():
    train, train_y, test, test_y = clustered(0)
    # blocks smaller than the data, so several test blocks and merged training blocks are used
    settings = KnnSettings(k=(1, 5, 20, 50), reported_k=20, test_block=17, train_block=41)
    ours = our_rankings(train, train_y, test, settings)
    for k in settings.k:
        reference = KNeighborsClassifier(
            n_neighbors=k, algorithm="brute", metric="cosine",
            weights=lambda distances: np.exp((1.0 - distances) / settings.temperature),
        ).fit(train, train_y)
        np.testing.assert_array_equal(ours[k][:, 0], reference.predict(test))
        top5 = np.argsort(-reference.predict_proba(test), axis=1, kind="stable")[:, :5]
        assert all(set(mine) == set(theirs) for mine, theirs in zip(ours[k], top5))
    assert 0 < (ours[20][:, 0] == test_y).mean() < 1  # a real test: neither trivial nor hopeless


def test_uniform_vote_ties_go_to_the_lowest_class_as_in_scikit_learn():
    train, train_y, test, _ = clustered(1, classes=3)
    settings = KnnSettings(k=(2, 4, 6), reported_k=2, weighting="uniform", test_block=8, train_block=25)
    ours = our_rankings(train, train_y, test, settings, classes=3)
    tied = 0
    for k in settings.k:
        reference = KNeighborsClassifier(n_neighbors=k, algorithm="brute", metric="cosine").fit(train, train_y)
        np.testing.assert_array_equal(ours[k][:, 0], reference.predict(test))
        for row, query in enumerate(test):
            expected = loop_ranking(train, train_y, query, k, 3, settings)
            np.testing.assert_array_equal(ours[k][row], expected[:3])
            neighbours = np.argsort(-(normalised(train).numpy() @ normalised(query[None]).numpy()[0]))[:k]
            tied += np.sort(np.bincount(train_y[neighbours], minlength=3))[-2:].tolist().count(k // 2) == 2
    assert tied > 5  # the case of the test happened


def test_raw_dot_similarities_of_large_features_do_not_overflow():
    train, train_y, test, _ = clustered(2)
    train, test = 40.0 * train, 40.0 * test  # exp(s / 0.07) of these overflows float64
    settings = KnnSettings(k=(3, 10), reported_k=10, similarity="dot", test_block=13, train_block=50)
    ours = our_rankings(train, train_y, test, settings, normalise=False)
    for k in settings.k:
        for row, query in enumerate(test):
            assert ours[k][row, 0] == loop_ranking(train, train_y, query, k, 12, settings, normalise=False)[0]


def test_blocks_change_no_score_and_a_k_above_the_pool_lets_every_image_vote():
    train, train_y, test, test_y = clustered(3)
    args = (torch.from_numpy(train_y), normalised(test), torch.from_numpy(test_y), 12)
    whole = knn_scores(normalised(train), *args, KnnSettings(k=(10, 1000), reported_k=10))
    blocked = knn_scores(normalised(train), *args, KnnSettings(k=(10, 1000), reported_k=10, test_block=7, train_block=9))
    assert whole == blocked
    assert [entry["neighbours"] for entry in whole] == [10, train_y.size]
    assert all(0 <= entry["test_top1"] <= entry["test_top5"] <= 100 for entry in whole)


def test_settings_are_checked_with_the_config_key_to_fix():
    with pytest.raises(ValueError, match="reported_k"):
        KnnSettings(k=(10, 20), reported_k=5)
    with pytest.raises(ValueError, match="temperature"):
        KnnSettings(temperature=0)


def test_command_scores_every_n_and_seed_on_the_linear_probes_final_fit_images(tmp_path):
    train, test = write_split(tmp_path / "train", PER_CLASS, 0), write_split(tmp_path / "test", 10, 1)
    seeds, shots = [22, 37], ["2", "all"]
    outputs = [str(tmp_path / f"{shot}-{seed}.json") for shot in shots for seed in seeds]
    status = main(["--train", str(train), "--test", str(test), "--output", *outputs, "--model", "m", "--dataset", "l1",
                   "--shots", *shots, "--seed", *map(str, seeds), "--k", "3", "20", "--reported-k", "3",
                   "--test-block", "16", "--device", "cpu"])
    assert status == 0
    results = [json.loads(open(path).read()) for path in outputs]
    few, whole = results[:2], results[2:]
    assert [r["n_train"] for r in results] == [2 * CLASSES] * 2 + [CLASSES * PER_CLASS] * 2
    assert whole[0]["knn"] == whole[1]["knn"] and whole[0]["seed"] != whole[1]["seed"]
    assert all(r["probe"] == "knn" and r["feature_dim"] == DIM and r["n_classes"] == CLASSES for r in results)
    assert [entry["neighbours"] for entry in few[0]["knn"]["per_k"]] == [3, 2 * CLASSES]
    for result in results:
        assert result["test_top1"] == result["knn"]["per_k"][0]["test_top1"]
    # the few-shot pool is the linear probe's final-fit sample of the same seed
    train_set, test_set = read_features(train), read_features(test)
    for seed, result in zip(seeds, few):
        rows = run_selections(train_set.labels, "2", seed, 0.2, "train")[2]
        expected = knn_scores(normalised(train_set.features[rows]), torch.from_numpy(train_set.labels[rows]),
                              normalised(test_set.features), torch.from_numpy(test_set.labels), CLASSES,
                              KnnSettings(k=(3, 20), reported_k=3))
        assert result["knn"]["per_k"] == expected
    assert few[0]["knn"] != few[1]["knn"]


def test_command_names_a_bad_setting_and_writes_nothing(tmp_path, caplog):
    train, test = write_split(tmp_path / "train", PER_CLASS, 0), write_split(tmp_path / "test", 10, 1)
    output = tmp_path / "r.json"
    status = main(["--train", str(train), "--test", str(test), "--output", str(output), "--model", "m",
                   "--dataset", "l1", "--shots", "all", "--seed", "1", "--k", "10", "--reported-k", "20"])
    assert status == 1 and not output.exists()
    assert "probes.knn.reported_k" in caplog.text
