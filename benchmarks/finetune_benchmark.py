"""Fine-tuning speed: this workflow's training epoch against a torchvision-reference loop.

Both train the same network (random weights of ``--arch``, a new head) on the same generated
JPEGs of ImageNet sizes for one epoch, batches of ``--batch-size``, with the same loader
workers, random resized crops and flips, SGD with Nesterov momentum:

* baseline, the way torchvision's classification reference writes it: a PIL loader with
  ``Compose([RandomResizedCrop, RandomHorizontalFlip, ToTensor, Normalize])`` producing
  float32 tensors in the workers, the model in float32 and the default memory format;
* ours: :class:`imagenet_cog.finetune.train.Trainer` (uint8 crops shipped by the workers,
  normalised on the device, channels_last, bfloat16 autocast on a GPU), the epoch the
  ``finetune`` command runs.

It prints the training images per second of each (what the plan's ``finetune_images_per_s``
prices), their ratio, and ours on tensors already in memory (the step alone, no decoding):
where the step is much faster than the epoch, decoding bounds fine-tuning.

    python benchmarks/finetune_benchmark.py                       # ResNet50, ~2 minutes on 2 cores
    python benchmarks/finetune_benchmark.py --arch demo_cnn --images 256
    python benchmarks/finetune_benchmark.py --device cuda --images 4096 --batch-size 256 --num-workers 14
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torchvision
from torchvision import transforms

sys.path.insert(0, str(Path(__file__).resolve().parent))
from features_benchmark import generate_images

from imagenet_cog.core.io import read_tsv
from imagenet_cog.features.extract import SplitImages
from imagenet_cog.finetune.data import TrainImages, labels_of
from imagenet_cog.finetune.processes import start_processes
from imagenet_cog.finetune.recipe import Recipe, parameter_groups
from imagenet_cog.finetune.train import FinetuneJob, Trainer, prepared_network
from imagenet_cog.models.registry import ModelSpec


def synchronise(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class ReferenceStyleImages(torch.utils.data.Dataset):
    def __init__(self, root: Path, rows: list[dict], size: int, mean, std):
        self.root, self.rows = root, rows
        self.transform = transforms.Compose([
            transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
            transforms.ToTensor(), transforms.Normalize(mean, std),
        ])

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, position):
        from PIL import Image

        with Image.open(self.root / self.rows[position]["path"]) as image:
            return self.transform(image.convert("RGB")), int(self.rows[position]["label"])


def reference_style_epoch(job: FinetuneJob, rows: list[dict], batch_size: int) -> float:
    """Images per second of the reference's loop over the same images."""
    processes = start_processes(job.device)
    loaded, network = prepared_network(job, 10, processes)
    network = network.to(memory_format=torch.contiguous_format).train()
    recipe = job.recipe
    optimizer = torch.optim.SGD(parameter_groups(network.backbone, network.head, recipe), momentum=recipe.momentum,
                                nesterov=recipe.nesterov, weight_decay=recipe.weight_decay)
    p = loaded.preprocessing
    loader = torch.utils.data.DataLoader(ReferenceStyleImages(job.train.image_root, rows, p.size, p.mean, p.std),
                                         batch_size=batch_size, shuffle=True, num_workers=job.num_workers,
                                         pin_memory=processes.device.type == "cuda", drop_last=True)
    started, seen = time.perf_counter(), 0
    for images, labels in loader:
        loss = torch.nn.functional.cross_entropy(network(images.to(processes.device)), labels.to(processes.device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen += len(labels)
    synchronise(processes.device)
    return seen / (time.perf_counter() - started)


def our_epoch(job: FinetuneJob, rows: list[dict]) -> tuple[float, float, str]:
    """Images per second of our epoch, of our step on resident tensors, and the precision."""
    processes = start_processes(job.device)
    labels = labels_of(rows, job.train.split_table)
    loaded, network = prepared_network(job, 10, processes)
    trainer = Trainer(job, network, loaded, labels, processes)
    images = TrainImages(job.train.image_root, [row["path"] for row in rows], loaded.preprocessing, None,
                         job.recipe, job.seed)
    epoch = trainer.epoch(images, 0)
    size = loaded.preprocessing.size
    batch = torch.randint(0, 256, (trainer.batch, 3, size, size), dtype=torch.uint8)
    targets = torch.from_numpy(labels[: trainer.batch]).to(processes.device)
    steps = max(2, len(labels) // trainer.batch)
    for number in range(steps + 1):
        if number == 1:  # the first step warms the kernels up
            synchronise(processes.device)
            started = time.perf_counter()
        with torch.autocast(processes.device.type, dtype=torch.bfloat16, enabled=trainer.autocast):
            loss = torch.nn.functional.cross_entropy(trainer.model(trainer.normalised(batch)).float(), targets)
        trainer.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        trainer.optimizer.step()
    synchronise(processes.device)
    step_rate = steps * trainer.batch / (time.perf_counter() - started)
    return epoch["images_per_s"], step_rate, "bfloat16-autocast" if trainer.autocast else "float32"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="finetune-benchmark-") as folder:
        root = Path(folder)
        table = generate_images(root, args.images, args.seed)
        rows = read_tsv(table)
        images = SplitImages(table, root / "images", "l1", "train")
        job = FinetuneJob(ModelSpec(args.arch, args.arch, "random"), images, images,
                          Recipe(epochs=1, batch_size=args.batch_size), args.seed, root / "checkpoint.pt",
                          root / "result.json", args.device, args.num_workers, args.threads)
        print(f"{args.images} generated JPEGs, {args.arch} with random weights, batches of {args.batch_size}, "
              f"{torch.get_num_threads()} torch threads, {args.num_workers} loader workers; torch {torch.__version__}, "
              f"torchvision {torchvision.__version__}")
        baseline = reference_style_epoch(job, rows, args.batch_size)
        ours, step, precision = our_epoch(job, rows)
    print(f"baseline (torchvision reference loop, float32): {baseline:8.2f} training images/s")
    print(f"ours ({precision}, channels_last):{' ' * max(0, 14 - len(precision))}{ours:8.2f} training images/s")
    print(f"ours, the step alone (tensors in memory):   {step:8.2f} training images/s")
    print(f"ratio: ours {ours / baseline:.2f}x the baseline; the step is {step / ours:.2f}x the epoch "
          f"({'decoding' if step > 1.5 * ours else 'the step'} bounds it)")
    print(f"finetune_images_per_s: {np.round(ours, 2)}")


if __name__ == "__main__":
    main()
