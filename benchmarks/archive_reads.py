"""Reading ImageNet from its tars and from the Hugging Face Hub's shards against reading the
same images from extracted folders.

Generates ImageNet-like JPEGs (shorter side 375 px, about 90 KB each, ``--synsets``
synsets) and writes the same bytes five ways: extracted folders ``<wnid>/*.JPEG``, a folder
of per-synset tars (what ``tar xzf winter21_whole.tar.gz`` leaves), one outer tar of them
(``winter21_whole.tar`` after ``gunzip``), webdataset shards as ``timm/imagenet-22k-wds``
(``--shards`` training shards and a few validation shards, samples shuffled across them, with
``.cls`` and ``class_name`` json) and parquet files as ``ILSVRC/imagenet-1k`` (row groups of
``--row-group`` images). Then, in one run, it measures:

* the index build (:func:`imagenet_cog.core.archives.build_index`,
  :func:`imagenet_cog.core.shards.build_shard_index`) on 1 and on ``--processes`` processes,
  and from the shards' rate the projected index time of the 22k copy's 4,608 shards
  (14,146,391 samples);
* listing every concept's images as the split stage does (``ImageRoot.concept_images``;
  parquet, an IN-1K root: ``part_images``);
* reading every image's bytes in split-table order (folders: open and read each file;
  tars and shards: :class:`~imagenet_cog.core.archives.MemberReader`, one ``pread`` each;
  parquet: :class:`~imagenet_cog.core.archives.ParquetReader`, a row group at a time),
  with the files' pages first dropped from the page cache (``cold``: ``os.sync`` then
  ``posix_fadvise(DONTNEED)``, what a first pass over a dataset larger than memory sees) and
  again with them cached (``warm``);
* the extraction loader's host path on top (PIL decode, bicubic resize to 224, center crop:
  ``ImageRows`` of :mod:`imagenet_cog.features.extract`, through the index's reader) in a
  DataLoader with ``--workers`` workers.

Each line gives images/s of each layout and its ratio to folders. The shapes are written by
the tests' generator (``tests/imagenet_world.py``).

    python benchmarks/archive_reads.py --images 4000 --synsets 40 --processes 2 --workers 2
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from imagenet_world import (  # noqa: E402
    synset_images,
    write_folders,
    write_info,
    write_outer_tar,
    write_parquet_files,
    write_synset_tars,
    write_wds_shards,
)

from imagenet_cog.core.archives import ImageIndex, build_index  # noqa: E402
from imagenet_cog.core.image_layouts import (  # noqa: E402
    ARCHIVE_LAYOUTS,
    FOLDERS,
    IMAGE_LAYOUTS,
    LAYOUT_NAMES,
    LAYOUTS_BY_NAME,
    OUTER_TAR,
    PARQUET,
    SHARD_LAYOUTS,
    TARS,
    WDS,
)
from imagenet_cog.core.image_roots import ImageRoot, index_archives  # noqa: E402
from imagenet_cog.core.naming import IN1K  # noqa: E402
from imagenet_cog.core.parquet_images import SHARD_SCANS  # noqa: E402
from imagenet_cog.core.shards import build_shard_index  # noqa: E402

NAMES = {layout.name: layout.title for layout in IMAGE_LAYOUTS}
# timm/imagenet-22k-wds: 4,096 training and 512 validation shards
HUB_22K_SHARDS, HUB_22K_SAMPLES = 4608, 13_673_551 + 472_840


def drop_from_page_cache(paths: list[Path]) -> None:
    os.sync()
    for path in paths:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)


def files_under(root: Path) -> list[Path]:
    return [root] if root.is_file() else [path for path in root.rglob("*") if path.is_file()]


def read_folder_bytes(root: Path, paths: list[str]) -> int:
    total = 0
    for path in paths:
        with open(root / path, "rb") as stream:
            total += len(stream.read())
    return total


def read_indexed_bytes(index: ImageIndex, paths: list[str]) -> int:
    reader = index.reader(paths)
    total = sum(len(reader.read(position)) for position in range(len(paths)))
    reader.close()
    return total


def decode_rate(dataset, workers: int) -> float:
    from torch.utils.data import DataLoader

    loader = DataLoader(dataset, batch_size=32, num_workers=workers, collate_fn=lambda batch: batch)
    started = time.perf_counter()
    count = sum(len(batch) for batch in loader)
    return count / (time.perf_counter() - started)


def write_copies(base: Path, images: dict, shards: int, row_group: int) -> dict[str, Path]:
    """The same bytes in every layout; the validation shards and files hold each synset's
    last two images, as the Hub's copies hold some of each class."""
    held_out = {wnid: dict(sorted(files.items())[-2:]) for wnid, files in images.items()}
    kept = {wnid: {name: data for name, data in files.items() if name not in held_out[wnid]} for wnid, files in images.items()}
    wds = base / "imagenet-22k-wds"
    write_info(wds, {"train": write_wds_shards(wds, "imagenet22k", "train", kept, shards),
                     "validation": write_wds_shards(wds, "imagenet22k", "validation", held_out, max(1, shards // 8))})
    parquet = base / "imagenet-1k"
    classes = sorted(images)
    write_parquet_files(parquet, "train", kept, shards, classes, row_group_size=row_group)
    write_parquet_files(parquet, "validation", held_out, 1, classes, row_group_size=row_group)
    return {FOLDERS: write_folders(base / "folders", images), TARS: write_synset_tars(base / "winter21_whole", images),
            OUTER_TAR: write_outer_tar(base / "winter21_whole.tar", images), WDS: wds, PARQUET: parquet}


def layout_source(layout: str) -> str:
    # the parquet copy is IN-1K's; every other layout is written here as IN-21K synsets
    return LAYOUTS_BY_NAME[layout].sources[0]


def image_root(layout: str, root: Path, index: Path | None) -> ImageRoot:
    return ImageRoot(layout_source(layout), root, layout, index)


def listing(layout: str, root: ImageRoot, wnids: list[str]) -> list[str]:
    """Every image of the split stage's listing, in split-table order."""
    if root.source == IN1K:  # IN-1K's images are listed per part
        parts = [root.part_images(wnids, part) for part in ("train", "val")]
        return sorted((path for found in parts for images in found.values() for path in images.paths),
                      key=lambda path: path.split("/", 1)[1])
    return sorted(path for images in root.concept_images(wnids).values() for path in images.paths)


def measure_index(base: Path, roots: dict[str, Path], processes: int) -> dict[str, Path]:
    print("\nindex build (seconds, images/s, cold page cache)")
    indexes = {}
    for layout in ARCHIVE_LAYOUTS:
        source = layout_source(layout)
        files = index_archives(source, roots[layout], layout)
        for count in sorted({1, processes}):
            drop_from_page_cache(files_under(roots[layout]))
            output = base / f"{layout}-{count}.h5"
            if layout in SHARD_LAYOUTS:
                summary = build_shard_index(source, roots[layout], files, output, layout, scan=SHARD_SCANS[layout],
                                            processes=count)
            else:
                summary = build_index(roots[layout], files, output, processes=count)
            indexes[layout] = output
            line = (f"  {NAMES[layout]:14s} {count} process{'es' if count > 1 else '  '}: {summary.seconds:6.2f} s, "
                    f"{summary.images / summary.seconds:8.0f} images/s")
            if layout == WDS:
                line += (f"; the 22k copy's {HUB_22K_SHARDS:,} shards ({HUB_22K_SAMPLES:,} samples) at this rate: "
                         f"{HUB_22K_SAMPLES / (summary.images / summary.seconds) / 60:.0f} min")
            print(line)
    return indexes


def measure_reads(roots: dict[str, Path], indexes: dict[str, Path], paths: dict[str, list[str]], size: int) -> None:
    print("\nreading every image's bytes in split order, images/s (ratio to folders)")
    for state in ("cold", "warm"):
        rates = {}
        for layout in LAYOUT_NAMES:
            if state == "cold":
                drop_from_page_cache(files_under(roots[layout]))
            started = time.perf_counter()
            if layout == FOLDERS:
                read = read_folder_bytes(roots[layout], paths[layout])
            else:
                read = read_indexed_bytes(ImageIndex(indexes[layout]), paths[layout])
            assert read == size, layout
            rates[layout] = len(paths[layout]) / (time.perf_counter() - started)
        print(f"  {state}: " + ", ".join(f"{NAMES[layout]} {rates[layout]:.0f}"
                                         + (f" ({rates[layout] / rates[FOLDERS]:.2f}x)" if layout != FOLDERS else "")
                                         for layout in LAYOUT_NAMES))


def measure_loader(roots, indexes, paths, count: int, decode_images: int, workers: int) -> None:
    from imagenet_cog.features.extract import ImageRows
    from imagenet_cog.models.registry import Preprocessing

    print(f"\nthe loader's host path (decode, resize, crop 224), {workers} workers, warm, images/s")
    chosen = sorted(np.random.default_rng(0).choice(count, size=min(count, decode_images), replace=False))
    rates = {}
    for layout in LAYOUT_NAMES:
        subset = [paths[layout][position] for position in chosen]
        reader = None if layout == FOLDERS else ImageIndex(indexes[layout]).reader(subset)
        rates[layout] = decode_rate(ImageRows(roots[layout], subset, Preprocessing(), reader), workers)
    print("  " + ", ".join(f"{NAMES[layout]} {rates[layout]:.1f}"
                           + (f" ({rates[layout] / rates[FOLDERS]:.2f}x)" if layout != FOLDERS else "")
                           for layout in LAYOUT_NAMES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--synsets", type=int, default=40)
    parser.add_argument("--shards", type=int, default=16, help="webdataset training shards and parquet training files")
    parser.add_argument("--row-group", type=int, default=100, help="parquet rows per row group (the Hub's: 100)")
    parser.add_argument("--processes", type=int, default=2, help="index build processes (besides 1)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers of the decode measurement")
    parser.add_argument("--decode-images", type=int, default=1000, help="images decoded per layout")
    parser.add_argument("--folder", default=None, help="where to write the copies (default: a temporary folder)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.folder) as temporary:
        base = Path(temporary)
        wnids = [f"n{number:08d}" for number in range(1, args.synsets + 1)]
        started = time.perf_counter()
        images = synset_images(wnids, args.images // args.synsets, seed=0, size=375)
        roots = write_copies(base, images, args.shards, args.row_group)
        count = sum(len(files) for files in images.values())
        size = sum(len(data) for files in images.values() for data in files.values())
        print(f"{count} images, {size / count / 1024:.0f} KB each, {size / 2**20:.0f} MB per copy "
              f"(written in {time.perf_counter() - started:.0f} s)")
        indexes = measure_index(base, roots, args.processes)
        print("\nlisting every concept's images (the split stage), seconds")
        paths = {}
        for layout in LAYOUT_NAMES:
            drop_from_page_cache(files_under(roots[layout]) if layout == FOLDERS else [indexes[layout]])
            started = time.perf_counter()
            paths[layout] = listing(layout, image_root(layout, roots[layout], indexes.get(layout)), wnids)
            print(f"  {NAMES[layout]:14s}: {time.perf_counter() - started:.3f} s")
        measure_reads(roots, indexes, paths, size)
        measure_loader(roots, indexes, paths, count, args.decode_images, args.workers)


if __name__ == "__main__":
    main()
