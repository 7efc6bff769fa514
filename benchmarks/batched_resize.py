"""The device decode path's resize and crop: one image at a time against the whole batch at once.

Generates batches of decoded uint8 images with ImageNet-like sizes (most with a 500-pixel
longer side and the shorter one anywhere from 250 to 500, a fifth larger, up to 1500 pixels,
either orientation), already on ``--device`` as nvJPEG leaves them, and resizes and crops
each batch to 224 x 224 twice:

* per image: ``imagenet_cog.features.decoding.resize_and_crop`` on each image and a copy into the
  batch, as the device path did (several kernels launched from Python per image);
* batched: ``imagenet_cog.features.batched_resize.resize_and_crop_batch`` (two batched products
  per group of similar sizes).

It prints images/s of each (best of ``--repeats``, after a warm-up batch), the ratio, and
the largest difference in grey levels and the share of pixels that differ.

    python benchmarks/batched_resize.py --threads 2            # CPU, ~1 minute
    python benchmarks/batched_resize.py --device cuda --batches 8
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from imagenet_cog.features.batched_resize import resize_and_crop_batch
from imagenet_cog.features.decoding import crop_geometry, resize_and_crop
from imagenet_cog.models.registry import Preprocessing


def imagenet_like_sizes(count: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """(height, width) pairs: 80% with a 500-pixel longer side, 20% with 600-1500."""
    sizes = []
    for _ in range(count):
        longer = 500 if rng.random() < 0.8 else int(rng.integers(600, 1501))
        shorter = int(rng.integers(longer // 2, longer + 1))
        sizes.append((shorter, longer) if rng.random() < 0.75 else (longer, shorter))
    return sizes


def batch_of_images(sizes: list[tuple[int, int]], device: torch.device, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator(device=device).manual_seed(seed)
    images = []
    for height, width in sizes:
        coarse = torch.randint(0, 256, (1, 3, height // 16 + 2, width // 16 + 2), generator=generator, device=device)
        image = torch.nn.functional.interpolate(coarse.float(), size=(height, width), mode="bilinear")[0]
        images.append(image.round_().clamp_(0, 255).to(torch.uint8))
    return images


def synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--interpolation", default="bicubic", choices=["bicubic", "bilinear"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    preprocessing = Preprocessing(size=224, interpolation=args.interpolation)
    rng = np.random.default_rng(0)
    batches = [batch_of_images(imagenet_like_sizes(args.batch_size, rng), device, seed)
               for seed in range(args.batches + 1)]

    def per_image(images):
        batch = torch.empty((len(images), 3, 224, 224), dtype=torch.uint8, device=device)
        for number, image in enumerate(images):
            batch[number] = resize_and_crop(image, preprocessing)
        return batch

    def batched(images):
        geometry = [crop_geometry(image.shape[-1], image.shape[-2], preprocessing) for image in images]
        return resize_and_crop_batch(images, geometry, 224, args.interpolation)

    ways = {"per image": per_image, "batched": batched}
    for way in ways.values():  # warm-up: kernels, allocator
        way(batches[0])
    synchronise(device)
    best = dict.fromkeys(ways, float("inf"))
    outputs: dict[str, list[torch.Tensor]] = {}
    for _ in range(args.repeats):
        for name, way in ways.items():
            synchronise(device)
            started = time.perf_counter()
            outputs[name] = [way(images) for images in batches[1:]]
            synchronise(device)
            best[name] = min(best[name], time.perf_counter() - started)
    count = args.batch_size * args.batches
    difference = torch.cat([(a.int() - b.int()).abs().flatten() for a, b in zip(outputs["per image"], outputs["batched"])])
    print(f"{device.type}, {torch.get_num_threads()} threads: {args.batches} batches of {args.batch_size} images "
          f"(ImageNet-like sizes), {args.interpolation}, to 224 x 224")
    for name in ways:
        print(f"{name:<10} {count / best[name]:10.1f} images/s")
    print(f"speed-up {best['per image'] / best['batched']:.2f}x; largest difference {int(difference.max())} grey level(s), "
          f"{100 * float((difference > 0).float().mean()):.4f}% of pixels differ")


if __name__ == "__main__":
    main()
