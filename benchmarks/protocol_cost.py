"""What the whole protocol costs: measured rates times counted work, per stage, as a run pays it.

Measures this machine's rates (and a GPU's with ``--device cuda``) with the workflow's own
code, each in steady state (warm-up runs untimed):

* extraction: images/s of ``extract_shard`` per model on generated JPEGs (shorter side
  300-500 px) from two shard sizes, which separates the fixed cost of a shard (writing it,
  building the model) from the per-image cost; building the model, and loading a ResNet-50
  checkpoint file (``torch.load`` and ``load_state_dict``) on their own;
* probes: the time of one trial-step (one candidate's SGD step) at the protocol's shape
  (1000 classes, the model's width) at two batch sizes, which separates the step's fixed
  part (the passes over the weights) from its per-row part (the products, the logits), at
  the config's stacking (``trials_per_batch`` candidates x the seeds a job trains together)
  and step (``probes.fused``); the time of an epoch where the products are negligible; the
  scoring rate (validation after each trial, test once: float32 products, TF32 on a GPU);
* the k-NN probe (issue #33): FLOP/s of its float32 similarity products (TF32 off) and
  similarities/s through ``torch.topk`` on one block of ``probes.knn``'s size;
* loading: bytes/s of reading a float16 feature file and of preparing its rows;
* per job: starting Python with a probe job's imports, starting CUDA in a fresh process,
  and compiling the fused step in a fresh process (the on-disk cache warm, as after a job's
  first run).

Counts the work of the protocol for a config (the paper's by default; ``--config`` reads the
probes and features keys, schema defaults fill the rest): images, shards and extraction jobs
(``features.group``), probe jobs (``probes.group``: a job per seed, per N, or one resident
job per dataset), trial-steps by batch size, epochs, scoring FLOPs with each concept's
validation rows (``int(val_fraction * n_c)`` per concept, from the shipped Fall 2011 counts
for the levels), bytes read and prepared. Prints the projected wall time per stage for this
machine and the device, serially and with extraction and probes overlapped (an extraction
job and a probe job at a time on one GPU, e.g. ``--resources gpu=2``: the probes of a
dataset run while the next one is extracted), beside the authors' V100 times; then the
k-NN probe's cost on the same grid (one job per dataset: a similarity product per distinct
training set, top-k, reading the features) beside the linear probes'.

    python benchmarks/protocol_cost.py --threads 2                       # ~3 minutes on 2 cores
    python benchmarks/protocol_cost.py --device cuda --write-rates h100.json
    python benchmarks/protocol_cost.py --rates h100.json                 # project with saved rates
    python benchmarks/protocol_cost.py --skip-host --rates resources/rates/h100.yaml   # the shipped figures
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml

REPOSITORY = Path(__file__).resolve().parent.parent
SCHEMA = REPOSITORY / "workflow" / "schemas" / "config.schema.yaml"
IMAGE_COUNTS = REPOSITORY / "resources" / "imagenet21k_fall11_image_counts.tsv"
sys.path.insert(0, str(REPOSITORY / "workflow"))

# The counting and projecting arithmetic is the workflow's plan stage's (one copy).
from imagenet_cog.core.naming import KNN  # noqa: E402
from imagenet_cog.plan.cost import (  # noqa: E402
    AUTHORS_EXTRACTION_MIN_PER_DATASET,
    AUTHORS_PROBE_MIN_PER_DATASET_AND_SEED,
    STAGES,
    count_work,
    hours,
    overlapped,
    own_job_stages,
    paper_datasets,
    project,
    stacking,
    stage_seconds,
)
from imagenet_cog.plan.rates import read_rates  # noqa: E402
from imagenet_cog.probes.kinds import KINDS  # noqa: E402


def schema_defaults(properties: dict) -> dict:
    """Each property's default, an object's (probes.knn, probes.mlp) with its own properties'
    defaults beneath it, as the workflow's validation fills them."""
    defaults = {}
    for key, spec in properties.items():
        if isinstance(spec.get("default"), dict) and "properties" in spec:
            defaults[key] = {**schema_defaults(spec["properties"]), **spec["default"]}
        elif "default" in spec:
            defaults[key] = spec["default"]
    return defaults


def protocol_settings(config: Path | None) -> dict:
    """The probes and features keys: schema defaults (the paper's protocol), then the config's
    (an object's keys merged into its defaults)."""
    schema = yaml.safe_load(SCHEMA.read_text())["properties"]
    settings = {section: schema_defaults(schema[section]["properties"]) for section in ("probes", "features")}
    if config:
        given = yaml.safe_load(config.read_text()) or {}
        for section, values in settings.items():
            for key, value in (given.get(section) or {}).items():
                values[key] = {**values[key], **value} if isinstance(values.get(key), dict) else value
    return settings



# measuring ---------------------------------------------------------------------------------


def synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_extraction(arch: str, device: str, decode: str, sizes: tuple[int, int], batch_size: int,
                       num_workers: int) -> tuple[float, float]:
    """(images/s, fixed seconds per shard) of extract_shard, from two shard sizes."""
    sys.path.insert(0, str(REPOSITORY / "benchmarks"))
    from features_benchmark import generate_images

    from imagenet_cog.features.extract import ExtractionOptions, SplitImages, extract_shard
    from imagenet_cog.models.registry import ModelSpec

    spec = ModelSpec(arch, arch, "random")
    with tempfile.TemporaryDirectory(prefix="protocol-cost-") as folder:
        root = Path(folder)
        table = generate_images(root, sizes[1], seed=0)
        seconds = []
        for count in (sizes[0], *sizes):  # the first run warms caches and the device up
            started = time.perf_counter()
            extract_shard(spec, SplitImages(table, root / "images", "l1", "train"), 0, count, root / f"{count}.h5",
                          ExtractionOptions(batch_size=batch_size, num_workers=num_workers, device=device, decode=decode))
            seconds.append(time.perf_counter() - started)
            (root / f"{count}.h5").unlink()
    small, large = seconds[1:]
    rate = (sizes[1] - sizes[0]) / max(large - small, 1e-9)
    return rate, max(0.0, small - sizes[0] / rate)


def measure_model_load(arch: str, device: str) -> tuple[float, float]:
    """(seconds to build the model with random weights, seconds to load its checkpoint file)."""
    from imagenet_cog.models.registry import ModelSpec, build_model

    spec = ModelSpec(arch, arch, "random")
    build_model(spec)  # warm: imports, allocator
    started = time.perf_counter()
    model = build_model(spec)
    built = time.perf_counter() - started
    network = model.network.to(device)
    with tempfile.TemporaryDirectory(prefix="protocol-cost-") as folder:
        path = Path(folder) / "checkpoint.pt"
        torch.save(network.state_dict(), path)
        started = time.perf_counter()
        network.load_state_dict(torch.load(path, map_location=device))
        synchronise(torch.device(device))
        loaded = time.perf_counter() - started
    return built, loaded


def measure_probe(device: torch.device, dim: int, classes: int, batch: int, precision: str, fused: bool,
                  candidates: int, runs: int, steps: int) -> dict:
    """One trial-step's fixed and per-row seconds at the protocol's shape, from steady-state
    epochs of ``steps`` full batches at two batch sizes (each epoch's own costs taken out),
    every step carrying ``candidates`` candidates of ``runs`` runs; and an epoch's seconds."""
    from imagenet_cog.probes.linear import SGDSchedule, l2_normalise, operand_dtype, train_probe_runs

    def timed(n: int, d: int, c: int, b: int, epochs: int) -> float:
        generator = torch.Generator(device=device).manual_seed(0)
        features = l2_normalise(torch.randn(n, d, generator=generator, device=device), operand_dtype(precision))
        labels = torch.randint(0, c, (n,), generator=generator, device=device)

        def train(schedule: SGDSchedule) -> None:
            train_probe_runs(features, labels, c, None, [[1.0] * candidates] * runs, [[1e-6] * candidates] * runs,
                             schedule, list(range(runs)), precision, fused=fused)

        train(SGDSchedule(1, b, 0.9))  # warm-up: kernels, compiling, allocator
        synchronise(device)
        started = time.perf_counter()
        train(SGDSchedule(epochs, b, 0.9))
        synchronise(device)
        return time.perf_counter() - started

    # an epoch's own cost: one tiny step per epoch, then eight
    one = timed(batch, 16, 8, batch, 100) / 100
    eight = timed(8 * batch, 16, 8, batch, 100) / 100
    epoch = max(0.0, one - (eight - one) / 7)
    small = max(8, batch // 8)
    per_step = {}
    for size in (batch, small):
        epochs = 2
        per_step[size] = (timed(steps * size, dim, classes, size, epochs) / epochs - epoch) / steps / (candidates * runs)
    per_row = max(0.0, (per_step[batch] - per_step[small]) / (batch - small))
    return {"probe_step_fixed_s": max(0.0, per_step[batch] - per_row * batch), "probe_step_per_row_s": per_row,
            "probe_epoch_s": epoch}


def measure_scoring(device: torch.device, dim: int, classes: int, rows: int) -> float:
    """FLOP/s of scoring (LinearProbes.topk_accuracy: float32 products, TF32 on a GPU)."""
    from imagenet_cog.probes.linear import LinearProbes, l2_normalise

    generator = torch.Generator(device=device).manual_seed(0)
    features = l2_normalise(torch.randn(rows, dim, generator=generator, device=device))
    labels = torch.randint(0, classes, (rows,), generator=generator, device=device)
    probes = LinearProbes(torch.randn(1, classes, dim, generator=generator, device=device),
                          torch.zeros(1, classes, device=device), [False])
    probes.topk_accuracy(features, labels)
    synchronise(device)
    started = time.perf_counter()
    probes.topk_accuracy(features, labels)
    synchronise(device)
    return 2.0 * rows * dim * classes / (time.perf_counter() - started)


def measure_knn(device: torch.device, dim: int, test_rows: int, train_rows: int, k: int) -> tuple[float, float]:
    """(FLOP/s of the k-NN's similarity product, similarities/s through torch.topk) on one block
    of test_rows x train_rows: float32 products with TF32 off, as the k-NN probe computes them."""
    generator = torch.Generator(device=device).manual_seed(0)
    test = torch.randn(test_rows, dim, generator=generator, device=device)
    train = torch.randn(train_rows, dim, generator=generator, device=device)
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        seconds = []
        for _ in range(2):  # the first run warms the kernels and the allocator up
            synchronise(device)
            started = time.perf_counter()
            similarities = test @ train.T
            synchronise(device)
            seconds.append(time.perf_counter() - started)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    selected = []
    for _ in range(2):
        started = time.perf_counter()
        torch.topk(similarities, min(k, train_rows), dim=1)
        synchronise(device)
        selected.append(time.perf_counter() - started)
    return 2.0 * test_rows * dim * train_rows / seconds[-1], test_rows * train_rows / selected[-1]


def measure_load(device: torch.device, dim: int, rows: int, precision: str) -> tuple[float, float]:
    """(bytes/s reading a float16 file, bytes/s preparing its rows for the probes)."""
    import h5py

    from imagenet_cog.features.store import READ_CHUNK_ROWS, read_features, write_shard
    from imagenet_cog.probes.search import SearchSettings, normalised_on_device, study_name

    rng = np.random.default_rng(0)
    features = rng.standard_normal((rows, dim), dtype=np.float32).astype(np.float16)
    labels = np.arange(rows) % 1000
    with tempfile.TemporaryDirectory(prefix="protocol-cost-") as folder:
        path = Path(folder) / "features.h5"
        write_shard(path, features, labels, np.arange(rows), [""] * rows, np.ones(rows, bool), {})
        size = path.stat().st_size
        read_features(path)  # into the page cache
        started = time.perf_counter()
        with h5py.File(path) as handle:
            for start in range(0, rows, READ_CHUNK_ROWS):
                handle["features"][start:start + READ_CHUNK_ROWS]
        raw = time.perf_counter() - started
        started = time.perf_counter()
        loaded = read_features(path)
        normalised_on_device(loaded.features, device, precision, "measure")
        study_name(loaded.features, loaded.labels, SearchSettings(), "all", 0)
        synchronise(device)
        prepared = time.perf_counter() - started - raw
    return size / raw, size / max(prepared, 1e-9)


def fresh_process_seconds(code: str, repeats: int = 3) -> float:
    """Best wall time of ``python -c code`` (Python's start and the code's imports included)."""
    best = math.inf
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPOSITORY / "workflow"), *sys.path])}
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=environment, capture_output=True)
        best = min(best, time.perf_counter() - started)
    return best


def measure_job_costs(device: torch.device, precision: str, fused: bool, repeats: int = 3) -> dict:
    """Seconds a job pays before its work: Python and a probe job's imports; CUDA's start in a
    fresh process; compiling the fused step (on-disk cache warm)."""
    imports = "import torch, h5py, numpy, optuna, imagenet_cog.probes.search, imagenet_cog.features.store, imagenet_cog.probes.linear"
    start = fresh_process_seconds(imports, repeats)
    cuda = 0.0
    if device.type == "cuda":
        cuda = max(0.0, fresh_process_seconds(f"{imports}; torch.zeros(1, device='cuda'); torch.cuda.synchronize()",
                                              repeats) - start)
    compiled = 0.0
    if fused:
        train = (f"{imports}; from imagenet_cog.probes.linear import train_probe_runs, SGDSchedule; "
                 f"x = torch.randn(64, 32, device='{device.type}'); y = torch.arange(64, device='{device.type}') % 4; "
                 f"train_probe_runs(x{'.bfloat16()' if precision == 'bfloat16' else ''}, y, 4, None, [[1.0]], [[0.0]], "
                 f"SGDSchedule(1, 16, 0.9), [0], '{precision}', fused={{}})")
        fresh_process_seconds(train.format(True), repeats=1)  # fills the on-disk cache
        compiled = max(0.0, fresh_process_seconds(train.format(True), repeats=2)
                       - fresh_process_seconds(train.format(False), repeats=2))
    return {"job_start_s": start, "cuda_start_s": cuda, "compile_s": compiled}


def measure_rates(device_name: str, models: list[str], decode: str, quick: bool, probes: dict) -> dict:
    from imagenet_cog.models.registry import REGISTRY
    from imagenet_cog.probes.fused_step import resolve_fused
    from imagenet_cog.probes.linear import resolve_precision

    device = torch.device(device_name)
    gpu = device.type == "cuda"
    precision = resolve_precision(probes.get("precision", "auto"), device)
    fused = resolve_fused(probes.get("fused", "auto"), device)
    candidates, runs = stacking(probes)
    name = torch.cuda.get_device_name(device) if gpu else f"CPU ({torch.get_num_threads()} threads)"
    rates: dict = {"device": name, "precision": precision, "fused": fused, "decode": decode,
                   "probe_stacking": [candidates, runs], "extraction_images_per_s": {}, "extraction_shard_fixed_s": {},
                   "model_build_s": {}, "checkpoint_load_s": {}}
    workers = min(8, max(1, (os.cpu_count() or 2) - 1)) if gpu else 1
    sizes = (256, 1024) if gpu else ((4, 12) if quick else (8, 24))
    for arch in models:
        rate, fixed = measure_extraction(arch, device_name, decode, sizes, 256 if gpu else 8, workers)
        built, loaded = measure_model_load(arch, device_name)
        rates["extraction_images_per_s"][arch] = rate
        rates["extraction_shard_fixed_s"][arch] = max(0.0, fixed - built)
        rates["model_build_s"][arch], rates["checkpoint_load_s"][arch] = built, loaded
        print(f"  extraction {arch}: {rate:.1f} images/s, {max(0.0, fixed - built):.2f} s per shard, model built in "
              f"{built:.2f} s, checkpoint loaded in {loaded:.2f} s", flush=True)
    dim, classes = (64, 100) if quick else (REGISTRY[models[0]].feature_dim, 1000)
    steps = 8 if gpu else (2 if quick else 3)
    if not quick:  # the plan scales a step from this shape to a model's (quick shapes are launch-bound)
        rates["probe_shape"] = [classes, dim]
    rates.update(measure_probe(device, dim, classes, probes["batch_size"], precision, fused, candidates, runs, steps))
    print(f"  probe step ({candidates} candidates x {runs} runs, {'fused' if fused else 'reference'}, {precision}, "
          f"{classes} classes x {dim} dims): {rates['probe_step_fixed_s'] * 1e6:.1f} us + "
          f"{rates['probe_step_per_row_s'] * 1e9:.1f} ns per row per trial-step "
          f"({(rates['probe_step_fixed_s'] + probes['batch_size'] * rates['probe_step_per_row_s']) * 1e6:.1f} us at batch "
          f"{probes['batch_size']}), {rates['probe_epoch_s'] * 1e6:.0f} us per epoch", flush=True)
    rates["scoring_flops_per_s"] = measure_scoring(device, dim, classes, 65536 if gpu else 4096)
    print(f"  scoring: {rates['scoring_flops_per_s'] / 1e12:.2f} TFLOP/s (float32{', TF32' if gpu else ''})", flush=True)
    knn = probes["knn"]
    test_rows = 256 if quick else knn["test_block"]
    train_rows = min(knn["train_block"], 65536 if gpu else (4096 if quick else 16384))
    rates["knn_flops_per_s"], rates["topk_values_per_s"] = measure_knn(device, dim, test_rows, train_rows,
                                                                       max(knn["k"]))
    print(f"  k-NN ({test_rows} x {train_rows} block): {rates['knn_flops_per_s'] / 1e12:.2f} TFLOP/s float32 products "
          f"(TF32 off), {rates['topk_values_per_s'] / 1e9:.2f} G similarities/s through top-{max(knn['k'])}", flush=True)
    rates["read_bytes_per_s"], rates["prepare_bytes_per_s"] = measure_load(
        device, dim, 131_072 if gpu else (8_192 if quick else 65_536), precision)
    print(f"  load: read {rates['read_bytes_per_s'] / 1e9:.2f} GB/s of float16 file, prepare "
          f"{rates['prepare_bytes_per_s'] / 1e9:.2f} GB/s of its rows", flush=True)
    rates.update(measure_job_costs(device, precision, fused, 1 if quick else 3))
    print(f"  per job: start {rates['job_start_s']:.1f} s, CUDA start {rates['cuda_start_s']:.1f} s, compile "
          f"{rates['compile_s']:.1f} s", flush=True)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, help="a workflow config (probes/features keys); default the paper's")
    parser.add_argument("--split-summary", type=Path, help="results/splits/summary.tsv of a real run: exact image counts")
    parser.add_argument("--models", nargs="+", default=["resnet50"], help="registry architectures")
    parser.add_argument("--device", choices=["cuda"], help="also measure this device")
    parser.add_argument("--rates", type=Path, help="the device's rates from an earlier --write-rates")
    parser.add_argument("--write-rates", type=Path, help="write the device's (or else this machine's) measured rates")
    parser.add_argument("--decode", choices=["auto", "host", "device"], default="auto")
    parser.add_argument("--threads", type=int, help="torch threads on the host (default: all)")
    parser.add_argument("--quick", action="store_true", help="smallest measurements (a smoke test: rates not to quote)")
    parser.add_argument("--skip-host", action="store_true", help="measure only --device")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from imagenet_cog.models.registry import REGISTRY

    settings = protocol_settings(args.config)
    probes = settings["probes"]
    datasets = paper_datasets(IMAGE_COUNTS, args.split_summary, probes["val_fraction"])
    print(f"protocol: {len(datasets)} datasets ({', '.join(f'{d.name} {d.train}+{d.test}' for d in datasets)}), "
          f"shots {probes['shots']}, {len(probes['seeds'])} seeds, {probes['trials']} trials x "
          f"{probes['epochs']} epochs, batch {probes['batch_size']}, features {settings['features']['dtype']}, "
          f"probes.group {probes.get('group', 'seed')}, features.group {settings['features'].get('group', 'shard')}")
    columns = []
    if not args.skip_host:
        print(f"measuring this machine ({torch.get_num_threads()} torch threads):", flush=True)
        columns.append(measure_rates("cpu", args.models, "host", args.quick, probes))
    if args.device:
        print(f"measuring {args.device}:", flush=True)
        columns.append(measure_rates(args.device, args.models, args.decode, args.quick, probes))
    elif args.rates:  # protocol_cost.py's JSON or a YAML rates file (resources/rates/)
        saved = yaml.safe_load(args.rates.read_text())
        device = {**read_rates(args.rates).values, "probe_stacking": saved.get("probe_stacking", [1, 1])}
        if tuple(device["probe_stacking"]) != stacking(probes):
            print(f"note: {args.rates} has probe rates for {device.get('probe_stacking', [1, 1])} (candidates, runs) "
                  f"per step; this config trains {list(stacking(probes))}: measure them again for it", flush=True)
        columns.append(device)
    if args.write_rates and columns:
        args.write_rates.write_text(json.dumps(columns[-1], indent=1) + "\n")

    for arch in args.models:
        print_projection(arch, REGISTRY[arch].feature_dim, datasets, probes, settings["features"], columns)


def print_projection(arch: str, dim: int, datasets: list, probes: dict, features: dict, columns: list[dict]) -> None:
    """The counted work of one model, the projected seconds per stage on every measured or read
    device beside the authors' V100 times, then the k-NN's beside the linear probes'."""
    work = count_work(datasets, dim, probes, features)
    total = {key: sum(getattr(counted, key) for counted in work.values())
             for key in ("images", "shards", "extraction_jobs", "probe_jobs", "train_flops", "scoring_flops",
                         "file_bytes", "prepared_bytes")}
    trial_steps = sum(sum(counted.trial_steps.values()) for counted in work.values())
    print(f"\n{arch}: {total['images'] / 1e6:.2f}M images in {total['shards']} shards, {total['extraction_jobs']} "
          f"extraction jobs; {total['probe_jobs']} probe jobs, {total['train_flops'] / 1e15:.1f} PFLOP training + "
          f"{total['scoring_flops'] / 1e15:.2f} PFLOP scoring, {trial_steps / 1e6:.1f}M trial-steps; probe jobs "
          f"read {total['file_bytes'] / 1e12:.2f} TB of files and prepare {total['prepared_bytes'] / 1e12:.2f} TB")
    projected = [(rates["device"], project(work, rates, arch, dim)) for rates in columns]
    authors = {"extraction": AUTHORS_EXTRACTION_MIN_PER_DATASET * 60 * len(datasets),
               "probe steps": AUTHORS_PROBE_MIN_PER_DATASET_AND_SEED * 60 * len(datasets) * len(probes["seeds"])}
    print(f"{'stage':<24}" + "".join(f"{name[:34]:>36}" for name, _ in projected) + f"{'authors, V100 (N = all)':>28}")
    for stage in STAGES:
        reference = hours(authors[stage]) if stage in authors else ""
        print(f"{stage:<24}" + "".join(f"{hours(sum(t[stage] for t in times.values())):>36}" for _, times in projected)
              + f"{reference:>28}")
    print(f"{'total, serial':<24}" + "".join(
        f"{hours(sum(sum(t.values()) for t in times.values())):>36}" for _, times in projected)
        + f"{hours(sum(authors.values())):>28}")
    print(f"{'total, overlapped':<24}" + "".join(f"{hours(overlapped(times)):>36}" for _, times in projected))
    print_knn(arch, dim, datasets, probes, features, columns, projected)


def print_knn(arch: str, dim: int, datasets: list, probes: dict, features: dict, columns: list[dict],
              linear: list[tuple[str, dict]]) -> None:
    """The k-NN probe's work on the linear probe's grid and its seconds per stage on every
    device with k-NN rates, beside the linear probes' seconds (steps, scoring, loading, starts)."""
    work = count_work(datasets, dim, probes, features, own_job_kinds=(KNN,))
    jobs = [counted.own_jobs[KNN] for counted in work.values()]
    flops = sum(job.priced["knn_flops_per_s"] for job in jobs)
    similarities = sum(job.priced["topk_values_per_s"] for job in jobs)
    read = sum(job.file_bytes for job in jobs)
    settings = probes[KNN]
    print(f"\n{arch}, k-NN probe (issue #33) on the same grid: {sum(job.jobs for job in jobs)} jobs (one per "
          f"dataset), {flops / 1e15:.2f} PFLOP of float32 similarity products (TF32 off), {similarities / 1e12:.2f}T "
          f"similarities through top-{max(settings['k'])} (blocks of {settings['test_block']} x "
          f"{settings['train_block']}), {read / 1e12:.3f} TB of features read")
    print(f"{'stage':<24}" + "".join(f"{name[:34]:>36}" for name, _ in linear))
    priced = [all(key in rates for key in KINDS[KNN].own_rates) for rates in columns]
    knn = [project(work, rates, arch, dim) if can else None for rates, can in zip(columns, priced)]
    for stage in own_job_stages(KNN):
        print(f"{stage:<24}" + "".join(f"{hours(sum(t[stage] for t in times.values())) if times else 'no k-NN rates':>36}"
                                       for times in knn))
    knn_total = [sum(stage_seconds(t, f"{KNN} ") for t in times.values()) if times else None for times in knn]
    linear_total = [sum(stage_seconds(t, "probe") for t in times.values()) for _, times in linear]
    print(f"{'k-NN, whole grid':<24}" + "".join(f"{f'{hours(s)} ({s:.0f} s)' if s is not None else '':>36}"
                                              for s in knn_total))
    print(f"{'linear probes':<24}" + "".join(f"{hours(s):>36}" for s in linear_total))
    print(f"{'k-NN / linear probes':<24}" + "".join(f"{s / t if s is not None and t else float('nan'):>36.4f}"
                                                  for s, t in zip(knn_total, linear_total)))

if __name__ == "__main__":
    main()
