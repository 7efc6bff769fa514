"""MLP probes: the written-out backward pass against autograd, and what the kinds must learn."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest
import torch

from imagenet_cog.probes.linear import SGDSchedule, train_probes
from imagenet_cog.probes.mlp import train_mlps

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def reference_mlp(features, labels, classes, lr, weight_decay, schedule, seed, width, layers, relu, trials=1, candidate=0):
    """nn.Sequential + autograd + torch.optim.SGD, replaying train_mlps' random draws for
    ``candidate`` of ``trials`` stacked candidates."""
    generator = torch.Generator().manual_seed(seed)
    widths = [features.shape[1]] + [width] * layers + [classes]
    modules = []
    # train_mlps draws each layer's weight, then its bias
    initial, initial_biases = [], []
    for fan_in, fan_out in pairwise(widths):
        bound = 1.0 / math.sqrt(fan_in)
        initial.append(torch.rand(trials, fan_out, fan_in, generator=generator) * 2 * bound - bound)
        initial_biases.append(torch.rand(trials, fan_out, generator=generator) * 2 * bound - bound)
    for index, (fan_in, fan_out) in enumerate(pairwise(widths)):
        linear = torch.nn.Linear(fan_in, fan_out)
        with torch.no_grad():
            linear.weight.copy_(initial[index][candidate])
            linear.bias.copy_(initial_biases[index][candidate])
        modules.append(linear)
        if index < layers and relu:
            modules.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*modules)
    optimiser = torch.optim.SGD(model.parameters(), lr=lr, momentum=schedule.momentum, weight_decay=weight_decay)
    for epoch in range(schedule.epochs):
        order = torch.randperm(len(labels), generator=generator)
        for group in optimiser.param_groups:
            group["lr"] = lr * schedule.learning_rate_factor(epoch)
        for start in range(0, len(order), schedule.batch_size):
            index = order[start : start + schedule.batch_size]
            loss = torch.nn.functional.cross_entropy(model(features[index]), labels[index])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    return model


@pytest.mark.parametrize("relu", [True, False])
def test_mlp_matches_autograd_sgd(relu):
    rng = np.random.default_rng(0)
    features = torch.from_numpy(rng.normal(size=(90, 12)).astype(np.float32))
    labels = torch.from_numpy(rng.integers(0, 4, size=90))
    schedule = SGDSchedule(epochs=3, batch_size=32, momentum=0.9)
    probes = train_mlps(features, labels, 4, [0.3, 0.05], [1e-4, 1e-3], schedule, seed=5,
                        hidden_width=16, hidden_layers=2, relu=relu)
    for candidate, (lr, weight_decay) in enumerate([(0.3, 1e-4), (0.05, 1e-3)]):
        reference = reference_mlp(features, labels, 4, lr, weight_decay, schedule, 5, 16, 2, relu, 2, candidate)
        linears = [m for m in reference if isinstance(m, torch.nn.Linear)]
        for layer, linear in enumerate(linears):
            torch.testing.assert_close(probes.weights[layer][candidate], linear.weight.detach(), atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(probes.biases[layer][candidate], linear.bias.detach(), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(probes.logits(features)[:, candidate], reference(features).detach(), atol=1e-4, rtol=1e-4)


def xor_classes(per_quadrant=100, seed=0):
    """Two classes on opposite quadrants of the plane: no linear map separates them."""
    rng = np.random.default_rng(seed)
    points = rng.uniform(0.15, 1.0, size=(4 * per_quadrant, 2)) * np.repeat([[1, 1], [-1, -1], [1, -1], [-1, 1]], per_quadrant, axis=0)
    labels = np.repeat([0, 0, 1, 1], per_quadrant)
    return torch.from_numpy(points.astype(np.float32)), torch.from_numpy(labels)


def test_mlp_separates_xor_where_linear_cannot():
    features, labels = xor_classes()
    test_features, test_labels = xor_classes(seed=1)
    schedule = SGDSchedule(epochs=60, batch_size=64, momentum=0.9)
    mlp = train_mlps(features, labels, 2, [0.5], [1e-5], schedule, seed=0, hidden_width=32, hidden_layers=2)
    linear = train_probes(features, labels, 2, [0.5], [1e-5], schedule, seed=0)
    mlp_top1 = mlp.topk_accuracy(test_features, test_labels)[0, 0].item()
    linear_top1 = linear.topk_accuracy(test_features, test_labels)[0, 0].item()
    assert mlp_top1 > 97.0
    assert linear_top1 < 75.0


def test_mlp_noact_reaches_linear_accuracy_on_linearly_separable_classes():
    """Well separated Gaussian classes: every linear map that separates them scores 100%,
    and an MLP without activation is a linear map, so both probes must reach it."""
    rng = np.random.default_rng(0)
    centres = 6.0 * np.eye(6, 10)
    labels = np.repeat(np.arange(6), 60)
    features = torch.from_numpy((centres[labels] + rng.normal(size=(labels.size, 10))).astype(np.float32))
    test_labels = np.repeat(np.arange(6), 30)
    test = torch.from_numpy((centres[test_labels] + rng.normal(size=(test_labels.size, 10))).astype(np.float32))
    labels, test_labels = torch.from_numpy(labels), torch.from_numpy(test_labels)
    schedule = SGDSchedule(epochs=30, batch_size=64, momentum=0.9)
    noact = train_mlps(features, labels, 6, [0.1], [1e-6], schedule, seed=0, hidden_width=32, relu=False)
    linear = train_probes(features, labels, 6, [0.1], [1e-6], schedule, seed=0)
    noact_top1 = noact.topk_accuracy(test, test_labels)[0, 0].item()
    linear_top1 = linear.topk_accuracy(test, test_labels)[0, 0].item()
    assert linear_top1 > 98.0
    assert abs(noact_top1 - linear_top1) <= 1.0


def test_bfloat16_mlp_scores_like_float32():
    features, labels = xor_classes()
    schedule = SGDSchedule(epochs=30, batch_size=64, momentum=0.9)
    scores = [
        train_mlps(features, labels, 2, [0.5], [1e-5], schedule, seed=0, precision=precision, hidden_width=32)
        .topk_accuracy(features, labels)[0, 0].item()
        for precision in ("float32", "bfloat16")
    ]
    assert abs(scores[0] - scores[1]) <= 2.0


def test_diverging_candidate_is_frozen_and_marked():
    features, labels = xor_classes()
    schedule = SGDSchedule(epochs=4, batch_size=64, momentum=0.9)
    probes = train_mlps(features * 1e4, labels, 2, [1e6, 0.01], [1e-5, 1e-5], schedule, seed=0, hidden_width=16)
    assert probes.diverged == [True, False]
    assert all(bool(torch.isfinite(w).all()) for w in probes.weights)


def test_half_precision_features_train_in_float32():
    """On a GPU float32 probes keep float16 feature files half (probe.feature_dtype)."""
    features, labels = xor_classes()
    schedule = SGDSchedule(epochs=3, batch_size=64, momentum=0.9)
    half = train_mlps(features.half(), labels, 2, [0.5], [1e-5], schedule, seed=0, hidden_width=16)
    full = train_mlps(features.half().float(), labels, 2, [0.5], [1e-5], schedule, seed=0, hidden_width=16)
    for ours, reference in zip(half.weights, full.weights):
        torch.testing.assert_close(ours, reference)
