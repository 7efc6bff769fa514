"""What a run leaves on its disk (plan/footprint.py): files in whole blocks, the stages the
config runs, and the estimate held to the finished demo's folder as a disk of 4 kB blocks
counts it (the tars world's whole run: tests/test_imagenet_tars.py)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from test_plan import IMAGE_COUNTS, rates_file, small_config

from conftest import snakemake
from imagenet_cog.plan.footprint import Files, run_files
from imagenet_cog.plan.rates import read_rates

BLOCK = 4096


def test_every_file_takes_whole_blocks_and_at_least_one():
    assert Files("logs", 10, 0).on_disk(BLOCK) == 10 * BLOCK
    assert Files("images", 100, 100 * 1_300).on_disk(BLOCK) == 100 * BLOCK
    assert Files("corpus", 2, 2 * 10_000).on_disk(BLOCK) == 2 * 3 * BLOCK
    assert Files("corpus", 2, 2 * 10_000).on_disk(1024) == 2 * 10 * 1024
    assert Files("nothing", 0, 0).on_disk(BLOCK) == 0


def kinds(config: dict, tmp_path: Path) -> dict[str, Files]:
    return {files.what: files for files in run_files(config, IMAGE_COUNTS, None, read_rates(rates_file(tmp_path)))}


def test_the_stages_counted_are_the_ones_the_config_runs(tmp_path):
    demo = kinds(small_config(level_sets={"sets": ["wup", "random"], "random": {"draws": 2}},
                              in1k_blurred={"enabled": True}, analyses={"raters": {"enabled": True}}), tmp_path)
    # 4 concepts of 5 levels and of IN-1K, the pool's 20 and the blurred copy's 4, 15 images each in two folders
    assert demo["the demo's images"].count == (5 * 4 + 4 + 20 + 4) * (15 + 2)
    assert demo["the level sets"].count == 12 + 2 * 3 and demo["the rater sheets"].bytes > 0
    bare = kinds(small_config(), tmp_path)
    assert bare["the demo's images"].count == (5 * 4 + 4) * (15 + 2)
    assert bare["the level sets"].count == 0 and "the rater sheets" not in bare
    assert bare["the split tables"].count == 2 and bare["the levels stage"].bytes > 37e6  # WordNet's corpus
    real = kinds(small_config(mode="imagenet", datasets=["in1k"]), tmp_path)
    assert "the demo's images" not in real
    # IN-1K's 1.33 million images: a line each in the split table, a row each in the feature files
    assert real["the split tables"].bytes > 1.3e6 * 50 and real["the feature files' rows"].bytes > 1.3e6 * 100
    assert real["the plan's bytes_written"].bytes > 1.3e6 * 2048 * 2


def plan_options(workdir: Path, *arguments: str) -> dict[str, str]:
    """The options the plan rule gives its command (the plan's settings as the Snakefile makes them)."""
    planned = snakemake(workdir, "plan", "--dry-run", "--printshellcmds", "--nolock", "--cores", "1", *arguments)
    line = next(line for line in planned.stdout.splitlines() if "imagenet_cog plan" in line)
    words = shlex.split(line.split(" 2> ")[0])
    return {word: words[index + 1] for index, word in enumerate(words) if word.startswith("--")}


def estimate_and_disk(workdir: Path, *arguments: str, split_summary: Path | None = None) -> tuple[int, int]:
    """The estimate of the run in 4 kB blocks, with its split summary (or ``split_summary``) as a
    resumed run reads it, and what its results folder takes in them: every file and folder in
    whole blocks."""
    options = plan_options(workdir, *arguments)
    files = run_files(json.loads(options["--config"]), workdir / options["--image-counts"],
                      split_summary or workdir / options["--split-summary"], read_rates(workdir / options["--rates"]))
    taken = 0
    for root, folders, names in os.walk(workdir / Path(options["--output"]).parent):
        taken += len(folders) * BLOCK
        taken += sum(-(-os.lstat(os.path.join(root, name)).st_size // BLOCK) * BLOCK for name in names)
    return sum(kind.on_disk(BLOCK) for kind in files), taken


def test_the_estimate_covers_the_finished_demo_as_its_disk_counts_it(demo_run):
    """The finished demo takes ~99 MB in 4 kB blocks (75 MB of content in ~6,500 files and
    ~1,200 folders); the estimate is at least that, and not a fifth more."""
    estimate, taken = estimate_and_disk(demo_run)
    assert taken <= estimate <= 1.2 * taken, (estimate, taken)
