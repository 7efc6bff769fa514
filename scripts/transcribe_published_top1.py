"""Transcribe supp. Tables 5-10 of the ImageNet-CoG paper into resources/published_top1.tsv.

Run once from the repository root with the paper's text (the PDF converted to text, one
table row a line, cells separated by tabs, "mean + std" cells):

    python scripts/transcribe_published_top1.py PAPER.txt resources/published_top1.tsv

The tables are read from the lines above each caption "Table k: Top-1 accuracies obtained
by linear classifiers on <dataset>" (k = 5..10); the script stops with an error unless it
finds 31 models x 9 N in each of the six tables, the same models in the same order.
"""

from __future__ import annotations

import re
import sys

CAPTIONS = {
    5: "in1k", 6: "l1", 7: "l2", 8: "l3", 9: "l4", 10: "l5",
}
SHOTS = ["1", "2", "4", "8", "16", "32", "64", "128", "all"]
MODELS_PER_TABLE = 31
# Tables 9 and 10 spell one model differently from Tables 5-8; the rows are the same model
SPELLINGS = {"a-T2T-ViTt-14": "a-T2T-ViT-14"}
CELL = re.compile(r"^(\d+\.\d) \+ (\d+\.\d)$")
PROVENANCE = [
    "# Published top-1 (%) of linear probes, mean and std over 5 seeds, for the 31 models of",
    "# Sariyildiz, Kalantidis, Larlus, Alahari, \"Concept Generalization in Visual Representation",
    "# Learning\", ICCV 2021 (arXiv:2012.05649, the version with the 31-model supplementary",
    "# material): supp. Tables 5 (IN-1K) and 6-10 (L1-L5). One row per model x dataset x N.",
    "# model: the name in the table's first column, with its category prefix (a-, s-, d-, r-;",
    "# none for the baseline ResNet50), as Table 5 spells it (Tables 9-10 print \"T2T-ViTt-14\").",
    "# Transcribed by scripts/transcribe_published_top1.py from the paper's text.",
]


def table_rows(lines: list[str], caption_index: int) -> list[list[str]]:
    """The model rows of the table printed right above the caption at ``caption_index``."""
    rows = []
    for line in reversed(lines[:caption_index]):
        if line.startswith("Model\t") or line.startswith("Table "):
            break
        cells = [cell.strip() for cell in line.split("\t") if cell.strip()]
        if len(cells) == 1 + len(SHOTS) and all(CELL.match(cell) for cell in cells[1:]):
            rows.append(cells)
    return list(reversed(rows))


def model_name(cell: str) -> str:
    """'<i>a</i> -ResNet-152' -> 'a-ResNet-152'."""
    return re.sub(r"\s+", " ", re.sub(r"<i>(\w)</i>\s*-", r"\1-", cell)).strip()


def transcribe(text: str) -> list[tuple[str, str, str, str, str]]:
    lines = text.splitlines()
    records = []
    model_order = None
    for number, dataset in CAPTIONS.items():
        caption = next(
            (index for index, line in enumerate(lines)
             if line.startswith(f"Table {number}: **Top-1 accuracies obtained by linear classifiers on")),
            None,
        )
        if caption is None:
            raise SystemExit(f"caption of Table {number} not found")
        rows = table_rows(lines, caption)
        if len(rows) != MODELS_PER_TABLE:
            raise SystemExit(f"Table {number}: {len(rows)} model rows, expected {MODELS_PER_TABLE}")
        models = [SPELLINGS.get(model_name(row[0]), model_name(row[0])) for row in rows]
        if model_order is None:
            model_order = models
        elif models != model_order:
            raise SystemExit(f"Table {number}: models differ from Table 5's")
        for model, row in zip(models, rows):
            for shots, cell in zip(SHOTS, row[1:]):
                mean, std = CELL.match(cell).groups()
                records.append((model, dataset, shots, mean, std))
    return records


def main(paper: str, output: str) -> None:
    with open(paper) as stream:
        records = transcribe(stream.read())
    assert len(records) == MODELS_PER_TABLE * len(CAPTIONS) * len(SHOTS)
    with open(output, "w") as stream:
        stream.write("\n".join(PROVENANCE) + "\n")
        stream.write("model\tdataset\tshots\tmean\tstd\n")
        for record in records:
            stream.write("\t".join(record) + "\n")
    print(f"{len(records)} cells: {MODELS_PER_TABLE} models x {len(CAPTIONS)} datasets x {len(SHOTS)} N")


if __name__ == "__main__":
    main(*sys.argv[1:])
