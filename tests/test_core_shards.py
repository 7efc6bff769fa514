"""The Hugging Face Hub's copies indexed and read in place (core/shards.py,
core/parquet_images.py), on generated copies of each shape: a 1k-style one (``filename``
json, two-digit validation shards), a WEBP one (json without a wnid), parquet; the bytes
read equal the files', and the images decode to the same pixels as from folders. The
22k-style copy runs end to end in test_imagenet_hub.py."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest
from imagenet_world import synset_images, val_set, write_info, write_parquet_files, write_tar, write_wds_shards
from PIL import Image

from imagenet_cog.core.archives import ArchiveError, ImageFiles, ImageIndex, TruncatedMemberError
from imagenet_cog.core.image_roots import ImageRoot, ImageRootError, detect_layout, index_archives, resolve_release
from imagenet_cog.core.parquet_images import SHARD_SCANS
from imagenet_cog.core.shards import build_shard_index, class_list, sample_wnid, shard_download

IN1K = ["n01440764", "n01443537", "n01484850"]
W21 = ["n01318894", "n01321123"]


def pixels(source) -> np.ndarray:
    with Image.open(source) as image:
        return np.asarray(image.convert("RGB"))


def index_root(source: str, root, layout: str, output):
    summary = build_shard_index(source, root, index_archives(source, root, layout), output, layout,
                                scan=SHARD_SCANS[layout])
    return summary, ImageRoot(source, root, layout, output)


def test_a_1k_wds_copy_with_two_digit_validation_shards_reads_by_original_name(tmp_path):
    train, val = synset_images(IN1K, 3, seed=1, size=40), synset_images(IN1K, 2, seed=2, size=40)
    labels, files = val_set(val)
    by_class = {wnid: {name: files[name] for name, of in labels.items() if of == wnid} for wnid in IN1K}
    root = tmp_path / "imagenet-1k-wds"
    classes = class_list("imagenet1k")
    write_wds_shards(root, "imagenet1k", "train", train, 2, style="1k", classes=classes)
    write_wds_shards(root, "imagenet1k", "validation", by_class, 2, style="1k", digits=2, classes=classes)
    assert detect_layout("in1k", root) == "wds"
    assert "imagenet1k-validation-01.tar" in index_archives("in1k", root, "wds")
    summary, images = index_root("in1k", root, "wds", tmp_path / "index.h5")
    assert summary.images == len(IN1K) * 5 and summary.folders == 2 * len(IN1K)
    val_images = images.part_images(IN1K, "val")
    assert val_images[IN1K[0]].paths == sorted(f"val/{IN1K[0]}/{name}" for name in by_class[IN1K[0]])
    paths = images.part_images(IN1K, "train")[IN1K[1]].paths + val_images[IN1K[2]].paths
    opener = ImageFiles(root, tmp_path / "index.h5").opener(paths)
    for position, path in enumerate(paths):
        part, wnid, name = path.split("/")
        assert opener(position).getvalue() == (train if part == "train" else by_class)[wnid][name]


def test_a_webp_copy_without_wnids_in_its_json_is_read_by_key_and_decodes(tmp_path):
    images = synset_images(W21, 3, seed=4, size=40)
    root = tmp_path / "imagenet-w21-webp-wds"
    write_wds_shards(root, "imagenet_w21_webp", "train", images, 2, style="bare", extension="webp")
    assert detect_layout("in21k", root) == "wds" and resolve_release("auto", root) == "winter21"
    with pytest.raises(ImageRootError, match="set data.in21k_release to winter21 or auto"):
        resolve_release("fall11", root)
    _, index = index_root("in21k", root, "wds", tmp_path / "index.h5")
    paths = index.concept_images(W21)[W21[0]].paths
    assert paths == [f"{W21[0]}/{name}" for name in sorted(images[W21[0]])]
    reader = ImageIndex(tmp_path / "index.h5").reader(paths)
    folder = tmp_path / "folders" / W21[0]
    folder.mkdir(parents=True)
    for position, path in enumerate(paths):
        data = reader.read(position)
        assert data[:4] == b"RIFF" and data[8:12] == b"WEBP"
        (folder / path.split("/")[1]).write_bytes(data)
        assert np.array_equal(pixels(io.BytesIO(data)), pixels(folder / path.split("/")[1]))
    assert reader.describe(0).endswith(f"member {paths[0].split('/')[1].rsplit('.', 1)[0]}.webp")


def test_a_parquet_copy_reads_rows_by_row_group(tmp_path):
    train = synset_images(IN1K, 5, seed=6, size=40)
    root = tmp_path / "imagenet-1k"
    write_parquet_files(root, "train", train, 2, class_list("imagenet"), row_group_size=2)
    write_parquet_files(root, "validation", synset_images(IN1K, 1, seed=7, size=40), 1, class_list("imagenet"))
    write_parquet_files(root, "test", synset_images(IN1K, 1, seed=8, size=40), 1, class_list("imagenet"))
    assert detect_layout("in1k", root) == "parquet"
    assert [name.split("-")[0] for name in index_archives("in1k", root, "parquet")] == ["data/train", "data/train",
                                                                                          "data/validation"]
    _, index = index_root("in1k", root, "parquet", tmp_path / "index.h5")
    paths = [path for listing in index.part_images(IN1K, "train").values() for path in listing.paths]
    reader = ImageIndex(tmp_path / "index.h5").reader(paths)
    for position in reversed(range(len(paths))):  # more row groups than the reader keeps
        _, wnid, name = paths[position].split("/")
        assert reader.read(position) == train[wnid][name]
    assert "row group" in reader.describe(0) and reader.describe(0).endswith(f"_{IN1K[0]}.JPEG)")


def test_a_sample_without_a_class_stops_the_index_naming_shard_and_key(tmp_path):
    root = tmp_path / "wds"
    jpeg = synset_images(IN1K[:1], 1, size=40)[IN1K[0]]
    files = {"photo_0001.jpg": next(iter(jpeg.values())), "photo_0001.json": json.dumps({"width": 40}).encode()}
    write_tar(root / "mycopy-train-0000.tar", files)
    (tmp_path / "index.h5").write_bytes(b"an index built before")
    with pytest.raises(ArchiveError, match=r"mycopy-train-0000\.tar: sample photo_0001 has no class"):
        build_shard_index("in21k", root, ["mycopy-train-0000.tar"], tmp_path / "index.h5", "wds")
    assert (tmp_path / "index.h5").read_bytes() == b"an index built before"


def test_a_truncated_shard_is_noted_and_its_cut_image_flagged_with_shard_and_member(tmp_path):
    images = synset_images(W21, 3, seed=9, size=40)
    root = tmp_path / "wds"
    lengths = write_wds_shards(root, "imagenet22k", "train", images, 1, classes=class_list("imagenet22k"))
    shard = root / next(iter(lengths))
    with tarfile.open(shard) as archive:
        members = [info for info in archive.getmembers() if info.name.endswith(".jpg")]
    last = members[-1]
    shard.write_bytes(shard.read_bytes()[: last.offset_data + last.size // 2])
    summary, index = index_root("in21k", root, "wds", tmp_path / "index.h5")
    assert summary.truncated == (shard.name,)
    wnid, key = next((wnid, name.rsplit(".", 1)[0]) for wnid, files in images.items() for name in files
                     if name.rsplit(".", 1)[0] == last.name.rsplit(".", 1)[0])
    reader = ImageIndex(tmp_path / "index.h5").reader([f"{wnid}/{key}.JPEG"])
    with pytest.raises(TruncatedMemberError, match=f"{shard} member {key}.jpg: .* the archive ends there"):
        reader.read(0)


def test_the_wnid_of_a_sample_in_the_order_the_copies_give_it():
    assert sample_wnid("x_1", {"class_name": "n00000002", "label": 0}, 5, ["n00000001"]) == "n00000002"
    assert sample_wnid("ILSVRC2012_val_00000001", {"filename": "n00000003/ILSVRC2012_val_00000001.JPEG"}, 0,
                       ["n00000001"]) == "n00000003"
    assert sample_wnid("x_1", {}, 1, ["n00000001", "n00000004"]) == "n00000004"
    assert sample_wnid("n00000005_7", {}, 1, ["n00000001", "n00000004"]) == "n00000005"
    assert sample_wnid("n00000005_7", {}, None, None) == "n00000005"
    assert sample_wnid("x_1", {}, 9, ["n00000001"]) is None


def test_a_copy_of_which_only_info_json_is_downloaded_says_every_shard_and_its_bytes(tmp_path):
    """needed_synsets before the download: _info.json lists every shard (all needed: the
    samples are shuffled across them), the bytes when a split gives num_bytes."""
    root = tmp_path / "imagenet-22k-wds"
    root.mkdir()
    lengths = {"train": {"imagenet22k-train-0000.tar": 3, "imagenet22k-train-0001.tar": 2},
               "validation": {"imagenet22k-validation-0000.tar": 1}}
    write_info(root, lengths)
    assert detect_layout("in21k", root) == "wds" and resolve_release("auto", root) == "fall11"
    download = shard_download(root, [])
    assert download.shards == sorted(name for files in lengths.values() for name in files)
    assert download.samples == 6 and download.bytes is None
    info = json.loads((root / "_info.json").read_text())
    for split, size in (("train", 5_000), ("validation", 700)):
        info["splits"][split]["num_bytes"] = size
    (root / "_info.json").write_text(json.dumps(info))
    assert shard_download(root, []).bytes == 5_700
