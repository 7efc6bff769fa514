"""ILSVRC2012 validation labels from the devkit (through meta.mat or map_clsloc.txt, never by
sorting the ids) and from the usual labels files."""

from __future__ import annotations

import io
import tarfile

import pytest
from imagenet_world import devkit_files, devkit_order, write_devkit

from imagenet_cog.core.val_labels import LabelError, find_labels, read_val_labels

WNIDS = ["n01440764", "n01443537", "n02084071", "n02119789"]
VAL = ["n02084071", "n01440764", "n02119789", "n02084071", "n01443537"]


def expected():
    return {f"ILSVRC2012_val_{number:08d}": wnid for number, wnid in enumerate(VAL, start=1)}


@pytest.mark.parametrize("shape", ["tar.gz", "folder"])
def test_the_devkit_maps_ids_through_meta_mat(tmp_path, shape):
    path = write_devkit(tmp_path, WNIDS, VAL, shape)
    assert find_labels(tmp_path) == path
    assert read_val_labels(path) == expected()
    # the ids are the devkit's order, which is not the sorted wnids: sorting would mislabel
    assert devkit_order(WNIDS) != sorted(WNIDS)


def test_a_devkit_with_map_clsloc_instead_of_meta_mat(tmp_path):
    files = devkit_files(WNIDS, VAL)
    del files["data/meta.mat"]
    ids = {wnid: number for number, wnid in enumerate(devkit_order(WNIDS), start=1)}
    files["data/map_clsloc.txt"] = "".join(f"{wnid} {number} class_{number}\n" for wnid, number in ids.items()).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(f"ILSVRC2012_devkit_t12/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    (tmp_path / "devkit.tar.gz").write_bytes(buffer.getvalue())
    assert read_val_labels(tmp_path / "devkit.tar.gz") == expected()


def test_labels_files(tmp_path):
    (tmp_path / "LOC_val_solution.csv").write_text(
        "ImageId,PredictionString\n" + "".join(
            f"ILSVRC2012_val_{number:08d},{wnid} 1 2 3 4 {wnid} 5 6 7 8\n" for number, wnid in enumerate(VAL, start=1)))
    assert find_labels(tmp_path) == tmp_path / "LOC_val_solution.csv"
    (tmp_path / "synsets.txt").write_text("".join(f"{wnid}\n" for wnid in VAL))
    (tmp_path / "pairs.txt").write_text("".join(f"ILSVRC2012_val_{n:08d}.JPEG\t{w}\n" for n, w in enumerate(VAL, start=1)))
    for name in ("LOC_val_solution.csv", "synsets.txt", "pairs.txt"):
        assert read_val_labels(tmp_path / name) == expected()
    assert find_labels(tmp_path, tmp_path / "pairs.txt") == tmp_path / "pairs.txt"


def test_unreadable_labels_name_the_file_and_the_fix(tmp_path):
    (tmp_path / "caffe_val.txt").write_text("ILSVRC2012_val_00000001.JPEG 65\n")
    with pytest.raises(LabelError, match=r"caffe_val.txt, line 1: .* not '<file name> <wnid>'.*integer class index"):
        read_val_labels(tmp_path / "caffe_val.txt")
    with pytest.raises(LabelError, match=r"data.in1k_val_labels: .*absent.txt does not exist"):
        read_val_labels(tmp_path / "absent.txt")
    files = devkit_files(WNIDS, VAL)
    files["data/ILSVRC2012_validation_ground_truth.txt"] = b"1\n2000\n"
    for name, data in files.items():
        (tmp_path / "devkit" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "devkit" / name).write_bytes(data)
    with pytest.raises(LabelError, match=r"line 2 of data/ILSVRC2012_validation_ground_truth.txt is '2000'"):
        read_val_labels(tmp_path / "devkit")
    assert find_labels(tmp_path / "devkit" / "data") is None
