"""How a config's ``paper_name`` names a model of the paper: as printed in its tables ("s-DINO") or
without the category prefix ("DINO"), case-insensitive, spaces folded. Standard library only: the
Snakefile checks every ``paper_name`` with it when it is parsed."""

from __future__ import annotations

import re


def name_key(name: str) -> str:
    return re.sub(r"\s+", " ", name.strip()).casefold()


def accepted_names(names: list[str]) -> dict[str, str]:
    """Accepted spellings -> the paper's name of the model."""
    accepted = {}
    for name in names:
        accepted[name_key(name)] = name
        accepted.setdefault(name_key(re.sub(r"^[asrd]-", "", name)), name)
    return accepted
