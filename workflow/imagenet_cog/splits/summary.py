"""The ``split-summary`` command: concepts and images of every dataset's split table.

With ``--missing-vs in1k_blurred=in1k`` it also counts the images of the reference's table
that the dataset's lacks (IN-1K-blurred, paper supp. E: the release lacks a few).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence

from imagenet_cog.core.io import iter_tsv, write_tsv
from imagenet_cog.splits.image_splits import SPLIT_ORDER


def summarise(table: Iterable[Mapping[str, str]]) -> dict[str, int]:
    """Concepts and images of one split table, with the fewest and most images a concept
    has in each split (the paper: 50 test, 732..1300 train per level concept)."""
    per_concept: dict[str, dict[str, int]] = {split: {} for split in SPLIT_ORDER}
    for row in table:
        counts = per_concept[row["split"]]
        counts[row["wnid"]] = counts.get(row["wnid"], 0) + 1
    summary = {"concepts": len(set(per_concept["train"]) | set(per_concept["test"]))}
    for split, counts in per_concept.items():
        summary[f"{split}_images"] = sum(counts.values())
        summary[f"{split}_per_concept_min"] = min(counts.values(), default=0)
        summary[f"{split}_per_concept_max"] = max(counts.values(), default=0)
    return summary


def image_key(row: Mapping[str, str]) -> tuple[str, str, str]:
    """An image as two releases of it agree: split, concept and file name without extension
    (the blurred release's ``.jpg`` is ILSVRC2012's ``.JPEG``; folder and tar paths differ)."""
    return row["split"], row["wnid"], row["path"].rsplit("/", 1)[-1].rsplit(".", 1)[0]


def missing_images(reference: Iterable[Mapping[str, str]], table: Iterable[Mapping[str, str]]) -> dict[str, int]:
    """Per split: images of the reference (IN-1K) split table that ``table`` lacks."""
    present = {image_key(row) for row in table}
    missing = {"train": 0, "test": 0}
    for row in reference:
        if image_key(row) not in present:
            missing[row["split"]] += 1
    return missing


def split_summary(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog split-summary",
        description="One line per dataset: concepts and images in each split.",
    )
    parser.add_argument("--table", action="append", required=True, metavar="DATASET=PATH")
    parser.add_argument("--missing-vs", default=None, metavar="DATASET=REFERENCE",
                        help="count the images of REFERENCE's table that DATASET's lacks (in1k_blurred=in1k)")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    # each table read row by row, one at a time: the paper's six are 7.1 M rows (2.7 GB held at once)
    tables = {dataset: path for dataset, _, path in (value.partition("=") for value in args.table)}
    rows = []
    for dataset, path in tables.items():
        rows.append([dataset, *summarise(iter_tsv(path)).values()])
    header = ["dataset", *summarise([]).keys()]
    if args.missing_vs:
        dataset, _, reference = args.missing_vs.partition("=")
        header += [f"train_missing_vs_{reference}", f"test_missing_vs_{reference}"]
        missing = missing_images(iter_tsv(tables[reference]), iter_tsv(tables[dataset]))
        for row in rows:
            row += [missing["train"], missing["test"]] if row[0] == dataset else ["", ""]
    write_tsv(args.output, header, rows)
    return 0
