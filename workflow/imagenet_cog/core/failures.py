"""Why a job stopped, told once on the run's screen rather than at the end of its log.

An error the workflow raises on purpose (:class:`ExplainedError`: a damaged file, bad input
found at job time, a model that does not load) or a full disk carries its cause and the way
on in its message. A job's command (``cli.run``) writes the traceback to the job's log, its
stderr, as before, and the message to a reason file in the run's folder of reasons (the
folder in ``IMAGENET_COG_REASONS``, which common/jobs.smk sets to ``results_dir/logs/reasons``),
one file per job log. The Snakefile's onerror prints each reason found there once, with the
logs of the jobs it stopped (:func:`reasons_report`); its onstart empties the folder and lays
spare reason files in it (:func:`prepare_reasons`), which a job that finds the disk full
takes over and writes in place, on blocks the disk already gave, where a new file would not
fit. Local, warm-started and SLURM jobs write the same files (SLURM's on the shared file
system). Any other error is unexpected: Snakemake's own "Error in rule" names its log.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shlex
import sys
import tempfile
import traceback
from pathlib import Path

from imagenet_cog.core.disks import FULL_BELOW, filesystem_full, free_bytes, is_disk_full, mount_point
from imagenet_cog.core.io import write_json

REASONS_VARIABLE = "IMAGENET_COG_REASONS"
# Spare reason files: a block each, enough for the jobs a full disk stops at once to be named
SPARE_PREFIX, SPARES, SPARE_BYTES = "spare-", 4, 4096


class ExplainedError(Exception):
    """An error raised on purpose: its message names the cause and the way on, and is what the
    run's screen shows of the failed job (the traceback stays in the job's log)."""


class DamagedFileError(ExplainedError, ValueError):
    """A file the workflow made cannot be read; Snakemake takes it as finished, so the message
    gives the command that rebuilds it (and what was made from it)."""

    def __init__(self, path: str | os.PathLike, what: str):
        super().__init__(
            f"{path}: {what}; a crashed job or an interrupted copy cut it short, and Snakemake takes it as "
            f"finished. Rebuild it, and what was made from it: {rebuild_command(path)} (on SLURM: --profile "
            f"slurm in place of --cores all)"
        )


def rebuild_command(path: str | os.PathLike) -> str:
    return f"snakemake --cores all --forcerun {shlex.quote(relative(str(path)))}"


def reason_of(error: BaseException) -> str | None:
    """The message the run shows for ``error``; None for an unexpected error."""
    if isinstance(error, ExplainedError):
        return str(error)
    full = full_filesystem(error)
    return None if full is None else full_disk_reason(full)


def causes(error: BaseException) -> list[BaseException]:
    """``error`` and the errors it came of (a full disk may be the cause of another error)."""
    chain: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def full_filesystem(error: BaseException) -> Path | None:
    """The mount point of the filesystem that ``error`` found full; None when it did not come of
    a full disk. Among the files the errors name (a copy names its source too, which may be on
    another disk), the run's folder of reasons (results_dir's disk), the job's log and the
    temporary folder: for an error that says the disk is full, the one with the least space
    left; for any other, one that is full (a library that does not say so: torch.save's
    "unexpected pos" on a full tmpfs)."""
    chain = causes(error)
    named = [getattr(seen, attribute, None) for seen in chain for attribute in ("filename", "filename2")]
    candidates = [*named, os.environ.get(REASONS_VARIABLE), job_log(), tempfile.gettempdir()]
    free: dict[Path, int] = {}
    for candidate in candidates:
        if isinstance(candidate, (str, bytes, os.PathLike)):
            with contextlib.suppress(OSError, ValueError):
                path = os.fsdecode(candidate)
                free.setdefault(mount_point(path), free_bytes(path))
    if not free:
        return None
    fullest = min(free, key=free.get)
    said = any(isinstance(seen, Exception) and is_disk_full(seen) for seen in chain)
    return fullest if said or free[fullest] < FULL_BELOW else None


def full_disk_reason(filesystem: Path) -> str:
    """A full disk, worded alike for every job it stops: told once however many it stopped."""
    return (f"the disk is full: the filesystem at {filesystem} has no space left ({os.strerror(errno.ENOSPC)}); "
            "free space on it, or move what the run keeps there (results_dir, TMPDIR) to a larger disk, and re-run "
            "Snakemake: only the failed jobs and the ones after them run again")


def job_log() -> str | None:
    """The file this process's stderr goes to (the rule's ``log:``), when it is a file."""
    try:
        path = os.readlink("/proc/self/fd/2")
    except OSError:
        return None
    return path if os.path.isfile(path) else None


def reason_file(folder: str | os.PathLike, log: str | None) -> Path:
    """One reason file per job log (a retried job replaces its own)."""
    key = log if log is not None else f"pid-{os.getpid()}"
    return Path(folder) / f"{hashlib.blake2b(key.encode(), digest_size=8).hexdigest()}.json"


def report_failure(command: str, error: BaseException) -> bool:
    """The reason to the run's folder of reasons, the traceback and the reason to stderr (the
    job's log); False when ``error`` is unexpected (nothing written: the caller raises it)."""
    reason = reason_of(error)
    if reason is None:
        return False
    folder = os.environ.get(REASONS_VARIABLE)
    kept = folder is None or keep_reason(folder, {"reason": reason, "command": command, "log": job_log()})
    with contextlib.suppress(OSError):  # the log's disk is full: its reason is kept above
        traceback.print_exception(error)
        print(f"\n{command}: {reason}", file=sys.stderr, flush=True)
        if not kept:
            print("(the reason could not be kept for the run's screen: no spare reason file left)", file=sys.stderr)
    return True


def keep_reason(folder: str | os.PathLike, entry: dict) -> bool:
    """``entry`` as the job's reason file; on a full disk, written over a spare reason file
    (False when none is left: other jobs took them)."""
    path = reason_file(folder, entry["log"])
    try:
        write_json(path, entry)
        return True
    except OSError:
        pass
    text = json.dumps(entry).encode()
    for spare in sorted(Path(folder).glob(f"{SPARE_PREFIX}*.json")):
        try:
            os.rename(spare, path)  # taken: no other job writes it
        except OSError:
            continue
        try:
            descriptor = os.open(path, os.O_WRONLY)  # not truncated: its blocks are kept and overwritten
            try:
                return os.write(descriptor, text[:SPARE_BYTES]) == len(text)
            finally:
                os.close(descriptor)
        except OSError:
            return False
    return False


def forget_failure() -> None:
    """A job that succeeded (a retry) leaves no reason of an earlier try behind."""
    folder = os.environ.get(REASONS_VARIABLE)
    if folder:
        reason_file(folder, job_log()).unlink(missing_ok=True)


def prepare_reasons(folder: str | os.PathLike) -> None:
    """The run's start (the Snakefile's onstart): the reasons of an earlier run are not this
    run's; spare reason files, a block of spaces each, wait for a disk that fills (those an
    earlier run laid are kept as they are)."""
    folder = Path(folder)
    for path in folder.glob("*.json"):
        if not path.name.startswith(SPARE_PREFIX):
            path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # a disk full already (the free-space check said so): none laid
        folder.mkdir(parents=True, exist_ok=True)
        for number in range(SPARES):
            spare = folder / f"{SPARE_PREFIX}{number}.json"
            if not spare.is_file() or spare.stat().st_size != SPARE_BYTES:
                spare.write_bytes(b" " * SPARE_BYTES)


def reasons_report(folder: str | os.PathLike) -> str:
    """Each reason of the jobs that failed, once, with the logs of the jobs it stopped, and a
    full disk under ``folder`` (results_dir's) where no job said so; empty when no job failed
    on purpose."""
    stopped: dict[str, list[str]] = {}
    for path in sorted(Path(folder).glob("*.json")):
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):  # a spare left blank, a reason file cut short by a full disk
            continue
        stopped.setdefault(entry["reason"], []).append(relative(entry["log"]) if entry["log"] else entry["command"])
    if filesystem_full(folder):  # a job stopped before it could say so (its log not opened)
        stopped.setdefault(full_disk_reason(mount_point(folder)), ["results_dir's disk, full at the run's end"])
    if not stopped:
        return ""
    lines = [f"Why {'a job' if sum(map(len, stopped.values())) == 1 else 'jobs'} failed "
             "(the tracebacks are in the logs named):"]
    for reason, jobs in stopped.items():
        more = f" and {len(jobs) - 1} other job{'s' if len(jobs) > 2 else ''}" if len(jobs) > 1 else ""
        lines += [f"- {reason}", f"  ({jobs[0]}{more})"]
    return "\n".join(lines)


def relative(path: str) -> str:
    """A path under the run's folder as Snakemake names it (from there); any other as it is."""
    absolute = Path(path).absolute()
    return str(absolute.relative_to(Path.cwd())) if absolute.is_relative_to(Path.cwd()) else path
