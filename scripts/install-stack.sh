#!/usr/bin/env bash
# Installs the workflow and its test tools into the venv (make install): the tested stack, the
# lock's releases as pip constraints, or with STACK=newest the newest releases pyproject.toml allows.
# torch first: pip must not replace a local build of the wanted release with a download. Where the
# lock's torch cannot be had (another platform or Python), the newest stack is installed and said
# so: tests/test_packaging.py then names every release that differs from the lock.
set -euo pipefail
bin=$1 stack=$2 lock=$3
constraints=()
case $stack in
    locked) constraints=(-c "$lock") ;;
    newest) ;;
    *) echo "error: STACK=$stack: either locked (the tested stack, $lock) or newest" >&2; exit 2 ;;
esac
if ! "$bin/pip" install -q "${constraints[@]}" torch torchvision torchcodec; then
    [ "$stack" = locked ] || exit 1
    echo "warning: the tested stack's torch cannot be installed here: installing the newest releases" \
         "instead, which may give other numbers than the tested stack ($lock)" >&2
    constraints=()
    "$bin/pip" install -q torch torchvision torchcodec
fi
"$bin/pip" install -q "${constraints[@]}" -e ".[test]"
