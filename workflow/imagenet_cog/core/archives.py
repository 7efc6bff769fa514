"""Images read straight from tar archives: an index of their members, built once, then
each image read by its byte offset.

ImageNet is distributed as tars of tars: ImageNet-21K as one tar of per-synset tars
``nXXXXXXXX.tar`` (or, after ``tar xzf``, a folder of them), ILSVRC2012's training set as a
tar of per-class tars, its validation set as one flat tar. Extracting them makes about 14M
files. Instead :func:`build_index` reads every tar header once (Python's ``tarfile``, inner
tars read in place) and records where each image's bytes lie; :class:`MemberReader` then
reads an image with one ``pread`` at that offset: no tar scan at read time, and one open
file per archive and loader worker.

Index file (HDF5, written atomically); paths are relative to the image root it describes:

* ``archives/``: one row per tar file opened. ``path`` (relative to the root; ``.`` when the
  root is the tar itself), ``size`` and ``mtime_ns`` (``os.stat`` when indexed: a file that
  now differs has changed, and the index is stale), ``truncated`` (the file ends inside a
  member, as an interrupted download does).
* ``folders/``: one row per *folder*, the images of one inner tar or of one directory inside
  a tar, sorted by ``path``. ``path`` (e.g. ``n01440764.tar``,
  ``ILSVRC2012_img_train.tar/n01440764.tar``, ``ILSVRC2012_img_val.tar``), ``wnid`` (the
  path's last name without ``.tar`` when it is a wnid, else empty), ``archive`` (row of
  ``archives``), ``member_dir`` (the images' directory inside their tar, mostly empty),
  ``start`` and ``count`` (the folder's rows of ``members``).
* ``members/``: one row per image (``.JPEG``, ``.jpg``, ``.png``, any case), by folder then
  name. ``name`` (the file name, UTF-8 bytes), ``offset`` (where its data starts in the
  archive file, absolute also for images of inner tars), ``size`` (bytes). The Hub's copies
  (:mod:`imagenet_cog.core.shards`), whose concepts are spread over every shard, add
  ``archive`` (the member's row of ``archives``; the folder's ``archive`` is then -1) and
  ``member`` (the tar member read, e.g. ``n01440764_10026.jpg``, or the parquet row's
  ``image.path``); parquet rows have ``row_group`` and ``row`` instead of ``offset`` and
  ``size``. The attribute ``layout`` names the root's layout.

An image's path, as split tables and feature files record it, is ``<folder path>/<name>``,
e.g. ``n01440764.tar/n01440764_10026.JPEG``: relative to the root like
``n01440764/n01440764_10026.JPEG`` in an extracted tree, and naming the member read. A
folder's names are read with one slice, so a split reads only its concepts' rows.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.image_layouts import PARQUET_ROW_LAYOUTS
from imagenet_cog.core.io import atomic_output

INDEX_FORMAT = "imagenet-cog image index"
INDEX_VERSION = 1
IMAGE_EXTENSIONS = frozenset({".jpeg", ".jpg", ".png"})
TAR_BLOCK = 512
WNID = re.compile(r"^n[0-9]{8}$")
GZIP_MAGIC = b"\x1f\x8b"
# member columns saying where an image lies, as far as a layout has them (see IndexTables)
LOCATION_COLUMNS = ("offset", "size", "archive", "member", "row_group", "row")
# rows per HDF5 chunk of the member arrays: a synset's ~1,300 rows touch one or two chunks
MEMBER_CHUNK_ROWS = 16384


class ArchiveError(ExplainedError, ValueError):
    """An archive or index that cannot be used; the message names the file and the fix."""


class StaleIndexError(ArchiveError):
    """An archive changed (size or modification time) since its index was built."""


class IndexMismatchError(ArchiveError):
    """The bytes at a member's recorded offset are not that member: the index is corrupt or
    belongs to other archives."""


class TruncatedMemberError(ExplainedError, OSError):
    """A member's data runs past the end of its archive (an interrupted download). An
    ``OSError`` like an unreadable file: extraction flags the image as invalid."""


class FileWindow(io.RawIOBase):
    """Bytes ``[start, start + length)`` of an open file as a read-only file object.

    Reads use ``os.pread``, so any number of windows share one descriptor; a window that
    runs past the end of the file reads short there, as the truncated archive it is.
    """

    def __init__(self, descriptor: int, start: int, length: int):
        super().__init__()
        self._descriptor = descriptor
        self._start = start
        self._length = length
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, position: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._length}[whence]
        self._position = max(0, base + position)
        return self._position

    def readinto(self, buffer) -> int:
        wanted = min(len(buffer), self._length - self._position)
        if wanted <= 0:
            return 0
        data = os.pread(self._descriptor, wanted, self._start + self._position)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)


def is_image_name(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def folder_wnid(folder: str) -> str:
    """The wnid a folder stands for: its last name without ``.tar``, if that is a wnid."""
    last = folder.rstrip("/").rsplit("/", 1)[-1]
    if last.lower().endswith(".tar"):
        last = last[:-4]
    return last if WNID.match(last) else ""


def join_path(*parts: str) -> str:
    return "/".join(part.strip("/") for part in parts if part and part != ".")


def member_name(info: tarfile.TarInfo) -> str:
    name = info.name
    while name.startswith("./"):
        name = name[2:]
    return name.lstrip("/")


@dataclass(frozen=True)
class ScanUnit:
    """One tar to read: ``length`` bytes from ``start`` of the file at ``path``, whose images
    belong to folders under ``folder``; ``archive`` is the file's row in the index."""

    archive: int
    path: str
    start: int
    length: int
    folder: str


@dataclass
class FolderImages:
    """The images of one folder as scanned: names (UTF-8 bytes) sorted, with their data's
    offsets and sizes; of repeated names the last member only, as extracting keeps."""

    member_dir: str
    names: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    duplicates: int = 0


def folder_images(member_dir: str, names: Sequence[bytes], offsets: Sequence[int], sizes: Sequence[int]) -> FolderImages:
    """Images in tar order as one folder's sorted arrays."""
    encoded = np.array(names, dtype=bytes) if len(names) else np.zeros(0, dtype="S1")
    offsets, sizes = np.asarray(offsets, dtype=np.int64), np.asarray(sizes, dtype=np.int64)
    # a stable sort keeps tar order among equal names, so the last of each run is the last member
    order = np.argsort(encoded, kind="stable")
    encoded, offsets, sizes = encoded[order], offsets[order], sizes[order]
    last = np.append(encoded[1:] != encoded[:-1], True) if encoded.size else np.zeros(0, dtype=bool)
    return FolderImages(member_dir, encoded[last], offsets[last], sizes[last], int((~last).sum()))


@dataclass
class UnitScan:
    unit: ScanUnit
    folders: dict[str, FolderImages]
    inner: list[ScanUnit]
    truncated: bool
    skipped: int


def scan_unit(unit: ScanUnit, find_inner: bool) -> UnitScan:
    """Every image of one tar with its absolute offset; with ``find_inner``, ``.tar``
    members are returned as units of their own (read in place, never copied)."""
    found: dict[str, tuple[str, list[bytes], list[int], list[int]]] = {}
    inner: list[ScanUnit] = []
    skipped = 0
    truncated = False
    with open(unit.path, "rb", buffering=0) as stream:
        available = max(0, min(unit.length, os.fstat(stream.fileno()).st_size - unit.start))
        window = FileWindow(stream.fileno(), unit.start, unit.length)
        try:
            archive = tarfile.open(fileobj=window, mode="r:")
        except tarfile.ReadError as error:
            raise ArchiveError(
                f"{unit.path}{f' (member {unit.folder})' if unit.start else ''} is not a readable "
                f"uncompressed tar ({error}); give the release's tar files as downloaded, or un-gzip "
                f"a .tar.gz first (gunzip keeps one tar that can be read by offset)."
            ) from None
        last_end = 0
        try:
            while (info := archive.next()) is not None:
                # TarFile keeps every member it has read; a flat tar of 1.3M images need not
                archive.members.clear()
                if not info.isreg():
                    skipped += not info.isdir()
                    continue
                name = member_name(info)
                last_end = info.offset_data + info.size
                if find_inner and name.lower().endswith(".tar"):
                    inner.append(ScanUnit(unit.archive, unit.path, unit.start + info.offset_data, info.size,
                                          join_path(unit.folder, name)))
                elif is_image_name(name):
                    directory, _, base = name.rpartition("/")
                    folder = join_path(unit.folder, directory)
                    entry = found.setdefault(folder, (directory, [], [], []))
                    entry[1].append(base.encode())
                    entry[2].append(unit.start + info.offset_data)
                    entry[3].append(info.size)
                else:
                    skipped += 1
        except tarfile.ReadError:
            truncated = True
        truncated = truncated or last_end > available
    folders = {folder: folder_images(*entry) for folder, entry in found.items()}
    return UnitScan(unit, folders, inner, truncated, skipped)


def _scan_archive(unit: ScanUnit) -> UnitScan:
    return scan_unit(unit, find_inner=True)


def _scan_inner(unit: ScanUnit) -> UnitScan:
    return scan_unit(unit, find_inner=False)


def scan_all(function: Callable[[ScanUnit], UnitScan], units: Sequence[ScanUnit], processes: int,
              progress: Callable[[int, int], None]) -> Iterable[UnitScan]:
    """Scans in order, on ``processes`` processes when there is more than one unit."""
    if processes <= 1 or len(units) <= 1:
        results = map(function, units)
        pool = None
    else:
        pool = ProcessPoolExecutor(max_workers=processes)
        results = pool.map(function, units, chunksize=max(1, min(64, len(units) // (8 * processes))))
    try:
        for done, result in enumerate(results, start=1):
            progress(done, len(units))
            yield result
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def check_not_gzip(path: Path) -> None:
    with open(path, "rb") as stream:
        magic = stream.read(2)
    if magic == GZIP_MAGIC:
        raise ArchiveError(
            f"{path} is gzip-compressed, and a compressed tar cannot be read by offset. Run "
            f"'gunzip {path.name}' (keeps one uncompressed tar of the same content, readable by "
            f"offset) or 'tar xzf {path.name}' (a folder of the tars inside), and point the "
            f"setting at the result."
        )


@dataclass(frozen=True)
class IndexSummary:
    archives: int
    folders: int
    images: int
    truncated: tuple[str, ...]
    duplicates: int
    skipped: int
    seconds: float


def archive_rows(root: Path, archives: Sequence[str], check: Callable[[Path], None] = lambda path: None
                 ) -> list[tuple[str, int, int]]:
    """(path relative to ``root``, size, mtime_ns) of each archive, as the index records them;
    ``check`` refuses an archive that cannot be read by offset."""
    rows = []
    for relative in archives:
        path = root if relative == "." else root / relative
        try:
            status = path.stat()
        except FileNotFoundError:
            raise ArchiveError(f"{path} does not exist; the image root changed since it was planned: re-run.") from None
        check(path)
        rows.append((relative, status.st_size, status.st_mtime_ns))
    return rows


def progress_log(log: Callable[[str], None], started: float, label: str, what: str) -> Callable[[int, int], None]:
    """A progress callback that logs about twenty lines over a scan."""
    def report(done: int, total: int) -> None:
        if done % max(1, total // 20) == 0 or done == total:
            log(f"{label}: {done}/{total} {what} read in {time.perf_counter() - started:.0f} s")
    return report


@dataclass
class IndexTables:
    """An index's content, ready to write: the archives (path, size, mtime_ns), the rows of
    the truncated ones, the folders sorted by path, and the member columns (``name``, then
    where each image lies: ``offset`` and ``size``, with ``archive`` and ``member`` when a
    folder's images lie in several archives, ``row_group`` and ``row`` for parquet)."""

    archives: list[tuple[str, int, int]]
    truncated: list[int]
    folder_paths: list[str]
    folder_archives: list[int]
    member_dirs: list[str]
    counts: list[int]
    members: dict[str, np.ndarray]

    @property
    def starts(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64) if self.counts else np.zeros(0, np.int64)


class FolderCollector:
    """The folders of tar scans, merged: a folder met again (in another tar) keeps its later
    members on repeated names, as extracting would."""

    def __init__(self):
        self.found: dict[str, tuple[int, FolderImages]] = {}
        self.truncated: set[int] = set()
        self.skipped = 0

    def add(self, scan: UnitScan) -> None:
        self.skipped += scan.skipped
        if scan.truncated:
            self.truncated.add(scan.unit.archive)
        for folder, images in scan.folders.items():
            if folder not in self.found:
                self.found[folder] = (scan.unit.archive, images)
                continue
            number, kept = self.found[folder]
            if kept.member_dir != images.member_dir:
                raise ArchiveError(f"{scan.unit.path}: two tars hold the folder {folder}; give each folder once.")
            merged = folder_images(kept.member_dir, [*kept.names, *images.names],
                                   np.concatenate([kept.offsets, images.offsets]), np.concatenate([kept.sizes, images.sizes]))
            merged.duplicates += kept.duplicates + images.duplicates
            self.found[folder] = (number, merged)

    def tables(self, archives: list[tuple[str, int, int]]) -> IndexTables:
        paths = sorted(self.found)
        folders = [self.found[path][1] for path in paths]

        def joined(arrays: list[np.ndarray], dtype) -> np.ndarray:
            return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)

        members = {"name": joined([images.names for images in folders], "S1"),
                   "offset": joined([images.offsets for images in folders], np.int64),
                   "size": joined([images.sizes for images in folders], np.int64)}
        return IndexTables(archives, sorted(self.truncated), paths, [self.found[path][0] for path in paths],
                           [images.member_dir for images in folders], [len(images.names) for images in folders], members)

    @property
    def duplicates(self) -> int:
        return sum(images.duplicates for _, images in self.found.values())


def index_summary(tables: IndexTables, duplicates: int, skipped: int, started: float) -> IndexSummary:
    return IndexSummary(
        archives=len(tables.archives), folders=len(tables.folder_paths), images=int(sum(tables.counts)),
        truncated=tuple(tables.archives[number][0] for number in tables.truncated),
        duplicates=duplicates, skipped=skipped, seconds=time.perf_counter() - started,
    )


def build_index(root: str | os.PathLike, archives: Sequence[str], output: str | os.PathLike, *,
                processes: int = 1, attributes: dict | None = None,
                log: Callable[[str], None] = lambda message: None) -> IndexSummary:
    """Index the images of ``archives`` (tar files, paths relative to ``root``; ``.`` for
    ``root`` itself) into ``output``.

    Each archive is read once; inner tars are then read in place, on ``processes``
    processes. Duplicate names in a folder keep the last member, as extracting would.
    """
    started = time.perf_counter()
    root = Path(root)
    rows = archive_rows(root, archives, check_not_gzip)
    units = [ScanUnit(number, str(root if relative == "." else root / relative), 0, size, "" if relative == "." else relative)
             for number, (relative, size, _) in enumerate(rows)]
    collector = FolderCollector()
    inner_units: list[ScanUnit] = []
    for scan in scan_all(_scan_archive, units, processes, progress_log(log, started, "archives", "tars")):
        collector.add(scan)
        inner_units += scan.inner
    twice = sorted(path for path, count in Counter(unit.folder for unit in inner_units).items() if count > 1)
    if twice:
        raise ArchiveError(f"{root}: the inner tar {twice[0]} appears twice; an archive must name each inner tar once.")
    for scan in scan_all(_scan_inner, inner_units, processes, progress_log(log, started, "inner tars", "tars")):
        collector.add(scan)
    tables = collector.tables(rows)
    write_index(output, root, tables, attributes or {})
    return index_summary(tables, collector.duplicates, collector.skipped, started)


def write_index(output, root: Path, tables: IndexTables, attributes: dict) -> None:
    """The index file, written atomically (format: the module's docstring)."""
    strings = h5py.string_dtype()

    def rows_dataset(group, name, data):
        chunks = (min(len(data), MEMBER_CHUNK_ROWS),) if len(data) else None
        options = {"compression": "gzip", "compression_opts": 4, "shuffle": True} if chunks else {}
        group.create_dataset(name, data=data, chunks=chunks, **options)

    archives = tables.archives
    with atomic_output(output) as temporary:
        with h5py.File(temporary, "w") as handle:
            handle.attrs["format"] = INDEX_FORMAT
            handle.attrs["version"] = INDEX_VERSION
            handle.attrs["root"] = str(root)
            for key, value in attributes.items():
                handle.attrs[key] = value
            group = handle.create_group("archives")
            group.create_dataset("path", data=[row[0] for row in archives], dtype=strings)
            group.create_dataset("size", data=np.array([row[1] for row in archives], dtype=np.int64))
            group.create_dataset("mtime_ns", data=np.array([row[2] for row in archives], dtype=np.int64))
            group.create_dataset("truncated", data=np.isin(np.arange(len(archives)), tables.truncated))
            group = handle.create_group("folders")
            group.create_dataset("path", data=tables.folder_paths, dtype=strings)
            group.create_dataset("wnid", data=[folder_wnid(path) for path in tables.folder_paths], dtype=strings)
            group.create_dataset("archive", data=np.array(tables.folder_archives, dtype=np.int32))
            group.create_dataset("member_dir", data=tables.member_dirs, dtype=strings)
            group.create_dataset("start", data=tables.starts)
            group.create_dataset("count", data=np.array(tables.counts, dtype=np.int64))
            group = handle.create_group("members")
            for name, data in tables.members.items():
                rows_dataset(group, name, data)


@dataclass(frozen=True)
class Folder:
    path: str
    wnid: str
    archive: int
    member_dir: str
    start: int
    count: int


class ImageIndex:
    """An index file: its archive and folder tables on opening, members when asked."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            handle = h5py.File(self.path, "r")
        except FileNotFoundError:
            raise ArchiveError(f"image index {self.path} does not exist; run the workflow's index_images rule.") from None
        except OSError as error:
            raise ArchiveError(
                f"image index {self.path} is not a readable HDF5 file ({error}); delete it and re-run: "
                f"it is rebuilt from the archives."
            ) from None
        with handle:
            if handle.attrs.get("format") != INDEX_FORMAT or handle.attrs.get("version") != INDEX_VERSION:
                raise ArchiveError(
                    f"{self.path} is not an image index of this workflow (version {INDEX_VERSION}); delete it and re-run."
                )
            self.root = str(handle.attrs["root"])
            self.attributes = {key: handle.attrs[key] for key in handle.attrs}
            archives = handle["archives"]
            self.archive_paths = list(archives["path"].asstr()[...])
            self.archive_sizes = archives["size"][...]
            self.archive_mtimes = archives["mtime_ns"][...]
            self.archive_truncated = archives["truncated"][...]
            self.location_columns = [name for name in LOCATION_COLUMNS if name in handle["members"]]
            folders = handle["folders"]
            self.folders = [
                Folder(path, wnid, int(archive), member_dir, int(start), int(count))
                for path, wnid, archive, member_dir, start, count in zip(
                    folders["path"].asstr()[...], folders["wnid"].asstr()[...], folders["archive"][...],
                    folders["member_dir"].asstr()[...], folders["start"][...], folders["count"][...])
            ]
        self.layout = str(self.attributes.get("layout", ""))
        self._by_path = {folder.path: folder for folder in self.folders}
        self._by_wnid: dict[str, list[Folder]] = {}
        for folder in self.folders:
            if folder.wnid:
                self._by_wnid.setdefault(folder.wnid, []).append(folder)

    @property
    def images(self) -> int:
        return sum(folder.count for folder in self.folders)

    def folder(self, path: str) -> Folder | None:
        return self._by_path.get(path)

    def folders_of(self, wnid: str) -> list[Folder]:
        return list(self._by_wnid.get(wnid, []))

    def wnid_counts(self) -> dict[str, int]:
        """Images per wnid over all folders standing for it."""
        return {wnid: sum(folder.count for folder in folders) for wnid, folders in self._by_wnid.items()}

    def _read_rows(self, folders: Sequence[Folder], datasets: Sequence[str]) -> list[dict[str, np.ndarray]]:
        ordered = sorted(range(len(folders)), key=lambda number: folders[number].start)
        result: list[dict[str, np.ndarray]] = [{} for _ in folders]
        with h5py.File(self.path, "r", rdcc_nbytes=64 * 2**20) as handle:
            members = handle["members"]
            for number in ordered:
                folder = folders[number]
                for name in datasets:
                    result[number][name] = members[name][folder.start:folder.start + folder.count]
        return result

    def names(self, folders: Sequence[Folder]) -> list[list[str]]:
        """Each folder's image names, sorted."""
        return [[name.decode() for name in rows["name"]] for rows in self._read_rows(folders, ["name"])]

    def locate(self, paths: Sequence[str]) -> MemberLocations:
        """Where each image path's bytes lie; paths the index lacks are an error naming them."""
        wanted: dict[str, list[int]] = {}
        unknown = []
        for position, path in enumerate(paths):
            folder, _, _ = path.rpartition("/")
            if folder in self._by_path:
                wanted.setdefault(folder, []).append(position)
            else:
                unknown.append(position)
        folders = [self._by_path[path] for path in wanted]
        locations = MemberLocations.empty(len(paths), rows=self.layout in PARQUET_ROW_LAYOUTS)
        for folder, rows in zip(folders, self._read_rows(folders, ["name", *self.location_columns])):
            positions = wanted[folder.path]
            names = np.array([paths[position].rpartition("/")[2].encode() for position in positions], dtype=bytes)
            found = np.searchsorted(rows["name"], names)
            for position, name, row in zip(positions, names, found):
                if row >= len(rows["name"]) or rows["name"][row] != name:
                    unknown.append(position)
                else:
                    locations.take(position, folder, rows, row)
        if unknown:
            raise ArchiveError(
                f"{len(unknown)} of the {len(paths)} images asked for are not in the image index {self.path} "
                f"(first: {paths[min(unknown)]}); the split table naming them was made from other archives: delete it "
                f"and re-run to make it again from this index."
            )
        return locations

    def archive_path(self, number: int) -> Path:
        relative = self.archive_paths[number]
        return Path(self.root) if relative == "." else Path(self.root) / relative

    def check_archive(self, number: int, status: os.stat_result | None = None) -> None:
        """An archive that changed since indexing is an error naming the index and the fix."""
        path = self.archive_path(number)
        try:
            status = status or path.stat()
        except FileNotFoundError:
            raise StaleIndexError(
                f"{path} is gone since the image index {self.path} was built; restore it, or delete the "
                f"index and re-run to index the image root as it is now."
            ) from None
        expected = (int(self.archive_sizes[number]), int(self.archive_mtimes[number]))
        if (status.st_size, status.st_mtime_ns) != expected:
            raise StaleIndexError(
                f"{path} changed since the image index {self.path} was built (size {expected[0]} -> "
                f"{status.st_size} bytes, modified {expected[1]} -> {status.st_mtime_ns} ns): the offsets it "
                f"records may no longer hold. Delete {self.path} and re-run: it is rebuilt, and finished "
                f"splits and features are kept (each image read is checked against its tar header)."
            )

    def reader(self, paths: Sequence[str]) -> MemberReader:
        """A reader of ``paths`` (in that order), its archives checked now: tar members by
        offset, or rows of parquet files."""
        locations = self.locate(paths)
        used = sorted(set(locations.archive.tolist()))
        for number in used:
            self.check_archive(number)
        kind = ParquetReader if self.layout in PARQUET_ROW_LAYOUTS else MemberReader
        return kind(
            index=str(self.path), archive_paths={number: str(self.archive_path(number)) for number in used},
            archive_identity={number: (int(self.archive_sizes[number]), int(self.archive_mtimes[number])) for number in used},
            locations=locations, paths=list(paths),
        )


@dataclass(frozen=True)
class MemberLocations:
    """Where images lie: archive row, and the data's offset and size in it with the member
    name (tars, shards), or the row group and row (parquet)."""

    archive: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    member: list[str]
    row_group: np.ndarray | None = None
    row: np.ndarray | None = None

    @classmethod
    def empty(cls, count: int, rows: bool = False) -> MemberLocations:
        zeros = [np.zeros(count, dtype=np.int64) for _ in range(4)]
        return cls(np.zeros(count, dtype=np.int32), zeros[0], zeros[1], [""] * count,
                   zeros[2] if rows else None, zeros[3] if rows else None)

    def take(self, position: int, folder: Folder, rows: dict[str, np.ndarray], row: int) -> None:
        """Fill ``position`` from ``row`` of a folder's member columns (per-member archive and
        member name where the index has them)."""
        name = rows["name"][row].decode()
        self.archive[position] = rows["archive"][row] if "archive" in rows else folder.archive
        self.member[position] = rows["member"][row].decode() if "member" in rows else join_path(folder.member_dir, name)
        for column, values in (("offset", self.offset), ("size", self.size), ("row_group", self.row_group),
                               ("row", self.row)):
            if column in rows and values is not None:
                values[position] = rows[column][row]


class MemberReader:
    """Reads images by offset; picklable, each process opens an archive once, when first read.

    Every read also takes the 512-byte tar header in front of the data (one ``pread``) and
    checks it names the member with its size, so an index that does not describe the
    archive can never hand out another image's bytes.
    """

    def __init__(self, index: str, archive_paths: dict[int, str], archive_identity: dict[int, tuple[int, int]],
                 locations: MemberLocations, paths: list[str]):
        self.index = index
        self.archive_paths = archive_paths
        self.archive_identity = archive_identity
        self.locations = locations
        self.paths = paths
        self._descriptors: dict[int, int] = {}
        self._process = os.getpid()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_descriptors"] = {}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._process = os.getpid()

    def _descriptor(self, archive: int) -> int:
        if self._process != os.getpid():  # a forked worker must not share its parent's files
            self._descriptors = {}
            self._process = os.getpid()
        if archive not in self._descriptors:
            path = self.archive_paths[archive]
            descriptor = os.open(path, os.O_RDONLY)
            status = os.fstat(descriptor)
            if (status.st_size, status.st_mtime_ns) != self.archive_identity[archive]:
                os.close(descriptor)
                raise StaleIndexError(
                    f"{path} changed since the image index {self.index} was built; delete {self.index} and "
                    f"re-run (finished splits and features are kept)."
                )
            self._descriptors[archive] = descriptor
        return self._descriptors[archive]

    def describe(self, position: int) -> str:
        """The archive and member of an image, for messages."""
        return f"{self.archive_paths[int(self.locations.archive[position])]} member {self.locations.member[position]}"

    def read(self, position: int) -> bytes:
        archive = int(self.locations.archive[position])
        offset = int(self.locations.offset[position])
        size = int(self.locations.size[position])
        data = os.pread(self._descriptor(archive), size + TAR_BLOCK, offset - TAR_BLOCK)
        self._check_header(data[:TAR_BLOCK], position, size)
        body = data[TAR_BLOCK:]
        if len(body) < size:
            raise TruncatedMemberError(
                f"{self.describe(position)}: {len(body)} of its {size} bytes, the archive ends there (an "
                f"interrupted download or copy); download the archive again"
            )
        return body

    def _check_header(self, header: bytes, position: int, size: int) -> None:
        member = self.locations.member[position]
        try:
            info = tarfile.TarInfo.frombuf(header, tarfile.ENCODING, "surrogateescape")
            name = member_name(info)
            # names too long for the header's field sit in an extra header before it
            named = name == member or (len(member.encode()) > 99 and member.startswith(name))
            found = f"{name!r} of {info.size} bytes"
        except tarfile.HeaderError as error:
            named, found = False, f"no tar header ({error})"
            info = None
        if not named or info is None or info.size != size:
            raise IndexMismatchError(
                f"image index {self.index}: {self.paths[position]} should be {member} ({size} bytes) at byte "
                f"{self.locations.offset[position]} of {self.archive_paths[int(self.locations.archive[position])]}, "
                f"but the archive holds {found} there: the index does not describe this archive. Delete "
                f"{self.index} and re-run: it is rebuilt, and finished splits and features are kept."
            )

    def close(self) -> None:
        for descriptor in self._descriptors.values():
            os.close(descriptor)
        self._descriptors = {}


class ParquetReader(MemberReader):
    """Reads images from parquet rows (the Hub's ``ILSVRC/imagenet-1k``,
    :mod:`imagenet_cog.core.parquet_images`): an image with its row group's ``image``
    column, the ``ROW_GROUPS_KEPT`` row groups read last kept (a class's images lie in a few
    row groups when the files hold them together). Each read checks that the row holds the
    image the index names. Picklable; each process opens a file once, when first read."""

    ROW_GROUPS_KEPT = 8

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._forget_files()

    def _forget_files(self) -> None:
        self._files: dict = {}
        self._groups: OrderedDict = OrderedDict()
        self._files_process = os.getpid()

    def __getstate__(self):
        state = super().__getstate__()
        state["_files"], state["_groups"] = {}, OrderedDict()
        return state

    def _parquet(self, archive: int):
        self._descriptor(archive)  # checks the file is the one indexed (size, time)
        if self._files_process != os.getpid():  # a forked worker opens its own files
            self._forget_files()
        if archive not in self._files:
            self._files[archive] = open_parquet(self.archive_paths[archive])
        return self._files[archive]

    def _row_group(self, archive: int, group: int):
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


def open_parquet(path: str):
    """A ``pyarrow.parquet.ParquetFile``; pyarrow takes about a second to import, so only
    parquet roots load it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as error:
        raise ArchiveError(f"{path} is not a readable parquet file ({error}); it is probably cut short (an "
                           f"interrupted download): download it again.") from None


class ImageFiles:
    """Images by their path relative to an image root, whatever its layout: the files of a
    folder tree, or tar members through the root's index. For the few images a figure or
    a rater sheet shows; extraction reads through :class:`MemberReader` itself."""

    def __init__(self, root: str | os.PathLike, index: str | os.PathLike | None = None):
        self.root = Path(root)
        self.index = ImageIndex(index) if index else None

    def opener(self, paths: Sequence[str]) -> Callable[[int], Path | io.BytesIO]:
        """``open(position)``: what ``PIL.Image.open`` takes for ``paths[position]``."""
        if self.index is None:
            return lambda position: self.root / paths[position]
        reader = self.index.reader(paths)
        return lambda position: io.BytesIO(reader.read(position))

    def open(self, path: str) -> Path | io.BytesIO:
        """What ``PIL.Image.open`` takes for one image."""
        return self.opener([path])(0)
