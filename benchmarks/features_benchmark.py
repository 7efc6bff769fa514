"""Feature-extraction speed: this workflow's shard extractor against a reference-style loop.

Both extract the same generated JPEGs with the same network and the same preprocessing
(shortest side to S bicubic, center crop S, /255, ImageNet normalisation).

* baseline, written the way the authors' scripts work: a PIL loader with a torchvision
  ``Compose([Resize, CenterCrop, ToTensor, Normalize])`` producing float32 tensors in the
  workers, batches of 128, the model in float32 and default memory format, features
  concatenated in memory and written in one file at the end;
* ours: :func:`imagenet_cog.features.extract.extract_shard` (uint8 batches normalised on the device,
  channels_last, float16 autocast on a GPU after its tolerance check, float16 HDF5 shard
  written atomically), decoding on the host (PIL in the workers) or on the device
  (``--decode device``: batched ``decode_jpeg``, resize and crop on the device; ``auto``
  is the host path, as the workflow's default).

It prints images per second of each, their ratio, and the largest relative difference
between the two sets of features (float16 storage alone accounts for about 5e-4).

    python benchmarks/features_benchmark.py --images 256 --num-workers 1
    python benchmarks/features_benchmark.py --device cuda --decode device --images 2048 \
        --num-workers 8 --batch-size 256
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torchvision
from PIL import Image
from torchvision import transforms

from imagenet_cog.core.device import resolve_device
from imagenet_cog.features.extract import ExtractionOptions, SplitImages, extract_shard
from imagenet_cog.features.store import read_features
from imagenet_cog.models.registry import ModelSpec, build_model


def generate_images(root: Path, count: int, seed: int) -> Path:
    """JPEGs of ImageNet-like sizes (shorter side 300-500 px) and their split table."""
    rng = np.random.default_rng(seed)
    lines = ["path\twnid\tlabel\tsplit"]
    for number in range(count):
        wnid = f"n{number % 10:08d}"
        (root / "images" / wnid).mkdir(parents=True, exist_ok=True)
        height, width = int(rng.integers(300, 500)), int(rng.integers(300, 600))
        # Smooth random images compress like photographs, unlike white noise.
        small = rng.integers(0, 256, (height // 16 + 1, width // 16 + 1, 3), dtype=np.uint8)
        image = Image.fromarray(small).resize((width, height), Image.Resampling.BILINEAR)
        relative = f"{wnid}/{number:06d}.JPEG"
        image.save(root / "images" / relative, quality=90)
        lines.append(f"{relative}\t{wnid}\t{number % 10}\ttrain")
    table = root / "splits.tsv"
    table.write_text("\n".join(lines) + "\n")
    return table


class ReferenceStyleDataset(torch.utils.data.Dataset):
    def __init__(self, root: Path, paths: list[str], size: int, mean, std):
        self.root, self.paths = root, paths
        self.transform = transforms.Compose([
            transforms.Resize(size, interpolation=transforms.InterpolationMode.BICUBIC),
            transforms.CenterCrop(size),
            transforms.ToTensor(),
            transforms.Normalize(mean, std),
        ])

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, position):
        with open(self.root / self.paths[position], "rb") as stream:
            image = Image.open(stream).convert("RGB")
        return self.transform(image), 0


def reference_style_extraction(spec: ModelSpec, root: Path, paths: list[str], output: Path,
                               device: str, num_workers: int) -> float:
    """The authors' way; returns seconds (model building included, as for ours)."""
    started = time.perf_counter()
    target = resolve_device(device, "features.device")
    model = build_model(spec)
    network = model.network.to(target)
    p = model.preprocessing
    loader = torch.utils.data.DataLoader(
        ReferenceStyleDataset(root, paths, p.size, p.mean, p.std), batch_size=128,
        shuffle=False, num_workers=num_workers, pin_memory=target.type == "cuda",
    )
    collected = []
    with torch.no_grad():
        for images, _ in loader:
            collected.append(network(images.to(target)).cpu())
    features = torch.cat(collected).numpy()
    np.save(output, features)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=128, help="our extractor's batch size")
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--decode", choices=["auto", "host", "device"], default="auto",
                        help="where our extractor decodes and resizes (features.decode)")
    parser.add_argument("--skip-baseline", action="store_true",
                        help="time ours only (e.g. a second decode path on the same node)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    spec = ModelSpec(args.arch, args.arch, "random")
    with tempfile.TemporaryDirectory(prefix="features-benchmark-") as folder:
        root = Path(folder)
        table = generate_images(root, args.images, args.seed)
        paths = [line.split("\t")[0] for line in table.read_text().splitlines()[1:]]
        print(f"{args.images} generated JPEGs, {args.arch} with random weights, "
              f"device {resolve_device(args.device, 'features.device')}, {torch.get_num_threads()} torch threads, "
              f"{args.num_workers} loader workers, decode {args.decode}; torch {torch.__version__}, "
              f"torchvision {torchvision.__version__}")

        baseline_seconds = None if args.skip_baseline else reference_style_extraction(
            spec, root / "images", paths, root / "baseline.npy", args.device, args.num_workers)
        started = time.perf_counter()
        options = ExtractionOptions(batch_size=args.batch_size, num_workers=args.num_workers, threads=args.threads,
                                    device=args.device, decode=args.decode)
        attributes = extract_shard(spec, SplitImages(table, root / "images", "l1", "train"), 0, args.images,
                                   root / "ours.h5", options)
        ours_seconds = time.perf_counter() - started
        ours = read_features(root / "ours.h5").features
        if baseline_seconds is not None:
            baseline = np.load(root / "baseline.npy")
            difference = np.linalg.norm(ours - baseline, axis=1) / np.linalg.norm(baseline, axis=1)
    ours_name = f"ours ({attributes['precision']}, decode {attributes['decode']}):"
    if baseline_seconds is not None:
        print(f"{'baseline (reference style):':<{len(ours_name)}} {args.images / baseline_seconds:8.2f} images/s ({baseline_seconds:.1f} s)")
    print(f"{ours_name} {args.images / ours_seconds:8.2f} images/s ({ours_seconds:.1f} s); "
          f"{attributes['host_decoded']} images decoded on the host")
    if baseline_seconds is not None:
        print(f"speed-up: {baseline_seconds / ours_seconds:.2f}x")
        print(f"max relative feature difference: {difference.max():.2e}")


if __name__ == "__main__":
    main()
