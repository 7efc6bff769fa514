"""What the whole protocol costs: measured rates times counted work, per stage.

Measures this machine's rates at small size, with the workflow's own code:

* extraction: images/s of ``extract_shard`` per model on generated JPEGs (shorter side
  300-500 px), from two shard sizes so that the fixed cost of a shard (building the model,
  writing the file) is separated from the per-image cost;
* probes: training FLOP/s of ``train_probes`` at the protocol's shape (1000 classes, the
  model's feature width, batch 1024, 4 n d C FLOPs per epoch), and the time of one SGD step
  and one epoch where the products are negligible (what few-shot probes pay);
* loading: bytes/s of reading a float16 feature file (HDF5 blocks, page cache warm), and
  bytes/s of preparing the rows a job uses (widening to float32, ``normalised_on_device``,
  the study-name hash). Every probe job reads its whole training file, since a few-shot
  job's validation rows (a random fifth of every class) touch every 1024-row HDF5 chunk,
  but prepares only the rows it uses;
* job start: seconds to start a Python process and import what a probe job imports.

Counts the work of the protocol for a config (the paper's by default; ``--config`` reads
the probes and features keys of a workflow config, schema defaults for the rest): images
per model, shards, probe jobs, training FLOPs, SGD steps and epochs, rows read (with
``probes.seeds_together`` one job per dataset and N, whose steps carry every seed). Prints the
projected wall time per stage for this machine, and for a device whose rates it measures
(``--device cuda``) or reads (``--rates rates.json``, as written by ``--write-rates``),
beside the authors' published V100 times. Everything runs serially on one device: a
cluster divides the wall time by its parallel jobs.

    python benchmarks/protocol_cost.py                       # ~1-2 minutes on 2 cores
    python benchmarks/protocol_cost.py --device cuda --write-rates h100.json
    python benchmarks/protocol_cost.py --rates h100.json     # project with saved rates
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

REPOSITORY = Path(__file__).resolve().parent.parent
SCHEMA = REPOSITORY / "workflow" / "schemas" / "config.schema.yaml"
IMAGE_COUNTS = REPOSITORY / "resources" / "imagenet21k_fall11_image_counts.tsv"

IN1K_TRAIN, IN1K_TEST = 1_281_167, 50_000  # the official training and validation sets
LEVELS, CONCEPTS_PER_LEVEL, TEST_PER_CONCEPT, MAX_TRAIN_PER_CONCEPT, MIN_IMAGES = 5, 1000, 50, 1300, 782

# Authors' README (protocol-facts.md): V100 with 8 CPU cores.
AUTHORS_EXTRACTION_MIN_PER_DATASET = 60
AUTHORS_PROBE_MIN_PER_DATASET_AND_SEED = 75


@dataclass(frozen=True)
class Dataset:
    name: str
    train: int
    test: int
    classes: int


def level_train_images() -> int:
    """Training images of a level, estimated from the Fall 2011 counts: 1000 concepts times
    the mean of min(n - 50, 1300) over concepts with >= 782 images (the exact figure, from a
    real run's results/splits/summary.tsv, goes in with --split-summary)."""
    counts = [int(line.split("\t")[1]) for line in IMAGE_COUNTS.read_text().splitlines()[1:]]
    kept = [min(count - TEST_PER_CONCEPT, MAX_TRAIN_PER_CONCEPT) for count in counts if count >= MIN_IMAGES]
    return round(CONCEPTS_PER_LEVEL * sum(kept) / len(kept))


def paper_datasets(split_summary: Path | None) -> list[Dataset]:
    if split_summary:
        lines = [line.split("\t") for line in split_summary.read_text().splitlines()]
        header, rows = lines[0], lines[1:]
        column = {name: header.index(name) for name in ("dataset", "concepts", "train_images", "test_images")}
        return [Dataset(row[column["dataset"]], int(row[column["train_images"]]),
                        int(row[column["test_images"]]), int(row[column["concepts"]])) for row in rows]
    per_level = level_train_images()
    return [Dataset("in1k", IN1K_TRAIN, IN1K_TEST, 1000)] + [
        Dataset(f"l{level}", per_level, CONCEPTS_PER_LEVEL * TEST_PER_CONCEPT, CONCEPTS_PER_LEVEL)
        for level in range(1, LEVELS + 1)]


def protocol_settings(config: Path | None) -> dict:
    """The probes and features keys: schema defaults (the paper's protocol), then the config's."""
    schema = yaml.safe_load(SCHEMA.read_text())["properties"]
    settings = {section: {key: spec["default"] for key, spec in schema[section]["properties"].items() if "default" in spec}
                for section in ("probes", "features")}
    if config:
        given = yaml.safe_load(config.read_text()) or {}
        for section in settings:
            settings[section].update(given.get(section) or {})
    return settings


# counting ----------------------------------------------------------------------------------


@dataclass
class Work:
    images: int = 0
    shards: int = 0
    probe_jobs: int = 0
    train_flops: float = 0.0
    eval_flops: float = 0.0
    steps: int = 0
    epochs: int = 0
    file_bytes: float = 0.0
    prepared_bytes: float = 0.0
    few_shot_prepared_bytes: float = 0.0


def count_work(datasets: list[Dataset], dim: int, probes: dict, features: dict) -> Work:
    """The work of one model through the whole protocol."""
    work = Work()
    trials, epochs, batch = probes["trials"], probes["epochs"], probes["batch_size"]
    bytes_per_value = 2 if features["dtype"] == "float16" else 4
    seeds = len(probes["seeds"])
    # probes.seeds_together: one job per dataset and N runs every seed, each SGD step and epoch
    # carrying all seeds' probes (batched products), so their fixed costs are paid once; so are
    # those of the trials_per_batch candidates of a search pass
    runs_per_job = seeds if probes.get("seeds_together") else 1
    passes = math.ceil(trials / probes["trials_per_batch"])
    for data in datasets:
        work.images += data.train + data.test
        work.shards += math.ceil(data.train / features["shard_size"]) + math.ceil(data.test / features["shard_size"])
        validation = data.classes * int(probes["val_fraction"] * data.train / data.classes)
        for shots in probes["shots"]:
            if shots == "all":
                search, final = data.train - validation, data.train
                rows = data.train
            else:
                search = final = int(shots) * data.classes
                # A few-shot job reads its validation rows, its two N-shot samples (search and
                # final fit, which may overlap) and the test set; the seeds of one job hold the
                # union of their validation splits (each row in a seed's with chance val_fraction).
                held_out = 1.0 - (1.0 - probes["val_fraction"]) ** runs_per_job
                rows = min(data.train, int(held_out * data.train) + runs_per_job * (search + final))
            work.train_flops += seeds * 4.0 * dim * data.classes * epochs * (trials * search + final)
            work.eval_flops += seeds * 2.0 * dim * data.classes * (trials * validation + data.test)
            work.steps += seeds // runs_per_job * epochs * (passes * math.ceil(search / batch) + math.ceil(final / batch))
            work.epochs += seeds // runs_per_job * epochs * (passes + 1)
            for _ in range(seeds // runs_per_job):
                work.probe_jobs += 1
                prepared = (rows + data.test) * dim * bytes_per_value
                work.prepared_bytes += prepared
                work.file_bytes += (data.train + data.test) * dim * bytes_per_value
                if shots != "all":
                    work.few_shot_prepared_bytes += prepared
    return work


# measuring ---------------------------------------------------------------------------------


def synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_extraction(arch: str, device: str, decode: str, sizes: tuple[int, int], batch_size: int,
                       num_workers: int) -> tuple[float, float]:
    """(images/s, fixed seconds per shard) of extract_shard, from two shard sizes."""
    sys.path.insert(0, str(REPOSITORY / "benchmarks"))
    from features_benchmark import generate_images

    from imagenet_cog.features.extract import extract_shard
    from imagenet_cog.models.registry import ModelSpec

    spec = ModelSpec(arch, arch, "random")
    with tempfile.TemporaryDirectory(prefix="protocol-cost-") as folder:
        root = Path(folder)
        table = generate_images(root, sizes[1], seed=0)
        seconds = []
        for count in (sizes[0], *sizes):  # the first run warms caches and the device up
            started = time.perf_counter()
            extract_shard(spec=spec, split_table=table, image_root=root / "images", dataset="l1",
                          split="train", shard=0, shard_size=count, output=root / f"{count}.h5",
                          batch_size=batch_size, num_workers=num_workers, device=device, decode=decode)
            seconds.append(time.perf_counter() - started)
            (root / f"{count}.h5").unlink()
    small, large = seconds[1:]
    rate = (sizes[1] - sizes[0]) / max(large - small, 1e-9)
    return rate, max(0.0, small - sizes[0] / rate)


def measure_probe(device: torch.device, dim: int, classes: int, rows: int, epochs: int, batch: int,
                  precision: str, candidates: int = 1, runs: int = 1) -> dict:
    """Training FLOP/s at the protocol's shape; step and epoch times where FLOPs are nil. Each
    step carries ``candidates`` probes (trials_per_batch) of each of ``runs`` runs (the seeds
    of a job with probes.seeds_together), as the workflow's passes do."""
    from imagenet_cog.probes.linear import SGDSchedule, l2_normalise, operand_dtype, train_probe_runs

    def timed(n: int, d: int, c: int, e: int) -> float:
        generator = torch.Generator(device=device).manual_seed(0)
        features = l2_normalise(torch.randn(n, d, generator=generator, device=device), operand_dtype(precision))
        labels = torch.randint(0, c, (n,), generator=generator, device=device)

        def train(schedule: SGDSchedule) -> None:
            train_probe_runs(features, labels, c, None, [[1.0] * candidates] * runs, [[1e-6] * candidates] * runs,
                             schedule, list(range(runs)), precision)

        train(SGDSchedule(1, batch, 0.9))
        synchronise(device)
        started = time.perf_counter()
        train(SGDSchedule(e, batch, 0.9))
        synchronise(device)
        return time.perf_counter() - started

    # Tiny products: one step per epoch, then eight, for 200 epochs.
    one = timed(batch, 16, 8, 200) / 200
    eight = timed(8 * batch, 16, 8, 200) / 200
    step = max(0.0, (eight - one) / 7)
    epoch = max(0.0, one - step)
    big = timed(rows, dim, classes, epochs)
    # The products' share of the large run: what the step and epoch overheads leave.
    products = max(0.5 * big, big - epochs * (math.ceil(rows / batch) * step + epoch))
    return {"probe_flops_per_s": 4.0 * rows * dim * classes * epochs * candidates * runs / products,
            "probe_step_s": step, "probe_epoch_s": epoch}


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


def measure_job_start() -> float:
    """Seconds to start Python and import what a probe job imports (best of three)."""
    imports = "import torch, h5py, numpy, imagenet_cog.probes.search, imagenet_cog.features.store, imagenet_cog.probes.linear"
    try:
        import optuna  # noqa: F401
        imports += ", optuna"
    except ImportError:
        pass
    best = math.inf
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", imports], check=True, env=os.environ.copy())
        best = min(best, time.perf_counter() - started)
    return best


def measure_rates(device_name: str, models: list[str], decode: str, quick: bool, stacking: tuple[int, int] = (1, 1)) -> dict:
    """``stacking``: (candidates, runs) per SGD step, as the config trains them."""
    from imagenet_cog.models.registry import REGISTRY
    from imagenet_cog.probes.linear import resolve_precision

    device = torch.device(device_name)
    gpu = device.type == "cuda"
    precision = resolve_precision("auto", device)
    name = torch.cuda.get_device_name(device) if gpu else f"CPU ({torch.get_num_threads()} threads)"
    rates: dict = {"device": name, "precision": precision, "decode": decode,
                   "extraction_images_per_s": {}, "extraction_shard_fixed_s": {}}
    workers = min(8, max(1, (os.cpu_count() or 2) - 1)) if gpu else 1
    sizes = (256, 1024) if gpu else ((4, 12) if quick else (8, 24))
    for arch in models:
        rate, fixed = measure_extraction(arch, device_name, decode, sizes, 256 if gpu else 8, workers)
        rates["extraction_images_per_s"][arch] = rate
        rates["extraction_shard_fixed_s"][arch] = fixed
        print(f"  extraction {arch}: {rate:.1f} images/s, {fixed:.1f} s fixed per shard", flush=True)
    dim = REGISTRY[models[0]].feature_dim
    rows, epochs = (1_000_000, 10) if gpu else ((2048, 2) if quick else (8192, 2))
    rates.update(measure_probe(device, dim, 1000, rows, epochs, 1024, precision, *stacking))
    rates["probe_stacking"] = list(stacking)
    print(f"  probe ({stacking[0]} candidates x {stacking[1]} runs per step): "
          f"{rates['probe_flops_per_s'] / 1e12:.2f} TFLOP/s ({precision}), "
          f"{rates['probe_step_s'] * 1e6:.0f} us per step, {rates['probe_epoch_s'] * 1e6:.0f} us per epoch", flush=True)
    rates["read_bytes_per_s"], rates["prepare_bytes_per_s"] = measure_load(
        device, dim, 131_072 if gpu else (16_384 if quick else 65_536), precision)
    print(f"  load: read {rates['read_bytes_per_s'] / 1e9:.2f} GB/s of float16 file, prepare "
          f"{rates['prepare_bytes_per_s'] / 1e9:.2f} GB/s of its rows", flush=True)
    rates["job_start_s"] = measure_job_start()
    print(f"  job start: {rates['job_start_s']:.1f} s", flush=True)
    return rates


# projecting --------------------------------------------------------------------------------


def project(work: Work, rates: dict, arch: str) -> dict[str, float]:
    """Seconds per stage on one device, serially."""
    probe_compute = (work.train_flops + work.eval_flops) / rates["probe_flops_per_s"] \
        + work.steps * rates["probe_step_s"] + work.epochs * rates["probe_epoch_s"]
    return {
        "extraction": work.images / rates["extraction_images_per_s"][arch]
                      + work.shards * rates["extraction_shard_fixed_s"][arch],
        "probe compute": probe_compute,
        "probe loading": work.file_bytes / rates["read_bytes_per_s"]
                         + work.prepared_bytes / rates["prepare_bytes_per_s"],
        "probe job starts": work.probe_jobs * rates["job_start_s"],
    }


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 360 else f"{seconds / 60:.1f} min"


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
    parser.add_argument("--quick", action="store_true", help="smallest measurements (a smoke test)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from imagenet_cog.models.registry import REGISTRY

    settings = protocol_settings(args.config)
    datasets = paper_datasets(args.split_summary)
    probes = settings["probes"]
    print(f"protocol: {len(datasets)} datasets ({', '.join(f'{d.name} {d.train}+{d.test}' for d in datasets)}), "
          f"shots {probes['shots']}, {len(probes['seeds'])} seeds, {probes['trials']} trials x "
          f"{probes['epochs']} epochs, batch {probes['batch_size']}, features {settings['features']['dtype']}")
    stacking = (probes["trials_per_batch"], len(probes["seeds"]) if probes.get("seeds_together") else 1)
    print(f"measuring this machine ({torch.get_num_threads()} torch threads):", flush=True)
    host = measure_rates("cpu", args.models, "host", args.quick, stacking)
    device = None
    if args.device:
        print(f"measuring {args.device}:", flush=True)
        device = measure_rates(args.device, args.models, args.decode, args.quick, stacking)
    elif args.rates:
        device = json.loads(args.rates.read_text())
        if tuple(device.get("probe_stacking", (1, 1))) != stacking:
            print(f"note: {args.rates} has probe rates for {device.get('probe_stacking', [1, 1])} (candidates, runs) "
                  f"per step; this config trains {list(stacking)}: measure them again for it", flush=True)
    if args.write_rates:
        args.write_rates.write_text(json.dumps(device or host, indent=1) + "\n")

    for arch in args.models:
        work = count_work(datasets, REGISTRY[arch].feature_dim, probes, settings["features"])
        print(f"\n{arch}: {work.images / 1e6:.2f}M images in {work.shards} shards; {work.probe_jobs} probe jobs, "
              f"{work.train_flops / 1e15:.1f} PFLOP training + {work.eval_flops / 1e15:.2f} PFLOP scoring, "
              f"{work.steps / 1e6:.2f}M SGD steps; probe jobs read {work.file_bytes / 1e12:.2f} TB of files "
              f"and prepare {work.prepared_bytes / 1e12:.2f} TB of rows ({work.few_shot_prepared_bytes / 1e12:.2f} "
              f"TB in few-shot jobs)")
        columns = [("this machine: " + host["device"], project(work, host, arch))]
        if device:
            columns.append((device["device"], project(work, device, arch)))
        authors = {"extraction": AUTHORS_EXTRACTION_MIN_PER_DATASET * 60 * len(datasets),
                   "probe compute": AUTHORS_PROBE_MIN_PER_DATASET_AND_SEED * 60 * len(datasets) * len(probes["seeds"])}
        print(f"{'stage':<18}" + "".join(f"{name[:34]:>36}" for name, _ in columns) + f"{'authors, V100 (N = all only)':>32}")
        for stage in columns[0][1]:
            reference = hours(authors[stage]) if stage in authors else ""
            print(f"{stage:<18}" + "".join(f"{hours(times[stage]):>36}" for _, times in columns) + f"{reference:>32}")
        print(f"{'total':<18}" + "".join(f"{hours(sum(times.values())):>36}" for _, times in columns)
              + f"{hours(sum(authors.values())):>32}")


if __name__ == "__main__":
    main()
