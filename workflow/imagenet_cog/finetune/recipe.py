"""The fine-tuning recipe (``finetune.recipe``): optimizer, learning rates, schedule, batch
normalisation and augmentation, with the defaults and their sources in docs/finetune.md.

The defaults follow the fine-tuning protocol of Kornblith, Shlens and Le ("Do Better ImageNet
Models Transfer Better?", CVPR 2019), as SimCLR's appendix B.5 restates it: SGD with Nesterov
momentum 0.9, batch size 256, batch-norm statistics with decay max(1 - 10/s, 0.9) for s steps
per epoch, random resized crops and flips only; with the common fine-tuning learning rate and
weight decay of ResNets (0.01, 1e-4) and ten times that rate for the new head.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

SCHEDULES = ("cosine", "constant")


@dataclass(frozen=True)
class Recipe:
    epochs: int = 4
    batch_size: int = 256  # over all processes of a job
    backbone_lr: float = 0.01
    head_lr: float = 0.1
    momentum: float = 0.9
    nesterov: bool = True
    weight_decay: float = 1e-4
    schedule: str = "cosine"
    warmup_epochs: float = 0.0
    label_smoothing: float = 0.0
    # None: the reference's rule, min(10 / steps per epoch, 0.1) in torch's convention
    bn_momentum: float | None = None
    crop_scale: tuple[float, float] = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    horizontal_flip: bool = True

    @classmethod
    def from_config(cls, entry: dict) -> "Recipe":
        values = dict(entry)
        for pair in ("crop_scale", "crop_ratio"):
            if pair in values:
                values[pair] = tuple(float(value) for value in values[pair])
        unknown = set(values) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"finetune.recipe: unknown settings {', '.join(sorted(unknown))}")
        recipe = cls(**values)
        if recipe.schedule not in SCHEDULES:
            raise ValueError(f"finetune.recipe.schedule '{recipe.schedule}': one of {', '.join(SCHEDULES)}")
        return recipe

    def to_json(self) -> dict:
        return asdict(self)

    def batch_norm_momentum(self, steps_per_epoch: int) -> float:
        """Torch's momentum of the running statistics (1 - the reference's decay)."""
        if self.bn_momentum is not None:
            return self.bn_momentum
        return min(10.0 / max(steps_per_epoch, 1), 0.1)

    def lr_factor(self, step: int, total_steps: int, steps_per_epoch: int) -> float:
        """The learning rates' multiplier at optimizer step ``step`` (0-based): a linear
        warm-up over ``warmup_epochs``, then the schedule down to zero at the last step."""
        warmup = round(self.warmup_epochs * steps_per_epoch)
        if step < warmup:
            return (step + 1) / warmup
        if self.schedule == "constant":
            return 1.0
        progress = (step - warmup) / max(total_steps - warmup, 1)
        return 0.5 * (1.0 + math.cos(math.pi * progress))


def parameter_groups(backbone, head, recipe: Recipe) -> list[dict]:
    """SGD's groups: the pretrained backbone at ``backbone_lr``, the new head at ``head_lr``,
    both with the recipe's weight decay (the torchvision reference decays every parameter)."""
    return [
        {"params": [p for p in backbone.parameters() if p.requires_grad], "lr": recipe.backbone_lr, "name": "backbone"},
        {"params": list(head.parameters()), "lr": recipe.head_lr, "name": "head"},
    ]
