"""JPEG decoding, resizing and cropping on the extraction device (``features.decode``).

The host path (:class:`imagenet_cog.features.extract.ImageRows`) decodes and resizes every image
with PIL in the DataLoader workers. On a GPU node with few cores per GPU that work, not the
network, bounds the throughput, so the device path ships the files' bytes instead and decodes
a whole batch with TorchCodec's ``decode_jpeg`` on the device (one nvJPEG call on CUDA;
libjpeg-turbo on a CPU, which is how the tests run the same code), then resizes (antialiased, PIL's bicubic or bilinear
kernel), rounds to uint8 and center-crops there with the host path's sizes and rounding,
the whole batch in a few batched matrix products (:mod:`imagenet_cog.features.batched_resize`).

Only plain 8-bit baseline or progressive JPEGs with one or three components whose file ends
with the end-of-image marker go to the device; everything else (CMYK or YCCK, 12-bit,
arithmetic coding, PNG or other formats named .JPEG, truncated files) goes to the host path,
as does any file the device decoder rejects, so undecodable images are flagged exactly as
on the host path. Both paths give the same pixels up to the decoders' IDCT and
chroma-upsampling rounding and the resize's fixed-point rounding (a few grey levels at
most), well within the shard's mixed-precision tolerance on the features.

Without TorchCodec installed (a GPU node whose python lacks it, and no package index to get
it from) ``features.decode: device`` decodes on the host instead, with a warning in the log;
the shard records the path it took (its ``decode`` attribute).
"""

from __future__ import annotations

import importlib
import logging

import torch
import torch.nn.functional as F

from imagenet_cog.features.batched_resize import resize_and_crop_batch

log = logging.getLogger("imagenet_cog.features.decoding")

DECODE_CHOICES = ("auto", "host", "device")
# SOF0 baseline, SOF1 extended sequential, SOF2 progressive (Huffman): what nvJPEG decodes.
DEVICE_FRAME_MARKERS = (0xC0, 0xC1, 0xC2)
# Every other start-of-frame marker (lossless, hierarchical, arithmetic coding).
OTHER_FRAME_MARKERS = (0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF)
# Restart markers and TEM carry no length field.
MARKERS_WITHOUT_LENGTH = (0x01, *range(0xD0, 0xD8))


def choose_decode(requested: str, device) -> str:
    """``auto`` means the host path: on an H100 node with 14 loader workers it extracted
    676 images/s against the device path's 443 (benchmarks/README.md), measured when the
    device path still resized each image with its own kernels; the batched resize is yet to
    be measured there (benchmarks/gpu_suite.sh). ``device`` is for nodes with few CPU cores
    per GPU, where the workers' decoding is the limit."""
    if requested not in DECODE_CHOICES:
        raise ValueError(f"features.decode must be one of {', '.join(DECODE_CHOICES)}, not {requested!r}")
    if requested == "auto":
        return "host"
    if requested == "device" and device_decoder() is None:
        log.warning("features.decode is device but TorchCodec is not installed (pip install torchcodec): decoding on "
                    "the host instead")
        return "host"
    return requested


def device_decoder():
    """TorchCodec's ``decode_jpeg``, or None where TorchCodec is not installed or does not load."""
    try:
        return importlib.import_module("torchcodec.decoders").decode_jpeg
    except (ImportError, OSError, RuntimeError):
        return None


def device_decodable(data: bytes) -> bool:
    """Whether a file's header says it is an 8-bit, 1- or 3-component Huffman JPEG that ends
    with its end-of-image marker (a file cut short lacks it)."""
    if len(data) < 4 or data[:2] != b"\xff\xd8" or data.rstrip(b"\x00")[-2:] != b"\xff\xd9":
        return False
    position = 2
    while position + 4 <= len(data):
        if data[position] != 0xFF:
            return False
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte before a marker
            position += 1
            continue
        if marker in MARKERS_WITHOUT_LENGTH:
            position += 2
            continue
        length = int.from_bytes(data[position + 2:position + 4], "big")
        if marker in DEVICE_FRAME_MARKERS:
            if position + 10 > len(data):
                return False
            precision, components = data[position + 4], data[position + 9]
            return precision == 8 and components in (1, 3)
        if marker in OTHER_FRAME_MARKERS or marker in (0xDA, 0xD9) or length < 2:
            return False
        position += 2 + length
    return False


def crop_offsets(width: int, height: int, size: int, rounding: str = "round") -> tuple[int, int]:
    """Left and top of the center crop, with torchvision's rounding (``round``) or transformers'
    image processors' (``floor``): an odd margin puts the crop one pixel apart."""
    if rounding == "floor":
        return (width - size) // 2, (height - size) // 2
    return int(round((width - size) / 2.0)), int(round((height - size) / 2.0))


def crop_geometry(width: int, height: int, preprocessing) -> tuple[int, int, int, int]:
    """(width, height) after the preprocessing's resize, and the (left, top) of its crop."""
    new_width, new_height = preprocessing.resized_size(width, height)
    return new_width, new_height, *crop_offsets(new_width, new_height, preprocessing.size, preprocessing.crop_rounding)


def resize_and_crop(image, preprocessing):
    """A decoded uint8 [3, H, W] image on any device -> uint8 [3, size, size] on that device,
    resized like PIL (antialiased kernel, rounded to uint8) then center-cropped: one image at a
    time, the reference :func:`imagenet_cog.features.batched_resize.resize_and_crop_batch` (which the
    device path runs) is tested and benchmarked against."""
    size = preprocessing.size
    height, width = image.shape[-2:]
    new_width, new_height, left, top = crop_geometry(width, height, preprocessing)
    resized = F.interpolate(image[None].float(), size=(new_height, new_width),
                            mode=preprocessing.interpolation, align_corners=False, antialias=True)
    resized = resized.round_().clamp_(0, 255).to(torch.uint8)[0]
    return resized[:, top:top + size, left:left + size]


class DeviceDecoder:
    """Turns a loader batch of encoded files (and host-decoded fallbacks) into one uint8
    [B, 3, size, size] batch on the device; files the device decoder rejects are decoded on
    the host instead, and failures there are reported as errors (invalid rows)."""

    def __init__(self, rows, device):
        self.rows = rows  # an ImageRows: its host path is the fallback
        self.device = device
        self.host_decoded = 0

    def _decode(self, encoded: list):
        decode_jpeg = device_decoder()
        try:
            return decode_jpeg(encoded, mode="RGB", device=self.device)
        except RuntimeError:
            # One bad file fails the whole batched call: find it file by file.
            decoded = []
            for data in encoded:
                try:
                    decoded.append(decode_jpeg(data, mode="RGB", device=self.device))
                except RuntimeError:
                    decoded.append(None)
            return decoded

    def __call__(self, items: list, positions: list[int], errors: list[str]):
        """``items[i]`` is an encoded file (1-D uint8, when ``is_encoded[i]``) or host pixels."""
        size = self.rows.preprocessing.size
        batch = torch.empty((len(items), 3, size, size), dtype=torch.uint8, device=self.device)
        errors = list(errors)
        encoded = [number for number, (_, is_encoded) in enumerate(items) if is_encoded]
        decoded = self._decode([items[number][0] for number in encoded]) if encoded else []
        from_device = {number: image for number, image in zip(encoded, decoded) if image is not None}
        if from_device:
            # every image the device decoded, resized and cropped in a few batched products
            images = list(from_device.values())
            batch[torch.tensor(list(from_device), device=self.device)] = resize_and_crop_batch(
                images, [crop_geometry(image.shape[-1], image.shape[-2], self.rows.preprocessing) for image in images], size,
                self.rows.preprocessing.interpolation)
        on_host = []
        for number, (tensor, is_encoded) in enumerate(items):
            if number in from_device:
                continue
            if is_encoded:
                # The header looked fine but the device decoder refused the file.
                tensor, _, errors[number] = self.rows.host_item(positions[number])
            on_host.append((number, tensor))
        if on_host:
            self.host_decoded += len(on_host)
            batch[torch.tensor([number for number, _ in on_host], device=self.device)] = torch.stack(
                [pixels for _, pixels in on_host]).to(self.device, non_blocking=True)
        return batch, errors


def read_encoded(data: bytes):
    """An image's bytes (a file's, or a tar member's) as a 1-D uint8 tensor, and whether the
    device may decode them."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8), device_decodable(data)
