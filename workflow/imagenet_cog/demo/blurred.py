"""The demo's IN-1K-blurred: a blurred copy of the demo's IN-1K images, a few left out.

It stands in for the face-blurred release of IN-1K (paper supp. E; the variant itself is
:mod:`imagenet_cog.variants.blurred`): the same <root>/{train,val}/<wnid>/ layout, a
Gaussian blur over the central half of each image (standing in for faces), and a few
images left out, as the release lacks a few of IN-1K's.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

from imagenet_cog.core.io import atomic_directory, read_lines


def blurred_copy(source: str | Path, output: str | Path, dropped: int, seed: int, radius: float = 4.0,
                 concepts: Sequence[str] | None = None) -> list[str]:
    """Copy IN-1K's <source>/{train,val}/<wnid>/ images (of ``concepts``, default all) to
    ``output`` with the central half of each image blurred, leaving out ``dropped`` of them
    (chosen with ``seed``, never a concept's last image of a split); returns the relative
    paths left out."""
    source = Path(source)
    images = sorted(path.relative_to(source).as_posix() for path in source.glob("*/*/*")
                    if path.is_file() and (concepts is None or path.parent.name in concepts))
    by_folder: dict[str, list[str]] = {}
    for path in images:
        by_folder.setdefault(path.rsplit("/", 1)[0], []).append(path)
    candidates = [path for paths in by_folder.values() for path in paths[:-1]]
    rng = np.random.default_rng([seed, 1])
    left_out = sorted(rng.choice(candidates, size=min(dropped, len(candidates)), replace=False).tolist())
    with atomic_directory(output) as folder:
        for path in images:
            if path in left_out:
                continue
            target = Path(folder) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            with Image.open(source / path) as image:
                image = image.convert("RGB")
                width, height = image.size
                box = (width // 4, height // 4, width - width // 4, height - height // 4)
                image.paste(image.crop(box).filter(ImageFilter.GaussianBlur(radius)), box[:2])
                image.save(target, format="JPEG", quality=90)
    return left_out


def demo_blurred_command(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog demo-blurred",
                                     description="The demo's IN-1K-blurred: blurred copies, a few images left out.")
    parser.add_argument("--in1k-images", required=True)
    parser.add_argument("--concepts", default=None, help="the demo IN-1K's wnids, one a line (default: every folder)")
    parser.add_argument("--output", required=True)
    parser.add_argument("--dropped", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    concepts = set(read_lines(args.concepts)) if args.concepts else None
    left_out = blurred_copy(args.in1k_images, args.output, args.dropped, args.seed, concepts=concepts)
    print(f"{args.output}: blurred copy of {args.in1k_images}, left out {', '.join(left_out) or 'none'}")
    return 0
