"""Class-balanced variant: K training images per concept everywhere, a subset of the default split, views only."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest
from test_features_views import extracted

from imagenet_cog.core.io import read_tsv, write_tsv
from imagenet_cog.features.store import read_features
from imagenet_cog.splits.image_splits import SplitError
from imagenet_cog.variants.balanced import balanced_rows


def default_table(concepts: dict[str, int], test: int = 3) -> list[dict[str, str]]:
    rows = []
    for label, (wnid, count) in enumerate(sorted(concepts.items())):
        rows += [{"path": f"{wnid}/{i:04d}.JPEG", "wnid": wnid, "label": str(label), "split": "train"} for i in range(count)]
    for label, (wnid, _) in enumerate(sorted(concepts.items())):
        rows += [{"path": f"{wnid}/t{i}.JPEG", "wnid": wnid, "label": str(label), "split": "test"} for i in range(test)]
    return rows


@pytest.mark.parametrize("concepts", [
    {"n01440764": 1300, "n01443537": 732, "n01484850": 900},  # IN-1K-like: 732 is the fewest
    {"n09999991": 1300, "n09999992": 1000, "n09999993": 782},  # a level
])
def test_exactly_k_training_images_per_concept_a_subset_of_the_default_split(concepts):
    table = default_table(concepts)
    kept = balanced_rows(table, 732, seed=0, where="t")
    train = Counter(row["wnid"] for row in kept if row["split"] == "train")
    assert set(train.values()) == {732} and set(train) == set(concepts)
    assert [row for row in kept if row["split"] == "test"] == [row for row in table if row["split"] == "test"]
    default_rows = [tuple(row.values()) for row in table]
    kept_rows = [tuple(row.values()) for row in kept]
    assert set(kept_rows) <= set(default_rows)
    assert kept_rows == [row for row in default_rows if row in set(kept_rows)]  # the default's order and labels
    assert balanced_rows(table, 732, seed=0, where="t") == kept
    assert balanced_rows(table, 732, seed=1, where="t") != kept


def test_a_concept_draw_depends_on_its_wnid_alone():
    alone = balanced_rows(default_table({"n00000001": 40}), 10, 0, "t")
    together = balanced_rows(default_table({"n00000001": 40, "n00000002": 40}), 10, 0, "t")
    assert [r["path"] for r in alone if r["split"] == "train"] == [
        r["path"] for r in together if r["split"] == "train" and r["wnid"] == "n00000001"
    ]


def test_too_few_training_images_is_an_error_naming_the_setting():
    with pytest.raises(SplitError, match=r"balanced.train_per_concept=732 .*n00000002: 700.*at most 700"):
        balanced_rows(default_table({"n00000001": 800, "n00000002": 700}), 732, 0, "splits/l3.tsv")


def test_the_balanced_view_holds_exactly_the_balanced_rows(tmp_path):
    _, table, merged = extracted(tmp_path, "l1", {"n00000001": 5, "n00000002": 4, "n00000003": 6}, shard_size=4)
    balanced = tmp_path / "balanced.tsv"
    subprocess.run([sys.executable, "-m", "imagenet_cog", "balanced-split", "--table", str(table),
                    "--train-per-concept", "3", "--seed", "0", "--output", str(balanced)], check=True)
    outputs = [tmp_path / "balanced-l1" / "train.h5", tmp_path / "balanced-l1" / "test.h5"]
    # the helper extracts train features only: the test view reads the same file, keeps no train row
    subprocess.run([sys.executable, "-m", "imagenet_cog", "balanced-view", "--dataset", "balanced-l1",
                    "--balanced-table", str(balanced), "--source", "l1", "--source-table", str(table),
                    "--source-features", str(merged), str(merged), "--outputs", *map(str, outputs)], check=True)
    view = read_features(outputs[0])
    kept = [row for row in read_tsv(balanced) if row["split"] == "train"]
    assert Counter(view.labels.tolist()) == {0: 3, 1: 3, 2: 3}
    # each row's first two features encode (concept, image number) of the image it came from
    assert [(int(f[0]), int(f[1])) for f in view.features] == [
        (int(row["wnid"][1:]), int(row["path"][-7:-5])) for row in kept
    ]
    assert view.metadata["dataset"] == "balanced-l1"


def test_too_few_images_fails_the_split_command_clearly(tmp_path):
    table = tmp_path / "l3.tsv"
    rows = default_table({"n00000001": 5})
    write_tsv(table, ["path", "wnid", "label", "split"], [list(row.values()) for row in rows])
    failed = subprocess.run([sys.executable, "-m", "imagenet_cog", "balanced-split", "--table", str(table),
                             "--train-per-concept", "6", "--seed", "0", "--output", str(tmp_path / "out.tsv")],
                            capture_output=True, text=True, check=False)
    assert failed.returncode == 1 and "balanced.train_per_concept=6" in failed.stderr
    assert not (tmp_path / "out.tsv").exists()
