"""The fused SGD step of the linear probes (``probes.fused``): the same arithmetic, fewer passes.

A probe's step is bound by memory, not by its two matrix products. Written as separate
in-place kernels (:func:`imagenet_cog.probes.linear.train_probe_runs`, the reference), the update
after the products reads and writes the float32 weights and momentum in about six passes:
the momentum's decay, the bfloat16 copy of the weights for the next product, the widening
of the bfloat16 weight gradient, its addition to the momentum and the weight step, about
60 bytes per parameter and step, against 2 bytes per parameter for the products' own read
of the weights. At 1000 classes x 2048 dimensions and batch 1024 that is ~120 MB per step
against ~8.4 GFLOP, which on a GPU takes several times longer than the products.

Here the step after the products is two compiled functions (``torch.compile``: Triton
kernels on a GPU, C++ on a CPU):

* :func:`logit_gradient`: bias, softmax, minus the one-hot targets, the copy in the operand
  dtype for the weight-gradient product, and the bias gradient (one pass over the logits
  where the reference makes five);
* :func:`parameter_update`: momentum decay, weight decay, the gradient (widened), the
  momentum, the weight step and the operand copy of the new weights for the next step's
  product, weights and bias, in one pass: read weights, momentum and gradient, write
  weights, momentum and the copy, ~24 bytes per parameter.

The arithmetic is the reference's, operation for operation in float32 (weights and
momentum stay float32); only the rounding of a compiler's fused multiply-adds may differ,
so the fused step equals the reference to float tolerance, not bit for bit.
``tests/test_probes_fused_step.py`` trains both on the same problems and compares them.

Compiling takes seconds per process (less from the on-disk cache of a previous job): worth
it for a GPU job's millions of steps, not for a CPU demo probe's hundreds, hence
:func:`resolve_fused` (``auto`` fuses on a GPU). Where ``torch.compile`` cannot build
(no C++ compiler on a CPU node, an old Triton), :func:`train_probe_runs` falls back to the
reference step and the result JSON says so (:func:`step_description`).
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger("imagenet_cog.probes.fused_step")

FUSED_CHOICES = ("auto", "on", "off")
# Why the compiled step could not be used in this process (None: it could, or was not tried).
_unavailable: str | None = None


class FusedStepUnavailable(RuntimeError):
    """torch.compile could not build the fused step on this machine."""


def resolve_fused(requested: str, device: torch.device) -> bool:
    """``auto`` fuses on a GPU, where the step is memory-bound and a job's millions of steps
    repay the seconds of compiling; ``on`` and ``off`` force it."""
    if requested not in FUSED_CHOICES:
        raise ValueError(f"fused must be one of {', '.join(FUSED_CHOICES)}, not {requested!r}")
    if requested == "auto":
        return device.type == "cuda"
    return requested == "on"


def step_description(fused: bool) -> str:
    """What the result JSON records as the step its probes trained with."""
    if not fused:
        return "unfused"
    if _unavailable is not None:
        return f"unfused (fused step unavailable: {_unavailable})"
    return "fused"


def logit_gradient(
    product: torch.Tensor, bias: torch.Tensor, targets: torch.Tensor, gradient_out: torch.Tensor,
    bias_gradient_out: torch.Tensor, trials: int, classes: int, sample_major: bool,
) -> None:
    """``softmax(product + bias) - onehot(targets)`` into ``gradient_out`` (the dtype of the
    weight-gradient product's operands) and its sum over the batch into ``bias_gradient_out``.

    ``product``: [R, batch, T * C] (sample-major) or [R, T * C, batch], the logits before the
    bias; ``bias`` [R, T * C]; ``targets`` [R, batch]; ``bias_gradient_out`` [R, T * C].
    """
    runs = product.shape[0]
    if sample_major:
        size = product.shape[1]
        logits = product.float().view(runs, size, trials, classes) + bias.view(runs, 1, trials, classes)
        class_dim, batch_dim = 3, 1
        onehot = targets.view(runs, size, 1, 1) == torch.arange(classes, device=product.device)
    else:
        size = product.shape[2]
        logits = product.float().view(runs, trials, classes, size) + bias.view(runs, trials, classes, 1)
        class_dim, batch_dim = 2, 3
        onehot = targets.view(runs, 1, 1, size) == torch.arange(classes, device=product.device).view(classes, 1)
    # the reference's softmax: exp(x - max) / sum, then -1 added at each target
    shifted = (logits - logits.amax(dim=class_dim, keepdim=True)).exp()
    gradient = shifted / shifted.sum(dim=class_dim, keepdim=True)
    gradient = torch.where(onehot, gradient + -1.0, gradient)
    gradient_out.copy_(gradient.view(gradient_out.shape))
    bias_gradient_out.copy_(gradient.sum(dim=batch_dim).view(bias_gradient_out.shape))


def parameter_update(
    weight: torch.Tensor, velocity: torch.Tensor, bias: torch.Tensor, bias_velocity: torch.Tensor,
    weight_product: torch.Tensor, bias_gradient: torch.Tensor, decay: torch.Tensor, step: torch.Tensor,
    scale: torch.Tensor, momentum: float, operand_weight: torch.Tensor | None,
) -> None:
    """One SGD step with momentum and weight decay, as ``torch.optim.SGD`` orders it:
    ``v = momentum * v + (weight_decay * w + scale * gradient)``, ``w -= lr * v``.

    ``weight``/``velocity`` [R, T, C, D] float32, ``bias``/``bias_velocity`` [R, T, C];
    ``weight_product`` [R, T * C, D], the summed weight gradient (any float dtype: the
    bfloat16 product is widened here), ``bias_gradient`` [R, T * C]; ``decay`` and ``step``
    [R, T]; ``scale`` 1 / batch size (a tensor, so one compiled function serves the last,
    shorter batch too). ``operand_weight`` (or None): receives the new weights in its dtype,
    the next step's operand.
    """
    runs, trials = decay.shape
    per_weight = (runs, trials, 1, 1)
    new_velocity = (velocity * momentum + weight * decay.view(per_weight)) + weight_product.view(weight.shape).float() * scale
    new_weight = weight + -1.0 * new_velocity * step.view(per_weight)
    velocity.copy_(new_velocity)
    weight.copy_(new_weight)
    if operand_weight is not None:
        operand_weight.copy_(new_weight.view(operand_weight.shape))
    new_bias_velocity = (bias_velocity * momentum + bias * decay.view(runs, trials, 1)) + bias_gradient.view(bias.shape) * scale
    bias_velocity.copy_(new_bias_velocity)
    bias.copy_(bias + -1.0 * new_bias_velocity * step.view(runs, trials, 1))


# Bytes each step moves per parameter (P = runs x candidates x classes x dim), per logit
# (L = runs x batch x candidates x classes) and per batch value (X = runs x batch x dim),
# counted pass by pass from the code as it runs on a GPU (sample-major logits, features kept
# in the operand dtype for bfloat16, float16 widened per batch for float32), reads plus writes:
# the arithmetic behind "memory-bound" (benchmarks/README.md, "The fused probe step").
STEP_BYTES = {
    # (fused, precision): (per parameter, per logit, per batch value)
    # reference, bfloat16: decay 8 + 12, operand copy 6, products 2 + 2, widening 6, momentum 12,
    # weight step 12; logits: product 2, bias 6, softmax 8, operand copy 6, product 2, bias sum 4;
    # batch: gather 4, products 2 + 2
    (False, "bfloat16"): (60, 28, 8),
    # fused, bfloat16: products 2 + 2, update 20 (read w, v, gradient; write w, v, operand copy);
    # logits: product 2, softmax and bias sum 6, product 2; batch as above
    (True, "bfloat16"): (24, 10, 8),
    # reference, float32 (TF32): decay 8 + 12, product 4, momentum accumulated by the product 8,
    # weight step 12; logits: bias and product 12, softmax 8, product 4, bias sum 4; batch:
    # gather and widening 10, products 4 + 4
    (False, "float32"): (44, 28, 18),
    # fused, float32: products 4 + 4, update 20; logits: product 4, softmax and bias sum 12,
    # product 4; batch as above
    (True, "float32"): (28, 20, 18),
}


def step_bytes(runs: int, candidates: int, classes: int, dim: int, batch: int, precision: str, fused: bool) -> float:
    """Bytes one SGD step of ``train_probe_runs`` reads and writes (a model: see STEP_BYTES)."""
    per_parameter, per_logit, per_value = STEP_BYTES[(fused, precision)]
    parameters = runs * candidates * classes * dim
    return per_parameter * parameters + per_logit * runs * batch * candidates * classes + per_value * runs * batch * dim


_compiled: dict[str, object] = {}


def _compiled_function(function):
    name = function.__name__
    if name not in _compiled:
        _compiled[name] = torch.compile(function, fullgraph=True)
    return _compiled[name]


def _call(function, *arguments) -> None:
    """Run the compiled ``function``; a failure to compile it becomes FusedStepUnavailable."""
    global _unavailable
    compiled = _compiled_function(function)
    try:
        compiled(*arguments)
    except Exception as error:  # a compiler failure of any kind means: use the reference step
        if not _is_compile_failure(error):
            raise
        _unavailable = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]
        log.warning("fused probe step unavailable, training with the reference step: %s", _unavailable)
        raise FusedStepUnavailable(_unavailable) from error


def _is_compile_failure(error: Exception) -> bool:
    # the compiler's modules are imported only once something failed: a probe job that never
    # compiles (the reference step, every CPU demo probe) does not pay their seconds of import
    import torch._dynamo.exc as dynamo_errors

    kinds: tuple[type, ...] = (dynamo_errors.TorchDynamoException,)
    try:
        from torch._inductor.exc import InductorError

        kinds += (InductorError,)
    except ImportError:
        pass
    return isinstance(error, kinds)


def fused_available() -> bool:
    """False once compiling failed in this process (later probes use the reference step)."""
    return _unavailable is None


def fused_logit_gradient(*arguments) -> None:
    _call(logit_gradient, *arguments)


def fused_parameter_update(*arguments) -> None:
    _call(parameter_update, *arguments)
