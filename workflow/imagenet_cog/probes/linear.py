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
import os
from dataclasses import dataclass
from functools import partial

import torch

from imagenet_cog.probes.fused_step import (
    FusedStepUnavailable,
    fused_available,
    fused_logit_gradient,
    fused_parameter_update,
)


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


# oneDNN instruction-set caps (ONEDNN_MAX_CPU_ISA) below AVX512_CORE_BF16: under them its
# bfloat16 products are emulated, however capable the CPU.
ONEDNN_ISAS_WITHOUT_BFLOAT16 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}


def native_bfloat16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 matrices in hardware rather than emulating them.

    On a CPU the kernels' caps count as well as the chip: ATEN_CPU_CAPABILITY=avx2 and
    ONEDNN_MAX_CPU_ISA=AVX2 make a bfloat16 CPU compute as one without it (docs/testing.md)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type != "cpu" or torch.backends.cpu.get_cpu_capability() != "AVX512":
        return False
    if os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper() in ONEDNN_ISAS_WITHOUT_BFLOAT16:
        return False
    # torch.cpu exposes the CPU's instruction sets only through these underscored helpers
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


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
    arguments = dict(
        features=features, labels=labels, num_classes=num_classes, rows=rows, lrs=lrs, weight_decays=weight_decays,
        schedule=schedule, seeds=seeds, precision=precision, cuda_graph=cuda_graph, sample_major=sample_major,
    )
    if fused and fused_available():
        try:
            return _train_probe_runs(**arguments, fused=True)
        except FusedStepUnavailable:
            pass  # logged and recorded by fused_step; the reference step starts afresh
    return _train_probe_runs(**arguments, fused=False)




def _check_runs(*, rows: torch.Tensor | None, lrs: list, weight_decays: list, seeds: list[int], precision: str) -> None:
    runs = len(seeds)
    if not runs or len(lrs) != runs or len(weight_decays) != runs:
        raise ValueError("train_probe_runs needs one list of learning rates and weight decays per seed")
    trials = len(lrs[0])
    if any(len(rates) != trials or len(decays) != trials for rates, decays in zip(lrs, weight_decays)) or not trials:
        raise ValueError("train_probe_runs needs one weight decay per learning rate, and as many candidates in every run")
    if rows is not None and rows.shape[0] != runs:
        raise ValueError(f"train_probe_runs got rows for {rows.shape[0]} runs and {runs} seeds")
    if precision not in ("float32", "bfloat16"):
        raise ValueError(f"train_probe_runs multiplies in float32 or bfloat16, not {precision!r}")


@dataclass
class FusedBuffers:
    """What the fused step (:mod:`imagenet_cog.probes.fused_step`) reads and writes besides
    :class:`ProbeBuffers`'s; at bfloat16 its operands are ProbeBuffers' bfloat16 buffers."""

    operand_weight: torch.Tensor  # [R, T * C, D] the weights the products read
    product: torch.Tensor  # the logits before the bias, batch-sized, in the operand dtype
    gradient: torch.Tensor  # the logit gradient, batch-sized, in the operand dtype
    weight_product: torch.Tensor  # [R, T * C, D] the weight gradient summed over the batch
    bias_gradient: torch.Tensor  # [R, T * C] the bias gradient summed over the batch
    scales: torch.Tensor  # 1 / batch size of a full and of the last batch, read by the compiled update


@dataclass
class ProbeBuffers:
    """Every tensor one :func:`train_probe_runs` pass works in, allocated once by :meth:`allocate`:
    a fresh multi-megabyte CPU tensor per step costs page faults that take longer than the
    gather itself. R runs, T candidates, C classes, D dimensions, n training rows per run."""

    runs: int
    trials: int
    classes: int
    dim: int
    count: int  # training rows per run (n)
    batch_size: int
    sample_major: bool  # logits [R, batch, T * C] rather than [R, T * C, batch]
    weight: torch.Tensor  # [R, T, C, D] float32, the master weights
    bias: torch.Tensor  # [R, T, C]
    weight_velocity: torch.Tensor  # momentum buffers, as the weights
    bias_velocity: torch.Tensor
    weight_at_start: torch.Tensor  # the weights at the start of the epoch, for a roll-back
    bias_at_start: torch.Tensor
    base_lr: torch.Tensor  # [R, T]; zeroed for a diverged candidate
    decay: torch.Tensor  # [R, T] weight decay; zeroed for a diverged candidate
    step: torch.Tensor  # [R, T] this epoch's learning rate
    diverged: torch.Tensor  # [R, T] bool
    order: torch.Tensor  # [R, n] this epoch's shuffle of each run's rows
    positions: torch.Tensor  # [R, n] the rows of ``features`` in that order (``order`` itself without rows)
    gathered: torch.Tensor  # [R * batch, D] the batch as stored
    operand_batch: torch.Tensor  # the batch in the products' dtype (``gathered`` itself when that is its dtype)
    logits: torch.Tensor  # float32, batch-sized: the logits, then in place their gradient
    minus_one: torch.Tensor  # -1 at each target, shaped for the logits' layout
    # bfloat16 precision only (None at float32): the products' operands and their float32 result
    low_weight: torch.Tensor | None = None
    low_logits: torch.Tensor | None = None
    low_gradient: torch.Tensor | None = None
    low_product: torch.Tensor | None = None
    widened_product: torch.Tensor | None = None
    fused: FusedBuffers | None = None  # the fused step only

    @property
    def stacked(self) -> int:
        return self.trials * self.classes

    @property
    def mixed(self) -> bool:
        return self.low_weight is not None

    @property
    def flat_weight(self) -> torch.Tensor:
        return self.weight.view(self.runs, self.stacked, self.dim)

    @property
    def flat_bias(self) -> torch.Tensor:
        return self.bias.view(self.runs, self.stacked)

    @property
    def flat_weight_velocity(self) -> torch.Tensor:
        return self.weight_velocity.view(self.runs, self.stacked, self.dim)

    @classmethod
    def allocate(
        cls, *, features: torch.Tensor, count: int, num_classes: int, lrs: list[list[float]],
        weight_decays: list[list[float]], generators: list[torch.Generator], batch_size: int, precision: str,
        sample_major: bool, fused: bool, rows: torch.Tensor | None,
    ) -> ProbeBuffers:
        """The buffers of R = ``len(generators)`` runs, the weights drawn from each run's generator."""
        device, dim = features.device, features.shape[1]
        runs, trials = len(generators), len(lrs[0])
        # nn.Linear's default initialisation, U(-1/sqrt(D), 1/sqrt(D)), as in the reference probe
        bound = 1.0 / math.sqrt(dim)
        weight = torch.empty(runs, trials, num_classes, dim, device=device)
        bias = torch.empty(runs, trials, num_classes, device=device)
        for run, generator in enumerate(generators):
            weight[run] = torch.rand(trials, num_classes, dim, generator=generator, device=device)
            bias[run] = torch.rand(trials, num_classes, generator=generator, device=device)
        weight.mul_(2 * bound).sub_(bound)
        bias.mul_(2 * bound).sub_(bound)
        base_lr = torch.tensor(lrs, dtype=torch.float32, device=device)
        minus_one_shape = (runs, batch_size, trials, 1) if sample_major else (runs, trials, 1, batch_size)
        operand = operand_dtype(precision)
        gathered = torch.empty(runs * batch_size, dim, dtype=features.dtype, device=device)
        logits = torch.empty(runs * trials * num_classes * batch_size, device=device)
        order = torch.empty(runs, count, dtype=torch.long, device=device)
        buffers = cls(
            runs=runs, trials=trials, classes=num_classes, dim=dim, count=count, batch_size=batch_size,
            sample_major=sample_major, weight=weight, bias=bias, weight_velocity=torch.zeros_like(weight),
            bias_velocity=torch.zeros_like(bias), weight_at_start=torch.empty_like(weight),
            bias_at_start=torch.empty_like(bias), base_lr=base_lr,
            decay=torch.tensor(weight_decays, dtype=torch.float32, device=device), step=torch.empty_like(base_lr),
            diverged=torch.zeros(runs, trials, dtype=torch.bool, device=device), order=order,
            positions=order if rows is None else torch.empty_like(order), gathered=gathered,
            operand_batch=gathered if features.dtype == operand else torch.empty_like(gathered, dtype=operand),
            logits=logits, minus_one=torch.full(minus_one_shape, -1.0, device=device),
        )
        if operand is not torch.float32:  # bfloat16 copies of the operands, and a float32 buffer for their product
            buffers.low_weight = torch.empty(runs, buffers.stacked, dim, dtype=operand, device=device)
            buffers.low_logits = torch.empty_like(logits, dtype=operand)
            buffers.low_gradient = torch.empty_like(logits, dtype=operand)
            buffers.low_product = torch.empty_like(buffers.low_weight)
            buffers.widened_product = torch.empty_like(buffers.flat_weight)
        if fused:
            buffers.fused = _fused_buffers(buffers)
        return buffers


def _fused_buffers(buffers: ProbeBuffers) -> FusedBuffers:
    mixed, device = buffers.mixed, buffers.weight.device
    batch_size = buffers.batch_size
    return FusedBuffers(
        # the products' operands: at bfloat16 the weights' copy, which each update refreshes
        operand_weight=buffers.low_weight if mixed else buffers.flat_weight,
        product=buffers.low_logits if mixed else buffers.logits,
        gradient=buffers.low_gradient if mixed else torch.empty_like(buffers.logits),
        weight_product=buffers.low_product if mixed else torch.empty_like(buffers.flat_weight),
        bias_gradient=torch.empty(buffers.runs, buffers.stacked, device=device),
        scales=torch.tensor([1.0 / batch_size, 1.0 / (buffers.count % batch_size or batch_size)], device=device),
    )


# [R, m, k] x [R, k, n]: one run multiplies as train_probes always has, several in one batched product


def _multiply(left: torch.Tensor, right: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    if left.shape[0] == 1:
        torch.mm(left[0], right[0], out=out[0])
    else:
        torch.bmm(left, right, out=out)
    return out


def _multiply_add(offset: torch.Tensor, left: torch.Tensor, right: torch.Tensor, out: torch.Tensor) -> None:
    if left.shape[0] == 1:
        torch.addmm(offset[0], left[0], right[0], out=out[0])
    else:
        torch.baddbmm(offset, left, right, out=out)


def _accumulate(total: torch.Tensor, left: torch.Tensor, right: torch.Tensor, alpha: float) -> None:
    if left.shape[0] == 1:
        total[0].addmm_(left[0], right[0], alpha=alpha)
    else:
        total.baddbmm_(left, right, alpha=alpha)


def _logits(buffers: ProbeBuffers, batch: torch.Tensor, size: int) -> torch.Tensor:
    """``bias + weight x batch`` in the logits buffer, [R, size, T * C] (sample-major) or
    [R, T * C, size]; at bfloat16 the product of bfloat16 copies, widened by the bias add."""
    b = buffers
    shape = (b.runs, size, b.stacked) if b.sample_major else (b.runs, b.stacked, size)
    logits = b.logits[: b.runs * b.stacked * size].view(shape)
    bias = b.flat_bias.view(b.runs, 1, b.stacked) if b.sample_major else b.flat_bias.view(b.runs, b.stacked, 1)
    if b.mixed:
        b.low_weight.copy_(b.flat_weight)
        if b.sample_major:
            product = _multiply(batch, b.low_weight.transpose(1, 2), b.low_logits[: b.runs * size * b.stacked].view(shape))
        else:
            product = _multiply(b.low_weight, batch.transpose(1, 2), b.low_logits[: b.runs * b.stacked * size].view(shape))
        torch.add(product, bias, out=logits)
    elif b.sample_major:
        _multiply_add(bias, batch, b.flat_weight.transpose(1, 2), logits)
    else:
        _multiply_add(bias, b.flat_weight, batch.transpose(1, 2), logits)
    return logits


def _add_weight_gradient(buffers: ProbeBuffers, gradient: torch.Tensor, batch: torch.Tensor, size: int) -> None:
    """Adds the mean weight gradient, ``gradient^T x batch / size``, to the velocity; ``gradient``
    is the logit gradient in the logits' layout. At bfloat16 the product multiplies bfloat16
    copies and is widened into a buffer of its own (a mixed-dtype add_ would allocate one)."""
    b = buffers
    if b.mixed:
        low = b.low_gradient[: gradient.numel()].view(gradient.shape).copy_(gradient)
        _multiply(low.transpose(1, 2) if b.sample_major else low, batch, b.low_product)
        b.flat_weight_velocity.add_(b.widened_product.copy_(b.low_product), alpha=1.0 / size)
    else:
        _accumulate(b.flat_weight_velocity, gradient.transpose(1, 2) if b.sample_major else gradient, batch, 1.0 / size)


def _class_major_gradient(buffers: ProbeBuffers, batch: torch.Tensor, targets: torch.Tensor, size: int) -> torch.Tensor:
    """Logits [R, T * C, batch] (on a CPU both products then read contiguous operands): adds
    the mean weight gradient to the velocity; returns the bias gradient summed over the batch."""
    b = buffers
    gradient = _logits(b, batch, size)
    # softmax(logits) - onehot(targets), computed in place in the logits buffer
    per_trial = gradient.view(b.runs, b.trials, b.classes, size)
    per_trial.sub_(per_trial.amax(dim=2, keepdim=True)).exp_()
    per_trial.div_(per_trial.sum(dim=2, keepdim=True))
    per_trial.scatter_add_(
        2, targets.view(b.runs, 1, 1, size).expand(b.runs, b.trials, 1, size), b.minus_one[..., :size]
    )
    _add_weight_gradient(b, gradient, batch, size)
    return gradient.sum(dim=2)


def _sample_major_gradient(buffers: ProbeBuffers, batch: torch.Tensor, targets: torch.Tensor, size: int) -> torch.Tensor:
    """As :func:`_class_major_gradient` with logits [R, batch, T * C]: on a GPU the softmax over
    each contiguous row is one fused kernel, where reductions across the rows of [T * C, batch]
    took the longest of a step (cuBLAS reads either layout at the same speed)."""
    b = buffers
    logits = _logits(b, batch, size)
    probabilities = torch.softmax(logits.view(b.runs, size, b.trials, b.classes), dim=3)
    probabilities.scatter_add_(
        3, targets.view(b.runs, size, 1, 1).expand(b.runs, size, b.trials, 1), b.minus_one[:, :size]
    )
    gradient = probabilities.view(b.runs, size, b.stacked)
    _add_weight_gradient(b, gradient, batch, size)
    return gradient.sum(dim=1)


def _reference_step(buffers: ProbeBuffers, batch: torch.Tensor, targets: torch.Tensor, size: int, momentum: float) -> None:
    """One SGD step as separate in-place kernels (the reference the fused step is tested against):
    velocity = momentum * velocity + (mean gradient + weight_decay * parameter), then
    parameter -= lr * velocity, for the weights and the bias."""
    b = buffers
    b.weight_velocity.mul_(momentum).addcmul_(b.weight, b.decay.view(b.runs, b.trials, 1, 1))
    gradient_of = _sample_major_gradient if b.sample_major else _class_major_gradient
    summed_bias_gradient = gradient_of(b, batch, targets, size)
    b.bias_velocity.mul_(momentum).addcmul_(b.bias, b.decay.view(b.runs, b.trials, 1))
    b.bias_velocity.view(b.runs, b.stacked).add_(summed_bias_gradient, alpha=1.0 / size)
    b.weight.addcmul_(b.weight_velocity, b.step.view(b.runs, b.trials, 1, 1), value=-1.0)
    b.bias.addcmul_(b.bias_velocity, b.step.view(b.runs, b.trials, 1), value=-1.0)


def _fused_step(buffers: ProbeBuffers, batch: torch.Tensor, targets: torch.Tensor, size: int, momentum: float) -> None:
    """The reference step with everything after each product in one compiled kernel."""
    b, f = buffers, buffers.fused
    shape = (b.runs, size, b.stacked) if b.sample_major else (b.runs, b.stacked, size)
    product = f.product[: b.runs * b.stacked * size].view(shape)
    gradient = f.gradient[: b.runs * b.stacked * size].view(shape)
    if b.sample_major:
        _multiply(batch, f.operand_weight.transpose(1, 2), product)
    else:
        _multiply(f.operand_weight, batch.transpose(1, 2), product)
    fused_logit_gradient(product, b.flat_bias, targets, gradient, f.bias_gradient, b.trials, b.classes, b.sample_major)
    _multiply(gradient.transpose(1, 2) if b.sample_major else gradient, batch, f.weight_product)
    fused_parameter_update(
        b.weight, b.weight_velocity, b.bias, b.bias_velocity, f.weight_product, f.bias_gradient, b.decay, b.step,
        f.scales[0 if size == b.batch_size else 1], momentum, b.low_weight if b.mixed else None,
    )


def _train_epoch(buffers: ProbeBuffers, *, features: torch.Tensor, labels: torch.Tensor, momentum: float) -> None:
    """One pass over ``positions`` with the rate in ``step``: device work only, no host sync."""
    b = buffers
    step = _reference_step if b.fused is None else _fused_step
    if b.fused is not None and b.mixed:
        b.low_weight.copy_(b.flat_weight)  # after a roll-back, too
    for start in range(0, b.count, b.batch_size):
        index = b.positions[:, start : start + b.batch_size].reshape(-1)
        size = index.shape[0] // b.runs
        torch.index_select(features, 0, index, out=b.gathered[: b.runs * size])
        batch = b.operand_batch[: b.runs * size]
        if b.operand_batch is not b.gathered:
            batch.copy_(b.gathered[: b.runs * size])
        batch = batch.view(b.runs, size, b.dim)
        targets = labels.index_select(0, index).view(b.runs, size)
        step(b, batch, targets, size, momentum)


def _roll_back_diverged(buffers: ProbeBuffers) -> bool:
    """After an epoch: candidates whose weights stopped being finite return to their weights at
    the start of the epoch and freeze (a zero step and velocity keep them there). Whether
    every candidate has diverged; the one host synchronisation of an epoch."""
    b = buffers
    finite = torch.isfinite(b.weight).flatten(2).all(dim=2) & torch.isfinite(b.bias).all(dim=2)
    if bool(finite.all()):
        return False
    keep = finite.view(b.runs, b.trials, 1, 1)
    b.weight.copy_(torch.where(keep, b.weight, b.weight_at_start))
    b.bias.copy_(torch.where(keep.view(b.runs, b.trials, 1), b.bias, b.bias_at_start))
    b.weight_velocity.copy_(torch.where(keep, b.weight_velocity, 0.0))
    b.bias_velocity.copy_(torch.where(keep.view(b.runs, b.trials, 1), b.bias_velocity, 0.0))
    b.diverged |= ~finite
    b.base_lr.mul_(finite)
    b.decay.mul_(finite)
    return bool(b.diverged.all())


def _train_epochs(
    buffers: ProbeBuffers, *, features: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor | None,
    generators: list[torch.Generator], schedule: SGDSchedule, cuda_graph: bool,
) -> None:
    """The epoch loop: the cosine rate, a fresh order of each run's rows, the epoch (on a GPU
    replayed as one CUDA graph after the first), the roll-back of diverged candidates."""
    b, device = buffers, features.device
    train_epoch = partial(_train_epoch, b, features=features, labels=labels, momentum=schedule.momentum)
    epoch_graph = None
    for epoch in range(schedule.epochs):
        torch.mul(b.base_lr, schedule.learning_rate_factor(epoch), out=b.step)
        b.weight_at_start.copy_(b.weight)
        b.bias_at_start.copy_(b.bias)
        for run, generator in enumerate(generators):
            torch.randperm(b.count, generator=generator, device=device, out=b.order[run])
        if rows is not None:
            torch.gather(rows, 1, b.order, out=b.positions)
        if epoch_graph is not None:
            epoch_graph.replay()
        elif cuda_graph:
            epoch_graph = _eager_then_recorded(train_epoch, device, record=epoch + 1 < schedule.epochs)
        else:
            train_epoch()
        if _roll_back_diverged(b):
            break


def _eager_then_recorded(train_epoch, device: torch.device, *, record: bool):
    """Runs the first epoch eagerly on a side stream (the warm-up CUDA graphs need), then, if
    ``record``, records the epoch once: every later epoch is one launch instead of ~20 kernel
    launches per mini-batch, which on a large GPU cost more than the products themselves. The
    graph reads positions, step and the weights in place."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        train_epoch()
    torch.cuda.current_stream(device).wait_stream(side)
    if not record:
        return None
    epoch_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(epoch_graph):
        train_epoch()
    return epoch_graph


def _train_probe_runs(
    *, features: torch.Tensor, labels: torch.Tensor, num_classes: int, rows: torch.Tensor | None,
    lrs: list[list[float]], weight_decays: list[list[float]], schedule: SGDSchedule, seeds: list[int], precision: str,
    cuda_graph: bool | None, sample_major: bool | None, fused: bool,
) -> list[LinearProbes]:
    """:func:`train_probe_runs` with the reference step, or the fused one (``fused``) where it builds."""
    _check_runs(rows=rows, lrs=lrs, weight_decays=weight_decays, seeds=seeds, precision=precision)
    device = features.device
    generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
    buffers = ProbeBuffers.allocate(
        features=features, count=features.shape[0] if rows is None else rows.shape[1], num_classes=num_classes,
        lrs=lrs, weight_decays=weight_decays, generators=generators, batch_size=schedule.batch_size,
        precision=precision, sample_major=device.type == "cuda" if sample_major is None else sample_major,
        fused=fused, rows=rows,
    )
    _train_epochs(
        buffers, features=features, labels=labels, rows=rows, generators=generators, schedule=schedule,
        cuda_graph=device.type == "cuda" if cuda_graph is None else cuda_graph,
    )
    return [
        LinearProbes(weight=buffers.weight[run], bias=buffers.bias[run], diverged=buffers.diverged[run].tolist())
        for run in range(buffers.runs)
    ]
