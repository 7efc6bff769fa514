"""ImageNet as the Hugging Face Hub serves it: webdataset shards and parquet files, indexed
once like the release's tars (:mod:`imagenet_cog.core.archives`) and read in place.

**webdataset shards** (``timm/imagenet-22k-wds``, ``imagenet-w21-wds``, ``imagenet-w21-webp-wds``,
``imagenet-12k-wds``, ``imagenet-1k-wds``) are plain tars of samples ``<key>.jpg`` (or
``.webp``), ``<key>.cls`` (the class index, ASCII digits) and ``<key>.json``, shuffled across
the shards: every concept is in nearly every shard. The key is the original file stem
(``n01440764_10026``, ``ILSVRC2012_val_00019219``). A sample's wnid is, in this order, the
json's wnid field (``class_name`` in 22k, the folder of ``filename`` in 1k), the class index
(``.cls`` or the json's ``label``) through the copy's sorted wnid list (timm ships them under
``timm/data/_info/``), with the key's prefix (``n01440764_10026``) taking precedence over the
index where it is a wnid (see :func:`sample_wnid`); a sample whose wnid none of them gives
stops the index, naming shard and key. ``_info.json`` at the root (timm's reader
reads it) lists each split's shards and their lengths: a copy that disagrees with it is an
error at index time.

**parquet** (``ILSVRC/imagenet-1k``): ``data/{train,validation}-NNNNN-of-NNNNN.parquet``;
see :mod:`imagenet_cog.core.parquet_images`.

The index has the tar index's format; its folders are the concepts (``<wnid>`` for IN-21K,
``train/<wnid>`` and ``val/<wnid>`` for an IN-1K root), each image named by its original file
name (the key + ``.JPEG``, or the json's ``filename``), so that an image's path,
``n01440764/n01440764_10026.JPEG``, is the one an extracted copy and the authors' split
pickle give. Each member row also records its shard (``archive``) and, for shards, the tar
member read (``member``: ``n01440764_10026.jpg``); parquet rows record the row group and row.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from imagenet_cog.core.archives import (
    WNID,
    ArchiveError,
    FileWindow,
    IndexSummary,
    IndexTables,
    archive_rows,
    index_summary,
    join_path,
    member_name,
    progress_log,
    scan_all,
    write_index,
)
from imagenet_cog.core.image_layouts import INFO_LISTED_LAYOUTS
from imagenet_cog.core.naming import IN21K

INFO_FILE = "_info.json"
# the set a shard or parquet file belongs to, from its name (imagenet22k-train-0001.tar,
# imagenet1k-validation-07.tar, validation-00003-of-00014.parquet)
PART_NAME = re.compile(r"(?:^|[-_])(train|validation|val|test)(?=[-_.]|$)")
PARTS = {"train": "train", "validation": "val", "val": "val", "test": "test"}
WDS_IMAGE_EXTENSIONS = frozenset({"jpg", "jpeg", "png", "webp"})
# every original ImageNet file is .JPEG; timm's reader names samples <key>.JPEG too
ORIGINAL_EXTENSION = ".JPEG"
# the copy's name (before the set in its shard names) -> timm's sorted wnid list of its labels
CLASS_LISTS = {"imagenet22k": "imagenet22k_synsets.txt", "imagenet12k": "imagenet12k_synsets.txt",
               "imagenet1k": "imagenet_synsets.txt", "imagenet": "imagenet_synsets.txt"}
# the ImageNet-21K release a copy's images come from, by the start of its name (not the 12k
# subset's: the w21-webp card names its shards imagenet12k-*, unconfirmed)
COPY_RELEASES = (("imagenet22k", "fall11"), ("imagenet_w21", "winter21"), ("imagenet-w21", "winter21"))
# a webdataset key and extension: the key runs to the first dot of the file name
SAMPLE_NAME = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")
SMALL_MEMBER = 1 << 16


def shard_part(name: str) -> str | None:
    """``train``, ``val`` or ``test`` from a shard's or parquet file's name; None if it names none."""
    match = PART_NAME.search(Path(name).name)
    return PARTS[match.group(1)] if match else None


def copy_name(shard: str) -> str:
    """The copy a shard belongs to, from its name: ``imagenet22k`` of ``imagenet22k-train-0000.tar``."""
    base = Path(shard).name
    match = PART_NAME.search(base)
    return base[: match.start()] if match else base.split(".", 1)[0]


def copy_release(shards: Sequence[str]) -> str | None:
    """The ImageNet-21K release (``fall11``, ``winter21``) of a webdataset copy, from its
    shard names; None when they do not say."""
    releases = {release for shard in shards for start, release in COPY_RELEASES if copy_name(shard).startswith(start)}
    return releases.pop() if len(releases) == 1 else None


@functools.cache
def class_list(copy: str) -> tuple[str, ...] | None:
    """The sorted wnids a copy's class indexes count in, from the lists timm ships (no
    network); None when the copy has no known list (or timm is not installed)."""
    file_name = CLASS_LISTS.get(copy.lower())
    spec = importlib.util.find_spec("timm")
    if file_name is None or spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "data" / "_info" / file_name
    return tuple(path.read_text().split()) if path.is_file() else None


def original_name(key: str, meta: dict) -> str:
    """The file name an image had in the release: the json's ``filename`` (1k), else the key
    (the original stem) + ``.JPEG``."""
    filename = meta.get("filename")
    if isinstance(filename, str) and filename:
        return filename.replace("\\", "/").rsplit("/", 1)[-1]
    return key.rsplit("/", 1)[-1] + ORIGINAL_EXTENSION


def sample_wnid(key: str, meta: dict, label: int | None, classes: Sequence[str] | None) -> str | None:
    """A sample's wnid: the json's wnid field, else the key's prefix (the original file name,
    the release's own record), else its class index through ``classes``; None when none
    gives one. The key goes before the class index: on the copies both agree wherever both
    exist, and the class list is chosen by the shard names, which a card can get wrong."""
    filename = meta.get("filename")
    folder = filename.replace("\\", "/").rsplit("/", 1)[0] if isinstance(filename, str) and "/" in filename else None
    prefix = key.rsplit("/", 1)[-1].split("_", 1)[0]
    for candidate in (meta.get("class_name"), meta.get("wnid"), meta.get("synset"), folder, prefix):
        if isinstance(candidate, str) and WNID.match(candidate):
            return candidate
    if label is None and isinstance(meta.get("label"), int):
        label = meta["label"]
    if classes is not None and label is not None and 0 <= label < len(classes):
        return classes[label]
    return None


@dataclass(frozen=True)
class ShardUnit:
    """One shard to scan: its row in the index, its path, the folder prefix of its images
    (``train``, ``val``, or none for IN-21K) and its copy's name (for the class list)."""

    archive: int
    path: str
    prefix: str
    copy: str


@dataclass
class ShardScan:
    """The images of one shard: original names, folders (``<prefix>/<wnid>``) and the
    location columns; lists while scanning, arrays once :meth:`done` (a shard's results
    cross processes, and 14 million rows of Python objects would not fit in memory)."""

    unit: ShardUnit
    names: list | np.ndarray = field(default_factory=list)
    folders: list | np.ndarray = field(default_factory=list)
    columns: dict[str, list | np.ndarray] = field(default_factory=dict)
    samples: int = 0
    truncated: bool = False
    skipped: int = 0

    def add(self, name: str, wnid: str, **columns) -> None:
        self.names.append(name.encode())
        self.folders.append(join_path(self.unit.prefix, wnid).encode())
        for column, value in columns.items():
            self.columns.setdefault(column, []).append(value)

    def done(self) -> ShardScan:
        self.names = np.array(self.names, dtype=bytes) if len(self.names) else np.zeros(0, "S1")
        self.folders = np.array(self.folders, dtype=bytes) if len(self.folders) else np.zeros(0, "S1")
        self.columns = {column: np.array(values, dtype=bytes if column == "member" else np.int64)
                        for column, values in self.columns.items()}
        return self


def _read_tar_samples(unit: ShardUnit) -> tuple[dict[str, dict], bool]:
    """Each key's members of a webdataset shard: its image (member, offset, size) and the
    contents of its small ``cls`` and ``json`` members; whether the shard is cut short."""
    samples: dict[str, dict] = {}
    with open(unit.path, "rb", buffering=0) as stream:
        descriptor = stream.fileno()
        available = os.fstat(descriptor).st_size
        try:
            archive = tarfile.open(fileobj=FileWindow(descriptor, 0, available), mode="r:")
        except tarfile.ReadError as error:
            raise ArchiveError(f"{unit.path} is not a readable webdataset shard (an uncompressed tar; {error}); "
                               f"download it again.") from None
        truncated, last_end = False, 0
        try:
            while (info := archive.next()) is not None:
                archive.members.clear()
                match = SAMPLE_NAME.match(member_name(info)) if info.isreg() else None
                if match is None:
                    continue
                key, extension = match.group(1), match.group(2).lower()
                last_end = info.offset_data + info.size
                sample = samples.setdefault(key, {})
                if extension in WDS_IMAGE_EXTENSIONS:
                    sample["image"] = (member_name(info), info.offset_data, info.size)
                elif extension in ("cls", "json") and info.size <= SMALL_MEMBER:
                    sample[extension] = os.pread(descriptor, info.size, info.offset_data)
        except tarfile.ReadError:
            truncated = True
    return samples, truncated or last_end > available


def _decoded(sample: dict) -> tuple[dict, int | None]:
    """A sample's json (empty when absent or unreadable) and its ``.cls`` index."""
    try:
        meta = json.loads(sample.get("json", b"{}"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        meta = {}
    label = sample.get("cls", b"").strip()
    return (meta if isinstance(meta, dict) else {}), (int(label) if label.isdigit() else None)


def scan_wds_shard(unit: ShardUnit) -> ShardScan:
    """Every image of a webdataset shard with its wnid and where its bytes lie; a sample
    without a wnid is an error naming shard and key (the last one of a cut shard is dropped:
    its class was in the part cut off)."""
    samples, truncated = _read_tar_samples(unit)
    scan = ShardScan(unit, samples=len(samples), truncated=truncated)
    classes = class_list(unit.copy)
    keys = list(samples)
    for key in keys:
        sample = samples[key]
        if "image" not in sample:
            scan.skipped += 1
            continue
        meta, label = _decoded(sample)
        wnid = sample_wnid(key, meta, label, classes)
        if wnid is None:
            if truncated and key == keys[-1]:
                scan.skipped += 1
                continue
            raise ArchiveError(
                f"{unit.path}: sample {key} has no class: its json names no wnid (class_name, filename), "
                + ("it has no class index (.cls or the json's label)" if label is None and "label" not in meta else
                   f"its class index is not one of the {len(classes)} of {unit.copy}" if classes else
                   f"no wnid list of the copy '{unit.copy}' is known to map its class index")
                + ", and its key is not <wnid>_<number>. The shard is not one of the Hub copies this workflow "
                "reads (docs/imagenet.md), or it is damaged: download it again."
            )
        member, offset, size = sample["image"]
        scan.add(original_name(key, meta), wnid, offset=offset, size=size, member=member.encode())
    return scan.done()


def read_info(root: Path) -> dict | None:
    """A copy's ``_info.json`` (None when it has none)."""
    path = root / INFO_FILE
    if not path.is_file():
        return None
    try:
        info = json.loads(path.read_text())
        splits = info["splits"]
        return {name: dict(zip(split["filenames"], split["shard_lengths"])) for name, split in splits.items()}
    except (ValueError, KeyError, TypeError) as error:
        raise ArchiveError(f"{path} is not a readable shard list (splits: filenames, shard_lengths: {error!r}); "
                           f"download it again, or remove it (the shards are then indexed as found).") from None


@dataclass(frozen=True)
class ShardDownload:
    """A Hub copy's shards to download: their names, with the samples and bytes of each
    where ``_info.json`` (``shard_lengths``; a split's ``num_bytes``) or the files say."""

    shards: list[str]
    samples: int | None
    bytes: int | None
    where: str


def shard_download(root: Path, shards: Sequence[str]) -> ShardDownload:
    """Every training and validation shard of a webdataset copy: from ``_info.json`` when
    the root has it (downloaded first, it lists them all), else the shards found."""
    path = root / INFO_FILE
    if not path.is_file() and not shards:
        raise ArchiveError(f"{root} holds neither {INFO_FILE} nor webdataset shards; download the copy's {INFO_FILE} "
                           f"first (it lists every shard), or the shards.")
    if not path.is_file():
        sizes = [(root / shard).stat().st_size for shard in shards]
        return ShardDownload(list(shards), None, sum(sizes), f"the {len(shards)} shard files in {root}")
    listed = read_info(root) or {}
    splits = {split: files for split, files in listed.items() if PARTS.get(split, split) != "test"}
    names = sorted(Path(name).name for files in splits.values() for name in files)
    raw = json.loads(path.read_text())["splits"]
    split_bytes = [raw[split].get("num_bytes") for split in splits]
    present = [(root / name).stat().st_size for name in names if (root / name).is_file()]
    if all(isinstance(value, int) for value in split_bytes) and split_bytes:
        size = sum(split_bytes)
    else:
        size = sum(present) if len(present) == len(names) else None
    return ShardDownload(names, sum(sum(files.values()) for files in splits.values()), size, str(path))


def check_info(root: Path, scans: Sequence[ShardScan], shards: Sequence[str]) -> None:
    """The shards against ``_info.json``: each listed shard of the sets read is there, each
    shard there is listed, with the length listed (a shard cut short is reported apart)."""
    info = read_info(root)
    if info is None:
        return
    listed = {Path(name).name: length for split, files in info.items() if PARTS.get(split, split) != "test"
              for name, length in files.items()}
    found = {Path(shard).name: scan for shard, scan in zip(shards, scans)}
    problems = []
    absent = sorted(set(listed) - set(found))
    if absent:
        problems.append(f"{len(absent)} shards it lists are not in the root (first: {absent[0]})")
    unlisted = sorted(set(found) - set(listed))
    if unlisted:
        problems.append(f"{len(unlisted)} shards in the root are not listed (first: {unlisted[0]})")
    differing = [(name, scan.samples, listed[name]) for name, scan in sorted(found.items())
                 if name in listed and not scan.truncated and scan.samples != listed[name]]
    if differing:
        name, samples, length = differing[0]
        problems.append(f"{len(differing)} shards hold another number of samples than listed (first: {name}, "
                        f"{samples} samples, {length} listed)")
    if problems:
        raise ArchiveError(
            f"{root / INFO_FILE} disagrees with the shards in {root}: {'; '.join(problems)}. The download is "
            f"incomplete or mixes copies: run the download again (hf download resumes and replaces "
            f"damaged files), or, if the shards are the copy you want, remove {INFO_FILE} to index them as found."
        )


def shard_units(source: str, root: Path, shards: Sequence[str]) -> list[ShardUnit]:
    """The shards of a root to scan; an IN-1K root's images go to ``train/`` or ``val/``."""
    units = []
    for number, relative in enumerate(shards):
        part = shard_part(relative)
        prefix = "" if source == IN21K else part or ""
        units.append(ShardUnit(number, str(root / relative), prefix, copy_name(relative)))
    return units


def shard_tables(rows: list[tuple[str, int, int]], scans: Sequence[ShardScan]) -> tuple[IndexTables, int]:
    """The index tables of scanned shards: one folder per concept (and set), its images
    sorted by name; of a name met twice, the later shard's (the count of them returned)."""
    def joined(arrays: list[np.ndarray], dtype) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)

    names = joined([scan.names for scan in scans], "S1")
    folders = joined([scan.folders for scan in scans], "S1")
    archive = joined([np.full(len(scan.names), scan.unit.archive, dtype=np.int32) for scan in scans], np.int32)
    # a stable sort by folder, then name: of repeated names the later shard's row comes last
    order = np.lexsort((names, folders))
    last = np.ones(len(order), dtype=bool)
    if len(order):
        last[:-1] = (folders[order][1:] != folders[order][:-1]) | (names[order][1:] != names[order][:-1])
    kept = order[last]
    members = {"name": names[kept], "archive": archive[kept]}
    for column in sorted({column for scan in scans for column in scan.columns}):
        dtype = "S1" if column == "member" else np.int64
        members[column] = joined([scan.columns[column] for scan in scans if len(scan.names)], dtype)[kept]
    folder_paths, counts = np.unique(folders[kept], return_counts=True)
    tables = IndexTables(rows, sorted(scan.unit.archive for scan in scans if scan.truncated),
                         [path.decode() for path in folder_paths], [-1] * len(folder_paths), [""] * len(folder_paths),
                         [int(count) for count in counts], members)
    return tables, int((~last).sum())


def build_shard_index(source: str, root: str | os.PathLike, shards: Sequence[str], output: str | os.PathLike,
                      layout: str, *, scan: Callable[[ShardUnit], ShardScan] = scan_wds_shard, processes: int = 1,
                      attributes: dict | None = None, log: Callable[[str], None] = lambda message: None) -> IndexSummary:
    """Index the images of a Hub copy's ``shards`` (paths relative to ``root``) into
    ``output``, each read by ``scan`` (webdataset shards; parquet files:
    :func:`imagenet_cog.core.parquet_images.scan_parquet_file`) on ``processes`` processes."""
    started = time.perf_counter()
    root = Path(root)
    rows = archive_rows(root, shards)
    units = shard_units(source, root, shards)
    scans = list(scan_all(scan, units, processes, progress_log(log, started, "shards", "files")))
    if layout in INFO_LISTED_LAYOUTS:
        check_info(root, scans, shards)
    tables, duplicates = shard_tables(rows, scans)
    write_index(output, root, tables, {**(attributes or {}), "source": source, "layout": layout})
    return index_summary(tables, duplicates, sum(scan.skipped for scan in scans), started)
