"""The ``image-splits`` command: train/test image lists of each dataset (paper supplementary A).

A level concept's images are the files in ``<in21k_root>/<wnid>/``; ``test_per_concept``
of them (50 in the paper) are drawn at random for testing and the rest, capped at
``max_train_per_concept`` (1300), are kept for training. The draw of one concept uses a
random generator derived from (seed, wnid) alone, so adding, removing or reordering other
concepts never changes it. IN-1K keeps its official sets: ``<in1k_root>/train/<wnid>/`` for
training and ``<in1k_root>/val/<wnid>/`` for testing. With the authors' split pickle, its
file lists replace the draw. A root in one of the releases' tar layouts (``--layout tars`` or
``tar``) is listed from its image index (``core/image_roots.py``) instead of folders; its
paths name the tar member (``n01440764.tar/n01440764_10026.JPEG``), and the same images are
drawn as from the extracted folders (a concept's listing is sorted by file name in both).

The output, one TSV per dataset, has the columns ``path wnid label split``: ``path`` is
relative to the dataset's image root, ``label`` is the index of ``wnid`` among the
dataset's wnids sorted, and rows are ordered by split (all ``train`` rows, then all
``test`` rows), then by concept and path within a split (for folder trees, whose paths begin
with the concept, that is by path; IN-1K's flat validation tar is ordered as its folders). The same inputs therefore give the same bytes,
and the rows of one split in file order are the order features are extracted in.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from imagenet_cog.core.archives import WNID, ArchiveError, is_image_name
from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.image_layouts import ARCHIVE_LAYOUTS, FOLDERS, LAYOUT_NAMES
from imagenet_cog.core.image_roots import ConceptImages, ImageRoot, ImageRootError
from imagenet_cog.core.io import read_lines, write_tsv
from imagenet_cog.core.naming import IN1K, IN1K_BLURRED, IN21K
from imagenet_cog.core.pickles import read_data_pickle
from imagenet_cog.core.sampling import derived_rng

SPLIT_ORDER = ("train", "test")
HEADER = ("path", "wnid", "label", "split")


class SplitError(ExplainedError, ValueError):
    """Input that cannot give a valid split; the message names the file and the fix."""


def list_images(folder: str | os.PathLike) -> list[str]:
    """Sorted names of the image files (JPEG/jpg/png, any case) directly in ``folder``."""
    with os.scandir(folder) as entries:
        return sorted(
            entry.name
            for entry in entries
            if is_image_name(entry.name) and entry.is_file()
        )


def sample_concept(
    wnid: str,
    file_names: Sequence[str],
    test_per_concept: int,
    max_train_per_concept: int,
    seed: int,
    folder: str | os.PathLike = "",
) -> tuple[list[str], list[str]]:
    """(train, test) file names of one concept, each sorted.

    ``file_names`` must be the concept's complete sorted listing: the draw permutes it.
    """
    if len(file_names) < test_per_concept + 1:
        raise SplitError(
            f"concept {wnid} has {len(file_names)} images{f' in {folder}' if folder else ''}, fewer than the {test_per_concept} test "
            f"images plus at least one for training; lower splits.test_per_concept or remove the "
            f"concept from the level."
        )
    order = derived_rng("split", seed, wnid).permutation(len(file_names))
    test = order[:test_per_concept]
    train = order[test_per_concept : test_per_concept + max_train_per_concept]
    return sorted(file_names[i] for i in train), sorted(file_names[i] for i in test)


def _has_wnid_folders(path: Path) -> bool:
    with os.scandir(path) as entries:
        return any(entry.is_dir() and WNID.match(entry.name) for entry in entries)


def check_in21k_root(root: str | os.PathLike, setting: str) -> None:
    path = Path(root)
    if not path.is_dir():
        raise SplitError(
            f"image root '{root}' ({setting}) is not a folder; set {setting} to the folder that "
            f"holds one subfolder of images per IN-21K concept (<root>/n01440764/*.JPEG)."
        )
    if not _has_wnid_folders(path):
        raise SplitError(
            f"image root '{root}' ({setting}) has no wnid subfolders such as n01440764/; "
            f"ImageNet-21K is expected as <root>/<wnid>/*.JPEG (extract the per-synset tars "
            f"into such folders), so point {setting} at that folder."
        )


def check_in1k_root(root: str | os.PathLike, setting: str) -> None:
    path = Path(root)
    if not path.is_dir():
        raise SplitError(
            f"image root '{root}' ({setting}) is not a folder; set {setting} to the ImageNet-1K "
            f"folder holding train/<wnid>/*.JPEG and val/<wnid>/*.JPEG."
        )
    missing = [name for name in ("train", "val") if not (path / name).is_dir()]
    if missing:
        raise SplitError(
            f"image root '{root}' ({setting}) has no {' or '.join(f'{m}/' for m in missing)} "
            f"folder; ImageNet-1K is expected as <root>/train/<wnid>/*.JPEG and "
            f"<root>/val/<wnid>/*.JPEG (validation images sorted into one folder per class, as "
            f"torchvision's ImageFolder expects)."
        )
    if not _has_wnid_folders(path / "train"):
        raise SplitError(
            f"image root '{root}' ({setting}) has no class folders train/<wnid>/ (such as "
            f"train/n01440764/); point {setting} at the folder holding train/<wnid>/*.JPEG and "
            f"val/<wnid>/*.JPEG."
        )
    if list_images(path / "val") and not _has_wnid_folders(path / "val"):
        raise SplitError(
            f"'{path / 'val'}' ({setting}) holds the validation images in one flat folder; sort "
            f"them into val/<wnid>/ folders by their ground-truth labels (the ILSVRC2012 devkit "
            f"lists them) so that each test image has its concept."
        )


def _concept_images(root: Path, relative_folder: str, wnid: str, setting: str) -> list[str]:
    folder = root / relative_folder
    if not folder.is_dir():
        raise SplitError(
            f"concept {wnid}: folder '{folder}' is missing under the image root ({setting}); "
            f"add its images there, or remove {wnid} from the dataset's concept list."
        )
    names = list_images(folder)
    if not names:
        raise SplitError(
            f"concept {wnid}: folder '{folder}' holds no .JPEG/.jpg/.png image; add its images."
        )
    return names


def _listings(root: Path, folders: Sequence[tuple[str, str]], setting: str, threads: int) -> list[list[str]]:
    """Images of many (relative folder, wnid) at once: on network file systems the listing
    of thousands of folders is latency-bound, so it runs on a few threads."""
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        return list(pool.map(lambda item: _concept_images(root, item[0], item[1], setting), folders))


def level_rows(
    root: str | os.PathLike,
    wnids: Sequence[str],
    test_per_concept: int,
    max_train_per_concept: int,
    seed: int,
    setting: str = "data.in21k_root",
    threads: int = 4,
    archive: ImageRoot | None = None,
) -> list[tuple[str, str, str]]:
    """(path, wnid, split) of every sampled image of a level's concepts; ``archive``: the
    root in a tar layout, listed from its index."""
    if archive is None:
        check_in21k_root(root, setting)
        listings = [ConceptImages([f"{wnid}/{name}" for name in names], str(Path(root) / wnid))
                    for wnid, names in zip(wnids, _listings(Path(root), [(wnid, wnid) for wnid in wnids], setting, threads))]
    else:
        listings = _archive_listings(archive, wnids)
    rows = []
    for wnid, images in zip(wnids, listings):
        train, test = sample_concept(wnid, images.paths, test_per_concept, max_train_per_concept, seed, images.where)
        rows += [(path, wnid, "train") for path in train]
        rows += [(path, wnid, "test") for path in test]
    return rows


def _archive_listings(archive: ImageRoot, wnids: Sequence[str]) -> list[ConceptImages]:
    found = archive.concept_images(wnids)
    missing = [wnid for wnid in wnids if found[wnid] is None]
    if missing:
        raise SplitError(
            f"{len(missing)} concepts are not in {archive.describe()} (e.g. {', '.join(missing[:5])}); add their "
            f"synset tars and delete {archive.index_path} to index them again, or remove them from the dataset."
        )
    empty = [wnid for wnid in wnids if not found[wnid].paths]
    if empty:
        raise SplitError(f"concept {empty[0]}: {found[empty[0]].where} holds no .JPEG/.jpg/.png image; add its images.")
    return [found[wnid] for wnid in wnids]


def in1k_rows(
    root: str | os.PathLike, wnids: Sequence[str], setting: str = "data.in1k_root", threads: int = 4,
    archive: ImageRoot | None = None,
) -> list[tuple[str, str, str]]:
    """(path, wnid, split) of the official IN-1K sets: train/ for training, val/ for testing
    (``archive``: the release's training tar of class tars and its validation tar, the flat
    one labelled by the devkit)."""
    if archive is not None:
        rows = []
        for part, split in (("train", "train"), ("val", "test")):
            found = archive.part_images(wnids, part, threads)
            missing = [wnid for wnid in wnids if found[wnid] is None]
            if missing:
                raise SplitError(
                    f"{len(missing)} classes have no {part} image in {archive.describe()} (e.g. "
                    f"{', '.join(missing[:5])}); the root should hold the whole ILSVRC2012 release."
                )
            rows += [(path, wnid, split) for wnid in wnids for path in found[wnid].paths]
        return rows
    check_in1k_root(root, setting)
    folders = [(f"{folder}/{wnid}", wnid) for folder in ("train", "val") for wnid in wnids]
    listings = _listings(Path(root), folders, setting, threads)
    return [
        (f"{folder}/{name}", wnid, "train" if folder.startswith("train/") else "test")
        for (folder, wnid), names in zip(folders, listings)
        for name in names
    ]


def _file_list(value: object) -> list[str] | None:
    """Strings of a list, tuple or numpy array (the authors' pickle holds arrays)."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return list(value)
    return None


def load_published_splits(path: str | os.PathLike) -> dict[str, dict[str, list[str]]]:
    """The authors' split pickle: wnid -> {'train': [file...], 'test': [file...]}, read
    without running code (:func:`imagenet_cog.core.pickles.read_data_pickle`)."""
    shape = "a dict mapping each wnid to {'train': [file names], 'test': [file names]}"
    try:
        content = read_data_pickle(path)
    except FileNotFoundError:
        raise SplitError(
            f"levels.published_splits: '{path}' does not exist; set it to the authors' split "
            f"pickle or to null to draw the splits."
        ) from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError) as error:
        raise SplitError(
            f"levels.published_splits: '{path}' is not a readable pickle ({error}); it should be "
            f"{shape}."
        ) from None
    if not isinstance(content, Mapping) or not content:
        raise SplitError(
            f"levels.published_splits: '{path}' holds a {type(content).__name__}, not {shape}."
        )
    splits: dict[str, dict[str, list[str]]] = {}
    for wnid, entry in content.items():
        lists = {}
        if isinstance(entry, Mapping):
            lists = {split: _file_list(entry.get(split)) for split in SPLIT_ORDER}
        if not isinstance(wnid, str) or not lists or any(v is None for v in lists.values()):
            raise SplitError(
                f"levels.published_splits: '{path}' entry {wnid!r} is not {{'train': [file names], "
                f"'test': [file names]}}; the whole file should be {shape}."
            )
        splits[wnid] = lists  # type: ignore[assignment]
    return splits


def _relative_path(wnid: str, entry: str) -> str:
    """The authors' entries are paths relative to the IN-21K root, sometimes with a leading
    slash; a bare file name is taken to be inside the concept's folder."""
    entry = entry.lstrip("/\\")
    return entry if "/" in entry else f"{wnid}/{entry}"


def published_rows(
    root: str | os.PathLike,
    wnids: Sequence[str],
    pickle_path: str | os.PathLike,
    setting: str = "data.in21k_root",
    threads: int = 4,
    archive: ImageRoot | None = None,
) -> list[tuple[str, str, str]]:
    """(path, wnid, split) from the authors' split pickle, each file checked to exist; in a
    tar layout each file is named by its member (the authors' ``<wnid>/<file>`` is the file
    of the concept's synset tar)."""
    if archive is None:
        check_in21k_root(root, setting)
    published = load_published_splits(pickle_path)
    missing = [wnid for wnid in wnids if wnid not in published]
    if missing:
        raise SplitError(
            f"levels.published_splits: '{pickle_path}' has no split for {len(missing)} of the "
            f"dataset's concepts (e.g. {', '.join(missing[:5])}); use the split pickle that "
            f"belongs to levels.published_levels."
        )
    rows = []
    for wnid in wnids:
        for split in SPLIT_ORDER:
            paths = sorted({_relative_path(wnid, entry) for entry in published[wnid][split]})
            rows += [(path, wnid, split) for path in paths]
    if archive is not None:
        return _published_members(rows, archive, pickle_path)
    folders = sorted({os.path.dirname(path) for path, _, _ in rows})
    present = {
        f"{folder}/{name}"
        for folder, names in zip(folders, _listings(Path(root), [(f, f) for f in folders], setting, threads))
        for name in names
    }
    absent = [path for path, _, _ in rows if path not in present]
    if absent:
        raise SplitError(
            f"{len(absent)} images of the published splits are not under the image root "
            f"'{root}' ({setting}), e.g. {', '.join(absent[:3])}; point {setting} at the full "
            f"ImageNet-21K Fall 2011 copy the splits were drawn from."
        )
    return rows


def _published_members(rows: list[tuple[str, str, str]], archive: ImageRoot, pickle_path) -> list[tuple[str, str, str]]:
    """The published rows named by the members of the concepts' synset tars."""
    found = archive.concept_images(sorted({wnid for _, wnid, _ in rows}))
    members = {(wnid, path.rsplit("/", 1)[1]): path for wnid, images in found.items() if images for path in images.paths}
    named = [(members.get((wnid, path.rsplit("/", 1)[1])), path, wnid, split) for path, wnid, split in rows]
    absent = [path for member, path, _, _ in named if member is None]
    if absent:
        raise SplitError(
            f"{len(absent)} images of the published splits '{pickle_path}' are not in {archive.describe()}, e.g. "
            f"{', '.join(absent[:3])}; point the root at the ImageNet-21K release the splits were drawn from (Fall 2011, "
            f"or Winter 2021, which keeps every CoG concept's images)."
        )
    return [(member, wnid, split) for member, _, wnid, split in named]


def labelled_rows(rows: Iterable[tuple[str, str, str]], wnids: Sequence[str]) -> list[tuple[str, str, int, str]]:
    """Rows with labels (index among the sorted wnids), train rows first, then by concept and
    path (folder paths begin with the concept; a flat validation tar's do not)."""
    label = {wnid: index for index, wnid in enumerate(sorted(wnids))}
    rank = {split: index for index, split in enumerate(SPLIT_ORDER)}
    return sorted(
        ((path, wnid, label[wnid], split) for path, wnid, split in rows),
        key=lambda row: (rank[row[3]], row[1], row[0]),
    )


def read_concepts(path: str | os.PathLike) -> list[str]:
    """A dataset's wnids, checked: one wnid a line, no repeats."""
    try:
        wnids = read_lines(path)
    except FileNotFoundError:
        raise SplitError(f"concept list '{path}' does not exist; run the levels stage first.") from None
    bad = [wnid for wnid in wnids if not WNID.match(wnid)]
    if bad or not wnids:
        raise SplitError(
            f"concept list '{path}' should hold one wnid (n + 8 digits) a line; "
            + (f"found {bad[0]!r}." if bad else "it is empty.")
        )
    if len(set(wnids)) != len(wnids):
        raise SplitError(f"concept list '{path}' names a concept twice; each wnid must appear once.")
    return wnids


def image_splits(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog image-splits", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--dataset", required=True, help="in1k or a level (l1, l2, ...)")
    parser.add_argument("--concepts", required=True, help="the dataset's wnids, one a line")
    parser.add_argument("--root", required=True, help="the dataset's image root")
    parser.add_argument("--root-setting", default=None, help="config key of --root, for messages")
    parser.add_argument("--layout", default=FOLDERS, choices=LAYOUT_NAMES,
                        help="the root's layout; a tar layout is listed from --index")
    parser.add_argument("--index", default=None, help="the root's image index (tar layouts)")
    parser.add_argument("--val-labels", default=None,
                        help="IN-1K validation labels file (default: the devkit in the root)")
    parser.add_argument("--test-per-concept", type=int, default=50)
    parser.add_argument("--max-train-per-concept", type=int, default=1300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--published-splits", default=None, help="the authors' split pickle")
    parser.add_argument("--threads", type=int, default=4, help="folders listed at once")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)

    # IN-1K-blurred is IN-1K's concepts and official sets under its own root
    is_in1k = args.dataset in (IN1K, IN1K_BLURRED)
    setting = args.root_setting or ("data.in1k_root" if is_in1k else "data.in21k_root")
    try:
        wnids = read_concepts(args.concepts)
        archive = None
        if args.layout in ARCHIVE_LAYOUTS:
            source = IN1K_BLURRED if args.dataset == IN1K_BLURRED else IN1K if is_in1k else IN21K
            archive = ImageRoot(source, args.root, args.layout, args.index, args.val_labels, setting)
        if is_in1k:
            rows = in1k_rows(args.root, wnids, setting, args.threads, archive)
            how = "official train/ and val/ sets"
        elif args.published_splits:
            rows = published_rows(args.root, wnids, args.published_splits, setting, args.threads, archive)
            how = f"published splits {args.published_splits}"
        else:
            rows = level_rows(
                args.root, wnids, args.test_per_concept, args.max_train_per_concept, args.seed,
                setting, args.threads, archive,
            )
            how = (
                f"{args.test_per_concept} test images per concept drawn with seed {args.seed}, "
                f"training images capped at {args.max_train_per_concept}"
            )
    except (SplitError, ImageRootError, ArchiveError) as error:
        print(f"error: {args.dataset}: {error}", file=sys.stderr)
        return 1
    table = labelled_rows(rows, wnids)
    write_tsv(args.output, HEADER, table)
    counts = {split: sum(1 for row in table if row[3] == split) for split in SPLIT_ORDER}
    print(
        f"{args.dataset}: {len(wnids)} concepts, {counts['train']} train and {counts['test']} test "
        f"images from {args.root} ({how}) -> {args.output}"
    )
    return 0
