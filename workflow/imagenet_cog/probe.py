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

Precision: ``float32`` multiplies float32 operands (TF32 on a GPU when the caller allows
it). ``bfloat16`` multiplies bfloat16 copies of the batch, the weights and the logit
gradient (the products accumulate in float32 inside the kernel); everything else, the
softmax, the master weights, the momentum buffers and the scoring, stays float32. This is
the usual mixed-precision recipe; where the hardware multiplies bfloat16 natively (CPUs with
AVX512-BF16 or AMX, GPUs from Ampere on) it runs several times faster, and
``benchmarks/probe_benchmark.py`` measures that the accuracy is the same.

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


PRECISIONS = ("auto", "float32", "bfloat16")


def native_bfloat16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 matrices in hardware rather than emulating them."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    # torch.cpu exposes the CPU's instruction sets only through these underscored helpers
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return device.type == "cpu" and any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def resolve_precision(requested: str, device: torch.device) -> str:
    """``auto`` is bfloat16 where the device multiplies it natively, float32 elsewhere."""
    if requested not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {requested!r}")
    if requested == "auto":
        return "bfloat16" if native_bfloat16(device) else "float32"
    return requested


def operand_dtype(precision: str) -> torch.dtype:
    """The dtype the probes' matrix products multiply at a resolved ``precision``."""
    return torch.bfloat16 if precision == "bfloat16" else torch.float32


def feature_dtype(precision: str, device: torch.device, stored: torch.dtype) -> torch.dtype:
    """The dtype normalised features are kept in on the probe device.

    bfloat16 probes read bfloat16 batches; float32 probes keep half-precision files half on
    a GPU (memory is scarce there, batches are widened as they are gathered) and widen them
    once on a CPU (a per-batch conversion would cost as much as the product).
    """
    if precision == "bfloat16":
        return operand_dtype(precision)
    return stored if device.type == "cuda" and stored == torch.float16 else torch.float32


def l2_normalise(features: torch.Tensor, dtype: torch.dtype = torch.float32, chunk: int = 65536) -> torch.Tensor:
    """Rows scaled to unit L2 norm in float32 (all-zero rows stay zero), returned as ``dtype``.

    Rows are widened a chunk at a time, so a float16 feature set of IN-1K's size (4.5 GB)
    never needs a full float32 copy beside it on a 16 GB GPU.
    """
    normalised = torch.empty(features.shape, dtype=dtype, device=features.device)
    for start in range(0, features.shape[0], chunk):
        rows = features[start : start + chunk].to(torch.float32, copy=True)
        rows.div_(torch.linalg.vector_norm(rows, dim=1, keepdim=True).clamp_min_(1e-12))
        normalised[start : start + chunk] = rows
    return normalised


def train_probes(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    lrs: list[float],
    weight_decays: list[float],
    schedule: SGDSchedule,
    seed: int,
    precision: str = "float32",
    cuda_graph: bool | None = None,
    sample_major: bool | None = None,
) -> LinearProbes:
    """Train one probe per (lr, weight decay) pair on normalised ``features`` [n, D].

    ``features`` and ``labels`` must already live on the device the probes train on.
    ``seed`` fixes the initial weights and the batch order shared by all candidates.
    ``precision`` is ``float32`` or ``bfloat16``, the operands of the matrix products.
    ``cuda_graph`` (default: on a GPU) replays each epoch after the first as one CUDA graph;
    the arithmetic, and so the result, is the same as launching every kernel.
    ``sample_major`` (default: on a GPU) keeps logits as [batch, T * C] rather than
    [T * C, batch]: the same probe, summed in another order.
    """
    if len(lrs) != len(weight_decays) or not lrs:
        raise ValueError("train_probes needs one weight decay per learning rate")
    if precision not in ("float32", "bfloat16"):
        raise ValueError(f"train_probes multiplies in float32 or bfloat16, not {precision!r}")
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
    if sample_major is None:
        sample_major = device.type == "cuda"
    minus_one_shape = (schedule.batch_size, trials, 1) if sample_major else (trials, 1, schedule.batch_size)
    minus_one = torch.full(minus_one_shape, -1.0, device=device)
    momentum = schedule.momentum
    # Batch-sized buffers are allocated once: a fresh multi-megabyte CPU tensor per step
    # costs page faults that take longer than the gather itself.
    operand = operand_dtype(precision)
    gathered = torch.empty(schedule.batch_size, dim, dtype=features.dtype, device=device)
    converted = gathered if features.dtype == operand else torch.empty_like(gathered, dtype=operand)
    logits = torch.empty(trials * num_classes * schedule.batch_size, device=device)
    mixed = operand is not torch.float32
    if mixed:  # bfloat16 copies of the operands, and a float32 buffer for their product
        low_weight = torch.empty(trials * num_classes, dim, dtype=operand, device=device)
        low_logits = torch.empty_like(logits, dtype=operand)
        low_gradient = torch.empty_like(logits, dtype=operand)
        low_product = torch.empty_like(low_weight)
        widened_product = torch.empty_like(flat_weight)
    weight_at_start = torch.empty_like(weight)
    bias_at_start = torch.empty_like(bias)

    order = torch.empty(count, dtype=torch.long, device=device)
    step = torch.empty_like(base_lr)
    step_weight = step.view(trials, 1, 1)
    step_bias = step.view(trials, 1)

    def add_class_major_gradient(batch: torch.Tensor, targets: torch.Tensor, size: int) -> torch.Tensor:
        """Adds the mean weight gradient to the velocity; returns the summed bias gradient.

        Logits are [T * C, batch]: on a CPU both products then read contiguous operands.
        """
        shape = (trials * num_classes, size)
        gradient = logits[: shape[0] * size].view(shape)
        if mixed:
            low_weight.copy_(flat_weight)
            product = torch.mm(low_weight, batch.t(), out=low_logits[: shape[0] * size].view(shape))
            torch.add(product, flat_bias.view(-1, 1), out=gradient)
        else:
            torch.addmm(flat_bias.view(-1, 1), flat_weight, batch.t(), out=gradient)
        # softmax(logits) - onehot(targets), computed in place in the logits buffer
        per_trial = gradient.view(trials, num_classes, size)
        per_trial.sub_(per_trial.amax(dim=1, keepdim=True)).exp_()
        per_trial.div_(per_trial.sum(dim=1, keepdim=True))
        per_trial.scatter_add_(1, targets.view(1, 1, size).expand(trials, 1, size), minus_one[:, :, :size])
        if mixed:
            low = low_gradient[: shape[0] * size].view(shape).copy_(gradient)
            torch.mm(low, batch, out=low_product)
            # widened into a buffer of its own: a mixed-dtype add_ would allocate one
            flat_weight_velocity.add_(widened_product.copy_(low_product), alpha=1.0 / size)
        else:
            flat_weight_velocity.addmm_(gradient, batch, alpha=1.0 / size)
        return gradient.sum(dim=1)

    def add_sample_major_gradient(batch: torch.Tensor, targets: torch.Tensor, size: int) -> torch.Tensor:
        """As above with logits [batch, T * C]: on a GPU the softmax over each contiguous row is
        one fused kernel, where reductions across the rows of [T * C, batch] took the longest
        of a step (cuBLAS reads either layout at the same speed)."""
        shape = (size, trials * num_classes)
        row_logits = logits[: shape[0] * shape[1]].view(shape)
        if mixed:
            low_weight.copy_(flat_weight)
            product = torch.mm(batch, low_weight.t(), out=low_logits[: shape[0] * shape[1]].view(shape))
            torch.add(product, flat_bias, out=row_logits)
        else:
            torch.addmm(flat_bias, batch, flat_weight.t(), out=row_logits)
        probabilities = torch.softmax(row_logits.view(size, trials, num_classes), dim=2)
        probabilities.scatter_add_(2, targets.view(size, 1, 1).expand(size, trials, 1), minus_one[:size])
        gradient = probabilities.view(shape)
        if mixed:
            low = low_gradient[: shape[0] * shape[1]].view(shape).copy_(gradient)
            torch.mm(low.t(), batch, out=low_product)
            flat_weight_velocity.add_(widened_product.copy_(low_product), alpha=1.0 / size)
        else:
            flat_weight_velocity.addmm_(gradient.t(), batch, alpha=1.0 / size)
        return gradient.sum(dim=0)

    def train_epoch() -> None:
        """One pass over ``order`` with the rate in ``step``: device work only, no host sync."""
        for start in range(0, count, schedule.batch_size):
            index = order[start : start + schedule.batch_size]
            size = index.shape[0]
            torch.index_select(features, 0, index, out=gathered[:size])
            batch = converted[:size]
            if converted is not gathered:
                batch.copy_(gathered[:size])
            targets = labels.index_select(0, index)
            # velocity = momentum * velocity + (mean gradient + weight_decay * parameter)
            weight_velocity.mul_(momentum).addcmul_(weight, decay.view(trials, 1, 1))
            if sample_major:
                bias_gradient = add_sample_major_gradient(batch, targets, size)
            else:
                bias_gradient = add_class_major_gradient(batch, targets, size)
            bias_velocity.mul_(momentum).addcmul_(bias, decay.view(trials, 1))
            bias_velocity.view(-1).add_(bias_gradient, alpha=1.0 / size)
            weight.addcmul_(weight_velocity, step_weight, value=-1.0)
            bias.addcmul_(bias_velocity, step_bias, value=-1.0)

    if cuda_graph is None:
        cuda_graph = device.type == "cuda"
    epoch_graph = None
    for epoch in range(schedule.epochs):
        torch.mul(base_lr, schedule.learning_rate_factor(epoch), out=step)
        weight_at_start.copy_(weight)
        bias_at_start.copy_(bias)
        torch.randperm(count, generator=generator, device=device, out=order)
        if epoch_graph is not None:
            epoch_graph.replay()
        elif cuda_graph:
            # The first epoch runs eagerly on a side stream (it is the warm-up CUDA graphs
            # need), then the epoch is recorded once: every later epoch is one launch instead
            # of ~20 kernel launches per mini-batch, which on a large GPU cost more than the
            # products themselves. The graph reads order, step and the weights in place.
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                train_epoch()
            torch.cuda.current_stream(device).wait_stream(side)
            if epoch + 1 < schedule.epochs:
                epoch_graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(epoch_graph):
                    train_epoch()
        else:
            train_epoch()
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
