"""The tar index: every image of tars of tars found with its offset, read back byte for byte;
truncated, changed and mismatched archives named with the fix."""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from concurrent.futures import ProcessPoolExecutor

import pytest
from imagenet_world import synset_images, tar_bytes, write_outer_tar, write_synset_tars, write_tar

from imagenet_cog.core.archives import (
    ArchiveError,
    ImageIndex,
    IndexMismatchError,
    StaleIndexError,
    TruncatedMemberError,
    build_index,
    folder_wnid,
)

WNIDS = ["n01440764", "n01443537", "n02084071"]


@pytest.fixture(scope="module")
def images():
    return synset_images(WNIDS, {"n01440764": 5, "n01443537": 3, "n02084071": 4})


def read_all(index: ImageIndex, paths):
    reader = index.reader(paths)
    return [reader.read(position) for position in range(len(paths))]


@pytest.mark.parametrize("processes", [1, 2])
def test_a_folder_of_synset_tars_and_one_outer_tar_give_every_image_back(tmp_path, images, processes):
    write_synset_tars(tmp_path / "tars", images)
    write_outer_tar(tmp_path / "winter21_whole.tar", images)
    folder = build_index(tmp_path / "tars", sorted(os.listdir(tmp_path / "tars")), tmp_path / "tars.h5",
                         processes=processes)
    outer = build_index(tmp_path / "winter21_whole.tar", ["."], tmp_path / "outer.h5", processes=processes)
    assert (folder.archives, folder.folders, folder.images) == (3, 3, 12)
    assert (outer.archives, outer.folders, outer.images) == (1, 3, 12)
    assert not folder.truncated and not outer.truncated
    for index_path, prefix in ((tmp_path / "tars.h5", ""), (tmp_path / "outer.h5", "winter21_whole/")):
        index = ImageIndex(index_path)
        for wnid, files in images.items():
            (found,) = index.folders_of(wnid)
            assert found.path == f"{prefix}{wnid}.tar"
            # sorted as a folder listing sorts them
            assert index.names([found]) == [sorted(files)]
            paths = [f"{found.path}/{name}" for name in files]
            assert read_all(index, paths) == list(files.values())
        assert index.wnid_counts() == {wnid: len(files) for wnid, files in images.items()}


def test_flat_tars_and_class_directories_in_one_tar(tmp_path, images):
    # the validation tar is flat; a gunzipped val_blurred.tar holds val_blurred/<wnid>/*.jpg
    flat = {f"ILSVRC2012_val_{n:08d}.JPEG": data for n, data in enumerate(images["n01440764"].values(), start=1)}
    write_tar(tmp_path / "val.tar", flat)
    write_tar(tmp_path / "val_blurred.tar", {f"./val_blurred/{wnid}/{name[:-5]}.jpg": data
                                             for wnid, files in images.items() for name, data in files.items()})
    build_index(tmp_path, ["val.tar", "val_blurred.tar"], tmp_path / "index.h5")
    index = ImageIndex(tmp_path / "index.h5")
    assert index.folder("val.tar").wnid == "" and index.folder("val.tar").count == 5
    blurred = index.folders_of("n01443537")
    assert [(folder.path, folder.member_dir) for folder in blurred] == [
        ("val_blurred.tar/val_blurred/n01443537", "val_blurred/n01443537")]
    assert read_all(index, ["val_blurred.tar/val_blurred/n01443537/n01443537_2.jpg", "val.tar/ILSVRC2012_val_00000003.JPEG"]) == [
        images["n01443537"]["n01443537_2.JPEG"], list(images["n01440764"].values())[2]]


def test_the_index_skips_what_is_not_an_image_and_keeps_the_last_of_a_name(tmp_path, images):
    data = list(images["n01440764"].values())
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, content in (("a.JPEG", data[0]), ("notes.txt", b"x"), ("a.JPEG", data[1]), ("b.png", data[2])):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    (tmp_path / "n01440764.tar").write_bytes(buffer.getvalue())
    summary = build_index(tmp_path, ["n01440764.tar"], tmp_path / "index.h5")
    assert (summary.images, summary.duplicates, summary.skipped) == (2, 1, 1)
    index = ImageIndex(tmp_path / "index.h5")
    assert read_all(index, ["n01440764.tar/a.JPEG", "n01440764.tar/b.png"]) == [data[1], data[2]]


def test_a_truncated_archive_is_flagged_and_its_cut_member_named(tmp_path, images):
    whole = tar_bytes({f"{wnid}.tar": tar_bytes(files) for wnid, files in images.items()})
    inner = tarfile.open(fileobj=io.BytesIO(whole))
    last = inner.getmembers()[-1]
    # cut the download in the middle of the last synset tar's second image
    nested = tarfile.open(fileobj=io.BytesIO(whole[last.offset_data:last.offset_data + last.size]))
    second = nested.getmembers()[1]
    cut = last.offset_data + second.offset_data + second.size // 2
    (tmp_path / "fall11_whole.tar").write_bytes(whole[:cut])
    summary = build_index(tmp_path / "fall11_whole.tar", ["."], tmp_path / "index.h5")
    assert summary.truncated == (".",)
    index = ImageIndex(tmp_path / "index.h5")
    assert bool(index.archive_truncated[0])
    # the complete synsets and the first image of the cut one read well; the cut image is
    # an OSError naming the archive and the member, as any unreadable image
    folder = index.folders_of("n02084071")[0]
    names = index.names([folder])[0]
    assert names[:2] == ["n02084071_1.JPEG", "n02084071_2.JPEG"]
    reader = index.reader([f"{folder.path}/{names[0]}", f"{folder.path}/{names[1]}"])
    assert reader.read(0) == images["n02084071"]["n02084071_1.JPEG"]
    with pytest.raises(TruncatedMemberError, match=r"fall11_whole.tar member n02084071_2.JPEG: \d+ of its \d+ bytes"):
        reader.read(1)


def test_a_changed_archive_makes_the_index_stale_with_the_fix_named(tmp_path, images):
    write_synset_tars(tmp_path / "tars", images)
    build_index(tmp_path / "tars", sorted(os.listdir(tmp_path / "tars")), tmp_path / "index.h5")
    index = ImageIndex(tmp_path / "index.h5")
    paths = [f"n01440764.tar/{name}" for name in images["n01440764"]]
    reader = index.reader(paths)
    stat = (tmp_path / "tars" / "n01440764.tar").stat()
    os.utime(tmp_path / "tars" / "n01440764.tar", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    # when a job starts, and in a worker that opens the archive afterwards
    with pytest.raises(StaleIndexError, match=r"n01440764.tar changed since the image index .*index.h5 was built.*Delete"):
        index.reader(paths)
    with pytest.raises(StaleIndexError, match="index.h5"):
        reader.read(0)
    # other archives are still read
    assert read_all(index, [f"n01443537.tar/{name}" for name in images["n01443537"]]) == list(images["n01443537"].values())


def test_an_index_of_other_bytes_is_caught_at_the_first_read(tmp_path, images):
    """Same size and time, other order of members: the header at each recorded offset names
    another member, so no image is ever read as another one."""
    files = images["n01440764"]
    path = write_tar(tmp_path / "n01440764.tar", files)
    build_index(tmp_path, ["n01440764.tar"], tmp_path / "index.h5")
    stat = path.stat()
    write_tar(path, dict(reversed(list(files.items()))))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    index = ImageIndex(tmp_path / "index.h5")
    reader = index.reader([f"n01440764.tar/{name}" for name in files])
    with pytest.raises(IndexMismatchError, match=r"n01440764.tar/n01440764_1.JPEG should be n01440764_1.JPEG .* holds "
                                                 r"'n01440764_5.JPEG'.*Delete .*index.h5"):
        reader.read(0)


def test_images_the_index_lacks_are_named_with_the_stale_split_table_fix(tmp_path, images):
    write_synset_tars(tmp_path, images)
    build_index(tmp_path, ["n01440764.tar"], tmp_path / "index.h5")
    with pytest.raises(ArchiveError, match=r"2 of the 3 images .* not in the image index .*first: n01440764.tar/x.JPEG.*"
                                           r"split table"):
        ImageIndex(tmp_path / "index.h5").locate(["n01440764.tar/x.JPEG", "n01440764.tar/n01440764_1.JPEG",
                                                  "n01443537.tar/n01443537_1.JPEG"])


def test_gzip_and_other_files_are_refused_with_the_fix(tmp_path, images):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("n01440764.tar")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"abc"))
    (tmp_path / "winter21_whole.tar.gz").write_bytes(buffer.getvalue())
    with pytest.raises(ArchiveError, match=r"gzip-compressed.*'gunzip winter21_whole.tar.gz'.*'tar xzf"):
        build_index(tmp_path, ["winter21_whole.tar.gz"], tmp_path / "index.h5")
    (tmp_path / "notes.tar").write_bytes(b"not a tar at all" * 100)
    with pytest.raises(ArchiveError, match="notes.tar is not a readable uncompressed tar"):
        build_index(tmp_path, ["notes.tar"], tmp_path / "index.h5")
    assert not (tmp_path / "index.h5").exists()
    (tmp_path / "index.h5").write_bytes(b"half an index")
    with pytest.raises(ArchiveError, match="not a readable HDF5 file.*delete it and re-run"):
        ImageIndex(tmp_path / "index.h5")


def _read_in_worker(reader):
    return [reader.read(position) for position in range(len(reader.paths))]


def test_a_reader_goes_to_worker_processes_and_opens_its_archives_there(tmp_path, images):
    write_outer_tar(tmp_path / "whole.tar", images, prefix="")
    build_index(tmp_path / "whole.tar", ["."], tmp_path / "index.h5")
    index = ImageIndex(tmp_path / "index.h5")
    paths = [f"{wnid}.tar/{name}" for wnid, files in images.items() for name in files]
    reader = index.reader(paths)
    reader.read(0)  # the parent has the archive open; a worker opens its own
    assert pickle.loads(pickle.dumps(reader))._descriptors == {}
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_read_in_worker, [reader, reader]))
    expected = [data for files in images.values() for data in files.values()]
    assert results == [expected, expected]
    reader.close()


def test_folder_wnids():
    assert folder_wnid("winter21_whole/n01440764.tar") == "n01440764"
    assert folder_wnid("train_blurred.tar/train_blurred/n01440764") == "n01440764"
    assert folder_wnid("ILSVRC2012_img_val.tar") == ""


def test_image_files_open_images_of_any_layout_by_path(tmp_path, images):
    from imagenet_world import write_folders
    from PIL import Image

    from imagenet_cog.core.archives import ImageFiles

    write_folders(tmp_path / "folders", images)
    write_synset_tars(tmp_path / "tars", images)
    build_index(tmp_path / "tars", sorted(os.listdir(tmp_path / "tars")), tmp_path / "index.h5")
    names = sorted(images["n01443537"])
    from_folders = ImageFiles(tmp_path / "folders").opener([f"n01443537/{name}" for name in names])
    from_tars = ImageFiles(tmp_path / "tars", tmp_path / "index.h5").opener([f"n01443537.tar/{name}" for name in names])
    for position in range(len(names)):
        with Image.open(from_folders(position)) as one, Image.open(from_tars(position)) as other:
            assert one.tobytes() == other.tobytes()
