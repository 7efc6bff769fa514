"""How fast is our MLP probe, against an MLP training loop written the usual way?

On generated clustered features, for each seed, train the same MLP (``--hidden-layers``
hidden layers of ``--hidden-width`` units, ReLU; nn.Linear initialisation; SGD with
momentum, weight decay and the cosine schedule of the linear probe):
* ours: ``imagenet_cog.probes.mlp.train_mlps`` (written-out backward pass, stacked candidates,
  no host synchronisation inside an epoch) at the precision the workflow picks on this
  machine (``auto``: bfloat16 operands where the device multiplies them natively) and, when
  that is not float32, once more in float32;
* the baseline: ``nn.Sequential`` + ``CrossEntropyLoss`` + autograd + ``torch.optim.SGD``,
  a Python loop over shuffled mini-batches that logs the loss of each step (``.item()``),
  float32;
then print the test top-1 of each (mean over seeds), the time ratio, our training FLOP/s,
the matmul FLOP/s this machine reaches in the same run in the same dtype (a 2048^3 product),
and the throughput of ``--candidates`` (lr, wd) pairs trained in one pass.

    python benchmarks/mlp_benchmark.py                       # about a minute on 2 cores
    python benchmarks/mlp_benchmark.py --device cuda --full  # the paper's shape, on a GPU

``--full``: 1000 classes x 300 training samples of 2048 dimensions, 2 hidden layers of
2048 units, batch 1024, 2 epochs per run; the printed seconds per epoch scale linearly to the
protocol's (31 runs x 100 epochs on ~1.0M IN-1K training features: multiply by ~3.4 x 3100).
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from itertools import pairwise
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_benchmark import clustered_features, matmul_flops_per_second, synchronise

from imagenet_cog.probes.linear import SGDSchedule, operand_dtype, resolve_precision
from imagenet_cog.probes.mlp import train_mlps


def baseline_mlp(train_x, train_y, test_x, test_y, classes, lr, weight_decay, schedule, seed, width, layers):
    """The usual loop: nn.Sequential, autograd, torch.optim.SGD, the loss logged every step."""
    torch.manual_seed(seed)
    device = train_x.device
    modules, fan_in = [], train_x.shape[1]
    for _ in range(layers):
        modules += [torch.nn.Linear(fan_in, width), torch.nn.ReLU()]
        fan_in = width
    model = torch.nn.Sequential(*modules, torch.nn.Linear(fan_in, classes)).to(device)
    optimiser = torch.optim.SGD(model.parameters(), lr=lr, momentum=schedule.momentum, weight_decay=weight_decay)
    losses = []
    for epoch in range(schedule.epochs):
        for group in optimiser.param_groups:
            group["lr"] = lr * schedule.learning_rate_factor(epoch)
        order = torch.randperm(len(train_y), device=device)
        for start in range(0, len(order), schedule.batch_size):
            index = order[start : start + schedule.batch_size]
            loss = torch.nn.functional.cross_entropy(model(train_x[index]), train_y[index])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses.append(loss.item())
    with torch.no_grad():
        return 100.0 * (model(test_x).argmax(dim=1) == test_y).float().mean().item()


def training_flops(count: int, dim: int, width: int, layers: int, classes: int, epochs: int, candidates: int = 1) -> float:
    """Matrix-product FLOPs: forward, input gradients (not of the first layer), weight gradients."""
    widths = [dim] + [width] * layers + [classes]
    products = sum(a * b for a, b in pairwise(widths))
    return 2.0 * count * epochs * candidates * (3 * products - dim * width)


def timed(function, device):
    synchronise(device)
    started = time.perf_counter()
    value = function()
    synchronise(device)
    return value, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--full", action="store_true", help="the paper's shape (see the module doc)")
    parser.add_argument("--classes", type=int, default=50)
    parser.add_argument("--per-class", type=int, default=60)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--hidden-width", type=int, default=512)
    parser.add_argument("--hidden-layers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--weight-decay", type=float, default=1e-6)
    parser.add_argument("--seeds", type=int, nargs="+", default=[22, 37])
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--spread", type=float, default=2.5, help="cluster spread: overlap makes accuracy informative")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.full:
        args.classes, args.per_class, args.dim, args.hidden_width = 1000, 300, 2048, 2048
        args.batch_size, args.epochs, args.seeds = 1024, 2, [22]
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")
    schedule = SGDSchedule(args.epochs, args.batch_size, 0.9)
    precision = resolve_precision("auto", device)
    variants = [precision] + (["float32"] if precision != "float32" else [])
    shape = {"width": args.hidden_width, "layers": args.hidden_layers}
    print(f"{args.classes} classes x {args.per_class} training samples, dim {args.dim}, "
          f"{args.hidden_layers} hidden layers of {args.hidden_width}, batch {args.batch_size}, "
          f"{args.epochs} epochs, device {device}, {torch.get_num_threads()} threads")

    # one untimed round of each first: the first call of a kernel pays for its setup
    warm_x, warm_y = clustered_features(4, 8, args.dim, 0, 1.0, device)
    warm = SGDSchedule(1, args.batch_size, 0.9)
    baseline_mlp(warm_x, warm_y, warm_x, warm_y, 4, args.lr, args.weight_decay, warm, 0, **shape)
    for name in variants:
        train_mlps(warm_x.to(operand_dtype(name)), warm_y, 4, [args.lr], [args.weight_decay], warm, 0, name,
                   args.hidden_width, args.hidden_layers)

    accuracy = {name: [] for name in ["baseline", *variants]}
    seconds = {name: 0.0 for name in accuracy}
    for seed in args.seeds:
        features, labels = clustered_features(args.classes, args.per_class + 20, args.dim, seed, args.spread, device)
        test = torch.arange(len(labels), device=device) % (args.per_class + 20) >= args.per_class
        train_x, train_y, test_x, test_y = features[~test], labels[~test], features[test], labels[test]
        top1, elapsed = timed(partial(baseline_mlp, train_x, train_y, test_x, test_y, args.classes, args.lr,
                                      args.weight_decay, schedule, seed, **shape), device)
        accuracy["baseline"].append(top1)
        seconds["baseline"] += elapsed
        for name in variants:
            ours = train_x.to(operand_dtype(name))
            probes, elapsed = timed(partial(train_mlps, ours, train_y, args.classes, [args.lr], [args.weight_decay],
                                            schedule, seed, name, args.hidden_width, args.hidden_layers), device)
            accuracy[name].append(probes.topk_accuracy(test_x, test_y)[0, 0].item())
            seconds[name] += elapsed
    flops = training_flops(len(train_y), args.dim, args.hidden_width, args.hidden_layers, args.classes, args.epochs)
    epochs_run = args.epochs * len(args.seeds)
    for name, values in accuracy.items():
        print(f"{'baseline (nn.Sequential + autograd + optim.SGD, float32)' if name == 'baseline' else 'ours, ' + name}: "
              f"test top-1 {sum(values) / len(values):.2f}%, {seconds[name]:.2f} s "
              f"({seconds[name] / epochs_run:.3f} s/epoch)")
    for name in variants:
        square = matmul_flops_per_second(2048, 2048, 2048, device, operand_dtype(name))
        achieved = flops * len(args.seeds) / seconds[name]
        print(f"ours, {name}: {seconds['baseline'] / seconds[name]:.2f}x the baseline's speed; "
              f"{achieved / 1e9:.1f} GFLOP/s of training matmuls = {100 * achieved / square:.0f}% of this "
              f"machine's {name} 2048^3 matmul rate ({square / 1e9:.1f} GFLOP/s)")
    lrs = [args.lr * factor for factor in (1.0, 0.5, 0.25, 2.0)[: args.candidates]]
    lrs += [args.lr] * (args.candidates - len(lrs))
    ours = train_x.to(operand_dtype(precision))
    _, together = timed(lambda: train_mlps(ours, train_y, args.classes, lrs, [args.weight_decay] * len(lrs),
                                           schedule, 0, precision, args.hidden_width, args.hidden_layers), device)
    single = seconds[precision] / len(args.seeds)
    print(f"{len(lrs)} candidates in one pass ({precision}): {together:.2f} s, "
          f"{single * len(lrs) / together:.2f}x the throughput of one at a time")


if __name__ == "__main__":
    main()
