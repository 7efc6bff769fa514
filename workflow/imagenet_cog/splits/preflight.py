"""Before any image is read: does the user's copy of ImageNet hold what this run needs?

``preflight`` checks every concept of the run (the levels, the pool the level sets draw
from, IN-1K, IN-1K-blurred, with the class-balanced variant's training size) against the
image roots as they are (folder listings, or the tar indexes: nothing is decoded) and
reports, in one error, every concept missing from the copy and every concept with fewer
images than its split needs, with the counts. It deletes and re-runs nothing: the workflow
runs it before the split jobs, which wait for it, and a failing check stops the run there.

``needed-synsets`` writes, from the levels alone (no image read), the ImageNet-21K synsets a
run needs with their image counts (the shipped Fall 2011 counts, which supp. E of the ICCV paper
finds unchanged in Winter 2021 for every level concept), and the list of their tars, one
``nXXXXXXXX.tar`` a line, to fetch or extract just those.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from imagenet_cog.core.archives import ArchiveError
from imagenet_cog.core.image_layouts import SHARD_LAYOUTS, SOURCE_LAYOUTS
from imagenet_cog.core.image_roots import (
    RELEASES,
    ImageRoot,
    ImageRootError,
    check_index_current,
    hub_files,
    image_count,
    root_setting,
    stale_index_message,
)
from imagenet_cog.core.io import read_tsv, write_lines, write_tsv
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.naming import IN1K, IN1K_BLURRED, IN21K
from imagenet_cog.core.shards import ShardDownload, shard_download, shard_part
from imagenet_cog.levels.concepts import ConceptError, read_image_counts
from imagenet_cog.splits.image_splits import SplitError, load_published_splits, read_concepts

PREFLIGHT_HEADER = ("dataset", "wnid", "images", "val_images", "needed", "fall11_images", "status", "detail")
NEEDED_HEADER = ("wnid", "name", "tar", "fall11_images", "datasets")


def source_of(dataset: str) -> str:
    """The image root a dataset's images come from: IN-1K's, IN-1K-blurred's, else IN-21K's
    (the levels and the pool)."""
    return dataset if dataset in (IN1K, IN1K_BLURRED) else IN21K


@dataclass(frozen=True)
class Requirements:
    test_per_concept: int
    max_train_per_concept: int
    balanced_train: int | None
    balanced_datasets: frozenset[str]

    def train_needed(self, dataset: str) -> int:
        if self.balanced_train and dataset in self.balanced_datasets:
            return max(1, self.balanced_train)
        return 1


@dataclass(frozen=True)
class ConceptCheck:
    dataset: str
    wnid: str
    images: int
    val_images: int | None
    needed: int
    fall11_images: int | None
    status: str  # ok, missing, too_few
    detail: str

    def row(self) -> tuple:
        return (self.dataset, self.wnid, self.images, "" if self.val_images is None else self.val_images, self.needed,
                "" if self.fall11_images is None else self.fall11_images, self.status, self.detail)


def _published_names(published: Mapping[str, Mapping[str, Sequence[str]]], wnid: str) -> list[str]:
    return sorted({entry.rstrip("/").rsplit("/", 1)[-1] for split in ("train", "test") for entry in published[wnid][split]})


def check_level_concepts(dataset: str, wnids: Sequence[str], root: ImageRoot, requirements: Requirements,
                         fall11: Mapping[str, int], published: Mapping | None, threads: int) -> list[ConceptCheck]:
    """Concepts of a level or the pool: present, and with enough images for the draw (or
    every image of the published split)."""
    listings = root.concept_images(wnids, threads)
    checks = []
    train_needed = requirements.train_needed(dataset)
    for wnid in wnids:
        listing = listings[wnid]
        count = image_count(listing)
        if published is not None and wnid in published:
            names = {path.rsplit("/", 1)[1] for path in listing.paths} if listing else set()
            wanted = _published_names(published, wnid)
            absent = [name for name in wanted if name not in names]
            needed = len(wanted)
            status = "missing" if listing is None else ("too_few" if absent else "ok")
            detail = (f"{len(absent)} of the {needed} images of the published split absent (e.g. {absent[0]})"
                      if absent and listing is not None else "")
            train = len(published[wnid]["train"])
            if status == "ok" and train < train_needed:
                status, detail = "too_few", f"the published split has {train} training images, {train_needed} needed"
        else:
            needed = requirements.test_per_concept + train_needed
            status = "missing" if listing is None else ("too_few" if count < needed else "ok")
            detail = f"({requirements.test_per_concept} test + {train_needed} training)" if status == "too_few" else ""
        checks.append(ConceptCheck(dataset, wnid, count, None, needed, fall11.get(wnid), status, detail))
    return checks


def check_in1k_concepts(dataset: str, wnids: Sequence[str], root: ImageRoot, requirements: Requirements,
                        threads: int) -> list[ConceptCheck]:
    """IN-1K's concepts (or IN-1K-blurred's): images in the official train and val sets."""
    train = root.part_images(wnids, "train", threads)
    val = root.part_images(wnids, "val", threads)
    train_needed = requirements.train_needed(dataset)
    checks = []
    for wnid in wnids:
        train_count, val_count = image_count(train[wnid]), image_count(val[wnid])
        if train[wnid] is None and val[wnid] is None:
            status, detail = "missing", ""
        elif train_count < train_needed or val_count == 0:
            status, detail = "too_few", f"{train_needed} training and 1 validation needed"
        else:
            status, detail = "ok", ""
        checks.append(ConceptCheck(dataset, wnid, train_count, val_count, train_needed, None, status, detail))
    return checks


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _concept_line(check: ConceptCheck, datasets: Sequence[str]) -> str:
    line = f"  {check.wnid} ({', '.join(datasets)})"
    if check.status != "missing":
        if check.val_images is not None:
            line += f": {check.images} training and {check.val_images} validation images, {check.detail}"
        elif check.detail.startswith("("):
            line += f": {_plural(check.images, 'image')}, {check.needed} needed {check.detail}"
        else:
            line += f": {_plural(check.images, 'image')}; {check.detail}"
    if check.fall11_images is not None:
        line += f"; Fall 2011: {_plural(check.fall11_images, 'image')}"
    return line


def failure_message(checks: Sequence[ConceptCheck], roots: Mapping[str, ImageRoot], release: str,
                    needed_tars: str = Layout().needed_synset_tars()) -> str:
    """One message naming every concept the copy lacks or has too few images of."""
    lines = []
    for status, heading in (("missing", "missing from your copy"), ("too_few", "with fewer images than their split needs")):
        failing = [check for check in checks if check.status == status]
        if not failing:
            continue
        by_source: dict[str, dict[str, list[ConceptCheck]]] = {}
        for check in failing:
            by_source.setdefault(source_of(check.dataset), {}).setdefault(check.wnid, []).append(check)
        for source, by_wnid in by_source.items():
            datasets_of = {wnid: [check.dataset for check in group] for wnid, group in by_wnid.items()}
            lines.append(f"{_plural(len(by_wnid), 'concept')} {heading} ({roots[source].describe()}"
                         + (f", release {release}" if source == IN21K else "") + "):")
            lines += [_concept_line(group[0], datasets_of[wnid]) for wnid, group in by_wnid.items()]
    release_note = RELEASES[release]
    return (
        "pre-flight check: this run's concepts do not all fit your copy of ImageNet; nothing was deleted or run.\n"
        + "\n".join(lines)
        + "\nFix: add the missing synsets to the copy (`snakemake needed_synsets --cores 1` with this run's --configfile lists every tar "
        f"it needs, in {needed_tars}), point the data settings at a complete copy, or lower "
        f"splits.test_per_concept / balanced.train_per_concept. The levels come from the shipped Fall 2011 image counts "
        f"whatever the copy ({release_note.title}: {release_note.note})."
    )


def needed_tars_beside(preflight_table: str) -> str:
    """The needed synsets' tar list of the run whose pre-flight table this is (<results>/splits/)."""
    return Layout(str(Path(preflight_table).parent.parent)).needed_synset_tars()


def run_preflight(datasets: Mapping[str, Sequence[str]], roots: Mapping[str, ImageRoot], requirements: Requirements,
                  fall11: Mapping[str, int], published: Mapping | None = None,
                  published_datasets: Sequence[str] = (), threads: int = 4) -> list[ConceptCheck]:
    """Every concept of every dataset checked against its root (stale indexes first)."""
    for source in sorted({source_of(dataset) for dataset in datasets}):
        problems = check_index_current(roots[source])
        if problems:
            raise ImageRootError(stale_index_message(roots[source], problems))
    checks = []
    for dataset, wnids in datasets.items():
        root = roots[source_of(dataset)]
        if source_of(dataset) == IN21K:
            checks += check_level_concepts(dataset, wnids, root, requirements, fall11,
                                           published if dataset in published_datasets else None, threads)
        else:
            checks += check_in1k_concepts(dataset, wnids, root, requirements, threads)
    return checks


def _pairs(values: Sequence[str] | None, option: str) -> dict[str, str]:
    pairs = {}
    for value in values or []:
        key, equals, item = value.partition("=")
        if not equals or not key or not item:
            raise SystemExit(f"{option} takes KEY=VALUE, not {value!r}")
        pairs[key] = item
    return pairs


def preflight_command(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog preflight", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", action="append", required=True, metavar="DATASET=CONCEPTS",
                        help="a dataset of the run and its concept list (in1k, in1k_blurred, l1.., pool)")
    parser.add_argument("--root", action="append", required=True, metavar="SOURCE=PATH", help="in21k, in1k, in1k_blurred")
    parser.add_argument("--layout", action="append", required=True, metavar="SOURCE=LAYOUT")
    parser.add_argument("--index", action="append", default=[], metavar="SOURCE=INDEX", help="for tar layouts")
    parser.add_argument("--val-labels", default=None, help="IN-1K validation labels (default: the devkit in the root)")
    parser.add_argument("--test-per-concept", type=int, required=True)
    parser.add_argument("--max-train-per-concept", type=int, required=True)
    parser.add_argument("--balanced-train", type=int, default=None, help="balanced.train_per_concept, when enabled")
    parser.add_argument("--balanced-datasets", nargs="*", default=[])
    parser.add_argument("--published-splits", default=None, help="the authors' split pickle (levels only)")
    parser.add_argument("--published-datasets", nargs="*", default=[])
    parser.add_argument("--fall11-counts", required=True, help="the shipped Fall 2011 image counts (wnid, n_images)")
    parser.add_argument("--release", choices=sorted(RELEASES), required=True)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    roots_given, layouts, indexes = _pairs(args.root, "--root"), _pairs(args.layout, "--layout"), _pairs(args.index, "--index")
    try:
        datasets = {dataset: read_concepts(path) for dataset, path in _pairs(args.dataset, "--dataset").items()}
        roots = {
            source: ImageRoot(source, roots_given[source], layouts[source], index=indexes.get(source),
                              val_labels=args.val_labels if source == IN1K else None, setting=root_setting(source))
            for source in {source_of(dataset) for dataset in datasets}
        }
        published = load_published_splits(args.published_splits) if args.published_splits else None
        requirements = Requirements(args.test_per_concept, args.max_train_per_concept, args.balanced_train,
                                    frozenset(args.balanced_datasets))
        checks = run_preflight(datasets, roots, requirements, read_image_counts(args.fall11_counts), published,
                               args.published_datasets, args.threads)
    except (SplitError, ImageRootError, ArchiveError, ConceptError) as error:
        print(f"error: pre-flight check: {error}", file=sys.stderr)
        return 1
    except KeyError as error:
        print(f"error: pre-flight check: no --root/--layout for image source {error}", file=sys.stderr)
        return 1
    if any(check.status != "ok" for check in checks):
        print(f"error: {failure_message(checks, roots, args.release, needed_tars_beside(args.output))}", file=sys.stderr)
        return 1
    write_tsv(args.output, PREFLIGHT_HEADER, [check.row() for check in checks])
    differing = [check for check in checks if check.fall11_images is not None and check.images != check.fall11_images]
    print(f"pre-flight check: the {len({check.wnid for check in checks})} concepts of {len(datasets)} datasets are in "
          f"the copy with enough images -> {args.output}")
    if differing:
        print(f"note: {len(differing)} level or pool concepts have another number of images than in Fall 2011 (e.g. "
              f"{differing[0].wnid}: {differing[0].images} vs {differing[0].fall11_images}); their drawn splits differ "
              f"from a Fall 2011 copy's (column images vs fall11_images)")
    for line in hub_copy_notes(checks, roots):
        print(line)
    return 0


# ILSVRC2012 as released: training and validation images of its 1,000 classes
IN1K_RELEASED = (1_281_167, 50_000, 1000)


def hub_copy_notes(checks: Sequence[ConceptCheck], roots: Mapping[str, ImageRoot]) -> list[str]:
    """What a Hub copy dropped (images under 32-56 px) against the release, for the run's
    concepts: IN-21K against the Fall 2011 counts, IN-1K against ILSVRC2012's totals."""
    notes = []
    for source, root in sorted(roots.items()):
        if root.layout not in SHARD_LAYOUTS:
            continue
        mine = [check for check in checks if source_of(check.dataset) == source]
        if source == IN21K:
            counted = {check.wnid: check for check in mine if check.fall11_images is not None}.values()
            fewer = [check for check in counted if check.images < check.fall11_images]
            dropped = sum(check.fall11_images - check.images for check in fewer)
            notes.append(f"note: {root.describe()} holds {dropped:,} fewer images than Fall 2011 of {len(fewer):,} of the "
                         f"run's {len(counted):,} IN-21K concepts (the Hub copy dropped small images); those concepts' "
                         f"draws differ from a Fall 2011 copy's")
            continue
        classes = {check.wnid: check for check in mine}.values()
        train, val = sum(check.images for check in classes), sum(check.val_images or 0 for check in classes)
        released = (f"; the release has {IN1K_RELEASED[0]:,} and {IN1K_RELEASED[1]:,}: the copy lacks "
                    f"{IN1K_RELEASED[0] - train:,} and {IN1K_RELEASED[1] - val:,}" if len(classes) == IN1K_RELEASED[2] else "")
        notes.append(f"note: {root.describe()} holds {train:,} training and {val:,} validation images of the run's "
                     f"{len(classes):,} {source} classes{released}")
    return notes


def needed_synsets_command(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog needed-synsets",
        description="The ImageNet-21K synsets a run needs, from its levels alone, and their tars.")
    parser.add_argument("--dataset", action="append", required=True, metavar="DATASET=CONCEPTS")
    parser.add_argument("--catalogue", required=True, help="levels/concepts.tsv (names)")
    parser.add_argument("--fall11-counts", required=True)
    parser.add_argument("--table", required=True, help="TSV: wnid, name, tar, fall11_images, datasets")
    parser.add_argument("--list", required=True, help="one <wnid>.tar a line")
    parser.add_argument("--release", choices=sorted(RELEASES), default="winter21", help="the release the copy is of")
    parser.add_argument("--root", default=None, help="data.in21k_root, when it is a Hub copy's shards (--layout wds)")
    parser.add_argument("--layout", default=None, choices=[name for name in SOURCE_LAYOUTS[IN21K] if name in SHARD_LAYOUTS],
                        help="the root's layout, when it is a Hub copy (every shard is needed)")
    args = parser.parse_args(argv)
    try:
        datasets = {dataset: read_concepts(path) for dataset, path in _pairs(args.dataset, "--dataset").items()}
        counts = read_image_counts(args.fall11_counts)
    except (SplitError, ConceptError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    names = {row["wnid"]: row["name"] for row in read_tsv(args.catalogue)}
    used_by: dict[str, list[str]] = {}
    for dataset, wnids in datasets.items():
        for wnid in wnids:
            used_by.setdefault(wnid, []).append(dataset)
    wnids = sorted(used_by)
    try:
        download = None
        if args.layout:
            shards, _ = hub_files(Path(args.root))
            download = shard_download(Path(args.root), [name for name in shards if shard_part(name) in ("train", "val")])
    except (ImageRootError, ArchiveError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    where = "every shard" if download else None
    write_tsv(args.table, NEEDED_HEADER, [(wnid, names.get(wnid, ""), where or f"{wnid}.tar", counts.get(wnid, ""),
                                           ",".join(used_by[wnid])) for wnid in wnids])
    write_lines(args.list, download.shards if download else [f"{wnid}.tar" for wnid in wnids])
    total = sum(counts.get(wnid, 0) for wnid in wnids)
    release = RELEASES[args.release]
    print(f"{len(wnids):,} of the {release.synsets:,} synsets of {release.title} "
          f"({', '.join(f'{d}: {len(w)}' for d, w in datasets.items())}), {total:,} images (Fall 2011 counts) -> {args.list}")
    if download:
        print(shard_download_note(download, args.root))
    return 0


def shard_download_note(download: ShardDownload, root: str) -> str:
    """What to download of a Hub copy: all of it, its samples being shuffled across shards."""
    size = f"{download.bytes / 1e9:,.1f} GB" if download.bytes is not None else "size not given by _info.json"
    samples = f"{download.samples:,} samples, " if download.samples is not None else ""
    return (f"{root} is a Hub copy whose samples are shuffled across its shards: every shard holds images of nearly "
            f"every concept, so all {len(download.shards):,} training and validation shards are needed ({samples}{size}; "
            f"from {download.where}), listed in the list file.")
