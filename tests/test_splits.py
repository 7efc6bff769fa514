"""The image split lists: seeded per-concept draws, official IN-1K sets, published pickles,
and the errors bad input gets."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from imagenet_cog.core.io import read_tsv, write_lines, write_tsv
from imagenet_cog.splits.image_splits import (
    SplitError,
    image_splits,
    in1k_rows,
    labelled_rows,
    level_rows,
    list_images,
    load_published_splits,
    published_rows,
    read_concepts,
    sample_concept,
)
from imagenet_cog.splits.summary import missing_images, split_summary


def make_concept(folder: Path, wnid: str, count: int, extension: str = "JPEG") -> list[str]:
    """``count`` empty image files named like ImageNet's; listing never opens them."""
    (folder / wnid).mkdir(parents=True, exist_ok=True)
    names = [f"{wnid}_{index}.{extension}" for index in range(count)]
    for name in names:
        (folder / wnid / name).write_bytes(b"")
    return names


@pytest.fixture
def in21k(tmp_path) -> Path:
    root = tmp_path / "in21k"
    make_concept(root, "n00000001", 60)
    make_concept(root, "n00000002", 25)
    make_concept(root, "n00000003", 40, extension="jpg")
    return root


@pytest.fixture
def in1k(tmp_path) -> Path:
    root = tmp_path / "in1k"
    for wnid in ("n10000001", "n10000002"):
        make_concept(root / "train", wnid, 12)
        make_concept(root / "val", wnid, 3)
    return root


def by_concept(rows):
    result = {}
    for path, wnid, split in rows:
        result.setdefault(wnid, {"train": [], "test": []})[split].append(path)
    return result


def test_listing_keeps_images_of_any_case_and_nothing_else(tmp_path):
    for name in ("a.JPEG", "b.jpeg", "c.JpG", "d.png", "e.PNG", "notes.txt", "f.JPEG.partial"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "g.jpg").mkdir()
    assert list_images(tmp_path) == ["a.JPEG", "b.jpeg", "c.JpG", "d.png", "e.PNG"]


def test_level_split_sizes_cap_and_disjointness(in21k):
    rows = level_rows(in21k, ["n00000001", "n00000002", "n00000003"], 10, 30, seed=0)
    splits = by_concept(rows)
    assert {wnid: (len(s["train"]), len(s["test"])) for wnid, s in splits.items()} == {
        "n00000001": (30, 10),  # capped: 50 left for training, 30 kept
        "n00000002": (15, 10),
        "n00000003": (30, 10),
    }
    for wnid, split in splits.items():
        assert not set(split["train"]) & set(split["test"])
        assert all(path.startswith(f"{wnid}/") and (in21k / path).is_file() for path in split["train"] + split["test"])


def test_level_split_is_deterministic_and_seeded(in21k):
    wnids = ["n00000001", "n00000002"]
    first = level_rows(in21k, wnids, 10, 1300, seed=0)
    assert level_rows(in21k, wnids, 10, 1300, seed=0) == first
    assert level_rows(in21k, wnids, 10, 1300, seed=1) != first
    # the test images are a random draw, not the first names in order
    test_names = sorted(p for p, w, s in first if s == "test" and w == "n00000001")
    assert test_names != sorted(f"n00000001/n00000001_{k}.JPEG" for k in range(10))


def test_a_concepts_split_does_not_depend_on_the_other_concepts(in21k):
    alone = level_rows(in21k, ["n00000002"], 10, 1300, seed=3)
    together = level_rows(in21k, ["n00000003", "n00000001", "n00000002"], 10, 1300, seed=3)
    assert sorted(alone) == sorted(row for row in together if row[1] == "n00000002")


def test_sample_concept_needs_one_training_image_beyond_the_test_set():
    names = [f"x{index}.JPEG" for index in range(11)]
    train, test = sample_concept("n00000009", names, 10, 1300, seed=0)
    assert len(train) == 1 and len(test) == 10
    with pytest.raises(SplitError, match=r"n00000009 has 10 images.*splits.test_per_concept"):
        sample_concept("n00000009", names[:10], 10, 1300, seed=0)


def test_too_few_images_names_the_folder(in21k):
    with pytest.raises(SplitError, match=r"n00000002 has 25 images in .*in21k/n00000002"):
        level_rows(in21k, ["n00000002"], 25, 1300, seed=0)


def test_in1k_uses_the_official_sets(in1k):
    splits = by_concept(in1k_rows(in1k, ["n10000001", "n10000002"]))
    for wnid in ("n10000001", "n10000002"):
        assert len(splits[wnid]["train"]) == 12 and len(splits[wnid]["test"]) == 3
        assert all(path.startswith(f"train/{wnid}/") for path in splits[wnid]["train"])
        assert all(path.startswith(f"val/{wnid}/") for path in splits[wnid]["test"])


def test_rows_are_labelled_by_sorted_wnid_train_first():
    rows = [
        ("n2/b.JPEG", "n2", "test"),
        ("n1/a.JPEG", "n1", "train"),
        ("n2/a.JPEG", "n2", "train"),
        ("n1/b.JPEG", "n1", "test"),
    ]
    assert labelled_rows(rows, ["n2", "n1"]) == [
        ("n1/a.JPEG", "n1", 0, "train"),
        ("n2/a.JPEG", "n2", 1, "train"),
        ("n1/b.JPEG", "n1", 0, "test"),
        ("n2/b.JPEG", "n2", 1, "test"),
    ]


def test_command_writes_the_same_bytes_for_the_same_config(in21k, tmp_path):
    concepts = tmp_path / "l1.txt"
    write_lines(concepts, ["n00000003", "n00000001"])
    outputs = [tmp_path / "a.tsv", tmp_path / "b.tsv"]
    for output in outputs:
        argv = ["--dataset", "l1", "--concepts", str(concepts), "--root", str(in21k),
                "--test-per-concept", "5", "--max-train-per-concept", "20", "--output", str(output)]
        assert image_splits(argv) == 0
    assert outputs[0].read_bytes() == outputs[1].read_bytes()
    rows = read_tsv(outputs[0])
    assert list(rows[0]) == ["path", "wnid", "label", "split"]
    assert [row["split"] for row in rows] == ["train"] * 40 + ["test"] * 10
    assert {row["wnid"]: row["label"] for row in rows} == {"n00000001": "0", "n00000003": "1"}


def test_command_reports_bad_input_without_a_traceback(in21k, tmp_path, capsys):
    concepts = tmp_path / "l1.txt"
    write_lines(concepts, ["n00000004"])
    argv = ["--dataset", "l1", "--concepts", str(concepts), "--root", str(in21k), "--output", str(tmp_path / "x.tsv")]
    assert image_splits(argv) == 1
    assert "n00000004" in capsys.readouterr().err
    assert not (tmp_path / "x.tsv").exists()


def test_summary_counts_concepts_and_images_per_split(tmp_path):
    table = tmp_path / "l1.tsv"
    rows = [("a/1", "a", 0, "train"), ("a/2", "a", 0, "train"), ("b/1", "b", 1, "train"),
            ("a/3", "a", 0, "test"), ("b/2", "b", 1, "test")]
    write_tsv(table, ("path", "wnid", "label", "split"), rows)
    assert split_summary(["--table", f"l1={table}", "--output", str(tmp_path / "summary.tsv")]) == 0
    assert read_tsv(tmp_path / "summary.tsv") == [{
        "dataset": "l1", "concepts": "2",
        "train_images": "3", "train_per_concept_min": "1", "train_per_concept_max": "2",
        "test_images": "2", "test_per_concept_min": "1", "test_per_concept_max": "1",
    }]


# bad roots and concept lists ----------------------------------------------------------

def test_missing_root_is_named_with_the_setting(tmp_path):
    with pytest.raises(SplitError, match=r"'.*nowhere' \(data.in21k_root\) is not a folder"):
        level_rows(tmp_path / "nowhere", ["n00000001"], 10, 1300, seed=0)
    with pytest.raises(SplitError, match=r"\(data.in1k_root\) is not a folder"):
        in1k_rows(tmp_path / "nowhere", ["n00000001"])


def test_a_root_without_wnid_folders_is_not_taken_for_in21k(tmp_path):
    (tmp_path / "images" / "cats").mkdir(parents=True)
    with pytest.raises(SplitError, match=r"no wnid subfolders.*<root>/<wnid>/\*\.JPEG"):
        level_rows(tmp_path / "images", ["n00000001"], 10, 1300, seed=0)


def test_an_in1k_root_needs_train_and_val(tmp_path, in1k):
    (tmp_path / "only_train" / "train").mkdir(parents=True)
    with pytest.raises(SplitError, match=r"has no val/ folder.*<root>/val/<wnid>/\*\.JPEG"):
        in1k_rows(tmp_path / "only_train", ["n10000001"])
    with pytest.raises(SplitError, match=r"n10000009: folder '.*val/n10000009' is missing"):
        make_concept(in1k / "train", "n10000009", 2)
        in1k_rows(in1k, ["n10000009"])


def test_a_flat_in1k_validation_folder_is_explained(in1k):
    (in1k / "val" / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"")
    in1k_rows(in1k, ["n10000001"])  # stray files beside the class folders are ignored
    flat = in1k.parent / "flat"
    make_concept(flat / "train", "n10000001", 2)
    (flat / "val").mkdir()
    (flat / "val" / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"")
    with pytest.raises(SplitError, match=r"flat folder; sort them into val/<wnid>/"):
        in1k_rows(flat, ["n10000001"])


def test_missing_or_empty_synset_folder(in21k):
    with pytest.raises(SplitError, match=r"n00000007: folder '.*in21k/n00000007' is missing"):
        level_rows(in21k, ["n00000001", "n00000007"], 10, 1300, seed=0)
    (in21k / "n00000008").mkdir()
    (in21k / "n00000008" / "readme.txt").write_text("no images")
    with pytest.raises(SplitError, match=r"n00000008.*holds no \.JPEG"):
        level_rows(in21k, ["n00000008"], 10, 1300, seed=0)


def test_concept_lists_are_checked(tmp_path):
    path = tmp_path / "l1.txt"
    write_lines(path, ["n00000001", "dog"])
    with pytest.raises(SplitError, match=r"l1.txt' should hold one wnid.*'dog'"):
        read_concepts(path)
    write_lines(path, ["n00000001", "n00000001"])
    with pytest.raises(SplitError, match="twice"):
        read_concepts(path)
    with pytest.raises(SplitError, match="run the levels stage"):
        read_concepts(tmp_path / "absent.txt")


# the authors' split pickle ----------------------------------------------------------------

def write_pickle(path: Path, content) -> Path:
    with open(path, "wb") as stream:
        pickle.dump(content, stream)
    return path


def test_published_splits_are_used_as_given(in21k, tmp_path):
    published = write_pickle(tmp_path / "splits.pkl", {
        # the authors store numpy arrays of paths relative to the IN-21K root
        "n00000001": {
            "train": np.array([f"/n00000001/n00000001_{k}.JPEG" for k in range(3, 9)]),
            "test": np.array(["/n00000001/n00000001_0.JPEG", "/n00000001/n00000001_1.JPEG"]),
        },
        # bare file names are taken to be inside the concept's folder
        "n00000002": {"train": ["n00000002_5.JPEG"], "test": ["n00000002_7.JPEG"]},
        "n99999999": {"train": [], "test": []},
    })
    rows = published_rows(in21k, ["n00000001", "n00000002"], published)
    splits = by_concept(rows)
    assert splits["n00000001"]["test"] == ["n00000001/n00000001_0.JPEG", "n00000001/n00000001_1.JPEG"]
    assert len(splits["n00000001"]["train"]) == 6
    assert splits["n00000002"] == {"train": ["n00000002/n00000002_5.JPEG"], "test": ["n00000002/n00000002_7.JPEG"]}


def test_published_splits_must_name_existing_files(in21k, tmp_path):
    published = write_pickle(tmp_path / "splits.pkl", {
        "n00000001": {"train": ["n00000001_1.JPEG"], "test": ["n00000001_99.JPEG"]},
    })
    with pytest.raises(SplitError, match=r"1 images of the published splits.*n00000001/n00000001_99.JPEG"):
        published_rows(in21k, ["n00000001"], published)


def test_published_splits_must_cover_the_level(in21k, tmp_path):
    published = write_pickle(tmp_path / "splits.pkl", {"n00000001": {"train": ["a.JPEG"], "test": ["b.JPEG"]}})
    with pytest.raises(SplitError, match=r"no split for 1 of the dataset's concepts \(e.g. n00000002\)"):
        published_rows(in21k, ["n00000001", "n00000002"], published)


@pytest.mark.parametrize(
    "content, message",
    [
        ([["n00000001"]], "holds a list, not a dict"),
        ({"n00000001": ["a.JPEG"]}, r"entry 'n00000001' is not"),
        ({"n00000001": {"train": ["a.JPEG"]}}, r"entry 'n00000001' is not"),
        ({"n00000001": {"train": ["a.JPEG"], "test": [3]}}, r"entry 'n00000001' is not"),
        ({1: {"train": [], "test": []}}, r"entry 1 is not"),
    ],
)
def test_published_splits_of_the_wrong_shape(tmp_path, content, message):
    path = write_pickle(tmp_path / "splits.pkl", content)
    with pytest.raises(SplitError, match=message):
        load_published_splits(path)


def test_published_splits_that_are_no_pickle(tmp_path):
    (tmp_path / "splits.pkl").write_text("wnid,train,test\n")
    with pytest.raises(SplitError, match=r"'.*splits.pkl' is not a readable pickle"):
        load_published_splits(tmp_path / "splits.pkl")
    with pytest.raises(SplitError, match=r"does not exist.*or to null"):
        load_published_splits(tmp_path / "absent.pkl")


# the rules on ImageNet-shaped folders ----------------------------------------------------

@pytest.mark.e2e
def test_rules_split_imagenet_folders_by_draw_and_by_published_pickle(tmp_path):
    """mode: imagenet with small levels: drawn splits from data roots, then the authors'
    pickles (levels and splits) replacing them."""
    from conftest import copy_workflow, snakemake

    workdir = copy_workflow(tmp_path / "workflow-copy")
    in21k, in1k = tmp_path / "in21k", tmp_path / "in1k"
    settings = (
        # the demo's pretrained network and its checkpoints are made only in demo mode
        "models: {demo_cnn: null, demo_clip: null, demo_cnn_training: null}\nresults: {baseline_model: demo_cnn_random}\n"
        # without the demo's image-text model, no zero-shot probe; the demo's stage lists name
        # demo_cnn: these stages run for the model left
        "probes: {kinds: [linear, knn], kind_models: {knn: null}}\nlabel_audit: {models: null}\n"
        "in1k_blurred: {models: null}\n"
        # 3 test images per concept leave no learnability task
        "analyses: {models: null, learnability: {enabled: false}, detection: {models: null}, concepts: {models: null}}\n"
        # one training image per IN-1K class: the pre-flight check would (rightly) refuse
        # config.yaml's class-balanced variant, which needs 12
        "balanced: {enabled: false}\n"
        # the demo fine-tunes IN-1K and L5; this run has no L5
        "finetune: {datasets: null}\n"
        f"mode: imagenet\ndatasets: [in1k, l1]\n"
        f"data: {{in1k_root: {in1k}, in21k_root: {in21k}}}\n"
        f"splits: {{test_per_concept: 3, max_train_per_concept: 4}}\n"
    )
    # level sets need word vectors and more concepts than these small levels leave
    (workdir / "imagenet.yaml").write_text(settings + "levels: {concepts_per_level: 10}\nlevel_sets: {sets: []}\n")
    snakemake(workdir, "results/levels/l1.txt", "--cores", "1", "--configfile", "imagenet.yaml")
    level = read_concepts(workdir / "results/levels/l1.txt")
    for wnid in level:
        make_concept(in21k, wnid, 9)
    for wnid in read_concepts(workdir / "results/levels/in1k.txt"):
        make_concept(in1k / "train", wnid, 1)
        make_concept(in1k / "val", wnid, 1)

    snakemake(workdir, "results/splits/l1.tsv", "results/splits/in1k.tsv", "--cores", "1", "--configfile", "imagenet.yaml")
    rows = read_tsv(workdir / "results/splits/l1.tsv")
    assert len(rows) == 70 and sum(row["split"] == "test" for row in rows) == 30
    assert all((in21k / row["path"]).is_file() for row in rows)
    in1k_rows_written = read_tsv(workdir / "results/splits/in1k.tsv")
    assert [row["path"].split("/")[0] for row in in1k_rows_written] == ["train"] * 1000 + ["val"] * 1000

    levels = [read_concepts(workdir / f"results/levels/l{k}.txt") for k in range(1, 6)]
    write_pickle(tmp_path / "levels.pkl", levels)
    write_pickle(tmp_path / "splits.pkl", {
        wnid: {"train": [f"/{wnid}/{wnid}_{k}.JPEG" for k in range(2, 9)], "test": [f"/{wnid}/{wnid}_{k}.JPEG" for k in range(2)]}
        for wnid in level
    })
    (workdir / "imagenet.yaml").write_text(
        settings + f"levels: {{concepts_per_level: 10, source: published, "
        f"published_levels: {tmp_path / 'levels.pkl'}, published_splits: {tmp_path / 'splits.pkl'}}}\n"
        "level_sets: {sets: []}\n"
    )
    snakemake(workdir, "results/splits/l1.tsv", "--cores", "1", "--configfile", "imagenet.yaml")
    rows = read_tsv(workdir / "results/splits/l1.tsv")
    assert len(rows) == 90
    assert sorted(row["path"] for row in rows if row["split"] == "test") == sorted(
        f"{wnid}/{wnid}_{k}.JPEG" for wnid in level for k in range(2)
    )


def test_missing_images_match_a_release_in_another_layout_and_extension():
    """IN-1K from the ILSVRC2012 tars against the face-blurred release's folders of .jpg:
    the same image in both is not missing; only the one the blurred copy lacks counts."""
    reference = [
        {"path": "ILSVRC2012_img_train.tar/n01440764.tar/n01440764_1.JPEG", "wnid": "n01440764", "split": "train"},
        {"path": "ILSVRC2012_img_train.tar/n01440764.tar/n01440764_2.JPEG", "wnid": "n01440764", "split": "train"},
        {"path": "ILSVRC2012_img_val.tar/ILSVRC2012_val_00000001.JPEG", "wnid": "n01440764", "split": "test"},
    ]
    blurred = [
        {"path": "train_blurred/n01440764/n01440764_1.jpg", "wnid": "n01440764", "split": "train"},
        {"path": "val_blurred/n01440764/ILSVRC2012_val_00000001.jpg", "wnid": "n01440764", "split": "test"},
    ]
    assert missing_images(reference, blurred) == {"train": 1, "test": 0}
