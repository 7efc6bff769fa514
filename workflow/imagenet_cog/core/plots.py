"""What the figure writers share: the theme, one style per model, panels, legend, saving.

Importing this module selects matplotlib's Agg backend: figures are files, never windows.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from .io import atomic_output  # noqa: E402
from .layout import FIGURE_FORMATS, Layout  # noqa: E402
from .tables import RANDOM_WEIGHTS_MARK  # noqa: E402

MARKERS = ["o", "s", "^", "v", "D", "P", "X", "*", "<", ">", "h", "p", "d", "H", "8"]
DATASET_LABEL = "Dataset (semantic distance to IN-1K grows left to right)"
PANEL_WIDTH = 3.0
PANEL_HEIGHT = 2.6


def set_theme() -> None:
    """The look of every result and analysis figure."""
    sns.set_theme(context="paper", style="whitegrid", font_scale=0.9)


# How a figure sets apart the models a results command marks (results.exposure: those not directly
# comparable with the others, as the CoG paper colour-codes its web-data models): their lines
# dash-dotted (a baseline's zero line is dashed) and their markers open, a word after their label, and
# the legend's title saying what the mark means.
APART_STYLE = {"linestyle": "-.", "markerfacecolor": "white"}
APART_LINE_WORDS = "dash-dotted lines"
APART_MARKER_WORDS = "open markers"


class ModelStyles:
    """One colour and marker per model, the same in every figure of a run; the models of ``apart``
    (model -> its class, after its label) drawn in ``APART_STYLE``, ``note`` saying why and ``words``
    what each class means, in their order (the legend's title, ``legend_title``)."""

    def __init__(self, summary: pd.DataFrame, apart: Mapping[str, str] | None = None, note: str = "",
                 words: Mapping[str, str] | None = None):
        models = list(dict.fromkeys(summary["model"]))
        palette = sns.color_palette("tab10" if len(models) <= 10 else "husl", len(models))
        labels = summary.drop_duplicates("model").set_index("model")
        self.apart = {model: word for model, word in (apart or {}).items() if model in labels.index}
        self.note, self.words = note, dict(words or {})
        self.style = {
            model: {
                "color": palette[index],
                "marker": MARKERS[index % len(MARKERS)],
                "label": labels.loc[model, "label"] + (RANDOM_WEIGHTS_MARK if labels.loc[model, "random_weights"] else "")
                + (f" [{self.apart[model]}]" if model in self.apart else ""),
                **(APART_STYLE if model in self.apart else {}),
            }
            for index, model in enumerate(models)
        }

    def __getitem__(self, model: str) -> dict:
        return self.style[model]

    def markers(self, model: str) -> dict:
        """The model's style for a figure whose line styles say something else (its lines keep theirs)."""
        return {key: value for key, value in self.style[model].items() if key != "linestyle"}

    def line(self, model: str) -> dict:
        """The model's style for a line without markers."""
        return {key: value for key, value in self.style[model].items() if key in ("color", "label", "linestyle")}

    def points(self, model: str) -> dict:
        """The model's style for a scatter plot: a model set apart in open markers, its colour their edge."""
        style = self.style[model]
        colour = {"facecolors": style["markerfacecolor"], "edgecolors": style["color"]} if model in self.apart else {
            "color": style["color"]}
        return {"marker": style["marker"], "label": style["label"], **colour}

    def legend_title(self, lines: bool = True, markers: bool = True, models: Iterable[str] | None = None) -> str | None:
        """What the mark means and each word of the models set apart among ``models`` (default: every
        model), where one is: ``lines`` and ``markers`` whether the figure draws them in
        ``APART_STYLE`` (a figure whose line styles say something else, or one of neither, leaves
        them out)."""
        present = {self.apart[model] for model in (self.apart if models is None else models) if model in self.apart}
        if not present:
            return None
        marks = [words for words, drawn in ((APART_LINE_WORDS, lines), (APART_MARKER_WORDS, markers)) if drawn]
        shown = ", ".join([" and ".join(marks), "[class] after the name"] if marks else ["[class] after the name"])
        meanings = [f"[{word}] {meaning}" for word, meaning in self.words.items() if word in present]
        return "\n".join([f"{shown[0].upper()}{shown[1:]}: {self.note}", *meanings])


def no_data(ax, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=8, wrap=True)


def figure_legend(fig, axes: np.ndarray, title: str | None = None) -> None:
    """One legend for all panels, below them (saved with ``bbox_inches="tight"``); ``title`` above
    its entries (``ModelStyles.legend_title``)."""
    handles = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.tight_layout()
    if handles:
        fig.legend(handles.values(), handles.keys(), loc="upper center", bbox_to_anchor=(0.5, 0.0),
                   ncol=min(len(handles), 4), frameon=False, fontsize=7,
                   **({"title": title, "title_fontsize": 7} if title else {}))


def panel_grid(count: int, columns: int):
    columns = max(1, min(columns, count))
    rows = math.ceil(count / columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(max(4.5, PANEL_WIDTH * columns), PANEL_HEIGHT * rows), squeeze=False
    )
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    return fig, axes


def save_figure_file(fig, path, dpi: int = 200, **options) -> None:
    """One figure file, its format its extension's, written atomically."""
    with atomic_output(path) as temporary:
        fig.savefig(temporary, format=str(path).rsplit(".", 1)[-1], dpi=dpi, **options)


def save_figure(fig, layout: Layout, name: str, dpi: int = 200, tight: bool = True) -> None:
    """``Layout.figure(name, extension)`` for each of ``FIGURE_FORMATS``; ``tight`` crops
    to what is drawn (legends below the panels included)."""
    for extension in FIGURE_FORMATS:
        save_figure_file(fig, layout.figure(name, extension), dpi, **({"bbox_inches": "tight"} if tight else {}))
