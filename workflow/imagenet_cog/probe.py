"""Linear probes: logistic regression on frozen features, trained with SGD (paper Sec. 3.4.3).

A probe is one linear layer with bias and a softmax cross-entropy loss, trained on
L2-normalised features with mini-batch SGD (momentum, weight decay inside SGD like
``torch.optim.SGD``, a cosine learning rate set once per epoch, freshly shuffled batches
every epoch). The model is this small, so the gradient is written in closed form,
``dL/dlogits = softmax(logits) - onehot(y)``, and every step is a few in-place kernels and
two matrix products: no autograd graph, no optimizer objects, and no host synchronisation
inside an epoch.

Several (lr, weight decay) candidates can be trained in one pass (``len(lrs) > 1``): their
weight matrices are stacked so each mini-batch is gathered once and multiplied by all of
them in one larger matrix product. All candidates of one pass see the same batch order.

Divergence: after each epoch, a candidate whose weights stopped being finite (the loss of
some batch overflowed) is rolled back to its weights at the start of that epoch, frozen,
and marked diverged; it is then scored as it stands, as the protocol asks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SGDSchedule:
    epochs: int
    batch_size: int
    momentum: float

    def learning_rate_factor(self, epoch: int) -> float:
        """Cosine decay, set once per epoch: lr_e = lr * 0.5 * (1 + cos(pi * e / E)).

        This is the paper's formula for epoch e (0-based). The reference scripts update the
        rate after each epoch, so there epoch e trains with factor(e - 1) and the first two
        epochs both use the full rate: a one-epoch shift of the same schedule.
        """
        return 0.5 * (1.0 + math.cos(math.pi * epoch / self.epochs))


@dataclass
class LinearProbes:
    """``weight`` [T, C, D] and ``bias`` [T, C] of T probes; ``diverged`` [T] on the host."""

    weight: torch.Tensor
    bias: torch.Tensor
    diverged: list[bool]

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """Logits [n, T, C] of already normalised ``features`` [n, D]."""
        trials, classes, dim = self.weight.shape
        flat = torch.addmm(self.bias.reshape(-1), features.float(), self.weight.reshape(-1, dim).t())
        return flat.view(features.shape[0], trials, classes)

    def topk_accuracy(
        self, features: torch.Tensor, labels: torch.Tensor, ks: tuple[int, ...] = (1,), chunk: int = 8192
    ) -> torch.Tensor:
        """Top-k accuracy in percent, [T, len(ks)]; rows are scored in chunks to bound memory."""
        trials, classes, _ = self.weight.shape
        largest = min(max(ks), classes)
        hits = torch.zeros(trials, len(ks), dtype=torch.float64, device=self.weight.device)
        for start in range(0, features.shape[0], chunk):
            logits = self.logits(features[start : start + chunk])
            ranked = logits.topk(largest, dim=2).indices
            correct = ranked == labels[start : start + chunk].view(-1, 1, 1)
            for column, k in enumerate(ks):
                hits[:, column] += correct[:, :, : min(k, classes)].any(dim=2).sum(dim=0)
        return hits * (100.0 / max(1, features.shape[0]))


def l2_normalise(features: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit L2 norm (all-zero rows stay zero); float32 unless kept half on a GPU."""
    norms = torch.linalg.vector_norm(features.float(), dim=1, keepdim=True).clamp_min_(1e-12)
    return (features.float() / norms).to(features.dtype if features.is_cuda else torch.float32)


def train_probes(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    lrs: list[float],
    weight_decays: list[float],
    schedule: SGDSchedule,
    seed: int,
) -> LinearProbes:
    """Train one probe per (lr, weight decay) pair on normalised ``features`` [n, D].

    ``features`` and ``labels`` must already live on the device the probes train on.
    ``seed`` fixes the initial weights and the batch order shared by all candidates.
    """
    if len(lrs) != len(weight_decays) or not lrs:
        raise ValueError("train_probes needs one weight decay per learning rate")
    device = features.device
    count, dim = features.shape
    trials = len(lrs)
    generator = torch.Generator(device=device).manual_seed(seed)
    # nn.Linear's default initialisation, U(-1/sqrt(D), 1/sqrt(D)), as in the reference probe
    bound = 1.0 / math.sqrt(dim)
    weight = torch.rand(trials, num_classes, dim, generator=generator, device=device).mul_(2 * bound).sub_(bound)
    bias = torch.rand(trials, num_classes, generator=generator, device=device).mul_(2 * bound).sub_(bound)
    weight_velocity = torch.zeros_like(weight)
    bias_velocity = torch.zeros_like(bias)
    base_lr = torch.tensor(lrs, dtype=torch.float32, device=device)
    decay = torch.tensor(weight_decays, dtype=torch.float32, device=device)
    diverged = torch.zeros(trials, dtype=torch.bool, device=device)
    flat_weight = weight.view(trials * num_classes, dim)
    flat_bias = bias.view(-1)
    flat_weight_velocity = weight_velocity.view(trials * num_classes, dim)
    minus_one = torch.full((schedule.batch_size, trials, 1), -1.0, device=device)
    momentum = schedule.momentum
    # Batch-sized buffers are allocated once: a fresh multi-megabyte CPU tensor per step
    # costs page faults that take longer than the gather itself.
    gathered = torch.empty(schedule.batch_size, dim, dtype=features.dtype, device=device)
    widened = gathered if features.dtype == torch.float32 else torch.empty_like(gathered, dtype=torch.float32)
    logits = torch.empty(schedule.batch_size, trials * num_classes, device=device)
    weight_at_start = torch.empty_like(weight)
    bias_at_start = torch.empty_like(bias)

    for epoch in range(schedule.epochs):
        step = base_lr * schedule.learning_rate_factor(epoch)
        step_weight = step.view(trials, 1, 1)
        step_bias = step.view(trials, 1)
        weight_at_start.copy_(weight)
        bias_at_start.copy_(bias)
        order = torch.randperm(count, generator=generator, device=device)
        for start in range(0, count, schedule.batch_size):
            index = order[start : start + schedule.batch_size]
            size = index.shape[0]
            torch.index_select(features, 0, index, out=gathered[:size])
            batch = widened[:size]
            if widened is not gathered:
                batch.copy_(gathered[:size])
            targets = labels.index_select(0, index)
            # softmax(logits) - onehot(targets), computed in place in the logits buffer
            gradient = torch.addmm(flat_bias, batch, flat_weight.t(), out=logits[:size]).view(size, trials, num_classes)
            gradient.sub_(gradient.amax(dim=2, keepdim=True)).exp_()
            gradient.div_(gradient.sum(dim=2, keepdim=True))
            gradient.scatter_add_(2, targets.view(size, 1, 1).expand(size, trials, 1), minus_one[:size])
            gradient = gradient.view(size, trials * num_classes)
            # velocity = momentum * velocity + (mean gradient + weight_decay * parameter)
            weight_velocity.mul_(momentum).addcmul_(weight, decay.view(trials, 1, 1))
            flat_weight_velocity.addmm_(gradient.t(), batch, alpha=1.0 / size)
            bias_velocity.mul_(momentum).addcmul_(bias, decay.view(trials, 1))
            bias_velocity.view(-1).add_(gradient.sum(dim=0), alpha=1.0 / size)
            weight.addcmul_(weight_velocity, step_weight, value=-1.0)
            bias.addcmul_(bias_velocity, step_bias, value=-1.0)
        finite = torch.isfinite(weight).flatten(1).all(dim=1) & torch.isfinite(bias).all(dim=1)
        if bool(finite.all()):  # the one host synchronisation of an epoch
            continue
        # roll back and freeze: a zero step and velocity keep a frozen probe where it is
        keep = finite.view(trials, 1, 1)
        weight.copy_(torch.where(keep, weight, weight_at_start))
        bias.copy_(torch.where(keep.view(trials, 1), bias, bias_at_start))
        weight_velocity.copy_(torch.where(keep, weight_velocity, 0.0))
        bias_velocity.copy_(torch.where(keep.view(trials, 1), bias_velocity, 0.0))
        diverged |= ~finite
        base_lr.mul_(finite)
        decay.mul_(finite)
        if bool(diverged.all()):
            break
    return LinearProbes(weight=weight, bias=bias, diverged=diverged.tolist())


def resolve_device(requested: str) -> torch.device:
    """``auto`` is the GPU when there is one; ``cuda`` without a GPU is an error."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "probes.device is 'cuda' but PyTorch sees no GPU on this machine; "
            "set probes.device to 'auto' or 'cpu', or run the job on a GPU node."
        )
    return torch.device(requested)
