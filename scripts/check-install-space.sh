#!/usr/bin/env bash
# Before a first install: on x86_64 Linux torch's CUDA build and its NVIDIA libraries take ~6.4 GB
# in the venv (elsewhere a CPU build, under 1 GB), and pip out of room stops halfway with a bare
# "No space left on device". Say it up front.
set -euo pipefail
venv=$1
needed_mb=2000
[ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] && needed_mb=7000
# torch's metadata, not `import torch` (2 s): every `make demo` and `make test` runs this
[ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import importlib.metadata as m; m.distribution('torch')" \
    2>/dev/null && exit 0
read -r free_mb mount_point < <(df -Pm "$venv" | awk 'NR == 2 {print $4, $6}')
if [ "$free_mb" -lt "$needed_mb" ]; then
    echo "error: $venv needs ~${needed_mb} MB free for torch and the packages beside it;" \
         "$mount_point has ${free_mb} MB." >&2
    echo "       Free some space there (old clones, /tmp/pytest-of-$(id -un)), then run 'make install' again." >&2
    exit 1
fi
