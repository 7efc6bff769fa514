"""The ways an image root can hold ImageNet, one entry each: which roots may have it and how
its images are read. Every list of layouts (the roots' allowed layouts, the command-line
choices, the readers and index scans) is drawn from :data:`IMAGE_LAYOUTS`; the schema's
``*_layout`` enums are held equal to it by ``tests/test_core_image_roots.py``.

How a root is recognised as holding a layout is the layout's entry in
:data:`imagenet_cog.core.image_roots.DETECTORS`, tried in this table's order by ``detect_layout``; the
index of an indexed layout is built by ``index-images`` (:mod:`imagenet_cog.splits.image_index`):
tar members by :func:`imagenet_cog.core.archives.build_index`, a Hub copy's files by its
entry in :data:`imagenet_cog.core.parquet_images.SHARD_SCANS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagenet_cog.core.naming import IN1K, IN1K_BLURRED, IN21K


@dataclass(frozen=True)
class ImageLayout:
    name: str
    # how messages and benchmark lines name it
    title: str
    # the image roots that may be held this way
    sources: tuple[str, ...]
    # read in place through an image index built once, rather than as files in folders
    indexed: bool = False
    # a Hugging Face Hub copy: indexed by scanning each of its files (SHARD_SCANS)
    hub: bool = False
    # its images are rows of parquet files, read by ParquetReader (core/archives.py), not
    # tar members read by offset (MemberReader)
    parquet_rows: bool = False
    # a Hub copy's file, as an error naming what a root lacks words it
    hub_file: str = ""
    # the copy lists its shards and their lengths in _info.json, which the index is checked against
    info_listed: bool = False
    # the root is one file (the archive itself), not a folder
    root_is_file: bool = False


# The layouts' names, as config.yaml's data.*_layout and --layout take them. FOLDERS: the
# demo's, and the commands' default.
FOLDERS, TARS, OUTER_TAR, WDS, PARQUET = "folders", "tars", "tar", "wds", "parquet"
IMAGE_LAYOUTS = (
    # <root>/<wnid>/*.JPEG, or IN-1K's {train,val}/<wnid>/
    ImageLayout(FOLDERS, "folders", (IN21K, IN1K, IN1K_BLURRED)),
    # one tar per synset (what 'tar xzf winter21_whole.tar.gz' leaves), or a release's set tars
    ImageLayout(TARS, "folder of tars", (IN21K, IN1K, IN1K_BLURRED), indexed=True),
    # the root is one uncompressed tar of synset tars (winter21_whole.tar)
    ImageLayout(OUTER_TAR, "outer tar", (IN21K,), indexed=True, root_is_file=True),
    # webdataset shards (timm/imagenet-22k-wds, timm/imagenet-1k-wds)
    ImageLayout(WDS, "wds shards", (IN21K, IN1K), indexed=True, hub=True,
                hub_file="webdataset shard (<copy>-train-NNNN.tar)", info_listed=True),
    # ILSVRC/imagenet-1k's data/*.parquet
    ImageLayout(PARQUET, "parquet", (IN1K,), indexed=True, hub=True, parquet_rows=True,
                hub_file="parquet file (data/train-NNNNN-of-NNNNN.parquet)"),
)
LAYOUT_NAMES = tuple(layout.name for layout in IMAGE_LAYOUTS)
# the image roots, each with the layouts it may have
SOURCES = (IN21K, IN1K, IN1K_BLURRED)
SOURCE_LAYOUTS = {source: tuple(layout.name for layout in IMAGE_LAYOUTS if source in layout.sources) for source in SOURCES}
# layouts read through an image index: the release's tars and the Hub's shards
ARCHIVE_LAYOUTS = tuple(layout.name for layout in IMAGE_LAYOUTS if layout.indexed)
SHARD_LAYOUTS = tuple(layout.name for layout in IMAGE_LAYOUTS if layout.hub)
PARQUET_ROW_LAYOUTS = tuple(layout.name for layout in IMAGE_LAYOUTS if layout.parquet_rows)
INFO_LISTED_LAYOUTS = tuple(layout.name for layout in IMAGE_LAYOUTS if layout.info_listed)
LAYOUTS_BY_NAME = {layout.name: layout for layout in IMAGE_LAYOUTS}
