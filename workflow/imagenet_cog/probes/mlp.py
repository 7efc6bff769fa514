"""MLP probes on frozen features (CoG preprint supp. C.3): L hidden layers, ReLU or none.

The CoG preprint is the first version of "Concept Generalization in Visual Representation
Learning" (arXiv v1, 2020); its MLP and PCA analyses are not in the ICCV 2021 paper.

``mlp`` is ``hidden_layers`` fully connected layers of ``hidden_width`` units with ReLU and
an output layer to the classes; ``mlp_noact`` is the same network with the identity in place
of ReLU (a linear map of lower rank, fitted by a deeper, differently conditioned
optimisation). Inputs are the raw features, not L2-normalised (preprint C.3).

Training is the linear probe's (imagenet_cog.probes.linear): softmax cross-entropy, mini-batch SGD
with momentum and weight decay inside SGD as ``torch.optim.SGD`` applies them, the cosine
rate set once per epoch, fresh batch order each epoch, nn.Linear's initialisation. The
backward pass is written out (three or so batched matrix products per layer), so a step is
a fixed sequence of kernels with no autograd graph and no host synchronisation; the one
synchronisation of an epoch is the divergence check, as for the linear probe.

Several candidates train in one pass: the weights of T candidates are stacked,
[T, out, in], the first layer multiplies the shared batch by all T at once and the deeper
layers use batched products (``torch.bmm``). Activations are kept transposed, [T, units,
batch], so every product reads contiguous operands.

Precision follows the linear probe's mixed recipe: at ``bfloat16`` the matrix products read
bfloat16 copies of the weights, activations and gradients; master weights, momentum, the
softmax and the scoring stay float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

import torch

from imagenet_cog.probes.linear import SGDSchedule, operand_dtype, topk_accuracy


@dataclass
class MLPProbes:
    """T stacked MLPs: ``weights[l]`` [T, out, in], ``biases[l]`` [T, out]; ``diverged`` [T] on the host."""

    weights: list[torch.Tensor]
    biases: list[torch.Tensor]
    relu: bool
    diverged: list[bool]

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """Logits [n, T, C] of raw ``features`` [n, D], in float32."""
        trials = self.weights[0].shape[0]
        first = self.weights[0]
        hidden = torch.addmm(
            self.biases[0].reshape(-1, 1), first.reshape(-1, first.shape[2]), features.float().t()
        ).view(trials, first.shape[1], -1)
        for weight, bias in zip(self.weights[1:], self.biases[1:]):
            if self.relu:
                hidden.clamp_(min=0)
            hidden = torch.baddbmm(bias.unsqueeze(2), weight, hidden)
        return hidden.permute(2, 0, 1)

    def topk_accuracy(
        self,
        features: torch.Tensor,
        labels: torch.Tensor,
        ks: tuple[int, ...] = (1,),
        chunk: int = 4096,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Top-k accuracy in percent, [T, len(ks)], over ``rows`` (all when None)."""
        return topk_accuracy(self.logits, (self.weights[0].shape[0], self.weights[-1].shape[1]), features, labels, ks, chunk, rows)


def train_mlps(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    lrs: list[float],
    weight_decays: list[float],
    schedule: SGDSchedule,
    seed: int,
    precision: str = "float32",
    hidden_width: int = 2048,
    hidden_layers: int = 2,
    relu: bool = True,
) -> MLPProbes:
    """Train one MLP per (lr, weight decay) pair on raw ``features`` [n, D] on their device."""
    if len(lrs) != len(weight_decays) or not lrs:
        raise ValueError("train_mlps needs one weight decay per learning rate")
    if precision not in ("float32", "bfloat16"):
        raise ValueError(f"train_mlps multiplies in float32 or bfloat16, not {precision!r}")
    device = features.device
    count, dim = features.shape
    generator = torch.Generator(device=device).manual_seed(seed)
    widths = [dim] + [hidden_width] * hidden_layers + [num_classes]
    weights, biases = _initial_layers(widths, trials=len(lrs), generator=generator)
    parameters = weights + biases
    velocities = [torch.zeros_like(p) for p in parameters]
    at_start = [torch.empty_like(p) for p in parameters]
    base_lr = torch.tensor(lrs, dtype=torch.float32, device=device)
    decay = torch.tensor(weight_decays, dtype=torch.float32, device=device)
    diverged = torch.zeros(len(lrs), dtype=torch.bool, device=device)
    operand = operand_dtype(precision)
    for epoch in range(schedule.epochs):
        step = base_lr * schedule.learning_rate_factor(epoch)
        for saved, parameter in zip(at_start, parameters):
            saved.copy_(parameter)
        order = torch.randperm(count, generator=generator, device=device)
        for start in range(0, count, schedule.batch_size):
            index = order[start : start + schedule.batch_size]
            # features may be kept float16 on a GPU (imagenet_cog.probes.linear.feature_dtype)
            batch = features.index_select(0, index).to(operand)
            gradients = _gradients(weights, biases, batch, labels.index_select(0, index), relu=relu, operand=operand)
            for parameter, velocity, grad in zip(parameters, velocities, gradients):
                velocity.mul_(schedule.momentum).add_(grad).addcmul_(parameter, _per_trial(parameter, decay))
                parameter.addcmul_(velocity, _per_trial(parameter, step), value=-1.0)
        finite = torch.stack([torch.isfinite(p).flatten(1).all(dim=1) for p in parameters]).all(dim=0)
        if bool(finite.all()):  # the one host synchronisation of an epoch
            continue
        for parameter, velocity, saved in zip(parameters, velocities, at_start):
            keep = _per_trial(parameter, finite)
            parameter.copy_(torch.where(keep, parameter, saved))
            velocity.copy_(torch.where(keep, velocity, 0.0))
        diverged |= ~finite
        base_lr.mul_(finite)
        decay.mul_(finite)
        if bool(diverged.all()):
            break
    return MLPProbes(weights=weights, biases=biases, relu=relu, diverged=diverged.tolist())


def _initial_layers(widths: list[int], *, trials: int, generator: torch.Generator) -> tuple[list, list]:
    """Weights [T, out, in] and biases [T, out] of each layer, nn.Linear's default initialisation."""
    weights, biases = [], []
    device = generator.device
    for fan_in, fan_out in pairwise(widths):
        bound = 1.0 / math.sqrt(fan_in)
        weights.append(torch.rand(trials, fan_out, fan_in, generator=generator, device=device).mul_(2 * bound).sub_(bound))
        biases.append(torch.rand(trials, fan_out, generator=generator, device=device).mul_(2 * bound).sub_(bound))
    return weights, biases


def _per_trial(tensor: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``values`` [T] shaped to scale each candidate's slice of ``tensor``."""
    return values.view(-1, *([1] * (tensor.dim() - 1)))


def _gradients(weights: list, biases: list, batch: torch.Tensor, targets: torch.Tensor, *, relu: bool,
               operand: torch.dtype) -> list[torch.Tensor]:
    """The mean loss's gradients of a batch, every layer's weights then every layer's biases.

    The products read ``operand`` copies of their operands (bfloat16 or float32) and are
    widened to float32; activations are [T, units, batch], pre-activations kept for ReLU's mask.
    """

    def low(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(operand) if operand is not torch.float32 else tensor

    trials, size = weights[0].shape[0], batch.shape[0]
    inputs = []
    first = weights[0]
    hidden = torch.mm(low(first.reshape(-1, first.shape[2])), batch.t()).float().view(trials, first.shape[1], size)
    hidden.add_(biases[0].unsqueeze(2))
    for weight, bias in zip(weights[1:], biases[1:]):
        if relu:
            hidden.clamp_(min=0)
        inputs.append(hidden)
        hidden = torch.bmm(low(weight), low(hidden)).float().add_(bias.unsqueeze(2))
    # softmax(logits) - onehot(targets), scaled by 1/batch: the mean loss's gradient
    gradient = hidden
    gradient.sub_(gradient.amax(dim=1, keepdim=True)).exp_()
    gradient.div_(gradient.sum(dim=1, keepdim=True))
    gradient.scatter_add_(1, targets.view(1, 1, size).expand(trials, 1, size), gradient.new_full((trials, 1, size), -1.0))
    gradient.mul_(1.0 / size)
    grads_w = [None] * len(weights)
    grads_b = [None] * len(biases)
    for layer in range(len(weights) - 1, 0, -1):
        activation = inputs[layer - 1]
        low_gradient = low(gradient)
        grads_w[layer] = torch.bmm(low_gradient, low(activation).transpose(1, 2)).float()
        grads_b[layer] = gradient.sum(dim=2)
        gradient = torch.bmm(low(weights[layer]).transpose(1, 2), low_gradient).float()
        if relu:
            gradient.mul_(activation > 0)
    grads_w[0] = torch.mm(low(gradient).reshape(-1, size), batch).float().view_as(weights[0])
    grads_b[0] = gradient.sum(dim=2)
    return grads_w + grads_b
