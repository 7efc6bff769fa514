"""ImageNet as a researcher can get it today: the releases, the layout of each image root,
and the images of each concept, listed from folders or from the release's tars.

The layout of each root is a setting (``data.in21k_layout``, ``data.in1k_layout``,
``data.in1k_blurred_layout``); ``auto`` detects it from what the root holds:

============================  ===========  =====================================================
root                          layout       what the root is
============================  ===========  =====================================================
``data.in21k_root``           ``folders``  ``<root>/<wnid>/*.JPEG``: the synset tars extracted
                              ``tars``     ``<root>/<wnid>.tar``: what ``tar xzf
                                           winter21_whole.tar.gz`` leaves (``winter21_whole/``),
                                           or synset tars fetched one by one
                              ``tar``      the root is one uncompressed tar of ``<wnid>.tar``:
                                           ``fall11_whole.tar``, or ``winter21_whole.tar`` after
                                           ``gunzip winter21_whole.tar.gz``
                              ``wds``      a Hugging Face Hub copy's webdataset shards
                                           (``timm/imagenet-22k-wds``: :mod:`imagenet_cog.core.shards`)
``data.in1k_root``            ``folders``  ``<root>/train/<wnid>/``, ``<root>/val/<wnid>/``
                              ``tars``     ``<root>/ILSVRC2012_img_train.tar`` (one tar per class
                                           inside) and ``ILSVRC2012_img_val.tar`` (flat),
                                           labelled by the devkit (:mod:`imagenet_cog.core.val_labels`)
                              ``wds``      ``timm/imagenet-1k-wds``'s shards
                              ``parquet``  ``ILSVRC/imagenet-1k``'s ``data/*.parquet``
``data.in1k_blurred_root``    ``folders``  as IN-1K, or ``train_blurred/<wnid>/``,
                                           ``val_blurred/<wnid>/`` as the face-blurred release's
                                           ``.tar.gz`` files extract
                              ``tars``     ``train_blurred.tar``, ``val_blurred.tar``: those
                                           ``.tar.gz`` after ``gunzip`` (``<dir>/<wnid>/*.jpg``)
============================  ===========  =====================================================

Tar and Hub layouts are read through an index (:mod:`imagenet_cog.core.archives`) built once per root;
an image's path then names the member, e.g. ``n01440764.tar/n01440764_10026.JPEG`` or
``ILSVRC2012_img_val.tar/ILSVRC2012_val_00000001.JPEG``. Folder layouts keep their paths
(``n01440764/n01440764_10026.JPEG``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from imagenet_cog.core.archives import GZIP_MAGIC, WNID, ImageIndex, is_image_name
from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.image_layouts import (
    ARCHIVE_LAYOUTS,
    FOLDERS,
    INFO_LISTED_LAYOUTS,
    LAYOUTS_BY_NAME,
    OUTER_TAR,
    PARQUET,
    PARQUET_ROW_LAYOUTS,
    SHARD_LAYOUTS,
    SOURCE_LAYOUTS,
    SOURCES,
    TARS,
    WDS,
)
from imagenet_cog.core.naming import IN1K, IN1K_BLURRED, IN21K
from imagenet_cog.core.shards import INFO_FILE, copy_release, read_info, shard_part
from imagenet_cog.core.val_labels import LabelError, find_labels, read_val_labels, val_stem

# IN-1K-like roots: the folder and the tar of each official set, as each release names them
PART_FOLDERS = {
    IN1K: {"train": ("train",), "val": ("val",)},
    IN1K_BLURRED: {"train": ("train", "train_blurred"), "val": ("val", "val_blurred")},
}
PART_ARCHIVES = {
    IN1K: {"train": ("ILSVRC2012_img_train.tar",), "val": ("ILSVRC2012_img_val.tar",)},
    IN1K_BLURRED: {"train": ("train_blurred.tar",), "val": ("val_blurred.tar",)},
}
PARTS = ("train", "val")


class ImageRootError(ExplainedError, ValueError):
    """An image root that does not hold what its settings say; the message names the setting
    and the fix."""


@dataclass(frozen=True)
class Release:
    name: str
    title: str
    synsets: int
    archive: str
    note: str


RELEASES = {
    "fall11": Release(
        "fall11", "Fall 2011", 21841, "fall11_whole.tar",
        "the release the paper's levels were built from (14,197,122 images); no longer distributed",
    ),
    "winter21": Release(
        "winter21", "Winter 2021", 19167, "winter21_whole.tar.gz",
        "what can be downloaded today: 2,674 synsets removed in 2019, the 'person' sub-tree among "
        "them; every ImageNet-CoG concept is in it with the same images (the ICCV paper, supp. E)",
    ),
}


def root_release(root: str | os.PathLike | None, layout: str = "auto") -> str | None:
    """The ImageNet-21K release an IN-21K root is, when the copy says (the Hub's webdataset
    copies name it: ``imagenet22k`` is Fall 2011, ``imagenet_w21`` Winter 2021); None when
    it does not (folders and tars look the same in both releases)."""
    path = Path(root) if root else None
    if path is None or not path.is_dir():
        return None
    hub = hub_layout(path)
    if hub not in INFO_LISTED_LAYOUTS or layout not in ("auto", hub):
        return None
    shards, _ = hub_files(path)
    listed = read_info(path) or {}
    return copy_release(shards + [name for files in listed.values() for name in files])


def resolve_release(configured: str, root: str | os.PathLike | None, layout: str = "auto") -> str:
    """``data.in21k_release``: ``auto`` is the copy's release where it says, else Winter 2021;
    a release set against what the copy says is an error naming both."""
    found = root_release(root, layout)
    if configured == "auto":
        return found or "winter21"
    if found and found != configured:
        raise ImageRootError(
            f"data.in21k_release is {configured}, but data.in21k_root = '{root}' holds the Hub's "
            f"{RELEASES[found].title} copy (its shard names say so); set data.in21k_release to {found} or auto."
        )
    return configured


def layout_setting(source: str) -> str:
    return f"data.{source}_layout"


def root_setting(source: str) -> str:
    return f"data.{source}_root"


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as stream:
        return stream.read(2) == GZIP_MAGIC


def _wnid_entries(path: Path) -> tuple[int, int]:
    """Wnid folders and wnid tars directly in ``path``."""
    folders = tars = 0
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name.endswith(".tar") and WNID.match(entry.name[:-4]) and entry.is_file():
                tars += 1
            elif WNID.match(entry.name) and entry.is_dir():
                folders += 1
    return folders, tars


def _release_files(path: Path) -> list[str]:
    return sorted(name for name in os.listdir(path) if "whole" in name and name.endswith((".tar", ".tar.gz")))


def hub_files(path: Path) -> tuple[list[str], list[str]]:
    """A Hub copy's webdataset shards (``<copy>-<set>-NNNN.tar``) and parquet files
    (``[data/]<set>-NNNNN-of-NNNNN.parquet``) in ``path``, relative to it, sorted."""
    shards, parquets = [], []
    for folder in (path, path / "data"):
        if not folder.is_dir():
            continue
        prefix = "" if folder == path else "data/"
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.endswith(".parquet") and entry.is_file():
                    parquets.append(prefix + entry.name)
                elif (folder == path and entry.name.endswith(".tar") and shard_part(entry.name)
                      and not WNID.match(entry.name[:-4]) and entry.is_file()):
                    shards.append(entry.name)
    return sorted(shards), sorted(parquets)


def hub_layout(path: Path) -> str | None:
    """``wds`` or ``parquet`` when ``path`` holds a Hub copy (or just its ``_info.json``)."""
    shards, parquets = hub_files(path)
    if shards or (path / INFO_FILE).is_file():
        return WDS
    return PARQUET if parquets else None


def holds_folders(source: str, path: Path) -> bool:
    """Synset folders (IN-21K: ``<root>/<wnid>/``) or the release's train folder (``train/``)."""
    if source == IN21K:
        return _wnid_entries(path)[0] > 0
    return any((path / name).is_dir() for name in PART_FOLDERS[source]["train"])


def holds_tars(source: str, path: Path) -> bool:
    """Synset tars (IN-21K: ``<root>/<wnid>.tar``) or a release's set tars (``ILSVRC2012_img_train.tar``)."""
    if source == IN21K:
        return _wnid_entries(path)[1] > 0
    return any((path / name).is_file() for part in PARTS for name in PART_ARCHIVES[source][part])


def is_one_file(source: str, path: Path) -> bool:
    """The root is the archive itself (any such root: gzip is refused before detection)."""
    return path.is_file()


def holds_shards(source: str, path: Path) -> bool:
    """A Hub copy's webdataset shards, or just its ``_info.json``."""
    return hub_layout(path) == WDS


def holds_parquet(source: str, path: Path) -> bool:
    return hub_layout(path) == PARQUET


# How each layout of the table (core/image_layouts.py) is recognised in a root of one of its
# sources, a folder unless the entry's root_is_file; detect_layout tries them in the table's order.
DETECTORS = {FOLDERS: holds_folders, TARS: holds_tars, OUTER_TAR: is_one_file, WDS: holds_shards,
             PARQUET: holds_parquet}


def detect_layout(source: str, root: str | os.PathLike) -> str:
    """The layout of ``root``, from what it holds: the first of its source's layouts whose
    detector recognises it; an error naming the setting when none does."""
    path = Path(root)
    if not path.exists():
        raise ImageRootError(f"{root_setting(source)} = '{root}' does not exist; point it at your copy of ImageNet.")
    _check_detectable(source, path)
    for name in SOURCE_LAYOUTS[source]:
        if LAYOUTS_BY_NAME[name].root_is_file == path.is_file() and DETECTORS[name](source, path):
            return name
    raise ImageRootError(_nothing_found(source, path))


def _check_detectable(source: str, path: Path) -> None:
    """What no layout can read, named with its fix: a gzip-compressed tar, a root holding
    both synset folders and synset tars, an IN-1K-like root that is not a folder."""
    setting = root_setting(source)
    if source != IN21K:
        if not path.is_dir():
            raise ImageRootError(
                f"{setting} = '{path}' is not a folder; point it at the folder holding the release's "
                f"{' and '.join(PART_ARCHIVES[source]['train'] + PART_ARCHIVES[source]['val'])} or its train/ and val/ folders."
            )
        return
    if path.is_file():
        if _is_gzip(path):
            raise ImageRootError(
                f"{setting} = '{path}' is gzip-compressed, and a compressed tar cannot be read by offset. "
                f"Either 'gunzip {path.name}' (one uncompressed tar of the same content; point {setting} at it) "
                f"or 'tar xzf {path.name}' (a folder of one tar per synset; point {setting} at that folder)."
            )
        return
    folders, tars = _wnid_entries(path)
    if folders and tars:
        raise ImageRootError(
            f"{setting} = '{path}' holds both synset folders (<wnid>/, {folders}) and synset tars "
            f"(<wnid>.tar, {tars}); set {layout_setting(IN21K)} to folders or tars to say which to read."
        )


def _nothing_found(source: str, path: Path) -> str:
    setting = root_setting(source)
    if source == IN21K:
        hint = ", ".join(_release_files(path))
        return (
            f"{setting} = '{path}' holds neither synset folders (<root>/n01440764/*.JPEG), synset tars "
            f"(<root>/n01440764.tar) nor webdataset shards (imagenet22k-train-0000.tar)"
            + (f"; it holds {hint}: point {setting} at that tar (after gunzip if it is a .tar.gz), or at the "
               f"folder 'tar xzf' makes of it" if hint else "")
            + f". {layout_setting(IN21K)} can name the layout ({', '.join(SOURCE_LAYOUTS[IN21K])})."
        )
    compressed = [f"{name}.gz" for part in PARTS for name in PART_ARCHIVES[source][part] if (path / f"{name}.gz").exists()]
    if compressed:
        return (
            f"{setting} = '{path}' holds {', '.join(compressed)}, gzip-compressed, which cannot be read by offset: "
            f"'gunzip' them (uncompressed tars of the same content, read in place) or extract them with 'tar xzf'."
        )
    hub = any(LAYOUTS_BY_NAME[name].hub for name in SOURCE_LAYOUTS[source])
    return (
        f"{setting} = '{path}' holds neither {' nor '.join(f'{name}/' for name in PART_FOLDERS[source]['train'])} "
        f"(class folders) nor {' nor '.join(PART_ARCHIVES[source]['train'])}"
        + (" nor a Hub copy (webdataset shards, data/*.parquet)" if hub else "")
        + "; point it at the folder holding the release's tars, the extracted train/ and val/ folders"
        + (", or the download of timm/imagenet-1k-wds or ILSVRC/imagenet-1k." if hub else ".")
    )


def resolve_layout(source: str, root: str | os.PathLike, configured: str = "auto") -> str:
    """``configured``, checked against the root, or the detected layout for ``auto``."""
    if source not in SOURCE_LAYOUTS:
        raise ValueError(f"unknown image source {source!r}; one of {', '.join(SOURCES)}")
    if configured == "auto":
        return detect_layout(source, root)
    if configured not in SOURCE_LAYOUTS[source]:
        raise ImageRootError(
            f"{layout_setting(source)} is {configured!r}; it must be auto or one of {', '.join(SOURCE_LAYOUTS[source])}."
        )
    path = Path(root)
    root_is_file = LAYOUTS_BY_NAME[configured].root_is_file
    if root_is_file and not path.is_file():
        raise ImageRootError(
            f"{layout_setting(source)} is tar, but {root_setting(source)} = '{root}' is not a file; point it at the "
            f"uncompressed release tar (e.g. winter21_whole.tar) or set the layout to auto."
        )
    if not root_is_file and not path.is_dir():  # the Hub's shards lie in a folder too
        raise ImageRootError(
            f"{layout_setting(source)} is {configured}, but {root_setting(source)} = '{root}' is not a folder; fix "
            f"the root or set the layout to auto."
        )
    return configured


def index_archives(source: str, root: str | os.PathLike, layout: str) -> list[str]:
    """The files of a root to index, relative to it (``.``: the root itself): tars, or a
    Hub copy's training and validation shards."""
    path = Path(root)
    if LAYOUTS_BY_NAME[layout].root_is_file:
        return ["."]
    if layout in SHARD_LAYOUTS:
        return hub_shards(source, path, layout)
    if layout != TARS:
        raise ImageRootError(f"{root_setting(source)} has layout {layout}, which has no tars to index.")
    if source == IN21K:
        with os.scandir(path) as entries:
            names = sorted(entry.name for entry in entries
                           if entry.name.endswith(".tar") and WNID.match(entry.name[:-4]) and entry.is_file())
        if not names:
            raise ImageRootError(f"{root_setting(source)} = '{root}' holds no synset tar (<wnid>.tar) to index.")
        return names
    found = {part: [name for name in PART_ARCHIVES[source][part] if (path / name).is_file()] for part in PARTS}
    missing = [part for part in PARTS if not found[part]]
    if missing:
        raise ImageRootError(
            f"{root_setting(source)} = '{root}' has no {' or '.join(name for part in missing for name in PART_ARCHIVES[source][part])}; "
            f"both the training and the validation tar of the release are needed."
        )
    return [found[part][0] for part in PARTS]


def hub_shards(source: str, path: Path, layout: str) -> list[str]:
    """A Hub copy's shards of the sets a source reads (train and validation; IN-1K needs
    both), found by globbing the folder (the cards' shard ranges are not to be trusted)."""
    shards, parquets = hub_files(path)
    found = [name for name in (parquets if layout in PARQUET_ROW_LAYOUTS else shards) if shard_part(name) in PARTS]
    setting = root_setting(source)
    if not found:
        listed = read_info(path) if layout in INFO_LISTED_LAYOUTS else None
        raise ImageRootError(
            f"{setting} = '{path}' holds no {LAYOUTS_BY_NAME[layout].hub_file} "
            f"to index" + (f" (its {INFO_FILE} lists {sum(len(files) for files in listed.values())})" if listed else "")
            + "; download the copy's shards into it (docs/imagenet.md)."
        )
    missing = [part for part in PARTS if source != IN21K and not any(shard_part(name) == part for name in found)]
    if missing:
        raise ImageRootError(f"{setting} = '{path}' has no {' or '.join(missing)} shards; IN-1K needs its training and "
                             f"validation sets both.")
    return found


def _list_folder(folder: Path) -> list[str] | None:
    """Sorted image file names in ``folder``; None when it does not exist."""
    try:
        with os.scandir(folder) as entries:
            return sorted(entry.name for entry in entries if is_image_name(entry.name) and entry.is_file())
    except (FileNotFoundError, NotADirectoryError):
        return None


@dataclass(frozen=True)
class ConceptImages:
    """Where a concept's images are: paths relative to the root, sorted by file name; the
    folder (or tar) they were listed from, for messages."""

    paths: list[str]
    where: str


class ImageRoot:
    """One configured image root: its layout, and the images of its concepts.

    ``index`` is the root's image index (tar layouts); ``val_labels`` the validation labels
    file of an IN-1K root whose validation tar is flat (default: the devkit in the root).
    """

    def __init__(self, source: str, root: str | os.PathLike, layout: str, index: str | os.PathLike | None = None,
                 val_labels: str | os.PathLike | None = None, setting: str | None = None):
        if source not in SOURCES:
            raise ValueError(f"unknown image source {source!r}; one of {', '.join(SOURCES)}")
        self.source = source
        self.root = Path(root)
        self.layout = layout
        self.setting = setting or root_setting(source)
        self.val_labels_setting = val_labels
        self._index = None
        self.index_path = index
        self._labels: dict[str, str] | None = None
        if layout in ARCHIVE_LAYOUTS and index is None:
            raise ImageRootError(f"{self.setting} has layout {layout}: its image index is needed to read it.")

    @property
    def index(self) -> ImageIndex:
        if self._index is None:
            self._index = ImageIndex(self.index_path)
            if Path(self._index.root).resolve() != self.root.resolve():
                raise ImageRootError(
                    f"image index {self.index_path} was built for '{self._index.root}', not for {self.setting} = "
                    f"'{self.root}'; delete it and re-run to index this root."
                )
        return self._index

    def describe(self) -> str:
        return f"{self.setting} = '{self.root}' (layout {self.layout})"

    # IN-21K: one folder or tar per concept -------------------------------------------------
    def concept_images(self, wnids: Sequence[str], threads: int = 4) -> dict[str, ConceptImages | None]:
        """Each concept's images; None for a concept the root lacks."""
        if self.layout not in ARCHIVE_LAYOUTS:
            folders = [self.root / wnid for wnid in wnids]
            with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
                listings = list(pool.map(_list_folder, folders))
            return {
                wnid: None if names is None else ConceptImages([f"{wnid}/{name}" for name in names], str(folder))
                for wnid, folder, names in zip(wnids, folders, listings)
            }
        found = {}
        for wnid in wnids:
            folders = self.index.folders_of(wnid)
            if len(folders) > 1:
                raise ImageRootError(
                    f"{self.describe()} holds concept {wnid} in {len(folders)} places "
                    f"({', '.join(folder.path for folder in folders)}); keep one."
                )
            found[wnid] = folders[0] if folders else None
        present = [folder for folder in found.values() if folder is not None]
        names = dict(zip((folder.path for folder in present), self.index.names(present)))
        return {
            wnid: None if folder is None else ConceptImages(
                [f"{folder.path}/{name}" for name in names[folder.path]], self._where(folder.path))
            for wnid, folder in found.items()
        }

    def _where(self, folder: str) -> str:
        if self.layout in SHARD_LAYOUTS:
            return f"{self.root} ({self.layout} shards) concept {folder}"
        return str(self.root) + (f" member {folder}" if LAYOUTS_BY_NAME[self.layout].root_is_file else f"/{folder}")

    # IN-1K-like roots: the official training and validation sets ------------------------------
    def part_images(self, wnids: Sequence[str], part: str, threads: int = 4) -> dict[str, ConceptImages | None]:
        """Each concept's images of the official ``train`` or ``val`` set; None when absent."""
        if self.source == IN21K:
            raise ValueError("ImageNet-21K has no official sets; use concept_images")
        if self.layout not in ARCHIVE_LAYOUTS:
            folder_name = next((name for name in PART_FOLDERS[self.source][part] if (self.root / name).is_dir()),
                               PART_FOLDERS[self.source][part][0])
            folders = [self.root / folder_name / wnid for wnid in wnids]
            with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
                listings = list(pool.map(_list_folder, folders))
            return {
                wnid: None if names is None else ConceptImages([f"{folder_name}/{wnid}/{name}" for name in names], str(folder))
                for wnid, folder, names in zip(wnids, folders, listings)
            }
        if self.layout in SHARD_LAYOUTS:
            return self._shard_part_images(wnids, part)
        archives = [number for number, path in enumerate(self.index.archive_paths)
                    if path in PART_ARCHIVES[self.source][part]]
        if not archives:
            raise ImageRootError(
                f"{self.describe()}: the image index {self.index_path} has no {' or '.join(PART_ARCHIVES[self.source][part])}; "
                f"delete it and re-run to index the root as it is now."
            )
        folders = [folder for folder in self.index.folders if folder.archive in archives]
        by_wnid = {}
        for folder in folders:
            if folder.wnid:
                by_wnid.setdefault(folder.wnid, []).append(folder)
        flat = [folder for folder in folders if not folder.wnid]
        images: dict[str, list[str]] = {wnid: [] for wnid in wnids}
        where: dict[str, str] = {}
        wanted = set(wnids)
        listed = [folder for wnid in wnids for folder in by_wnid.get(wnid, [])]
        for folder, names in zip(listed, self.index.names(listed)):
            images[folder.wnid] += [f"{folder.path}/{name}" for name in names]
            where[folder.wnid] = self._where(folder.path)
        if flat:
            labels = self.val_labels()
            unlabelled = []
            for folder, names in zip(flat, self.index.names(flat)):
                for name in names:
                    wnid = labels.get(val_stem(name))
                    if wnid is None:
                        unlabelled.append(f"{folder.path}/{name}")
                    elif wnid in wanted:
                        images[wnid].append(f"{folder.path}/{name}")
                        where[wnid] = self._where(folder.path)
            if unlabelled:
                raise ImageRootError(
                    f"{len(unlabelled)} images of {self.describe()} have no label in {self.labels_file()} (first: "
                    f"{unlabelled[0]}); the labels belong to another release: use the ILSVRC2012 devkit, or set "
                    f"data.in1k_val_labels to this release's labels file."
                )
        return {wnid: ConceptImages(sorted(paths, key=lambda path: path.rsplit("/", 1)[-1]), where[wnid]) if paths else None
                for wnid, paths in images.items()}

    def _shard_part_images(self, wnids: Sequence[str], part: str) -> dict[str, ConceptImages | None]:
        """A Hub copy's images of one set: the index's folders ``<part>/<wnid>``."""
        folders = [self.index.folder(f"{part}/{wnid}") for wnid in wnids]
        present = [folder for folder in folders if folder is not None]
        names = dict(zip((folder.path for folder in present), self.index.names(present)))
        return {
            wnid: None if folder is None else ConceptImages(
                [f"{folder.path}/{name}" for name in names[folder.path]], self._where(folder.path))
            for wnid, folder in zip(wnids, folders)
        }

    def labels_file(self) -> Path:
        path = find_labels(self.root, self.val_labels_setting)
        if path is None:
            raise ImageRootError(
                f"{self.describe()}: the validation tar is flat, and no labels were found: put the ILSVRC2012 devkit "
                f"(ILSVRC2012_devkit_t12.tar.gz) in the root, or set data.in1k_val_labels to a labels file "
                f"(LOC_val_solution.csv, one wnid per line, or '<file> <wnid>' lines)."
            )
        return path

    def val_labels(self) -> dict[str, str]:
        if self._labels is None:
            try:
                self._labels = read_val_labels(self.labels_file())
            except LabelError as error:
                raise ImageRootError(str(error)) from None
        return self._labels


def image_count(images: ConceptImages | None) -> int:
    return 0 if images is None else len(images.paths)


def check_index_current(root: ImageRoot) -> list[str]:
    """How the root differs from what its index recorded (empty when it is current): tars
    changed, gone, or (in a folder of synset tars) added since it was built."""
    if root.layout not in ARCHIVE_LAYOUTS:
        return []
    index = root.index
    problems = []
    for number, relative in enumerate(index.archive_paths):
        path = index.archive_path(number)
        try:
            status = path.stat()
        except FileNotFoundError:
            problems.append(f"{relative} is gone")
            continue
        if (status.st_size, status.st_mtime_ns) != (int(index.archive_sizes[number]), int(index.archive_mtimes[number])):
            problems.append(f"{relative} changed")
    try:
        now = index_archives(root.source, root.root, root.layout)
    except ImageRootError:
        now = []
    added = sorted(set(now) - set(index.archive_paths))
    if added:
        problems.append(f"{len(added)} tars added ({', '.join(added[:5])}{', ...' if len(added) > 5 else ''})")
    return problems


def stale_index_message(root: ImageRoot, problems: Sequence[str]) -> str:
    return (
        f"the image index {root.index_path} no longer describes {root.describe()}: {'; '.join(problems)} since it "
        f"was built. Delete {root.index_path} and re-run: it is rebuilt, and finished splits and features are kept."
    )
