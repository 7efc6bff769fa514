"""Describability answered by an image-text model (imagenet_cog.analyses.describability), its
table (describability_table), the automatic descriptions' reader and the rater sheets'
description setting. The workflow's tiny CLIP with random weights: nothing is downloaded."""

from __future__ import annotations

import json
import re

import h5py
import numpy as np
import open_clip
import pytest
import torch
from scipy.stats import binomtest

from conftest import make_world
from imagenet_cog.analyses import describability, describability_table, raters
from imagenet_cog.analyses.descriptions import DescriptionError, read_auto_descriptions
from imagenet_cog.core.io import read_tsv, write_tsv
from imagenet_cog.core.layout import Layout
from imagenet_cog.features.extract import ExtractionOptions, SplitImages, extract_shard
from imagenet_cog.models.registry import ModelSpec

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLIP = "CoG-demo-CLIP"
WEIGHTS = "random:3"
CONCEPTS, TEST = 3, 4


def test_the_model_answers_the_image_nearer_the_description():
    # by hand: the description points along x; A is nearly along x (cosine 0.99), B is long
    # but at 39 degrees (cosine 0.78, yet a dot product of 5 against A's 0.9): only the
    # cosine, on normalised embeddings, picks A
    text = np.array([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    image_a = np.array([[0.9, 0.1, 0.0], [0.9, 0.1, 0.0]])
    image_b = np.array([[5.0, 4.0, 0.0], [5.0, 4.0, 0.0]])
    choices, similarity_a, similarity_b = describability.model_choices(text, image_a, image_b, [("t1",), ("t2",)])
    assert choices == ["A", "B"]
    np.testing.assert_allclose(similarity_a, [0.9 / np.hypot(0.9, 0.1), 0.1 / np.hypot(0.9, 0.1)], rtol=1e-6)
    np.testing.assert_allclose(similarity_b, [5 / np.hypot(5, 4), 4 / np.hypot(5, 4)], rtol=1e-6)
    # an exact tie is settled by a coin of the task: the same each time, both sides over tasks
    same = np.ones((40, 3))
    ties = [describability.model_choices(same, same, same, [(f"t{index}", "gloss") for index in range(40)])[0]
            for _ in range(2)]
    assert ties[0] == ties[1] and set(ties[0]) == {"A", "B"}


@pytest.mark.parametrize("correct, total", [(0, 10), (7, 10), (10, 10), (37, 48)])
def test_the_interval_is_scipys_clopper_pearson(correct, total):
    rows = [{"source": "gloss", "negatives": "random", "correct": index < correct} for index in range(total)]
    records, counts = describability.accuracy_records(rows, ["gloss", "auto"])
    expected = binomtest(correct, total).proportion_ci(confidence_level=0.95, method="exact")
    assert [record["metric"] for record in records] == ["describability_gloss_random"]
    assert records[0]["value"] == pytest.approx(correct / total)
    assert (records[0]["low"], records[0]["high"]) == pytest.approx((expected.low, expected.high), abs=1e-12)
    assert counts == {"describability_gloss_random": {"correct": correct, "tasks": total}}
    if correct == 0:  # by hand: the upper end is 1 - 0.025^(1/n)
        assert records[0]["high"] == pytest.approx(1 - 0.025 ** (1 / total))


def write_catalogue(path, wnids):
    write_tsv(path, ["wnid", "name", "gloss", "in21k", "in1k"],
              [(wnid, f"thing{index}", f"a made-up thing number {index}, striped & round", "True", "False")
               for index, wnid in enumerate(wnids)])


def write_auto(path, wnids, skip=()):
    write_tsv(path, ["group", "description", "score", "captions"],
              [(wnid, f"a photo of item {index} on grass", "0.5", "a photo|another photo")
               for index, wnid in enumerate(wnids) if wnid not in skip] + [("cluster-0", "unused", "0.1", "")])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Three concepts of four test images, the tiny CLIP's test features, the rater key."""
    root = tmp_path_factory.mktemp("describability")
    table = make_world(root, concepts=CONCEPTS, train=1, test=TEST)
    wnids = sorted({row["wnid"] for row in read_tsv(table)})
    spec = ModelSpec.from_config("demo_clip", {"arch": f"open_clip/{CLIP}", "weights": WEIGHTS})
    extract_shard(spec, SplitImages(table, root / "images", "l1", "test"), 0, CONCEPTS * TEST, root / "test.h5",
                  ExtractionOptions(batch_size=8, device="cpu", dtype="float32"))
    write_catalogue(root / "concepts.tsv", wnids)
    write_auto(root / "auto.tsv", wnids)
    assert raters.rater_sheets_command([
        "--dataset", "l1", "--split-table", str(table), "--image-root", str(root / "images"),
        "--catalogue", str(root / "concepts.tsv"), "--features", str(root / "test.h5"), "--concepts", "3",
        "--tasks-per-concept", "2", "--references", "2", "--negatives", "random", "hard",
        "--variants", "coherence", "describability", "--seed", "0", "--image-size", "32",
        "--sheets", str(root / "sheets"), "--key", str(root / "key.tsv"),
    ]) == 0
    return root


def answer(world, *extra, name="out", weights=WEIGHTS):
    return describability.model_describability_command([
        "--key", str(world / "key.tsv"), "--catalogue", str(world / "concepts.tsv"), "--test", str(world / "test.h5"),
        "--model-name", "demo_clip", "--arch", f"open_clip/{CLIP}", "--weights", weights, "--dataset", "l1",
        "--device", "cpu", "--answers", str(world / f"{name}.tsv"), "--output", str(world / f"{name}.json"), *extra,
    ])


def test_the_tiny_clip_answers_every_describability_task_with_both_descriptions(world):
    assert answer(world, "--descriptions", str(world / "auto.tsv")) == 0
    key = {row["task"]: row for row in read_tsv(world / "key.tsv") if row["variant"] == "describability"}
    rows = read_tsv(world / "out.tsv")
    assert len(key) == 3 * 2 * 2  # concepts x rounds x negative kinds
    assert [row["task"] for row in rows] == [*key, *key]
    assert [row["source"] for row in rows] == ["gloss"] * len(key) + ["auto"] * len(key)

    # the same computed apart: open_clip's model seeded as the workflow seeds random:3, the raw
    # descriptions, the extracted features of the two query images
    torch.manual_seed(3)
    reference, tokenizer = open_clip.create_model(CLIP).eval(), open_clip.get_tokenizer(CLIP)
    with h5py.File(world / "test.h5") as handle:
        features = dict(zip(handle["path"].asstr()[...], handle["features"][...]))
    for row in rows:
        with torch.inference_mode():
            text = reference.encode_text(tokenizer([row["description"]]), normalize=True)[0].numpy()
        task = key[row["task"]]
        similarities = [float(text @ features[task[query]] / np.linalg.norm(features[task[query]]))
                        for query in ("query_a", "query_b")]
        assert [float(row["similarity_a"]), float(row["similarity_b"])] == pytest.approx(similarities, abs=1e-5)
        assert row["model_choice"] == ("A" if similarities[0] > similarities[1] else "B")
        assert row["answer"] == task["answer"] and row["correct"] == str(int(row["model_choice"] == task["answer"]))
    assert {row["description"] for row in rows if row["source"] == "auto"} == {
        f"a photo of item {index} on grass" for index in range(3)}

    result = json.loads((world / "out.json").read_text())
    assert result["analysis"] == "model_describability" and result["random_weights"]
    assert result["weights"] == f"{WEIGHTS}+image_features:embedding"
    assert [record["metric"] for record in result["metrics"]] == [
        f"describability_{source}_{kind}" for source in ("gloss", "auto") for kind in ("random", "hard")]
    for record in result["metrics"]:
        _, source, kind = record["metric"].split("_")
        outcomes = [row["correct"] == "1" for row in rows if row["source"] == source and row["negatives"] == kind]
        interval = binomtest(sum(outcomes), len(outcomes)).proportion_ci(method="exact")
        assert (record["value"], record["low"], record["high"]) == pytest.approx(
            (sum(outcomes) / len(outcomes), interval.low, interval.high))

    # the gloss alone without a descriptions file; the same answers
    assert answer(world, name="gloss") == 0
    assert read_tsv(world / "gloss.tsv") == rows[: len(key)]


def test_pooled_features_and_other_weights_are_refused(world, tmp_path, capsys):
    assert describability.model_describability_command([
        "--key", str(world / "key.tsv"), "--catalogue", str(world / "concepts.tsv"), "--test", str(world / "test.h5"),
        "--model-name", "clip_pooled", "--arch", f"open_clip/{CLIP}", "--weights", WEIGHTS,
        "--image-features", "pooled", "--dataset", "l1", "--device", "cpu",
        "--answers", str(tmp_path / "a.tsv"), "--output", str(tmp_path / "a.json"),
    ]) == 1
    message = capsys.readouterr().err
    assert "model 'clip_pooled'" in message and "image_features: embedding" in message
    assert not (tmp_path / "a.json").exists()
    # features of other weights than the text tower's
    assert answer(world, weights="random:4", name="other") == 1
    assert "extracted with weights random:3+image_features:embedding" in capsys.readouterr().err
    # a model with no text tower
    assert describability.model_describability_command([
        "--key", str(world / "key.tsv"), "--catalogue", str(world / "concepts.tsv"), "--test", str(world / "test.h5"),
        "--model-name", "cnn", "--arch", "timm/resnet18", "--weights", "random", "--dataset", "l1",
        "--answers", str(tmp_path / "b.tsv"), "--output", str(tmp_path / "b.json"),
    ]) == 1
    assert "needs an image-text model" in capsys.readouterr().err


def test_a_descriptions_file_missing_a_concept_or_a_column_is_named(world, tmp_path, capsys):
    wnids = sorted({row["wnid"] for row in read_tsv(world / "key.tsv")})
    write_auto(tmp_path / "short.tsv", wnids, skip=(wnids[1],))
    assert answer(world, "--descriptions", str(tmp_path / "short.tsv"), name="short") == 1
    message = capsys.readouterr().err
    assert str(tmp_path / "short.tsv") in message and wnids[1] in message
    write_tsv(tmp_path / "columns.tsv", ["group", "text"], [(wnid, "x") for wnid in wnids])
    with pytest.raises(DescriptionError, match=r"columns.tsv: not an automatic descriptions file: column\(s\) "
                                               r"description, score, captions missing"):
        read_auto_descriptions(tmp_path / "columns.tsv", wnids)
    assert read_auto_descriptions(world / "auto.tsv", wnids[:1]) == {wnids[0]: "a photo of item 0 on grass"}


def sheets(world, folder, *extra):
    return raters.rater_sheets_command([
        "--dataset", "l1", "--split-table", str(world / "splits.tsv"), "--image-root", str(world / "images"),
        "--catalogue", str(world / "concepts.tsv"), "--concepts", "3", "--tasks-per-concept", "1",
        "--references", "2", "--negatives", "random", "--variants", "coherence", "describability", "--seed", "0",
        "--image-size", "32", "--sheets", str(folder / "sheets"), "--key", str(folder / "key.tsv"), *extra,
    ])


def descriptions_shown(folder):
    page = (folder / "sheets" / "describability-random-01.html").read_text()
    return [re.findall(r'<p class="description">([^<]*)</p>', section)
            for section in re.findall(r"<section .*?</section>", page, re.DOTALL)]


def test_the_sheets_show_the_gloss_the_automatic_description_or_both(world, tmp_path):
    for setting in ("default", "gloss", "auto", "both"):
        (tmp_path / setting).mkdir()
    assert sheets(world, tmp_path / "default") == 0
    assert sheets(world, tmp_path / "gloss", "--description", "gloss") == 0
    assert sheets(world, tmp_path / "auto", "--description", "auto", "--descriptions", str(world / "auto.tsv")) == 0
    assert sheets(world, tmp_path / "both", "--description", "both", "--descriptions", str(world / "auto.tsv")) == 0
    # the default is the gloss, and the setting changes neither the key nor the coherence pages
    for file in ["key.tsv", *(f"sheets/{page.name}" for page in (tmp_path / "default" / "sheets").iterdir())]:
        assert (tmp_path / "gloss" / file).read_bytes() == (tmp_path / "default" / file).read_bytes()
    for setting in ("auto", "both"):
        assert (tmp_path / setting / "key.tsv").read_bytes() == (tmp_path / "default" / "key.tsv").read_bytes()
        assert ((tmp_path / setting / "sheets" / "coherence-random-01.html").read_bytes()
                == (tmp_path / "default" / "sheets" / "coherence-random-01.html").read_bytes())
    key = [row for row in read_tsv(tmp_path / "default" / "key.tsv") if row["variant"] == "describability"]
    gloss = {f"thing{index}": f"a made-up thing number {index}, striped &amp; round" for index in range(3)}
    auto = {f"thing{index}": f"a photo of item {index} on grass" for index in range(3)}
    names = [row["name"] for row in sorted(key, key=lambda row: int(row["position"]))]
    assert descriptions_shown(tmp_path / "gloss") == [[gloss[name]] for name in names]
    assert descriptions_shown(tmp_path / "auto") == [[auto[name]] for name in names]
    assert descriptions_shown(tmp_path / "both") == [[gloss[name], auto[name]] for name in names]
    assert "an automatic description of it" in (tmp_path / "auto" / "sheets" / "index.html").read_text()
    # auto or both need the file, the gloss none
    with pytest.raises(SystemExit):
        sheets(world, tmp_path / "auto", "--description", "both")
    with pytest.raises(SystemExit):
        sheets(world, tmp_path / "auto", "--descriptions", str(world / "auto.tsv"))


def test_the_table_puts_humans_beside_the_models_per_level(world, tmp_path):
    assert answer(world, "--descriptions", str(world / "auto.tsv"), name="table") == 0
    result = json.loads((world / "table.json").read_text())
    write_tsv(tmp_path / "scores.tsv", raters.SCORE_COLUMNS, [
        ["l1", "describability", "random", 20, 19, 0.95, 0.75, 0.99, 10, 12, 2, 0.9, ""],
        ["l1", "coherence", "random", 20, 20, 1.0, 0.83, 1.0, 10, 12, 2, 1.0, ""],
    ])
    models = {"demo_clip": {"arch": f"open_clip/{CLIP}", "weights": "random", "label": "demo CLIP"},
              "unused": {"arch": "demo_cnn", "weights": "random"}}
    assert describability_table.table_command([
        "--results", str(world / "table.json"), "--results-root", str(tmp_path), "--models", json.dumps(models),
        "--datasets", "in1k", "l1", "--human-gloss", str(tmp_path / "scores.tsv"),
    ]) == 0
    layout = Layout(str(tmp_path))
    table = read_tsv_csv(layout.table("analyses_describability", "csv"))
    metrics = {record["metric"]: record for record in result["metrics"]}

    def cell(name):
        record = metrics[name]
        return f"{100 * record['value']:.1f} [{100 * record['low']:.1f}, {100 * record['high']:.1f}]"

    assert table == [
        {"Level": "L1", "Negatives": "random", "Answered by": "human raters",
         "WordNet gloss": "95.0 [75.0, 99.0]", "Automatic description": "—"},
        {"Level": "L1", "Negatives": "random", "Answered by": "demo CLIP†",
         "WordNet gloss": cell("describability_gloss_random"), "Automatic description": cell("describability_auto_random")},
        {"Level": "L1", "Negatives": "hard", "Answered by": "demo CLIP†",
         "WordNet gloss": cell("describability_gloss_hard"), "Automatic description": cell("describability_auto_hard")},
    ]
    markdown = open(layout.table("analyses_describability", "md")).read()
    assert "Clopper-Pearson" in markdown and "randomly initialised" in markdown
    assert open(layout.table("analyses_describability", "tex")).read().startswith("% needs")


def read_tsv_csv(path):
    import csv

    with open(path, newline="") as stream:
        return list(csv.DictReader(stream))
