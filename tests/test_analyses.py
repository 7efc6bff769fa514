"""Unit tests of the analyses stage: every metric on hand-computed cases and against
scikit-learn or the direct formula, and the bad inputs each analysis must name."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import (
    adjusted_mutual_info_score,
    adjusted_rand_score,
    normalized_mutual_info_score,
)

from imagenet_cog.analyses import agreement, clustering, geometry, learnability, report
from imagenet_cog.analyses.common import AnalysisInputError, load_split
from imagenet_cog.core.io import read_tsv
from imagenet_cog.core.layout import Layout, analysis_figure_names, analysis_table_names
from imagenet_cog.features.store import write_shard

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def blobs(concepts: int, per_concept: int, dim: int, spread: float, seed: int = 0):
    """Concepts around orthogonal directions; ``spread`` the noise around them."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(concepts), per_concept)
    centres = np.eye(dim)[:concepts] * 10.0
    features = centres[labels] + spread * rng.standard_normal((labels.size, dim))
    return features.astype(np.float32), labels


def write_features(path, features, labels, attributes=None):
    rows = len(labels)
    write_shard(path, features, labels.tolist(), list(range(rows)), [f"img{i:04d}.jpg" for i in range(rows)],
                [True] * rows, attributes or {"model": "m", "weights": "random", "random_weights": True})
    return path


# clustering metrics --------------------------------------------------------------------------
# 3 concepts (rows) x 3 clusters (columns), test images of concept i in cluster j.
CONFUSION = np.array([
    [8, 2, 0],   # concept 0: 10 images, 8 in cluster 0
    [1, 3, 6],   # concept 1: 10 images, 6 in cluster 2
    [0, 0, 4],   # concept 2:  4 images, all in cluster 2
])


def labels_and_clusters(confusion):
    labels, clusters = [], []
    for concept, row in enumerate(confusion):
        for cluster, count in enumerate(row):
            labels += [concept] * count
            clusters += [cluster] * count
    return np.array(labels), np.array(clusters)


def test_the_papers_purity_on_a_constructed_confusion_matrix():
    labels, clusters = labels_and_clusters(CONFUSION)
    assert np.array_equal(clustering.confusion_matrix(labels, clusters, 3), CONFUSION)
    # CoG preprint, Eq. 3 per concept, normalised by the concept's images: (8/10 + 6/10 + 4/4) / 3
    assert clustering.paper_purity(CONFUSION) == pytest.approx((0.8 + 0.6 + 1.0) / 3)
    # per cluster: (8 + 3 + 6) / 24
    assert clustering.cluster_purity(CONFUSION) == pytest.approx(17 / 24)


def test_entropy_purity_by_hand():
    # cluster 0 {8, 1}, cluster 1 {2, 3}, cluster 2 {6, 4}; K = 3 concepts
    def purity(counts):
        shares = np.array(counts) / sum(counts)
        return 1 + float(np.sum(shares * np.log(shares))) / math.log(3)

    expected = (9 * purity([8, 1]) + 5 * purity([2, 3]) + 10 * purity([6, 4])) / 24
    assert clustering.entropy_purity(CONFUSION) == pytest.approx(expected)
    assert clustering.entropy_purity(np.diag([5, 5, 5])) == pytest.approx(1.0)


def test_metrics_match_scikit_learn_and_ignore_cluster_names():
    labels, clusters = labels_and_clusters(CONFUSION)
    metrics = clustering.clustering_metrics(labels, clusters, 3)
    assert metrics["nmi"] == pytest.approx(normalized_mutual_info_score(labels, clusters))
    assert metrics["ami"] == pytest.approx(adjusted_mutual_info_score(labels, clusters))
    assert metrics["ari"] == pytest.approx(adjusted_rand_score(labels, clusters))
    renamed = clustering.clustering_metrics(labels, (clusters + 1) % 3, 3)
    assert renamed == pytest.approx(metrics)
    perfect = clustering.clustering_metrics(labels, (labels + 2) % 3, 3)
    assert all(value == pytest.approx(1.0) for value in perfect.values())


# k-means ---------------------------------------------------------------------------------------
def test_kmeans_recovers_separated_concepts_and_keeps_the_lowest_inertia():
    train, train_labels = blobs(5, 30, 16, 0.5, seed=1)
    test, test_labels = blobs(5, 10, 16, 0.5, seed=2)
    settings = clustering.KMeansSettings(seeds=(0, 1, 2), iterations=20, device="cpu")
    result, clusters = clustering.cluster_dataset(train, train_labels, test, test_labels, settings, "blobs")
    values = {record["metric"]: record["value"] for record in result["metrics"]}
    assert values["paper_purity"] == pytest.approx(1.0)
    assert values["ami"] == pytest.approx(1.0)
    assert result["k"] == 5 and len(result["runs"]) == 3 and result["n_fit"] == 150
    assert result["kept_seed"] == min(result["runs"], key=lambda run: run["inertia"])["seed"]
    assert clusters.shape == (50,)
    assert adjusted_rand_score(test_labels, clusters) == pytest.approx(1.0)


def test_per_concept_subsample_is_seeded_and_recorded():
    train, labels = blobs(4, 20, 8, 0.3)
    chosen = clustering.per_concept_subsample(labels, 5, seed=3)
    assert np.array_equal(np.bincount(labels[chosen]), [5, 5, 5, 5])
    assert np.array_equal(chosen, clustering.per_concept_subsample(labels, 5, seed=3))
    assert not np.array_equal(chosen, clustering.per_concept_subsample(labels, 5, seed=4))
    settings = clustering.KMeansSettings(seeds=(0,), iterations=5, train_per_concept=5, device="cpu")
    result, _ = clustering.cluster_dataset(train, labels, train, labels, settings, "blobs")
    assert result["n_fit"] == 20 and result["settings"]["train_per_concept"] == 5


def test_k_larger_than_the_training_samples_names_the_setting():
    # k = the dataset's concepts (3, one only in the test set) > 2 training samples
    train, _ = blobs(3, 1, 8, 0.3)
    settings = clustering.KMeansSettings(seeds=(0,), device="cpu")
    with pytest.raises(AnalysisInputError, match="k = 3 concepts but only 2 training samples.*train_per_concept"):
        clustering.cluster_dataset(train[:2], np.array([0, 1]), train, np.array([0, 1, 2]), settings, "tiny")


def test_non_finite_features_name_the_file(tmp_path):
    features, labels = blobs(2, 4, 8, 0.3)
    features[3, 2] = np.nan
    path = write_features(tmp_path / "test.h5", features, labels)
    with pytest.raises(AnalysisInputError, match=r"test\.h5: the features contain NaN"):
        load_split(path)


def test_kmeans_command_writes_the_result_and_assignments(tmp_path):
    from imagenet_cog.cli import main

    train, train_labels = blobs(3, 12, 8, 0.3, seed=1)
    test, test_labels = blobs(3, 5, 8, 0.3, seed=2)
    write_features(tmp_path / "train.h5", train, train_labels)
    write_features(tmp_path / "test.h5", test, test_labels)
    status = main(["analyses-kmeans", "--train", str(tmp_path / "train.h5"), "--test", str(tmp_path / "test.h5"),
                   "--output", str(tmp_path / "kmeans.json"), "--assignments", str(tmp_path / "a.tsv"),
                   "--model", "m", "--dataset", "l1", "--seeds", "0", "1", "--iterations", "10", "--device", "cpu"])
    assert status == 0
    result = json.loads((tmp_path / "kmeans.json").read_text())
    assert {record["metric"] for record in result["metrics"]} == set(clustering.CLUSTERING_METRICS)
    assert result["model"] == "m" and result["dataset"] == "l1" and result["random_weights"] is True
    assert result["test"]["n_images"] == 15
    rows = read_tsv(tmp_path / "a.tsv")
    assert [row["path"] for row in rows] == [f"img{i:04d}.jpg" for i in range(15)]
    assert {int(row["cluster"]) for row in rows} <= {0, 1, 2}


# alignment and uniformity -----------------------------------------------------------------------
def naive_alignment(features, labels, alpha):
    distances = [np.linalg.norm(features[i] - features[j]) ** alpha
                 for i in range(len(labels)) for j in range(i + 1, len(labels)) if labels[i] == labels[j]]
    return float(np.mean(distances))


def naive_uniformity_loss(features, t):
    values = [np.exp(-t * np.sum((features[i] - features[j]) ** 2))
              for i in range(len(features)) for j in range(i + 1, len(features))]
    return float(np.log(np.mean(values)))


@pytest.mark.parametrize("block_size", [1, 16, 1000])
def test_blocked_uniformity_equals_the_direct_formula(block_size):
    rng = np.random.default_rng(5)
    features = geometry.l2_normalised(rng.standard_normal((101, 12)))
    expected = naive_uniformity_loss(features.astype(np.float64), 2.0)
    assert geometry.uniformity_loss(features, 2.0, block_size, "cpu") == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("alpha", [2.0, 1.0])
def test_alignment_equals_the_direct_formula(alpha):
    features, labels = blobs(4, 9, 10, 3.0, seed=7)
    features = geometry.l2_normalised(features)
    expected = naive_alignment(features.astype(np.float64), labels, alpha)
    assert geometry.alignment(features, labels, alpha, "cpu") == pytest.approx(expected, abs=1e-5)


def test_geometry_metrics_by_hand():
    # Two concepts of two points each: opposite points of the unit circle per concept.
    features = np.array([[1, 0], [-1, 0], [0, 1], [0, -1]], dtype=np.float32)
    labels = np.array([0, 0, 1, 1])
    records = {record["metric"]: record["value"] for record in geometry.geometry_metrics(features, labels, 2, 2, 2, "cpu")}
    assert records["alignment"] == pytest.approx(4.0)  # |x - y|^2 = 4 within each concept
    # 6 pairs: two at squared distance 4, four at squared distance 2
    loss = math.log((2 * math.exp(-8) + 4 * math.exp(-4)) / 6)
    assert records["uniformity_loss"] == pytest.approx(loss, abs=1e-6)
    assert records["uniformity"] == pytest.approx(-loss, abs=1e-6)
    assert records["alignment_uniformity_ratio"] == pytest.approx(4.0 / -loss, rel=1e-6)


# learnability ----------------------------------------------------------------------------------
def test_learnability_is_perfect_on_separated_concepts():
    features, labels = blobs(5, 12, 16, 0.1)
    rows = learnability.run_tasks(features, labels, tasks=20, references=10, seed=0, where="blobs")
    assert all(row["random_correct"] == 20 and row["hard_correct"] == 20 for row in rows)
    records = {record["metric"]: record for record in learnability.learnability_metrics(rows)}
    assert records["learnability_random"]["value"] == 1.0
    # Clopper-Pearson with 100/100 successes: upper 1, lower (alpha/2)^(1/n)
    assert records["learnability_hard"]["high"] == pytest.approx(1.0)
    assert records["learnability_hard"]["low"] == pytest.approx(0.025 ** (1 / 100))


def test_learnability_is_chance_on_identical_concepts():
    rng = np.random.default_rng(3)
    labels = np.repeat(np.arange(10), 30)
    features = rng.standard_normal((labels.size, 32)).astype(np.float32)
    rows = learnability.run_tasks(features, labels, tasks=40, references=10, seed=1, where="noise")
    for record in learnability.learnability_metrics(rows):
        assert record["low"] <= 0.5 <= record["high"], record
        assert 0.4 < record["value"] < 0.6


def test_learnability_hard_negatives_come_from_the_nearest_centroid():
    # Concepts 0 and 1 near each other, concept 2 far away.
    centres = np.array([[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.0, 0.0, 1.0]])
    labels = np.repeat(np.arange(3), 4)
    nearest = learnability.nearest_concepts(centres[labels], labels, np.arange(3))
    assert nearest.tolist() == [1, 0, 1]


def test_too_few_test_images_for_the_references_names_the_setting():
    features, labels = blobs(3, 8, 8, 0.1)
    with pytest.raises(AnalysisInputError, match=r"M \+ 1 = 11 test images per concept \(analyses.learnability.references: 10\)"):
        learnability.run_tasks(features, labels, tasks=5, references=10, seed=0, where="l1 test.h5")


def test_clopper_pearson_matches_a_known_interval():
    # 7 of 10: the exact 95% interval is [0.3475, 0.9333]
    low, high = learnability.clopper_pearson(7, 10)
    assert low == pytest.approx(0.3475, abs=1e-4) and high == pytest.approx(0.9333, abs=1e-4)


# agreement -------------------------------------------------------------------------------------
def write_assignments(path, paths, labels, clusters):
    from imagenet_cog.core.io import write_tsv

    write_tsv(path, ["path", "label", "cluster"], zip(paths, labels, clusters))
    return str(path)


def test_agreement_matrix_is_adjusted_nmi_of_each_pair(tmp_path):
    labels, clusters = labels_and_clusters(CONFUSION)
    paths = [f"p{i}" for i in range(labels.size)]
    other = np.roll(clusters, 3)
    matrix = agreement.agreement_matrix({
        "a": write_assignments(tmp_path / "a.tsv", paths, labels, clusters),
        "b": write_assignments(tmp_path / "b.tsv", paths, labels, other),
    })
    assert list(matrix.index) == ["a", "b", "concepts"]
    assert matrix.loc["a", "b"] == matrix.loc["b", "a"] == pytest.approx(adjusted_mutual_info_score(clusters, other))
    assert matrix.loc["a", "concepts"] == pytest.approx(adjusted_mutual_info_score(labels, clusters))
    assert np.allclose(np.diag(matrix.to_numpy()), 1.0)


def test_agreement_refuses_different_test_images(tmp_path):
    a = write_assignments(tmp_path / "a.tsv", ["x", "y"], [0, 1], [0, 1])
    b = write_assignments(tmp_path / "b.tsv", ["x", "z"], [0, 1], [0, 1])
    with pytest.raises(AnalysisInputError, match="list different test images"):
        agreement.agreement_matrix({"a": a, "b": b})


# summary, tables, figures -----------------------------------------------------------------------
def test_summary_tables_and_figures(tmp_path):
    from imagenet_cog.analyses.common import metric

    layout = Layout(str(tmp_path / "results"))
    models = {"m1": {"label": "M1", "weights": "random"}, "m2": {"label": "M2", "weights": "x.pth"}}
    datasets = ["in1k", "l1"]
    paths = []
    for index, model in enumerate(models):
        for scale, dataset in enumerate(datasets, start=1):
            results = {
                "kmeans": [metric(name, 0.5 / scale, spread=0.01) for name in clustering.CLUSTERING_METRICS],
                "alignment_uniformity": [metric("alignment", 0.4 * scale), metric("uniformity", 2.0),
                                         metric("alignment_uniformity_ratio", 0.2 * scale + index)],
                "learnability": [metric("learnability_random", 0.9, 0.8, 0.95), metric("learnability_hard", 0.7, 0.6, 0.8)],
            }
            for analysis, metrics in results.items():
                path = tmp_path / model / dataset / f"{analysis}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps({"model": model, "dataset": dataset, "metrics": metrics}))
                paths.append(str(path))
    summary = report.summary_rows(paths)
    assert list(summary.columns) == report.SUMMARY_COLUMNS
    relative = summary[summary["metric"] == report.RATIO_REL_IN1K].set_index(["model", "dataset"])["value"]
    assert relative[("m1", "in1k")] == pytest.approx(1.0)
    assert relative[("m1", "l1")] == pytest.approx(0.4 / 0.2)
    assert relative[("m2", "l1")] == pytest.approx(1.4 / 1.2)
    labels = np.array([0, 0, 1, 1])
    agreement_file = tmp_path / "agreement.csv"
    agreement.agreement_matrix({m: write_assignments(tmp_path / f"{m}.tsv", list("abcd"), labels, labels)
                                for m in models}).to_csv(agreement_file, index_label="model")
    analyses = ["kmeans", "alignment_uniformity", "learnability", "agreement"]
    summary_path = tmp_path / "summary.csv"
    summary.to_csv(summary_path, index=False)
    files = {"l1": str(agreement_file)}
    report.write_analysis_tables(report.read_analyses_summary(summary_path), layout, models, datasets, analyses, files)
    clustering_table = pd.read_csv(layout.table("analyses_clustering", "csv"))
    assert list(clustering_table.columns) == ["Model", "Metric", "IN-1K", "L1"]
    assert clustering_table.iloc[0].tolist() == ["M1†", "Purity (CoG preprint, Eq. 3)", "0.500 ± 0.010", "0.250 ± 0.010"]
    learn = pd.read_csv(layout.table("analyses_learnability", "csv"))
    assert learn.iloc[0]["L1"] == "90.0 [80.0, 95.0]"
    assert "Adjusted NMI" in (tmp_path / "results/tables/analyses_agreement_l1.md").read_text()
    figures = report.build_analysis_figures(summary, models, datasets, analyses, files)
    assert set(figures) == set(analysis_figure_names(analyses))
    assert set(analysis_table_names(analyses, ["l1"])) == {
        "analyses_clustering", "analyses_geometry", "analyses_learnability", "analyses_agreement_l1"}


def test_too_many_references_for_the_demo_stops_before_any_job(tmp_path):
    from conftest import copy_workflow, refused_overlay

    workdir = copy_workflow(tmp_path / "copy")
    # the demo's concepts have demo.test_images_per_concept (16) test images: M + 1 = 17 do not fit
    output = refused_overlay(workdir, {"analyses": {"learnability": {"references": 16}}})
    assert "analyses.learnability.references is 16" in output
    assert "at most 15" in output
    assert not (workdir / "results").exists()


def test_agreement_in_processes_equals_one_process(tmp_path):
    labels, clusters = labels_and_clusters(CONFUSION)
    paths = [f"p{i}" for i in range(labels.size)]
    files = {name: write_assignments(tmp_path / f"{name}.tsv", paths, labels, np.roll(clusters, shift))
             for shift, name in enumerate("abc")}
    pd.testing.assert_frame_equal(agreement.agreement_matrix(files, processes=2), agreement.agreement_matrix(files))
