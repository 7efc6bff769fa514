"""The images of a fine-tuning job: the split table's training rows, augmented, and its test
rows, preprocessed as extraction does.

Augmentation is a function of (seed, epoch, row) alone: each image's crop and flip come from
a generator seeded by those keys, never from a process's random state. A job therefore sees
the same pixels whatever its loader workers or processes, and a job resumed at an epoch
boundary sees what the uninterrupted job would have seen. The epoch's order is a seeded
permutation of the rows, dealt to the processes of a distributed job in turn.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch
import torchvision.transforms.functional as image_functions
from PIL import Image
from torchvision.transforms import InterpolationMode, RandomResizedCrop

from imagenet_cog.core.sampling import derived_rng
from imagenet_cog.core.undecodable import DECODER_ERRORS, error_text
from imagenet_cog.features.extract import ImageRows
from imagenet_cog.finetune.recipe import Recipe


def augmentation_seed(seed: int, epoch: int, row: int) -> int:
    return int(derived_rng(seed, "finetune-augmentation", epoch, row).integers(2**62))


def process_seed(seed: int, epoch: int, rank: int) -> int:
    """A process's torch seed for an epoch (dropout and the like draw from it)."""
    return int(derived_rng(seed, "finetune-process", epoch, rank).integers(2**62))


class TrainImages(ImageRows):
    """Training rows as uint8 [3, S, S] crops: a random resized crop of the decoded image
    (the recipe's scale and ratio ranges, the model's interpolation) and a random flip.
    Items are ``(pixels, row, error)``; an image its decoder refuses is zeros and the error
    (:mod:`imagenet_cog.core.undecodable`), any other error (a crop range torch refuses) fails
    the job."""

    def __init__(self, root: Path, paths: list[str], preprocessing, reader, recipe: Recipe, seed: int):
        super().__init__(root, paths, preprocessing, reader)
        self.recipe = recipe
        self.seed = seed
        self.epoch = 0
        self.interpolation = (InterpolationMode.BICUBIC if preprocessing.interpolation == "bicubic"
                              else InterpolationMode.BILINEAR)

    def augmented(self, image: Image.Image, row: int) -> torch.Tensor:
        size = self.preprocessing.size
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(augmentation_seed(self.seed, self.epoch, row))
            top, left, height, width = RandomResizedCrop.get_params(image, list(self.recipe.crop_scale),
                                                                    list(self.recipe.crop_ratio))
            flip = self.recipe.horizontal_flip and bool(torch.rand(1) < 0.5)
        image = image_functions.resized_crop(image, top, left, height, width, [size, size], self.interpolation)
        if flip:
            image = image_functions.hflip(image)
        return image_functions.pil_to_tensor(image)

    def __getitem__(self, row: int):
        try:
            with Image.open(io.BytesIO(self.encoded(row))) as image:
                image = image.convert("RGB")
        except DECODER_ERRORS as failure:
            size = self.preprocessing.size
            return torch.zeros(3, size, size, dtype=torch.uint8), row, error_text(failure)
        return self.augmented(image, row), row, ""


def epoch_rows(count: int, seed: int, epoch: int, rank: int, world: int, batch: int) -> list[int]:
    """This process's rows of an epoch, in order: a seeded permutation dealt to the ``world``
    processes in turn, cut to whole batches of ``batch`` rows per process so that every
    process takes the same number of steps."""
    order = derived_rng(seed, "finetune-order", epoch).permutation(count)
    per_process = (count // world) // batch * batch
    return order[rank::world][:per_process].tolist()


def steps_per_epoch(count: int, world: int, batch: int) -> int:
    return (count // world) // batch


def collate(items):
    pixels = torch.stack([item[0] for item in items])
    rows = torch.tensor([item[1] for item in items], dtype=torch.int64)
    return pixels, rows, [item[2] for item in items]


def labels_of(table_rows: list[dict], split_table: Path) -> np.ndarray:
    try:
        return np.array([int(row["label"]) for row in table_rows], dtype=np.int64)
    except ValueError as error:
        raise ValueError(f"{split_table}: a label is not an integer ({error}); delete it and re-run the splits stage.") from None
