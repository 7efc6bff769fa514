"""The processes of a fine-tuning job: one, or torchrun's (one per GPU of a node, or CPU
processes), and the sums they share."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
import torch.distributed as distributed

from imagenet_cog.core.device import resolve_device


@dataclass(frozen=True)
class Processes:
    """This process's place in a job: ``rank`` of ``world`` (1 without torchrun)."""

    rank: int = 0
    world: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def leader(self) -> bool:
        return self.rank == 0


def start_processes(device_setting: str) -> Processes:
    """One process, or torchrun's: then one GPU each (NCCL), or CPU processes (gloo)."""
    device = resolve_device(device_setting, "finetune.device")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Processes(device=device)
    local_rank = int(os.environ["LOCAL_RANK"])
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Processes(distributed.get_rank(), distributed.get_world_size(), device)


def all_summed(values: torch.Tensor, processes: Processes) -> torch.Tensor:
    """``values`` summed over the job's processes (as they are, in a single process)."""
    if processes.world == 1:
        return values
    on_device = values.to(processes.device)
    distributed.all_reduce(on_device)
    return on_device.cpu()
