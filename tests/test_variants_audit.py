"""Label-noise audit: kept classifiers, their refit, confident cross-predictions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from imagenet_cog.core.layout import Layout, classifier_beside
from imagenet_cog.features.store import write_shard
from imagenet_cog.probes.classifier import ClassifierError, load_or_refit, read_classifier, refit_classifier
from imagenet_cog.variants.audit import (
    audit,
    check_threshold,
    write_predictions,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DIM = 8


def blob_features(axes: list[int], per_class: int, seed: int, spread: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Tight clusters around +e_a and -e_a for each axis a of an 8-dimensional space (classes
    2i and 2i+1 on axis i): centred data, so a probe's bias stays near zero and an image
    orthogonal to every axis gets a near-uniform softmax."""
    rng = np.random.default_rng(seed)
    features, labels = [], []
    for label, (axis, sign) in enumerate((axis, sign) for axis in axes for sign in (1.0, -1.0)):
        points = spread * rng.standard_normal((per_class, DIM))
        points[:, [a for a in range(DIM) if a not in axes]] = 0.0  # stay in the classes' own subspace
        points[:, axis] += sign
        features.append(points)
        labels.append(np.full(per_class, label))
    return np.concatenate(features).astype(np.float32), np.concatenate(labels)


def write_features(path: Path, features: np.ndarray, labels: np.ndarray, wnids: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    paths = [f"{wnids[label]}/img{row}.png" for row, label in enumerate(labels)]
    write_shard(path, features.astype(np.float16), labels, np.arange(labels.size), paths,
                np.ones(labels.size, dtype=bool), {"model": "toy", "random_weights": True, "feature_dim": DIM})


def probe(layout: Layout, dataset: str, seed: int = 7) -> Path:
    result = Path(layout.probe_result("toy", dataset, "all", str(seed)))
    subprocess.run(
        [sys.executable, "-m", "imagenet_cog", "probe", "--train", layout.features("toy", dataset, "train"),
         "--test", layout.features("toy", dataset, "test"), "--output", str(result),
         "--study", str(result) + ".optuna.jsonl", "--model", "toy", "--dataset", dataset, "--shots", "all",
         "--seed", str(seed), "--trials", "3", "--epochs", "30", "--batch-size", "32",
         "--lr-range", "1", "2", "--wd-range", "1e-6", "1e-5", "--device", "cpu"],
        check=True, capture_output=True, timeout=120,
    )
    return result


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Layout:
    """l3 with 4 classes on axes 0-1; IN-1K with 4 classes on axes 4-5 (no overlap), except
    one planted IN-1K test image right on l3's class 2 (+e1, wnid n00000002)."""
    layout = Layout(str(tmp_path_factory.mktemp("audit") / "results"))
    level_wnids = [f"n0000000{k}" for k in range(4)]
    write_features(Path(layout.features("toy", "l3", "train")), *blob_features([0, 1], 30, 0), level_wnids)
    write_features(Path(layout.features("toy", "l3", "test")), *blob_features([0, 1], 5, 1), level_wnids)
    in1k_wnids = [f"n0100000{k}" for k in range(4)]
    features, labels = blob_features([4, 5], 5, 2)
    features[0] = 0.0
    features[0, 1] = 1.0  # planted: an IN-1K test image that is really l3's concept n00000002
    write_features(Path(layout.features("toy", "in1k", "test")), features, labels, in1k_wnids)
    write_features(Path(layout.features("toy", "in1k", "train")), *blob_features([4, 5], 30, 3), in1k_wnids)
    probe(layout, "l3")
    return layout


def test_probe_keeps_its_final_classifier_and_a_refit_reproduces_it(world):
    result_path = world.probe_result("toy", "l3", "all", "7")
    kept = read_classifier(classifier_beside(result_path))
    result = json.loads(Path(result_path).read_text())
    assert kept.weight.shape == (4, DIM) and kept.weight.dtype == np.float32 and kept.bias.shape == (4,)
    assert kept.class_wnids == ["n00000000", "n00000001", "n00000002", "n00000003"]
    assert kept.run["study"] == result["study"]["name"] and kept.run["lr"] == result["best_params"]["lr"]
    refitted = refit_classifier(result_path, world.features("toy", "l3", "train"))
    np.testing.assert_allclose(refitted.weight, kept.weight, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(refitted.bias, kept.bias, rtol=1e-5, atol=1e-6)


def test_a_missing_classifier_is_refitted_and_kept(world):
    result_path = world.probe_result("toy", "l3", "all", "7")
    kept = Path(classifier_beside(result_path))
    before = read_classifier(kept).weight
    kept.unlink()
    again = load_or_refit(result_path, world.features("toy", "l3", "train"))
    assert kept.is_file()
    np.testing.assert_allclose(again.weight, before, rtol=1e-5, atol=1e-6)


def test_the_planted_cross_prediction_is_found_and_nothing_else(world):
    names = {"n00000002": "planted concept", "n01000000": "in1k concept"}
    predictions, shares = audit([("l3", "in1k")], ["7"], "toy", world, names, threshold=0.9)
    assert [(row[3], row[4], row[6], row[7]) for row in predictions] == [
        ("n01000000/img0.png", "n01000000", "n00000002", "planted concept")
    ]
    assert predictions[0][1 + 0] == "7" and predictions[0][-1] > 0.9
    assert shares[0] == ["l3", "in1k", "7", 20, 1, 5.0]
    assert shares[1][2] == "mean" and shares[1][-1] == 5.0


def test_no_confident_prediction_when_no_class_overlaps(world):
    probe(world, "in1k")
    predictions, shares = audit([("in1k", "l3")], ["7"], "toy", world, {}, threshold=0.9)
    assert predictions == [] and shares[0][4] == 0


@pytest.mark.parametrize("threshold", [0.0, 1.0, 1.5, -0.1])
def test_a_threshold_outside_the_open_unit_interval_is_a_clear_error(threshold):
    with pytest.raises(ClassifierError, match=r"label_audit.threshold must lie strictly between 0 and 1"):
        check_threshold(threshold)


@pytest.mark.parametrize("layout", ["folders", "tars"])
def test_contact_sheet_shows_the_most_confident_images_once_each(tmp_path, layout):
    """From extracted folders, or from synset tars through their index (paths name members)."""
    from imagenet_world import synset_images, write_folders, write_synset_tars
    from PIL import Image

    from imagenet_cog.core.archives import ImageFiles, build_index
    from imagenet_cog.variants.audit import contact_sheet

    images = synset_images(["n01000000"], 2, seed=1, size=16)
    first, second = sorted(images["n01000000"])
    if layout == "folders":
        root, index, folder = write_folders(tmp_path / "in1k", images), None, "n01000000"
    else:
        root, index, folder = write_synset_tars(tmp_path / "in1k", images), tmp_path / "index.h5", "n01000000.tar"
        build_index(root, ["n01000000.tar"], index)
    rows = [
        ["l3", "7", "in1k", f"{folder}/{first}", "n01000000", "own", "n00000002", "other", 0.999],
        ["l4", "7", "in1k", f"{folder}/{first}", "n01000000", "own", "n00000003", "other 2", 0.998],
        ["l3", "7", "in1k", f"{folder}/{second}", "n01000000", "own", "n00000002", "other", 0.995],
    ]
    contact_sheet(rows, {"in1k": ImageFiles(root, index)}, tmp_path / "sheet.png", count=2)
    with Image.open(tmp_path / "sheet.png") as sheet:
        assert sheet.format == "PNG" and sheet.size[0] > 2 * sheet.size[1] * 0.8  # two panels side by side


def test_label_audit_command_rejects_a_threshold_outside_0_1(tmp_path):
    failed = subprocess.run(
        [sys.executable, "-m", "imagenet_cog", "label-audit", "--results-root", str(tmp_path), "--model", "toy",
         "--pair", "l3", "in1k", "--seeds", "7", "--concepts", str(tmp_path / "none.tsv"), "--threshold", "1",
         "--predictions", str(tmp_path / "p.tsv"), "--shares", str(tmp_path / "s.tsv"),
         "--contact-sheet", str(tmp_path / "c.png")],
        capture_output=True, text=True, check=False,
    )
    assert failed.returncode == 1 and "label_audit.threshold must lie strictly between 0 and 1" in failed.stderr
    assert not (tmp_path / "p.tsv").exists()


def test_a_confidence_just_above_the_threshold_reads_back_above_it(tmp_path):
    """Six decimals wrote 0.9900000004 as 0.990000, a row 'above' 0.99 that read as equal."""
    from imagenet_cog.core.io import read_tsv

    threshold = 0.99
    scores = [np.nextafter(threshold, 1.0), threshold + 4e-10, 0.999999996, 1.0]
    rows = [["l3", "7", "in1k", f"n0/img{k}.png", "n0", "zero", "n1", "one", score] for k, score in enumerate(scores)]
    write_predictions(tmp_path / "predictions.tsv", rows)
    written = [float(row["confidence"]) for row in read_tsv(tmp_path / "predictions.tsv")]
    assert written == [float(score) for score in scores]
    assert all(value > threshold for value in written)
