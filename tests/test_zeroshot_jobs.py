"""The zero-shot jobs on hand-made features and classifiers: probe-zeroshot (columns matched
by wnid, refusals naming the files), probe-zeroshot-open-set (where the errors go), and the
zero-shot results' crossover N and tables."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from imagenet_cog.core.io import write_tsv
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.names_table import ConceptName, write_names_table
from imagenet_cog.features.store import write_shard
from imagenet_cog.features.zeroshot_classifier_file import ZeroShotClassifier, write_classifier
from imagenet_cog.models.registry import file_sha256
from imagenet_cog.probes.zeroshot_probe import main, open_set_main
from imagenet_cog.results.zeroshot import crossover, zeroshot_results_command

WNIDS = {"in1k": ["n00000001", "n00000002"], "l1": ["n00000011", "n00000012"]}
# a 4-d space: each concept along one axis, IN-1K's first, then L1's
AXIS = {wnid: index for index, wnid in enumerate(WNIDS["in1k"] + WNIDS["l1"])}


def split_table(path, wnids):
    write_tsv(path, ("path", "wnid", "label", "split"),
              [(f"{wnid}/{n}.jpg", wnid, label, split) for label, wnid in enumerate(wnids)
               for split in ("train", "test") for n in range(2)])
    return str(path)


def features(path, vectors, labels, model="clip"):
    write_shard(path, np.asarray(vectors, dtype=np.float32), labels, range(len(labels)),
                [f"{n}.jpg" for n in range(len(labels))], [True] * len(labels),
                {"model": model, "random_weights": False})
    return str(path)


def classifier(path, wnids, names_sha256="", model="clip"):
    weights = np.zeros((4, len(wnids)), dtype=np.float32)
    for column, wnid in enumerate(wnids):
        weights[AXIS[wnid], column] = 1.0
    write_classifier(path, ZeroShotClassifier(weights, list(wnids), list(wnids), 100.0,
                                              {"model": model, "arch": "open_clip/x", "weights": "random",
                                               "open_clip_version": "3", "templates": "simple",
                                               "names_sha256": names_sha256}))
    return str(path)


def axis(wnid, noise=0.0):
    vector = np.full(4, noise, dtype=np.float32)
    vector[AXIS[wnid]] = 1.0
    return vector


def test_a_dataset_is_scored_by_wnid_whatever_the_classifiers_column_order(tmp_path):
    splits = split_table(tmp_path / "l1.tsv", WNIDS["l1"])
    # image 0 (label 0) along its concept, image 1 (label 1) along label 0's: top-1 50%
    test = features(tmp_path / "test.h5", [axis("n00000011"), axis("n00000011", 0.1)], [0, 1])
    # the classifier names the concepts in reverse order, with an extra one
    clf = classifier(tmp_path / "clf.h5", ["n00000012", "n00000001", "n00000011"])
    output = tmp_path / "result.json"
    assert main(["--model", "clip", "--dataset", "l1", "--test", test, "--splits", splits, "--classifier", clf,
                 "--device", "cpu", "--output", str(output)]) == 0
    result = json.loads(output.read_text())
    assert (result["test_top1"], result["test_top5"], result["n_classes"], result["n_test"]) == (50.0, 100.0, 2, 2)
    assert result["probe"] == "zeroshot" and result["classifier"]["templates"] == "simple"


def test_another_datasets_or_models_classifier_is_refused_naming_the_files(tmp_path, capsys):
    splits = split_table(tmp_path / "l1.tsv", WNIDS["l1"])
    test = features(tmp_path / "test.h5", [axis("n00000011")], [0])
    wrong = classifier(tmp_path / "in1k.h5", WNIDS["in1k"])
    options = ["--model", "clip", "--dataset", "l1", "--test", test, "--splits", splits, "--device", "cpu",
               "--output", str(tmp_path / "result.json")]
    assert main([*options, "--classifier", wrong]) == 1
    error = capsys.readouterr().err
    assert f"{wrong} names no concept n00000011" in error and "probes.zeroshot.names" in error
    other = classifier(tmp_path / "other.h5", WNIDS["l1"], model="siglip")
    assert main([*options, "--classifier", other]) == 1
    assert "score a model's features with its own classifier" in capsys.readouterr().err
    assert not (tmp_path / "result.json").exists()


def test_the_open_set_says_where_each_datasets_errors_go(tmp_path):
    names = tmp_path / "open-set.tsv"
    write_names_table(names, [ConceptName(label, wnid, wnid, "", "lemma", dataset)
                              for label, (dataset, wnid) in enumerate((d, w) for d in WNIDS for w in WNIDS[d])])
    clf = classifier(tmp_path / "clf.h5", WNIDS["in1k"] + WNIDS["l1"], file_sha256(names))
    splits = [split_table(tmp_path / f"{d}.tsv", WNIDS[d]) for d in WNIDS]
    # IN-1K: right, right; L1: right, taken for IN-1K's first, taken for its own first, right
    tests = [features(tmp_path / "in1k.h5", [axis("n00000001"), axis("n00000002")], [0, 1]),
             features(tmp_path / "l1.h5", [axis("n00000011"), axis("n00000001"), axis("n00000011"), axis("n00000012")],
                      [0, 1, 1, 1])]
    output = tmp_path / "open.json"
    assert open_set_main(["--model", "clip", "--dataset", "in1k", "l1", "--test", *tests, "--splits", *splits,
                          "--classifier", clf, "--names", str(names), "--device", "cpu", "--output", str(output)]) == 0
    result = json.loads(output.read_text())
    assert result["dataset"] == "open-set" and result["n_classes"] == 4
    in1k, l1 = result["datasets"]["in1k"], result["datasets"]["l1"]
    assert in1k["test_top1"] == 100.0 and in1k["errors"] == {"same": 0.0, "in1k": 0.0, "other_level": 0.0}
    assert l1["test_top1"] == 50.0 and l1["errors"] == {"same": 25.0, "in1k": 25.0, "other_level": 0.0}
    assert l1["predicted"] == {"in1k": 25.0, "l1": 75.0}
    # a classifier built from another names table is refused
    write_names_table(names, [ConceptName(0, "n00000001", "x", "", "lemma", "in1k")])
    assert open_set_main(["--model", "clip", "--dataset", "in1k", "l1", "--test", *tests, "--splits", *splits,
                          "--classifier", clf, "--names", str(names), "--device", "cpu",
                          "--output", str(tmp_path / "again.json")]) == 1


def curve(points):
    return pd.DataFrame({"shots": [shots for shots, _ in points], "mean": [mean for _, mean in points]})


def test_the_crossover_is_the_first_n_reaching_zero_shot_interpolated_in_log_n():
    grid = curve([("1", 10.0), ("4", 30.0), ("16", 50.0), ("all", 70.0)])
    # 40 lies halfway from 30 (N = 4) to 50 (N = 16): log2 N = 2 + 0.5 x 2 = 3
    first, interpolated = crossover(grid, 40.0)
    assert first == "16" and interpolated == pytest.approx(8.0)
    assert crossover(grid, 5.0)[0] == "1" and math.isnan(crossover(grid, 5.0)[1])
    assert crossover(grid, 60.0)[0] == "all" and math.isnan(crossover(grid, 60.0)[1])
    assert crossover(grid, 80.0) == ("", crossover(grid, 80.0)[1]) and math.isnan(crossover(grid, 80.0)[1])


def test_the_results_table_the_crossover_and_the_open_set(tmp_path):
    layout = Layout(str(tmp_path))
    results = []
    for dataset, top1 in (("in1k", 20.0), ("l1", 45.0)):
        path = tmp_path / f"{dataset}.json"
        path.write_text(json.dumps({"model": "clip", "dataset": dataset, "probe": "zeroshot", "random_weights": False,
                                    "test_top1": top1, "test_top5": 60.0, "n_classes": 2, "n_test": 4}))
        results.append(str(path))
    opened = tmp_path / "open.json"
    opened.write_text(json.dumps({"model": "clip", "dataset": "open-set", "probe": "zeroshot", "random_weights": False,
                                  "datasets": {d: {"test_top1": 10.0, "test_top5": 50.0,
                                                   "errors": {"same": 60.0, "in1k": 20.0, "other_level": 10.0}}
                                               for d in ("in1k", "l1")}}))
    summary = tmp_path / "summary.csv"
    rows = [("in1k", "1", 30.0), ("in1k", "all", 90.0), ("l1", "1", 20.0), ("l1", "all", 60.0)]
    pd.DataFrame([{"model": "clip", "label": "CLIP", "category": "other", "random_weights": False, "probe": "linear",
                   "dataset": d, "shots": s, "mean": m, "std": 1.0, "ci95_low": m - 2, "ci95_high": m + 2,
                   "top5_mean": m, "top5_std": 1.0, "n_seeds": 3, "expected_seeds": 3, "complete": True,
                   "missing_seeds": ""} for d, s, m in rows]).to_csv(summary, index=False)
    assert zeroshot_results_command(["--results-root", str(tmp_path), "--summary", str(summary),
                                     "--models", json.dumps({"clip": {"label": "CLIP"}}), "--datasets", "in1k", "l1",
                                     "--results", *results, str(opened)]) == 0
    table = pd.read_csv(layout.table("zeroshot", "csv"))
    assert table["linear overtakes at N"].tolist() == ["1", "all"]
    assert table["open-set top-1"].tolist() == [10.0, 10.0]
    assert table["linear top-1 (N = all)"].tolist() == [90.0, 60.0]
    open_set = pd.read_csv(layout.table("zeroshot_open_set", "csv"))
    assert open_set["errors: IN-1K (%)"].tolist() == [20.0, 20.0]
    for name in ("zeroshot", "zeroshot_vs_nshot"):
        assert (tmp_path / layout.figure(name, "png")).stat().st_size > 0
