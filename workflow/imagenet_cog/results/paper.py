"""Config models -> rows of the paper's published tables (resources/published_top1.tsv).

Standard library only: the Snakefile checks every ``paper_name`` with it when it is parsed.
A ``paper_name`` matches a row's name as printed ("s-DINO") or without its category prefix
("DINO"), case-insensitive.
"""

from __future__ import annotations

import csv
from pathlib import Path

from imagenet_cog.core.paper_names import accepted_names, name_key


def published_model_names(path: str | Path) -> list[str]:
    """The models of the published table, in its order."""
    with open(path, newline="") as stream:
        rows = csv.DictReader((line for line in stream if not line.startswith("#")), delimiter="\t")
        if rows.fieldnames is None or "model" not in rows.fieldnames:
            raise ValueError(f"{path}: not a table of published top-1 (no 'model' column).")
        return list(dict.fromkeys(row["model"] for row in rows))


def resolve_paper_names(models: dict[str, dict], names: list[str], source: str = "published top-1") -> dict[str, str]:
    """Config model -> the published model its ``paper_name`` names; an unknown name is an error."""
    accepted = accepted_names(names)
    resolved, unknown = {}, []
    for model, entry in models.items():
        paper_name = (entry or {}).get("paper_name")
        if paper_name is None:
            continue
        if name_key(paper_name) not in accepted:
            unknown.append(f"{model}: '{paper_name}'")
            continue
        resolved[model] = accepted[name_key(paper_name)]
    if unknown:
        raise ValueError(
            f"models.<name>.paper_name not in {source}: {', '.join(unknown)}; use one of "
            f"{', '.join(names)} (the category prefix may be left out)."
        )
    return resolved
