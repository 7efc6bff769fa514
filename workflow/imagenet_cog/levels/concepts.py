"""The concept lists of ImageNet-21K and ImageNet-1K, their names, glosses and image counts.

By default the lists come from the files the ``timm`` wheel ships (IN-21K Fall 2011 as
``imagenet22k_synsets.txt``, sorted; the 1000 IN-1K classes as ``imagenet_synsets.txt``),
located without importing timm (which would import torch). Config ``concepts.*`` paths
replace any of them.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.io import read_lines, read_tsv, write_tsv
from imagenet_cog.levels.wordnet import NounGraph, load_noun_graph

WNID = re.compile(r"^n[0-9]{8}$")

TIMM_FILES = {
    "in21k_synsets": "imagenet22k_synsets.txt",
    "in1k_synsets": "imagenet_synsets.txt",
    "synset_names": "imagenet_synset_to_lemma.txt",
    "synset_glosses": "imagenet_synset_to_definition.txt",
}
IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}


class ConceptError(ExplainedError, ValueError):
    """A concept list or count file is missing or malformed."""


def timm_info_file(name: str) -> Path:
    """A file of ``timm/data/_info``; found through the import system, not imported."""
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        raise ConceptError(
            f"timm is not installed, so its {name} is unavailable; install timm (pip install timm) "
            f"or give the file in config.yaml under 'concepts'."
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / "data" / "_info" / name
        if path.is_file():
            return path
    raise ConceptError(
        f"this timm has no data/_info/{name} (timm >= 1.0.7 ships it); upgrade timm or give the "
        f"file in config.yaml under 'concepts'."
    )


def concept_file(key: str, configured: str | None) -> Path:
    """The configured file for ``concepts.<key>``, or timm's copy."""
    if configured:
        path = Path(configured)
        if not path.is_file():
            raise ConceptError(f"concepts.{key} = {configured!r} does not exist; fix the path or set it to null.")
        return path
    return timm_info_file(TIMM_FILES[key])


def read_wnids(path: str | Path) -> list[str]:
    """wnids one a line ('#' comments allowed); every line must be a wnid, no repeats."""
    wnids = read_lines(path)
    bad = [w for w in wnids if not WNID.match(w)]
    if bad:
        raise ConceptError(f"{path}: {len(bad)} lines are not wnids (n + 8 digits), e.g. {bad[0]!r}.")
    if len(set(wnids)) != len(wnids):
        raise ConceptError(f"{path}: lists some wnids twice; each concept must appear once.")
    return wnids


def read_wnid_table(path: str | Path) -> dict[str, str]:
    """``wnid<TAB>text`` lines as a dict (timm's lemma and definition files)."""
    table = {}
    with open(path, encoding="utf-8") as stream:
        for number, line in enumerate(stream, 1):
            if not line.strip() or line.startswith("#"):
                continue
            key, tab, text = line.rstrip("\n").partition("\t")
            if not tab or not WNID.match(key):
                raise ConceptError(f"{path}, line {number}: expected 'wnid<TAB>text', got {line.strip()[:60]!r}.")
            table[key] = text.strip()
    return table


def check_in_wordnet(wnids: list[str], graph: NounGraph, path: Path) -> None:
    unknown = [w for w in wnids if w not in graph]
    if unknown:
        raise ConceptError(
            f"{path}: {len(unknown)} wnids are not WordNet 3.0 noun synsets, e.g. {unknown[0]}; "
            f"the list must hold ImageNet wnids."
        )


def build_catalogue(
    in21k: list[str], in1k: list[str], names: dict[str, str], glosses: dict[str, str], graph: NounGraph
) -> list[tuple[str, str, str]]:
    """(wnid, name, gloss) of every IN-21K and IN-1K concept, sorted by wnid.

    A concept missing from the name or gloss file takes WordNet's lemmas or gloss.
    """
    rows = []
    for node in sorted(set(in21k) | set(in1k)):
        name = names.get(node) or graph.name(node)
        gloss = glosses.get(node) or graph.synsets[node].gloss
        rows.append((node, name, gloss))
    return rows


# Image counts -----------------------------------------------------------------------


def read_image_counts(path: str | Path) -> dict[str, int]:
    """``wnid<TAB>n_images`` with a header line."""
    try:
        rows = read_tsv(path)
    except FileNotFoundError:
        raise ConceptError(f"image counts file {path} does not exist; fix concepts.image_counts.") from None
    if not rows or set(rows[0]) != {"wnid", "n_images"}:
        raise ConceptError(f"{path}: expected a header 'wnid<TAB>n_images' and one row per concept.")
    counts = {}
    for number, row in enumerate(rows, 2):
        if not WNID.match(row["wnid"] or "") or not (row["n_images"] or "").isdigit():
            raise ConceptError(f"{path}, line {number}: expected 'wnid<TAB>count', got {row}.")
        counts[row["wnid"]] = int(row["n_images"])
    return counts


def count_folder_images(folder: Path) -> int:
    try:
        with os.scandir(folder) as entries:
            return sum(1 for e in entries if e.is_file() and os.path.splitext(e.name)[1].lower() in IMAGE_SUFFIXES)
    except FileNotFoundError:
        return 0


def count_images(root: str | Path, wnids: list[str], threads: int) -> dict[str, int]:
    """Images under ``root/<wnid>/`` for each wnid (0 where the folder is missing)."""
    root = Path(root)
    if not root.is_dir():
        raise ConceptError(f"data.in21k_root = {str(root)!r} is not a folder; point it at ImageNet-21K (<root>/<wnid>/*.JPEG).")
    # Listing folders is I/O-bound (often a network file system): threads overlap the waits.
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        counts = list(pool.map(count_folder_images, (root / w for w in wnids)))
    return dict(zip(wnids, counts))


# Commands ---------------------------------------------------------------------------


def _concept_arguments(parser: argparse.ArgumentParser) -> None:
    for key in TIMM_FILES:
        parser.add_argument(f"--{key.replace('_', '-')}", default=None, help=f"default: timm's {TIMM_FILES[key]}")


def concept_catalogue_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog concept-catalogue",
        description="Write wnid, name, gloss of every IN-21K and IN-1K concept.",
    )
    parser.add_argument("--wordnet", required=True, help="NLTK data folder from wordnet-corpus")
    _concept_arguments(parser)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    try:
        graph = load_noun_graph(args.wordnet)
        paths = {key: concept_file(key, getattr(args, key)) for key in TIMM_FILES}
        in21k = read_wnids(paths["in21k_synsets"])
        in1k = read_wnids(paths["in1k_synsets"])
        check_in_wordnet(in21k, graph, paths["in21k_synsets"])
        check_in_wordnet(in1k, graph, paths["in1k_synsets"])
        names = read_wnid_table(paths["synset_names"])
        glosses = read_wnid_table(paths["synset_glosses"])
    except (ConceptError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    rows = build_catalogue(in21k, in1k, names, glosses, graph)
    in21k_set, in1k_set = set(in21k), set(in1k)
    write_tsv(
        args.output,
        ["wnid", "name", "gloss", "in21k", "in1k"],
        [(w, n, g, int(w in in21k_set), int(w in in1k_set)) for w, n, g in rows],
    )
    print(f"{len(in21k)} IN-21K and {len(in1k)} IN-1K concepts ({len(in1k_set - in21k_set)} IN-1K not in IN-21K); "
          f"lists: {paths['in21k_synsets']}, {paths['in1k_synsets']}")
    return 0


def image_counts_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog image-counts",
        description="Write wnid, n_images for every IN-21K concept, from a TSV or by counting files.",
    )
    parser.add_argument("--catalogue", required=True, help="concepts.tsv from concept-catalogue")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--counts", help="wnid<TAB>n_images TSV (with header)")
    source.add_argument("--count-root", help="IN-21K folder: count files under <root>/<wnid>/")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    in21k = [row["wnid"] for row in read_tsv(args.catalogue) if row["in21k"] == "1"]
    try:
        if args.counts:
            counts = read_image_counts(args.counts)
            missing = [w for w in in21k if w not in counts]
            if missing:
                raise ConceptError(
                    f"{args.counts} has no count for {len(missing)} IN-21K concepts, e.g. {missing[0]}; "
                    f"give every concept of concepts.in21k_synsets a count (0 is allowed)."
                )
        else:
            counts = count_images(args.count_root, in21k, args.threads)
            empty = sum(1 for w in in21k if counts[w] == 0)
            if empty:
                print(f"note: {empty} IN-21K concepts have no images under {args.count_root}", file=sys.stderr)
    except ConceptError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    write_tsv(args.output, ["wnid", "n_images"], [(w, counts[w]) for w in in21k])
    print(f"image counts of {len(in21k)} concepts, {sum(counts[w] for w in in21k)} images in all")
    return 0
