"""What each model was pretrained on, and what that leaves of the benchmark's premise: its exposure.

ImageNet-CoG measures concepts a model has not seen: it is "designed to evaluate models pretrained on
IN-1K" (CoG paper, Sec. 1 and 3.1), and the paper sets its models trained on more data apart as "not
directly comparable" (Sec. 4.1, "Use of web data"). A model entry states its data as
``pretraining_data: [in1k, ...]``, names of the dataset catalogue (``resources/pretraining_datasets.tsv``:
what each dataset holds of IN-21K, with its source); an entry that states none takes the default of
its release (``resources/pretraining_releases.tsv``: rows matched in order by paper name, or by arch and
weights, each with its source). A series' checkpoints take their entry's.

The exposure follows from the datasets, the furthest from the premise winning (``PRECEDENCE``):

* ``labels``: trained with IN-21K's labels: the levels' concepts were its classes;
* ``images``: IN-21K's images without their labels: the levels' test images may have been seen;
* ``web``: images gathered outside ImageNet, whose overlap with the levels nobody has measured;
* ``none``: IN-1K only (or nothing: random weights), the premise;
* ``undeclared``: no declaration and no row of its release (a checkpoint file, a custom factory, a
  release whose tag does not say): nothing is known.

Labels over images: a model trained on the levels' concepts as classes has met both their images and
their names. Images over web: the levels' own test images are IN-21K's, so IN-21K's images hold them,
while a web collection's overlap is unknown. Fine-tuning on IN-1K after any of them keeps it.

Standard library only: the Snakefile resolves every model with it when it is read.
"""

from __future__ import annotations

import csv
import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.naming import IN1K
from imagenet_cog.core.paper_names import accepted_names, name_key

NONE, WEB, IMAGES, LABELS, UNDECLARED = "none", "web", "images", "labels", "undeclared"
# from the premise to the furthest from it: a model's exposure is its datasets' furthest
PRECEDENCE = (NONE, WEB, IMAGES, LABELS)
# the order the leaderboard and the notes list the classes in: the premise, then the furthest first
EXPOSURES = (NONE, LABELS, IMAGES, WEB, UNDECLARED)
MEANINGS = {
    NONE: "IN-1K only (or no data): the benchmark's premise",
    LABELS: "trained with IN-21K labels: the levels' concepts were classes",
    IMAGES: "IN-21K images without their labels: the levels' test images may have been seen",
    WEB: "web data of unknown overlap with the levels' concepts",
    UNDECLARED: "nothing says what it was pretrained on",
}
# the shipped tables, in the workflow's folder (the working directory of a run and of the docs' commands)
DATASETS_TABLE = Path("resources") / "pretraining_datasets.tsv"
RELEASES_TABLE = Path("resources") / "pretraining_releases.tsv"
DATASET_COLUMNS = ["dataset", "title", "in21k_images", "in21k_labels", "web", "gathered_over", "source"]
RELEASE_COLUMNS = ["arch", "weights", "paper_name", "pretraining_data", "source"]
# wordnet: every WordNet synset's name; IN-1K's 1,000 names (the dataset's own name)
GATHERED_OVER = ("wordnet", IN1K, "no", "unknown")
ANY, NOTHING, NOT_SAID = "*", "-", "?"
DECLARED = "the entry's pretraining_data"
DOCS = "docs/models.md, 'What a model was pretrained on'"


class PretrainingDataError(ExplainedError, ValueError):
    """A pretraining table or declaration that cannot be read; the message names the file and the fix."""


@dataclass(frozen=True)
class Dataset:
    """A row of the catalogue: what the dataset holds of IN-21K."""

    name: str
    title: str
    in21k_images: bool
    in21k_labels: bool
    web: bool
    gathered_over: str
    source: str

    @property
    def exposure(self) -> str:
        if self.in21k_labels:
            return LABELS
        if self.in21k_images:
            return IMAGES
        return WEB if self.web else NONE


@dataclass(frozen=True)
class Release:
    """A row of the releases table; ``data`` None where the tag does not say (``?``)."""

    arch: str
    weights: str
    paper_name: str
    data: tuple[str, ...] | None
    source: str

    def matches(self, arch: str, weights: str, checkpoint: bool, paper_name: str | None = None) -> bool:
        """Whether an entry of ``arch`` and ``weights`` (and the paper's model ``paper_name``) is this
        release; a paper row matches by its name alone."""
        if self.paper_name:
            return self.paper_name == paper_name
        if checkpoint and self.weights != ANY:
            return False
        return fnmatch.fnmatchcase(arch, self.arch) and fnmatch.fnmatchcase(weights, self.weights)


@dataclass(frozen=True)
class Pretraining:
    """What a model was pretrained on (``data`` None: undeclared), its exposure and who says so."""

    data: tuple[str, ...] | None
    exposure: str
    source: str = ""

    @property
    def breaks_premise(self) -> bool:
        return self.exposure != NONE

    def data_text(self) -> str:
        """The datasets as a table cell: comma-separated, "-" for none, "?" undeclared."""
        if self.data is None:
            return NOT_SAID
        return ",".join(self.data) or NOTHING

    def to_dict(self) -> dict[str, Any]:
        return {"pretraining_data": None if self.data is None else list(self.data), "exposure": self.exposure}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "Pretraining":
        data = values.get("pretraining_data")
        return cls(None if data is None else tuple(data), values["exposure"])


def read_rows(path: str | Path, columns: list[str]) -> list[dict[str, str]]:
    """The rows of a tab-separated table with a header (``#`` lines are comments)."""
    try:
        with open(path, newline="") as stream:
            reader = csv.DictReader((line for line in stream if not line.startswith("#")), delimiter="\t")
            rows = list(reader)
            fields = reader.fieldnames or []
    except FileNotFoundError:
        raise PretrainingDataError(f"{path}: no such file; the workflow ships it under resources/ ({DOCS}).") from None
    if fields != columns:
        raise PretrainingDataError(f"{path}: the header must be {', '.join(columns)}; it is {', '.join(fields)}.")
    for number, row in enumerate(rows, start=1):
        if None in row or any(value is None or not value.strip() for value in row.values()):
            raise PretrainingDataError(f"{path}: row {number} ({row.get(columns[0])}) does not have "
                                       f"{len(columns)} tab-separated values.")
    return rows


def yes_no(path: str | Path, row: dict[str, str], column: str) -> bool:
    if row[column] not in ("yes", "no"):
        raise PretrainingDataError(f"{path}: dataset {row['dataset']}: {column} is '{row[column]}'; write yes or no.")
    return row[column] == "yes"


def read_datasets(path: str | Path = DATASETS_TABLE) -> dict[str, Dataset]:
    """The catalogue, by name; a row that contradicts itself is refused."""
    datasets = {}
    for row in read_rows(path, DATASET_COLUMNS):
        name = row["dataset"]
        if name in datasets or name in (ANY, NOTHING, NOT_SAID) or "," in name:
            raise PretrainingDataError(f"{path}: dataset '{name}' is named twice or is not a name.")
        labels, images = yes_no(path, row, "in21k_labels"), yes_no(path, row, "in21k_images")
        if labels and not images:
            raise PretrainingDataError(f"{path}: dataset {name} has IN-21K labels without IN-21K images.")
        if row["gathered_over"] not in GATHERED_OVER:
            raise PretrainingDataError(f"{path}: dataset {name}: gathered_over is '{row['gathered_over']}'; write "
                                       f"one of {', '.join(GATHERED_OVER)}.")
        datasets[name] = Dataset(name, row["title"], images, labels, yes_no(path, row, "web"), row["gathered_over"],
                                 row["source"])
    return datasets


def unknown_datasets(data: Iterable[str], datasets: Mapping[str, Dataset]) -> list[str]:
    return [name for name in data if name not in datasets]


def read_releases(path: str | Path, datasets: Mapping[str, Dataset]) -> list[Release]:
    """The releases table, in its order; a row naming a dataset the catalogue lacks is refused."""
    releases = []
    for row in read_rows(path, RELEASE_COLUMNS):
        paper_name = "" if row["paper_name"] == NOTHING else row["paper_name"]
        if paper_name and (row["arch"], row["weights"]) != (ANY, ANY):
            raise PretrainingDataError(f"{path}: the row of {paper_name} matches by its paper name: write * as its "
                                       "arch and weights.")
        text = row["pretraining_data"]
        data = None if text == NOT_SAID else () if text == NOTHING else tuple(text.split(","))
        unknown = unknown_datasets(data or (), datasets)
        if unknown:
            raise PretrainingDataError(f"{path}: the row of {paper_name or row['arch']} names {', '.join(unknown)}, "
                                       f"which the datasets' catalogue lacks ({', '.join(datasets)}).")
        releases.append(Release(row["arch"], row["weights"], paper_name, data, row["source"]))
    return releases


class Catalogue:
    """The datasets and the releases' defaults: each model's pretraining resolved against them."""

    def __init__(self, datasets: Mapping[str, Dataset], releases: list[Release], datasets_path: str | Path):
        self.datasets, self.releases, self.datasets_path = dict(datasets), releases, datasets_path
        self.papers = {release.paper_name: release for release in releases if release.paper_name}
        self.accepted = accepted_names(list(self.papers))

    @classmethod
    def read(cls, datasets_path: str | Path = DATASETS_TABLE, releases_path: str | Path = RELEASES_TABLE) -> "Catalogue":
        datasets = read_datasets(datasets_path)
        return cls(datasets, read_releases(releases_path, datasets), datasets_path)

    def exposure_of(self, data: tuple[str, ...] | None) -> str:
        if data is None:
            return UNDECLARED
        return max((self.datasets[name].exposure for name in data), key=PRECEDENCE.index, default=NONE)

    def pretraining(self, data: tuple[str, ...] | None, source: str) -> Pretraining:
        return Pretraining(data, self.exposure_of(data), source)

    def declared(self, model: str, data: list[str]) -> Pretraining:
        """An entry's own ``pretraining_data``; a name the catalogue lacks is refused with its names."""
        unknown = unknown_datasets(data, self.datasets)
        if unknown:
            raise PretrainingDataError(
                f"config.yaml: model '{model}': pretraining_data names {', '.join(repr(name) for name in unknown)}, which "
                f"the datasets' catalogue ({self.datasets_path}) does not have. Its datasets: {', '.join(self.datasets)}. "
                f"Name those the model was pretrained on, or add a row for another dataset there ({DOCS})."
            )
        return self.pretraining(tuple(data), DECLARED)

    def of_paper(self, name: str) -> Pretraining | None:
        """The default of the paper's model ``name`` (its paper_name, the prefix optional); None if none."""
        published = self.accepted.get(name_key(name))
        release = self.papers.get(published) if published else None
        return self.pretraining(release.data, release.source) if release else None

    def of_entry(self, model: str, entry: Mapping[str, Any], checkpoint: bool) -> Pretraining:
        """The pretraining of a ``models:`` entry: its declaration, else the first release row it
        matches (a ``checkpoint`` file matches only rows for any weights), else undeclared."""
        if entry.get("pretraining_data") is not None:
            return self.declared(model, list(entry["pretraining_data"]))
        weights = str(entry.get("weights", "pretrained"))
        paper = self.accepted.get(name_key(entry["paper_name"])) if entry.get("paper_name") else None
        for release in self.releases:
            if release.matches(entry["arch"], weights, checkpoint, paper):
                return self.pretraining(release.data, release.source)
        return Pretraining(None, UNDECLARED, "")


def pretraining_json(models: Mapping[str, Pretraining], published: Mapping[str, Pretraining] | None = None) -> str:
    """The results commands' ``--pretraining``: each model's datasets and exposure (and the paper's
    published models', by name, for the leaderboard)."""
    values = {"models": {model: value.to_dict() for model, value in models.items()}}
    if published is not None:
        values["published"] = {name: value.to_dict() for name, value in published.items()}
    return json.dumps(values, sort_keys=True)


def read_pretraining_json(text: str) -> tuple[dict[str, Pretraining], dict[str, Pretraining]]:
    """(models, published) of a ``--pretraining`` value."""
    values = json.loads(text)
    return ({model: Pretraining.from_dict(value) for model, value in values["models"].items()},
            {name: Pretraining.from_dict(value) for name, value in values.get("published", {}).items()})


def premise_note(models: Mapping[str, Pretraining]) -> str | None:
    """The run's note on the models that break the premise, one line per class; None if none does."""
    apart = {model: value for model, value in models.items() if value.breaks_premise}
    if not apart:
        return None
    lines = [f"{len(apart)} of {len(models)} models were pretrained on more than IN-1K, or say nothing of it: "
             "ImageNet-CoG's levels may not be unseen concepts for them (CoG paper, Sec. 3.1 and 4.1), and the "
             "leaderboard ranks each class apart (docs/leaderboard.md):"]
    for exposure in EXPOSURES[1:]:
        named = [f"{model} ({value.data_text()})" if value.data is not None else model
                 for model, value in apart.items() if value.exposure == exposure]
        if named:
            fix = "; declare models.<name>.pretraining_data" if exposure == UNDECLARED else ""
            lines.append(f"  {exposure} ({MEANINGS[exposure]}{fix}): {', '.join(named)}")
    return "\n".join(lines)
