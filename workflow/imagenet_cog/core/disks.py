"""The filesystem a path is on, as the run's messages name it: its mount point, its block
size and free space, and whether a write that failed found it full."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

# Free bytes under which a filesystem counts as full: a write that fails there filled it to the block.
FULL_BELOW = 1 << 20


def existing(path: str | os.PathLike) -> Path:
    """``path`` or its nearest existing parent: where it will be made."""
    found = Path(path).absolute()
    while not found.exists():
        found = found.parent
    return found


def mount_point(path: str | os.PathLike) -> Path:
    """The folder the filesystem holding ``path`` (or where it will be made) is mounted at."""
    found = existing(path).resolve()
    while not os.path.ismount(found):
        found = found.parent
    return found


# Larger "blocks" are a network filesystem's transfer size (NFS reports its 1 MiB wsize), not
# what a small file takes on the server's disk: one of these is taken for them.
SMALL_BLOCK, LARGEST_BLOCK = 4096, 64 << 10


def block_size(path: str | os.PathLike) -> int:
    """The filesystem's block: what the smallest file takes on it."""
    size = os.statvfs(existing(path)).f_frsize
    return size if 0 < size <= LARGEST_BLOCK else SMALL_BLOCK


def free_bytes(path: str | os.PathLike) -> int:
    return shutil.disk_usage(existing(path)).free


def filesystem_full(folder: str | os.PathLike) -> bool:
    """Whether ``folder``'s filesystem is full: a write failed so is taken for a full disk even
    where the library said otherwise (torch.save's "unexpected pos", measured on a full tmpfs)."""
    try:
        return free_bytes(folder) < FULL_BELOW
    except OSError:
        return False


def is_disk_full(error: BaseException) -> bool:
    # h5py reports HDF5's failed writes as a RuntimeError carrying the C library's text.
    return getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "No space left on device" in str(error)
