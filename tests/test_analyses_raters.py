"""Forced-choice sheets for human raters and their scorer (imagenet_cog.analyses.raters)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imagenet_cog.analyses import raters
from imagenet_cog.core.io import read_tsv, write_tsv
from imagenet_cog.features.store import write_shard

WNIDS = ["n00000001", "n00000002", "n00000003", "n00000004"]
NAMES = {wnid: f"thing{index}" for index, wnid in enumerate(WNIDS)}
GLOSSES = {wnid: f"a made-up concept number {index} & <co>" for index, wnid in enumerate(WNIDS)}
TEST_IMAGES = 8
# Feature directions: concepts 0 and 2 point almost the same way, so do 1 and 3. Concept 2's
# features are 100 times longer than 0's: only after L2 normalisation is 0 nearest to 2.
DIRECTIONS = {0: (1.0, 0.0, 0.0), 1: (0.0, 1.0, 0.0), 2: (100.0, 10.0, 0.0), 3: (0.0, 1.0, 0.2)}
NEAREST = {WNIDS[0]: WNIDS[2], WNIDS[1]: WNIDS[3], WNIDS[2]: WNIDS[0], WNIDS[3]: WNIDS[1]}


@pytest.fixture()
def world(tmp_path):
    """Four concepts with distinct images, their split table, catalogue and test features."""
    root = tmp_path / "images"
    rows, test_rows = [], []
    for label, wnid in enumerate(WNIDS):
        (root / wnid).mkdir(parents=True)
        for index in range(TEST_IMAGES + 2):
            path = f"{wnid}/{wnid}_{index}.JPEG"
            Image.new("RGB", (64, 48), (40 + 50 * label, 20 * index, 90)).save(root / path, quality=95)
            split = "train" if index < 2 else "test"
            rows.append((path, wnid, label, split))
    rows.sort(key=lambda row: (row[3] != "train", row[0]))
    test_rows = [row for row in rows if row[3] == "test"]
    write_tsv(tmp_path / "split.tsv", ["path", "wnid", "label", "split"], rows)
    write_tsv(tmp_path / "concepts.tsv", ["wnid", "name", "gloss", "in21k", "in1k"],
              [(wnid, NAMES[wnid], GLOSSES[wnid], "True", "False") for wnid in WNIDS]
              + [("n09999999", "unused", "a concept of no dataset", "True", "False")])
    rng = np.random.default_rng(0)
    features = np.stack([
        np.asarray(DIRECTIONS[label]) * (1 + 0.01 * rng.standard_normal(3)) for _, _, label, _ in test_rows
    ]).astype(np.float32)
    write_shard(tmp_path / "test.h5", features, [row[2] for row in test_rows], list(range(len(test_rows))),
                [row[0] for row in test_rows], [True] * len(test_rows), {"model": "toy"})
    return tmp_path


def make_sheets(world: Path, *extra: str, concepts: int = 3, references: int = 5, tasks: int = 3) -> int:
    return raters.rater_sheets_command([
        "--dataset", "l1", "--split-table", str(world / "split.tsv"), "--image-root", str(world / "images"),
        "--catalogue", str(world / "concepts.tsv"), "--features", str(world / "test.h5"),
        "--concepts", str(concepts), "--tasks-per-concept", str(tasks), "--references", str(references),
        "--negatives", "random", "hard", "--variants", "coherence", "describability", "--seed", "3",
        "--image-size", "32", "--sheets", str(world / "sheets"), "--key", str(world / "key.tsv"), *extra,
    ])


def test_pages_hold_exactly_the_key_tasks_and_no_answers(world):
    assert make_sheets(world) == 0
    key = read_tsv(world / "key.tsv")
    assert len(key) == 2 * 2 * 3 * 3  # variants x negative kinds x rounds x concepts
    pages = sorted(path.name for path in (world / "sheets").glob("*.html"))
    assert pages == sorted([raters.INDEX_PAGE] + [
        f"{variant}-{kind}-{page:02d}.html" for variant in raters.VARIANTS for kind in raters.NEGATIVE_KINDS
        for page in (1, 2, 3)
    ])
    assert {row["answer"] for row in key} == {"A", "B"}
    for page in pages:
        if page == raters.INDEX_PAGE:
            continue
        text = (world / "sheets" / page).read_text()
        rows = [row for row in key if f"{row['variant']}-{row['negatives']}-{int(row['page']):02d}.html" == page]
        sections = re.findall(r'<section class="task" data-task="([^"]+)">(.*?)</section>', text, re.DOTALL)
        assert [task for task, _ in sections] == [row["task"] for row in sorted(rows, key=lambda r: int(r["position"]))]
        # Nothing on the page names a concept, a file or the answer.
        for wnid in WNIDS:
            assert wnid not in text and NAMES[wnid] not in text
        assert "JPEG" not in text and "correct" not in text.lower()
        assert not re.search(r"<input[^>]*\bchecked", text)
        for (task, body), row in zip(sections, sorted(rows, key=lambda r: int(r["position"]))):
            queries = re.findall(r'<img src="(data:image/jpeg;base64,[^"]+)" alt="image ([AB])">', body)
            assert [choice for _, choice in queries] == ["A", "B"]
            for (uri, _), path in zip(queries, (row["query_a"], row["query_b"])):
                assert uri == raters.image_data_uri(world / "images" / path, 32)
            examples = re.findall(r'<img src="([^"]+)" alt="example">', body)
            assert len(examples) == (5 if row["variant"] == "coherence" else 0)
            if row["variant"] == "describability":
                assert f'<p class="description">{GLOSSES[row["wnid"]].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")}</p>' in body
    index = (world / "sheets" / raters.INDEX_PAGE).read_text()
    assert all(f'href="{page}"' in index for page in pages if page != raters.INDEX_PAGE)


def test_tasks_use_distinct_images_of_the_right_concepts(world):
    assert make_sheets(world, references=7) == 0
    images = raters.read_test_images(world / "split.tsv")
    for row in read_tsv(world / "key.tsv"):
        references = row["references"].split(";") if row["references"] else []
        positive, negative = (row["query_a"], row["query_b"]) if row["answer"] == "A" else (row["query_b"], row["query_a"])
        shown = references + [positive, negative]
        assert len(set(shown)) == len(shown)
        assert set(references + [positive]) <= set(images[row["wnid"]])
        assert row["negative_wnid"] != row["wnid"] and negative in images[row["negative_wnid"]]
        assert len(references) == (7 if row["variant"] == "coherence" else 0)
        if row["negatives"] == "hard":
            assert row["negative_wnid"] == NEAREST[row["wnid"]]


def test_describability_keeps_the_coherence_queries(world):
    assert make_sheets(world) == 0
    pairs = {}
    for row in read_tsv(world / "key.tsv"):
        pairs.setdefault((row["wnid"], row["negatives"], row["page"]), set()).add(
            (row["variant"], frozenset((row["query_a"], row["query_b"]))))
    for variants in pairs.values():
        assert {variant for variant, _ in variants} == set(raters.VARIANTS)
        assert len({pair for _, pair in variants}) == 1


def test_same_settings_same_tasks_and_a_new_seed_new_ones(world):
    assert make_sheets(world) == 0
    first = (world / "key.tsv").read_text()
    assert make_sheets(world) == 0
    assert (world / "key.tsv").read_text() == first
    args = ["--dataset", "l1", "--split-table", str(world / "split.tsv"), "--image-root", str(world / "images"),
            "--catalogue", str(world / "concepts.tsv"), "--concepts", "3", "--tasks-per-concept", "3",
            "--references", "5", "--negatives", "random", "--variants", "coherence", "--seed", "4",
            "--image-size", "32", "--sheets", str(world / "other"), "--key", str(world / "other.tsv")]
    assert raters.rater_sheets_command(args) == 0
    assert {row["task"] for row in read_tsv(world / "other.tsv")} < {row["task"] for row in read_tsv(world / "key.tsv")}
    assert (world / "other.tsv").read_text() != first


def test_nearest_concepts_by_centroid():
    centroids = {"a": np.array([0.0, 0.0]), "b": np.array([10.0, 0.0]), "c": np.array([1.0, 0.5]),
                 "d": np.array([10.0, 3.0])}
    assert raters.nearest_concepts(centroids) == {"a": "c", "b": "d", "c": "a", "d": "b"}


def test_centroids_of_normalised_features(world):
    centroids = raters.concept_centroids(world / "test.h5", world / "split.tsv")
    assert sorted(centroids) == WNIDS
    for label, wnid in enumerate(WNIDS):
        direction = np.asarray(DIRECTIONS[label]) / np.linalg.norm(DIRECTIONS[label])
        np.testing.assert_allclose(centroids[wnid], direction, atol=0.03)
    assert raters.nearest_concepts(centroids) == NEAREST


def test_too_few_test_images_names_the_setting(world, capsys):
    assert make_sheets(world, references=TEST_IMAGES) == 1
    error = capsys.readouterr().err
    assert "analyses.raters.references" in error and f"at most {TEST_IMAGES - 1}" in error
    assert not (world / "key.tsv").exists() and not (world / "sheets").exists()


def test_missing_image_is_named(world, capsys):
    (world / "images" / WNIDS[0] / f"{WNIDS[0]}_5.JPEG").unlink()
    assert make_sheets(world, concepts=4) == 1
    assert f"{WNIDS[0]}_5.JPEG: image not found" in capsys.readouterr().err
    assert not (world / "sheets").exists()


# scoring --------------------------------------------------------------------------------------
def key_rows(tasks: dict[str, str], dataset="l1", variant="coherence", negatives="random"):
    return [(task, dataset, variant, negatives, 1, position, f"n{position:08d}", f"thing{position}", "n09999999",
             answer, "a.JPEG", "b.JPEG", "") for position, (task, answer) in enumerate(tasks.items(), start=1)]


def write_answers(path: Path, rows) -> Path:
    with open(path, "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(raters.ANSWER_COLUMNS)
        writer.writerows(rows)
    return path


def score(tmp_path, *answer_files, keys=None, extra=()):
    arguments = ["--answers", *map(str, answer_files), "--key", *map(str, keys or [tmp_path / "key.tsv"]),
                 "--output", str(tmp_path / "scores.tsv"), "--json", str(tmp_path / "scores.json"),
                 "--per-concept", str(tmp_path / "concepts.tsv"), *extra]
    return raters.score_raters_command(arguments)


def test_raters_always_right_score_one(tmp_path):
    answers = {f"t{k}": "AB"[k % 2] for k in range(12)}
    write_tsv(tmp_path / "key.tsv", raters.KEY_COLUMNS, key_rows(answers))
    rows = [(rater, task, answer) for rater in ("r1", "r2", "r3") for task, answer in answers.items()]
    assert score(tmp_path, write_answers(tmp_path / "answers.csv", rows)) == 0
    [row] = read_tsv(tmp_path / "scores.tsv")
    assert (row["answers"], row["correct"], row["tasks_answered"], row["tasks"], row["raters"]) == ("36", "36", "12", "12", "3")
    assert float(row["accuracy"]) == 1.0 and float(row["krippendorff_alpha"]) == 1.0
    assert float(row["ci_low"]) == pytest.approx(0.025 ** (1 / 36), abs=1e-6) and float(row["ci_high"]) == 1.0
    payload = json.loads((tmp_path / "scores.json").read_text())
    assert payload["scores"][0]["accuracy"] == 1.0
    per_concept = read_tsv(tmp_path / "concepts.tsv")
    assert len(per_concept) == 12 and {r["accuracy"] for r in per_concept} == {"1"}


def test_alpha_of_a_hand_computed_case(tmp_path):
    # Choices (rater1, rater2, rater3) per task; rater3 skipped t3.
    #   t1 A A A   t2 B B A   t3 A B -   t4 B B B
    # Coincidences (each ordered pair within a task weighs 1/(values in the task - 1)):
    #   o_AA = 3 (t1), o_BB = 1 (t2) + 3 (t4) = 4, o_AB = o_BA = 1 (t2) + 1 (t3) = 2.
    #   n_A = 5, n_B = 6, n = 11.  alpha = 1 - (n - 1) (o_AB + o_BA) / (2 n_A n_B) = 1 - 40/60 = 1/3.
    write_tsv(tmp_path / "key.tsv", raters.KEY_COLUMNS, key_rows({"t1": "A", "t2": "B", "t3": "A", "t4": "B"}))
    rows = [("r1", "t1", "A"), ("r2", "t1", "A"), ("r3", "t1", "A"),
            ("r1", "t2", "B"), ("r2", "t2", "B"), ("r3", "t2", "A"),
            ("r1", "t3", "A"), ("r2", "t3", "B"),
            ("r1", "t4", "B"), ("r2", "t4", "B"), ("r3", "t4", "B")]
    assert score(tmp_path, write_answers(tmp_path / "answers.csv", rows)) == 0
    [row] = read_tsv(tmp_path / "scores.tsv")
    assert float(row["krippendorff_alpha"]) == pytest.approx(1 / 3, abs=1e-6)
    assert (row["answers"], row["correct"]) == ("11", "9")


def test_alpha_undefined_is_said(tmp_path):
    write_tsv(tmp_path / "key.tsv", raters.KEY_COLUMNS, key_rows({"t1": "A", "t2": "B"}))
    assert score(tmp_path, write_answers(tmp_path / "answers.csv", [("r1", "t1", "A"), ("r1", "t2", "B")])) == 0
    [row] = read_tsv(tmp_path / "scores.tsv")
    assert row["krippendorff_alpha"] == "" and row["alpha_note"] == "no task was answered by two raters"


def test_clopper_pearson_known_values():
    from scipy.stats import beta

    # 7 of 10: the tabulated exact interval, and the beta quantiles it is defined by.
    assert raters.clopper_pearson(7, 10) == pytest.approx((0.34755, 0.93326), abs=1e-5)
    assert raters.clopper_pearson(7, 10) == pytest.approx((beta.ppf(0.025, 7, 4), beta.ppf(0.975, 8, 3)), abs=1e-9)
    low, high = raters.clopper_pearson(0, 10)
    assert low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / 10), abs=1e-9)
    low, high = raters.clopper_pearson(10, 10)
    assert low == pytest.approx(0.025 ** (1 / 10), abs=1e-9) and high == 1.0


def test_groups_per_dataset_variant_and_negatives(tmp_path):
    write_tsv(tmp_path / "l1.tsv", raters.KEY_COLUMNS,
              key_rows({"l1-a": "A", "l1-b": "B"}) + key_rows({"l1-c": "A"}, variant="describability"))
    write_tsv(tmp_path / "in1k.tsv", raters.KEY_COLUMNS, key_rows({"in1k-a": "B"}, dataset="in1k", negatives="hard"))
    # One rater always answers A: right on l1-a, l1-c; wrong on l1-b, in1k-a.
    answers = write_answers(tmp_path / "answers.csv", [("r1", task, "a") for task in ("l1-a", "l1-b", "l1-c", "in1k-a")])
    assert score(tmp_path, answers, keys=[tmp_path / "l1.tsv", tmp_path / "in1k.tsv"]) == 0
    rows = read_tsv(tmp_path / "scores.tsv")
    assert [(r["dataset"], r["variant"], r["negatives"], r["correct"], r["answers"]) for r in rows] == [
        ("in1k", "coherence", "hard", "0", "1"),
        ("l1", "coherence", "random", "1", "2"),
        ("l1", "describability", "random", "1", "1"),
    ]


@pytest.mark.parametrize("content, message", [
    ("rater,task\nr1,t1\n", "the first line must be the header 'rater,task,choice'"),
    ("", "an empty file"),
    ("rater,task,choice\nr1,t1\n", "line 2: 2 fields instead of 3"),
    ("rater,task,choice\nr1,t9,A\n", "line 2: task 't9' is in none of the answer keys"),
    ("rater,task,choice\nr1,t1,C\n", "line 2: choice 'C' is not A or B"),
    ("rater,task,choice\n,t1,A\n", "line 2: no rater ID"),
    ("rater,task,choice\nr1,t1,A\nr1,t1,B\n", "line 3: rater 'r1' answered task t1 with B, but with A in"),
    ("rater,task,choice\nmallory,t1,A\n", "line 2: rater 'mallory' is not in the list of raters"),
])
def test_bad_answers_are_named(tmp_path, capsys, content, message):
    write_tsv(tmp_path / "key.tsv", raters.KEY_COLUMNS, key_rows({"t1": "A"}))
    (tmp_path / "raters.txt").write_text("r1\n")
    (tmp_path / "answers.csv").write_text(content)
    assert score(tmp_path, tmp_path / "answers.csv", extra=["--raters", str(tmp_path / "raters.txt")]) == 1
    error = capsys.readouterr().err
    assert str(tmp_path / "answers.csv") in error and message in error
    assert not (tmp_path / "scores.tsv").exists()


def test_a_task_in_two_keys_is_an_error(tmp_path, capsys):
    write_tsv(tmp_path / "key.tsv", raters.KEY_COLUMNS, key_rows({"t1": "A"}))
    write_tsv(tmp_path / "again.tsv", raters.KEY_COLUMNS, key_rows({"t1": "A"}))
    answers = write_answers(tmp_path / "answers.csv", [("r1", "t1", "A")])
    assert score(tmp_path, answers, keys=[tmp_path / "key.tsv", tmp_path / "again.tsv"]) == 1
    assert "again.tsv: task t1 is also in" in capsys.readouterr().err


def test_an_image_embeds_the_same_from_its_synset_tar_as_from_its_folder(tmp_path):
    from imagenet_world import synset_images, write_folders, write_synset_tars

    from imagenet_cog.core.archives import ImageFiles, build_index

    images = synset_images(["n01000000"], 2, seed=2, size=40)
    name = sorted(images["n01000000"])[1]
    folders = write_folders(tmp_path / "folders", images)
    tars = write_synset_tars(tmp_path / "tars", images)
    build_index(tars, ["n01000000.tar"], tmp_path / "index.h5")
    from_tar = raters.image_data_uri(f"n01000000.tar/{name}", 32, ImageFiles(tars, tmp_path / "index.h5"))
    assert from_tar == raters.image_data_uri(folders / "n01000000" / name, 32)
