"""Reproducible choices: generators seeded by names, and evenly spaced picks.

A choice made with :func:`derived_rng` depends on its keys alone (e.g. a seed and a wnid),
so adding a concept, a draw or a dataset never changes the choices made for the others.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np


def derived_rng(*keys: object) -> np.random.Generator:
    """A generator seeded by a hash of ``keys``: the same keys give the same stream on any
    machine and Python version (unlike ``hash()``), different keys independent ones."""
    digest = hashlib.sha256("\x1f".join(str(key) for key in keys).encode()).digest()
    return np.random.default_rng(np.frombuffer(digest, dtype="<u4"))


def spread(items: Sequence[str], count: int) -> list[str]:
    """``count`` items evenly spaced over ``items``, first and last included."""
    if len(items) <= count:
        return list(items)
    if count == 1:
        return [items[0]]
    return [items[round(k * (len(items) - 1) / (count - 1))] for k in range(count)]
