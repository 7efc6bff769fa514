"""A table as CSV, Markdown and LaTeX beside each other, and the marks its cells carry.

Every table of the workflow is written by :func:`write_table` (rendered cells) or
:func:`write_tidy_table` (full precision in the CSV, formatted numbers in the others) to
``Layout.table(name, extension)`` for each of ``TABLE_FORMATS``.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from .io import atomic_output, write_text
from .layout import Layout

MISSING = "—"
RANDOM_WEIGHTS_MARK = "†"
RANDOM_WEIGHTS_NOTE = "† randomly initialised weights: a sanity baseline, not a pretrained model."
# a difference a test finds (imagenet_cog.results.statistics)
SIGNIFICANT_MARK = "*"
# a cell whose probes left the paper's protocol (probes.two_stage; imagenet_cog.probes.search)
DEVIATION_MARK = "‡"


def markdown_table(table: pd.DataFrame, caption: str, notes: Sequence[str]) -> str:
    header = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "|".join(["---"] + ["---:"] * (len(table.columns) - 1)) + "|"
    body = ["| " + " | ".join(str(value) for value in row) + " |" for row in table.itertuples(index=False)]
    lines = [f"**{caption}**", "", header, rule, *body]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


LATEX_ESCAPES = {"&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "{": r"\{", "}": r"\}"}


def latex_escape(text: str) -> str:
    text = "".join(LATEX_ESCAPES.get(character, character) for character in str(text))
    return (
        text.replace(RANDOM_WEIGHTS_MARK, r"$^\dagger$")
        .replace("±", r"$\pm$")
        .replace(SIGNIFICANT_MARK, r"$^{*}$")
        .replace(DEVIATION_MARK, r"$^\ddagger$")
        .replace(MISSING, "--")
    )


def latex_table(table: pd.DataFrame, caption: str, notes: Sequence[str]) -> str:
    columns = "l" + "r" * (len(table.columns) - 1)
    lines = [
        r"% needs \usepackage{booktabs}",
        r"\begin{table}[t]", r"\centering", r"\small",
        rf"\begin{{tabular}}{{{columns}}}", r"\toprule",
        " & ".join(latex_escape(column) for column in table.columns) + r" \\", r"\midrule",
    ]
    lines += [" & ".join(latex_escape(value) for value in row) + r" \\" for row in table.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    caption_text = latex_escape(caption) + "".join(" " + latex_escape(note) for note in notes)
    lines += [rf"\caption{{{caption_text}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def write_table(layout: Layout, name: str, table: pd.DataFrame, caption: str, notes: Sequence[str]) -> None:
    with atomic_output(layout.table(name, "csv")) as temporary:
        table.to_csv(temporary, index=False)
    write_text(layout.table(name, "md"), markdown_table(table, caption, notes))
    write_text(layout.table(name, "tex"), latex_table(table, caption, notes))


def write_tidy_table(
    layout: Layout, name: str, table: pd.DataFrame, caption: str, notes: Sequence[str], formats: dict[str, str]
) -> None:
    """A tidy table: full precision in the CSV; ``formats`` (column -> format spec, e.g. ".2f"),
    empty for NaN, in Markdown and LaTeX."""
    with atomic_output(layout.table(name, "csv")) as temporary:
        table.to_csv(temporary, index=False)
    rendered = table.copy().astype(object)
    for column, spec in formats.items():
        rendered[column] = [format(value, spec) if pd.notna(value) else "" for value in table[column]]
    rendered = rendered.where(rendered.notna(), "")
    write_text(layout.table(name, "md"), markdown_table(rendered, caption, notes))
    write_text(layout.table(name, "tex"), latex_table(rendered, caption, notes))
