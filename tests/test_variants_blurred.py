"""IN-1K-blurred: the split follows the files present, missing images are counted, bad roots fail clearly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from imagenet_cog.core.io import read_tsv, write_lines
from imagenet_cog.demo.blurred import blurred_copy

WNIDS = ["n01440764", "n01443537"]


def in1k_tree(root: Path, train: int = 5, val: int = 3) -> None:
    rng = np.random.default_rng(0)
    for wnid in WNIDS:
        for folder, count in (("train", train), ("val", val)):
            (root / folder / wnid).mkdir(parents=True)
            for index in range(count):
                pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / folder / wnid / f"{wnid}_{index}.JPEG")


def split(tmp_path: Path, dataset: str, root: Path, setting: str) -> subprocess.CompletedProcess:
    concepts = tmp_path / "in1k.txt"
    write_lines(concepts, WNIDS)
    return subprocess.run(
        [sys.executable, "-m", "imagenet_cog", "image-splits", "--dataset", dataset, "--concepts", str(concepts),
         "--root", str(root), "--root-setting", setting, "--output", str(tmp_path / f"{dataset}.tsv")],
        capture_output=True, text=True, check=False,
    )


def test_a_blurred_root_with_missing_images_gives_the_right_counts(tmp_path):
    in1k = tmp_path / "in1k"
    in1k_tree(in1k)
    left_out = blurred_copy(in1k, tmp_path / "blurred", dropped=3, seed=0)
    assert len(left_out) == 3
    assert split(tmp_path, "in1k", in1k, "data.in1k_root").returncode == 0
    assert split(tmp_path, "in1k_blurred", tmp_path / "blurred", "data.in1k_blurred_root").returncode == 0
    blurred = read_tsv(tmp_path / "in1k_blurred.tsv")
    assert {row["path"] for row in blurred} == {row["path"] for row in read_tsv(tmp_path / "in1k.tsv")} - set(left_out)
    # labels are IN-1K's: the same wnids in the same order
    assert {(row["wnid"], row["label"]) for row in blurred} == {(WNIDS[0], "0"), (WNIDS[1], "1")}
    subprocess.run(
        [sys.executable, "-m", "imagenet_cog", "split-summary", "--table", f"in1k={tmp_path / 'in1k.tsv'}",
         "--table", f"in1k_blurred={tmp_path / 'in1k_blurred.tsv'}", "--missing-vs", "in1k_blurred=in1k",
         "--output", str(tmp_path / "summary.tsv")],
        check=True,
    )
    summary = {row["dataset"]: row for row in read_tsv(tmp_path / "summary.tsv")}
    missing_train = sum(path.startswith("train/") for path in left_out)
    assert summary["in1k_blurred"]["train_missing_vs_in1k"] == str(missing_train)
    assert summary["in1k_blurred"]["test_missing_vs_in1k"] == str(3 - missing_train)
    assert int(summary["in1k_blurred"]["train_images"]) == 10 - missing_train
    assert summary["in1k"]["train_missing_vs_in1k"] == ""


def test_the_blurred_copy_blurs_the_centre_and_keeps_the_border(tmp_path):
    in1k = tmp_path / "in1k"
    in1k_tree(in1k, train=1, val=1)
    blurred_copy(in1k, tmp_path / "blurred", dropped=0, seed=0)
    path = f"train/{WNIDS[0]}/{WNIDS[0]}_0.JPEG"
    original = np.asarray(Image.open(in1k / path), dtype=np.float32)
    copy = np.asarray(Image.open(tmp_path / "blurred" / path), dtype=np.float32)
    centre = (slice(12, 20), slice(12, 20))
    assert copy[centre].std() < 0.5 * original[centre].std()
    assert np.abs(copy[:4] - original[:4]).mean() < 20  # JPEG noise only


def test_a_blurred_root_without_class_folders_names_the_setting(tmp_path):
    root = tmp_path / "flat"
    (root / "train").mkdir(parents=True)
    (root / "val").mkdir()
    Image.new("RGB", (8, 8)).save(root / "train" / "image.JPEG")
    failed = split(tmp_path, "in1k_blurred", root, "data.in1k_blurred_root")
    assert failed.returncode == 1
    assert "data.in1k_blurred_root" in failed.stderr and "no class folders train/<wnid>/" in failed.stderr
    assert not (tmp_path / "in1k_blurred.tsv").exists()


def test_figure_rows_put_in1k_blurred_in_place_of_in1k():
    """Fig. 8: the levels of the linear probe at N = all, IN-1K-b's own seeds first."""
    import pandas as pd

    from imagenet_cog.results.summary import summarise, with_level_set
    from imagenet_cog.variants.blurred import blurred_levels

    models = {"m": {"label": "M"}}
    runs = pd.DataFrame([
        {"model": "m", "probe": "linear", "dataset": dataset, "shots": shots, "seed": seed,
         "test_top1": top1, "test_top5": 90.0, "random_weights": False, "probe_s": 1.0}
        for dataset, top1 in (("in1k", 70.0), ("l1", 60.0), ("l5", 40.0))
        for shots in ("1", "all") for seed in ("22", "37")
    ])
    summary = with_level_set(summarise(runs, models, ["in1k", "l1", "l5"], ["1", "all"], ["22", "37"]))
    blurred_runs = pd.DataFrame([{"model": "m", "probe": "linear", "dataset": "in1k_blurred", "shots": "all", "seed": "22",
                                  "test_top1": 69.0, "test_top5": 90.0, "random_weights": False, "probe_s": 1.0}])
    rows = blurred_levels(summary, blurred_runs, models, ["22"])
    assert rows["dataset"].tolist() == ["in1k_blurred", "l1", "l5"]
    assert rows["mean"].tolist() == [69.0, 60.0, 40.0] and set(rows["shots"]) == {"all"}
