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
        self,
        features: torch.Tensor,
        labels: torch.Tensor,
        ks: tuple[int, ...] = (1,),
        chunk: int = 8192,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Top-k accuracy in percent, [T, len(ks)], over ``rows`` (all when None)."""
        return topk_accuracy(self.logits, self.weight.shape[:2], features, labels, ks, chunk, rows)


def topk_accuracy(
    logits, shape: torch.Size, features: torch.Tensor, labels: torch.Tensor, ks: tuple[int, ...], chunk: int,
    rows: torch.Tensor | None,
) -> torch.Tensor:
    """Top-k accuracy in percent, [T, len(ks)], of ``logits(features) -> [n, T, C]`` over the
    rows ``rows`` of ``features`` (all when None), scored in chunks to bound memory; ``shape``
    is (T, C)."""
    trials, num_classes = shape
    largest = min(max(ks), num_classes)
    count = features.shape[0] if rows is None else rows.numel()
    hits = torch.zeros(trials, len(ks), dtype=torch.float64, device=features.device)
    for start in range(0, count, chunk):
        if rows is None:
            chunk_features, chunk_labels = features[start : start + chunk], labels[start : start + chunk]
        else:
            index = rows[start : start + chunk]
            chunk_features, chunk_labels = features.index_select(0, index), labels.index_select(0, index)
        ranked = logits(chunk_features).topk(largest, dim=2).indices
        correct = ranked == chunk_labels.view(-1, 1, 1)
        for column, k in enumerate(ks):
            hits[:, column] += correct[:, :, : min(k, num_classes)].any(dim=2).sum(dim=0)
    return hits * (100.0 / max(1, count))


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
    fused: bool = False,
) -> LinearProbes:
    """Train one probe per (lr, weight decay) pair on normalised ``features`` [n, D].

    ``features`` and ``labels`` must already live on the device the probes train on.
    ``seed`` fixes the initial weights and the batch order shared by all candidates.
    ``precision`` is ``float32`` or ``bfloat16``, the operands of the matrix products.
    ``cuda_graph`` (default: on a GPU) replays each epoch after the first as one CUDA graph;
    the arithmetic, and so the result, is the same as launching every kernel.
    ``sample_major`` (default: on a GPU) keeps logits as [batch, T * C] rather than
    [T * C, batch]: the same probe, summed in another order.
    ``fused``: the step after the products compiled into two kernels
    (:mod:`imagenet_cog.probes.fused_step`), the same arithmetic to float tolerance.
    """
    return train_probe_runs(
        features, labels, num_classes, None, [lrs], [weight_decays], schedule, [seed], precision, cuda_graph, sample_major,
        fused,
    )[0]


def train_probe_runs(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    rows: torch.Tensor | None,
    lrs: list[list[float]],
    weight_decays: list[list[float]],
    schedule: SGDSchedule,
    seeds: list[int],
    precision: str = "float32",
    cuda_graph: bool | None = None,
    sample_major: bool | None = None,
    fused: bool = False,
) -> list[LinearProbes]:
    """Train R independent runs in one pass; run r is exactly ``train_probes`` on the rows
    ``rows[r]`` of ``features`` with ``lrs[r]``, ``weight_decays[r]`` and ``seeds[r]``.

    ``rows`` [R, n] (on the device; None: every run trains on all rows) gives each run its
    own training rows, n of them for every run. Each run draws its initial weights and batch
    orders from its own seed, as ``train_probes`` would, so only the grouping of the matrix
    products changes (batched products for R > 1), and with it the last bits. Every run
    trains the same number of candidates. The seeds of a few-shot dataset, or the final fits
    of its seeds, then share each mini-batch step: R products of one shape in one kernel.

    ``fused``: the fused step (:mod:`imagenet_cog.probes.fused_step`) where torch.compile builds it,
    else (and after it once failed to build in this process) the reference step.
    """
    from imagenet_cog.probes.fused_step import FusedStepUnavailable, fused_available

    arguments = (features, labels, num_classes, rows, lrs, weight_decays, schedule, seeds, precision, cuda_graph, sample_major)
    if fused and fused_available():
        try:
            return _train_probe_runs(*arguments, fused=True)
        except FusedStepUnavailable:
            pass  # logged and recorded by fused_step; the reference step starts afresh
    return _train_probe_runs(*arguments, fused=False)


def _train_probe_runs(
    features, labels, num_classes, rows, lrs, weight_decays, schedule, seeds, precision, cuda_graph, sample_major, fused
) -> list[LinearProbes]:
    runs = len(seeds)
    if not runs or len(lrs) != runs or len(weight_decays) != runs:
        raise ValueError("train_probe_runs needs one list of learning rates and weight decays per seed")
    trials = len(lrs[0])
    if any(len(rates) != trials or len(decays) != trials for rates, decays in zip(lrs, weight_decays)) or not trials:
        raise ValueError("train_probe_runs needs one weight decay per learning rate, and as many candidates in every run")
    if rows is not None and rows.shape[0] != runs:
        raise ValueError(f"train_probe_runs got rows for {rows.shape[0]} runs and {runs} seeds")
    if precision not in ("float32", "bfloat16"):
        raise ValueError(f"train_probes multiplies in float32 or bfloat16, not {precision!r}")
    device = features.device
    dim = features.shape[1]
    count = features.shape[0] if rows is None else rows.shape[1]
    generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
    # nn.Linear's default initialisation, U(-1/sqrt(D), 1/sqrt(D)), as in the reference probe
    bound = 1.0 / math.sqrt(dim)
    weight = torch.empty(runs, trials, num_classes, dim, device=device)
    bias = torch.empty(runs, trials, num_classes, device=device)
    for run, generator in enumerate(generators):
        weight[run] = torch.rand(trials, num_classes, dim, generator=generator, device=device)
        bias[run] = torch.rand(trials, num_classes, generator=generator, device=device)
    weight.mul_(2 * bound).sub_(bound)
    bias.mul_(2 * bound).sub_(bound)
    weight_velocity = torch.zeros_like(weight)
    bias_velocity = torch.zeros_like(bias)
    base_lr = torch.tensor(lrs, dtype=torch.float32, device=device)
    decay = torch.tensor(weight_decays, dtype=torch.float32, device=device)
    diverged = torch.zeros(runs, trials, dtype=torch.bool, device=device)
    stacked = trials * num_classes
    flat_weight = weight.view(runs, stacked, dim)
    flat_bias = bias.view(runs, stacked)
    flat_weight_velocity = weight_velocity.view(runs, stacked, dim)
    if sample_major is None:
        sample_major = device.type == "cuda"
    batch_size = schedule.batch_size
    minus_one_shape = (runs, batch_size, trials, 1) if sample_major else (runs, trials, 1, batch_size)
    minus_one = torch.full(minus_one_shape, -1.0, device=device)
    momentum = schedule.momentum
    # Batch-sized buffers are allocated once: a fresh multi-megabyte CPU tensor per step
    # costs page faults that take longer than the gather itself.
    operand = operand_dtype(precision)
    gathered = torch.empty(runs * batch_size, dim, dtype=features.dtype, device=device)
    converted = gathered if features.dtype == operand else torch.empty_like(gathered, dtype=operand)
    logits = torch.empty(runs * stacked * batch_size, device=device)
    mixed = operand is not torch.float32
    if mixed:  # bfloat16 copies of the operands, and a float32 buffer for their product
        low_weight = torch.empty(runs, stacked, dim, dtype=operand, device=device)
        low_logits = torch.empty_like(logits, dtype=operand)
        low_gradient = torch.empty_like(logits, dtype=operand)
        low_product = torch.empty_like(low_weight)
        widened_product = torch.empty_like(flat_weight)
    weight_at_start = torch.empty_like(weight)
    bias_at_start = torch.empty_like(bias)

    order = torch.empty(runs, count, dtype=torch.long, device=device)
    positions = order if rows is None else torch.empty_like(order)
    step = torch.empty_like(base_lr)
    step_weight = step.view(runs, trials, 1, 1)
    step_bias = step.view(runs, trials, 1)

    # [R, m, k] x [R, k, n]: one run multiplies as train_probes always has, several in one
    # batched product
    def multiply(left: torch.Tensor, right: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        if runs == 1:
            torch.mm(left[0], right[0], out=out[0])
        else:
            torch.bmm(left, right, out=out)
        return out

    def multiply_add(offset: torch.Tensor, left: torch.Tensor, right: torch.Tensor, out: torch.Tensor) -> None:
        if runs == 1:
            torch.addmm(offset[0], left[0], right[0], out=out[0])
        else:
            torch.baddbmm(offset, left, right, out=out)

    def accumulate(total: torch.Tensor, left: torch.Tensor, right: torch.Tensor, alpha: float) -> None:
        if runs == 1:
            total[0].addmm_(left[0], right[0], alpha=alpha)
        else:
            total.baddbmm_(left, right, alpha=alpha)

    def add_class_major_gradient(batch: torch.Tensor, targets: torch.Tensor, size: int) -> torch.Tensor:
        """Adds the mean weight gradient to the velocity; returns the summed bias gradient.

        Logits are [R, T * C, batch]: on a CPU both products then read contiguous operands.
        """
        shape = (runs, stacked, size)
        gradient = logits[: runs * stacked * size].view(shape)
        if mixed:
            low_weight.copy_(flat_weight)
            product = multiply(low_weight, batch.transpose(1, 2), low_logits[: runs * stacked * size].view(shape))
            torch.add(product, flat_bias.view(runs, stacked, 1), out=gradient)
        else:
            multiply_add(flat_bias.view(runs, stacked, 1), flat_weight, batch.transpose(1, 2), gradient)
        # softmax(logits) - onehot(targets), computed in place in the logits buffer
        per_trial = gradient.view(runs, trials, num_classes, size)
        per_trial.sub_(per_trial.amax(dim=2, keepdim=True)).exp_()
        per_trial.div_(per_trial.sum(dim=2, keepdim=True))
        per_trial.scatter_add_(
            2, targets.view(runs, 1, 1, size).expand(runs, trials, 1, size), minus_one[..., :size]
        )
        if mixed:
            low = low_gradient[: runs * stacked * size].view(shape).copy_(gradient)
            multiply(low, batch, low_product)
            # widened into a buffer of its own: a mixed-dtype add_ would allocate one
            flat_weight_velocity.add_(widened_product.copy_(low_product), alpha=1.0 / size)
        else:
            accumulate(flat_weight_velocity, gradient, batch, 1.0 / size)
        return gradient.sum(dim=2)

    def add_sample_major_gradient(batch: torch.Tensor, targets: torch.Tensor, size: int) -> torch.Tensor:
        """As above with logits [R, batch, T * C]: on a GPU the softmax over each contiguous row
        is one fused kernel, where reductions across the rows of [T * C, batch] took the
        longest of a step (cuBLAS reads either layout at the same speed)."""
        shape = (runs, size, stacked)
        row_logits = logits[: runs * size * stacked].view(shape)
        if mixed:
            low_weight.copy_(flat_weight)
            product = multiply(batch, low_weight.transpose(1, 2), low_logits[: runs * size * stacked].view(shape))
            torch.add(product, flat_bias.view(runs, 1, stacked), out=row_logits)
        else:
            multiply_add(flat_bias.view(runs, 1, stacked), batch, flat_weight.transpose(1, 2), row_logits)
        probabilities = torch.softmax(row_logits.view(runs, size, trials, num_classes), dim=3)
        probabilities.scatter_add_(
            3, targets.view(runs, size, 1, 1).expand(runs, size, trials, 1), minus_one[:, :size]
        )
        gradient = probabilities.view(shape)
        if mixed:
            low = low_gradient[: runs * size * stacked].view(shape).copy_(gradient)
            multiply(low.transpose(1, 2), batch, low_product)
            flat_weight_velocity.add_(widened_product.copy_(low_product), alpha=1.0 / size)
        else:
            accumulate(flat_weight_velocity, gradient.transpose(1, 2), batch, 1.0 / size)
        return gradient.sum(dim=1)

    if fused:
        from imagenet_cog.probes.fused_step import fused_logit_gradient, fused_parameter_update

        # the products' operands: the weights' bfloat16 copy, which each update refreshes
        operand_weight = low_weight if mixed else flat_weight
        product_buffer = low_logits if mixed else logits
        gradient_buffer = low_gradient if mixed else torch.empty_like(logits)
        weight_product = low_product if mixed else torch.empty_like(flat_weight)
        bias_gradient = torch.empty(runs, stacked, device=device)
        # 1 / batch size of a full and of the last batch, as tensors the compiled update reads
        scales = torch.tensor([1.0 / batch_size, 1.0 / (count % batch_size or batch_size)], device=device)

    def fused_step(batch: torch.Tensor, targets: torch.Tensor, size: int) -> None:
        """The step of train_epoch with everything after each product in one compiled kernel."""
        shape = (runs, size, stacked) if sample_major else (runs, stacked, size)
        product = product_buffer[: runs * stacked * size].view(shape)
        gradient = gradient_buffer[: runs * stacked * size].view(shape)
        if sample_major:
            multiply(batch, operand_weight.transpose(1, 2), product)
        else:
            multiply(operand_weight, batch.transpose(1, 2), product)
        fused_logit_gradient(product, flat_bias, targets, gradient, bias_gradient, trials, num_classes, sample_major)
        multiply(gradient.transpose(1, 2) if sample_major else gradient, batch, weight_product)
        fused_parameter_update(
            weight, weight_velocity, bias, bias_velocity, weight_product, bias_gradient, decay, step,
            scales[0 if size == batch_size else 1], momentum, low_weight if mixed else None,
        )

    def train_epoch() -> None:
        """One pass over ``positions`` with the rate in ``step``: device work only, no host sync."""
        if fused and mixed:
            low_weight.copy_(flat_weight)  # after a roll-back, too
        for start in range(0, count, batch_size):
            index = positions[:, start : start + batch_size].reshape(-1)
            size = index.shape[0] // runs
            torch.index_select(features, 0, index, out=gathered[: runs * size])
            batch = converted[: runs * size]
            if converted is not gathered:
                batch.copy_(gathered[: runs * size])
            batch = batch.view(runs, size, dim)
            targets = labels.index_select(0, index).view(runs, size)
            if fused:
                fused_step(batch, targets, size)
                continue
            # velocity = momentum * velocity + (mean gradient + weight_decay * parameter)
            weight_velocity.mul_(momentum).addcmul_(weight, decay.view(runs, trials, 1, 1))
            if sample_major:
                bias_gradient = add_sample_major_gradient(batch, targets, size)
            else:
                bias_gradient = add_class_major_gradient(batch, targets, size)
            bias_velocity.mul_(momentum).addcmul_(bias, decay.view(runs, trials, 1))
            flat_bias_velocity = bias_velocity.view(runs, stacked)
            flat_bias_velocity.add_(bias_gradient, alpha=1.0 / size)
            weight.addcmul_(weight_velocity, step_weight, value=-1.0)
            bias.addcmul_(bias_velocity, step_bias, value=-1.0)

    if cuda_graph is None:
        cuda_graph = device.type == "cuda"
    epoch_graph = None
    for epoch in range(schedule.epochs):
        torch.mul(base_lr, schedule.learning_rate_factor(epoch), out=step)
        weight_at_start.copy_(weight)
        bias_at_start.copy_(bias)
        for run, generator in enumerate(generators):
            torch.randperm(count, generator=generator, device=device, out=order[run])
        if rows is not None:
            torch.gather(rows, 1, order, out=positions)
        if epoch_graph is not None:
            epoch_graph.replay()
        elif cuda_graph:
            # The first epoch runs eagerly on a side stream (it is the warm-up CUDA graphs
            # need), then the epoch is recorded once: every later epoch is one launch instead
            # of ~20 kernel launches per mini-batch, which on a large GPU cost more than the
            # products themselves. The graph reads positions, step and the weights in place.
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
        finite = torch.isfinite(weight).flatten(2).all(dim=2) & torch.isfinite(bias).all(dim=2)
        if bool(finite.all()):  # the one host synchronisation of an epoch
            continue
        # roll back and freeze: a zero step and velocity keep a frozen probe where it is
        keep = finite.view(runs, trials, 1, 1)
        weight.copy_(torch.where(keep, weight, weight_at_start))
        bias.copy_(torch.where(keep.view(runs, trials, 1), bias, bias_at_start))
        weight_velocity.copy_(torch.where(keep, weight_velocity, 0.0))
        bias_velocity.copy_(torch.where(keep.view(runs, trials, 1), bias_velocity, 0.0))
        diverged |= ~finite
        base_lr.mul_(finite)
        decay.mul_(finite)
        if bool(diverged.all()):
            break
    return [LinearProbes(weight=weight[run], bias=bias[run], diverged=diverged[run].tolist()) for run in range(runs)]
