"""Reading ImageNet from its tars against reading the same images from extracted folders.

Generates ImageNet-like JPEGs (shorter side 375 px, about 90 KB each, ``--synsets``
synsets) and writes the same bytes three ways: extracted folders ``<wnid>/*.JPEG``, a folder
of per-synset tars (what ``tar xzf winter21_whole.tar.gz`` leaves) and one outer tar of them
(``winter21_whole.tar`` after ``gunzip``). Then, in one run, it measures:

* the index build (:func:`imagenet_cog.core.archives.build_index`) of the folder of tars and of
  the outer tar, on 1 and on ``--processes`` processes;
* listing every concept's images as the split stage does (``ImageRoot.concept_images``:
  folder listings against reading the index);
* reading every image's bytes in split-table order (folders: open and read each file;
  tars: :class:`~imagenet_cog.core.archives.MemberReader`, one ``pread`` each), with the files'
  pages first dropped from the page cache (``cold``: ``os.sync`` then
  ``posix_fadvise(DONTNEED)``, what a first pass over a dataset larger than memory sees) and
  again with them cached (``warm``);
* the extraction loader's host path on top (PIL decode, bicubic resize to 224, center crop:
  ``ImageRows`` of :mod:`imagenet_cog.features.extract`, through a ``MemberReader`` for tars) in a DataLoader with ``--workers`` workers.

Each line gives images/s of folders and of tars and their ratio (tars / folders). The
shapes are written by the tests' generator (``tests/imagenet_world.py``).

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

from imagenet_world import synset_images, write_folders, write_outer_tar, write_synset_tars  # noqa: E402

from imagenet_cog.core.archives import ImageIndex, build_index  # noqa: E402
from imagenet_cog.core.image_roots import ImageRoot, index_archives  # noqa: E402


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


def read_tar_bytes(index: ImageIndex, paths: list[str]) -> int:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--synsets", type=int, default=40)
    parser.add_argument("--processes", type=int, default=2, help="index build processes (besides 1)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers of the decode measurement")
    parser.add_argument("--decode-images", type=int, default=1000, help="images decoded per layout")
    parser.add_argument("--folder", default=None, help="where to write the copies (default: a temporary folder)")
    args = parser.parse_args()

    from imagenet_cog.features.extract import ImageRows
    from imagenet_cog.models.registry import Preprocessing

    with tempfile.TemporaryDirectory(dir=args.folder) as temporary:
        base = Path(temporary)
        wnids = [f"n{number:08d}" for number in range(1, args.synsets + 1)]
        started = time.perf_counter()
        images = synset_images(wnids, args.images // args.synsets, seed=0, size=375)
        roots = {
            "folders": write_folders(base / "folders", images),
            "tars": write_synset_tars(base / "winter21_whole", images),
            "tar": write_outer_tar(base / "winter21_whole.tar", images),
        }
        count = sum(len(files) for files in images.values())
        size = sum(len(data) for files in images.values() for data in files.values())
        print(f"{count} images, {size / count / 1024:.0f} KB each, {size / 2**20:.0f} MB per copy "
              f"(written in {time.perf_counter() - started:.0f} s)")

        print("\nindex build (seconds, images/s)")
        indexes = {}
        for layout in ("tars", "tar"):
            for processes in sorted({1, args.processes}):
                drop_from_page_cache(files_under(roots[layout]))
                output = base / f"{layout}-{processes}.h5"
                summary = build_index(roots[layout], index_archives("in21k", roots[layout], layout), output,
                                      processes=processes)
                indexes[layout] = output
                print(f"  {layout:5s} {processes} process{'es' if processes > 1 else '  '}: {summary.seconds:6.2f} s, "
                      f"{summary.images / summary.seconds:8.0f} images/s (cold page cache)")

        image_roots = {
            "folders": ImageRoot("in21k", roots["folders"], "folders"),
            **{layout: ImageRoot("in21k", roots[layout], layout, index=indexes[layout]) for layout in ("tars", "tar")},
        }
        print("\nlisting every concept's images (the split stage), seconds")
        listings = {}
        for layout, root in image_roots.items():
            drop_from_page_cache(files_under(roots[layout]) if layout == "folders" else [indexes[layout]])
            started = time.perf_counter()
            listings[layout] = root.concept_images(wnids)
            print(f"  {layout:7s}: {time.perf_counter() - started:.3f} s")
        paths = {layout: sorted(path for listing in found.values() for path in listing.paths)
                 for layout, found in listings.items()}

        print("\nreading every image's bytes in split order, images/s (tars / folders)")
        for state in ("cold", "warm"):
            rates = {}
            for layout in ("folders", "tars", "tar"):
                if state == "cold":
                    drop_from_page_cache(files_under(roots[layout]))
                started = time.perf_counter()
                if layout == "folders":
                    read = read_folder_bytes(roots[layout], paths[layout])
                else:
                    read = read_tar_bytes(ImageIndex(indexes[layout]), paths[layout])
                assert read == size
                rates[layout] = count / (time.perf_counter() - started)
            print(f"  {state}: folders {rates['folders']:8.0f}, folder of tars {rates['tars']:8.0f} "
                  f"({rates['tars'] / rates['folders']:.2f}x), outer tar {rates['tar']:8.0f} "
                  f"({rates['tar'] / rates['folders']:.2f}x)")

        print(f"\nthe loader's host path (decode, resize, crop 224), {args.workers} workers, warm, images/s")
        preprocessing = Preprocessing()
        rng = np.random.default_rng(0)
        chosen = sorted(rng.choice(count, size=min(count, args.decode_images), replace=False))
        rates = {}
        for layout in ("folders", "tars", "tar"):
            subset = [paths[layout][position] for position in chosen]
            reader = None if layout == "folders" else ImageIndex(indexes[layout]).reader(subset)
            rates[layout] = decode_rate(ImageRows(roots[layout], subset, preprocessing, reader), args.workers)
        print(f"  folders {rates['folders']:.1f}, folder of tars {rates['tars']:.1f} "
              f"({rates['tars'] / rates['folders']:.2f}x), outer tar {rates['tar']:.1f} ({rates['tar'] / rates['folders']:.2f}x)")


if __name__ == "__main__":
    main()
