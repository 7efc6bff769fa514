"""Pretrain the demo's small network on the demo's IN-1K images (the "seen" concepts).

Supervised classification of the demo's IN-1K concepts from their train/ images, seeded and
deterministic on a CPU: Adam, cross-entropy, a fixed number of epochs. Two augmentations:
mirroring, and "texture jitter": with probability ``texture_jitter`` an image gets a random
fine luminance texture of random strength (the demo world's texture family, see
:mod:`imagenet_cog.demo.world`), so the network learns that texture names no concept, as a real
network learns the invariances its augmentations teach. The demo's far concepts are told
apart by texture: this is what makes the pretrained network lose top-1 from L1 to L5
(``texture_jitter: 0`` and it hardly does). The images are read
with the registry's preprocessing of ``demo_cnn``, as feature extraction reads them, and the
checkpoint (the network's state dict, classifier included) is written atomically; the
workflow then evaluates it like any other checkpoint (``weights:`` of a ``models:`` entry).
The log reports the loss and accuracy of every epoch and the top-1 on the IN-1K val/ images.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as functional

from imagenet_cog.backbones.demo_cnn import DemoCNN
from imagenet_cog.core.command_line import setup_logging
from imagenet_cog.core.io import atomic_output, read_lines
from imagenet_cog.core.sampling import derived_rng
from imagenet_cog.demo.world import TEXTURE_AMPLITUDE, random_gratings
from imagenet_cog.features.extract import ImageRows
from imagenet_cog.models.registry import REGISTRY

log = logging.getLogger("imagenet_cog.demo.pretraining")

# The share of training images that get a random texture, and the strongest texture relative
# to the strength with which the demo's far concepts carry theirs.
TEXTURE_JITTER = 0.7
JITTER_STRENGTH = 1.5


def read_images(folder: Path, concepts: Sequence[str]):
    """uint8 [N, 3, S, S] pixels and int64 labels of every JPEG of ``folder/<wnid>/``."""
    paths, labels = [], []
    for label, wnid in enumerate(concepts):
        files = sorted((folder / wnid).glob("*.JPEG"))
        if not files:
            raise FileNotFoundError(f"no images of IN-1K concept {wnid} in {folder / wnid}; re-run the demo_world rule.")
        paths += [str(path.relative_to(folder)) for path in files]
        labels += [label] * len(files)
    rows = ImageRows(folder, paths, REGISTRY["demo_cnn"].preprocessing)
    pixels = torch.stack([torch.from_numpy(rows.load(folder / path)).permute(2, 0, 1) for path in paths])
    return pixels, torch.tensor(labels)


def normalise(pixels):
    preprocessing = REGISTRY["demo_cnn"].preprocessing
    mean = torch.tensor(preprocessing.mean).view(1, 3, 1, 1) * 255
    std = torch.tensor(preprocessing.std).view(1, 3, 1, 1) * 255
    return (pixels.float() - mean) / std


def accuracy(network, pixels, labels, batch_size: int) -> float:
    network.eval()
    with torch.inference_mode():
        predictions = torch.cat([network(normalise(pixels[start:start + batch_size])).argmax(1)
                                 for start in range(0, len(pixels), batch_size)])
    return float((predictions == labels).float().mean())


def texture_jitter(count: int, size: int, probability: float, rng):
    """A float32 tensor [count, 1, size, size] of luminance textures in pixel units (0-1 scale), each present
    with ``probability`` at a strength uniform in [0, JITTER_STRENGTH * TEXTURE_AMPLITUDE]."""
    textures = random_gratings(rng, count, size)
    strength = rng.uniform(0, JITTER_STRENGTH * TEXTURE_AMPLITUDE, count) * (rng.random(count) < probability)
    return torch.from_numpy(textures * strength[:, None, None].astype("float32")).unsqueeze(1)


def pretrain(images: Path, concepts: Sequence[str], output: Path, *, epochs: int, batch_size: int,
             learning_rate: float, seed: int, texture_jitter_probability: float = TEXTURE_JITTER,
             threads: int = 1, kept_epochs: dict[int, Path] | None = None) -> dict[str, float]:
    """Train, write the checkpoint, return the last epoch's train and the val top-1.
    ``kept_epochs`` maps epochs to files that receive the weights after that epoch too: the
    run's checkpoints, evaluated as a series (the training itself is the same)."""
    kept_epochs = kept_epochs or {}
    if any(not 1 <= epoch < epochs for epoch in kept_epochs):
        raise ValueError(f"kept epochs {sorted(kept_epochs)} must lie in 1..{epochs - 1} (the last epoch is the checkpoint itself)")
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    train_pixels, train_labels = read_images(images / "train", concepts)
    val_pixels, val_labels = read_images(images / "val", concepts)
    log.info("%d IN-1K concepts: %d train and %d val images of %d px", len(concepts), len(train_labels),
             len(val_labels), train_pixels.shape[-1])
    network = DemoCNN(num_classes=len(concepts))
    optimiser = torch.optim.Adam(network.parameters(), lr=learning_rate, weight_decay=1e-4)
    order = torch.Generator().manual_seed(seed)
    textures = derived_rng("demo-pretraining-textures", seed)
    pixel_std = torch.tensor(REGISTRY["demo_cnn"].preprocessing.std).view(1, 3, 1, 1)
    train_top1 = 0.0
    for epoch in range(1, epochs + 1):
        started = time.perf_counter()
        network.train()
        permutation = torch.randperm(len(train_labels), generator=order)
        total_loss, correct = 0.0, 0
        for start in range(0, len(permutation), batch_size):
            batch = permutation[start:start + batch_size]
            # Mirroring is the one augmentation: the demo's images are mirrored at random too.
            inputs = normalise(train_pixels[batch])
            flip = torch.rand(len(batch), generator=order) < 0.5
            inputs[flip] = inputs[flip].flip(-1)
            inputs += texture_jitter(len(batch), inputs.shape[-1], texture_jitter_probability, textures) / pixel_std
            logits = network(inputs)
            loss = functional.cross_entropy(logits, train_labels[batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total_loss += loss.item() * len(batch)
            correct += int((logits.argmax(1) == train_labels[batch]).sum())
        train_top1 = correct / len(train_labels)
        log.info("epoch %d/%d: loss %.3f, train top-1 %.1f%% (%.1f s)", epoch, epochs,
                 total_loss / len(train_labels), 100 * train_top1, time.perf_counter() - started)
        if epoch in kept_epochs:
            save_checkpoint(network, concepts, kept_epochs[epoch], epochs=epoch, seed=seed,
                            texture_jitter_probability=texture_jitter_probability,
                            val_top1=accuracy(network, val_pixels, val_labels, batch_size))
    val_top1 = accuracy(network, val_pixels, val_labels, batch_size)
    log.info("IN-1K val top-1 %.1f%% (chance %.1f%%)", 100 * val_top1, 100 / len(concepts))
    save_checkpoint(network, concepts, output, epochs=epochs, seed=seed,
                    texture_jitter_probability=texture_jitter_probability, val_top1=val_top1)
    return {"train_top1": train_top1, "val_top1": val_top1}


def save_checkpoint(network, concepts: Sequence[str], output: Path, *, epochs: int, seed: int,
                    texture_jitter_probability: float, val_top1: float) -> None:
    """The network's weights after ``epochs`` epochs, with how they were trained."""
    # Saved through an open file: given a path, torch names the archive's records after it (the
    # random temporary name), so equal weights would give files, and weights identities, that differ.
    with atomic_output(output) as temporary, open(temporary, "wb") as stream:
        torch.save({"state_dict": network.state_dict(), "concepts": list(concepts), "epochs": epochs,
                    "seed": seed, "texture_jitter": texture_jitter_probability, "val_top1": val_top1}, stream)
    log.info("checkpoint after %d epochs (IN-1K val top-1 %.1f%%) written to %s", epochs, 100 * val_top1, output)


def pretrain_demo_command(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog pretrain-demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", required=True, help="the demo's IN-1K folder ({train,val}/<wnid>/*.JPEG)")
    parser.add_argument("--concepts", required=True, help="the demo's IN-1K wnids, one a line")
    parser.add_argument("--output", required=True, help="the checkpoint to write")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--texture-jitter", type=float, default=TEXTURE_JITTER,
                        help="share of training images given a random texture (0: none)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--keep-epochs", type=int, nargs="*", default=[],
                        help="epochs after which the weights are written too (to --epoch-outputs, in order)")
    parser.add_argument("--epoch-outputs", nargs="*", default=[], help="one checkpoint file per --keep-epochs")
    args = parser.parse_args(argv)
    if len(args.keep_epochs) != len(args.epoch_outputs):
        parser.error(f"--keep-epochs names {len(args.keep_epochs)} epochs, --epoch-outputs {len(args.epoch_outputs)} files")
    setup_logging()
    concepts = read_lines(args.concepts)
    if len(concepts) < 2:
        raise SystemExit(f"error: {args.concepts} lists {len(concepts)} IN-1K concept(s); pretraining needs 2 or more.")
    pretrain(Path(args.images), concepts, Path(args.output), epochs=args.epochs, batch_size=args.batch_size,
             learning_rate=args.learning_rate, seed=args.seed, texture_jitter_probability=args.texture_jitter,
             threads=args.threads, kept_epochs=dict(zip(args.keep_epochs, map(Path, args.epoch_outputs))))
    return 0
