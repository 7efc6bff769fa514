"""ImageNet-1K as parquet files (the Hub's ``ILSVRC/imagenet-1k``), indexed and read in place.

Its ``data/{train,validation}-NNNNN-of-NNNNN.parquet`` hold the column ``image`` = {``bytes``,
``path``} and ``label`` (the index among the sorted wnids; the test set's are -1 and it is not
read). ``path`` is ``<original stem>_<wnid>.JPEG``: the index names the image by its original
file name (``n01440764_10026.JPEG``, ``ILSVRC2012_val_00000001.JPEG``) and takes the wnid from
the path, else from the label. It records each image's file, row group and row; only the
``path`` and ``label`` columns are read to build it, never the images.

Images are read by :class:`imagenet_cog.core.archives.ParquetReader`.
"""

from __future__ import annotations

import re

import pyarrow as pa

from imagenet_cog.core.archives import WNID, ArchiveError, open_parquet
from imagenet_cog.core.image_layouts import PARQUET, WDS
from imagenet_cog.core.shards import ShardScan, ShardUnit, class_list, scan_wds_shard

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


# how each Hub layout's files are scanned for the index (build_shard_index's ``scan``)
SHARD_SCANS = {WDS: scan_wds_shard, PARQUET: scan_parquet_file}
