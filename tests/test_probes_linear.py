"""The SGD probe against the textbook autograd version of the same training loop."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from imagenet_cog.probes import linear as probe_module
from imagenet_cog.probes.linear import (
    LinearProbes,
    SGDSchedule,
    feature_dtype,
    l2_normalise,
    operand_dtype,
    resolve_precision,
    train_probes,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def clustered_features(classes=5, per_class=40, dim=16, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim))
    labels = np.repeat(np.arange(classes), per_class)
    features = centres[labels] + 0.8 * rng.normal(size=(labels.size, dim))
    return torch.from_numpy(features.astype(np.float32)), torch.from_numpy(labels)


def three_runs(precision):
    """The arguments of train_probe_runs for three runs of two candidates each on their own 130
    of 300 rows (6 classes, 32 dims), one candidate diverging (lr 1e38): (normalised features,
    labels, classes, rows, lrs, decays, schedule, seeds, precision)."""
    features, labels = clustered_features(classes=6, per_class=50, dim=32, seed=5)
    normalised = l2_normalise(features, operand_dtype(precision))
    generator = torch.Generator().manual_seed(0)
    rows = torch.stack([torch.randperm(labels.numel(), generator=generator)[:130] for _ in range(3)])
    lrs, decays, seeds = [[1.0, 4.0], [2.0, 1e38], [0.5, 8.0]], [[1e-5, 1e-7], [1e-6, 1e-6], [0.0, 1e-4]], [3, 4, 5]
    schedule = SGDSchedule(epochs=6, batch_size=48, momentum=0.9)  # 130 rows: two full batches and a partial one
    return normalised, labels, 6, rows, lrs, decays, schedule, seeds, precision


def reference_probes(features, labels, classes, lrs, weight_decays, schedule, seed):
    """nn.Linear + CrossEntropyLoss + torch.optim.SGD, replaying train_probes' random draws."""
    generator = torch.Generator().manual_seed(seed)
    trials, dim = len(lrs), features.shape[1]
    bound = 1.0 / math.sqrt(dim)
    initial_weight = torch.rand(trials, classes, dim, generator=generator) * 2 * bound - bound
    initial_bias = torch.rand(trials, classes, generator=generator) * 2 * bound - bound
    orders = [torch.randperm(len(labels), generator=generator) for _ in range(schedule.epochs)]
    results = []
    for trial in range(trials):
        model = torch.nn.Linear(dim, classes)
        with torch.no_grad():
            model.weight.copy_(initial_weight[trial])
            model.bias.copy_(initial_bias[trial])
        optimiser = torch.optim.SGD(
            model.parameters(), lr=lrs[trial], momentum=schedule.momentum, weight_decay=weight_decays[trial]
        )
        for epoch, order in enumerate(orders):
            for group in optimiser.param_groups:
                group["lr"] = lrs[trial] * 0.5 * (1 + math.cos(math.pi * epoch / schedule.epochs))
            for start in range(0, len(order), schedule.batch_size):
                index = order[start : start + schedule.batch_size]
                loss = torch.nn.functional.cross_entropy(model(features[index]), labels[index])
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
        results.append((model.weight.detach(), model.bias.detach()))
    return results


def test_matches_autograd_sgd_for_several_candidates_trained_together():
    features, labels = clustered_features()
    features = l2_normalise(features)
    # 200 samples in batches of 64: three full batches and a partial one per epoch
    schedule = SGDSchedule(epochs=5, batch_size=64, momentum=0.9)
    lrs, decays = [0.5, 3.0, 20.0], [1e-4, 1e-6, 0.0]
    probes = train_probes(features, labels, 5, lrs, decays, schedule, seed=7)
    expected = reference_probes(features, labels, 5, lrs, decays, schedule, seed=7)
    for trial, (weight, bias) in enumerate(expected):
        torch.testing.assert_close(probes.weight[trial], weight, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(probes.bias[trial], bias, rtol=1e-4, atol=1e-5)
    assert probes.diverged == [False, False, False]


def test_diverging_candidate_is_frozen_finite_and_leaves_its_neighbour_untouched():
    features, labels = clustered_features()
    features = l2_normalise(features)
    schedule = SGDSchedule(epochs=4, batch_size=64, momentum=0.9)
    probes = train_probes(features, labels, 5, [1.0, 1e38], [1e-5, 1e-5], schedule, seed=3)
    assert probes.diverged == [False, True]
    assert torch.isfinite(probes.weight).all() and torch.isfinite(probes.bias).all()
    accuracy = probes.topk_accuracy(features, labels, ks=(1,))
    assert torch.isfinite(accuracy).all()
    (weight, bias), _ = reference_probes(features, labels, 5, [1.0, 1e38], [1e-5, 1e-5], schedule, seed=3)
    torch.testing.assert_close(probes.weight[0], weight, rtol=1e-4, atol=1e-5)


def test_learns_separable_classes_and_reports_topk_in_percent():
    features, labels = clustered_features(classes=6, per_class=50, dim=32, seed=1)
    features = l2_normalise(features)
    probes = train_probes(features, labels, 6, [5.0], [1e-6], SGDSchedule(30, 64, 0.9), seed=0)
    top1, top5 = probes.topk_accuracy(features, labels, ks=(1, 5), chunk=37)[0].tolist()
    predicted = probes.logits(features)[:, 0].argmax(dim=1)
    assert top1 == pytest.approx(100.0 * (predicted == labels).double().mean().item())
    assert top1 > 90.0
    assert top1 <= top5 <= 100.0


def test_topk_accuracy_counts_a_hit_within_the_k_best():
    weight = torch.eye(3).unsqueeze(0)  # logits = features
    probes = LinearProbes(weight=weight, bias=torch.zeros(1, 3), diverged=[False])
    features = torch.tensor([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0], [3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])
    labels = torch.tensor([0, 1, 2, 2])
    top1, top2, top5 = probes.topk_accuracy(features, labels, ks=(1, 2, 5))[0].tolist()
    assert (top1, top2, top5) == (50.0, 75.0, 100.0)


def test_bfloat16_products_train_the_same_probe_as_float32():
    features, labels = clustered_features(classes=8, per_class=60, dim=64, seed=2)
    schedule = SGDSchedule(epochs=20, batch_size=100, momentum=0.9)
    lrs, decays = [2.0, 8.0], [1e-5, 1e-8]
    exact = train_probes(l2_normalise(features), labels, 8, lrs, decays, schedule, seed=5)
    mixed = train_probes(l2_normalise(features, torch.bfloat16), labels, 8, lrs, decays, schedule, seed=5,
                         precision="bfloat16")
    assert mixed.weight.dtype == torch.float32 and mixed.diverged == [False, False]
    # bfloat16 keeps 8 significant bits per operand; after 100 steps the weights still agree
    # to about a percent of their scale, and the predictions almost everywhere
    scale = exact.weight.abs().amax(dim=(1, 2), keepdim=True)
    assert ((mixed.weight - exact.weight).abs() / scale).amax() < 0.03
    exact_predictions = exact.logits(l2_normalise(features)).argmax(dim=2)
    mixed_predictions = mixed.logits(l2_normalise(features, torch.bfloat16)).argmax(dim=2)
    assert (exact_predictions == mixed_predictions).double().mean() > 0.99
    assert not torch.equal(mixed.weight, exact.weight)  # the bfloat16 path really ran


def test_kernel_caps_make_a_bfloat16_cpu_multiply_float32():
    """The stand-in for a CPU without bfloat16 that the docs give: under either cap `auto`
    resolves to float32, whatever the chip (ATen reads its cap when it starts, so each runs in
    a fresh interpreter)."""
    script = "import torch; from imagenet_cog.probes.linear import resolve_precision; " \
             "print(resolve_precision('auto', torch.device('cpu')))"
    for caps in ({"ATEN_CPU_CAPABILITY": "avx2"}, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, {"ONEDNN_MAX_CPU_ISA": "avx512_core"}):
        environment = {key: value for key, value in os.environ.items() if key not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")}
        resolved = subprocess.run([sys.executable, "-c", script], env={**environment, **caps}, capture_output=True,
                                  text=True, check=True).stdout.strip()
        assert resolved == "float32", caps


def test_auto_precision_is_bfloat16_only_where_the_device_has_it(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(probe_module, "native_bfloat16", lambda device: True)
    assert resolve_precision("auto", cpu) == "bfloat16"
    monkeypatch.setattr(probe_module, "native_bfloat16", lambda device: False)
    assert resolve_precision("auto", cpu) == "float32"
    assert resolve_precision("bfloat16", cpu) == "bfloat16" and resolve_precision("float32", cpu) == "float32"
    with pytest.raises(ValueError, match="precision must be one of"):
        resolve_precision("float16", cpu)
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        train_probes(torch.zeros(4, 2), torch.zeros(4, dtype=torch.long), 2, [1.0], [0.0], SGDSchedule(1, 2, 0.9), 0,
                     precision="auto")


def test_features_are_kept_in_the_dtype_the_probes_multiply():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert feature_dtype("bfloat16", cpu, torch.float16) == torch.bfloat16
    assert feature_dtype("float32", cpu, torch.float16) == torch.float32
    assert feature_dtype("float32", gpu, torch.float16) == torch.float16  # widened per batch
    assert feature_dtype("float32", gpu, torch.float32) == torch.float32


def test_l2_normalise_gives_unit_rows_and_keeps_zero_rows():
    features = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    torch.testing.assert_close(l2_normalise(features), torch.tensor([[0.6, 0.8], [0.0, 0.0]]))
    many = torch.randn(10, 3, dtype=torch.float16)
    chunked = l2_normalise(many, torch.bfloat16, chunk=3)
    assert chunked.dtype == torch.bfloat16 and many.dtype == torch.float16
    torch.testing.assert_close(chunked.float(), torch.nn.functional.normalize(many.float()), atol=4e-3, rtol=0)


def test_cosine_schedule_starts_at_lr_and_decays_towards_zero():
    schedule = SGDSchedule(epochs=100, batch_size=1024, momentum=0.9)
    assert schedule.learning_rate_factor(0) == 1.0
    assert schedule.learning_rate_factor(50) == pytest.approx(0.5)
    assert 0 < schedule.learning_rate_factor(99) < 1e-3


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_the_gpu_logit_layout_trains_the_same_probes(precision):
    """GPUs keep logits sample-major ([batch, T * C]); the CPU class-major. Checked here on the
    CPU: only the order of sums differs, and with it the last bits."""
    features, labels = clustered_features(classes=7, per_class=40, dim=32, seed=4)
    normalised = l2_normalise(features, operand_dtype(precision))
    schedule = SGDSchedule(epochs=8, batch_size=64, momentum=0.9)
    lrs, decays = [1.0, 4.0, 1e38], [1e-5, 1e-7, 1e-5]
    class_major = train_probes(normalised, labels, 7, lrs, decays, schedule, seed=9, precision=precision,
                               sample_major=False)
    sample_major = train_probes(normalised, labels, 7, lrs, decays, schedule, seed=9, precision=precision,
                                sample_major=True)
    assert class_major.diverged == sample_major.diverged == [False, False, True]
    tolerance = 1e-5 if precision == "float32" else 2e-2
    scale = class_major.weight[:2].abs().amax()
    assert (sample_major.weight[:2] - class_major.weight[:2]).abs().amax() <= tolerance * scale
    assert torch.allclose(sample_major.bias[:2], class_major.bias[:2], atol=tolerance * scale.item())


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize("sample_major", [False, True])
def test_runs_trained_together_are_each_the_run_trained_alone(precision, sample_major):
    """Seeds of a dataset share passes (train_probe_runs): each run keeps its own rows, draws,
    rates and divergence, so it is the probe train_probes gives on its rows alone."""
    arguments = three_runs(precision)
    normalised, labels, classes, rows, lrs, decays, schedule, seeds, _ = arguments
    together = probe_module.train_probe_runs(*arguments, sample_major=sample_major)
    for run in range(3):
        alone = train_probes(normalised[rows[run]], labels[rows[run]], classes, lrs[run], decays[run], schedule,
                             seeds[run], precision, sample_major=sample_major)
        assert together[run].diverged == alone.diverged
        scale = alone.weight.abs().amax()
        assert (together[run].weight - alone.weight).abs().amax() <= 1e-5 * scale
        assert (together[run].bias - alone.bias).abs().amax() <= 1e-5 * scale
    assert together[1].diverged == [False, True]
    with pytest.raises(ValueError, match="as many candidates in every run"):
        probe_module.train_probe_runs(normalised, labels, 6, rows, [[1.0], [1.0, 2.0], [1.0]], [[0.0], [0.0, 0.0], [0.0]],
                                      schedule, seeds, precision)


def test_topk_accuracy_over_chosen_rows_is_that_of_those_rows():
    features, labels = clustered_features(classes=5, per_class=30, dim=16, seed=6)
    features = l2_normalise(features)
    probes = train_probes(features, labels, 5, [1.0, 3.0], [1e-6, 1e-6], SGDSchedule(3, 32, 0.9), seed=1)
    rows = torch.tensor([3, 17, 40, 41, 99, 120, 149])
    torch.testing.assert_close(
        probes.topk_accuracy(features, labels, ks=(1, 2), chunk=3, rows=rows),
        probes.topk_accuracy(features[rows], labels[rows], ks=(1, 2)),
    )
