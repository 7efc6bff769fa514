"""Feature files: one HDF5 file per shard, a merged view per split, and the reader.

Shard file (``Layout.feature_shard``), one per (model, dataset, split, shard):

* ``features`` [n, d] float16 (or float32, config ``features.dtype``): penultimate-layer
  features; all zeros for rows whose image could not be decoded;
* ``labels`` [n] int64: the split table's ``label`` column;
* ``index`` [n] int64: the row's position among the split's rows of the split table;
* ``path`` [n] str: the image path, relative to the image root;
* ``valid`` [n] bool: False where the image could not be decoded;
* attributes (:data:`IDENTITY_ATTRIBUTES` plus provenance): ``model``, ``arch``,
  ``weights`` (weights identity), ``random_weights``, ``preprocessing`` (JSON),
  ``feature_dim``, ``features_dtype``, ``dataset``, ``split``, ``shard``, ``precision``
  (the compute precision used), ``code_version``, ``torch_version``, ``versions`` (JSON: the
  releases of ``core.stack``).

Merged file (``Layout.features``): the same datasets, ``features``/``labels``/``index``/
``valid`` as HDF5 virtual datasets over the shards, referenced by paths relative to the
merged file (the results folder can move), and ``path`` copied (HDF5 cannot map
variable-length strings virtually). It carries the shards' common attributes plus
``num_shards`` and ``num_invalid``.

The ``merge-shards`` command writes a merged file; it lives here, apart from the extraction,
so that it starts without torch.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import h5py
import numpy as np

import imagenet_cog
from imagenet_cog.core.command_line import setup_logging
from imagenet_cog.core.failures import DamagedFileError
from imagenet_cog.core.io import atomic_output

log = logging.getLogger("imagenet_cog.features.store")

# Attributes every shard of one merged file must agree on.
IDENTITY_ATTRIBUTES = ("model", "arch", "weights", "random_weights", "preprocessing",
                       "feature_dim", "features_dtype", "dataset", "split")
ROW_DATASETS = ("features", "labels", "index", "valid")
READ_CHUNK_ROWS = 16384

log = logging.getLogger("imagenet_cog.features.store")


def code_version() -> str:
    """The package version, plus ``git describe`` of the checkout when there is one."""
    version = imagenet_cog.__version__
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return version
    if described.returncode == 0 and described.stdout.strip():
        version += f"+git.{described.stdout.strip()}"
    return version


def write_shard(path: str | os.PathLike, features: np.ndarray, labels: Sequence[int],
                index: Sequence[int], paths: Sequence[str], valid: Sequence[bool],
                attributes: dict[str, Any]) -> None:
    """Write one shard file atomically (nothing appears at ``path`` unless complete)."""
    rows = len(features)
    if not (len(labels) == len(index) == len(paths) == len(valid) == rows):
        raise ValueError("write_shard: features, labels, index, paths and valid differ in length")
    with atomic_output(path) as temporary:
        with h5py.File(temporary, "w", track_order=True) as handle:
            chunk_rows = max(1, min(rows, 1024))
            handle.create_dataset("features", data=features, chunks=(chunk_rows, features.shape[1]) if rows else None)
            handle.create_dataset("labels", data=np.asarray(labels, dtype=np.int64))
            handle.create_dataset("index", data=np.asarray(index, dtype=np.int64))
            handle.create_dataset("valid", data=np.asarray(valid, dtype=bool))
            handle.create_dataset("path", data=list(paths), dtype=h5py.string_dtype())
            for key, value in attributes.items():
                handle.attrs[key] = value


def open_feature_file(path: str | os.PathLike):
    """Open an HDF5 file for reading; a truncated or foreign file is named with the fix."""
    try:
        return h5py.File(path, "r")
    except FileNotFoundError:
        raise
    except OSError as error:
        raise DamagedFileError(path, f"not a readable HDF5 file ({error})") from error


def read_attributes(handle) -> dict[str, Any]:
    """An HDF5 object's attributes as plain Python values (preprocessing JSON decoded)."""
    metadata: dict[str, Any] = {}
    for key, value in handle.attrs.items():
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, np.generic):
            value = value.item()
        metadata[key] = value
    if isinstance(metadata.get("preprocessing"), str):
        metadata["preprocessing"] = json.loads(metadata["preprocessing"])
    return metadata


def merge_shards(shards: Sequence[str | os.PathLike], output: str | os.PathLike) -> dict[str, Any]:
    """Write the merged view of ``shards`` (in order) to ``output``; returns its attributes."""
    if not shards:
        raise ValueError(f"{output}: no shard files to merge")
    output = Path(output)
    infos = []
    for shard in shards:
        with open_feature_file(shard) as handle:
            missing = [name for name in (*ROW_DATASETS, "path") if name not in handle]
            if missing:
                raise DamagedFileError(shard, f"not a feature shard (no {', '.join(missing)})")
            infos.append({
                "path": Path(shard),
                "attrs": dict(handle.attrs),
                "rows": handle["features"].shape[0],
                "dtypes": {name: handle[name].dtype for name in ROW_DATASETS},
                "dim": handle["features"].shape[1],
                "paths": handle["path"].asstr()[...],
                "invalid": int((~handle["valid"][...]).sum()),
            })
    first = infos[0]
    for info in infos[1:]:
        for key in IDENTITY_ATTRIBUTES:
            if info["attrs"].get(key) != first["attrs"].get(key):
                raise ValueError(
                    f"{info['path']} disagrees with {first['path']} on '{key}' "
                    f"({info['attrs'].get(key)!r} vs {first['attrs'].get(key)!r}): the shards "
                    f"come from different runs; delete the stale shards and re-run."
                )
        if info["dtypes"] != first["dtypes"] or info["dim"] != first["dim"]:
            raise ValueError(f"{info['path']}: dataset types or feature size differ from {first['path']}; delete and re-run.")
    total = sum(info["rows"] for info in infos)
    dim = first["dim"]
    with atomic_output(output) as temporary:
        with h5py.File(temporary, "w", track_order=True) as handle:
            for name in ROW_DATASETS:
                shape = (total, dim) if name == "features" else (total,)
                layout = h5py.VirtualLayout(shape=shape, dtype=first["dtypes"][name])
                start = 0
                for info in infos:
                    rows = info["rows"]
                    if rows:
                        relative = os.path.relpath(info["path"].resolve(), output.parent.resolve())
                        source_shape = (rows, dim) if name == "features" else (rows,)
                        layout[start:start + rows] = h5py.VirtualSource(relative, name, shape=source_shape)
                    start += rows
                handle.create_virtual_dataset(name, layout)
            paths = np.concatenate([info["paths"] for info in infos]) if total else np.array([], dtype=object)
            handle.create_dataset("path", data=paths.astype(object), dtype=h5py.string_dtype())
            attributes = {key: first["attrs"][key] for key in first["attrs"] if key != "shard"}
            attributes["num_shards"] = len(infos)
            attributes["num_invalid"] = sum(info["invalid"] for info in infos)
            for key, value in attributes.items():
                handle.attrs[key] = value
    return attributes


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """A feature file's attributes without reading its arrays (``random_weights`` included,
    so that tables and figures can flag numbers of randomly initialised models)."""
    with open_feature_file(path) as handle:
        metadata = read_attributes(handle)
    metadata["random_weights"] = bool(metadata.get("random_weights", False))
    return metadata


@dataclass
class FeatureSet:
    """The valid rows of a feature file, ready for probes."""

    features: np.ndarray  # float32 [n_valid, d]
    labels: np.ndarray  # int64 [n_valid]
    metadata: dict[str, Any]
    invalid_paths: list[str]


def read_labels(path: str | os.PathLike) -> np.ndarray:
    """The labels of a feature file's valid rows, without reading its features."""
    with open_feature_file(path) as handle:
        missing = [name for name in ("labels", "valid") if name not in handle]
        if missing:
            raise DamagedFileError(path, f"not a feature file (no {', '.join(missing)})")
        valid = handle["valid"][...].astype(bool)
        return handle["labels"][...].astype(np.int64)[valid]


def read_features(path: str | os.PathLike, rows: np.ndarray | None = None) -> FeatureSet:
    """Read a merged feature file (or a single shard), leaving out undecodable images.

    Features are converted to float32 chunk by chunk straight into the one output array,
    so the file's float16 copy of an ImageNet-size set is never held in memory whole.

    ``rows`` (sorted indices among the valid rows, i.e. into the ``labels`` a whole read
    returns) reads only those rows: ``features`` and ``labels`` then hold just them, in
    that order. Blocks of the file with none of them are skipped; the others are read
    whole and the rows picked in memory, which is faster than HDF5 point selections
    and reads no more, since HDF5 reads whole chunks (1024 rows) either way.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: feature file not found; run the workflow's merge_features rule.")
    # Virtual sources are resolved relative to the merged file, whatever the working folder.
    with open_feature_file(path) as handle:
        missing = [name for name in (*ROW_DATASETS, "path") if name not in handle]
        if missing:
            raise DamagedFileError(path, f"not a feature file (no {', '.join(missing)})")
        if handle["features"].is_virtual:
            _check_virtual_sources(handle["features"], path)
        valid = handle["valid"][...].astype(bool)
        labels = handle["labels"][...].astype(np.int64)[valid]
        invalid_paths = list(handle["path"].asstr()[...][~valid]) if (~valid).any() else []
        source = handle["features"]
        if rows is None:
            keep = valid
        else:
            rows = np.asarray(rows, dtype=np.int64)
            if rows.size and (rows[0] < 0 or rows[-1] >= labels.size or (np.diff(rows) <= 0).any()):
                raise ValueError(f"{path}: rows to read must be sorted, distinct and among its {labels.size} valid rows")
            labels = labels[rows]
            keep = np.zeros_like(valid)
            keep[np.flatnonzero(valid)[rows]] = True
        features = np.empty((int(keep.sum()), source.shape[1]), dtype=np.float32)
        written = 0
        for start in range(0, source.shape[0], READ_CHUNK_ROWS):
            stop = min(source.shape[0], start + READ_CHUNK_ROWS)
            wanted = keep[start:stop]
            count = int(wanted.sum())
            if count:
                block = source[start:stop]
                features[written:written + count] = block[wanted] if count != len(wanted) else block
                written += count
        metadata = read_attributes(handle)
    metadata["random_weights"] = bool(metadata.get("random_weights", False))
    return FeatureSet(features, labels, metadata, invalid_paths)


def image_wnid(path: str) -> str:
    """The concept of an image's path: the folder holding it, or the synset tar (``<wnid>.tar``)
    holding it where a run reads the release's tars in place."""
    folder = Path(path).parent.name
    return folder.removesuffix(".tar")


def image_features(feature_path: str | Path) -> tuple[np.ndarray, list[str], list[str]]:
    """(features, path, wnid) of a feature file's valid rows (:func:`image_wnid`)."""
    test = read_features(feature_path)
    with open_feature_file(feature_path) as handle:
        valid = handle["valid"][...].astype(bool)
        paths = list(handle["path"].asstr()[...][valid])
    return test.features, paths, [image_wnid(path) for path in paths]


def _check_virtual_sources(dataset, path: Path) -> None:
    """HDF5 fills unreachable virtual sources with zeros silently; fail instead."""
    for source in dataset.virtual_sources():
        candidate = Path(source.file_name)
        if not candidate.is_absolute():
            candidate = path.parent / candidate
        if not candidate.is_file():
            raise FileNotFoundError(
                f"{path}: shard {candidate} is missing; the merged file only points at its "
                f"shards, keep them next to it (or delete {path} and re-run)."
            )
        # HDF5 also reads an unreadable source as zeros: open each one to be sure.
        open_feature_file(candidate).close()


def merge_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog merge-shards",
                                     description="Present a split's shards as one HDF5 file.")
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("shards", nargs="+", type=Path)
    args = parser.parse_args(argv)
    setup_logging()
    attributes = merge_shards(args.shards, args.output)
    log.info("wrote %s: %d shards, %d invalid images, model %s, weights %s",
             args.output, attributes["num_shards"], attributes["num_invalid"],
             attributes["model"], attributes["weights"])
    if attributes["random_weights"]:
        log.warning("%s holds features of RANDOMLY INITIALISED weights", args.output)
    return 0
