"""Writing files so that a killed job never leaves one that looks finished.

Every output of the workflow goes through :func:`atomic_output`: the content is written
to a hidden temporary name in the destination folder and renamed into place only once
it is complete (a rename within one file system is atomic on POSIX). What a killed write
left (``.<name>.*.partial``: a ``kill -9`` runs no cleanup) is removed by the next write of
the same file, as the job runs again: Snakemake runs one job per output, so no other writer
of that file can be at work.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import glob
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from imagenet_cog.core.disks import filesystem_full, is_disk_full


def _default_file_mode() -> int:
    """The mode ``open()`` would give a new file; mkstemp's 0600 would hide results from a
    cluster group."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


DEFAULT_FILE_MODE = _default_file_mode()
# Folders as mkdir would make them: the file mode plus search permission where read is allowed.
DEFAULT_DIRECTORY_MODE = DEFAULT_FILE_MODE | (DEFAULT_FILE_MODE & 0o444) >> 2


PARTIAL_SUFFIX = ".partial"


def partial_writes(path: str | os.PathLike) -> list[Path]:
    """The temporary files and folders that killed writes of ``path`` left beside it."""
    destination = Path(path)
    pattern = f".{glob.escape(destination.name)}.*{PARTIAL_SUFFIX}"
    return sorted(destination.parent.glob(pattern)) if destination.parent.is_dir() else []


def remove_partial_writes(path: str | os.PathLike) -> int:
    """Remove what killed writes of ``path`` left; how many there were."""
    found = partial_writes(path)
    for leftover in found:
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
    return len(found)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it to ``path`` on success.

    On any exception the temporary file is removed and ``path`` is left untouched.
    """
    destination = Path(path)
    destination.parent.mkdir(parents=True, exist_ok=True)
    remove_partial_writes(destination)
    handle, temporary = tempfile.mkstemp(
        prefix=f".{destination.name}.", suffix=PARTIAL_SUFFIX, dir=destination.parent
    )
    os.close(handle)
    temporary_path = Path(temporary)
    try:
        yield temporary_path
        if temporary_path.is_file():
            temporary_path.chmod(DEFAULT_FILE_MODE)
        os.replace(temporary_path, destination)
    except Exception as error:
        full = is_disk_full(error) or filesystem_full(destination.parent)  # before the partial file goes
        temporary_path.unlink(missing_ok=True)
        if full:
            raise OSError(
                errno.ENOSPC,
                f"{destination}: the disk is full (no space left in {destination.parent}); "
                f"nothing was written there. Free space (or move results/ to a larger disk) "
                f"and re-run Snakemake: only this job and the ones after it run again.",
            ) from error
        raise
    except BaseException:
        temporary_path.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty hidden folder next to ``path``; on success it replaces ``path`` whole.

    On any exception the hidden folder is removed and ``path`` is left untouched, so a
    killed job never leaves a folder that looks complete.
    """
    destination = Path(path)
    destination.parent.mkdir(parents=True, exist_ok=True)
    remove_partial_writes(destination)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", suffix=PARTIAL_SUFFIX, dir=destination.parent))
    staging.chmod(DEFAULT_DIRECTORY_MODE)  # mkdtemp's private mode would outlive the rename
    try:
        yield staging
        if destination.exists():
            shutil.rmtree(destination)
        os.replace(staging, destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_output(path) as temporary:
        temporary.write_text(text)


def write_json(path: str | os.PathLike, payload: Any) -> None:
    write_text(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def write_tsv(path: str | os.PathLike, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    with atomic_output(path) as temporary:
        with open(temporary, "w", newline="") as stream:
            writer = csv.writer(stream, delimiter="\t", lineterminator="\n")
            writer.writerow(header)
            writer.writerows(rows)


def read_tsv(path: str | os.PathLike) -> list[dict[str, str]]:
    """Rows of a headed TSV file as dictionaries (all values are strings)."""
    return list(iter_tsv(path))


def iter_tsv(path: str | os.PathLike) -> Iterator[dict[str, str]]:
    """The rows of :func:`read_tsv` one at a time: a paper-scale split table (1.3 M rows) is
    ~0.4 GB as a list of dictionaries."""
    with open(path, newline="") as stream:
        yield from csv.DictReader(stream, delimiter="\t")


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> None:
    write_text(path, "".join(f"{line}\n" for line in lines))


def read_lines(path: str | os.PathLike) -> list[str]:
    """Non-empty lines of a text file, stripped; lines starting with '#' are comments."""
    with open(path) as stream:
        return [s for s in (line.strip() for line in stream) if s and not s.startswith("#")]
