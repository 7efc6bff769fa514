"""Image roots in every layout a release comes in: detected, indexed, and listing the same
images per concept as the extracted folders do."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from imagenet_world import (
    synset_images,
    write_folders,
    write_ilsvrc2012,
    write_in1k_folders,
    write_outer_tar,
    write_synset_tars,
    write_tar,
)

from conftest import REPOSITORY
from imagenet_cog.core.image_layouts import IMAGE_LAYOUTS, LAYOUT_NAMES, SHARD_LAYOUTS, SOURCE_LAYOUTS, SOURCES
from imagenet_cog.core.image_roots import (
    DETECTORS,
    ImageRoot,
    ImageRootError,
    check_index_current,
    detect_layout,
    image_count,
    index_archives,
    resolve_layout,
)
from imagenet_cog.core.parquet_images import SHARD_SCANS

IN21K = ["n01530575", "n01531178", "n01532829", "n02084071"]
IN1K = ["n01440764", "n01443537", "n02119789"]


def index(tmp_path, source, root, layout):
    output = tmp_path / f"{source}-{layout}.h5"
    result = subprocess.run(
        [sys.executable, "-m", "imagenet_cog", "index-images", "--source", source, "--root", str(root),
         "--layout", layout, "--output", str(output)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return output


@pytest.fixture(scope="module")
def in21k(tmp_path_factory):
    """The same synsets extracted, as a folder of synset tars, and as one outer tar."""
    base = tmp_path_factory.mktemp("in21k")
    images = synset_images(IN21K, {"n01530575": 6, "n01531178": 3, "n01532829": 5, "n02084071": 4})
    return {
        "images": images,
        "folders": write_folders(base / "folders", images),
        "tars": write_synset_tars(base / "winter21_whole", images),
        "tar": write_outer_tar(base / "winter21_whole.tar", images),
    }


@pytest.fixture(scope="module")
def in1k(tmp_path_factory):
    base = tmp_path_factory.mktemp("in1k")
    train = synset_images(IN1K, 4, seed=1)
    val = synset_images(IN1K, 2, seed=2)
    return {
        "train": train, "val": val,
        "tars": base / "ilsvrc2012", "labels": write_ilsvrc2012(base / "ilsvrc2012", train, val),
        "folders": write_in1k_folders(base / "folders", train, val),
    }


def test_layouts_are_detected(in21k, in1k):
    assert [detect_layout("in21k", in21k[layout]) for layout in ("folders", "tars", "tar")] == ["folders", "tars", "tar"]
    assert detect_layout("in1k", in1k["folders"]) == "folders"
    assert detect_layout("in1k", in1k["tars"]) == "tars"
    assert resolve_layout("in21k", in21k["tars"], "tars") == "tars"


def test_roots_that_fit_no_layout_are_named_with_the_key(tmp_path, in21k):
    (tmp_path / "download").mkdir()
    (tmp_path / "download" / "winter21_whole.tar.gz").write_bytes(b"\x1f\x8b\x08rest")
    with pytest.raises(ImageRootError, match=r"data.in21k_root = .*download' holds neither synset folders .* it holds "
                                             r"winter21_whole.tar.gz: point data.in21k_root at that tar .*data.in21k_layout"):
        detect_layout("in21k", tmp_path / "download")
    with pytest.raises(ImageRootError, match=r"is gzip-compressed.*'gunzip winter21_whole.tar.gz'.*'tar xzf"):
        detect_layout("in21k", tmp_path / "download" / "winter21_whole.tar.gz")
    mixed = write_folders(tmp_path / "mixed", {"n01530575": {"a.JPEG": b"x"}})
    write_tar(mixed / "n01531178.tar", {"b.JPEG": b"y"})
    with pytest.raises(ImageRootError, match=r"both synset folders .* set data.in21k_layout to folders or tars"):
        detect_layout("in21k", mixed)
    (tmp_path / "blurred").mkdir()
    (tmp_path / "blurred" / "train_blurred.tar.gz").write_bytes(b"\x1f\x8b")
    with pytest.raises(ImageRootError, match=r"data.in1k_blurred_root = .* holds train_blurred.tar.gz, gzip-compressed"):
        detect_layout("in1k_blurred", tmp_path / "blurred")
    with pytest.raises(ImageRootError, match=r"data.in21k_layout is tar, but data.in21k_root = .* is not a file"):
        resolve_layout("in21k", in21k["tars"], "tar")
    with pytest.raises(ImageRootError, match=r"data.in1k_layout is 'tar'; it must be auto or one of folders, tars"):
        resolve_layout("in1k", tmp_path, "tar")
    with pytest.raises(ImageRootError, match=r"data.in1k_root = .*nowhere' does not exist"):
        detect_layout("in1k", tmp_path / "nowhere")


def test_every_in21k_layout_lists_the_same_images_per_concept(tmp_path, in21k):
    roots = {"folders": ImageRoot("in21k", in21k["folders"], "folders")}
    for layout in ("tars", "tar"):
        roots[layout] = ImageRoot("in21k", in21k[layout], layout, index=index(tmp_path, "in21k", in21k[layout], layout))
    wanted = [*IN21K, "n09999999"]
    listings = {layout: root.concept_images(wanted) for layout, root in roots.items()}
    for wnid, files in in21k["images"].items():
        names = {layout: [path.rsplit("/", 1)[1] for path in listing[wnid].paths] for layout, listing in listings.items()}
        assert names["folders"] == names["tars"] == names["tar"] == sorted(files)
    assert listings["tars"]["n01530575"].paths[0] == "n01530575.tar/n01530575_1.JPEG"
    assert listings["tar"]["n01530575"].paths[0] == "winter21_whole/n01530575.tar/n01530575_1.JPEG"
    assert listings["folders"]["n01530575"].paths[0] == "n01530575/n01530575_1.JPEG"
    assert all(listing["n09999999"] is None for listing in listings.values())
    assert image_count(listings["tar"]["n01532829"]) == 5


def test_ilsvrc2012_tars_list_the_official_sets_with_devkit_labels(tmp_path, in1k):
    folders = ImageRoot("in1k", in1k["folders"], "folders")
    tars = ImageRoot("in1k", in1k["tars"], "tars", index=index(tmp_path, "in1k", in1k["tars"], "tars"))
    for part in ("train", "val"):
        from_folders, from_tars = folders.part_images(IN1K, part), tars.part_images(IN1K, part)
        for wnid in IN1K:
            assert [p.rsplit("/", 1)[1] for p in from_folders[wnid].paths] == [p.rsplit("/", 1)[1] for p in from_tars[wnid].paths]
    val = tars.part_images(IN1K, "val")
    assert {path.split("/")[0] for wnid in IN1K for path in val[wnid].paths} == {"ILSVRC2012_img_val.tar"}
    assert {path.rsplit("/", 1)[1]: wnid for wnid in IN1K for path in val[wnid].paths} == in1k["labels"]
    assert tars.part_images(IN1K, "train")["n01440764"].paths[0] == "ILSVRC2012_img_train.tar/n01440764.tar/n01440764_1.JPEG"


def test_a_flat_val_tar_without_labels_is_named_with_the_fix(tmp_path, in1k):
    root = tmp_path / "nolabels"
    write_ilsvrc2012(root, in1k["train"], in1k["val"], devkit="none")
    tars = ImageRoot("in1k", root, "tars", index=index(tmp_path, "in1k", root, "tars"))
    with pytest.raises(ImageRootError, match=r"validation tar is flat, and no labels were found.*data.in1k_val_labels"):
        tars.part_images(IN1K, "val")
    (tmp_path / "other.txt").write_text("n01440764\n")
    other = ImageRoot("in1k", root, "tars", index=tars.index_path, val_labels=tmp_path / "other.txt")
    with pytest.raises(ImageRootError, match=r"5 images of .* have no label in .*other.txt \(first: "
                                             r"ILSVRC2012_img_val.tar/ILSVRC2012_val_00000002.JPEG\)"):
        other.part_images(IN1K, "val")


def test_the_blurred_release_as_gunzipped_tars_and_as_extracted_folders(tmp_path, in1k):
    files = {part: {f"{part}_blurred/{wnid}/{name[:-5]}.jpg": data for wnid, images in in1k[part].items()
                    for name, data in images.items()} for part in ("train", "val")}
    for part in ("train", "val"):
        write_tar(tmp_path / "tars" / f"{part}_blurred.tar", files[part])
        for name, data in files[part].items():
            (tmp_path / "folders" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "folders" / name).write_bytes(data)
    assert detect_layout("in1k_blurred", tmp_path / "tars") == "tars"
    assert detect_layout("in1k_blurred", tmp_path / "folders") == "folders"
    tars = ImageRoot("in1k_blurred", tmp_path / "tars", "tars", index=index(tmp_path, "in1k_blurred", tmp_path / "tars", "tars"))
    folders = ImageRoot("in1k_blurred", tmp_path / "folders", "folders")
    val = tars.part_images(IN1K, "val")["n01443537"].paths
    assert val == ["val_blurred.tar/val_blurred/n01443537/n01443537_1.jpg", "val_blurred.tar/val_blurred/n01443537/n01443537_2.jpg"]
    assert folders.part_images(IN1K, "val")["n01443537"].paths == ["val_blurred/n01443537/n01443537_1.jpg",
                                                                   "val_blurred/n01443537/n01443537_2.jpg"]


def test_an_index_out_of_date_with_its_folder_of_tars(tmp_path, in21k):
    root = write_synset_tars(tmp_path / "tars", {wnid: in21k["images"][wnid] for wnid in IN21K[:2]})
    image_root = ImageRoot("in21k", root, "tars", index=index(tmp_path, "in21k", root, "tars"))
    assert check_index_current(image_root) == []
    assert index_archives("in21k", root, "tars") == ["n01530575.tar", "n01531178.tar"]
    write_synset_tars(root, {wnid: in21k["images"][wnid] for wnid in IN21K[2:]})
    stat = (root / "n01530575.tar").stat()
    os.utime(root / "n01530575.tar", ns=(stat.st_atime_ns, stat.st_mtime_ns + 5))
    assert check_index_current(image_root) == ["n01530575.tar changed", "2 tars added (n01532829.tar, n02084071.tar)"]
    other = ImageRoot("in21k", in21k["tars"], "tars", index=image_root.index_path)
    with pytest.raises(ImageRootError, match=r"was built for '.*tars', not for data.in21k_root = '.*winter21_whole'"):
        other.concept_images(IN21K)


# the layouts table (core/image_layouts.py) --------------------------------------------------


def test_the_schema_offers_each_root_exactly_the_layouts_of_the_table():
    schema = yaml.safe_load((REPOSITORY / "workflow" / "schemas" / "config.schema.yaml").read_text())
    for source in SOURCES:
        assert schema["properties"]["data"]["properties"][f"{source}_layout"]["enum"] == ["auto", *SOURCE_LAYOUTS[source]], source


def test_every_layout_serves_a_root_and_every_hub_layout_has_an_index_scan():
    assert all(layout.sources and set(layout.sources) <= set(SOURCES) for layout in IMAGE_LAYOUTS)
    assert set(SHARD_SCANS) == set(SHARD_LAYOUTS)
    assert list(DETECTORS) == list(LAYOUT_NAMES)
    assert all(layout.indexed for layout in IMAGE_LAYOUTS if layout.hub)
