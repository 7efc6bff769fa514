"""The ``finetune`` command: a whole backbone and a new classification head trained on one
dataset's training split and tested on its test split (CoG supp. C.2, Fig. 6).

The images are the split table's, read as extraction reads them (folders, the releases' tars,
the Hub copies); the backbone is the model entry's, built by the registry with its weights.
On a GPU the steps run under bfloat16 autocast; several GPUs of one node train together
through ``torchrun`` (torch.distributed, batch-norm statistics synchronised across them), the
recipe's batch size shared out among them.

After every epoch the job writes a checkpoint (the network, the optimizer, the schedule and the
epoch's history) atomically beside its result; a job killed or preempted starts again from the
last finished epoch. Nothing else needs saving: the sampler's order and every image's
augmentation are functions of (seed, epoch, row), and each process's random state is re-seeded
from (seed, epoch, rank) as an epoch starts, so a resumed job computes what the uninterrupted
one would have. A checkpoint written for other settings (weights, split, recipe, seed, number
of processes) is set aside and the job starts over. The result JSON is written last; the
checkpoint is then removed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as distributed
import torch.nn as nn
import torch.nn.functional as functional
import torch.utils.data

from imagenet_cog.core.command_line import add_device_option, setup_logging
from imagenet_cog.core.io import atomic_output, remove_partial_writes, write_json
from imagenet_cog.core.stack import stack_versions
from imagenet_cog.core.undecodable import UndecodableImages, UndecodableImagesError
from imagenet_cog.features.extract import (
    SplitImages,
    add_image_arguments,
    add_model_arguments,
    checked_identity,
    model_spec_of,
    split_reader,
    split_rows,
)
from imagenet_cog.features.store import code_version
from imagenet_cog.finetune.data import TrainImages, collate, epoch_rows, labels_of, process_seed, steps_per_epoch
from imagenet_cog.finetune.evaluation import evaluate
from imagenet_cog.finetune.processes import Processes, all_summed, start_processes
from imagenet_cog.finetune.recipe import Recipe, parameter_groups
from imagenet_cog.models.registry import ModelSpec, build_model

log = logging.getLogger("imagenet_cog.finetune.train")


class Classifier(nn.Module):
    """The backbone's penultimate features through a new linear head."""

    def __init__(self, backbone: nn.Module, feature_dim: int, classes: int):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(feature_dim, classes)

    def forward(self, images):
        return self.head(self.backbone(images))


@dataclass(frozen=True)
class FinetuneJob:
    spec: ModelSpec
    train: SplitImages
    test: SplitImages
    recipe: Recipe
    seed: int
    checkpoint: Path
    output: Path
    device: str = "auto"
    num_workers: int = 0
    threads: int | None = None
    mixed_precision: bool = True
    expected_identity: str | None = None
    max_undecodable_fraction: float | None = None  # None: the workflow's (core.undecodable)


def fingerprint(job: FinetuneJob, identity: str, table_rows: list[dict], processes: Processes) -> str:
    """What a checkpoint must have been written for to be resumed."""
    rows = hashlib.sha256("\n".join(f"{row['path']}\t{row['label']}" for row in table_rows).encode()).hexdigest()
    settings = {"weights": identity, "arch": job.spec.arch, "dataset": job.train.dataset, "rows": rows,
                "recipe": job.recipe.to_json(), "seed": job.seed, "processes": processes.world}
    return json.dumps(settings, sort_keys=True)


def write_checkpoint(path: Path, state: dict) -> None:
    with atomic_output(path) as temporary:
        torch.save(state, temporary)


def read_checkpoint(path: Path, expected: str) -> dict | None:
    """The state of the last finished epoch, if ``path`` holds one written for ``expected``."""
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a checkpoint that cannot be read costs its epochs, not the job
        log.warning("%s unreadable (%s): fine-tuning from the start", path, error)
        return None
    if state.get("fingerprint") != expected:
        log.warning("%s was written for other settings (weights, split, recipe, seed or processes): fine-tuning "
                    "from the start", path)
        return None
    return state


def prepared_network(job: FinetuneJob, classes: int, processes: Processes):
    """The backbone (its weights checked) with a new head seeded by the job's seed, trainable."""
    identity = checked_identity(job.spec, job.expected_identity)
    loaded = build_model(job.spec, identity)
    for note in loaded.notes:
        log.info(note)
    torch.manual_seed(job.seed)
    network = Classifier(loaded.network, loaded.feature_dim, classes)
    network.requires_grad_(True)
    if processes.world > 1 and processes.device.type == "cuda":
        network = nn.SyncBatchNorm.convert_sync_batchnorm(network)
    return loaded, network.to(processes.device, memory_format=torch.channels_last)


# torch's batch norms by their public names (a lazy one becomes one of them at its first batch)
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


def set_batch_norm_momentum(network: nn.Module, momentum: float) -> None:
    for module in network.modules():
        if isinstance(module, BATCH_NORMS):
            module.momentum = momentum


class Trainer:
    """The optimizer steps of one process, on its share of every epoch's rows."""

    def __init__(self, job: FinetuneJob, network: Classifier, loaded, labels, processes: Processes):
        self.job, self.recipe, self.processes = job, job.recipe, processes
        self.network = network
        self.model = network
        if processes.world > 1:
            device_ids = [processes.device.index] if processes.device.type == "cuda" else None
            self.model = nn.parallel.DistributedDataParallel(network, device_ids=device_ids)
        self.labels = torch.from_numpy(labels)
        self.batch = self.recipe.batch_size // processes.world
        self.steps = steps_per_epoch(len(labels), processes.world, self.batch)
        set_batch_norm_momentum(network, self.recipe.batch_norm_momentum(self.steps))
        self.optimizer = torch.optim.SGD(parameter_groups(network.backbone, network.head, self.recipe),
                                         momentum=self.recipe.momentum, nesterov=self.recipe.nesterov,
                                         weight_decay=self.recipe.weight_decay)
        total = self.steps * self.recipe.epochs
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: self.recipe.lr_factor(step, total, self.steps))
        self.preprocessing = preprocessing = loaded.preprocessing
        self.mean = torch.tensor(preprocessing.mean, device=processes.device).view(1, 3, 1, 1) * 255.0
        self.std = torch.tensor(preprocessing.std, device=processes.device).view(1, 3, 1, 1) * 255.0
        self.autocast = job.mixed_precision and processes.device.type == "cuda"

    def normalised(self, pixels):
        pixels = pixels.to(self.processes.device, non_blocking=True).float()
        return ((pixels - self.mean) / self.std).contiguous(memory_format=torch.channels_last)

    def epoch(self, images: TrainImages, epoch: int) -> dict:
        """One pass over this process's rows of ``epoch``; its mean loss, top-1 and rates."""
        started = time.perf_counter()
        images.epoch = epoch
        rows = epoch_rows(len(self.labels), self.job.seed, epoch, self.processes.rank, self.processes.world, self.batch)
        torch.manual_seed(process_seed(self.job.seed, epoch, self.processes.rank))
        loader = torch.utils.data.DataLoader(images, batch_size=self.batch, sampler=rows, num_workers=self.job.num_workers,
                                             collate_fn=collate, pin_memory=self.processes.device.type == "cuda")
        self.model.train()
        # summed on the device, read once an epoch: no step waits for the host
        sums = torch.zeros(2, dtype=torch.float64, device=self.processes.device)  # loss, correct
        counts = torch.zeros(2, dtype=torch.float64)  # counted, undecodable
        undecodable = UndecodableImages(len(rows), f"{self.job.train.dataset}'s training split (epoch {epoch + 1})",
                                        self.job.max_undecodable_fraction, "left out of the loss")
        for pixels, positions, errors in loader:
            valid = torch.tensor([not error for error in errors])
            for position, error in zip(positions.tolist(), errors):
                if error:
                    undecodable.add(images.describe(position), error)
            targets = self.labels[positions].to(self.processes.device, non_blocking=True)
            with torch.autocast(self.processes.device.type, dtype=torch.bfloat16, enabled=self.autocast):
                logits = self.model(self.normalised(pixels)).float()
            weights = valid.to(self.processes.device, non_blocking=True).float()
            losses = functional.cross_entropy(logits, targets, reduction="none",
                                              label_smoothing=self.recipe.label_smoothing) * weights
            counted = int(valid.sum())
            loss = losses.sum() / max(counted, 1)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            self.schedule.step()
            sums += torch.stack([losses.detach().sum(), ((logits.argmax(1) == targets).float() * weights).sum()])
            counts += torch.tensor([counted, len(errors) - counted])
        undecodable.check()
        totals = all_summed(torch.cat([sums.cpu(), counts]), self.processes)
        seconds = time.perf_counter() - started
        return {"epoch": epoch + 1, "loss": float(totals[0] / max(totals[2], 1)),
                "train_top1": float(100 * totals[1] / max(totals[2], 1)), "undecodable": int(totals[3]),
                "backbone_lr_end": self.optimizer.param_groups[0]["lr"], "seconds": round(seconds, 3),
                "images_per_s": round(float(totals[2] + totals[3]) / seconds, 2)}

    def state(self, epoch: int, history: list[dict], expected: str) -> dict:
        return {"fingerprint": expected, "epoch": epoch, "history": history, "network": self.network.state_dict(),
                "optimizer": self.optimizer.state_dict(), "schedule": self.schedule.state_dict(),
                "sampler": {"seed": self.job.seed, "next_epoch": epoch}}

    def restore(self, state: dict) -> None:
        self.network.load_state_dict(state["network"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])


def train_images(job: FinetuneJob, table_rows: list[dict], preprocessing) -> TrainImages:
    paths = [row["path"] for row in table_rows]
    return TrainImages(job.train.image_root, paths, preprocessing, split_reader(job.train, paths), job.recipe, job.seed)


def run_finetune(job: FinetuneJob) -> dict | None:
    """Fine-tune, test and write the result (the leading process); returns the result."""
    processes = start_processes(job.device)
    if job.threads and processes.device.type == "cpu":
        torch.set_num_threads(max(1, job.threads // processes.world))
    table_train = split_rows(job.train.split_table, "train")
    labels = labels_of(table_train, job.train.split_table)
    classes = int(labels.max()) + 1 if len(labels) else 0
    if len(labels) < job.recipe.batch_size:
        raise ValueError(f"{job.train.split_table}: {len(labels)} training images, fewer than one batch of "
                         f"finetune.recipe.batch_size {job.recipe.batch_size}; lower it.")
    loaded, network = prepared_network(job, classes, processes)
    trainer = Trainer(job, network, loaded, labels, processes)
    expected = fingerprint(job, loaded.weights_identity, table_train, processes)
    state = read_checkpoint(job.checkpoint, expected)
    history: list[dict] = state["history"] if state else []
    first = state["epoch"] if state else 0
    if state:
        trainer.restore(state)
        log.info("resuming from %s after epoch %d of %d", job.checkpoint, first, job.recipe.epochs)
    log.info("fine-tuning %s on %s: %d training images, %d classes, %d processes on %s, %d steps per epoch",
             job.spec.name, job.train.dataset, len(labels), classes, processes.world, processes.device, trainer.steps)
    images = train_images(job, table_train, loaded.preprocessing)
    for epoch in range(first, job.recipe.epochs):
        history.append(trainer.epoch(images, epoch))
        log.info("epoch %(epoch)d: loss %(loss).4f, train top-1 %(train_top1).2f, %(images_per_s).1f images/s",
                 history[-1])
        if processes.leader:
            write_checkpoint(job.checkpoint, trainer.state(epoch + 1, history, expected))
        if processes.world > 1:
            distributed.barrier()
    if processes.world > 1:
        # batch-norm statistics as the leader's checkpoint holds them (CPU processes keep their own)
        for buffer in network.buffers():
            distributed.broadcast(buffer, 0)
    tested = evaluate(job, trainer, processes, classes)
    result = finetune_result(job, loaded, trainer, classes, len(labels), history, tested, first)
    if processes.leader:
        write_json(job.output, result)
        job.checkpoint.unlink(missing_ok=True)
        remove_partial_writes(job.checkpoint)  # a checkpoint write a kill cut short
    if processes.world > 1:
        distributed.destroy_process_group()
    return result


def finetune_result(job: FinetuneJob, loaded, trainer: Trainer, classes: int, train_images_count: int,
                    history: list[dict], tested: dict, resumed_after: int) -> dict:
    return {
        "model": job.spec.name, "arch": job.spec.arch, "weights": loaded.weights_identity,
        "random_weights": loaded.random_weights, "dataset": job.train.dataset, "classes": classes,
        "train_images": train_images_count, **tested, "seed": job.seed, "recipe": job.recipe.to_json(),
        "processes": trainer.processes.world, "device": str(trainer.processes.device),
        "precision": "bfloat16-autocast" if trainer.autocast else "float32",
        "steps_per_epoch": trainer.steps, "history": history, "resumed_after_epoch": resumed_after,
        "train_seconds": round(sum(epoch["seconds"] for epoch in history), 3),
        "code_version": code_version(), "torch_version": str(torch.__version__), "versions": stack_versions(),
    }


def finetune_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog finetune", description=__doc__.split("\n\n")[0])
    add_image_arguments(parser)
    add_model_arguments(parser)
    parser.add_argument("--recipe", required=True, help="finetune.recipe as JSON")
    parser.add_argument("--seed", type=int, default=0)
    add_device_option(parser, "the network is fine-tuned and tested")
    parser.add_argument("--num-workers", type=int, default=0, help="loader processes of each training process")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--mixed-precision", choices=["true", "false"], default="true")
    parser.add_argument("--checkpoint", required=True, type=Path, help="the epoch checkpoint, resumed from if current")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    setup_logging()
    images = {split: SplitImages(args.split_table, args.image_root, args.dataset, split, args.image_layout,
                                 args.image_index) for split in ("train", "test")}
    job = FinetuneJob(model_spec_of(args), images["train"], images["test"], Recipe.from_config(json.loads(args.recipe)),
                      args.seed, args.checkpoint, args.output, args.device, args.num_workers, args.threads,
                      args.mixed_precision == "true", args.weights_identity)
    try:
        run_finetune(job)
    except UndecodableImagesError as error:
        log.error("%s", error)
        return 1
    return 0
