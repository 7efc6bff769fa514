"""The ``extract-split`` command: every shard of one split in one job (``features.group: split``).

One job per shard (``features.group: shard``, the default) lets a cluster run shards side
by side, but each job starts Python and CUDA and loads its checkpoint for a few seconds of
work on a fast GPU (724 such jobs for one ResNet-50 through the paper's protocol). This job
builds the model once and extracts the split's shards one after another with
:func:`imagenet_cog.features.extract.extract_shard`, so every shard file is the one its own job
writes (same rows, attributes and tolerance check), then writes the merged view
(:func:`imagenet_cog.features.store.merge_shards`), its only Snakemake output.

The shards are not outputs, so Snakemake does not delete them when the job fails: each is
written atomically as it is done, and a job run again keeps every shard whose file is
current (:func:`shard_is_current`: the same model weights, preprocessing, split, shard, rows
and requested settings) and extracts only the rest. The price: Snakemake does not see a
shard deleted by hand; the merged file then names it when read, and deleting the merged file
makes the job run again, extracting only the missing shards.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from pathlib import Path

from imagenet_cog.core.command_line import setup_logging
from imagenet_cog.features.extract import (
    ExtractionOptions,
    ShardRows,
    SplitImages,
    add_extraction_arguments,
    checked_identity,
    extract_shard,
    extraction_arguments,
    extraction_status,
    shard_rows,
    split_rows,
)
from imagenet_cog.features.store import merge_shards, open_feature_file, read_attributes
from imagenet_cog.models.registry import ModelSpec, build_model, planned_preprocessing

log = logging.getLogger("imagenet_cog.features.extract_split")


def shard_is_current(path: Path, expected: dict, rows: ShardRows) -> bool:
    """Whether the shard file at ``path`` holds ``rows`` with the attributes ``expected``
    (the identity of the weights, preprocessing, split, shard and the settings asked for)."""
    if not path.is_file():
        return False
    try:
        with open_feature_file(path) as handle:
            attributes = read_attributes(handle)
            same_rows = (
                handle["index"][...].tolist() == rows.index
                and handle["labels"][...].tolist() == rows.labels
                and handle["path"].asstr()[...].tolist() == rows.paths
            )
    except (OSError, ValueError, KeyError) as error:
        log.warning("%s unreadable (%s): extracting it again", path, error)
        return False
    # the same preprocessing, whatever the order of its JSON keys
    attributes["preprocessing"] = json.dumps(attributes.get("preprocessing"), sort_keys=True)
    expected = {**expected, "preprocessing": json.dumps(json.loads(expected["preprocessing"]), sort_keys=True)}
    return same_rows and all(attributes.get(key) == value for key, value in expected.items())


def extract_split(spec: ModelSpec, images: SplitImages, shard_size: int, shard_template: str, merged: Path,
                  options: ExtractionOptions = ExtractionOptions(), *, expected_identity: str | None = None) -> dict:
    """Extract every shard of a split into ``shard_template.format(shard=...)`` (five digits),
    keeping current ones, then merge them into ``merged``; returns the merged attributes."""
    started = time.perf_counter()
    selected = split_rows(images.split_table, images.split)
    count = max(1, math.ceil(len(selected) / shard_size))
    outputs = [Path(shard_template.format(shard=f"{shard:05d}")) for shard in range(count)]
    identity = checked_identity(spec, expected_identity)
    # a registry or timm model's preprocessing is known without building it; a custom factory's once built
    preprocessing = _planned_preprocessing(spec)
    model, kept = None, 0
    for shard, output in enumerate(outputs):
        rows = shard_rows(images.split_table, images.split, shard, shard_size, selected)
        if preprocessing is None and output.is_file():
            model = model or _built(spec, identity)
            preprocessing = model.preprocessing.to_json()
        expected = {"weights": identity, "preprocessing": preprocessing, "dataset": images.dataset,
                    "split": images.split, "shard": shard, "shard_size": shard_size, "features_dtype": options.dtype,
                    "extraction_settings": options.requested()}
        if preprocessing is not None and shard_is_current(output, expected, rows):
            kept += 1
            log.info("kept %s: current (same weights, rows and settings)", output)
            continue
        model = model or _built(spec, identity)
        extract_shard(spec, images, shard, shard_size, output, options, rows=rows, model=model)
    attributes = merge_shards(outputs, merged)
    log.info("wrote %s: %d shards (%d kept, %d extracted) in %.1f s", merged, count, kept, count - kept,
             time.perf_counter() - started)
    return attributes


def _built(spec: ModelSpec, identity: str):
    model = build_model(spec, identity)
    for note in model.notes:
        log.info(note)
    return model


def _planned_preprocessing(spec: ModelSpec) -> str | None:
    """The preprocessing a model will use, known without building it for registry and timm
    models (a custom factory's is known only once built: its shards are then checked after
    building)."""
    preprocessing = planned_preprocessing(spec)
    return preprocessing.to_json() if preprocessing is not None else None


def extract_split_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog extract-split",
                                     description="Extract every shard of a split in one job and merge them.")
    add_extraction_arguments(parser)
    parser.add_argument("--shard-template", required=True,
                        help="path of shard files, {shard} standing for the shard's five digits")
    parser.add_argument("--output", required=True, type=Path, help="the merged feature file")
    args = parser.parse_args(argv)
    if "{shard}" not in args.shard_template:
        parser.error(f"--shard-template must contain {{shard}}, not {args.shard_template!r}")
    setup_logging()
    return extraction_status(extract_split, shard_template=args.shard_template, merged=args.output,
                             **extraction_arguments(args))
