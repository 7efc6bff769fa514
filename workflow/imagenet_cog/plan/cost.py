"""The protocol's cost model: counted work per dataset times a device's rates.

One copy of the arithmetic, used by the workflow's ``plan`` target and by
``benchmarks/protocol_cost.py`` (which measures the rates). Work is counted from the
probes and features settings and the datasets' sizes; seconds come from :func:`project`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from imagenet_cog.core.naming import IN1K, level_name
from imagenet_cog.probes.kinds import KINDS
from imagenet_cog.probes.kinds.kind import PricedJob

IN1K_TRAIN, IN1K_TEST = 1_281_167, 50_000  # the official training and validation sets
CONCEPTS_PER_LEVEL, TEST_PER_CONCEPT, MAX_TRAIN_PER_CONCEPT, MIN_IMAGES = 1000, 50, 1300, 782

# Authors' README (protocol-facts.md): V100 with 8 CPU cores.
AUTHORS_EXTRACTION_MIN_PER_DATASET = 60
AUTHORS_PROBE_MIN_PER_DATASET_AND_SEED = 75
RATE_KEYS = ("extraction_images_per_s", "extraction_shard_fixed_s", "model_build_s", "checkpoint_load_s",
             "probe_step_fixed_s", "probe_step_per_row_s", "probe_epoch_s", "scoring_flops_per_s",
             "read_bytes_per_s", "prepare_bytes_per_s", "job_start_s", "cuda_start_s", "compile_s")
# rates measured per architecture; a rates file may give a "default" for the others
PER_ARCH_KEYS = ("extraction_images_per_s", "extraction_shard_fixed_s", "model_build_s", "checkpoint_load_s")
STAGES = ("extraction", "extraction job starts", "probe steps", "probe scoring", "probe loading", "probe job starts")
# The kinds with jobs of their own (the k-NN) and the rates that price them beyond RATE_KEYS:
# optional, so that a rates file written before such a kind existed still prices everything else.
OWN_JOB_KINDS = tuple(name for name, kind in KINDS.items() if kind.own_job)
OWN_RATE_KEYS = tuple(key for name in OWN_JOB_KINDS for key in KINDS[name].own_rates)
# The fine-tuning control's training rate (images through a forward and backward pass, per
# architecture as extraction's); optional as the own-job kinds' rates are.
FINETUNE_RATE_KEYS = ("finetune_images_per_s",)
# the kinds off the grid (zero-shot: its text encoding), optional as the own-job kinds' rates are
OFF_GRID_RATE_KEYS = tuple(key for kind in KINDS.values() if kind.off_grid for key in kind.off_grid.rates)
OPTIONAL_RATE_KEYS = OWN_RATE_KEYS + FINETUNE_RATE_KEYS + OFF_GRID_RATE_KEYS
# Class-level captioning (analyses.captions): images captioned by the captioner (its image
# tower once, its decoder a step per token and beam) and captions through its text tower, per
# captioner architecture; optional as the fine-tuning rate is.
CAPTION_RATE_KEYS = ("caption_images_per_s", "caption_text_per_s")
OPTIONAL_RATE_KEYS += CAPTION_RATE_KEYS
# The two terms of a projected extraction rate (:func:`node_extraction_rates`): a loader
# worker's steady images/s per host resize, and the device's images/s per architecture.
EXTRACTION_HOST_KEY, EXTRACTION_DEVICE_KEY = "extraction_host_images_per_s_per_worker", "extraction_device_images_per_s"
OPTIONAL_RATE_KEYS += (EXTRACTION_HOST_KEY, EXTRACTION_DEVICE_KEY)


@dataclass(frozen=True)
class Dataset:
    name: str
    train: int
    test: int
    classes: int
    validation: int  # rows held out for validation: int(val_fraction * n_c) summed over concepts


def level_train_counts(image_counts: Path, test_per_concept: int = TEST_PER_CONCEPT,
                       max_train: int = MAX_TRAIN_PER_CONCEPT, min_images: int = MIN_IMAGES) -> list[int]:
    """Training images of each eligible concept (>= min_images): min(n - test, max_train),
    from a ``wnid<TAB>n_images`` file with a header (the shipped Fall 2011 counts)."""
    counts = [int(line.split("\t")[1]) for line in Path(image_counts).read_text().splitlines()[1:] if line.strip()]
    return [min(count - test_per_concept, max_train) for count in counts if count >= min_images]


def estimated_level(name: str, per_concept: list[int], val_fraction: float, concepts: int = CONCEPTS_PER_LEVEL,
                    test_per_concept: int = TEST_PER_CONCEPT) -> Dataset:
    """A level of ``concepts`` concepts estimated by the mean eligible concept."""
    mean_train = sum(per_concept) / len(per_concept)
    mean_validation = sum(int(val_fraction * n) for n in per_concept) / len(per_concept)
    return Dataset(name, round(concepts * mean_train), concepts * test_per_concept, concepts,
                   round(concepts * mean_validation))


def in1k_dataset(val_fraction: float) -> Dataset:
    return Dataset(IN1K, IN1K_TRAIN, IN1K_TEST, 1000, 1000 * int(val_fraction * IN1K_TRAIN / 1000))


def summary_datasets(split_summary: Path, val_fraction: float) -> list[Dataset]:
    """Exact image counts of a real run's split summary (dataset, concepts, train_images,
    test_images); validation rows from the mean concept of each dataset."""
    lines = [line.split("\t") for line in Path(split_summary).read_text().splitlines() if line.strip()]
    header, rows = lines[0], lines[1:]
    column = {name: header.index(name) for name in ("dataset", "concepts", "train_images", "test_images")}
    datasets = []
    for row in rows:
        train, classes = int(row[column["train_images"]]), int(row[column["concepts"]])
        datasets.append(Dataset(row[column["dataset"]], train, int(row[column["test_images"]]), classes,
                                classes * int(val_fraction * train / classes)))
    return datasets


def paper_datasets(image_counts: Path, split_summary: Path | None, val_fraction: float,
                   levels: int = 5) -> list[Dataset]:
    """IN-1K and the levels: exact from a split summary, else a level's 1000 concepts
    estimated by the mean eligible concept of the shipped counts."""
    if split_summary:
        return summary_datasets(split_summary, val_fraction)
    per_concept = level_train_counts(image_counts)
    return [in1k_dataset(val_fraction)] + [estimated_level(level_name(level), per_concept, val_fraction)
                                           for level in range(1, levels + 1)]


def stacking(probes: dict) -> tuple[int, int]:
    """(candidates, runs) of a search pass: trials_per_batch candidates of each seed a job trains
    together (every seed of the job unless probes.group is seed)."""
    return probes["trials_per_batch"], 1 if probes.get("group", "seed") == "seed" else len(probes["seeds"])


# counting ----------------------------------------------------------------------------------


@dataclass
class DatasetWork:
    images: int = 0
    shards: int = 0
    extraction_jobs: int = 0
    probe_jobs: int = 0
    train_flops: float = 0.0
    scoring_flops: float = 0.0
    trial_steps: Counter = field(default_factory=Counter)  # batch size -> one candidate's SGD steps
    trial_epochs: int = 0  # one candidate's epochs (a search's trials and the final fit)
    pass_epochs: int = 0  # epochs of a pass (its fixed costs are paid once for the candidates it stacks)
    file_bytes: float = 0.0
    prepared_bytes: float = 0.0
    own_jobs: dict[str, OwnJobWork] = field(default_factory=dict)  # by kind (ProbeKind.own_job)


@dataclass
class OwnJobWork:
    """The jobs of a kind with jobs of its own on one dataset."""

    jobs: int = 0
    results: int = 0  # result files: one per N and seed
    file_bytes: float = 0.0  # its features, read and prepared once per job
    priced: Counter = field(default_factory=Counter)  # rate key -> the work that rate prices


def batches(rows: int, batch: int) -> Counter:
    """Mini-batch sizes of one epoch over ``rows`` rows."""
    sizes = Counter({batch: rows // batch})
    if rows % batch:
        sizes[rows % batch] += 1
    return sizes


def bytes_per_value(dtype: str) -> int:
    return 2 if dtype == "float16" else 4


def count_extraction(data: Dataset, features: dict) -> DatasetWork:
    """Images, shards and extraction jobs of one dataset (``features.group``)."""
    counted = DatasetWork(images=data.train + data.test)
    counted.shards = math.ceil(data.train / features["shard_size"]) + math.ceil(data.test / features["shard_size"])
    counted.extraction_jobs = 2 if features.get("group", "shard") == "split" else counted.shards
    return counted


def count_probes(counted: DatasetWork, data: Dataset, dim: int, probes: dict, dtype: str) -> DatasetWork:
    """Adds one dataset's linear probes (every N and seed of ``probes``) to ``counted``."""
    trials, epochs, batch = probes["trials"], probes["epochs"], probes["batch_size"]
    width = dim * bytes_per_value(dtype)
    seeds = len(probes["seeds"])
    group = probes.get("group", "seed")
    candidates, runs = stacking(probes)
    passes = math.ceil(trials / candidates)
    dataset_rows = 0
    for shots in probes["shots"]:
        if shots == "all":
            search, final, rows = data.train - data.validation, data.train, data.train
        else:
            search = final = int(shots) * data.classes
            # a few-shot job reads its validation rows and two N-shot samples of each seed
            # (each row in a seed's validation split with chance val_fraction)
            held_out = 1.0 - (1.0 - probes["val_fraction"]) ** runs
            rows = min(data.train, int(held_out * data.train) + runs * (search + final))
        counted.train_flops += seeds * 4.0 * dim * data.classes * epochs * (trials * search + final)
        counted.scoring_flops += seeds * 2.0 * dim * data.classes * (trials * data.validation + data.test)
        for size, count in batches(search, batch).items():
            counted.trial_steps[size] += seeds * trials * epochs * count
        for size, count in batches(final, batch).items():
            counted.trial_steps[size] += seeds * epochs * count
        counted.trial_epochs += seeds * (trials + 1) * epochs
        counted.pass_epochs += seeds // runs * epochs * (passes + 1)
        dataset_rows = max(dataset_rows, rows)
        if group != "dataset":
            jobs = seeds // runs
            counted.probe_jobs += jobs
            counted.file_bytes += jobs * (data.train + data.test) * width
            counted.prepared_bytes += jobs * (rows + data.test) * width
    if group == "dataset":  # one resident job reads and prepares every row once
        counted.probe_jobs += 1
        counted.file_bytes += (data.train + data.test) * width
        counted.prepared_bytes += (data.train + data.test) * width
    return counted


def count_own_job(counted: DatasetWork, data: Dataset, dim: int, probes: dict, dtype: str, kind: str) -> DatasetWork:
    """Adds one dataset's job of ``kind`` (a kind with jobs of its own) to ``counted``: the work
    its module counts, its features read and prepared once, a result per N and seed."""
    job = counted.own_jobs.setdefault(kind, OwnJobWork())
    job.jobs += 1
    job.priced.update(KINDS[kind].own_job.work(data, dim, probes))
    job.file_bytes += (data.train + data.test) * dim * bytes_per_value(dtype)
    job.results += len(probes["shots"]) * len(probes["seeds"])
    return counted


def count_work(datasets: list[Dataset], dim: int, probes: dict, features: dict,
               own_job_kinds: tuple[str, ...] = ()) -> dict[str, DatasetWork]:
    """The work of one model through the whole protocol, per dataset (with ``own_job_kinds``,
    their jobs on the linear probe's grid too)."""
    work = {}
    for data in datasets:
        counted = count_probes(count_extraction(data, features), data, dim, probes, features["dtype"])
        for kind in own_job_kinds:
            count_own_job(counted, data, dim, probes, features["dtype"], kind)
        work[data.name] = counted
    return work


def feature_bytes(data: Dataset, dim: int, dtype: str) -> int:
    """Bytes of a dataset's features (both splits) for one model, HDF5 overhead left out."""
    return (data.train + data.test) * dim * bytes_per_value(dtype)


# projecting --------------------------------------------------------------------------------


def node_extraction_rates(rates: dict, workers: int, host_resize: str = "pil") -> dict[str, float]:
    """extraction_images_per_s per architecture on a GPU job with ``workers`` loader workers:
    the smaller of the host (the workers times one worker's steady rate with ``host_resize``;
    no worker decodes in the main process, at one worker's rate) and the device."""
    host = max(workers, 1) * rates[EXTRACTION_HOST_KEY][host_resize]
    return {arch: min(host, device) for arch, device in rates[EXTRACTION_DEVICE_KEY].items()}


def arch_rate(rates: dict, key: str, arch: str) -> float:
    """A per-architecture rate: the arch's own figure, else the file's default."""
    values = rates[key]
    if arch in values:
        return values[arch]
    if "default" in values:
        return values["default"]
    raise KeyError(f"the rates give no {key} for {arch} and no default")


def step_scale(rates: dict, dim: int | None, classes: int) -> float:
    """A probe step's cost relative to the shape its rate was measured at (classes x width):
    the step is bound by passes over the C x D weights, so it scales with their size."""
    shape = rates.get("probe_shape")
    if not shape or dim is None:
        return 1.0
    return (classes * dim) / (shape[0] * shape[1])


def project(work: dict[str, DatasetWork], rates: dict, arch: str, dim: int | None = None,
            classes: dict[str, int] | None = None) -> dict[str, dict[str, float]]:
    """Seconds per stage and dataset on one device; with ``dim`` (and each dataset's
    classes) the probe steps are scaled from the shape the rates were measured at."""
    missing = [key for key in RATE_KEYS if key not in rates]
    if missing:
        raise ValueError(f"the rates lack {', '.join(missing)} (written by an older protocol_cost.py): measure them again")
    probe_job = rates["job_start_s"] + rates["cuda_start_s"] + rates["compile_s"]
    extraction_job = rates["job_start_s"] + rates["cuda_start_s"] + arch_rate(rates, "model_build_s", arch) \
        + arch_rate(rates, "checkpoint_load_s", arch)
    per_dataset = {}
    for name, counted in work.items():
        scale = step_scale(rates, dim, (classes or {}).get(name, 1000))
        per_dataset[name] = {
            "extraction": counted.images / arch_rate(rates, "extraction_images_per_s", arch)
                          + counted.shards * arch_rate(rates, "extraction_shard_fixed_s", arch),
            "extraction job starts": counted.extraction_jobs * extraction_job,
            "probe steps": scale * (sum(count * (rates["probe_step_fixed_s"] + size * rates["probe_step_per_row_s"])
                                        for size, count in counted.trial_steps.items())
                                    + counted.pass_epochs * rates["probe_epoch_s"]),
            "probe scoring": counted.scoring_flops / rates["scoring_flops_per_s"],
            "probe loading": counted.file_bytes / rates["read_bytes_per_s"]
                             + counted.prepared_bytes / rates["prepare_bytes_per_s"],
            "probe job starts": counted.probe_jobs * probe_job,
        }
        for kind, job in counted.own_jobs.items():
            per_dataset[name].update(project_own_job(kind, job, rates))
    return per_dataset


def own_priced_stages(kind: str) -> tuple[str, ...]:
    """The stages of a kind's own jobs that its own rates price (the k-NN's products, top-k)."""
    return tuple(f"{kind} {stage}" for stage in KINDS[kind].own_job.priced_by.values())


def own_job_stages(kind: str) -> tuple[str, ...]:
    """The stages of a kind's own jobs: what its own rates price, then its loading and starts."""
    return (*own_priced_stages(kind), f"{kind} loading", f"{kind} job starts")


def project_own_job(kind: str, job: OwnJobWork, rates: dict) -> dict[str, float]:
    """Seconds of a dataset's jobs of ``kind`` per stage (:func:`own_job_stages`)."""
    priced_by = KINDS[kind].own_job.priced_by
    missing = [key for key in priced_by if key not in rates]
    if missing:
        raise ValueError(f"the rates lack {', '.join(missing)}, which price the {KINDS[kind].title} probe")
    seconds = {f"{kind} {stage}": job.priced[key] / rates[key] for key, stage in priced_by.items()}
    seconds[f"{kind} loading"] = job.file_bytes / rates["read_bytes_per_s"] + job.file_bytes / rates["prepare_bytes_per_s"]
    seconds[f"{kind} job starts"] = job.jobs * (rates["job_start_s"] + rates["cuda_start_s"])
    return seconds


def own_job_seconds(kind: str, data: Dataset, dim: int, probes: dict, dtype: str, rates: dict) -> float:
    """The projected seconds of one dataset's job of ``kind``, every stage of it (the rules' limit)."""
    counted = count_own_job(DatasetWork(), data, dim, probes, dtype, kind)
    return sum(project_own_job(kind, counted.own_jobs[kind], rates).values())


def probe_run_seconds(data: Dataset, dim: int, probes: dict, dtype: str, rates: dict, shots: str = "all") -> float:
    """The projected seconds of one linear probe run (one N and seed in a job of its own: its
    search, final fit, scoring, loading and start), every probe stage of it (the rules' limit)."""
    one_run = {**probes, "shots": [shots], "seeds": probes["seeds"][:1], "group": "seed"}
    work = count_probes(DatasetWork(), data, dim, one_run, dtype)
    seconds = project({data.name: work}, rates, "default", dim, {data.name: data.classes})[data.name]
    return stage_seconds(seconds, "probe")


def finetune_seconds(data: Dataset, epochs: int, rates: dict, arch: str) -> float:
    """One fine-tuning job's GPU-seconds: its training images times the epochs at the
    architecture's training rate, its test images at its extraction rate, and one start (Python,
    CUDA, the model built and its checkpoint read)."""
    training = data.train * epochs / arch_rate(rates, "finetune_images_per_s", arch)
    testing = data.test / arch_rate(rates, "extraction_images_per_s", arch)
    start = (rates["job_start_s"] + rates["cuda_start_s"] + arch_rate(rates, "model_build_s", arch)
             + arch_rate(rates, "checkpoint_load_s", arch))
    return training + testing + start


def priced_job_seconds(job: PricedJob, rates: dict, arch: str) -> float:
    """One job of a kind off the grid: each unit of its work at its rate (a rate measured per
    architecture at the model's)."""
    seconds = 0.0
    for key, units in job.work.items():
        rate = arch_rate(rates, key, arch) if isinstance(rates[key], dict) else rates[key]
        seconds += units / rate if key.endswith("_per_s") else units * rate
    return seconds


# Unseen-concept detection's k-NN: the k-NN probe's rates (its products and top-k)
DETECTION_RATE_KEYS = ("knn_flops_per_s", "topk_values_per_s")
DETECTION_TRAIN_BLOCK = 65536  # imagenet_cog.analyses.detection.TRAIN_BLOCK: a top-k merge per block


def detection_seconds(train: int, known: int, unknown: int, dim: int, classes: int, k: int, seeds: int, dtype: str,
                      rates: dict) -> float:
    """One analyses_detection job (a model): IN-1K's training and every test feature read and
    prepared; the k-NN's similarity products (2 D per query and training image) and its top-k
    (every similarity, and k more per training block merged); the probe's and MCM's logits
    (2 D C per image, each seed and the text classifier); one start."""
    queries = known + unknown
    loading = (train + queries) * dim * bytes_per_value(dtype) * (1 / rates["read_bytes_per_s"]
                                                                  + 1 / rates["prepare_bytes_per_s"])
    products = 2.0 * dim * queries * train / rates["knn_flops_per_s"]
    topk = queries * (train + math.ceil(train / DETECTION_TRAIN_BLOCK) * k) / rates["topk_values_per_s"]
    logits = 2.0 * dim * classes * queries * (seeds + 1) / rates["scoring_flops_per_s"]
    return loading + products + topk + logits + rates["job_start_s"] + rates["cuda_start_s"]


# Concept generalization as a curve: scoring at the probes' rates; the report job's bootstrap
# (seconds on a CPU at the demo's size, minutes at the paper's) is not priced
CONCEPT_RATE_KEYS = ("read_bytes_per_s", "prepare_bytes_per_s", "scoring_flops_per_s", "job_start_s")


def concept_seconds(test: int, dim: int, classes: int, seeds: int, dtype: str, rates: dict) -> float:
    """One analyses_concepts job (a model): every level's test features read and prepared, and
    their logits under each seed's N = all classifier (2 D C per image and seed; ``classes``
    a level's concepts); one start."""
    loading = test * dim * bytes_per_value(dtype) * (1 / rates["read_bytes_per_s"] + 1 / rates["prepare_bytes_per_s"])
    return loading + 2.0 * dim * classes * test * seeds / rates["scoring_flops_per_s"] + rates["job_start_s"]


def stage_seconds(times: dict[str, float], prefix: str) -> float:
    """The seconds of the stages whose names start with ``prefix`` (extraction, probe)."""
    return sum(value for key, value in times.items() if key.startswith(prefix))


def captioner_start_seconds(rates: dict, arch: str) -> float:
    """A captioning job's start: Python, CUDA, the captioner built and its weights read."""
    return (rates["job_start_s"] + rates["cuda_start_s"] + arch_rate(rates, "model_build_s", arch)
            + arch_rate(rates, "checkpoint_load_s", arch))


def caption_seconds(images: int, rates: dict, arch: str) -> float:
    """One caption-images job's GPU-seconds: its images at the captioner's caption rate, one start."""
    return images / arch_rate(rates, "caption_images_per_s", arch) + captioner_start_seconds(rates, arch)


def description_seconds(captions: int, rates: dict, arch: str) -> float:
    """One auto-descriptions job's GPU-seconds: every caption of its dataset through the
    captioner's text tower, one start (Eq. 4's pairwise distances are left out: seconds)."""
    return captions / arch_rate(rates, "caption_text_per_s", arch) + captioner_start_seconds(rates, arch)


@dataclass(frozen=True)
class DatasetCost:
    work: DatasetWork
    extraction_s: float  # its extraction and extraction job starts
    probe_s: float  # its linear probes' steps, scoring, loading and job starts
    own_job_s: dict[str, float] = field(default_factory=dict)  # each own-job kind's job
    own_compute_s: dict[str, float] = field(default_factory=dict)  # the part its own rates price


def dataset_cost(data: Dataset, dim: int, probes: dict | None, features: dict, rates: dict, arch: str,
                 own_job_kinds: tuple[str, ...] = ()) -> DatasetCost:
    """One dataset's work for one model (its extraction; its linear probes unless ``probes``
    is None, and the jobs of ``own_job_kinds``) and its projected seconds per part."""
    work = count_extraction(data, features)
    if probes is not None:
        count_probes(work, data, dim, probes, features["dtype"])
        for kind in own_job_kinds:
            count_own_job(work, data, dim, probes, features["dtype"], kind)
    seconds = project({data.name: work}, rates, arch, dim, {data.name: data.classes})[data.name]
    return DatasetCost(work, stage_seconds(seconds, "extraction"), stage_seconds(seconds, "probe"),
                       {kind: sum(seconds[stage] for stage in own_job_stages(kind)) for kind in work.own_jobs},
                       {kind: sum(seconds[stage] for stage in own_priced_stages(kind)) for kind in work.own_jobs})


def overlapped(per_dataset: dict[str, dict[str, float]]) -> float:
    """Wall time with extraction and probes side by side, datasets in order: the probes of a
    dataset (linear and k-NN) start once it is extracted and the probes before it are done (a
    two-stage flow shop; assumes neither slows the other: extraction is bound by decoding on
    the host, probes by the GPU's memory)."""
    extraction = [stage_seconds(times, "extraction") for times in per_dataset.values()]
    probes = [sum(value for key, value in times.items() if not key.startswith("extraction"))
              for times in per_dataset.values()]
    return max(sum(extraction[:d + 1]) + sum(probes[d:]) for d in range(len(extraction)))


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 360 else f"{seconds / 60:.1f} min"
