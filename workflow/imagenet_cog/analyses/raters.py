"""Forced-choice sheets for human raters and the scoring of their answers (Laina et al.,
"Quantifying learnability and describability of visual concepts", Sec. 3 and 5.1).

A task shows a rater either M reference test images of a concept (*coherence*, their Eq. 1)
or the concept's WordNet gloss instead (*describability*, Eq. 3), and two query images in
random order: one more test image of the concept and one negative. The rater picks the
query that belongs with the references (or fits the description). Negatives are *random*
(a test image of a concept drawn uniformly from the dataset's other concepts) or *hard* (a
test image of the concept whose feature centroid is nearest, Eq. 2).

Which tasks (all seeded, the same settings give the same tasks):

* ``concepts`` concepts of the dataset, drawn with a generator of (seed, dataset);
* per concept and round ``r`` (1..T), a generator of (seed, dataset, wnid, r) draws M + 1
  distinct test images (M references, the last the positive query), then the random
  negative, then the hard one; so the coherence and describability tasks of one round
  share their queries (as in the paper, which kept the query images and replaced the
  references by the description), and random and hard tasks share references and positive;
* the order of the two queries is drawn per task.

What a describability task shows of its concept is a setting (``--description``): the WordNet
gloss (the default), an automatic description (a captioner's file, ``--descriptions``,
:mod:`.descriptions`) or both, the gloss first. The key is the same whatever they show.

Pages: one self-contained HTML file per variant, negative kind and round, holding the
round's task of every sampled concept in a shuffled order. A describability page thus
shows each concept once, so that a rater cannot learn a concept from its other tasks
(the paper allowed one describability task per concept and day). Images are downscaled
and embedded as base64 JPEG, so a page works wherever it is moved; it holds no path, wnid
or name that could give the answer away. A button on each page downloads the rater's
answers as CSV (``rater,task,choice``, choice ``A`` or ``B``). The answer key is written to
a separate TSV.

Hard negatives: centroids are means of the L2-normalised test features of one model (the
normalisation the probes use, so that no feature dimension of large scale dominates the
distances), and the nearest concept is the one at the smallest Euclidean distance between
centroids (ties: the first wnid in sorted order).

Scoring: accuracy per dataset, variant and negative kind with an exact (Clopper-Pearson)
95% interval, and Krippendorff's alpha (nominal) across raters on their choices A/B.
"""

from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from imagenet_cog.core.archives import ArchiveError, ImageFiles
from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.io import (
    atomic_directory,
    read_lines,
    read_tsv,
    write_json,
    write_tsv,
)
from imagenet_cog.core.naming import IN1K
from imagenet_cog.core.sampling import derived_rng
from imagenet_cog.features.store import read_features

from .descriptions import AUTO, BOTH, GLOSS, SHEET_CHOICES, DescriptionError, read_auto_descriptions

DESCRIBABILITY = "describability"
VARIANTS = ("coherence", DESCRIBABILITY)
NEGATIVE_KINDS = ("random", "hard")
CHOICES = ("A", "B")
ANSWER_COLUMNS = ("rater", "task", "choice")
KEY_COLUMNS = (
    "task", "dataset", "variant", "negatives", "page", "position", "wnid", "name",
    "negative_wnid", "answer", "query_a", "query_b", "references",
)
SCORE_COLUMNS = (
    "dataset", "variant", "negatives", "answers", "correct", "accuracy", "ci_low", "ci_high",
    "tasks_answered", "tasks", "raters", "krippendorff_alpha", "alpha_note",
)
CONCEPT_SCORE_COLUMNS = (
    "dataset", "variant", "negatives", "wnid", "name", "answers", "correct", "accuracy", "ci_low", "ci_high",
)
CONFIDENCE = 0.95
JPEG_QUALITY = 85
INDEX_PAGE = "index.html"


class RaterError(ExplainedError, ValueError):
    """Input that cannot give sheets or scores; the message names the file or setting."""


@dataclass(frozen=True)
class Task:
    task: str
    dataset: str
    variant: str
    negatives: str
    page: int
    position: int
    wnid: str
    name: str
    negative_wnid: str
    answer: str
    query_a: str
    query_b: str
    references: tuple[str, ...]

    def key_row(self) -> list[object]:
        return [self.task, self.dataset, self.variant, self.negatives, self.page, self.position, self.wnid,
                self.name, self.negative_wnid, self.answer, self.query_a, self.query_b, ";".join(self.references)]


# inputs -------------------------------------------------------------------------------------
def read_test_images(split_table: str | os.PathLike) -> dict[str, list[str]]:
    """wnid -> its test image paths (relative to the image root), in file order."""
    rows = read_tsv(split_table)
    if rows and not {"path", "wnid", "split"} <= set(rows[0]):
        raise RaterError(f"{split_table}: not a split table (columns path, wnid, label, split expected).")
    images: dict[str, list[str]] = {}
    for row in rows:
        if row["split"] == "test":
            images.setdefault(row["wnid"], []).append(row["path"])
    if len(images) < 2:
        raise RaterError(
            f"{split_table}: {len(images)} concept(s) with test images; forced-choice tasks need at "
            f"least two (a concept and a negative)."
        )
    return dict(sorted(images.items()))


def read_catalogue(path: str | os.PathLike, wnids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """wnid -> (name, gloss) for ``wnids``, from the concept catalogue (wnid, name, gloss)."""
    rows = read_tsv(path)
    if rows and not {"wnid", "name", "gloss"} <= set(rows[0]):
        raise RaterError(f"{path}: not a concept catalogue (columns wnid, name, gloss expected).")
    catalogue = {row["wnid"]: (row["name"], row["gloss"]) for row in rows}
    missing = [wnid for wnid in wnids if wnid not in catalogue]
    if missing:
        raise RaterError(
            f"{path}: no name or gloss for {len(missing)} concept(s) of the split table "
            f"({', '.join(missing[:5])}); the catalogue is stale: delete it and re-run Snakemake."
        )
    return catalogue


def concept_centroids(features_path: str | os.PathLike, split_table: str | os.PathLike) -> dict[str, np.ndarray]:
    """wnid -> mean of its L2-normalised test features, the labels mapped through the split table."""
    feature_set = read_features(features_path)
    label_wnids = {int(row["label"]): row["wnid"] for row in read_tsv(split_table) if row["split"] == "test"}
    features = feature_set.features
    if not np.isfinite(features).all():
        raise RaterError(f"{features_path}: non-finite features; delete the file's shards and re-run Snakemake.")
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    features = features / np.maximum(norms, np.finfo(np.float32).tiny)
    centroids = {}
    for label in np.unique(feature_set.labels):
        if int(label) not in label_wnids:
            raise RaterError(
                f"{features_path}: label {int(label)} has no test rows in {split_table}; the features are "
                f"older than the split table: delete them and re-run Snakemake."
            )
        centroids[label_wnids[int(label)]] = features[feature_set.labels == label].mean(axis=0)
    return centroids


def nearest_concepts(centroids: Mapping[str, np.ndarray]) -> dict[str, str]:
    """wnid -> the other wnid whose centroid is nearest in Euclidean distance (Eq. 2)."""
    wnids = sorted(centroids)
    if len(wnids) < 2:
        raise RaterError("hard negatives need the centroids of at least two concepts.")
    matrix = np.stack([np.asarray(centroids[wnid], dtype=np.float64) for wnid in wnids])
    squared = (matrix**2).sum(axis=1)
    distances = squared[:, None] + squared[None, :] - 2 * matrix @ matrix.T
    np.fill_diagonal(distances, np.inf)
    return {wnid: wnids[int(np.argmin(distances[row]))] for row, wnid in enumerate(wnids)}


# tasks --------------------------------------------------------------------------------------
def sample_concepts(wnids: Sequence[str], count: int, seed: int, dataset: str) -> list[str]:
    """``count`` wnids (all of them if fewer), drawn with a generator of (seed, dataset), sorted."""
    ordered = sorted(wnids)
    if count >= len(ordered):
        return ordered
    picks = derived_rng(seed, dataset, "concepts").choice(len(ordered), size=count, replace=False)
    return sorted(ordered[index] for index in picks)


def draw_tasks(
    dataset: str,
    images: Mapping[str, Sequence[str]],
    concepts: Sequence[str],
    names: Mapping[str, str],
    *,
    tasks_per_concept: int,
    references: int,
    negative_kinds: Sequence[str],
    variants: Sequence[str],
    seed: int,
    hard_negatives: Mapping[str, str] | None = None,
) -> list[Task]:
    """Every task of one dataset, page by page (see the module docstring for the draws)."""
    unknown = [kind for kind in negative_kinds if kind not in NEGATIVE_KINDS]
    if unknown:
        raise RaterError(f"unknown negative kind(s) {', '.join(unknown)}; use {', '.join(NEGATIVE_KINDS)}.")
    unknown = [variant for variant in variants if variant not in VARIANTS]
    if unknown:
        raise RaterError(f"unknown variant(s) {', '.join(unknown)}; use {', '.join(VARIANTS)}.")
    if "hard" in negative_kinds and hard_negatives is None:
        raise RaterError("hard negatives need the nearest concept of each concept (a feature file).")
    short = [wnid for wnid in concepts if len(images[wnid]) < references + 1]
    if short:
        fewest = min(len(images[wnid]) for wnid in short)
        raise RaterError(
            f"dataset {dataset}: {len(short)} concept(s) have fewer than references + 1 = {references + 1} "
            f"test images (fewest: {fewest}, e.g. {short[0]}); lower analyses.raters.references to at "
            f"most {fewest - 1}."
        )
    all_wnids = sorted(images)
    queries: dict[tuple[str, int], tuple[list[str], str, dict[str, tuple[str, str]]]] = {}
    for wnid in concepts:
        for round_ in range(1, tasks_per_concept + 1):
            rng = derived_rng(seed, dataset, wnid, round_)
            own = images[wnid]
            picks = rng.choice(len(own), size=references + 1, replace=False)
            drawn = [own[index] for index in picks]
            others = [other for other in all_wnids if other != wnid]
            random_wnid = others[int(rng.integers(len(others)))]
            negatives = {"random": (random_wnid, images[random_wnid][int(rng.integers(len(images[random_wnid])))])}
            if hard_negatives is not None and "hard" in negative_kinds:
                hard_wnid = hard_negatives[wnid]
                negatives["hard"] = (hard_wnid, images[hard_wnid][int(rng.integers(len(images[hard_wnid])))])
            queries[wnid, round_] = (drawn[:references], drawn[references], negatives)
    tasks = []
    for variant in variants:
        for kind in negative_kinds:
            for round_ in range(1, tasks_per_concept + 1):
                rng = derived_rng(seed, dataset, variant, kind, round_)
                order = [concepts[index] for index in rng.permutation(len(concepts))]
                for position, wnid in enumerate(order, start=1):
                    reference_images, positive, negatives = queries[wnid, round_]
                    negative_wnid, negative = negatives[kind]
                    answer = CHOICES[int(rng.integers(2))]
                    query_a, query_b = (positive, negative) if answer == "A" else (negative, positive)
                    tasks.append(Task(
                        task=f"{dataset}-{variant}-{kind}-{round_:02d}-{position:02d}",
                        dataset=dataset, variant=variant, negatives=kind, page=round_, position=position,
                        wnid=wnid, name=names[wnid], negative_wnid=negative_wnid, answer=answer,
                        query_a=query_a, query_b=query_b,
                        references=tuple(reference_images) if variant == "coherence" else (),
                    ))
    return tasks


# pages --------------------------------------------------------------------------------------
def image_data_uri(path: Path, size: int, images: ImageFiles | None = None) -> str:
    """The image at ``path`` (relative to ``images``' root when given: a file, or a tar
    member through the root's index) shrunk to fit ``size`` x ``size``, as a base64 JPEG
    data URI."""
    try:
        with Image.open(images.open(str(path)) if images else path) as image:
            image = image.convert("RGB")
            image.thumbnail((size, size))
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=JPEG_QUALITY)
    except FileNotFoundError as error:
        raise RaterError(f"{path}: image not found; is the dataset's image root right?") from error
    except (UnidentifiedImageError, OSError) as error:
        raise RaterError(f"{path}: cannot read the image ({error}).") from error
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


PAGE_STYLE = """
body { font-family: sans-serif; max-width: 60em; margin: 1em auto; padding: 0 1em; }
.task { border: 1px solid #bbb; border-radius: 6px; padding: 0.5em 1em; margin: 1em 0; }
.references img { margin: 2px; }
.description { font-size: 1.2em; border-left: 4px solid #888; padding-left: 0.7em; }
.queries { display: flex; gap: 2em; }
.queries label { display: flex; flex-direction: column; align-items: center; cursor: pointer;
  padding: 0.3em; border: 3px solid transparent; border-radius: 6px; }
.queries label:has(input:checked) { border-color: #2a6; }
#export { font-size: 1.1em; padding: 0.4em 1em; }
"""

PAGE_SCRIPT = """
function exportAnswers() {
  const rater = document.getElementById("rater").value.trim();
  if (!rater) { alert("Enter your rater ID at the top first."); return; }
  if (/[,"\\r\\n]/.test(rater)) { alert("Your rater ID must not contain commas or quotes."); return; }
  const rows = ["rater,task,choice"];
  let unanswered = 0;
  document.querySelectorAll("section.task").forEach(function (section) {
    const checked = section.querySelector("input:checked");
    if (checked) { rows.push([rater, section.dataset.task, checked.value].join(",")); } else { unanswered++; }
  });
  if (unanswered && !confirm(unanswered + " task(s) have no answer. Download the others?")) { return; }
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([rows.join("\\n") + "\\n"], {type: "text/csv"}));
  link.download = document.body.dataset.sheet + "-" + rater.replace(/[^A-Za-z0-9_.-]/g, "_") + ".csv";
  document.body.appendChild(link);
  link.click();
  link.remove();
}
function countAnswers() {
  const answered = document.querySelectorAll("section.task input:checked").length;
  document.getElementById("progress").textContent = answered + " of " +
    document.querySelectorAll("section.task").length + " answered";
}
"""


def page_name(variant: str, negatives: str, page: int) -> str:
    return f"{variant}-{negatives}-{page:02d}"


def description_html(wnid: str, glosses: Mapping[str, str], auto: Mapping[str, str] | None, shown: str) -> str:
    """What a describability task shows of its concept: the gloss, the automatic description
    (``auto``), or both, the gloss first (``shown``, one of descriptions.SHEET_CHOICES)."""
    texts = {GLOSS: [glosses[wnid]], AUTO: [auto[wnid]] if auto else [], BOTH: [glosses[wnid], auto[wnid]] if auto else []}
    if not texts[shown]:
        raise RaterError(f"describability pages showing '{shown}' descriptions need the automatic descriptions.")
    return "".join(f'<p class="description">{html.escape(text)}</p>' for text in texts[shown])


def render_page(tasks: Sequence[Task], glosses: Mapping[str, str], image: Callable[[str], str],
                auto: Mapping[str, str] | None = None, shown: str = GLOSS) -> str:
    """One sheet: the tasks of one variant, negative kind and round, for a browser; a
    describability task shows its concept's gloss, automatic description (``auto``) or both."""
    first = tasks[0]
    sheet = page_name(first.variant, first.negatives, first.page)
    if first.variant == "coherence":
        instruction = ("Each task shows a few example images of one concept, then two images A and B. "
                       "Exactly one of A and B belongs to the same concept: pick it.")
    else:
        instruction = ("Each task gives the description of one concept, then two images A and B. "
                       "Exactly one of A and B shows that concept: pick it.")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Sheet {html.escape(sheet)}</title>",
        f"<style>{PAGE_STYLE}</style><script>{PAGE_SCRIPT}</script></head>",
        f'<body data-sheet="{html.escape(sheet)}" onchange="countAnswers()">',
        f"<h1>Sheet {html.escape(sheet)}</h1>",
        (f"<p>{instruction} When you are not sure, make your best guess. When done, press "
         "<em>Download answers</em> at the bottom and send the CSV file it saves.</p>"),
        '<p><label>Your rater ID: <input id="rater" type="text" autocomplete="off"></label></p>',
    ]
    for number, task in enumerate(tasks, start=1):
        parts.append(f'<section class="task" data-task="{html.escape(task.task)}">')
        parts.append(f"<h2>Task {number} of {len(tasks)}</h2>")
        if task.variant == "coherence":
            parts.append('<p>Examples of the concept:</p><div class="references">')
            parts.extend(f'<img src="{image(path)}" alt="example">' for path in task.references)
            parts.append("</div>")
        else:
            parts.append(f"<p>The concept:</p>{description_html(task.wnid, glosses, auto, shown)}")
        parts.append("<p>Which image belongs to it?</p><div class=\"queries\">")
        for choice, path in zip(CHOICES, (task.query_a, task.query_b)):
            parts.append(
                f'<label><img src="{image(path)}" alt="image {choice}">'
                f'<span><input type="radio" name="{html.escape(task.task)}" value="{choice}"> {choice}</span></label>'
            )
        parts.append("</div></section>")
    parts.append('<p><button id="export" type="button" onclick="exportAnswers()">Download answers</button> '
                 '<span id="progress"></span></p>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


INDEX_DESCRIPTIONS = {GLOSS: "its WordNet description", AUTO: "an automatic description of it",
                      BOTH: "its WordNet description and an automatic one"}


def render_index(dataset: str, pages: Sequence[tuple[str, str, int, int]], shown: str = GLOSS) -> str:
    """The sheets' table of contents: (file, variant, negatives, tasks) per page."""
    rows = "\n".join(
        f'<tr><td><a href="{html.escape(file)}">{html.escape(file)}</a></td><td>{variant}</td>'
        f"<td>{negatives}</td><td>{tasks}</td></tr>"
        for file, variant, negatives, tasks in pages
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>Forced-choice sheets, {html.escape(dataset)}</title></head><body>\n"
        f"<h1>Forced-choice sheets, dataset {html.escape(dataset)}</h1>\n"
        "<p>Each page is self-contained (images embedded): send pages to raters as they are. "
        f"Coherence pages show example images of a concept, describability pages {INDEX_DESCRIPTIONS[shown]}"
        ". Give a rater at most one describability page per negative kind, and no "
        "describability page after coherence pages of the same dataset, so that no one learns a "
        "concept from its images before being tested on its description.</p>\n"
        "<table><tr><th>page</th><th>variant</th><th>negatives</th><th>tasks</th></tr>\n"
        f"{rows}\n</table></body></html>\n"
    )


def write_sheets(tasks: Sequence[Task], glosses: Mapping[str, str], images: ImageFiles,
                 image_size: int, sheets: str | os.PathLike, key: str | os.PathLike,
                 auto: Mapping[str, str] | None = None, shown: str = GLOSS) -> int:
    """The pages (and their index) into the folder ``sheets``, the answer key into ``key``;
    ``images``: the dataset's image root, in any layout; describability pages show ``shown``
    (the gloss, the automatic descriptions ``auto``, or both)."""
    cache: dict[str, str] = {}

    def image(path: str) -> str:
        if path not in cache:
            cache[path] = image_data_uri(path, image_size, images)
        return cache[path]

    pages: dict[tuple[str, str, int], list[Task]] = {}
    for task in tasks:
        pages.setdefault((task.variant, task.negatives, task.page), []).append(task)
    listing = []
    with atomic_directory(sheets) as folder:
        for (variant, negatives, page), page_tasks in pages.items():
            file = f"{page_name(variant, negatives, page)}.html"
            (folder / file).write_text(render_page(page_tasks, glosses, image, auto, shown))
            listing.append((file, variant, negatives, len(page_tasks)))
        (folder / INDEX_PAGE).write_text(render_index(tasks[0].dataset, listing, shown))
    write_tsv(key, KEY_COLUMNS, (task.key_row() for task in tasks))
    return len(pages)


def rater_sheets_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog rater-sheets",
        description="Write forced-choice HTML sheets for human raters and their answer key.",
    )
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--split-table", required=True, help="path, wnid, label, split TSV")
    parser.add_argument("--image-root", required=True, help="folder the split table's paths are relative to")
    parser.add_argument("--image-index", default=None, help="the root's image index (tar layouts)")
    parser.add_argument("--catalogue", required=True, help="wnid, name, gloss TSV")
    parser.add_argument("--features", help="test features of one model (needed for hard negatives)")
    parser.add_argument("--concepts", type=int, required=True, help="concepts to sample")
    parser.add_argument("--tasks-per-concept", type=int, required=True)
    parser.add_argument("--references", type=int, required=True, help="M, reference images per task")
    parser.add_argument("--negatives", nargs="+", choices=NEGATIVE_KINDS, required=True)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--image-size", type=int, required=True, help="longest side of embedded images, pixels")
    parser.add_argument("--sheets", required=True, help="output folder of the HTML pages")
    parser.add_argument("--key", required=True, help="output answer key TSV")
    parser.add_argument("--description", choices=SHEET_CHOICES, default=GLOSS,
                        help="what describability pages show: the WordNet gloss (default), the automatic "
                             "description (--descriptions) or both")
    parser.add_argument("--descriptions", help="automatic descriptions TSV (group, description, score, captions)")
    args = parser.parse_args(argv)
    if "hard" in args.negatives and not args.features:
        parser.error("--negatives hard needs --features")
    if (args.description != GLOSS) != bool(args.descriptions):
        parser.error(f"--description {args.description} " + ("needs --descriptions" if args.descriptions is None
                                                             else "shows no automatic description: drop --descriptions"))
    try:
        images = read_test_images(args.split_table)
        catalogue = read_catalogue(args.catalogue, images)
        hard = None
        if "hard" in args.negatives:
            centroids = concept_centroids(args.features, args.split_table)
            missing = sorted(set(images) - set(centroids))
            if missing:
                raise RaterError(
                    f"{args.features}: no valid features for {len(missing)} concept(s) of "
                    f"{args.split_table} ({', '.join(missing[:5])}); re-extract the features."
                )
            hard = nearest_concepts(centroids)
        concepts = sample_concepts(list(images), args.concepts, args.seed, args.dataset)
        tasks = draw_tasks(
            args.dataset, images, concepts, {wnid: catalogue[wnid][0] for wnid in images},
            tasks_per_concept=args.tasks_per_concept, references=args.references,
            negative_kinds=args.negatives, variants=args.variants, seed=args.seed, hard_negatives=hard,
        )
        auto = read_auto_descriptions(args.descriptions, concepts) if args.descriptions else None
        pages = write_sheets(tasks, {wnid: catalogue[wnid][1] for wnid in concepts},
                             ImageFiles(args.image_root, args.image_index), args.image_size, args.sheets, args.key,
                             auto, args.description)
    except (RaterError, ArchiveError, DescriptionError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{args.dataset}: {len(concepts)} concepts, {len(tasks)} tasks on {pages} pages in {args.sheets}; "
          f"key {args.key}")
    return 0


# scoring ------------------------------------------------------------------------------------
def read_keys(paths: Sequence[str | os.PathLike]) -> dict[str, dict[str, str]]:
    """task -> its key row, over all key files; a task in two files is an error."""
    keys: dict[str, dict[str, str]] = {}
    origin: dict[str, str] = {}
    for path in paths:
        rows = read_tsv(path)
        if not rows or not set(KEY_COLUMNS) <= set(rows[0]):
            raise RaterError(f"{path}: not an answer key of rater sheets (columns {', '.join(KEY_COLUMNS)}).")
        for row in rows:
            if row["task"] in keys:
                raise RaterError(f"{path}: task {row['task']} is also in {origin[row['task']]}; pass each key once.")
            keys[row["task"]] = row
            origin[row["task"]] = str(path)
    return keys


def read_answers(paths: Sequence[str | os.PathLike], keys: Mapping[str, Mapping[str, str]],
                 raters: set[str] | None = None) -> dict[tuple[str, str], str]:
    """(rater, task) -> choice over all answer files; each problem names its file and line."""
    answers: dict[tuple[str, str], str] = {}
    where: dict[tuple[str, str], str] = {}
    for path in paths:
        try:
            with open(path, newline="", encoding="utf-8-sig") as stream:
                reader = csv.reader(stream)
                header = [name.strip().lower() for name in next(reader, [])]
                if header != list(ANSWER_COLUMNS):
                    raise RaterError(
                        f"{path}: the first line must be the header 'rater,task,choice' "
                        f"(found {','.join(header) or 'an empty file'})."
                    )
                for row in reader:
                    line = f"{path}, line {reader.line_num}"
                    if not row or all(not field.strip() for field in row):
                        continue
                    if len(row) != len(ANSWER_COLUMNS):
                        raise RaterError(f"{line}: {len(row)} fields instead of 3 (rater,task,choice).")
                    rater, task, choice = (field.strip() for field in row)
                    choice = choice.upper()
                    if not rater:
                        raise RaterError(f"{line}: no rater ID.")
                    if raters is not None and rater not in raters:
                        raise RaterError(f"{line}: rater '{rater}' is not in the list of raters; add them or fix the ID.")
                    if task not in keys:
                        raise RaterError(
                            f"{line}: task '{task}' is in none of the answer keys given; pass the key of "
                            f"its dataset (results/analyses/raters/<dataset>/key.tsv)."
                        )
                    if choice not in CHOICES:
                        raise RaterError(f"{line}: choice '{choice}' is not A or B.")
                    previous = answers.get((rater, task))
                    if previous is not None and previous != choice:
                        raise RaterError(
                            f"{line}: rater '{rater}' answered task {task} with {choice}, but with {previous} "
                            f"in {where[rater, task]}; keep one answer."
                        )
                    answers[rater, task] = choice
                    where[rater, task] = line
        except UnicodeDecodeError as error:
            raise RaterError(f"{path}: not UTF-8 text ({error}); save the answers as a UTF-8 CSV.") from error
        except csv.Error as error:
            raise RaterError(f"{path}: malformed CSV ({error}).") from error
    if not answers:
        raise RaterError(f"{', '.join(map(str, paths))}: no answers.")
    return answers


def clopper_pearson(correct: int, total: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    # scipy.stats (~2 s to import) and krippendorff only for score-raters: the rater-sheets
    # jobs of this module start without them
    from scipy.stats import binomtest

    interval = binomtest(correct, total).proportion_ci(confidence_level=confidence, method="exact")
    return float(interval.low), float(interval.high)


def krippendorff_alpha(choices: Mapping[tuple[str, str], str]) -> tuple[float | None, str]:
    """Nominal alpha over raters x tasks of the choices (A/B); None and why when undefined."""
    import krippendorff

    raters = sorted({rater for rater, _ in choices})
    tasks = sorted({task for _, task in choices})
    data = np.full((len(raters), len(tasks)), np.nan)
    rater_row = {rater: row for row, rater in enumerate(raters)}
    task_column = {task: column for column, task in enumerate(tasks)}
    for (rater, task), choice in choices.items():
        data[rater_row[rater], task_column[task]] = CHOICES.index(choice)
    if not ((~np.isnan(data)).sum(axis=0) >= 2).any():
        return None, "no task was answered by two raters"
    if len(set(choices.values())) < 2:
        return None, "every answer is the same choice"
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement="nominal")), ""


def score_answers(answers: Mapping[tuple[str, str], str], keys: Mapping[str, Mapping[str, str]]):
    """Rows of SCORE_COLUMNS per (dataset, variant, negatives), and CONCEPT_SCORE_COLUMNS."""
    groups: dict[tuple[str, str, str], dict[tuple[str, str], str]] = {}
    for (rater, task), choice in answers.items():
        key = keys[task]
        groups.setdefault((key["dataset"], key["variant"], key["negatives"]), {})[rater, task] = choice
    tasks_per_group: dict[tuple[str, str, str], int] = {}
    for key in keys.values():
        group = (key["dataset"], key["variant"], key["negatives"])
        tasks_per_group[group] = tasks_per_group.get(group, 0) + 1

    def order(group):
        dataset, variant, negatives = group
        return (dataset != IN1K, dataset, VARIANTS.index(variant) if variant in VARIANTS else len(VARIANTS),
                NEGATIVE_KINDS.index(negatives) if negatives in NEGATIVE_KINDS else len(NEGATIVE_KINDS), negatives)

    names = {key["wnid"]: key["name"] for key in keys.values()}
    rows, concept_rows = [], []
    for group in sorted(groups, key=order):
        choices = groups[group]
        correct = sum(choice == keys[task]["answer"] for (_, task), choice in choices.items())
        low, high = clopper_pearson(correct, len(choices))
        alpha, note = krippendorff_alpha(choices)
        rows.append({
            "dataset": group[0], "variant": group[1], "negatives": group[2],
            "answers": len(choices), "correct": correct, "accuracy": correct / len(choices),
            "ci_low": low, "ci_high": high,
            "tasks_answered": len({task for _, task in choices}), "tasks": tasks_per_group[group],
            "raters": len({rater for rater, _ in choices}), "krippendorff_alpha": alpha, "alpha_note": note,
        })
        per_concept: dict[str, list[bool]] = {}
        for (_, task), choice in choices.items():
            per_concept.setdefault(keys[task]["wnid"], []).append(choice == keys[task]["answer"])
        for wnid in sorted(per_concept):
            outcomes = per_concept[wnid]
            low, high = clopper_pearson(sum(outcomes), len(outcomes))
            concept_rows.append({
                "dataset": group[0], "variant": group[1], "negatives": group[2], "wnid": wnid, "name": names[wnid],
                "answers": len(outcomes), "correct": sum(outcomes), "accuracy": sum(outcomes) / len(outcomes),
                "ci_low": low, "ci_high": high,
            })
    return rows, concept_rows


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else ""
    return str(value)


def score_raters_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog score-raters",
        description="Score raters' answers to forced-choice sheets: accuracy with exact 95% intervals "
                    "and Krippendorff's alpha per dataset, variant and negative kind.",
    )
    parser.add_argument("--answers", nargs="+", required=True, help="CSV files with the header rater,task,choice")
    parser.add_argument("--key", nargs="+", required=True, help="answer keys (key.tsv) of the sheets")
    parser.add_argument("--raters", help="optional list of rater IDs, one a line; answers from others are an error")
    parser.add_argument("--output", required=True, help="scores TSV")
    parser.add_argument("--json", help="the same scores, with the inputs named, as JSON")
    parser.add_argument("--per-concept", help="accuracy per concept TSV")
    args = parser.parse_args(argv)
    try:
        keys = read_keys(args.key)
        raters = set(read_lines(args.raters)) if args.raters else None
        answers = read_answers(args.answers, keys, raters)
        rows, concept_rows = score_answers(answers, keys)
    except (RaterError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    write_tsv(args.output, SCORE_COLUMNS, ([_cell(row[column]) for column in SCORE_COLUMNS] for row in rows))
    if args.per_concept:
        write_tsv(args.per_concept, CONCEPT_SCORE_COLUMNS,
                  ([_cell(row[column]) for column in CONCEPT_SCORE_COLUMNS] for row in concept_rows))
    if args.json:
        write_json(args.json, {
            "answers": [str(path) for path in args.answers], "keys": [str(path) for path in args.key],
            "confidence": CONFIDENCE, "interval": "Clopper-Pearson (exact)",
            "alpha": "Krippendorff, nominal, on the choices A/B", "scores": rows,
        })
    for row in rows:
        print(f"{row['dataset']} {row['variant']} {row['negatives']}: {row['correct']}/{row['answers']} = "
              f"{row['accuracy']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}], alpha {_cell(row['krippendorff_alpha']) or '-'}")
    return 0
