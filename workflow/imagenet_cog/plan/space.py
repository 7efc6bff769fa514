"""Whether a run's files fit on its disks, checked before its first job (the Snakefile's onstart).

What the run still writes is what the configured run leaves under ``results_dir`` as its
disk counts it (:mod:`imagenet_cog.plan.footprint`: the plan's ``bytes_written`` and the
stages the plan does not price, every file in whole blocks of that disk), less what
``results_dir`` already takes on it, so that a resumed run is asked only for the rest. It is
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
from typing import Callable

from imagenet_cog.core.disks import block_size, existing, mount_point
from imagenet_cog.plan.footprint import Files
from imagenet_cog.plan.table import human_bytes

MARGIN = 0.05  # less to spare than this share of the need is a warning


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


def held_on_disk(folder: str | os.PathLike) -> int:
    """What the files and folders under ``folder`` take on its disk (0 where it does not exist yet)."""
    total = 0
    for root, folders, files in os.walk(folder):
        for name in folders + files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:  # removed while walked
                continue
    return total


def run_needs(results_dir: str, files: list[Files]) -> list[Need]:
    """What the run's files (:func:`imagenet_cog.plan.footprint.run_files`) still need on
    results_dir's disk, and the temporary folder's need."""
    block = block_size(results_dir)
    whole = sum(kind.on_disk(block) for kind in files)
    held = held_on_disk(results_dir)
    still = max(whole - held, 0)
    return [
        Need(results_dir, f"this run writes about {human_bytes(still)} to results_dir {results_dir} (its "
                          f"{sum(kind.count for kind in files):,} files and folders in whole {block}-byte blocks: the "
                          f"plan's bytes_written, {human_bytes(files[0].bytes)}, the stages the plan does not price "
                          f"and every job's log; less the {human_bytes(held)} results_dir takes)", still),
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
