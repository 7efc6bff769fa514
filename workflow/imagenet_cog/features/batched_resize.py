"""Antialiased resize and center crop of a whole batch of decoded images of any sizes.

The device decode path (:mod:`imagenet_cog.features.decoding`) gets one uint8 [3, H, W] image per
file, each of its own size. Resizing them one at a time (``F.interpolate`` per image, then
rounding and cropping) launches several kernels per image from Python: on an H100 that made
the device path slower than PIL in 14 loader workers (benchmarks/README.md). Here the
resize and the crop are written as two matrix products per image, ``out = V @ image @ H^T``,
where the rows of ``V`` [size, H] and ``H`` [size, W] hold the antialiased filter's weights
of the output rows and columns the crop keeps (PIL's and torch's antialiasing filters:
Keys' cubic with a = -0.5, or the triangle, stretched by the downscaling factor and
normalised per output pixel). Images are grouped by their size rounded up to
:data:`SIZE_BIN` pixels and zero-padded within a group (the padded rows and columns get zero
weight), so a batch costs a few batched products per group whatever the number of images.

The arithmetic is the separable filter ``F.interpolate(..., antialias=True)`` applies,
horizontal pass first, in float32 with TF32 off, then rounded to uint8 like the per-image
path: the two differ only in the order of each output pixel's float32 sum, which moves a
rare pixel by one grey level (``tests/test_features_batched_resize.py``), within the device path's
documented tolerance of one grey level from PIL.
"""

from __future__ import annotations

import math
import warnings

import torch

SIZE_BIN = 64
# padded float32 values resized in one go (bounds the working memory to ~1 GB)
MAX_VALUES_PER_GROUP = 2**28
KEYS_CUBIC = -0.5


def filter_weights(distance: torch.Tensor, interpolation: str) -> torch.Tensor:
    """The antialiasing filter at ``distance`` (in input pixels, already divided by the
    downscaling factor): Keys' cubic (a = -0.5) for bicubic, the triangle for bilinear."""
    x = distance.abs()
    if interpolation == "bilinear":
        return (1.0 - x).clamp_min(0.0)
    if interpolation != "bicubic":
        raise ValueError(f"interpolation must be bicubic or bilinear, not {interpolation!r}")
    a = KEYS_CUBIC
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return torch.where(x < 1.0, near, torch.where(x < 2.0, far, torch.zeros_like(x)))


def resample_matrices(input_sizes: torch.Tensor, output_sizes: torch.Tensor, offsets: torch.Tensor, crop: int,
                      padded: int, interpolation: str) -> torch.Tensor:
    """[B, crop, padded] weights: row i of image b holds the filter's weights over its
    ``input_sizes[b]`` input pixels for output pixel ``offsets[b] + i`` of a resize to
    ``output_sizes[b]`` pixels (zero beyond the image), as torch's and PIL's antialiased
    resize compute them: support 2 (cubic) or 1 (triangle) input pixels times the
    downscaling factor, each output pixel's weights normalised to sum to one."""
    device = input_sizes.device
    sizes = input_sizes.double().view(-1, 1, 1)
    scale = sizes / output_sizes.double().view(-1, 1, 1)
    stretch = scale.clamp_min(1.0)
    support = (2.0 if interpolation == "bicubic" else 1.0) * stretch
    centre = (offsets.double().view(-1, 1, 1) + torch.arange(crop, device=device, dtype=torch.float64).view(1, -1, 1)
              + 0.5) * scale
    # first and one-past-last input pixel of each output pixel, truncated as the C code does
    first = (centre - support + 0.5).clamp_min(0.0).floor()
    last = torch.minimum((centre + support + 0.5).floor(), sizes)
    position = torch.arange(padded, device=device, dtype=torch.float64).view(1, 1, -1)
    weights = filter_weights((position - centre + 0.5) / stretch, interpolation)
    weights = torch.where((position >= first) & (position < last), weights, torch.zeros_like(weights))
    total = weights.sum(dim=2, keepdim=True)
    return (weights / torch.where(total == 0, torch.ones_like(total), total)).float()


def resize_and_crop_batch(images: list[torch.Tensor], geometry: list[tuple[int, int, int, int]], size: int,
                          interpolation: str) -> torch.Tensor:
    """uint8 [3, H_i, W_i] images on one device -> uint8 [n, 3, size, size] on that device:
    image i resized (antialiased) to ``geometry[i]`` = (width, height, left, top)'s width and
    height, rounded to uint8 and cropped to ``size`` x ``size`` from (left, top), as
    :func:`imagenet_cog.features.decoding.resize_and_crop` does one image at a time."""
    if not images or len(images) != len(geometry):
        raise ValueError("resize_and_crop_batch needs one geometry per image, and at least one image")
    device = images[0].device
    output = torch.empty((len(images), 3, size, size), dtype=torch.uint8, device=device)
    groups: dict[tuple[int, int], list[int]] = {}
    for number, image in enumerate(images):
        height, width = image.shape[-2:]
        groups.setdefault((math.ceil(height / SIZE_BIN) * SIZE_BIN, math.ceil(width / SIZE_BIN) * SIZE_BIN), []).append(number)
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # TF32 would move pixels by more than a grey level
    try:
        for (height, width), members in groups.items():
            step = max(1, MAX_VALUES_PER_GROUP // (3 * height * width))
            for start in range(0, len(members), step):
                chosen = members[start:start + step]
                output[torch.tensor(chosen, device=device)] = _resize_group(
                    [images[n] for n in chosen], [geometry[n] for n in chosen], height, width, size, interpolation)
    finally:
        torch.set_float32_matmul_precision(previous)
    return output


def _resize_group(images: list[torch.Tensor], geometry: list[tuple[int, int, int, int]], height: int, width: int,
                  size: int, interpolation: str) -> torch.Tensor:
    """One group of images no larger than ``height`` x ``width``, zero-padded to it."""
    device = images[0].device
    with warnings.catch_warnings():
        # the strided layout copies the images into one padded tensor in C++, not a Python loop
        warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors is in prototype stage")
        padded = torch.nested.nested_tensor(images).to_padded_tensor(0, (len(images), 3, height, width))

    def column(values) -> torch.Tensor:
        return torch.tensor(values, device=device)

    new_widths, new_heights, lefts, tops = (column(values) for values in zip(*geometry))
    rows = resample_matrices(column([image.shape[-2] for image in images]), new_heights, tops, size, height, interpolation)
    columns = resample_matrices(column([image.shape[-1] for image in images]), new_widths, lefts, size, width,
                                interpolation)
    # horizontal pass first, as F.interpolate's antialiased kernel: [n, 3, H, W] @ [n, 1, W, size]
    across = torch.matmul(padded.float(), columns.transpose(1, 2).unsqueeze(1))
    result = torch.matmul(rows.unsqueeze(1), across)
    return result.round_().clamp_(0, 255).to(torch.uint8)
