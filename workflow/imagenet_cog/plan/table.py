"""The plan table: per stage and model the jobs, images read, bytes written, trial-epochs and
GPU-hours on the rates' device (the linear probes per stage, each kind with jobs of its own,
the k-NN, in a row of its own, the fine-tuning control's jobs and the zero-shot probe's), the total, and the wall time on G GPUs; the ``plan`` command writes it as TSV and
prints it (rule ``plan``, workflow/rules/plan.smk)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

from imagenet_cog.core.io import write_tsv
from imagenet_cog.core.naming import IN1K, is_level
from imagenet_cog.plan.cost import (
    CAPTION_RATE_KEYS,
    CONCEPT_RATE_KEYS,
    DETECTION_RATE_KEYS,
    EXTRACTION_DEVICE_KEY,
    EXTRACTION_HOST_KEY,
    FINETUNE_RATE_KEYS,
    OFF_GRID_RATE_KEYS,
    OWN_JOB_KINDS,
    OWN_RATE_KEYS,
    RATE_KEYS,
    arch_rate,
    bytes_per_value,
    caption_seconds,
    concept_seconds,
    dataset_cost,
    description_seconds,
    detection_seconds,
    feature_bytes,
    finetune_seconds,
    priced_job_seconds,
)
from imagenet_cog.plan.measured import compare_command_part
from imagenet_cog.plan.rates import Rates, read_rates
from imagenet_cog.plan.work import ProbedDatasets, model_widths, probed_datasets
from imagenet_cog.probes.kinds import KINDS

COLUMNS = ("stage", "model", "jobs", "images_read", "bytes_written", "trial_epochs", "gpu_hours", "rates")
# Bytes a probe writes besides its classifier (measured on the demo's files): a journal line
# per Optuna event, ~1 kB a trial; the result JSON ~2.5 kB
JOURNAL_BYTES_PER_TRIAL, RESULT_BYTES = 1000, 2500
TABLE_BYTES = 5_000_000  # every table and figure of the results and analyses stages together


@dataclass
class Row:
    stage: str
    model: str
    jobs: int = 0
    images_read: int = 0
    bytes_written: float = 0.0
    trial_epochs: int = 0
    seconds: float = 0.0
    projected_rates: set[str] = field(default_factory=set)
    longest_job_s: float = 0.0
    wall: bool = False  # the wall-time row: hours of wall time, no counts

    def values(self) -> list:
        counts = ["", "", "", ""] if self.wall else [self.jobs, self.images_read, round(self.bytes_written),
                                                     self.trial_epochs]
        return [self.stage, self.model, *counts, f"{self.seconds / 3600:.3f}",
                "projection" if self.projected_rates else "measured"]

    def cells(self) -> list[str]:
        """The row as the printed table shows it (readable bytes, thousands separated)."""
        counts = ["", "", "", ""] if self.wall else [f"{self.jobs:,}", f"{self.images_read:,}",
                                                     human_bytes(self.bytes_written), f"{self.trial_epochs:,}"]
        return [self.stage, self.model, *counts, f"{self.seconds / 3600:.2f}",
                "projection" if self.projected_rates else "measured"]


EXTRACTION_RATES = {"extraction_images_per_s", "extraction_shard_fixed_s", "model_build_s", "checkpoint_load_s",
                    "job_start_s", "cuda_start_s"}
PROBE_RATES = {"probe_step_fixed_s", "probe_step_per_row_s", "probe_epoch_s", "scoring_flops_per_s",
               "read_bytes_per_s", "prepare_bytes_per_s", "job_start_s", "cuda_start_s", "compile_s"}
# what prices a kind's own jobs besides its own rates: their loading and starts
OWN_JOB_RATES = {"read_bytes_per_s", "prepare_bytes_per_s", "job_start_s", "cuda_start_s"}
FINETUNE_RATES = {*FINETUNE_RATE_KEYS, "extraction_images_per_s", "model_build_s", "checkpoint_load_s", "job_start_s",
                  "cuda_start_s"}
FINETUNE_STAGE = "fine-tuning"
CAPTION_RATES = {*CAPTION_RATE_KEYS, "model_build_s", "checkpoint_load_s", "job_start_s", "cuda_start_s"}
CAPTION_STAGE, DESCRIPTION_STAGE = "captioning", "auto-descriptions"


def own_job_stage(kind: str) -> str:
    """The plan's row of a kind's own jobs (``knn probes``)."""
    return f"{kind} probes"


def probe_bytes(probes: dict, classes: int, dim: int) -> float:
    """A dataset's journals, result files and N = all classifiers (float32 weights and biases)."""
    runs = len(probes["seeds"]) * len(probes["shots"])
    classifiers = len(probes["seeds"]) * ("all" in probes["shots"]) * classes * (dim + 1) * 4
    return runs * (probes["trials"] * JOURNAL_BYTES_PER_TRIAL + RESULT_BYTES) + classifiers


def model_rows(model: str, arch: str, dim: int, groups, features: dict, rates: Rates) -> list[Row]:
    """The extraction row, one linear probe row per stage of probed datasets of one model, and
    a row for each kind with jobs of its own (the k-NN) that the config runs and the rates price."""
    projected = set(rates.projected_keys(RATE_KEYS + OWN_RATE_KEYS))
    extraction = Row("extraction", model, projected_rates=projected & EXTRACTION_RATES)
    probe_rows: dict[str, Row] = {}
    for group in groups:
        own_kinds = tuple(kind for kind in group.own_job_kinds if rates.prices(kind))
        for data in group.datasets:
            cost = dataset_cost(data, dim, group.probes, features, rates.values, arch, own_kinds)
            work = cost.work
            if group.extracted:
                merge(extraction, Row("extraction", model, work.extraction_jobs, work.images,
                                      feature_bytes(data, dim, features["dtype"]), 0, cost.extraction_s,
                                      longest_job_s=cost.extraction_s / max(work.extraction_jobs, 1)))
            if group.probes is not None:
                row = probe_rows.setdefault(group.stage, Row(group.stage, model,
                                                             projected_rates=projected & PROBE_RATES))
                merge(row, Row(group.stage, model, work.probe_jobs, 0, probe_bytes(group.probes, data.classes, dim),
                               work.trial_epochs, cost.probe_s, longest_job_s=cost.probe_s / max(work.probe_jobs, 1)))
            for kind, job in work.own_jobs.items():
                stage, rates_used = own_job_stage(kind), {*KINDS[kind].own_rates, *OWN_JOB_RATES}
                row = probe_rows.setdefault(stage, Row(stage, model, projected_rates=projected & rates_used))
                merge(row, Row(stage, model, job.jobs, 0, job.results * RESULT_BYTES, 0, cost.own_job_s[kind],
                               longest_job_s=cost.own_job_s[kind]))
    return [extraction, *probe_rows.values()]


def finetune_rows(config: dict, datasets: list, widths: dict, rates: Rates) -> tuple[list[Row], list[str]]:
    """A row per fine-tuned model (finetune.enabled): a job per dataset, its training images
    read every epoch and its test images once; or the note of why it is not priced."""
    settings = config.get("finetune", {})
    if not settings.get("enabled"):
        return [], []
    if not all(key in rates.values for key in FINETUNE_RATE_KEYS):
        return [], [f"not priced: fine-tuning (the rates lack {', '.join(FINETUNE_RATE_KEYS)}: resources/rates/h100.yaml "
                    "has it, or measure it with benchmarks/finetune_benchmark.py)"]
    sized = {data.name: data for data in datasets}
    names = [name for name in settings["datasets"] or config["datasets"] if name in sized]
    epochs, gpus = settings["recipe"]["epochs"], settings["gpus"]
    rows = []
    for model in settings["models"] or [config["results"]["baseline_model"]]:
        if model not in widths:
            continue  # its note says why it is not priced
        arch = widths[model][0]
        row = Row(FINETUNE_STAGE, model, projected_rates=set(rates.projected_keys(tuple(FINETUNE_RATES))))
        for name in names:
            seconds = finetune_seconds(sized[name], epochs, rates.values, arch)
            merge(row, Row(FINETUNE_STAGE, model, 1, sized[name].train * epochs + sized[name].test, RESULT_BYTES, 0,
                           seconds, longest_job_s=seconds / gpus))
        rows.append(row)
    return rows, []


def off_grid_rows(config: dict, datasets: list, widths: dict, rates: Rates) -> tuple[list[Row], list[str]]:
    """A row per configured kind off the grid (zero-shot) and model it applies to, titled by
    the kind: the jobs its module prices; or the note of why a kind is not priced."""
    rows, notes = [], []
    for kind in (KINDS[name] for name in config["probes"]["kinds"] if KINDS[name].off_grid):
        missing = [key for key in kind.off_grid.rates if key not in rates.values]
        if missing:
            notes.append(f"not priced: the {kind.title} probe (the rates lack {', '.join(missing)}: "
                         "resources/rates/h100.yaml has it)")
            continue
        for model, (arch, dim) in widths.items():
            if not kind.off_grid.applies_to(config["models"][model]):
                continue
            jobs = kind.off_grid.jobs(datasets, dim, bytes_per_value(config["features"]["dtype"]), config["probes"])
            used = {key for job in jobs for key in job.work}
            row = Row(kind.title, model, projected_rates=set(rates.projected_keys(tuple(sorted(used)))))
            for job in jobs:
                seconds = priced_job_seconds(job, rates.values, arch)
                merge(row, Row(kind.title, model, 1, 0, job.written_bytes + job.results * RESULT_BYTES, 0, seconds,
                               longest_job_s=seconds))
            rows.append(row)
    return rows, notes


def captioned_images(data, images_per_concept: int) -> int:
    """The test images of ``data`` captioned: all, or the first ``images_per_concept`` of
    each concept (at most its test images)."""
    return data.test if not images_per_concept else min(data.test, data.classes * images_per_concept)


def caption_rows(config: dict, datasets: list, rates: Rates) -> tuple[list[Row], list[str]]:
    """Class-level captioning (analyses.captions.enabled), two rows for its captioner: a
    caption-images job per captioned dataset (its captioned test images), and the
    auto-descriptions jobs (per dataset, and per result model's k-means clusters with
    clusters: true), each embedding every caption of its dataset; or the note of why it is
    not priced."""
    settings = config["analyses"]["captions"]
    if not settings["enabled"]:
        return [], []
    if not all(key in rates.values for key in CAPTION_RATE_KEYS):
        return [], [f"not priced: class-level captioning (the rates lack {', '.join(CAPTION_RATE_KEYS)}: "
                    "resources/rates/h100.yaml has them)"]
    sized = {data.name: data for data in datasets}
    names = [name for name in settings["datasets"] or config["datasets"] if name in sized]
    captioner, arch = settings["captioner"]["name"], settings["captioner"]["arch"]
    kmeans = config["analyses"].get("kmeans", {}).get("enabled", True)
    clusters = len(config["results"]["models"] or config["models"]) if settings["clusters"] and kmeans else 0
    projected = set(rates.projected_keys(tuple(CAPTION_RATES)))
    captioning = Row(CAPTION_STAGE, captioner, projected_rates=projected)
    describing = Row(DESCRIPTION_STAGE, captioner, projected_rates=projected)
    for name in names:
        images = captioned_images(sized[name], settings["images_per_concept"])
        seconds = caption_seconds(images, rates.values, arch)
        merge(captioning, Row(CAPTION_STAGE, captioner, 1, images, RESULT_BYTES, 0, seconds, longest_job_s=seconds))
        seconds = description_seconds(images, rates.values, arch)
        merge(describing, Row(DESCRIPTION_STAGE, captioner, 1 + clusters, 0, (1 + clusters) * RESULT_BYTES, 0,
                              (1 + clusters) * seconds, longest_job_s=seconds))
    return [captioning, describing], []


DETECTION_STAGE = "detection"
DETECTION_RATES = {*DETECTION_RATE_KEYS, "read_bytes_per_s", "prepare_bytes_per_s", "scoring_flops_per_s",
                   "job_start_s", "cuda_start_s"}


def detection_rows(config: dict, datasets: list, widths: dict, rates: Rates) -> tuple[list[Row], list[str]]:
    """Unseen-concept detection (analyses.detection.enabled): a row per scored model, one job
    reading IN-1K's training and every test feature (:func:`detection_seconds`); or the note of
    why it is not priced."""
    settings = config["analyses"].get("detection", {})
    sized = {data.name: data for data in datasets}
    if not settings.get("enabled", True) or IN1K not in sized or len(sized) < 2:
        return [], []
    if not all(key in rates.values for key in DETECTION_RATE_KEYS):
        return [], [f"not priced: unseen-concept detection (the rates lack {', '.join(DETECTION_RATE_KEYS)}: "
                    "resources/rates/h100.yaml has them)"]
    known, models = sized[IN1K], settings.get("models") or config["results"]["models"] or list(widths)
    unknown = sum(data.test for name, data in sized.items() if name != IN1K)
    projected = set(rates.projected_keys(tuple(DETECTION_RATES)))
    rows = []
    for model in (model for model in models if model in widths):
        dim = widths[model][1]
        seconds = detection_seconds(known.train, known.test, unknown, dim, known.classes, settings.get("k", 1000),
                                    len(config["probes"]["seeds"]), config["features"]["dtype"], rates.values)
        rows.append(Row(DETECTION_STAGE, model, 1, 0, RESULT_BYTES, 0, seconds, projected_rates=projected,
                        longest_job_s=seconds))
    return rows, []


CONCEPT_STAGE = "concepts"


def concept_rows(config: dict, datasets: list, widths: dict, rates: Rates) -> list[Row]:
    """Concept generalization as a curve (analyses.concepts.enabled): a row per scored model, one
    job scoring every level's test images with each seed's classifier (:func:`concept_seconds`)."""
    settings = config["analyses"].get("concepts", {})
    levels = [data for data in datasets if is_level(data.name)]
    if not settings.get("enabled", True) or not levels:
        return []
    series = config.get(SERIES_CHECKPOINTS) or {}
    models = settings.get("models") or config["results"]["models"] or [model for model in widths if model not in series]
    test, classes = sum(data.test for data in levels), max(data.classes for data in levels)
    projected = set(rates.projected_keys(CONCEPT_RATE_KEYS))
    rows = []
    for model in (model for model in models if model in widths):
        seconds = concept_seconds(test, widths[model][1], classes, len(config["probes"]["seeds"]),
                                  config["features"]["dtype"], rates.values)
        rows.append(Row(CONCEPT_STAGE, model, 1, 0, RESULT_BYTES, 0, seconds, projected_rates=projected,
                        longest_job_s=seconds))
    return rows


# the plan config's series checkpoints of the series protocol alone: model -> its series and
# protocol (imagenet_cog.models.series.SeriesProtocol.deviation, with "series" its name)
SERIES_CHECKPOINTS = "series_checkpoints"


def series_stage(series: str) -> str:
    return f"series {series}"


def series_checkpoint_row(model: str, arch: str, dim: int, protocol: dict, config: dict, datasets: list,
                          rates: Rates) -> Row:
    """A series checkpoint's one row: its extraction, its linear probes at the series' N, seeds
    and trials (one job a run), its k-NN and its per-concept accuracy."""
    probes = {**config["probes"], "shots": protocol["shots"], "seeds": protocol["seeds"],
              "trials": protocol["trials"], "group": "seed"}
    own = tuple(OWN_JOB_KINDS) if protocol["knn_probe"] else ()
    groups = [ProbedDatasets("series", datasets, probes, True, own)]
    row = Row(series_stage(protocol["series"]), model)
    for part in model_rows(model, arch, dim, groups, config["features"], rates):
        merge(row, part)
    levels = [data for data in datasets if is_level(data.name)]
    if protocol["concepts"] and levels:
        seconds = concept_seconds(sum(data.test for data in levels), dim, max(data.classes for data in levels),
                                  len(protocol["seeds"]), config["features"]["dtype"], rates.values)
        merge(row, Row(row.stage, model, 1, 0, RESULT_BYTES, 0, seconds,
                       projected_rates=set(rates.projected_keys(CONCEPT_RATE_KEYS)), longest_job_s=seconds))
    return row


def series_rows(config: dict, datasets: list, widths: dict, rates: Rates) -> tuple[list[Row], list[Row]]:
    """A row per series checkpoint of the series protocol, and a row per series: all of them."""
    checkpoints = config.get(SERIES_CHECKPOINTS) or {}
    rows = [series_checkpoint_row(model, *widths[model], protocol, config, datasets, rates)
            for model, protocol in checkpoints.items() if model in widths]
    sums: dict[str, Row] = {}
    for row in rows:
        merge(sums.setdefault(row.stage, Row(row.stage, "")), row)
    for stage, row in sums.items():
        count = sum(1 for one in rows if one.stage == stage)
        row.model = f"all {count} checkpoint{'s' if count > 1 else ''}"
    return rows, list(sums.values())


def merge(into: Row, row: Row) -> None:
    into.jobs += row.jobs
    into.images_read += row.images_read
    into.bytes_written += row.bytes_written
    into.trial_epochs += row.trial_epochs
    into.seconds += row.seconds
    into.projected_rates |= row.projected_rates
    into.longest_job_s = max(into.longest_job_s, row.longest_job_s)


def plan_rows(config: dict, image_counts: Path, split_summary: Path | None, rates: Rates,
              gpus: int, compare_workers: tuple[int, ...] = ()) -> tuple[list[Row], list[str]]:
    """Every row of the plan (models, then the total and the wall time) and the notes: where
    the sizes come from, what could not be priced, and a projected extraction rate's node
    shapes (features.num_workers, and ``compare_workers`` beside it)."""
    features = config["features"]
    rows, notes = priced_rows(config, image_counts, split_summary,
                              rates.for_node(features["num_workers"], features.get("host_resize", "pil")), gpus)
    return rows, notes + node_notes(config, image_counts, split_summary, rates, gpus, compare_workers)


def node_notes(config: dict, image_counts: Path, split_summary: Path | None, rates: Rates, gpus: int,
               compare_workers: tuple[int, ...]) -> list[str]:
    """A note per loader-worker count (this config's, then ``compare_workers``): the
    projected extraction rate of the baseline model's architecture, the extraction's GPU-hours
    and the total's; none where the rates measured extraction or lack its two terms."""
    features = config["features"]
    resize = features.get("host_resize", "pil")
    if rates.for_node(features["num_workers"], resize) is rates:
        return []
    counts = dict.fromkeys([features["num_workers"], *compare_workers])
    baseline = config["results"].get("baseline_model")
    model = baseline if baseline in config["models"] else next(iter(config["models"]))
    arch = config["models"][model]["arch"]
    device = arch_rate(rates.values, EXTRACTION_DEVICE_KEY, arch)
    notes = []
    for workers in counts:
        node = rates.for_node(workers, resize)
        rows, _ = priced_rows(config, image_counts, split_summary, node, gpus)
        extraction = sum(row.seconds for row in rows if row.stage == "extraction")
        total = next(row.seconds for row in rows if row.stage == "total")
        host = max(workers, 1) * rates.values[EXTRACTION_HOST_KEY][resize]
        notes.append(f"{workers} loader workers ({workers + 1} cores per GPU): extraction at "
                     f"{arch_rate(node.values, 'extraction_images_per_s', arch):,.0f} images/s ({arch}: the smaller of "
                     f"{host:,.0f} on the host, {resize} resize, and {device:,.0f} on the device), extraction "
                     f"{extraction / 3600:.2f} GPU-hours, total {total / 3600:.2f}")
    return notes


def priced_rows(config: dict, image_counts: Path, split_summary: Path | None, rates: Rates,
                gpus: int) -> tuple[list[Row], list[str]]:
    """The plan's rows and notes with ``rates`` as they are."""
    groups, basis = probed_datasets(config, image_counts, split_summary)
    widths, unpriced = model_widths(config["models"])
    rows = []
    for model, (arch, dim) in widths.items():
        if model not in (config.get(SERIES_CHECKPOINTS) or {}):
            rows += model_rows(model, arch, dim, groups, config["features"], rates)
    checkpoints, series_sums = series_rows(config, groups[0].datasets, widths, rates)
    finetuned, finetune_notes = finetune_rows(config, groups[0].datasets, widths, rates)
    off_grid, off_grid_notes = off_grid_rows(config, groups[0].datasets, widths, rates)
    captioned, caption_notes = caption_rows(config, groups[0].datasets, rates)
    detected, detection_notes = detection_rows(config, groups[0].datasets, widths, rates)
    concepts = concept_rows(config, groups[0].datasets, widths, rates)
    rows += finetuned + off_grid + captioned + detected + concepts + checkpoints
    total = Row("total", "all models", bytes_written=TABLE_BYTES)
    for row in rows:
        merge(total, row)
    rows += series_sums
    wall = Row(f"wall time on {gpus} GPU{'s' if gpus > 1 else ''}", "all models",
               projected_rates=set(total.projected_rates), wall=True)
    # jobs spread over the GPUs, but no faster than the longest single job
    wall.seconds = max(total.seconds / gpus, max((row.longest_job_s for row in rows), default=0.0))
    notes = [f"device: {rates.device} (rates from {rates.source})", f"dataset sizes: {basis}",
             "bytes_written: features (float16 or float32 per features.dtype) and the probes' journals, results and "
             f"N = all classifiers; the total adds ~{TABLE_BYTES / 1e6:.0f} MB of tables and figures"]
    own = tuple(key for kind in priced_kinds(config) if rates.prices(kind) for key in KINDS[kind].own_rates)
    used = rates.projected_keys(RATE_KEYS + own + (FINETUNE_RATE_KEYS if finetuned else ())
                                + (OFF_GRID_RATE_KEYS if off_grid else ()) + (CAPTION_RATE_KEYS if captioned else ())
                                + (DETECTION_RATE_KEYS if detected else ()))
    if used:
        notes.append(f"projected rates (not measured on {rates.device}): {', '.join(used)}")
    notes += [f"not priced: model {model}: {why}" for model, why in unpriced.items()]
    notes += finetune_notes + off_grid_notes + caption_notes + detection_notes + not_priced(config, rates)
    if series_sums:
        notes.append("series: each checkpoint of the series protocol in a row (extraction, probes, k-NN, per-concept "
                     "accuracy), each series in all in a row of its own (not added again to the total)")
    return rows + [total, wall], notes


def priced_kinds(config: dict) -> list[str]:
    """The configured probe kinds the cost model counts (their modules' priced)."""
    return [kind for kind in config["probes"]["kinds"] if KINDS[kind].priced]


def not_priced(config: dict, rates: Rates) -> list[str]:
    """What a run does that the cost model has no rates for."""
    missing = ["not priced: the levels, splits, results and figures stages (CPU jobs, minutes; the splits read "
               "the tar indexes, no image)"]
    analyses = [name for name in ("kmeans", "alignment_uniformity", "learnability")
                if config["analyses"].get(name, {}).get("enabled", True)]
    if analyses:
        missing.append(f"not priced: the analyses ({', '.join(analyses)}) of every model and dataset")
    other_kinds = [kind for kind in config["probes"]["kinds"] if not KINDS[kind].priced and not KINDS[kind].off_grid]
    if other_kinds:
        missing.append(f"not priced: the probe kinds {', '.join(other_kinds)}")
    missing += [f"not priced: the {KINDS[kind].title} probe (the rates lack {', '.join(KINDS[kind].own_rates)}: "
                "resources/rates/h100.yaml has them, or measure them with benchmarks/protocol_cost.py)"
                for kind in priced_kinds(config) if not rates.prices(kind)]
    if config["in1k_blurred"]["enabled"]:
        missing.append("not priced: IN-1K-blurred (in1k_blurred.enabled)")
    if config.get("label_audit", {}).get("enabled"):
        missing.append("not priced: the label-noise audit")
    return missing


def human_bytes(count: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count:.0f} B"


def format_table(rows: list[Row], notes: list[str]) -> str:
    """The plan as an aligned text table (bytes and counts in readable units) with its notes."""
    header = ["stage", "model", "jobs", "images read", "written", "trial-epochs", "hours", "rates"]
    body = [row.cells() for row in rows]
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(str(cell).ljust(width) if i < 2 else str(cell).rjust(width)
                       for i, (cell, width) in enumerate(zip(line, widths))) for line in [header, *body]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines + [""] + [f"- {note}" for note in notes]) + "\n"


def plan_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the run's config as JSON (the rule passes it)")
    parser.add_argument("--image-counts", type=Path, required=True, help="the shipped Fall 2011 image counts")
    parser.add_argument("--split-summary", type=Path, help="a run's split summary: exact sizes where it exists")
    parser.add_argument("--rates", type=Path, required=True, help="a rates file (resources/rates/)")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--compare-loader-workers", type=int, nargs="*", default=[],
                        help="loader-worker counts whose extraction the notes price beside features.num_workers'")
    parser.add_argument("--benchmarks", type=Path, help="the run's benchmark folder: measured against projected")
    parser.add_argument("--write-rates", type=Path, help="write rates calibrated on the measured jobs here")
    parser.add_argument("--device-name", help="the hardware the calibrated rates are for (default: the host)")
    parser.add_argument("--output", type=Path, required=True, help="plan.tsv")
    args = parser.parse_args(argv)
    config = json.loads(args.config)
    rates = read_rates(args.rates)
    rows, notes = plan_rows(config, args.image_counts, args.split_summary, rates, args.gpus,
                            tuple(args.compare_loader_workers))
    write_tsv(args.output, COLUMNS, [row.values() for row in rows])
    print(format_table(rows, notes))
    if args.benchmarks:
        compare_command_part(config, args, rates)
    return 0
