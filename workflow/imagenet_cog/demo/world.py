"""The built-in demo world: a few real concepts per dataset, with generated images.

The demo runs the whole benchmark on this machine in minutes, without ImageNet. It keeps
the real levels (WordNet ranking and all) and replaces only the images: for each dataset it
picks ``concepts_per_dataset`` concepts and draws JPEG images for them in the layouts of
real ImageNet, so the split, feature and probe stages run the same code as on real data.

Images follow the WordNet tree cheaply. Every IN-1K concept has a look of its own: a
background colour, smooth oriented gratings and colour blobs, seeded by its wnid ("shape
and colour"). A level concept keeps the look of its nearest IN-1K concept at a contrast that
grows with their Lin similarity (``seen_weight``) and carries, with the rest, a fine
luminance texture of its own: L1 concepts look much like IN-1K concepts, L5 concepts are
told apart by their textures alone. The demo network is pretrained on the IN-1K concepts
with random textures laid over its images (:mod:`imagenet_cog.demo.pretraining`), so it
learns that texture names no concept, as real pretraining learns the invariances its
augmentations teach; its features then serve near concepts well and far ones poorly, while
a network with random weights, which has learnt nothing, tells every level apart about
equally well. Each image is a random crop of its concept's look, possibly mirrored, blended
with one of a few clutter patterns shared by all concepts, with brightness, contrast and
pixel noise. Everything is seeded by (demo seed, wnid, image index): the same config gives
the same bytes.

Which concepts: each level's picks are spread evenly over its ranked list (first and last
included). The network is pretrained on ``in1k_concepts`` IN-1K concepts: the nearest IN-1K
concepts of the picked level concepts, L1's first, so that every level has seen concepts to
resemble. IN-1K itself is probed on ``concepts_per_dataset`` of those, spread over them, as
many as each level, as every dataset of the paper has 1000.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from PIL import Image, ImageDraw

from imagenet_cog.core.io import atomic_directory, atomic_output, read_lines, read_tsv, write_lines
from imagenet_cog.core.naming import IN1K, IN21K, POOL
from imagenet_cog.core.sampling import derived_rng, spread

# A canvas larger than the images leaves room for crops at different positions.
CANVAS_SCALE = 1.3
JPEG_QUALITY = 90
CLUTTER_PATTERNS = 32
CLUTTER_WEIGHT = (0.3, 0.5)
PIXEL_NOISE = 0.06
# Lin similarity to IN-1K at and below which a level concept keeps nothing of its nearest
# IN-1K concept's look, and at which it keeps all of it: between the two, the share grows
# linearly, so that the demo's five levels step down evenly (in WordNet 3.0, L1 0.96-0.75
# keeps 94-64% and carries some texture too, L5 0.34-0.0 keeps at most 6%).
SEEN_SIMILARITY = (0.3, 1.0)
# Fine luminance gratings (cycles across the image), strong enough that a network which has
# not learnt to ignore them tells concepts apart by them about as well as by shape and colour.
TEXTURE_FREQUENCY = (5.0, 10.0)
TEXTURE_AMPLITUDE = 0.8


def choose_concepts(
    level_concepts: Mapping[str, Sequence[str]],
    in1k_concepts: Sequence[str],
    nearest_in1k: Mapping[str, str],
    count: int,
    seen_count: int | None = None,
) -> tuple[dict[str, list[str]], list[str]]:
    """The demo's concepts and the IN-1K concepts its network is pretrained on ("seen").

    ``count`` per level, spread over its rank order; ``seen_count`` (default ``count``) seen
    concepts: the nearest IN-1K concepts of the level picks, nearest levels first, then spread
    over the rest of IN-1K; and IN-1K's own ``count``, spread over the seen ones."""
    chosen = {level: spread(wnids, count) for level, wnids in level_concepts.items()}
    seen_count = count if seen_count is None else seen_count
    in1k_set = set(in1k_concepts)
    seen: list[str] = []
    for level in sorted(chosen, key=lambda name: int(name[1:])):
        for wnid in chosen[level]:
            nearest = nearest_in1k.get(wnid)
            if nearest in in1k_set and nearest not in seen and len(seen) < seen_count:
                seen.append(nearest)
    remaining = [wnid for wnid in in1k_concepts if wnid not in seen]
    seen += spread(remaining, seen_count - len(seen)) if len(seen) < seen_count else []
    return {IN1K: spread(seen, count), **chosen}, seen


@functools.lru_cache(maxsize=256)
def prototype(wnid: str, seed: int, size: int) -> np.ndarray:
    """An IN-1K concept's look (shape and colour): a float32 (size, size, 3) image in [0, 1]
    (cached: do not modify it)."""
    rng = derived_rng("demo-prototype", seed, wnid)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    image = np.empty((size, size, 3), dtype=np.float32)
    image[:] = rng.uniform(0.25, 0.75, 3)
    for _ in range(3):
        angle, frequency, phase = rng.uniform(0, math.pi), rng.uniform(1.5, 6.0), rng.uniform(0, 2 * math.pi)
        wave = np.sin(2 * math.pi * frequency * (x * math.cos(angle) + y * math.sin(angle)) + phase)
        image += wave[..., None] * rng.normal(0, 0.15, 3).astype(np.float32)
    for _ in range(2):
        centre, radius = rng.uniform(0.2, 0.8, 2), rng.uniform(0.08, 0.25)
        blob = np.exp(-((x - centre[0]) ** 2 + (y - centre[1]) ** 2) / (2 * radius**2))
        image += blob[..., None] * rng.normal(0, 0.3, 3).astype(np.float32)
    return np.clip(image, 0, 1)


def gratings(angles: np.ndarray, frequencies: np.ndarray, phases: np.ndarray, size: int) -> np.ndarray:
    """Luminance textures in [-1, 1]: the mean of two sine gratings each. The parameters have
    shape (..., 2), angles in radians, frequencies in cycles across the image; the result
    (..., size, size), float32."""
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    angles, frequencies, phases = (np.asarray(value, dtype=np.float32)[..., None, None] for value in (angles, frequencies, phases))
    waves = np.sin(2 * math.pi * frequencies * (x * np.cos(angles) + y * np.sin(angles)) + phases)
    return waves.mean(axis=-3).astype(np.float32)


def random_gratings(rng: np.random.Generator, count: int, size: int) -> np.ndarray:
    """``count`` textures with orientation, frequency and phase drawn from ``rng``."""
    shape = (count, 2)
    return gratings(rng.uniform(0, math.pi, shape), rng.uniform(*TEXTURE_FREQUENCY, shape),
                    rng.uniform(0, 2 * math.pi, shape), size)


def texture(wnid: str, seed: int, size: int) -> np.ndarray:
    """A level concept's own texture, seeded by its wnid: (size, size) in [-1, 1]."""
    return random_gratings(derived_rng("demo-texture", seed, wnid), 1, size)[0]


def seen_weight(similarity: float) -> float:
    """The share of its nearest IN-1K concept's look a level concept keeps (SEEN_SIMILARITY)."""
    low, high = SEEN_SIMILARITY
    return float(np.clip((similarity - low) / (high - low), 0.0, 1.0))


def concept_look(wnid: str, nearest: str | None, similarity: float, seed: int, size: int) -> np.ndarray:
    """The look a level concept's images are drawn from: its nearest IN-1K concept's look at
    ``seen_weight(similarity)`` of its contrast, and its own texture at the rest of
    ``TEXTURE_AMPLITUDE``. A concept with no nearest IN-1K concept is its texture on grey."""
    weight = seen_weight(similarity) if nearest is not None else 0.0
    seen = prototype(nearest, seed, size) if nearest is not None else np.full((size, size, 3), 0.5, np.float32)
    mean = seen.mean(axis=(0, 1))
    own = (1 - weight) * TEXTURE_AMPLITUDE * texture(wnid, seed, size)
    return np.clip(mean + weight * (seen - mean) + own[..., None], 0, 1).astype(np.float32)


def render(look: np.ndarray, wnid: str, index: int, seed: int, size: int) -> Image.Image:
    """Image ``index`` of a concept: a random crop of its look, mirrored or not, blended with
    a random clutter pattern, with photometric noise."""
    rng = derived_rng("demo-image", seed, wnid, index)
    canvas = look.shape[0]
    crop = int(canvas * rng.uniform(0.7, 0.95))
    top, left = rng.integers(0, canvas - crop + 1, 2)
    patch = Image.fromarray(np.round(look[top : top + crop, left : left + crop] * 255).astype(np.uint8))
    pixels = np.asarray(patch.resize((size, size), Image.BILINEAR), dtype=np.float32) / 255
    if rng.random() < 0.5:
        pixels = pixels[:, ::-1]
    # Clutter shared by all concepts, so that no single image gives its concept away.
    clutter = prototype(f"clutter-{rng.integers(CLUTTER_PATTERNS)}", seed, size)
    weight = rng.uniform(*CLUTTER_WEIGHT)
    pixels = (1 - weight) * pixels + weight * clutter
    pixels = (pixels - 0.5) * rng.uniform(0.8, 1.2) + 0.5 + rng.uniform(-0.1, 0.1)
    pixels = pixels + rng.normal(0, PIXEL_NOISE, pixels.shape)
    return Image.fromarray(np.round(np.clip(pixels, 0, 1) * 255).astype(np.uint8))


def _save(image: Image.Image, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format="JPEG", quality=JPEG_QUALITY)


def draw_images(
    concepts: Mapping[str, Sequence[str]],
    ranking: Mapping[str, tuple[str | None, float]],
    in21k_folder: Path,
    in1k_folder: Path,
    train_images: int,
    test_images: int,
    seed: int,
    size: int,
) -> int:
    """Write every image; returns how many. IN-1K images go to train/ and val/ (the official
    sets); a level concept's images all go to its one folder, as in IN-21K."""
    canvas = math.ceil(size * CANVAS_SCALE)
    written = 0
    for dataset, wnids in concepts.items():
        for wnid in wnids:
            if dataset == IN1K:
                look = prototype(wnid, seed, canvas)
                targets = [in1k_folder / "train" / wnid] * train_images + [in1k_folder / "val" / wnid] * test_images
            else:
                nearest, similarity = ranking.get(wnid, (None, 0.0))
                look = concept_look(wnid, nearest, similarity, seed, canvas)
                targets = [in21k_folder / wnid] * (train_images + test_images)
            for index, folder in enumerate(targets):
                _save(render(look, wnid, index, seed, size), folder / f"{wnid}_{index}.JPEG")
                written += 1
    return written


def preview(
    concepts: Mapping[str, Sequence[str]], in21k_folder: Path, in1k_folder: Path, output: str, per_concept: int = 2
) -> None:
    """One row per dataset: the first ``per_concept`` images of each of its concepts."""
    rows = []
    for dataset, wnids in concepts.items():
        folders = [in1k_folder / "train" / w if dataset == IN1K else in21k_folder / w for w in wnids]
        rows.append((dataset, [f / f"{w}_{k}.JPEG" for f, w in zip(folders, wnids) for k in range(per_concept)]))
    size = Image.open(rows[0][1][0]).size[0] if rows and rows[0][1] else 1
    margin, gap = 48, 4
    columns = max(len(paths) for _, paths in rows)
    sheet = Image.new("RGB", (margin + columns * (size + gap), len(rows) * (size + gap)), "white")
    draw = ImageDraw.Draw(sheet)
    for row, (dataset, paths) in enumerate(rows):
        top = row * (size + gap)
        draw.text((6, top + size // 2 - 6), dataset.upper(), fill="black")
        for column, path in enumerate(paths):
            with Image.open(path) as image:
                sheet.paste(image, (margin + column * (size + gap), top))
    with atomic_output(output) as temporary:
        sheet.save(temporary, format="PNG")


def read_ranking(path: str | os.PathLike) -> dict[str, tuple[str, float]]:
    """wnid -> (nearest IN-1K wnid, sim_in1k) from the levels stage's ranking TSV."""
    rows = read_tsv(path)
    needed = {"wnid", "sim_in1k", "nearest_in1k_wnid"}
    if not rows or not needed <= set(rows[0]):
        raise ValueError(
            f"ranking '{path}' lacks the columns {', '.join(sorted(needed))}; rerun the levels stage."
        )
    return {row["wnid"]: (row["nearest_in1k_wnid"], float(row["sim_in1k"])) for row in rows}


def _pairs(values: Sequence[str], option: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, separator, path = value.partition("=")
        if not separator:
            raise SystemExit(f"{option} takes DATASET=PATH, got {value!r}")
        pairs[key] = path
    return pairs


def demo_world(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog demo-world", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--ranking", required=True, help="the levels stage's ranking TSV")
    parser.add_argument(
        "--level-concepts", action="append", default=[], metavar="DATASET=PATH",
        help="a dataset's wnid list from the levels stage (in1k and each level)",
    )
    parser.add_argument(
        "--demo-concepts", action="append", default=[], metavar="DATASET=PATH",
        help="where to write a dataset's demo concepts; also says which datasets to draw",
    )
    parser.add_argument("--in21k-images", required=True, help="folder for <wnid>/*.JPEG")
    parser.add_argument("--in1k-images", required=True, help="folder for {train,val}/<wnid>/*.JPEG")
    parser.add_argument("--preview", default=None, help="PNG with a few images of each dataset")
    parser.add_argument("--concepts-per-dataset", type=int, default=4)
    parser.add_argument("--in1k-concepts", type=int, default=None,
                        help="IN-1K concepts the demo network is pretrained on (default: --concepts-per-dataset); "
                             "IN-1K is probed on --concepts-per-dataset of them")
    parser.add_argument("--pretraining-concepts", default=None,
                        help="where to write the IN-1K concepts to pretrain on (their images are drawn too)")
    parser.add_argument("--train-images", type=int, default=24)
    parser.add_argument("--test-images", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    sources = _pairs(args.level_concepts, "--level-concepts")
    outputs = _pairs(args.demo_concepts, "--demo-concepts")
    lacking = sorted(set(outputs) - set(sources))
    if lacking or IN1K not in sources:
        print(f"error: --level-concepts missing for {', '.join(lacking or ['in1k'])}", file=sys.stderr)
        return 2
    ranking = read_ranking(args.ranking)
    levels = {name: read_lines(path) for name, path in sources.items() if name != IN1K and name in outputs}
    unranked = [wnid for wnids in levels.values() for wnid in wnids if wnid not in ranking]
    if unranked:
        # Published levels may hold concepts the recomputed ranking lacks.
        print(
            f"note: {len(unranked)} level concepts (e.g. {unranked[0]}) are not in the ranking "
            f"'{args.ranking}'; their images resemble no IN-1K concept."
        )
    nearest = {wnid: ranking[wnid][0] for wnids in levels.values() for wnid in wnids if wnid in ranking}
    chosen, seen = choose_concepts(levels, read_lines(sources[IN1K]), nearest, args.concepts_per_dataset,
                                   args.in1k_concepts)
    chosen = {dataset: wnids for dataset, wnids in chosen.items() if dataset in outputs}
    # every seen concept has IN-1K images: the probed ones are among them
    drawn = {**chosen, IN1K: seen} if IN1K in chosen or args.pretraining_concepts else chosen

    folders = {IN21K: Path(args.in21k_images), IN1K: Path(args.in1k_images)}
    with atomic_directory(folders[IN21K]) as in21k, atomic_directory(folders[IN1K]) as in1k:
        count = draw_images(
            drawn, ranking, in21k, in1k, args.train_images, args.test_images, args.seed, args.image_size,
        )
    if args.preview:
        preview(chosen, folders[IN21K], folders[IN1K], args.preview)
    for dataset, path in outputs.items():
        write_lines(path, chosen[dataset])
    if args.pretraining_concepts:
        write_lines(args.pretraining_concepts, seen)
        print(f"pretraining: {len(seen)} IN-1K concepts")
    for dataset, wnids in chosen.items():
        print(f"{dataset}: {', '.join(wnids)}")
    print(f"{count} images of {args.image_size} px in {args.in21k_images} and {args.in1k_images}")
    return 0


def demo_pool_command(argv: Sequence[str]) -> int:
    """The demo's pool: images for a fixed spread of eligible concepts beside the Lin levels'
    demo concepts, so that every level set finds some concepts with images among them. It
    depends on no level set, so adding or changing level sets never redraws it."""
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog demo-pool", description=demo_pool_command.__doc__)
    parser.add_argument("--ranking", required=True, help="the levels stage's ranking TSV")
    parser.add_argument("--exclude", nargs="*", default=[], help="demo concept lists already drawn")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--images", required=True, help="folder for <wnid>/*.JPEG")
    parser.add_argument("--output", required=True, help="the pool's wnids")
    parser.add_argument("--train-images", type=int, default=24)
    parser.add_argument("--test-images", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    ranking = read_ranking(args.ranking)
    drawn = {wnid for path in args.exclude for wnid in read_lines(path)}
    pool = sorted(spread([wnid for wnid in ranking if wnid not in drawn], args.count))
    with atomic_directory(Path(args.images)) as folder:
        count = draw_images({POOL: tuple(pool)}, ranking, folder, folder, args.train_images, args.test_images,
                            args.seed, args.image_size)
    write_lines(args.output, pool)
    print(f"pool: {len(pool)} concepts, {count} images in {args.images}")
    return 0
