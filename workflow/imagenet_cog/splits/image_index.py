"""The index of a root's tars or Hub shards (``index-images``): where each image's bytes lie,
built once per root before the splits are drawn, so that listing and reading never scan a tar
again."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from imagenet_cog.core.archives import ArchiveError, build_index
from imagenet_cog.core.image_layouts import ARCHIVE_LAYOUTS, PARQUET_ROW_LAYOUTS, SHARD_LAYOUTS, SOURCES
from imagenet_cog.core.image_roots import ImageRootError, index_archives, root_setting
from imagenet_cog.core.parquet_images import SHARD_SCANS
from imagenet_cog.core.shards import build_shard_index


def index_images_command(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog index-images",
                                     description="Index the images of a root's tars: name, offset and size of each.")
    parser.add_argument("--source", required=True, choices=SOURCES)
    parser.add_argument("--root", required=True)
    parser.add_argument("--layout", required=True, choices=ARCHIVE_LAYOUTS, help="the root's layout")
    parser.add_argument("--processes", type=int, default=1, help="tars read at once")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    try:
        archives = index_archives(args.source, args.root, args.layout)
        print(f"indexing {len(archives)} {'files' if args.layout in PARQUET_ROW_LAYOUTS else 'tar files'} of {root_setting(args.source)} = {args.root} (layout {args.layout}) "
              f"on {args.processes} processes", file=sys.stderr, flush=True)
        options = {"processes": args.processes, "attributes": {"source": args.source, "layout": args.layout},
                   "log": lambda message: print(message, file=sys.stderr, flush=True)}
        if args.layout in SHARD_LAYOUTS:
            summary = build_shard_index(args.source, args.root, archives, args.output, args.layout,
                                        scan=SHARD_SCANS[args.layout], **options)
        else:
            summary = build_index(args.root, archives, args.output, **options)
    except (ImageRootError, ArchiveError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for relative in summary.truncated:
        print(f"warning: {relative} ends inside a member (an interrupted download?): its cut images will be flagged "
              f"invalid when read; download it again", file=sys.stderr)
    print(f"{args.output}: {summary.images} images in {summary.folders} folders of {summary.archives} tar files "
          f"({summary.duplicates} repeated names, {summary.skipped} other members or samples without an image skipped) in {summary.seconds:.1f} s")
    return 0
