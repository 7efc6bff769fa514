"""Feature-extraction speed in steady state, fixed costs apart: this workflow's extractor
against a reference-style loop, and the decoder alone as the limit, in one run.

Both extract the same generated JPEGs with the same network and the same preprocessing
(shortest side to S bicubic, center crop S, /255, ImageNet normalisation).

* baseline, written the way the authors' scripts work: a PIL loader with a torchvision
  ``Compose([Resize, CenterCrop, ToTensor, Normalize])`` producing float32 tensors in the
  workers, batches of 128, the model in float32 and default memory format, features
  concatenated in memory and written in one file at the end;
* ours: :func:`imagenet_cog.features.extract.extract_shard` (uint8 batches normalised on the
  device, channels_last, float16 autocast on a GPU after its tolerance check, float16 HDF5
  shard written atomically), decoding on the host (PIL in the workers, resized by PIL or,
  ``--host-resize tensor``, torchvision on uint8 tensors) or on the device (``--decode
  device``: TorchCodec's batched ``decode_jpeg``, resize and crop on the device).

Each run is split in two: the fixed seconds (model build, CUDA's and the workers' start, the
first batch, and the shard's write) and the steady images/s, timed from the end of the first
batch to the end of the last; per loader worker too. A run of many images (``--images``
rows over ``--distinct`` generated files, read again from the page cache) makes the fixed
part a small share of the whole. The limit is timed in the same run, one core, one process:
PIL's decode alone and the host path's whole item (decode, resize, crop), both resizes; with
``--decode device`` also the device decoder alone on batches of encoded files.

``--loader-only`` times the loaders without a network (the host path's rate per worker, the
reference-style loader as its baseline). It prints each figure and the largest relative
difference between the baseline's and our features (float16 storage alone: ~5e-4).

    python benchmarks/features_benchmark.py --loader-only --images 512 --num-workers 2
    python benchmarks/features_benchmark.py --images 256 --num-workers 1
    python benchmarks/features_benchmark.py --device cuda --decode device --images 40000 --num-workers 14 \
        --batch-size 256
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torchvision
from PIL import Image
from torchvision import transforms

from imagenet_cog.core.device import resolve_device
from imagenet_cog.features import extract
from imagenet_cog.features.decoding import device_decoder
from imagenet_cog.features.extract import ExtractionOptions, ImageRows, SplitImages, collate, extract_shard
from imagenet_cog.features.store import read_features
from imagenet_cog.models.registry import ModelSpec, Preprocessing, build_model

MAX_FIXED_SHARE = 0.05


def generate_images(root: Path, count: int, seed: int, distinct: int | None = None) -> Path:
    """A split table of ``count`` rows over ``distinct`` (default: all) JPEGs of ImageNet-like
    sizes (shorter side 300-500 px), row i naming file i modulo ``distinct``."""
    rng = np.random.default_rng(seed)
    distinct = min(count, distinct or count)
    files = []
    for number in range(distinct):
        wnid = f"n{number % 10:08d}"
        (root / "images" / wnid).mkdir(parents=True, exist_ok=True)
        height, width = int(rng.integers(300, 500)), int(rng.integers(300, 600))
        # Smooth random images compress like photographs, unlike white noise.
        small = rng.integers(0, 256, (height // 16 + 1, width // 16 + 1, 3), dtype=np.uint8)
        image = Image.fromarray(small).resize((width, height), Image.Resampling.BILINEAR)
        files.append(f"{wnid}/{number:06d}.JPEG")
        image.save(root / "images" / files[-1], quality=90)
    lines = ["path\twnid\tlabel\tsplit"] + [
        f"{files[row % distinct]}\t{files[row % distinct][:9]}\t{row % distinct % 10}\ttrain" for row in range(count)]
    table = root / "splits.tsv"
    table.write_text("\n".join(lines) + "\n")
    return table


@dataclass
class Timing:
    """When a run started, finished its first and last batch, and ended."""

    started: float
    images: int = 0
    first_images: int = 0
    first_done: float = 0.0
    last_done: float = 0.0
    finished: float = 0.0

    def batch_done(self, size: int) -> None:
        self.last_done = time.perf_counter()
        if not self.images:
            self.first_done, self.first_images = self.last_done, size
        self.images += size

    def steady(self) -> float:
        """images/s after the first batch (nan for a run of one batch)."""
        if self.images == self.first_images:
            return float("nan")
        return (self.images - self.first_images) / max(self.last_done - self.first_done, 1e-9)

    def fixed(self) -> float:
        return (self.first_done - self.started) + (self.finished - self.last_done)

    def line(self, name: str, workers: int) -> str:
        share = self.fixed() / max(self.finished - self.started, 1e-9)
        per_worker = f"{self.steady() / workers:9.1f}" if workers else "        -"
        warning = "" if share <= MAX_FIXED_SHARE else f" (fixed share over {MAX_FIXED_SHARE:.0%}: run more images)"
        return (f"| {name} | {self.images} | {self.fixed():6.2f} | {share:5.1%} | {self.steady():9.1f} | {per_worker} |"
                + warning)


TABLE_HEAD = ["| path | images | fixed s | fixed share | steady images/s | per worker |", "|---|---:|---:|---:|---:|---:|"]


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


def synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reference_style_extraction(spec: ModelSpec, root: Path, paths: list[str], output: Path,
                               device: str, num_workers: int) -> Timing:
    """The authors' way, model building included in its fixed part as for ours."""
    timing = Timing(time.perf_counter())
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
            timing.batch_done(len(images))
    np.save(output, torch.cat(collected).numpy())
    timing.finished = time.perf_counter()
    return timing


def our_extraction(spec: ModelSpec, table: Path, root: Path, count: int, output: Path,
                   options: ExtractionOptions) -> tuple[Timing, dict]:
    """extract_shard, each batch's end noted as the extractor returns its features."""
    timing = Timing(time.perf_counter())
    original = extract.FeatureExtractor.__call__

    def timed(self, images):
        features = original(self, images)
        synchronise(self.device)
        timing.batch_done(len(features))
        return features

    extract.FeatureExtractor.__call__ = timed
    try:
        attributes = extract_shard(spec, SplitImages(table, root, "l1", "train"), 0, count, output, options)
    finally:
        extract.FeatureExtractor.__call__ = original
    timing.finished = time.perf_counter()
    return timing, attributes


def loader_timing(dataset, batch_size: int, num_workers: int, collate_fn=None) -> Timing:
    """A DataLoader's batches with no network: its workers' start, then their steady rate."""
    timing = Timing(time.perf_counter())
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                                         collate_fn=collate_fn, prefetch_factor=4 if num_workers else None)
    for batch in loader:
        timing.batch_done(len(batch[0]))
    timing.finished = time.perf_counter()
    return timing


def one_core_limits(root: Path, paths: list[str], preprocessing: Preprocessing) -> list[str]:
    """images/s on one core, in this process, best of two passes: PIL's decode alone and the
    host path's item with each resize (what one loader worker can at best deliver), per
    second of wall time and per second of this process's CPU time (what a worker owning a
    core would do on a machine shared with other work)."""

    def decode_alone(position: int) -> None:
        with Image.open(root / paths[position]) as image:
            image.convert("RGB")

    steps = {"PIL decode alone": decode_alone}
    for resize in ("pil", "tensor"):
        steps[f"host item, {resize} resize"] = ImageRows(root, paths, preprocessing, host_resize=resize).host_item
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    rates = {}
    try:
        for name, step in steps.items():
            step(0)  # imports
            for _ in range(2):
                started, cpu_started = time.perf_counter(), time.process_time()
                for position in range(len(paths)):
                    step(position)
                wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
                best = rates.get(name, (0.0, 0.0))
                rates[name] = (max(best[0], len(paths) / wall), max(best[1], len(paths) / max(cpu, 1e-9)))
    finally:
        torch.set_num_threads(previous)
    return [f"| {name} (one core, {len(paths)} files) | {wall:9.1f} | {cpu:9.1f} |" for name, (wall, cpu) in rates.items()]


def device_decoder_limit(root: Path, paths: list[str], device: torch.device, batch_size: int) -> str:
    """images/s of the device decoder alone on batches of encoded files already in memory."""
    decode_jpeg = device_decoder()
    if decode_jpeg is None:
        return "| device decoder alone | TorchCodec not installed | |"
    encoded = [torch.frombuffer(bytearray((root / path).read_bytes()), dtype=torch.uint8) for path in paths]
    batches = [encoded[start:start + batch_size] for start in range(0, len(encoded), batch_size)]
    decode_jpeg(batches[0], mode="RGB", device=device)  # warm-up: the decoder's start
    synchronise(device)
    started = time.perf_counter()
    for batch in batches:
        decode_jpeg(batch, mode="RGB", device=device)
    synchronise(device)
    return f"| device decoder alone ({device}, {len(encoded)} files) | {len(encoded) / (time.perf_counter() - started):9.1f} | |"


def loader_only(root: Path, paths: list[str], args) -> list[str]:
    """The reference-style loader (float32 tensors) against ours (uint8, each host resize)."""
    p = Preprocessing()
    lines = [reference := loader_timing(ReferenceStyleDataset(root, paths, p.size, p.mean, p.std), args.batch_size,
                                        args.num_workers)]
    for resize in ("pil", "tensor"):
        lines.append(loader_timing(ImageRows(root, paths, p, host_resize=resize), args.batch_size, args.num_workers,
                                   collate))
    names = ["reference-style loader (baseline)", "ours, host, pil resize", "ours, host, tensor resize"]
    rows = [timing.line(name, args.num_workers) for name, timing in zip(names, lines)]
    speedups = [f"steady speed-up over the baseline: {resize} {timing.steady() / reference.steady():.2f}x"
                for resize, timing in zip(("pil", "tensor"), lines[1:])]
    return [*TABLE_HEAD, *rows, "", *speedups]


def with_network(spec: ModelSpec, table: Path, root: Path, paths: list[str], args) -> list[str]:
    """The reference-style loop on the first --baseline-images rows against ours on all."""
    options = ExtractionOptions(batch_size=args.batch_size, num_workers=args.num_workers, threads=args.threads,
                                device=args.device, decode=args.decode, host_resize=args.host_resize)
    compared = min(len(paths), args.baseline_images or len(paths))
    baseline = None if args.skip_baseline else reference_style_extraction(
        spec, root, paths[:compared], table.parent / "baseline.npy", args.device, args.num_workers)
    ours, attributes = our_extraction(spec, table, root, len(paths), table.parent / "ours.h5", options)
    name = f"ours ({attributes['precision']}, decode {attributes['decode']}, {attributes['host_resize']} resize)"
    lines = [*TABLE_HEAD]
    if baseline is not None:
        lines.append(baseline.line("reference style (baseline)", args.num_workers))
    lines += [ours.line(name, args.num_workers), "", f"{attributes['host_decoded']} images decoded on the host"]
    if baseline is not None:
        features = read_features(table.parent / "ours.h5").features[:compared]
        reference = np.load(table.parent / "baseline.npy")
        difference = np.linalg.norm(features - reference, axis=1) / np.linalg.norm(reference, axis=1)
        lines += [f"steady speed-up: {ours.steady() / baseline.steady():.2f}x",
                  f"max relative feature difference: {difference.max():.2e}"]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=256, help="rows extracted")
    parser.add_argument("--distinct", type=int, default=512, help="generated files the rows cycle through")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=128, help="our extractor's batch size")
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--decode", choices=["auto", "host", "device"], default="auto",
                        help="where our extractor decodes and resizes (features.decode)")
    parser.add_argument("--host-resize", choices=["pil", "tensor"], default="pil", help="features.host_resize")
    parser.add_argument("--loader-only", action="store_true", help="time the loaders alone, no network")
    parser.add_argument("--baseline-images", type=int, default=None,
                        help="rows the reference-style loop extracts (default: all)")
    parser.add_argument("--skip-baseline", action="store_true",
                        help="time ours only (e.g. a second decode path on the same node)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device, "features.device")
    with tempfile.TemporaryDirectory(prefix="features-benchmark-") as folder:
        table = generate_images(Path(folder), args.images, args.seed, args.distinct)
        root, paths = Path(folder) / "images", [line.split("\t")[0] for line in table.read_text().splitlines()[1:]]
        print(f"{args.images} rows over {min(args.images, args.distinct)} generated JPEGs, "
              f"{'no network' if args.loader_only else args.arch + ' with random weights'}, device {device}, "
              f"{torch.get_num_threads()} torch threads, {args.num_workers} loader workers, decode {args.decode}; "
              f"torch {torch.__version__}, torchvision {torchvision.__version__}")
        distinct = sorted(set(paths))[:256]
        limits = ["| limit | images/s | images per CPU-second |", "|---|---:|---:|",
                  *one_core_limits(root, distinct, Preprocessing())]
        if args.decode == "device" and not args.loader_only:
            limits.append(device_decoder_limit(root, sorted(set(paths)), device, args.batch_size))
        spec = ModelSpec(args.arch, args.arch, "random")
        lines = loader_only(root, paths, args) if args.loader_only else with_network(spec, table, root, paths, args)
    print("\n".join([*lines, "", *limits]))


if __name__ == "__main__":
    main()
