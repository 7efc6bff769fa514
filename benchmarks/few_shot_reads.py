"""What a few-shot probe job spends on its data: reading the whole training file against
reading only the rows the run uses (its validation split and its two N-shot samples).

Generates a merged float16 feature file like the workflow's (shards of 10,000 rows, rows
sorted by class as the split tables are; default 1000 classes x 400 rows x 2048 dims, 1.6 GB),
then for each N runs one probe job's data path and probe twice in this process:

* before: ``read_features`` of the whole training file, ``probe_dataset`` on all rows (the
  probe command before this change);
* after: ``read_labels``, ``rows_used``, ``read_features(rows=...)``, ``probe_dataset(...,
  train_rows=...)`` (the probe command now);

and prints, per path, the seconds of the read, of preparing the rows as ``probe_dataset``
does before its first trial (normalising them onto the device and hashing them for the
study's name, timed separately here, outside the run) and of the whole run, the bytes the process read (``rchar`` of
/proc/self/io: syscalls, page cache included) and, with the file's pages dropped from the
page cache first (``--cold``), the bytes read from the disk. The search is shortened
(``--trials 2 --epochs 2`` by default) so the data part shows as it does on a GPU, where a
few-shot run's products take a fraction of a second; results are checked to be identical.

    python benchmarks/few_shot_reads.py --shots 1 16 128 --cold
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from imagenet_cog.features.store import merge_shards, read_features, read_labels, write_shard
from imagenet_cog.probes.search import ProbeJob, SearchSettings, normalised_on_device, probe_dataset, rows_used, study_name


def io_counters() -> dict[str, int]:
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return {"rchar": int(fields["rchar"]), "read_bytes": int(fields["read_bytes"])}


def generate(folder: Path, classes: int, per_class: int, dim: int, shard_size: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), per_class)
    shards = []
    for number, start in enumerate(range(0, labels.size, shard_size)):
        stop = min(labels.size, start + shard_size)
        block = rng.standard_normal((stop - start, dim), dtype=np.float32).astype(np.float16)
        shards.append(folder / "train" / f"shard-{number:05d}.h5")
        write_shard(shards[-1], block, labels[start:stop], np.arange(start, stop),
                    [f"{row}.JPEG" for row in range(start, stop)], np.ones(stop - start, bool), {"model": "m"})
    merge_shards(shards, folder / "train.h5")
    return folder / "train.h5"


def drop_from_page_cache(folder: Path) -> None:
    for path in folder.rglob("*.h5"):
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)


def one_run(train: Path, test, shots: str, settings: SearchSettings, journal: str, only_used: bool) -> tuple[dict, dict]:
    counters = io_counters()
    started = time.perf_counter()
    if only_used:
        labels = read_labels(train)
        rows = rows_used(labels, shots, 22, settings.val_fraction, "benchmark")
        features = read_features(train, rows=rows).features
    else:
        whole = read_features(train)
        labels, rows, features = whole.labels, None, whole.features
    read = time.perf_counter()
    result = probe_dataset(ProbeJob(features, labels, *test, settings=settings, device="cpu", train_rows=rows), shots=shots, seed=22, journal=journal)
    finished = time.perf_counter()
    after = io_counters()
    preparing = time.perf_counter()
    normalised_on_device(features, torch.device("cpu"), result["matmul_precision"], "benchmark")
    study_name(features, labels, settings, shots, 22)
    prepare = time.perf_counter() - preparing
    return result, {"read_s": read - started, "prepare_s": prepare, "total_s": finished - started,
                    "rows": features.shape[0], "rchar": after["rchar"] - counters["rchar"],
                    "disk": after["read_bytes"] - counters["read_bytes"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--per-class", type=int, default=400)
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--shots", nargs="+", default=["1", "16", "128"])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cold", action="store_true", help="drop the file from the page cache before each run")
    parser.add_argument("--folder", type=Path, help="where to generate the file (default: a temporary folder)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    settings = SearchSettings(trials=args.trials, epochs=args.epochs)
    with tempfile.TemporaryDirectory(prefix="few-shot-reads-", dir=args.folder) as name:
        folder = Path(name)
        started = time.perf_counter()
        train = generate(folder, args.classes, args.per_class, args.dim, 10_000, 0)
        size = sum(path.stat().st_size for path in (folder / "train").glob("*.h5"))
        test_rows = args.classes * 50
        rng = np.random.default_rng(1)
        test = (rng.standard_normal((test_rows, args.dim), dtype=np.float32).astype(np.float16).astype(np.float32),
                np.repeat(np.arange(args.classes), 50))
        print(f"training file: {args.classes} classes x {args.per_class} rows x {args.dim} dims, float16, "
              f"{size / 1e9:.2f} GB in {len(list((folder / 'train').glob('*.h5')))} shards (generated in "
              f"{time.perf_counter() - started:.0f} s); search {args.trials} trials x {args.epochs} epochs, "
              f"{args.threads} thread(s), {'cold' if args.cold else 'warm'} page cache")
        for shots in args.shots:
            measured = {}
            for only_used in (False, True):
                if args.cold:
                    drop_from_page_cache(folder)
                else:
                    read_features(train, rows=np.arange(0, 1))  # labels and valid into the cache
                    for path in (folder / "train").glob("*.h5"):
                        path.read_bytes()
                result, numbers = one_run(train, test, shots, settings, str(folder / f"{shots}-{only_used}.jsonl"), only_used)
                measured[only_used] = (result, numbers)
            before, after = measured[False], measured[True]
            same = all(before[0][key] == after[0][key] for key in ("trials", "best_params", "test_top1", "test_top5"))
            for label, numbers in (("whole file", before[1]), ("rows used ", after[1])):
                print(f"N={shots:>4} {label}: {numbers['rows']:>7} rows, read {numbers['read_s']:6.2f} s, "
                      f"prepare {numbers['prepare_s']:6.2f} s, run {numbers['total_s']:6.2f} s, {numbers['rchar'] / 1e9:5.2f} GB read"
                      + (f", {numbers['disk'] / 1e9:5.2f} GB from disk" if args.cold else ""))
            print(f"N={shots:>4} speed-up {before[1]['total_s'] / after[1]['total_s']:.2f}x per run, "
                  f"identical results: {same}", flush=True)


if __name__ == "__main__":
    main()
