"""After a run: each rule's measured time (Snakemake's benchmark files) against the plan's
projection, and rates calibrated on them for the user's own hardware.

The benchmark files are ``<benchmarks>/features/<model>/<dataset>/...`` (rules
extract_split, extract_features) and ``<benchmarks>/probes/<model>/<dataset>/...`` (probe,
probe_seeds, probe_resident, and a kind with jobs of its own's ``<kind>.tsv``, probe_knn's
``knn.tsv``); their first column ``s`` is the
job's wall time. A rule's
projection for the jobs measured is the dataset's projected seconds times the share of its
jobs that have a benchmark file.
"""

from __future__ import annotations

import csv
import socket
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from imagenet_cog.core.io import write_tsv
from imagenet_cog.core.naming import own_job_rule
from imagenet_cog.plan.cost import FINETUNE_RATE_KEYS, OWN_JOB_KINDS, PER_ARCH_KEYS, RATE_KEYS, dataset_cost
from imagenet_cog.plan.rates import MEASURED, Rates, write_rates
from imagenet_cog.plan.work import model_widths, probed_datasets
from imagenet_cog.probes.kinds import KINDS

COMPARISON_COLUMNS = ("rule", "model", "dataset", "jobs", "measured_s", "projected_s", "ratio")
# rates that are times (scaled by measured / projected) and rates that are speeds (divided by it)
EXTRACTION_TIMES = ("extraction_shard_fixed_s", "model_build_s", "checkpoint_load_s")
PROBE_TIMES = ("probe_step_fixed_s", "probe_step_per_row_s", "probe_epoch_s", "job_start_s", "cuda_start_s",
               "compile_s")
PROBE_SPEEDS = ("scoring_flops_per_s", "read_bytes_per_s", "prepare_bytes_per_s")


@dataclass
class Measured:
    rule: str
    model: str
    dataset: str
    stage: str  # extraction | probes | a kind with jobs of its own (knn)
    jobs: int
    seconds: float
    projected: float = 0.0
    projected_compute: float = 0.0  # a kind's own jobs: the part its own rates price (the k-NN's products and top-k)


def benchmark_seconds(path: Path) -> float:
    """A Snakemake benchmark file's wall seconds (the ``s`` column, repeats summed)."""
    with open(path, newline="") as stream:
        return sum(float(row["s"]) for row in csv.DictReader(stream, delimiter="\t") if row.get("s") not in (None, "NA"))


def rule_of(relative: Path) -> tuple[str, str] | None:
    """(rule, stage) of a benchmark file of the extraction, linear probe or own-job (k-NN) rules."""
    name, parent, stem = relative.name, relative.parent.name, relative.stem
    if relative.parts[0] == "features":
        return ("extract_features", "extraction") if name.startswith("shard-") else ("extract_split", "extraction")
    if relative.parts[0] != "probes" or len(relative.parts) > 5:
        return None  # probe kinds other than linear sit one folder deeper
    if name == "resident.tsv":
        return "probe_resident", "probes"
    if stem in OWN_JOB_KINDS:
        return own_job_rule(stem), stem
    if parent.startswith("shots-"):
        return ("probe_seeds", "probes") if name == "seeds.tsv" else ("probe", "probes")
    return None


def measured_jobs(benchmarks: Path, models: set[str]) -> list[Measured]:
    """Every measured extraction, linear probe and own-job (k-NN) job, summed per rule, model and dataset."""
    found: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for path in sorted(benchmarks.rglob("*.tsv")):
        relative = path.relative_to(benchmarks)
        if len(relative.parts) < 4 or relative.parts[1] not in models:
            continue
        known = rule_of(relative)
        if known:
            found[(known[0], relative.parts[1], relative.parts[2], known[1])].append(benchmark_seconds(path))
    return [Measured(rule, model, dataset, stage, len(seconds), sum(seconds))
            for (rule, model, dataset, stage), seconds in found.items()]


def projected_jobs(config: dict, image_counts: Path, split_summary: Path | None, rates: Rates):
    """(stage, model, dataset) -> (projected seconds, jobs, the seconds a kind's own rates price) of
    every extracted or probed dataset, the stage of a kind's own jobs being the kind."""
    groups, _ = probed_datasets(config, image_counts, split_summary)
    widths, _ = model_widths(config["models"])
    projected = {}
    for model, (arch, dim) in widths.items():
        for group in groups:
            own_kinds = tuple(kind for kind in group.own_job_kinds if rates.prices(kind))
            for data in group.datasets:
                cost = dataset_cost(data, dim, group.probes, config["features"], rates.values, arch, own_kinds)
                if group.extracted:
                    projected[("extraction", model, data.name)] = (cost.extraction_s, cost.work.extraction_jobs, 0.0)
                if group.probes is not None:
                    projected[("probes", model, data.name)] = (cost.probe_s, cost.work.probe_jobs, 0.0)
                for kind, job in cost.work.own_jobs.items():
                    projected[(kind, model, data.name)] = (cost.own_job_s[kind], job.jobs, cost.own_compute_s[kind])
    return projected, widths


def compare(config: dict, image_counts: Path, split_summary: Path | None, rates: Rates,
            benchmarks: Path) -> tuple[list[Measured], dict]:
    projected, widths = projected_jobs(config, image_counts, split_summary, rates)
    rows = []
    for job in measured_jobs(benchmarks, set(widths)):
        seconds, jobs, compute = projected.get((job.stage, job.model, job.dataset), (0.0, 0, 0.0))
        if jobs:
            share = min(1.0, job.jobs / jobs)
            job.projected, job.projected_compute = seconds * share, compute * share
            rows.append(job)
    return rows, widths


def calibrated(rates: Rates, rows: list[Measured], widths: dict, device: str) -> Rates:
    """The rates scaled so that the measured jobs' projections equal their times: the probes'
    rates by one ratio (job starts included), then each architecture's extraction rates by
    the ratio of what is left once those starts are taken out (the default: all archs'), and
    each own-job kind's own rates (the k-NN's) by the ratio of what is left of its jobs once
    the starts and loading (priced by the probes' rates) are taken out."""
    def ratio(selected: list[Measured]) -> float | None:
        projected = sum(row.projected for row in selected)
        return sum(row.seconds for row in selected) / projected if projected > 0 else None

    values = {key: (dict(value) if isinstance(value, dict) else value) for key, value in rates.values.items()}
    factor = ratio([row for row in rows if row.stage == "probes"])
    if factor:
        for key in PROBE_TIMES:
            values[key] *= factor
        for key in PROBE_SPEEDS:
            values[key] /= factor
    kinds, where_of = {key: MEASURED for key in RATE_KEYS}, {}
    for kind in OWN_JOB_KINDS:
        calibrate_own_job(kind, [row for row in rows if row.stage == kind], factor, rates, values, kinds, where_of)
    # fine-tuning jobs are not calibrated: their rate keeps its provenance
    kinds.update({key: rates.kinds[key] for key in FINETUNE_RATE_KEYS if key in rates.kinds})
    where_of.update({key: rates.where[key] for key in FINETUNE_RATE_KEYS if key in rates.where})
    starts_before = rates.values["job_start_s"] + rates.values["cuda_start_s"]
    starts_after = values["job_start_s"] + values["cuda_start_s"]
    extraction = [row for row in rows if row.stage == "extraction"]
    by_arch = defaultdict(list)
    for row in extraction:
        by_arch[widths[row.model][0]].append(row)
    for arch, selected in [*by_arch.items(), ("default", extraction)]:
        jobs = sum(row.jobs for row in selected)
        own = sum(row.projected for row in selected) - jobs * starts_before
        if own <= 0:
            continue
        factor = max(sum(row.seconds for row in selected) - jobs * starts_after, 1e-3 * own) / own
        for key in PER_ARCH_KEYS:
            base = rates.values[key].get(arch, rates.values[key].get("default"))
            values[key][arch] = base / factor if key == "extraction_images_per_s" else base * factor
    values["device"] = device
    where = f"calibrated on {len(rows)} measured rule x model x dataset groups of a run (imagenet_cog.plan.measured)"
    return Rates(device, values, kinds, {**{key: where for key in kinds}, **where_of}, where)


def calibrate_own_job(kind: str, rows: list[Measured], probe_factor: float | None, rates: Rates, values: dict,
                      kinds: dict, where_of: dict) -> None:
    """Scales ``kind``'s own rates in ``values`` by its measured jobs (``rows``) and marks them
    measured; without such jobs they keep their provenance."""
    own_rates = KINDS[kind].own_rates
    own = sum(row.projected_compute for row in rows)
    if own <= 0:
        kinds.update({key: rates.kinds[key] for key in own_rates if key in rates.kinds})
        where_of.update({key: rates.where[key] for key in own_rates if key in rates.where})
        return
    # its starts and loading are times and bytes over the probes' rates: scaled by their ratio
    shared_after = sum(row.projected - row.projected_compute for row in rows) * (probe_factor or 1.0)
    kind_factor = max(sum(row.seconds for row in rows) - shared_after, 1e-3 * own) / own
    for key in own_rates:
        values[key] /= kind_factor
        kinds[key] = MEASURED


def format_comparison(rows: list[Measured]) -> str:
    """Per rule: the measured jobs' time against their projection."""
    per_rule = defaultdict(lambda: [0, 0.0, 0.0])
    for row in rows:
        per_rule[row.rule][0] += row.jobs
        per_rule[row.rule][1] += row.seconds
        per_rule[row.rule][2] += row.projected
    lines = ["measured (benchmark files) against projected, per rule:",
             f"{'rule':<18}{'jobs':>7}{'measured h':>13}{'projected h':>13}{'ratio':>8}"]
    for rule, (jobs, seconds, projected) in sorted(per_rule.items()):
        lines.append(f"{rule:<18}{jobs:>7}{seconds / 3600:>13.3f}{projected / 3600:>13.3f}"
                     f"{seconds / projected if projected else float('nan'):>8.2f}")
    return "\n".join(lines) + "\n"


def compare_command_part(config: dict, args, rates: Rates) -> None:
    """The plan command's comparison: printed, written beside the plan, and the calibrated
    rates written where asked."""
    rows, widths = compare(config, args.image_counts, args.split_summary, rates, args.benchmarks)
    output = args.output.with_name(args.output.stem + "_measured.tsv")
    write_tsv(output, COMPARISON_COLUMNS, [[row.rule, row.model, row.dataset, row.jobs, f"{row.seconds:.1f}",
                                            f"{row.projected:.1f}",
                                            f"{row.seconds / row.projected:.3f}" if row.projected else ""]
                                           for row in rows])
    if not rows:
        print(f"no benchmark files of extraction or probe jobs under {args.benchmarks} yet: nothing to compare")
        return
    print(format_comparison(rows))
    if args.write_rates:
        device = args.device_name or f"this run's hardware ({socket.gethostname()})"
        write_rates(args.write_rates, calibrated(rates, rows, widths, device), "")
        print(f"rates calibrated on these jobs written to {args.write_rates}; set plan.rates to it for later plans")
