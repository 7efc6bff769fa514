"""The fine-tuned network's top-1 and top-5 on a dataset's test split, its images preprocessed
as extraction preprocesses them (the model's evaluation transform), shared out among the
job's processes and counted together. Undecodable images (as many as
``data.max_undecodable_fraction`` allows) are counted and left out, as the probes leave out
their invalid feature rows."""

from __future__ import annotations

import logging
import time

import torch
import torch.utils.data

from imagenet_cog.core.undecodable import UndecodableImages
from imagenet_cog.features.extract import ImageRows, collate, split_reader, split_rows
from imagenet_cog.finetune.data import labels_of
from imagenet_cog.finetune.processes import all_summed

log = logging.getLogger("imagenet_cog.finetune.evaluation")


def test_images(job, preprocessing, rank: int, world: int) -> tuple[ImageRows, torch.Tensor]:
    """This process's share of the test rows, and their labels."""
    table_rows = split_rows(job.test.split_table, "test")[rank::world]
    paths = [row["path"] for row in table_rows]
    rows = ImageRows(job.test.image_root, paths, preprocessing, split_reader(job.test, paths))
    return rows, torch.from_numpy(labels_of(table_rows, job.test.split_table))


def evaluate(job, trainer, processes, classes: int) -> dict:
    """``top1``, ``top5`` (percent), ``test_images`` and ``test_undecodable`` of the whole
    test split; ``top5`` is top-``min(5, classes)``."""
    started = time.perf_counter()
    rows, labels = test_images(job, trainer.preprocessing, processes.rank, processes.world)
    loader = torch.utils.data.DataLoader(rows, batch_size=trainer.batch, num_workers=job.num_workers, collate_fn=collate,
                                         pin_memory=processes.device.type == "cuda")
    trainer.model.eval()
    counts = torch.zeros(4, dtype=torch.float64)  # top-1 correct, top-5 correct, counted, undecodable
    k = min(5, classes)
    undecodable = UndecodableImages(len(rows), f"{job.test.dataset}'s test split", job.max_undecodable_fraction,
                                    "left out of the test")
    with torch.inference_mode():
        for pixels, positions, errors in loader:
            valid = torch.tensor([not error for error in errors])
            for position, error in zip(positions.tolist(), errors):
                if error:
                    undecodable.add(rows.describe(position), error)
            with torch.autocast(processes.device.type, dtype=torch.bfloat16, enabled=trainer.autocast):
                logits = trainer.network(trainer.normalised(pixels)).float().cpu()
            ranked = logits[valid].topk(k, dim=1).indices
            targets = labels[positions][valid]
            counts += torch.tensor([float((ranked[:, 0] == targets).sum()),
                                    float((ranked == targets[:, None]).any(1).sum()), float(valid.sum()),
                                    float((~valid).sum())])
    undecodable.check()
    counts = all_summed(counts, processes)
    counted = max(float(counts[2]), 1.0)
    return {"top1": 100 * float(counts[0]) / counted, "top5": 100 * float(counts[1]) / counted,
            "test_images": int(counts[2]), "test_undecodable": int(counts[3]),
            "eval_seconds": round(time.perf_counter() - started, 3)}
