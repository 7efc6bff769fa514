"""The ``extract`` command: frozen-backbone features of one shard.

Shard ``k`` of a split holds the split's rows ``[k * shard_size, (k + 1) * shard_size)`` in
the order of the split table. Images are decoded and resized in DataLoader workers with
PIL (bicubic shortest-side resize, center crop: the paper's pixels; ``features.host_resize:
tensor`` resizes with torchvision on uint8 tensors instead, faster), shipped as uint8
(a quarter of float32's bytes through pinned memory), and normalised on the device. With
``features.decode: device`` (the default on a GPU) the workers only read the files and the
device decodes, resizes and crops them (:mod:`imagenet_cog.features.decoding`), the host path
remaining the fallback for files the device cannot decode.

A root in one of the releases' tar layouts is read through its image index
(:mod:`imagenet_cog.core.archives`): each worker opens each tar once and reads an image's
bytes with one ``pread`` at the offset the index records, checking the member's tar header
there. A member the archive cuts short is flagged invalid (named with archive and member in
the log) like an undecodable file; an index that does not describe the archive stops the
job with the fix, and no finished shard is touched.

The backbone runs in channels_last memory format. On a GPU it also runs under float16
autocast, but only after a tolerance check: the first batch is run both in float32 and
under autocast, and when any image's feature vector differs by more than
:data:`MIXED_PRECISION_TOLERANCE` (relative L2 error) the whole shard is computed in
float32 instead. The precision used and the measured
error are recorded in the shard's attributes. Float16 storage itself rounds to a relative
error of about 5e-4.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.utils.data
from PIL import Image

from imagenet_cog.core.archives import ArchiveError, ImageIndex, MemberReader
from imagenet_cog.core.command_line import add_device_option, setup_logging
from imagenet_cog.core.device import resolve_device
from imagenet_cog.core.image_layouts import FOLDERS, LAYOUT_NAMES
from imagenet_cog.core.io import read_tsv
from imagenet_cog.core.stack import stack_versions
from imagenet_cog.core.undecodable import DECODER_ERRORS, UndecodableImages, UndecodableImagesError, error_text
from imagenet_cog.features.decoding import DECODE_CHOICES, DeviceDecoder, choose_decode, crop_offsets, read_encoded
from imagenet_cog.features.store import code_version, write_shard
from imagenet_cog.models.registry import LoadedModel, ModelSpec, Preprocessing, build_model, weights_identity
from imagenet_cog.models.series import resolve_weights
from imagenet_cog.models.tokens import TOKEN_CHOICES

MIXED_PRECISION_TOLERANCE = 1e-2
HOST_RESIZE_CHOICES = ("pil", "tensor")
SPLIT_COLUMNS = ("path", "wnid", "label", "split")

log = logging.getLogger("imagenet_cog.features.extract")


@dataclass(frozen=True)
class ShardRows:
    """The rows of one shard: image paths (relative), labels and their index in the split."""

    paths: list[str]
    labels: list[int]
    index: list[int]


def split_rows(split_table: str | Path, split: str) -> list[dict]:
    """The rows of one split of a split table, in the table's order."""
    rows = read_tsv(split_table)
    if rows and not set(SPLIT_COLUMNS) <= set(rows[0]):
        raise ValueError(
            f"{split_table}: expected the columns {', '.join(SPLIT_COLUMNS)}; it has "
            f"{', '.join(rows[0])}. Delete it and re-run the splits stage."
        )
    return [row for row in rows if row["split"] == split]


def shard_rows(split_table: str | Path, split: str, shard: int, shard_size: int,
               selected: list[dict] | None = None) -> ShardRows:
    """Shard ``shard``'s rows of the split (``selected``: its rows, when already read)."""
    if selected is None:
        selected = split_rows(split_table, split)
    start = shard * shard_size
    if start >= len(selected) and not (shard == 0 and not selected):
        raise ValueError(
            f"{split_table}: shard {shard} starts at row {start} but split '{split}' has only "
            f"{len(selected)} rows; the split table changed since the shard list was made "
            f"(or features.shard_size did): re-run Snakemake so it recomputes the shards."
        )
    chunk = selected[start:start + shard_size]
    try:
        labels = [int(row["label"]) for row in chunk]
    except ValueError as error:
        raise ValueError(f"{split_table}: a label of split '{split}' is not an integer ({error}).") from None
    return ShardRows([row["path"] for row in chunk], labels, list(range(start, start + len(chunk))))


def check_images_present(paths: list[str], image_root: Path, split_table: str | Path) -> None:
    missing = [path for path in paths if not (image_root / path).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{len(missing)} of the {len(paths)} images of this shard listed in "
            f"{split_table} are not under {image_root} (first: {image_root / missing[0]}). "
            f"Either the image root is wrong (data.in21k_root / data.in1k_root in config.yaml) "
            f"or the split table is stale: delete {split_table} and re-run to rebuild it."
        )


def archive_reader(image_root: Path, image_index: Path, paths: list[str]) -> MemberReader:
    """The reader of a shard's images in a tar layout, its index checked against the root."""
    index = ImageIndex(image_index)
    if Path(index.root).resolve() != Path(image_root).resolve():
        raise ArchiveError(
            f"image index {image_index} was built for '{index.root}', not for the image root '{image_root}'; delete "
            f"it and re-run to index this root (finished features are kept)."
        )
    return index.reader(paths)


def split_reader(images: SplitImages, paths: list[str]) -> MemberReader | None:
    """The reader of ``paths`` in a tar or Hub layout (checked against its index), or None for
    folders once every path is checked to be there."""
    if images.image_index is None:
        check_images_present(paths, images.image_root, images.split_table)
        return None
    return archive_reader(images.image_root, images.image_index, paths)


def resize_and_crop_tensor(pixels: np.ndarray, new_size: tuple[int, int], corner: tuple[int, int], size: int,
                           interpolation: str) -> np.ndarray:
    """uint8 [H, W, 3] -> uint8 [size, size, 3]: resized to ``new_size`` (width, height) by
    torchvision's antialiased resize on uint8 tensors (about 3x PIL's on one core; pixels
    within a few grey levels of PIL's, docs/features.md), then cropped from ``corner``."""
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as transforms

    mode = InterpolationMode.BICUBIC if interpolation == "bicubic" else InterpolationMode.BILINEAR
    image = torch.from_numpy(pixels).permute(2, 0, 1)
    resized = transforms.resize(image, [new_size[1], new_size[0]], interpolation=mode, antialias=True)
    left, top = corner
    return resized[:, top:top + size, left:left + size].permute(1, 2, 0).numpy()


class ImageRows:
    """A map-style dataset of preprocessed uint8 images; undecodable ones are flagged.

    ``reader``: the images are tar members, read by offset (``paths`` in its order);
    ``host_resize``: ``pil`` (the paper's pixels) or ``tensor`` (:func:`resize_and_crop_tensor`)."""

    def __init__(self, root: Path, paths: list[str], preprocessing: Preprocessing, reader: MemberReader | None = None,
                 host_resize: str = "pil"):
        if host_resize not in HOST_RESIZE_CHOICES:
            raise ValueError(f"features.host_resize must be one of {', '.join(HOST_RESIZE_CHOICES)}, not {host_resize!r}")
        self.root = root
        self.paths = paths
        self.preprocessing = preprocessing
        self.reader = reader
        self.host_resize = host_resize

    def describe(self, position: int) -> str:
        """Where an image was read from, for messages: its file, or its archive and member."""
        return self.reader.describe(position) if self.reader else str(self.root / self.paths[position])

    def encoded(self, position: int) -> bytes:
        return self.reader.read(position) if self.reader else (self.root / self.paths[position]).read_bytes()

    def __len__(self) -> int:
        return len(self.paths)

    def load(self, path: Path | io.BytesIO):
        size = self.preprocessing.size
        with Image.open(path) as image:
            image = image.convert("RGB")
            new_size = self.preprocessing.resized_size(*image.size)
            left, top = crop_offsets(*new_size, size, self.preprocessing.crop_rounding)
            if self.host_resize == "tensor":
                return resize_and_crop_tensor(np.array(image), new_size, (left, top), size,
                                              self.preprocessing.interpolation)
            resample = (Image.Resampling.BICUBIC if self.preprocessing.interpolation == "bicubic"
                        else Image.Resampling.BILINEAR)
            image = image.resize(new_size, resample)
            image = image.crop((left, top, left + size, top + size))
            return np.array(image, dtype=np.uint8)

    def __getitem__(self, position: int):
        return self.host_item(position)

    def host_item(self, position: int):
        """``(uint8 [3, size, size] pixels, position, error)``; zeros and the error when the
        decoder refuses the image (:mod:`imagenet_cog.core.undecodable`); any other error fails
        the job."""
        try:
            pixels = self.load(io.BytesIO(self.reader.read(position)) if self.reader else self.root / self.paths[position])
            error = ""
        except DECODER_ERRORS as failure:
            size = self.preprocessing.size
            pixels = np.zeros((size, size, 3), dtype=np.uint8)
            error = error_text(failure)
        return torch.from_numpy(pixels).permute(2, 0, 1), position, error


class EncodedImageRows(ImageRows):
    """The device path's dataset: a file's bytes when the device can decode it, else the
    host path's pixels; items are ``((tensor, is_encoded), position, error)``."""

    def __getitem__(self, position: int):
        try:
            data, decodable = read_encoded(self.encoded(position))
        except OSError:
            decodable = False
        if decodable:
            return (data, True), position, ""
        pixels, position, error = self.host_item(position)
        return (pixels, False), position, error


def collate_encoded(batch):
    items = [item[0] for item in batch]
    positions = torch.tensor([item[1] for item in batch], dtype=torch.int64)
    errors = [item[2] for item in batch]
    return items, positions, errors


def collate(batch):
    images = torch.stack([item[0] for item in batch])
    positions = torch.tensor([item[1] for item in batch], dtype=torch.int64)
    errors = [item[2] for item in batch]
    return images, positions, errors


class FeatureExtractor:
    """Normalises uint8 batches on the device and runs the backbone at the chosen precision."""

    def __init__(self, model, device, mixed_precision: bool):
        self.model = model
        self.device = device
        self.network = model.network.to(device)
        p = model.preprocessing
        self.mean = torch.tensor(p.mean, device=device).view(1, 3, 1, 1) * 255.0
        self.std = torch.tensor(p.std, device=device).view(1, 3, 1, 1) * 255.0
        # float16 where tensor cores run it; bfloat16 (float32's range) for CPU autocast.
        self.autocast_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
        self.autocast = mixed_precision
        self.precision = "float32"
        self.precision_error = 0.0
        # channels_last suits both cuDNN and oneDNN convolutions (1.8x for ResNet50 on a CPU).
        self.network = self.network.to(memory_format=torch.channels_last)
        self.checked = not self.autocast

    def _forward(self, images, autocast: bool):
        x = ((images.float() - self.mean) / self.std).contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device.type, dtype=self.autocast_dtype, enabled=autocast):
            return self.network(x).float()

    def __call__(self, images):
        images = images.to(self.device, non_blocking=True)
        with torch.inference_mode():
            if not self.checked:
                reference = self._forward(images, autocast=False)
                mixed = self._forward(images, autocast=True)
                norms = reference.norm(dim=1).clamp_min(1e-12)
                error = float(((mixed - reference).norm(dim=1) / norms).max())
                self.precision_error = error
                self.checked = True
                if error <= MIXED_PRECISION_TOLERANCE:
                    self.precision = f"{str(self.autocast_dtype).removeprefix('torch.')}-autocast"
                    log.info("mixed precision kept: max relative feature error %.2e <= %.0e", error, MIXED_PRECISION_TOLERANCE)
                    return mixed
                self.autocast = False
                log.warning("mixed precision off for this shard: relative feature error %.2e > %.0e", error, MIXED_PRECISION_TOLERANCE)
                return reference
            return self._forward(images, autocast=self.autocast)


@dataclass(frozen=True)
class ExtractionOptions:
    """How features are extracted, whatever the images: the options extract (one shard) and
    extract-split (every shard of a split) share. ``threads``: the job's cores (None: torch's
    default); ``decode``: where JPEGs are decoded (:mod:`imagenet_cog.features.decoding`)."""

    batch_size: int = 256
    num_workers: int = 0
    threads: int | None = None
    dtype: str = "float16"
    device: str = "auto"
    mixed_precision: bool = True
    decode: str = "auto"
    max_undecodable_fraction: float | None = None  # None: the workflow's (core.undecodable)
    host_resize: str = "pil"

    def requested(self) -> str:
        """The settings asked for, as the JSON a shard's ``extraction_settings`` records, so
        that a kept shard is known to match a job's settings (host_resize only when not the
        default: shards made before it existed stay current)."""
        settings = {"batch_size": self.batch_size, "dtype": self.dtype, "device": self.device,
                    "mixed_precision": self.mixed_precision, "decode": self.decode}
        if self.host_resize != "pil":
            settings["host_resize"] = self.host_resize
        return json.dumps(settings, sort_keys=True)


@dataclass(frozen=True)
class SplitImages:
    """One split of a dataset and where its images are: the split table's paths are relative
    to ``image_root``, folders or a tar layout (``image_layout``) read through ``image_index``."""

    split_table: Path
    image_root: Path
    dataset: str
    split: str
    image_layout: str = FOLDERS
    image_index: Path | None = None


def checked_identity(spec: ModelSpec, expected: str | None, model: LoadedModel | None = None) -> str:
    """The identity of the model's weights, which must be the one the workflow planned with."""
    identity = model.weights_identity if model is not None else weights_identity(spec)
    if expected is not None and identity != expected:
        raise RuntimeError(
            f"model '{spec.name}': weights changed since the workflow was planned "
            f"({expected} -> {identity}); re-run Snakemake to re-plan."
        )
    return identity


def extract_shard(spec: ModelSpec, images: SplitImages, shard: int, shard_size: int, output: Path,
                  options: ExtractionOptions = ExtractionOptions(), *, expected_identity: str | None = None,
                  rows: ShardRows | None = None, model: LoadedModel | None = None) -> dict:
    """Extract one shard and write it; returns the shard's attributes.

    ``rows`` (the shard's rows, else read from the split table) and ``model`` (built from
    ``spec``, else built here) let one process extract many shards (``extract_split``).
    """
    started = time.perf_counter()
    rows = rows or shard_rows(images.split_table, images.split, shard, shard_size)
    reader = split_reader(images, rows.paths)
    identity = checked_identity(spec, expected_identity, model)
    target = resolve_device(options.device, "features.device")
    _configure_torch(target, options)
    if model is None:
        model = build_model(spec, identity)
        for note in model.notes:
            log.info(note)
    decode = choose_decode(options.decode, target)
    log.info("model %s (%s, weights %s%s): %d-d features, preprocessing %s, device %s, decoding on the %s, "
             "host resize %s", spec.name, spec.arch, identity, " RANDOM" if model.random_weights else "",
             model.feature_dim, model.preprocessing.to_json(), target, decode, options.host_resize)
    # CPUs without bfloat16 matrix units run autocast slower than float32: GPU only.
    extractor = FeatureExtractor(model, target, options.mixed_precision and target.type == "cuda")
    image_rows = (EncodedImageRows if decode == "device" else ImageRows)(
        images.image_root, rows.paths, model.preprocessing, reader, options.host_resize)
    decoder = DeviceDecoder(image_rows, target) if decode == "device" else None
    undecodable = UndecodableImages(len(rows.paths), f"{images.dataset} {images.split} shard {shard}",
                                    options.max_undecodable_fraction)
    features, valid = _extract_rows(image_rows, rows, images.split, extractor, decoder, options, model.feature_dim,
                                    undecodable)
    if not np.isfinite(features).all():
        raise FloatingPointError(
            f"model '{spec.name}' produced non-finite features in shard {shard}; with "
            f"features.dtype float16 the values may overflow: set it to float32."
        )
    attributes = {
        "model": spec.name, "arch": spec.arch, "weights": identity,
        "random_weights": model.random_weights, "preprocessing": model.preprocessing.to_json(),
        "feature_dim": model.feature_dim, "features_dtype": options.dtype, "dataset": images.dataset,
        "split": images.split, "shard": shard, "shard_size": shard_size,
        "precision": extractor.precision, "mixed_precision_error": extractor.precision_error,
        "device": str(target), "decode": decode, "host_resize": options.host_resize, "image_root": str(images.image_root),
        "image_layout": images.image_layout, "host_decoded": decoder.host_decoded if decoder else len(rows.paths),
        "code_version": code_version(), "torch_version": str(torch.__version__),
        "versions": json.dumps(stack_versions(), sort_keys=True),
        **model.provenance,
        "extraction_settings": options.requested(),
    }
    write_shard(output, features, rows.labels, rows.index, rows.paths, valid, attributes)
    log.info("wrote %s: %d images (%d invalid, %d decoded on the host) in %.1f s", output,
             len(rows.paths), int((~valid).sum()), attributes["host_decoded"], time.perf_counter() - started)
    return attributes


def _configure_torch(target, options: ExtractionOptions) -> None:
    """Threads for the model and deterministic GPU convolutions."""
    if options.threads:
        # On a CPU the model needs every core and the decoding workers mostly wait for it;
        # on a GPU the workers need the cores.
        torch.set_num_threads(options.threads if target.type == "cpu" else max(1, options.threads - options.num_workers))
    if target.type == "cuda":
        # Deterministic convolution algorithms: re-extracting a shard gives the same bytes.
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True


def _extract_rows(image_rows: ImageRows, rows: ShardRows, split: str, extractor: FeatureExtractor,
                  decoder: DeviceDecoder | None, options: ExtractionOptions, feature_dim: int,
                  undecodable: UndecodableImages):
    """``(features, valid)`` of the shard's rows in their order; an undecodable image is a
    row of zeros marked invalid, as many as ``undecodable`` allows."""
    loader = torch.utils.data.DataLoader(
        image_rows, batch_size=options.batch_size, shuffle=False, num_workers=options.num_workers,
        collate_fn=collate_encoded if decoder else collate,
        pin_memory=extractor.device.type == "cuda", persistent_workers=False,
        prefetch_factor=4 if options.num_workers else None,
    )
    storage = np.float16 if options.dtype == "float16" else np.float32
    features = np.zeros((len(rows.paths), feature_dim), dtype=storage)
    valid = np.ones(len(rows.paths), dtype=bool)
    batches = len(loader)
    report_every = max(1, batches // 10)
    done = 0
    loop_started = time.perf_counter()
    for number, (images, positions, errors) in enumerate(loader, start=1):
        if decoder:
            images, errors = decoder(images, positions.tolist(), errors)
        output_batch = extractor(images).cpu().numpy()
        positions = positions.numpy()
        for offset, (position, error) in enumerate(zip(positions, errors)):
            if error:
                valid[position] = False
                output_batch[offset] = 0.0
                undecodable.add(f"{image_rows.describe(position)} (row {rows.index[position]} of split '{split}')", error)
        features[positions] = output_batch.astype(storage)
        done += len(positions)
        if number % report_every == 0 or number == batches:
            log.info("batch %d/%d, %d/%d images, %.1f images/s", number, batches, done,
                     len(rows.paths), done / (time.perf_counter() - loop_started))
    undecodable.check()
    return features, valid


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The options naming a model entry and its weights (extraction and fine-tuning)."""
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--arch", required=True)
    parser.add_argument("--weights", default="pretrained")
    parser.add_argument("--factory", default=None)
    parser.add_argument("--preprocessing", choices=["paper", "model"], default=None,
                        help="timm models: the paper's preprocessing or timm's own evaluation transform")
    parser.add_argument("--input-size", type=int, default=None, help="timm models: S instead of the config's")
    parser.add_argument("--image-features", default=None,
                        help="open_clip models: embedding (after the projection, the default) or pooled (the "
                             "tower's pooled features before it)")
    parser.add_argument("--tokens", choices=TOKEN_CHOICES, default=None,
                        help="timm and hf models: pre_logits (timm's default), the class tokens of the last --blocks "
                             "blocks (cls), the mean of the last block's patch tokens (avgpool), both (cls+avgpool), or "
                             "a transformers model's pooler_output (hf: the family's own reading by default)")
    parser.add_argument("--blocks", type=int, default=None, help="timm and hf models: how many last blocks' class tokens")
    parser.add_argument("--revision", default=None, help="hf models: the Hub repo's branch, tag or commit")
    parser.add_argument("--trust-remote-code", action="store_true", default=None,
                        help="hf models: run the repo's own Python code (its revision pinned to a commit)")
    parser.add_argument("--trusted-globals", nargs="+", default=[], help="objects the checkpoint may hold besides tensors")
    parser.add_argument("--weights-identity", default=None,
                        help="the identity the workflow planned with; a different one fails the job")


def model_spec_of(args: argparse.Namespace) -> ModelSpec:
    return ModelSpec(args.model_name, args.arch, resolve_weights(args.weights), args.factory or None, args.preprocessing, args.input_size,
                     tuple(args.trusted_globals), args.image_features, args.tokens, args.blocks, args.revision,
                     args.trust_remote_code)


def add_image_arguments(parser: argparse.ArgumentParser) -> None:
    """The options saying where a dataset's images are (extraction and fine-tuning)."""
    parser.add_argument("--split-table", required=True, type=Path)
    parser.add_argument("--image-root", required=True, type=Path)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--image-layout", default=FOLDERS, choices=LAYOUT_NAMES)
    parser.add_argument("--image-index", default=None, type=Path, help="the root's image index (tar layouts)")


def add_extraction_arguments(parser: argparse.ArgumentParser) -> None:
    """The options extract (one shard) and extract-split (every shard of a split) share."""
    add_image_arguments(parser)
    parser.add_argument("--split", required=True, choices=["train", "test"])
    parser.add_argument("--shard-size", required=True, type=int)
    add_model_arguments(parser)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--dtype", choices=["float16", "float32"], default="float16")
    add_device_option(parser, "the network computes the features (with --decode device, decodes and resizes the images too)")
    parser.add_argument("--mixed-precision", choices=["true", "false"], default="true")
    parser.add_argument("--decode", choices=DECODE_CHOICES, default="auto",
                        help="where JPEGs are decoded and resized (auto: host, the faster path measured)")
    parser.add_argument("--host-resize", choices=HOST_RESIZE_CHOICES, default="pil",
                        help="the host path's resize: PIL's (the paper's pixels) or torchvision's on uint8 tensors")


def extraction_arguments(args: argparse.Namespace) -> dict:
    """The arguments of extract_shard and extract_split that add_extraction_arguments declares."""
    return dict(
        spec=model_spec_of(args),
        images=SplitImages(args.split_table, args.image_root, args.dataset, args.split, args.image_layout, args.image_index),
        shard_size=args.shard_size,
        options=ExtractionOptions(args.batch_size, args.num_workers, args.threads, args.dtype, args.device,
                                  args.mixed_precision == "true", args.decode, host_resize=args.host_resize),
        expected_identity=args.weights_identity,
    )


def extract_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog extract",
                                     description="Extract the features of one shard of a split.")
    add_extraction_arguments(parser)
    parser.add_argument("--shard", required=True, type=int)
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    setup_logging()
    return extraction_status(extract_shard, shard=args.shard, output=args.output, **extraction_arguments(args))


def extraction_status(extract, **arguments) -> int:
    """Run an extraction (one shard, or a split's), its exit status: 1 with the error logged
    when an image archive cannot be read or more images failed to decode than allowed."""
    try:
        extract(**arguments)
    except (ArchiveError, UndecodableImagesError) as error:
        log.error("%s", error)
        return 1
    return 0
