"""How fast is our linear probe, against a probe loop written the way the reference scripts are?

CPU mode (default): on generated clustered features, for each seed, train
* ours: ``imagenet_cog.probes.linear.train_probes`` (closed-form gradient, in-place SGD, no host
  synchronisation inside an epoch, scored once at the end), at the matmul precision the
  workflow picks on this machine (``--precision auto``: bfloat16 where the CPU multiplies
  it natively) and, when that is not float32, once more in float32, and
* the baseline: ``nn.Linear`` + ``CrossEntropyLoss`` + autograd + ``torch.optim.SGD``, a
  Python loop over shuffled mini-batches with per-batch loss/accuracy bookkeeping and a
  finiteness check (each a host synchronisation), and a test evaluation every epoch,
with the same (lr, weight decay), epochs and batch size, then print the test accuracies
(mean over seeds), the time ratios, our training FLOP/s, and the matmul FLOP/s this machine
reaches in the same run in the same operand dtype (a large square product, and the probe's
own forward shape).

Full mode (``--device cuda --full``): the full IN-1K-size problem, 1000 classes x 1.1M
training features of 2048 dimensions (generated as float16, like the feature files), run
through the whole tuned protocol (``probe_dataset``: 30 trials of 100 epochs on the 80%
split, then the final fit), timed against the roofline of its matrix-product FLOPs at the
GPU's measured matmul rate in the operand dtype the probes used (bfloat16, or TF32 with
``--precision float32``). Without Optuna installed, the search's candidates are drawn
log-uniformly from the same ranges with NumPy instead of TPE: the same trials, epochs and
products, so the same time (TPE's own bookkeeping is milliseconds per trial).

    python benchmarks/probe_benchmark.py                      # about 1 minute on 2 cores
    python benchmarks/probe_benchmark.py --device cuda --full # on a GPU node
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time

import numpy as np
import torch

from imagenet_cog.probes.linear import (
    PRECISIONS,
    SGDSchedule,
    feature_dtype,
    l2_normalise,
    operand_dtype,
    resolve_precision,
    train_probes,
)


def clustered_features(classes: int, per_class: int, dim: int, seed: int, spread: float, device="cpu"):
    """Gaussian clusters whose overlap (``spread``) makes the task neither trivial nor hopeless."""
    generator = torch.Generator(device=device).manual_seed(seed)
    centres = torch.randn(classes, dim, generator=generator, device=device)
    labels = torch.arange(classes, device=device).repeat_interleave(per_class)
    features = torch.randn(labels.numel(), dim, generator=generator, device=device).mul_(spread).add_(centres[labels])
    return features, labels


def add_problem_arguments(parser: argparse.ArgumentParser, classes: int = 100) -> None:
    """The size of the generated benchmark problem that generated_problem builds."""
    parser.add_argument("--classes", type=int, default=classes)
    parser.add_argument("--per-class", type=int, default=60, help="training samples per class (20%% of them validate)")
    parser.add_argument("--test-per-class", type=int, default=20)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--spread", type=float, default=5.0)


def generated_problem(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train features, train labels, test features, test labels): clustered features of
    ``args.classes`` classes, the last ``args.test_per_class`` samples of each class for test."""
    per_class = args.per_class + args.test_per_class
    features, labels = clustered_features(args.classes, per_class, args.dim, 0, args.spread)
    is_test = (torch.arange(labels.numel()) % per_class) >= args.per_class
    return features[~is_test].numpy(), labels[~is_test].numpy(), features[is_test].numpy(), labels[is_test].numpy()


def synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_flops_per_second(
    m: int, k: int, n: int, device: torch.device, dtype: torch.dtype = torch.float32, rounds: int = 5
) -> float:
    """The best of several timed rounds: other jobs on a shared machine only slow rounds down."""
    left = torch.randn(m, k, device=device, dtype=dtype)
    right = torch.randn(k, n, device=device, dtype=dtype)
    torch.mm(left, right)
    repeats = max(1, int(2e9 / (2.0 * m * k * n)))  # about 2 GFLOP a round
    best = 0.0
    for _ in range(rounds):
        synchronise(device)
        started = time.perf_counter()
        for _ in range(repeats):
            torch.mm(left, right)
        synchronise(device)
        best = max(best, 2.0 * m * k * n * repeats / (time.perf_counter() - started))
    return best


def baseline_probe(train_x, train_y, test_x, test_y, classes, lr, weight_decay, schedule, seed):
    """The reference scripts' structure: autograd, an optimizer, per-batch bookkeeping."""
    torch.manual_seed(seed)
    device = train_x.device
    model = torch.nn.Linear(train_x.shape[1], classes).to(device)
    criterion = torch.nn.CrossEntropyLoss()
    optimiser = torch.optim.SGD(model.parameters(), lr=lr, momentum=schedule.momentum, weight_decay=weight_decay)
    test_top1 = []
    for epoch in range(schedule.epochs):
        for group in optimiser.param_groups:
            group["lr"] = lr * schedule.learning_rate_factor(epoch)
        model.train()
        seen, loss_sum, correct_sum = 0, 0.0, 0.0
        order = torch.randperm(train_x.shape[0], device=device)
        diverged = False
        for start in range(0, order.numel(), schedule.batch_size):
            index = order[start : start + schedule.batch_size]
            inputs, targets = train_x[index], train_y[index]
            output = model(inputs)
            loss = criterion(output, targets)
            if not torch.isfinite(loss):
                diverged = True
                break
            loss_sum += loss.item() * targets.numel()
            correct_sum += (output.argmax(dim=1) == targets).sum().item()
            seen += targets.numel()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        model.eval()
        with torch.no_grad():
            hits = 0
            for start in range(0, test_x.shape[0], schedule.batch_size):
                output = model(test_x[start : start + schedule.batch_size])
                hits += (output.argmax(dim=1) == test_y[start : start + schedule.batch_size]).sum().item()
            test_top1.append(100.0 * hits / test_x.shape[0])
        if diverged:
            break
    return test_top1[-1]


def cpu_comparison(args) -> None:
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    schedule = SGDSchedule(args.epochs, args.batch_size, 0.9)
    precision = resolve_precision(args.precision, device)
    # ours at the precision the workflow would pick here, and ours in float32 like the baseline
    variants = [precision] if precision == "float32" else [precision, "float32"]
    accuracy = {name: [] for name in [*variants, "baseline"]}
    seconds = dict.fromkeys(accuracy, 0.0)
    for seed in args.seeds:
        features, labels = clustered_features(args.classes, args.per_class + args.test_per_class, args.dim, seed, args.spread, device)
        is_test = torch.arange(labels.numel(), device=device) % (args.per_class + args.test_per_class) >= args.per_class
        train_y, test_y = labels[~is_test].contiguous(), labels[is_test].contiguous()
        for name in accuracy:
            normalised = l2_normalise(features, feature_dtype(name, device, features.dtype) if name != "baseline" else torch.float32)
            train_x, test_x = normalised[~is_test].contiguous(), normalised[is_test].contiguous()
            synchronise(device)
            started = time.perf_counter()
            if name == "baseline":
                top1 = baseline_probe(train_x, train_y, test_x, test_y, args.classes, args.lr, args.weight_decay, schedule, seed)
            else:
                probes = train_probes(train_x, train_y, args.classes, [args.lr], [args.weight_decay], schedule, seed, precision=name)
                top1 = probes.topk_accuracy(test_x, test_y, ks=(1,))[0, 0].item()
            synchronise(device)
            seconds[name] += time.perf_counter() - started
            accuracy[name].append(top1)
        print(f"seed {seed}: " + "  ".join(f"{label(name)} {accuracy[name][-1]:.2f}%" for name in accuracy), flush=True)

    # candidates trained together (probes.trials_per_batch): one pass, larger matrix products
    together = [args.lr * 2.0 ** (k - args.together // 2) for k in range(args.together)]
    synchronise(device)
    started = time.perf_counter()
    train_probes(train_x, train_y, args.classes, together, [args.weight_decay] * args.together, schedule, 0, precision=precision)
    synchronise(device)
    together_time = time.perf_counter() - started

    # the machine's rates, measured in this run right after the probes, in each operand dtype
    square = {name: matmul_flops_per_second(2048, 2048, 2048, device, operand_dtype(name)) for name in variants}
    probe_shape = {
        name: matmul_flops_per_second(args.batch_size, args.dim, args.classes, device, operand_dtype(name))
        for name in variants
    }
    flops_per_fit = 4.0 * args.classes * args.per_class * args.dim * args.classes * args.epochs
    print(f"problem: {args.classes} classes x {args.per_class} train / {args.test_per_class} test, {args.dim} dims, "
          f"{args.epochs} epochs, batch {args.batch_size}, lr {args.lr}, wd {args.weight_decay}, "
          f"seeds {args.seeds}, {args.threads} threads on {device}; probes.precision {args.precision} -> {precision}")
    baseline_mean = np.mean(accuracy["baseline"])
    for name in variants:
        achieved = flops_per_fit * len(args.seeds) / seconds[name]
        print(f"{label(name)}: test top-1 {np.mean(accuracy[name]):.2f}% (baseline {baseline_mean:.2f}%, "
              f"difference {np.mean(accuracy[name]) - baseline_mean:+.2f} points), "
              f"time {seconds[name]:.2f} s (baseline {seconds['baseline']:.2f} s), "
              f"speed-up {seconds['baseline'] / seconds[name]:.2f}x")
        print(f"{label(name)}: {achieved / 1e9:.1f} GFLOP/s of training matmuls = "
              f"{100 * achieved / square[name]:.0f}% of this machine's {name} square matmul "
              f"({square[name] / 1e9:.1f} GFLOP/s), {100 * achieved / probe_shape[name]:.0f}% of its {name} matmul "
              f"at the probe's shape {args.batch_size}x{args.dim}x{args.classes} ({probe_shape[name] / 1e9:.1f} GFLOP/s)")
    achieved_together = flops_per_fit * args.together / together_time
    print(f"{label(precision)}, {args.together} candidates in one pass: {together_time / args.together:.2f} s per candidate "
          f"(alone: {seconds[precision] / len(args.seeds):.2f} s), {achieved_together / 1e9:.1f} GFLOP/s = "
          f"{100 * achieved_together / square[precision]:.0f}% of the {precision} square matmul rate")


def label(name: str) -> str:
    return "baseline" if name == "baseline" else f"ours ({name})"


def protocol_without_optuna(train_x, train_y, test_x, test_y, settings, device: torch.device) -> dict:
    """``probe_dataset``'s work (validation split, trials, final fit, test score) with the
    candidates drawn log-uniformly instead of by Optuna's TPE."""
    from imagenet_cog.probes.search import normalised_on_device, validation_split

    started = time.perf_counter()
    precision = resolve_precision(settings.precision, device)
    search_part, validation_part = validation_split(train_y, settings.val_fraction, 22)
    features = normalised_on_device(train_x, device, precision, "generated")
    labels = torch.from_numpy(train_y.astype(np.int64)).to(device)
    search = [t.index_select(0, torch.from_numpy(search_part).to(device)) for t in (features, labels)]
    validation = [t.index_select(0, torch.from_numpy(validation_part).to(device)) for t in (features, labels)]
    rng = np.random.default_rng(22)
    lrs = np.exp(rng.uniform(*np.log(settings.lr_range), settings.trials)).tolist()
    wds = np.exp(rng.uniform(*np.log(settings.wd_range), settings.trials)).tolist()
    schedule = SGDSchedule(settings.epochs, settings.batch_size, settings.momentum)
    classes = int(train_y.max()) + 1
    scores = []
    for start in range(0, settings.trials, settings.trials_per_batch):
        chosen = slice(start, start + settings.trials_per_batch)
        probes = train_probes(*search, classes, lrs[chosen], wds[chosen], schedule, start, precision=precision)
        scores += probes.topk_accuracy(*validation, ks=(1,))[:, 0].tolist()
    best = int(np.argmax(scores))
    del search, validation
    synchronise(device)
    searched = time.perf_counter()
    probe = train_probes(features, labels, classes, [lrs[best]], [wds[best]], schedule, 1, precision=precision)
    test = normalised_on_device(test_x, device, precision, "generated test")
    test_top1 = probe.topk_accuracy(test, torch.from_numpy(test_y.astype(np.int64)).to(device), ks=(1,))[0, 0].item()
    finished = time.perf_counter()
    return {"timings": {"search_s": searched - started, "final_s": finished - searched}, "test_top1": test_top1,
            "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
            "matmul_precision": "tf32" if precision == "float32" and device.type == "cuda" else precision}


def graph_comparison(args) -> None:
    """On a GPU: the same probe with every kernel launched, and with epochs replayed as CUDA graphs."""
    device = torch.device(args.device)
    precision = resolve_precision(args.precision, device)
    schedule = SGDSchedule(args.epochs, args.batch_size, 0.9)
    features, labels = clustered_features(args.classes, args.per_class + args.test_per_class, args.dim, 0, args.spread, device)
    is_test = torch.arange(labels.numel(), device=device) % (args.per_class + args.test_per_class) >= args.per_class
    normalised = l2_normalise(features, feature_dtype(precision, device, torch.float16))
    train_x, test_x = normalised[~is_test].contiguous(), normalised[is_test].contiguous()
    train_y, test_y = labels[~is_test].contiguous(), labels[is_test].contiguous()
    trained, seconds = {}, {}
    for graph in (False, True, False, True):  # the first of each warms up
        synchronise(device)
        started = time.perf_counter()
        trained[graph] = train_probes(train_x, train_y, args.classes, [args.lr], [args.weight_decay], schedule, 22,
                                      precision=precision, cuda_graph=graph)
        synchronise(device)
        seconds[graph] = time.perf_counter() - started
    steps = args.epochs * -(-train_y.numel() // args.batch_size)
    difference = (trained[True].weight - trained[False].weight).abs().max().item()
    print(f"{args.classes} classes x {args.per_class} train, {args.dim} dims, {args.epochs} epochs, batch "
          f"{args.batch_size}, {precision}: {steps} steps")
    for graph, name in ((False, "kernels launched"), (True, "CUDA graph epochs")):
        top1 = trained[graph].topk_accuracy(test_x, test_y)[0, 0].item()
        print(f"{name}: {seconds[graph]:.2f} s ({1e6 * seconds[graph] / steps:.0f} us per step), test top-1 {top1:.2f}%")
    print(f"speed-up {seconds[False] / seconds[True]:.2f}x; largest weight difference {difference:.3g}")


def full_protocol(args) -> None:
    from imagenet_cog.probes.search import ProbeJob, SearchSettings, probe_dataset

    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.set_float32_matmul_precision("high")
    classes, per_class, test_per_class, dim = args.classes, args.per_class, args.test_per_class, args.dim
    features, labels = clustered_features(classes, per_class + test_per_class, dim, 0, args.spread, device)
    is_test = (torch.arange(labels.numel(), device=device) % (per_class + test_per_class)) >= per_class
    train_x = features[~is_test].half().cpu().numpy()
    test_x = features[is_test].half().cpu().numpy()
    train_y, test_y = labels[~is_test].cpu().numpy(), labels[is_test].cpu().numpy()
    del features, labels
    if device.type == "cuda":
        torch.cuda.empty_cache()
    settings = SearchSettings(trials=args.trials, epochs=args.epochs, batch_size=args.batch_size,
                              trials_per_batch=args.trials_per_batch, precision=args.precision)
    precision = resolve_precision(args.precision, device)
    side = 8192 if device.type == "cuda" else 2048
    peak = matmul_flops_per_second(side, side, side, device, operand_dtype(precision), rounds=10)
    if importlib.util.find_spec("optuna"):
        with tempfile.TemporaryDirectory() as folder:
            result = probe_dataset(ProbeJob(train_x, train_y, test_x, test_y, settings=settings, device=args.device), shots="all", seed=22, journal=f"{folder}/study.jsonl")
        search = "Optuna TPE"
    else:
        result = protocol_without_optuna(train_x, train_y, test_x, test_y, settings, device)
        search = "no Optuna installed: log-uniform candidates"
    search_rows = train_y.size - classes * int(settings.val_fraction * per_class)
    flops = 4.0 * dim * classes * settings.epochs * (search_rows * settings.trials + train_y.size)
    roofline = flops / peak
    total = result["timings"]["search_s"] + result["timings"]["final_s"]
    print(f"{result['device']}: {settings.trials} trials + final fit of {classes} classes x {train_y.size} "
          f"features, {dim} dims, {settings.epochs} epochs, trials_per_batch {settings.trials_per_batch}, "
          f"matmul precision {result['matmul_precision']}; search: {search}")
    print(f"search {result['timings']['search_s']:.1f} s, final {result['timings']['final_s']:.1f} s, "
          f"test top-1 {result['test_top1']:.2f}%")
    print(f"{flops / 1e12:.1f} TFLOP of training matmuls; roofline at the measured {side}^3 "
          f"{result['matmul_precision']} matmul rate ({peak / 1e12:.2f} TFLOP/s): {roofline:.1f} s; "
          f"achieved {100 * roofline / total:.0f}% of it")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--full", action="store_true",
                        help="the whole tuned protocol at IN-1K size (1000 classes x 1100 + 50, 2048 dims, "
                             "100 epochs): meant for a GPU; give smaller sizes to try it on a CPU")
    parser.add_argument("--classes", type=int, help="default 100, --full 1000")
    parser.add_argument("--per-class", type=int, help="training samples per class; default 100, --full 1100")
    parser.add_argument("--test-per-class", type=int, help="default 20, --full 50")
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--spread", type=float, default=12.0, help="per-dimension cluster noise (centres are standard normal)")
    parser.add_argument("--epochs", type=int, help="default 30, --full 100")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=10.0)
    parser.add_argument("--weight-decay", type=float, default=1e-6)
    parser.add_argument("--seeds", type=int, nargs="+", default=[22, 37, 45])
    parser.add_argument("--threads", type=int, default=1, help="one thread measures steadily on a shared machine")
    parser.add_argument("--precision", default="auto", choices=PRECISIONS,
                        help="ours: matmul operands (auto: bfloat16 where the device has it natively)")
    parser.add_argument("--together", type=int, default=4, help="candidates trained in one pass, timed as well")
    parser.add_argument("--trials", type=int, default=30, help="--full: search trials")
    parser.add_argument("--trials-per-batch", type=int, default=1, help="--full: candidates trained together")
    parser.add_argument("--graph", action="store_true",
                        help="on a GPU: time one probe with kernels launched one by one against CUDA graph epochs")
    args = parser.parse_args()
    sizes = {"classes": (100, 1000), "per_class": (100, 1100), "test_per_class": (20, 50), "epochs": (30, 100)}
    for name, (comparison, full) in sizes.items():
        if getattr(args, name) is None:
            setattr(args, name, full if args.full else comparison)
    if args.graph:
        graph_comparison(args)
    elif args.full:
        full_protocol(args)
    else:
        cpu_comparison(args)


if __name__ == "__main__":
    main()
