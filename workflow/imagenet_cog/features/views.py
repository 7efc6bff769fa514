"""Level-set datasets as views over features already extracted (no image is read twice).

Every level set draws its concepts from the eligible ones, and a concept's train/test images
are drawn by (seed, wnid) alone (:mod:`imagenet_cog.splits.image_splits`), so its rows are the same in
whichever dataset it was extracted with. A view of a level-set dataset is an HDF5 file in the
merged feature file's format (:mod:`imagenet_cog.features.store`): ``features`` and ``valid`` are
virtual datasets over the rows of its concepts in the *source* datasets' shards (Lin's
levels, and the ``pool`` of the eligible concepts outside them), so a probe reads only those
rows; ``labels`` are re-numbered for the view (index of the wnid among its sorted wnids),
``index`` is the row's position in its source split and ``source`` names that source.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Sequence

import h5py
import numpy as np

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.io import atomic_output, read_lines, read_tsv
from imagenet_cog.core.sampling import spread
from imagenet_cog.features.store import (
    IDENTITY_ATTRIBUTES,
    open_feature_file,
    read_attributes,
)


class ViewError(ExplainedError, ValueError):
    """The view cannot be built from its sources."""


def shard_blocks(merged: Path) -> list[tuple[int, int, Path]]:
    """(first row, stop row, shard path) of each shard behind a merged feature file."""
    with open_feature_file(merged) as handle:
        blocks = []
        for source in handle["features"].virtual_sources():
            (start, _), (last, _) = source.vspace.get_select_bounds()
            path = Path(source.file_name)
            blocks.append((start, last + 1, path if path.is_absolute() else merged.parent / path))
    return sorted(blocks)


def row_runs(rows: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted row numbers as (start, stop) runs of consecutive rows."""
    runs: list[tuple[int, int]] = []
    for row in rows:
        if runs and runs[-1][1] == row:
            runs[-1] = (runs[-1][0], row + 1)
        else:
            runs.append((row, row + 1))
    return runs


def choose_view_concepts(wanted: Sequence[str], available: set[str], max_concepts: int, setting: str) -> list[str]:
    """The view's wnids: all of ``wanted`` (which must all have features), or with
    ``max_concepts`` (the demo) that many of those with features, spread over the list."""
    if max_concepts:
        present = [w for w in wanted if w in available]
        if len(present) < 2:
            raise ViewError(
                f"only {len(present)} of the {len(wanted)} concepts have demo images; raise demo.pool_concepts."
            )
        return sorted(spread(present, max_concepts))
    missing = [w for w in wanted if w not in available]
    if missing:
        raise ViewError(
            f"{len(missing)} concepts (e.g. {missing[0]}) are in no source dataset ({setting}); "
            f"a level set's concepts must be eligible concepts of the Lin ranking."
        )
    return sorted(wanted)


def write_view(
    output: str | os.PathLike, dataset: str, split: str, concepts: Sequence[str],
    sources: Sequence[tuple[str, Path, Path]], max_concepts: int = 0, keep_paths: set[str] | None = None,
) -> dict:
    """``sources``: (dataset, split table, merged feature file of ``split``) of each source.
    ``keep_paths``: only the rows of these image paths (a sub-sample such as the
    class-balanced variant's), else every row of the chosen concepts."""
    output = Path(output)
    rows_of, available = _rows_by_concept(sources, split, keep_paths)
    chosen = choose_view_concepts(concepts, available, max_concepts, ", ".join(name for name, _, _ in sources))
    blocks = [shard_blocks(merged) for _, _, merged in sources]
    first = _agreed_attributes(sources)
    pieces = []  # (source number, start row, stop row, label)
    for label, wnid in enumerate(chosen):
        number, rows, _ = rows_of.get(wnid, (0, [], []))
        pieces.extend((number, start, stop, label) for start, stop in row_runs(rows))
    total = sum(stop - start for _, start, stop, _ in pieces)
    # Counted from the sources opened read-only: HDF5 opens the sources of a virtual dataset
    # with its file's intent, so reading them through the file being written would lock them
    # for writing against the other jobs reading the same shards.
    source_valid = []
    for _, _, merged in sources:
        with open_feature_file(merged) as handle:
            source_valid.append(handle["valid"][...].astype(bool))
    invalid = sum(int((~source_valid[number][start:stop]).sum()) for number, start, stop, _ in pieces)
    with atomic_output(output) as temporary:
        with h5py.File(temporary, "w", track_order=True) as handle:
            for dataset_name in ("features", "valid"):
                layout = _virtual_layout(dataset_name, pieces, blocks, total, first, output)
                handle.create_virtual_dataset(dataset_name, layout, fillvalue=0)
            labels = np.concatenate([np.full(stop - start, label) for _, start, stop, label in pieces]) if pieces else np.array([])
            index = np.concatenate([np.arange(start, stop) for _, start, stop, _ in pieces]) if pieces else np.array([])
            source_numbers = np.concatenate([np.full(stop - start, n) for n, start, stop, _ in pieces]) if pieces else np.array([])
            paths = [path for w in chosen for path in rows_of.get(w, (0, [], []))[2]]
            handle.create_dataset("labels", data=labels.astype(np.int64))
            handle.create_dataset("index", data=index.astype(np.int64))
            handle.create_dataset("source", data=source_numbers.astype(np.int16))
            handle.create_dataset("path", data=np.array(paths, dtype=object), dtype=h5py.string_dtype())
            kept = {key: value for key, value in first.items() if key not in ("dtypes", "dim", "shard", "num_shards", "num_invalid")}
            kept["preprocessing"] = json.dumps(kept["preprocessing"]) if isinstance(kept.get("preprocessing"), dict) else kept.get("preprocessing")
            kept.update(dataset=dataset, sources=json.dumps([name for name, _, _ in sources]),
                        num_concepts=len(chosen), num_invalid=invalid)
            for key, value in kept.items():
                if value is not None:
                    handle.attrs[key] = value
    return {"concepts": len(chosen), "rows": total}


def _rows_by_concept(sources: Sequence[tuple[str, Path, Path]], split: str, keep_paths: set[str] | None):
    """``(rows_of, available)``: each wnid's (source number, rows in its source split, image
    paths), from the first source that has it; and every wnid of any source."""
    rows_of: dict[str, tuple[int, list[int], list[str]]] = {}
    available: set[str] = set()
    for number, (_, table, _) in enumerate(sources):
        position = 0
        for row in read_tsv(table):
            available.add(row["wnid"])
            if row["split"] != split:
                continue
            entry = rows_of.setdefault(row["wnid"], (number, [], []))
            if entry[0] == number and (keep_paths is None or row["path"] in keep_paths):
                entry[1].append(position)
                entry[2].append(row["path"])
            position += 1
    return rows_of, available


def _agreed_attributes(sources: Sequence[tuple[str, Path, Path]]) -> dict:
    """The first source's attributes (with its datasets' dtypes and the feature dimension),
    after checking that every source has the same model, weights and preprocessing."""
    attributes = []
    for name, _, merged in sources:
        with open_feature_file(merged) as handle:
            attributes.append(read_attributes(handle) | {"dtypes": {k: handle[k].dtype for k in ("features", "valid")},
                                                         "dim": handle["features"].shape[1]})
    first = attributes[0]
    for (name, _, _), attrs in zip(sources, attributes):
        for key in IDENTITY_ATTRIBUTES:
            if key not in ("dataset",) and attrs.get(key) != first.get(key):
                raise ViewError(f"source {name} disagrees with {sources[0][0]} on '{key}'; re-extract the stale one.")
    return first


def _virtual_layout(dataset_name: str, pieces: list, blocks: list, total: int, first: dict, output: Path):
    """The view's ``dataset_name`` (features or valid) as a virtual layout over the shards'
    rows of ``pieces``, the shards referenced relative to the view's folder."""
    dim = first["dim"]
    shape = (total, dim) if dataset_name == "features" else (total,)
    layout = h5py.VirtualLayout(shape=shape, dtype=first["dtypes"][dataset_name])
    at = 0
    for number, start, stop, _ in pieces:
        # a run may cross shard boundaries: map each part to its shard
        for shard_start, shard_stop, shard in blocks[number]:
            low, high = max(start, shard_start), min(stop, shard_stop)
            if low >= high:
                continue
            rows = shard_stop - shard_start
            relative = os.path.relpath(shard.resolve(), output.parent.resolve())
            source_shape = (rows, dim) if dataset_name == "features" else (rows,)
            source = h5py.VirtualSource(relative, dataset_name, shape=source_shape)
            layout[at + low - start:at + high - start] = source[low - shard_start:high - shard_start]
        at += stop - start
    return layout


def view_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog level-set-view",
        description="Write a level-set dataset's feature file as a view over extracted features.",
    )
    parser.add_argument("--dataset", required=True, help="the view's name, e.g. wup-l3 or random-01")
    parser.add_argument("--split", required=True, choices=["train", "test"])
    parser.add_argument("--concepts", required=True, help="the level-set dataset's wnids, one a line")
    parser.add_argument("--source", action="append", nargs=3, metavar=("DATASET", "SPLIT_TABLE", "FEATURES"),
                        required=True, help="a dataset whose features the view reads")
    parser.add_argument("--max-concepts", type=int, default=0, help="demo: at most this many concepts with images")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    sources = [(name, Path(table), Path(features)) for name, table, features in args.source]
    try:
        written = write_view(args.output, args.dataset, args.split, read_lines(args.concepts), sources, args.max_concepts)
    except ViewError as error:
        print(f"error: {args.dataset}: {error}", file=sys.stderr)
        return 1
    print(f"{args.dataset} {args.split}: {written['rows']} rows of {written['concepts']} concepts "
          f"from {', '.join(name for name, _, _ in sources)}")
    return 0
