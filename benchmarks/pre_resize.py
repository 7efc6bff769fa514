"""How far the paper preprocessing's features move when the source image was first capped at 600 px.

The Hugging Face Hub copies of ImageNet-21K (``timm/imagenet-22k-wds``, ``imagenet-12k-wds``)
store every image whose shorter side exceeds 600 px resized to exactly 600 px (768 px in
``imagenet-w21-webp-wds``). The paper's preprocessing (shorter side to S, center crop S x S,
the model's mean/std) then runs on the capped image instead of the original. This script
generates images with a shorter side of 700-1200 px and writes each four ways:

* ``original``: the generated JPEG (quality 90, PIL's default 4:2:0 chroma);
* ``hub``: decoded, capped the way the shards' writer capped it (shorter side to ``--cap``,
  the other side ``round``-ed, PIL bicubic with ``reducing_gap=3``) and re-encoded as JPEG
  quality 90 with 4:2:2 chroma (``subsampling=1``): the settings of the writer script of the
  22k shards (rwightman/imagenet-12k, ``wds/build_wds.py``; read there, not confirmed
  against a downloaded shard);
* ``cap only``: the same cap stored losslessly (PNG): the resize alone;
* ``re-encoded``: no cap, the same JPEG re-encoding alone (what a second JPEG pass costs, the
  floor the ``hub`` figure is compared with).

Then the workflow's own extraction (:func:`imagenet_cog.features.extract.extract_shard`:
PIL decode, shorter side to S, center crop, normalisation, float32 features) runs on every
variant for

* the demo network (``demo_cnn``, S = 32 bilinear), pretrained here with the workflow's demo
  pretraining (:func:`imagenet_cog.demo.pretraining.pretrain`) on the demo world's images of
  ``--pretrain-concepts`` concepts, deterministic on a CPU;
* ``--archs`` with random weights (default torchvision ResNet-50 at S = 224; e.g.
  ``efficientnet_b4`` for S = 380): no weights can be downloaded here, and trained weights,
  which respond to fine texture, may move further.

It prints, per model and variant, the preprocessed pixels' mean and largest absolute
difference from the original's (grey levels), the per-image cosine similarity of the
features to the original's (mean, 5th percentile, min), the mean cosine between different
images' features (the scale a movement is read against: a network with random weights maps
all images close together) and the ratio of the variant's movement ``1 - cos`` to that of
``re-encoded``, and how many Hub copies resize to a longer side one pixel off the original's
(the cap rounds the longer side) and how far those move. Then the workflow's linear probe
(:func:`imagenet_cog.probes.search.probe_dataset`: Optuna search, final fit, small scale) on
the demo network's features (and a random-weight arch's where ``--random-images`` covers
every image): trained on the originals and tested on the originals and on the Hub copies
(the same classifiers), and trained and tested on the Hub copies (what a user of the copy
gets).

Image content: the demo world's generator (:mod:`imagenet_cog.demo.world`) renders each probe
concept's look (a level concept: part its nearest pretraining concept's look, part its own
texture) at 1200 px; that content is smooth by design (gratings of 5-10 cycles across the
image, pixel noise), and what the cap removes is fine detail, so each image also gets a
luminance layer with a natural image's 1/f amplitude spectrum and thin hard-edged lines
(twigs, hair, text), which carry detail at every scale up to the pixel.

    python benchmarks/pre_resize.py                        # about 3 CPU minutes, 1 thread
    python benchmarks/pre_resize.py --archs resnet50 efficientnet_b4
    python benchmarks/pre_resize.py --random-images 200 --threads 2   # ResNet-50 probed too
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

from imagenet_cog.core.sampling import derived_rng, spread
from imagenet_cog.demo.pretraining import pretrain
from imagenet_cog.demo.world import concept_look, draw_images, prototype, render
from imagenet_cog.features.extract import ExtractionOptions, ImageRows, SplitImages, extract_shard
from imagenet_cog.features.store import read_features
from imagenet_cog.models.registry import REGISTRY, ModelSpec
from imagenet_cog.probes.linear import l2_normalise
from imagenet_cog.probes.search import ProbeJob, SearchSettings, probe_dataset

# The 22k/12k shards' writer: shorter side capped at 600 px, bicubic, JPEG q90 with 4:2:2 chroma.
HUB_CAP = 600
HUB_JPEG = {"quality": 90, "subsampling": 1}
ORIGINAL_JPEG_QUALITY = 90
VARIANTS = ("hub", "cap only", "re-encoded")
# The fine-detail layer: the 1/f luminance layer's standard deviation (0-1 scale) and lines per megapixel.
DETAIL_STD = 0.08
LINES_PER_MEGAPIXEL = 60
ASPECTS = (1.0, 4 / 3, 3 / 2)


def cap_shorter_side(image: Image.Image, cap: int) -> Image.Image:
    """The image with its shorter side resized to ``cap`` as the Hub shards' writer did it
    (the other side rounded, bicubic, ``reducing_gap=3``); smaller images are returned as they are."""
    shorter = min(image.size)
    if shorter <= cap:
        return image
    scale = cap / shorter
    size = tuple(round(side * scale) for side in image.size)
    return image.resize(size, Image.Resampling.BICUBIC, reducing_gap=3)


def natural_detail(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A (height, width) float32 luminance layer with a 1/f amplitude spectrum, standard deviation 1."""
    spectrum = np.fft.rfft2(rng.standard_normal((height, width)))
    frequency = np.hypot(np.fft.fftfreq(height)[:, None], np.fft.rfftfreq(width)[None, :])
    spectrum /= np.maximum(frequency, 1.0 / max(height, width))
    layer = np.fft.irfft2(spectrum, s=(height, width))
    return ((layer - layer.mean()) / layer.std()).astype(np.float32)


def high_resolution_image(look: np.ndarray, wnid: str, index: int, seed: int, long_side: int,
                          shorter_range: tuple[int, int]) -> Image.Image:
    """Image ``index`` of a concept: the demo world's rendering of its look at ``long_side`` px,
    cropped to a shorter side in ``shorter_range``, with the fine-detail layer on top."""
    rng = derived_rng("pre-resize-image", seed, wnid, index)
    square = np.asarray(render(look, wnid, index, seed, long_side), dtype=np.float32) / 255
    shorter = int(rng.integers(shorter_range[0], min(shorter_range[1], long_side) + 1))
    longer = min(long_side, round(shorter * ASPECTS[rng.integers(len(ASPECTS))]))
    height, width = (longer, shorter) if rng.random() < 0.25 else (shorter, longer)
    top, left = rng.integers(0, long_side - height + 1), rng.integers(0, long_side - width + 1)
    pixels = square[top:top + height, left:left + width] + DETAIL_STD * natural_detail(rng, height, width)[..., None]
    image = Image.fromarray(np.round(np.clip(pixels, 0, 1) * 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(round(LINES_PER_MEGAPIXEL * height * width / 1e6)):
        start = rng.uniform(0, (width, height))
        end = start + rng.normal(0, 0.08 * shorter, 2)
        grey = int(rng.integers(0, 256))
        draw.line([tuple(start), tuple(end)], fill=(grey, grey, grey), width=int(rng.integers(1, 4)))
    return image


def write_variants(original: Path, folder: Path, relative: str, cap: int) -> dict[str, str]:
    """The Hub-style copies of one original JPEG; returns variant -> path relative to ``folder``."""
    with Image.open(original) as image:
        decoded = image.convert("RGB")
    capped = cap_shorter_side(decoded, cap)
    if min(capped.size) != min(cap, min(decoded.size)):
        raise AssertionError(f"{original}: capped to {capped.size}, not to a shorter side of {cap}")
    stem = Path(relative).with_suffix("")
    paths = {"hub": f"hub/{stem}.jpg", "cap only": f"cap/{stem}.png", "re-encoded": f"reencoded/{stem}.jpg"}
    for variant, image, kind in (("hub", capped, "JPEG"), ("cap only", capped, "PNG"), ("re-encoded", decoded, "JPEG")):
        target = folder / paths[variant]
        target.parent.mkdir(parents=True, exist_ok=True)
        image.save(target, kind, **(HUB_JPEG if kind == "JPEG" else {}))
    return paths


def generate(args, folder: Path, pretrain_concepts: list[str]) -> list[dict]:
    """The probe concepts' high-resolution images and their variants: one dict per image
    (label, train or test, variant -> path relative to ``folder``), concepts in turn."""
    canvas = math.ceil(args.long_side * 1.3)
    similarities = np.linspace(*args.similarity, args.concepts)
    per_concept = args.train_images + args.test_images
    rows = []
    for label in range(args.concepts):
        wnid = f"n{90000000 + label:08d}"
        nearest = pretrain_concepts[label % len(pretrain_concepts)]
        look = concept_look(wnid, nearest, float(similarities[label]), args.seed, canvas)
        for index in range(per_concept):
            relative = f"original/{wnid}/{wnid}_{index}.JPEG"
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            image = high_resolution_image(look, wnid, index, args.seed, args.long_side, tuple(args.shorter_side))
            image.save(folder / relative, "JPEG", quality=ORIGINAL_JPEG_QUALITY)
            paths = {"original": relative, **write_variants(folder / relative, folder, relative, args.cap)}
            rows.append({"label": label, "wnid": wnid, "test": index >= args.train_images, "paths": paths,
                         "size": image.size})
    prototype.cache_clear()  # the 1200-px looks and clutter patterns: hundreds of MB
    return rows


def pretrain_demo(args, folder: Path) -> tuple[Path, list[str], float]:
    """The demo network pretrained on the demo world's ``--pretrain-concepts`` concepts (as
    the workflow's rule pretrain_demo_model does, at the demo's 32 px); returns its checkpoint,
    the concepts and its val top-1."""
    concepts = [f"n{80000000 + number:08d}" for number in range(args.pretrain_concepts)]
    draw_images({"in1k": concepts}, {}, folder / "unused", folder / "in1k", args.pretrain_train_images,
                args.pretrain_val_images, args.seed, REGISTRY["demo_cnn"].preprocessing.size)
    checkpoint = folder / "demo_cnn.pt"
    scores = pretrain(folder / "in1k", concepts, checkpoint, epochs=args.pretrain_epochs, batch_size=32,
                      learning_rate=1e-3, seed=args.seed, threads=args.threads)
    return checkpoint, concepts, scores["val_top1"]


def extract(spec: ModelSpec, folder: Path, rows: list[dict], variant: str, threads: int) -> np.ndarray:
    """float32 features of ``rows``' ``variant`` images by the workflow's shard extractor."""
    table = folder / f"{spec.name}-{variant.replace(' ', '-')}.tsv"
    lines = ["path\twnid\tlabel\tsplit"] + [f"{row['paths'][variant]}\t{row['wnid']}\t{row['label']}\tall" for row in rows]
    table.write_text("\n".join(lines) + "\n")
    output = table.with_suffix(".h5")
    extract_shard(spec, SplitImages(table, folder, "pre-resize", "all"), shard=0, shard_size=len(rows), output=output,
                  options=ExtractionOptions(batch_size=32, threads=threads, dtype="float32", device="cpu"))
    return read_features(output).features


def pixel_differences(preprocessing, folder: Path, rows: list[dict], variant: str) -> tuple[float, int]:
    """Mean and largest absolute difference (grey levels) of the preprocessed crops to the originals'."""
    loader = ImageRows(folder, [], preprocessing)
    differences = [np.abs(loader.load(folder / row["paths"][variant]).astype(np.int16)
                          - loader.load(folder / row["paths"]["original"]).astype(np.int16)) for row in rows]
    return float(np.mean([d.mean() for d in differences])), int(max(d.max() for d in differences))


def resize_target_moved(preprocessing, folder: Path, rows: list[dict]) -> np.ndarray:
    """Per image: whether the Hub copy's resize target differs from the original's (the cap rounds
    the longer side, so after the resize to S the longer side can be one pixel longer or shorter)."""
    moved = []
    for row in rows:
        with Image.open(folder / row["paths"]["hub"]) as capped:
            moved.append(preprocessing.resized_size(*capped.size) != preprocessing.resized_size(*row["size"]))
    return np.array(moved)


def cosines(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    first, second = (rows / np.linalg.norm(rows, axis=1, keepdims=True) for rows in (first, second))
    return np.sum(first * second, axis=1)


def compare_features(spec: ModelSpec, preprocessing, folder: Path, rows: list[dict], threads: int) -> dict:
    """Per variant: pixel differences, cosines to the originals' features; and the features."""
    started = time.perf_counter()
    features = {variant: extract(spec, folder, rows, variant, threads) for variant in ("original", *VARIANTS)}
    original = features["original"]
    between = cosines(original, np.roll(original, 1, axis=0))
    weights = "random" if spec.weights == "random" else "pretrained here"
    print(f"\n{spec.name} ({weights} weights), S = {preprocessing.size} {preprocessing.interpolation}, "
          f"{len(rows)} images, {original.shape[1]}-d features ({time.perf_counter() - started:.0f} s)")
    print(f"  between different images (originals): mean cosine {between.mean():.4f}, 1 - cos {1 - between.mean():.2e}")
    print(f"  {'variant':<11} {'pixels |d| mean':>15} {'max':>4} {'cos mean':>9} {'cos p5':>9} {'cos min':>9} "
          f"{'1-cos mean':>10} {'vs re-encoded':>13} {'of between':>10}")
    moved = {variant: 1 - cosines(original, features[variant]) for variant in VARIANTS}
    for variant in VARIANTS:
        similarity = 1 - moved[variant]
        mean_diff, max_diff = pixel_differences(preprocessing, folder, rows, variant)
        ratio = moved[variant].mean() / max(moved["re-encoded"].mean(), 1e-12)
        share = moved[variant].mean() / max(1 - between.mean(), 1e-12)
        print(f"  {variant:<11} {mean_diff:15.2f} {max_diff:4d} {similarity.mean():9.6f} "
              f"{np.percentile(similarity, 5):9.6f} {similarity.min():9.6f} {moved[variant].mean():10.2e} "
              f"{ratio:12.2f}x {share:10.2e}")
    target_moved = resize_target_moved(preprocessing, folder, rows)
    if 0 < target_moved.sum() < len(rows):
        print(f"  {int(target_moved.sum())} of {len(rows)} Hub copies are resized to a longer side one pixel off the "
              f"original's (the cap's rounding), so their crop is scaled or shifted slightly: hub 1-cos mean "
              f"{moved['hub'][target_moved].mean():.2e} there, {moved['hub'][~target_moved].mean():.2e} on the others")
    return features


def scored(classifier, features: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 (percent) of a probe's final classifier on L2-normalised ``features``."""
    weight, bias = (torch.from_numpy(array) for array in classifier)
    logits = l2_normalise(torch.from_numpy(features)) @ weight.T + bias
    return float((logits.argmax(1).numpy() == labels).mean() * 100)


def probe_top1(args, model: str, features: dict[str, np.ndarray], rows: list[dict], folder: Path) -> None:
    """The workflow's linear probe on a model's features, original against Hub copies."""
    test = np.array([row["test"] for row in rows])
    labels = np.array([row["label"] for row in rows])
    settings = SearchSettings(trials=args.trials, epochs=args.epochs)
    results = {key: [] for key in ("orig/orig", "orig/hub", "hub/hub")}
    for seed in args.probe_seeds:
        for trained_on in ("original", "hub"):
            job = ProbeJob(features[trained_on][~test], labels[~test], features[trained_on][test], labels[test],
                           settings=settings, device="cpu", return_classifier=True)
            result = probe_dataset(job, shots="all", seed=seed, journal=str(folder / f"study-{model}-{trained_on}-{seed}.jsonl"))
            if trained_on == "original":
                results["orig/orig"].append(result["test_top1"])
                results["orig/hub"].append(scored(result["classifier"], features["hub"][test], labels[test]))
                rescored = scored(result["classifier"], features["original"][test], labels[test])
                if abs(rescored - result["test_top1"]) > 100 / test.sum():
                    print(f"  note: rescoring the originals gives {rescored:.2f}, the probe {result['test_top1']:.2f}")
            else:
                results["hub/hub"].append(result["test_top1"])
    print(f"\nlinear probe on {model} features: {args.concepts} concepts x {args.train_images} train / "
          f"{args.test_images} test images, {args.trials} trials x {args.epochs} epochs, seeds "
          f"{' '.join(map(str, args.probe_seeds))} (one test image = {100 / test.sum():.2f} points)")
    baseline = np.mean(results["orig/orig"])
    names = {"orig/orig": "train original, test original", "orig/hub": "train original, test Hub copy",
             "hub/hub": "train Hub copy, test Hub copy"}
    for key, name in names.items():
        values = np.array(results[key])
        print(f"  {name:<31} top-1 {values.mean():6.2f} (seeds: {' '.join(f'{v:.2f}' for v in values)}), "
              f"difference {values.mean() - baseline:+.2f}")


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concepts", type=int, default=10, help="probe concepts (classes)")
    parser.add_argument("--train-images", type=int, default=12, help="per probe concept")
    parser.add_argument("--test-images", type=int, default=8, help="per probe concept")
    parser.add_argument("--shorter-side", type=int, nargs=2, default=(700, 1200), metavar=("MIN", "MAX"))
    parser.add_argument("--long-side", type=int, default=1200, help="the rendering's side; the longer side's cap")
    parser.add_argument("--cap", type=int, default=HUB_CAP, help="the copy's shorter-side cap (768: w21-webp)")
    parser.add_argument("--similarity", type=float, nargs=2, default=(0.45, 0.85),
                        help="Lin similarities of the probe concepts to their nearest pretraining concept")
    parser.add_argument("--pretrain-concepts", type=int, default=24)
    parser.add_argument("--pretrain-train-images", type=int, default=16)
    parser.add_argument("--pretrain-val-images", type=int, default=8)
    parser.add_argument("--pretrain-epochs", type=int, default=15)
    parser.add_argument("--archs", nargs="*", default=["resnet50"], help="registry archs run with random weights")
    parser.add_argument("--random-images", type=int, default=40, help="images the random-weight archs extract (all of them: they are probed too)")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--probe-seeds", type=int, nargs="+", default=[22, 37, 45])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main() -> None:
    args = parse_arguments()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="pre-resize-") as name:
        folder = Path(name)
        started = time.perf_counter()
        checkpoint, pretrain_concepts, val_top1 = pretrain_demo(args, folder / "pretraining")
        print(f"demo_cnn pretrained on {len(pretrain_concepts)} demo-world concepts: val top-1 {100 * val_top1:.1f}% "
              f"({time.perf_counter() - started:.0f} s)")
        started = time.perf_counter()
        rows = generate(args, folder, pretrain_concepts)
        sizes = np.array([min(row["size"]) for row in rows])
        megabytes = {variant: sum((folder / row["paths"][variant]).stat().st_size for row in rows) / 1e6
                     for variant in ("original", "hub")}
        print(f"{len(rows)} images, shorter side {sizes.min()}-{sizes.max()} px (median {int(np.median(sizes))}), "
              f"capped at {args.cap} px; {megabytes['original']:.1f} MB of originals, {megabytes['hub']:.1f} MB "
              f"as the Hub copy stores them ({time.perf_counter() - started:.0f} s)")
        demo = ModelSpec("demo_cnn", "demo_cnn", str(checkpoint))
        # the probe needs every image's features: the demo network's, and a random-weight arch's
        # where --random-images covers them all
        probed = {"demo_cnn": compare_features(demo, REGISTRY["demo_cnn"].preprocessing, folder, rows, args.threads)}
        subset = [rows[position] for position in spread(list(range(len(rows))), min(args.random_images, len(rows)))]
        for arch in args.archs:
            features = compare_features(ModelSpec(arch, arch, "random"), REGISTRY[arch].preprocessing, folder, subset,
                                        args.threads)
            if len(subset) == len(rows):
                probed[arch] = features
        for model, features in probed.items():
            probe_top1(args, model, features, rows, folder)


if __name__ == "__main__":
    main()
