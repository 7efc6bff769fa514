"""A paper-scale ImageNet without real pixels, for the dress rehearsal (docs/scale.md).

Writes, in the shapes the releases are distributed in:

* ``<out>/in21k/<wnid>.tar``: one tar per IN-21K synset of a list (a run's
  ``splits/needed_synsets.txt``, one ``<wnid>.tar`` a line), with the synset's Fall 2011
  image count from the shipped counts file (what ``tar xzf winter21_whole.tar.gz`` leaves);
* ``<out>/in1k/``: ``ILSVRC2012_img_train.tar`` (a tar of 1000 per-class tars holding
  1,281,167 images: 1,300 per class but for 105 classes 179 or 180 short, as the release's
  smallest classes are), ``ILSVRC2012_img_val.tar`` (50,000 flat files, 50 per class, in a
  shuffled order) and ``ILSVRC2012_devkit_t12.tar.gz`` (``meta.mat`` and the ground truth).

Every image is the same tiny valid JPEG (8 x 8 pixels, 286 bytes): the rehearsal measures
the stages that list, count, index and tabulate images, not decoding. A member takes 1 kB of
tar (a 512-byte header and one 512-byte block), so the paper's world is ~8.7 GB: IN-21K's
~7.4 M images of the 5,146 eligible concepts and the pool, and IN-1K's 1.33 M.

``--cap N`` keeps at most N images per synset and class (the test suite's small world, which
keeps the readers and rules of the rehearsal working); ``--in1k-classes K`` the first K of
IN-1K's classes. Prints what it wrote: synsets, images, bytes and seconds.

    python benchmarks/scale_world.py --out /data/rehearsal \\
        --in21k-synsets results-rehearsal/splits/needed_synsets.txt
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tarfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY / "workflow"))

from imagenet_cog.levels.concepts import concept_file  # noqa: E402

COUNTS = REPOSITORY / "resources" / "imagenet21k_fall11_image_counts.tsv"
IN1K_TRAIN, IN1K_VAL, IN1K_FULL_CLASS = 1_281_167, 50_000, 1300
BLOCK = 512
MTIME = 1_300_000_000


def tiny_jpeg() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (120, 90, 60)).save(buffer, format="JPEG", quality=50, optimize=True)
    return buffer.getvalue()


def member(name: str, data: bytes) -> bytes:
    """One tar member: its GNU header and its data padded to whole blocks."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), MTIME
    return info.tobuf(tarfile.GNU_FORMAT) + data + b"\0" * (-len(data) % BLOCK)


def write_tar(path: Path, members: Iterable[bytes]) -> int:
    """Writes the members and the end-of-archive blocks to ``path`` (through a temporary name:
    a killed run leaves no tar that looks whole); returns its size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb", buffering=1 << 22) as stream:
        for chunk in members:
            stream.write(chunk)
        stream.write(b"\0" * (2 * BLOCK))
        stream.write(b"\0" * (-stream.tell() % (20 * BLOCK)))
    os.replace(partial, path)
    return path.stat().st_size


def synset_members(wnid: str, count: int, image: bytes) -> Iterable[bytes]:
    return (member(f"{wnid}_{number}.JPEG", image) for number in range(1, count + 1))


def read_counts(path: Path) -> dict[str, int]:
    lines = path.read_text().splitlines()[1:]
    return {wnid: int(count) for wnid, count in (line.split("\t")[:2] for line in lines if line.strip())}


def in1k_class_sizes(classes: int, cap: int | None) -> list[int]:
    """Training images per class: the release's 1,281,167 over 1000 classes (1,300 each but
    for the last 105, short by 179 or 180), or ``cap`` each."""
    if cap:
        return [cap] * classes
    short = IN1K_FULL_CLASS * 1000 - IN1K_TRAIN
    sizes = [IN1K_FULL_CLASS] * 1000
    for index in range(105):
        sizes[1000 - 105 + index] -= short // 105 + (index < short % 105)
    return sizes[:classes]


def write_in21k(out: Path, wnids: Sequence[str], counts: dict[str, int], cap: int | None, image: bytes) -> tuple[int, int]:
    images = written = 0
    for number, wnid in enumerate(wnids, 1):
        count = min(counts[wnid], cap or counts[wnid])
        written += write_tar(out / f"{wnid}.tar", synset_members(wnid, count, image))
        images += count
        if number % 500 == 0:
            print(f"  in21k: {number}/{len(wnids)} synsets, {images:,} images", flush=True)
    return images, written


def write_in1k(out: Path, wnids: Sequence[str], cap: int | None, image: bytes) -> tuple[int, int]:
    """The training tar of per-class tars, the flat validation tar and the devkit."""
    sizes = in1k_class_sizes(len(wnids), cap)

    def class_tars() -> Iterable[bytes]:
        for wnid, size in zip(wnids, sizes):
            buffer = io.BytesIO()
            for chunk in synset_members(wnid, size, image):
                buffer.write(chunk)
            buffer.write(b"\0" * (2 * BLOCK))
            yield member(f"{wnid}.tar", buffer.getvalue())

    written = write_tar(out / "ILSVRC2012_img_train.tar", class_tars())
    per_class = min(cap or IN1K_VAL // 1000, IN1K_VAL // 1000)
    val_wnids = [wnids[index] for index in np.random.default_rng(0).permutation(np.repeat(np.arange(len(wnids)), per_class))]
    written += write_tar(out / "ILSVRC2012_img_val.tar",
                         (member(f"ILSVRC2012_val_{number:08d}.JPEG", image) for number in range(1, len(val_wnids) + 1)))
    written += write_devkit(out, wnids, val_wnids)
    return sum(sizes) + len(val_wnids), written


def write_devkit(out: Path, wnids: Sequence[str], val_wnids: Sequence[str]) -> int:
    """``data/meta.mat`` (ILSVRC2012_ID -> WNID for the classes, in the devkit's own order: here
    the wnids reversed, not sorted) and the validation ground truth, one id per image."""
    from scipy.io import savemat

    ids = {wnid: number for number, wnid in enumerate(reversed(wnids), start=1)}
    synsets = np.zeros(len(ids), dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("num_children", "O")])
    for row, (wnid, number) in enumerate(ids.items()):
        synsets[row] = (number, wnid, wnid, 0)
    meta = io.BytesIO()
    savemat(meta, {"synsets": synsets})
    truth = "".join(f"{ids[wnid]}\n" for wnid in val_wnids).encode()
    path = out / "ILSVRC2012_devkit_t12.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, data in (("data/meta.mat", meta.getvalue()), ("data/ILSVRC2012_validation_ground_truth.txt", truth)):
            info = tarfile.TarInfo(f"ILSVRC2012_devkit_t12/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path.stat().st_size


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="writes <out>/in21k/ and <out>/in1k/")
    parser.add_argument("--in21k-synsets", type=Path, required=True,
                        help="the synsets to write, one <wnid>.tar (or wnid) a line: a run's splits/needed_synsets.txt")
    parser.add_argument("--counts", type=Path, default=COUNTS, help="per-synset Fall 2011 image counts")
    parser.add_argument("--cap", type=int, help="at most this many images per synset and class (small worlds)")
    parser.add_argument("--in1k-classes", type=int, default=1000, help="the first K IN-1K classes (sorted wnids)")
    args = parser.parse_args(argv)
    started, image = time.perf_counter(), tiny_jpeg()
    counts = read_counts(args.counts)
    wnids = [line.strip().removesuffix(".tar") for line in args.in21k_synsets.read_text().splitlines() if line.strip()]
    unknown = [wnid for wnid in wnids if wnid not in counts]
    if unknown:
        print(f"error: {args.in21k_synsets} lists {len(unknown)} synsets with no count in {args.counts} "
              f"(first: {unknown[:3]}); give the run's needed_synsets.txt", file=sys.stderr)
        return 1
    in21k_images, in21k_bytes = write_in21k(args.out / "in21k", wnids, counts, args.cap, image)
    print(f"in21k: {len(wnids):,} synset tars, {in21k_images:,} images, {in21k_bytes / 1e9:.2f} GB, "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    in1k_wnids = sorted(concept_file("in1k_synsets", None).read_text().split())[:args.in1k_classes]
    in1k_images, in1k_bytes = write_in1k(args.out / "in1k", in1k_wnids, args.cap, image)
    print(f"in1k: {len(in1k_wnids)} classes, {in1k_images:,} images (train and val), {in1k_bytes / 1e9:.2f} GB; "
          f"total {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
