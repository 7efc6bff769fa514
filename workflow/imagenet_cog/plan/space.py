"""Whether a run's files fit on its disks, checked before its first job (the Snakefile's onstart).

What the run still writes is the plan's ``bytes_written`` for the configured run (features,
the probes' journals, results and classifiers, tables; :mod:`imagenet_cog.plan.table`) and
what the plan does not price (:data:`UNPRICED_BYTES`), less what ``results_dir`` already
holds, so that a resumed run is asked only for the rest. It is
set against the free space of ``results_dir``'s filesystem; the temporary folder's, where it
is another filesystem, is asked for what the plan puts there: nothing it counts, so it stops
a run only when full. A need that fits with less than :data:`MARGIN` to spare is a warning;
one that does not fit stops the run before any job, naming both figures, the filesystem and
the ways on (another ``results_dir``, ``features.dtype: float16``, ``free_space: warn``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from imagenet_cog.plan.rates import read_rates
from imagenet_cog.plan.table import human_bytes, plan_rows

MARGIN = 0.05  # less to spare than this share of the need is a warning
# What a run writes that the plan does not price (the levels stage's WordNet corpus and
# catalogue, the demo's generated world, logs, figures, analyses): measured on the finished
# demo, 73.3 MB written against the plan's 9.8 MB.
UNPRICED_BYTES = 63.5e6



@dataclass
class Need:
    folder: str  # where the bytes go: results_dir, the temporary folder
    what: str  # how the message names it
    bytes: float


def ways_on(features_dtype: str) -> str:
    smaller = ("features.dtype: float16 (half the bytes of float32 features), "
               if features_dtype == "float32" else "")
    return (f"Go on with another results_dir on a larger disk (--config results_dir=/larger/disk/results), {smaller}"
            "or --config free_space=warn to start anyway.")


def planned_bytes(config: dict, image_counts: str, split_summary: str, rates: str) -> float:
    """The plan's total bytes_written for ``config`` (exact dataset sizes once the split summary exists)."""
    rows, _ = plan_rows(config, Path(image_counts), Path(split_summary), read_rates(Path(rates)), 1)
    return next(row.bytes_written for row in rows if row.stage == "total")


def held_bytes(folder: str | os.PathLike) -> int:
    """The bytes of the files under ``folder`` (0 where it does not exist yet)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed while walked
                continue
    return total


def existing(folder: str | os.PathLike) -> Path:
    """``folder`` or its nearest existing parent: where it will be made."""
    path = Path(folder).resolve()
    while not path.exists():
        path = path.parent
    return path


def mount_point(folder: str | os.PathLike) -> Path:
    path = existing(folder)
    while not os.path.ismount(path):
        path = path.parent
    return path


def run_needs(results_dir: str, planned: float) -> list[Need]:
    held = held_bytes(results_dir)
    still = max(planned + UNPRICED_BYTES - held, 0)
    return [
        Need(results_dir, f"this run writes about {human_bytes(still)} to results_dir {results_dir} (the plan's "
                          f"bytes_written, {human_bytes(planned)}, and {human_bytes(UNPRICED_BYTES)} of files it does "
                          f"not price, less the {human_bytes(held)} results_dir holds)", still),
        Need(tempfile.gettempdir(), f"the temporary folder {tempfile.gettempdir()} needs room", 0),
    ]


def space_problems(needs: list[Need], advice: str,
                   disk_usage: Callable = shutil.disk_usage) -> tuple[list[str], list[str]]:
    """What stops the run (a filesystem without room for its needs) and what is only warned of
    (less than MARGIN to spare); needs on one filesystem are added up."""
    by_filesystem: dict[int, list[Need]] = {}
    for need in needs:
        by_filesystem.setdefault(os.stat(existing(need.folder)).st_dev, []).append(need)
    stops, warnings = [], []
    for together in by_filesystem.values():
        needed = sum(need.bytes for need in together)
        free = disk_usage(existing(together[0].folder)).free
        said = (f"{'; '.join(need.what for need in together)}, and the filesystem at "
                f"{mount_point(together[0].folder)} has {human_bytes(free)} free")
        if free <= needed:
            stops.append(f"Not enough free space: {said}. {advice}")
        elif free < needed * (1 + MARGIN):
            warnings.append(f"Little free space to spare: {said} (under {MARGIN:.0%} more than the need).")
    return stops, warnings
