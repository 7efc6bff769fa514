"""What a configured run leaves under results_dir, counted as a disk counts it: files in whole
blocks (the free-space check, :mod:`imagenet_cog.plan.space`).

The plan prices the features, the probes' files and the tables and figures (its
``bytes_written``); to them this module adds, for each stage the config runs, what the plan
does not price, and the small files every job leaves (its log, its benchmark, its results),
each of which takes a block of its own. The figures below were measured on the finished demo
(75.3 MB of content in 6,533 files, 93.7 MB in 4 kB blocks) and on the tars world's whole run
(tests/test_imagenet_tars.py's config: 42.3 MB in 271 files, 43.2 MB in 4 kB blocks);
tests/test_plan_footprint.py holds the estimate to the finished demo, test_imagenet_tars.py to
that world's run of its readers' targets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from imagenet_cog.core.naming import IN1K, RANDOM
from imagenet_cog.plan.cost import count_extraction
from imagenet_cog.plan.rates import Rates
from imagenet_cog.plan.table import SERIES_CHECKPOINTS, plan_rows
from imagenet_cog.plan.work import model_widths, probed_datasets

# A feature file beside its features (which the plan prices): each image's path, label and index
# (84-120 bytes a row in a shard, measured), listed in its shard and again in its merged file
# (features.group shard) or once in its split's file (split), and each file's own HDF5 structures.
FEATURE_ROW_BYTES, FEATURE_FILE_BYTES = 100, 12e3
# Every run: WordNet 3.0's corpus (37.3 MB in 17 files), the concept catalogue (2.4 MB), the
# image counts, the ranking and the levels, with their logs.
LEVELS_FILES, LEVELS_BYTES = 30, 40.6e6
# A ranked level set (wup, word2vec, ...): its ranking, levels and figure; a random draw's levels.
RANKED_SET_FILES, RANKED_SET_BYTES = 12, 0.6e6
RANDOM_DRAW_FILES, RANDOM_DRAW_BYTES = 3, 10e3
# mode demo: a generated JPEG at demo.image_size 32 (1.1-1.4 kB measured; larger sizes scale with
# the area), each checkpoint of the demo network (the final one and demo.pretraining.keep_epochs),
# the generated word vectors of the word2vec level set and the world's preview
DEMO_IMAGE_BYTES, DEMO_IMAGE_SIZE = 1_400, 32
DEMO_CHECKPOINT_BYTES = 1.0e6
DEMO_WORD_VECTORS_BYTES, DEMO_PREVIEW_BYTES = 4.6e6, 0.4e6
# a split table's line: the image's path, concept, label and split (47-75 bytes measured)
SPLIT_ROW_BYTES = 75
# analyses.raters: an image embedded in a sheet as base64 JPEG at image_size 96 (1.7 kB measured)
RATER_IMAGE_BYTES, RATER_IMAGE_SIZE = 1_800, 96
# the files of each job the plan counts, with those of the jobs it does not (splits, merges,
# views, analyses, tables): 9.5 on the demo, 11.5 on the tars world; and the folders they fill,
# a block each on most filesystems (none on tmpfs): 4.6 and 4.4
FILES_PER_PLANNED_JOB, FOLDERS_PER_PLANNED_JOB = 12, 4.5


@dataclass(frozen=True)
class Files:
    """Files of one kind the run writes: how many and their bytes together."""

    what: str
    count: int
    bytes: float

    def on_disk(self, block: int) -> int:
        """The bytes they take in whole ``block``-byte blocks, taken as equal in size: at least
        a block each (a log of a few lines takes one)."""
        if self.count <= 0:
            return 0
        return self.count * max(1, math.ceil(self.bytes / self.count / block)) * block


def run_files(config: dict, image_counts: Path, split_summary: Path | None, rates: Rates) -> list[Files]:
    """Every kind of file the configured run writes (``config``: the plan's settings,
    workflow/rules/functions/plan.smk), the plan's first."""
    rows, _ = plan_rows(config, image_counts, split_summary, rates, 1)
    total = next(row for row in rows if row.stage == "total")
    groups, _ = probed_datasets(config, image_counts, split_summary)
    return [Files("the plan's bytes_written", total.jobs, total.bytes_written), feature_file_rows(config, groups),
            Files("the jobs' logs, benchmarks, small results and folders",
                  round(total.jobs * (FILES_PER_PLANNED_JOB + FOLDERS_PER_PLANNED_JOB)), 0),
            Files("the levels stage", LEVELS_FILES, LEVELS_BYTES),
            *level_set_files(config), *demo_files(config),
            split_table_files(config, groups), *rater_files(config)]


def feature_file_rows(config: dict, groups) -> Files:
    """What the feature files hold beside the features, for every model the plan prices (a
    series checkpoint on the config's datasets alone) and every dataset extracted: a shard per
    features.shard_size images and a merged file per split, or a file per split."""
    widths, _ = model_widths(config["models"])
    series = config.get(SERIES_CHECKPOINTS) or {}
    sharded = config["features"].get("group", "shard") != "split"
    images = files = 0
    for model in widths:
        for group in groups[:1] if model in series else [group for group in groups if group.extracted]:
            for data in group.datasets:
                images += data.train + data.test
                files += 2 + (count_extraction(data, config["features"]).shards if sharded else 0)
    listed = images * (2 if sharded else 1)
    return Files("the feature files' rows", files, listed * FEATURE_ROW_BYTES + files * FEATURE_FILE_BYTES)


def level_set_files(config: dict) -> list[Files]:
    sets = config["level_sets"]["sets"]
    ranked = sum(1 for level_set in sets if level_set != RANDOM)
    draws = config["level_sets"]["random"]["draws"] if RANDOM in sets else 0
    return [Files("the level sets", ranked * RANKED_SET_FILES + draws * RANDOM_DRAW_FILES,
                  ranked * RANKED_SET_BYTES + draws * RANDOM_DRAW_BYTES)]


def demo_files(config: dict) -> list[Files]:
    """mode demo: the generated images (the world's levels and IN-1K, the level sets' pool, the
    blurred IN-1K copy) and their folders (a concept's training and test images each have one),
    the demo network's checkpoints, the word vectors and the preview."""
    if config["mode"] != "demo":
        return []
    demo = config["demo"]
    per_concept = demo["train_images_per_concept"] + demo["test_images_per_concept"]
    in1k = demo["in1k_concepts"] or demo["concepts_per_dataset"]
    concepts = config["levels"]["num_levels"] * demo["concepts_per_dataset"] + in1k
    if config["level_sets"]["sets"]:
        concepts += config["level_sets"]["demo_pool_concepts"]
    if config["in1k_blurred"]["enabled"]:
        concepts += demo["concepts_per_dataset"]
    images = concepts * per_concept
    checkpoints = 1 + len(demo["pretraining"]["keep_epochs"])
    vectors = DEMO_WORD_VECTORS_BYTES if "word2vec" in config["level_sets"]["sets"] else 0
    per_image = DEMO_IMAGE_BYTES * (demo["image_size"] / DEMO_IMAGE_SIZE) ** 2
    return [Files("the demo's images", images + 2 * concepts, images * per_image),
            Files("the demo's network and word vectors", checkpoints + 2,
                  checkpoints * DEMO_CHECKPOINT_BYTES + vectors + DEMO_PREVIEW_BYTES)]


def split_table_files(config: dict, groups) -> Files:
    """A table per extracted dataset (the config's, the pool, the balanced and blurred copies)."""
    tables = [data for group in groups if group.extracted or group.stage == "balanced" for data in group.datasets]
    if config["in1k_blurred"]["enabled"]:
        tables += [data for data in groups[0].datasets if data.name == IN1K]
    return Files("the split tables", len(tables), sum(data.train + data.test for data in tables) * SPLIT_ROW_BYTES)


def rater_files(config: dict) -> list[Files]:
    """analyses.raters: a page per task and kind of every dataset, each holding the images of
    every sampled concept's task (a coherence task its references, query and negative; a
    describability task its query and negative)."""
    raters = config["analyses"]["raters"]
    if not raters["enabled"]:
        return []
    per_task = sum(raters["references"] + 2 if variant == "coherence" else 2 for variant in raters["variants"])
    pages = raters["tasks_per_concept"] * len(raters["variants"]) * len(raters["negatives"])
    images = raters["concepts_per_dataset"] * raters["tasks_per_concept"] * per_task * len(raters["negatives"])
    per_image = RATER_IMAGE_BYTES * (raters["image_size"] / RATER_IMAGE_SIZE) ** 2
    datasets = len(config["datasets"])
    return [Files("the rater sheets", datasets * (pages + 2), datasets * images * per_image)]
