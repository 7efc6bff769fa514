"""ImageNet-1K as parquet files (the Hub's ``ILSVRC/imagenet-1k``), indexed and read in place.

Its ``data/{train,validation}-NNNNN-of-NNNNN.parquet`` hold the column ``image`` = {``bytes``,
``path``} and ``label`` (the index among the sorted wnids; the test set's are -1 and it is not
read). ``path`` is ``<original stem>_<wnid>.JPEG``: the index names the image by its original
file name (``n01440764_10026.JPEG``, ``ILSVRC2012_val_00000001.JPEG``) and takes the wnid from
the path, else from the label. It records each image's file, row group and row; only the
``path`` and ``label`` columns are read to build it, never the images.

An image is read by reading its row group's ``image`` column (pyarrow); the last few row
groups read are kept, as a split's images of one class lie in a few row groups. The read
checks that the row holds the image the index names.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict

import pyarrow as pa
import pyarrow.parquet as pq

from imagenet_cog.core.archives import WNID, ArchiveError, IndexMismatchError, MemberReader
from imagenet_cog.core.shards import ShardScan, ShardUnit, class_list

# <original stem>_<wnid>.<extension>, as the Hub's builder names each image
PARQUET_PATH = re.compile(r"^(?P<stem>.+)_(?P<wnid>n[0-9]{8})(?P<extension>\.[A-Za-z]+)$")
IN1K_COPY = "imagenet"


def parquet_image(path: str, label: int | None, classes) -> tuple[str, str | None]:
    """(original file name, wnid or None) of a parquet row's ``image.path`` and ``label``."""
    base = path.replace("\\", "/").rsplit("/", 1)[-1]
    match = PARQUET_PATH.match(base)
    if match:
        return match.group("stem") + match.group("extension"), match.group("wnid")
    if classes is not None and label is not None and 0 <= label < len(classes):
        return base, classes[label]
    prefix = base.split("_", 1)[0]
    return base, prefix if WNID.match(prefix) else None


def open_parquet(path: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as error:
        raise ArchiveError(f"{path} is not a readable parquet file ({error}); it is probably cut short (an "
                           f"interrupted download): download it again.") from None


def scan_parquet_file(unit: ShardUnit) -> ShardScan:
    """Every image of a parquet file with its wnid, row group and row (its ``path`` and
    ``label`` columns read, one row group at a time)."""
    parquet = open_parquet(unit.path)
    if "image" not in parquet.schema_arrow.names:
        raise ArchiveError(f"{unit.path} has no column 'image' ({', '.join(parquet.schema_arrow.names)}); it is not a "
                           f"file of the Hub's ILSVRC/imagenet-1k (docs/imagenet.md).")
    scan = ShardScan(unit, samples=parquet.metadata.num_rows)
    classes = class_list(IN1K_COPY)
    has_label = "label" in parquet.schema_arrow.names
    for group in range(parquet.metadata.num_row_groups):
        try:
            table = parquet.read_row_group(group, columns=["image.path", *(["label"] if has_label else [])])
        except (OSError, pa.ArrowException) as error:
            raise ArchiveError(f"{unit.path}: row group {group} cannot be read ({error}); download the file again.") from None
        paths = table.column("image").combine_chunks().field("path").to_pylist()
        labels = table.column("label").to_pylist() if has_label else [None] * len(paths)
        for row, (path, label) in enumerate(zip(paths, labels)):
            name, wnid = parquet_image(path or "", label, classes)
            if wnid is None:
                raise ArchiveError(
                    f"{unit.path}: row {row} of row group {group} (image {path!r}, label {label}) has no class: its path "
                    f"is not <stem>_<wnid>.JPEG and its label is not one of ImageNet-1K's 1,000 classes. The file is not "
                    f"of the Hub's ILSVRC/imagenet-1k, or it is damaged: download it again."
                )
            scan.add(name, wnid, row_group=group, row=row, member=path.encode())
    return scan.done()


class ParquetReader(MemberReader):
    """Reads images from parquet rows; picklable, each process opens a file once, when
    first read, and keeps the ``ROW_GROUPS_KEPT`` row groups read last."""

    ROW_GROUPS_KEPT = 8

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._forget_files()

    def _forget_files(self) -> None:
        self._files: dict[int, pq.ParquetFile] = {}
        self._groups: OrderedDict[tuple[int, int], pa.StructArray] = OrderedDict()
        self._files_process = os.getpid()

    def __getstate__(self):
        state = super().__getstate__()
        state["_files"], state["_groups"] = {}, OrderedDict()
        return state

    def _parquet(self, archive: int) -> pq.ParquetFile:
        self._descriptor(archive)  # checks the file is the one indexed (size, time)
        if self._files_process != os.getpid():  # a forked worker opens its own files
            self._forget_files()
        if archive not in self._files:
            self._files[archive] = open_parquet(self.archive_paths[archive])
        return self._files[archive]

    def _row_group(self, archive: int, group: int) -> pa.StructArray:
        parquet = self._parquet(archive)
        if (archive, group) not in self._groups:
            table = parquet.read_row_group(group, columns=["image"])
            self._groups[(archive, group)] = table.column("image").combine_chunks()
            while len(self._groups) > self.ROW_GROUPS_KEPT:
                self._groups.popitem(last=False)
        self._groups.move_to_end((archive, group))
        return self._groups[(archive, group)]

    def describe(self, position: int) -> str:
        locations = self.locations
        return (f"{self.archive_paths[int(locations.archive[position])]} row group {locations.row_group[position]} "
                f"row {locations.row[position]} ({locations.member[position]})")

    def read(self, position: int) -> bytes:
        archive, group = int(self.locations.archive[position]), int(self.locations.row_group[position])
        row = int(self.locations.row[position])
        images = self._row_group(archive, group)
        path = images.field("path")[row].as_py() if row < len(images) else None
        if path != self.locations.member[position]:
            raise IndexMismatchError(
                f"image index {self.index}: {self.paths[position]} should be {self.locations.member[position]} at row "
                f"{row} of row group {group} of {self.archive_paths[archive]}, but the file holds {path!r} there: the "
                f"index does not describe this file. Delete {self.index} and re-run: it is rebuilt, and finished "
                f"splits and features are kept."
            )
        return images.field("bytes")[row].as_py()

    def close(self) -> None:
        super().close()
        self._forget_files()
