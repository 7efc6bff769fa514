"""The fused probe step against the reference step: the same probes, time per step, bytes moved.

Trains the same runs twice with ``imagenet_cog.probes.linear.train_probe_runs`` on generated
clustered features (L2-normalised, the protocol's shape by default: 1000 classes, 2048
dimensions, batch 1024): with the reference step (separate in-place kernels) and with
``fused=True`` (``imagenet_cog.probes.fused_step``: everything after each product compiled into
one kernel), each after an untimed warm-up epoch (which also compiles), best of
``--repeats``. Prints the time per SGD step of each and the ratio, the largest weight
difference relative to the largest weight and the test top-1 of both, the products' TFLOP/s
(4 n D C per epoch) and the bytes per step counted from the code's passes
(``fused_step.step_bytes``) over the measured time. With ``--device cuda`` it also
measures the device's matmul rate in the operand dtype and its copy bandwidth, and prints
each step's share of them (the roofline a step can reach).

    python benchmarks/fused_step.py --threads 2                  # ~2 minutes on 2 cores
    python benchmarks/fused_step.py --device cuda --per-class 1000 --epochs 5
"""

from __future__ import annotations

import argparse
import time

import torch
from probe_benchmark import clustered_features, matmul_flops_per_second, synchronise

from imagenet_cog.probes import fused_step
from imagenet_cog.probes.linear import SGDSchedule, l2_normalise, operand_dtype, resolve_precision, train_probe_runs


def copy_bandwidth(device: torch.device, megabytes: int = 1024, rounds: int = 5) -> float:
    """Bytes per second of a large device-to-device copy (read + write), best of ``rounds``."""
    source = torch.empty(megabytes * 2**20 // 4, device=device)
    target = torch.empty_like(source)
    best = 0.0
    for _ in range(rounds):
        synchronise(device)
        started = time.perf_counter()
        target.copy_(source)
        synchronise(device)
        best = max(best, 2 * source.numel() * 4 / (time.perf_counter() - started))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--per-class", type=int, default=20, help="training samples per class")
    parser.add_argument("--test-per-class", type=int, default=5)
    parser.add_argument("--spread", type=float, default=7.0)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1, help="runs trained together (the seeds of a job)")
    parser.add_argument("--candidates", type=int, default=1, help="candidates per run (probes.trials_per_batch)")
    parser.add_argument("--precision", default="auto", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    precision = resolve_precision(args.precision, device)
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")  # as the probe command sets it
    features, labels = clustered_features(args.classes, args.per_class + args.test_per_class, args.dim, 0, args.spread,
                                          device)
    train = torch.arange(labels.numel(), device=device) % (args.per_class + args.test_per_class) < args.per_class
    normalised = l2_normalise(features, operand_dtype(precision))
    train_x, train_y, test_x, test_y = normalised[train], labels[train], normalised[~train], labels[~train]
    runs, candidates = args.runs, args.candidates
    lrs = [[10.0 * (1 + c) for c in range(candidates)] for _ in range(runs)]
    decays = [[1e-6] * candidates for _ in range(runs)]
    seeds = list(range(runs))
    steps = args.epochs * -(-train_y.numel() // args.batch_size)

    def train_once(epochs: int, fused: bool):
        schedule = SGDSchedule(epochs, args.batch_size, 0.9)
        synchronise(device)
        started = time.perf_counter()
        probes = train_probe_runs(train_x, train_y, args.classes, None, lrs, decays, schedule, seeds, precision, fused=fused)
        synchronise(device)
        return probes, time.perf_counter() - started

    print(f"{device.type}: {args.classes} classes x {train_y.numel()} training rows x {args.dim} dims, batch "
          f"{args.batch_size}, {runs} runs x {candidates} candidates per step, {args.epochs} epochs ({steps} steps), "
          f"{precision} products, {torch.get_num_threads()} threads", flush=True)
    warm_ups = {fused: train_once(1, fused)[1] for fused in (False, True)}
    # alternated, best of the repeats: load from other jobs slows rounds, never speeds them up
    best, trained = {False: float("inf"), True: float("inf")}, {}
    for _ in range(args.repeats):
        for fused in (False, True):
            trained[fused], seconds = train_once(args.epochs, fused)
            best[fused] = min(best[fused], seconds)
    results = {fused: (trained[fused], best[fused], warm_ups[fused]) for fused in (False, True)}
    description = fused_step.step_description(True)
    flops = 4.0 * train_y.numel() * args.dim * args.classes * args.epochs * runs * candidates
    matmul = bandwidth = None
    if device.type == "cuda":
        matmul = matmul_flops_per_second(args.batch_size, args.dim, args.classes * candidates, device,
                                         operand_dtype(precision))
        bandwidth = copy_bandwidth(device)
        print(f"device limits measured: {matmul / 1e12:.0f} TFLOP/s ({precision} matmul at the probe's shape), "
              f"{bandwidth / 1e9:.0f} GB/s (copy)")
    for fused, (probes, seconds, warm_up) in results.items():
        name = f"fused ({description})" if fused else "reference"
        moved = fused_step.step_bytes(runs, candidates, args.classes, args.dim, args.batch_size, precision,
                                       fused and description == "fused")
        per_step = seconds / steps
        line = (f"{name:<22} {per_step * 1e3:9.3f} ms per step, {flops / seconds / 1e12:7.3f} TFLOP/s, "
                f"{moved / 1e6:6.1f} MB per step counted -> {moved / per_step / 1e9:7.1f} GB/s; "
                f"first epoch (warm-up{', compile' if fused else ''}) {warm_up:.1f} s")
        if matmul:
            line += f"; {100 * flops / seconds / matmul:.0f}% of the matmul rate, {100 * moved / per_step / bandwidth:.0f}% of copy bandwidth"
        print(line)
    reference, fused = results[False][0], results[True][0]
    difference = max(float((a.weight - b.weight).abs().amax() / b.weight.abs().amax()) for a, b in zip(fused, reference))
    top1 = [[float(p.topk_accuracy(test_x, test_y)[:, 0].mean()) for p in probes] for probes in (reference, fused)]
    diverged = [[p.diverged for p in probes] for probes in (reference, fused)]
    print(f"speed-up {results[False][1] / results[True][1]:.2f}x; largest weight difference {difference:.1e} of the "
          f"largest weight; test top-1 reference {top1[0]}, fused {top1[1]}; divergence equal: {diverged[0] == diverged[1]}")


if __name__ == "__main__":
    main()
