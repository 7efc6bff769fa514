"""The batched resize and crop of the device decode path against the per-image resize it
replaced (and, through it, PIL): equal to one grey level on a rare pixel, for images of
every shape in one batch, grouped and chunked."""

from __future__ import annotations

import pytest
import torch

from imagenet_cog.features import batched_resize
from imagenet_cog.features.batched_resize import resample_matrices, resize_and_crop_batch
from imagenet_cog.features.decoding import crop_geometry, resize_and_crop
from imagenet_cog.models.registry import Preprocessing

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# (height, width): landscape, portrait, square, smaller than the crop, taller than wide by far
SHAPES = [(375, 500), (500, 375), (333, 500), (224, 224), (100, 90), (641, 479), (180, 240), (60, 400), (230, 226)]


def smooth_image(height: int, width: int, seed: int) -> torch.Tensor:
    """uint8 [3, H, W] with the smooth structure and sharp edges of a photograph."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.randint(0, 256, (1, 3, height // 12 + 2, width // 12 + 2), generator=generator).float()
    image = torch.nn.functional.interpolate(coarse, size=(height, width), mode="bilinear")[0]
    image[:, height // 3: height // 2] = 255.0 - image[:, height // 3: height // 2]  # an edge
    return image.round().clamp(0, 255).to(torch.uint8)


# the paper's resize, timm's crop_pct resize (shortest side to 256 then crop 224) and its squash
RESIZES = [{}, {"resize": 256, "mode": "model"}, {"resize": 248, "crop_mode": "squash", "mode": "model"}]


@pytest.mark.parametrize("interpolation", ["bicubic", "bilinear"])
@pytest.mark.parametrize("resize", RESIZES, ids=["paper", "crop_pct", "squash"])
def test_a_batch_of_every_shape_is_the_per_image_resize(interpolation, resize, monkeypatch):
    # small groups: the 641 x 479 image alone exceeds a group's budget, others share one
    monkeypatch.setattr(batched_resize, "MAX_VALUES_PER_GROUP", 3 * 448 * 512)
    images = [smooth_image(height, width, seed) for seed, (height, width) in enumerate(SHAPES + SHAPES[:3])]
    preprocessing = Preprocessing(size=224, interpolation=interpolation, **resize)
    reference = torch.stack([resize_and_crop(image, preprocessing) for image in images])
    geometry = [crop_geometry(image.shape[-1], image.shape[-2], preprocessing) for image in images]
    batched = resize_and_crop_batch(images, geometry, 224, interpolation)
    assert batched.shape == reference.shape and batched.dtype == torch.uint8
    difference = (batched.int() - reference.int()).abs()
    assert difference.max() <= 1
    assert (difference > 0).float().mean() < 1e-3


def test_weights_cover_each_image_and_sum_to_one():
    sizes, outputs, offsets = torch.tensor([500, 90]), torch.tensor([298, 224]), torch.tensor([37, 0])
    weights = resample_matrices(sizes, outputs, offsets, 224, 512, "bicubic")
    assert weights.shape == (2, 224, 512)
    torch.testing.assert_close(weights.sum(dim=2), torch.ones(2, 224))
    assert weights[0, :, 500:].abs().max() == 0 and weights[1, :, 90:].abs().max() == 0
    # downscaling 500 -> 298 widens the cubic's support to 2 x 500 / 298 input pixels a side
    assert (weights[0] != 0).sum(dim=1).max() <= 2 * 2 * 500 / 298 + 2
    with pytest.raises(ValueError, match="bicubic or bilinear"):
        resample_matrices(sizes, outputs, offsets, 224, 512, "nearest")


def test_one_geometry_per_image_is_required():
    with pytest.raises(ValueError, match="one geometry per image"):
        resize_and_crop_batch([smooth_image(50, 60, 0)], [], 224, "bicubic")
