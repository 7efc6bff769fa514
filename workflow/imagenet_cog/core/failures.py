"""Why a job stopped, told once on the run's screen rather than at the end of its log.

An error the workflow raises on purpose (:class:`ExplainedError`: a damaged file, bad input
found at job time, a model that does not load) or a full disk carries its cause and the way
on in its message. A job's command (``cli.run``) writes the traceback to the job's log, its
stderr, as before, and the message to a reason file in the run's folder of reasons (the
folder in ``IMAGENET_COG_REASONS``, which common.smk sets to ``results_dir/logs/reasons``),
one file per job log. The Snakefile's onerror prints each reason found there once, with the
logs of the jobs it stopped (:func:`reasons_report`); its onstart empties the folder. Local,
warm-started and SLURM jobs write the same files (SLURM's on the shared file system). Any
other error is unexpected: Snakemake's own "Error in rule" names its log.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shlex
import sys
import traceback
from pathlib import Path

from imagenet_cog.core.disks import is_disk_full
from imagenet_cog.core.io import write_json

REASONS_VARIABLE = "IMAGENET_COG_REASONS"
FULL_DISK_ADVICE = ("free space (or move results_dir to a larger disk) and re-run Snakemake: only this job and the "
                    "ones after it run again")


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
    seen = error
    while seen is not None:  # a full disk may be the cause of another error
        if isinstance(seen, Exception) and is_disk_full(seen):
            return full_disk_reason(seen)
        seen = seen.__cause__ or seen.__context__
    return None


def full_disk_reason(error: Exception) -> str:
    """core.io's atomic writes word a full disk with the file and the fix; any other write
    (a log, a library's own file) is worded here."""
    if isinstance(error, OSError) and error.strerror and error.strerror != os.strerror(errno.ENOSPC):
        return error.strerror
    # no file named: the one an error carries may be a copy's source, on another disk
    return f"a write failed: the disk is full ({os.strerror(errno.ENOSPC)}); {FULL_DISK_ADVICE}."


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
    """The traceback and the reason to stderr (the job's log), the reason to the run's folder of
    reasons; False when ``error`` is unexpected (nothing written: the caller raises it)."""
    reason = reason_of(error)
    if reason is None:
        return False
    traceback.print_exception(error)
    print(f"\n{command}: {reason}", file=sys.stderr, flush=True)
    folder = os.environ.get(REASONS_VARIABLE)
    if folder:
        log = job_log()
        try:
            write_json(reason_file(folder, log), {"reason": reason, "command": command, "log": log})
        except OSError as unwritten:  # the disk is full: the log keeps the reason
            print(f"(the reason could not be kept for the run's screen: {unwritten})", file=sys.stderr)
    return True


def forget_failure() -> None:
    """A job that succeeded (a retry) leaves no reason of an earlier try behind."""
    folder = os.environ.get(REASONS_VARIABLE)
    if folder:
        reason_file(folder, job_log()).unlink(missing_ok=True)


def clear_reasons(folder: str | os.PathLike) -> None:
    """The reasons of an earlier run are not this run's (the Snakefile's onstart)."""
    for path in Path(folder).glob("*.json"):
        path.unlink(missing_ok=True)


def reasons_report(folder: str | os.PathLike) -> str:
    """Each reason of the jobs that failed, once, with the logs of the jobs it stopped; empty
    when no job failed on purpose."""
    stopped: dict[str, list[str]] = {}
    for path in sorted(Path(folder).glob("*.json")):
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):  # a reason file cut short by a full disk says nothing
            continue
        stopped.setdefault(entry["reason"], []).append(relative(entry["log"]) if entry["log"] else entry["command"])
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
