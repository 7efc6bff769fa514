"""Command-line entry point: ``python -m imagenet_cog <command> [options]``.

Each command lives in the module that holds its logic; this file only maps names to
``module:function`` so that importing one command does not import torch for all of them.
Each function takes the remaining argument list and returns an exit status.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, str] = {
    # levels stage
    "wordnet-corpus": "imagenet_cog.wordnet:wordnet_corpus_command",
    "concept-catalogue": "imagenet_cog.concepts:concept_catalogue_command",
    "image-counts": "imagenet_cog.concepts:image_counts_command",
    "cut-levels": "imagenet_cog.levels:cut_levels_command",
    "levels-figure": "imagenet_cog.levels_figure:levels_figure_command",
    # splits and demo world
    "demo-world": "imagenet_cog.demo:demo_world",
    "image-splits": "imagenet_cog.splits:image_splits",
    "split-summary": "imagenet_cog.splits:split_summary",
    # features stage
    "extract": "imagenet_cog.extract:extract_command",
    "merge-shards": "imagenet_cog.extract:merge_command",
    "models": "imagenet_cog.extract:describe_models_command",
    # probes stage
    "probe": "imagenet_cog.search:main",
    "pca-components": "imagenet_cog.pca:main",
    # results stage
    "aggregate-probes": "imagenet_cog.aggregate:aggregate_command",
    "results-tables": "imagenet_cog.aggregate:tables_command",
    "results-timings": "imagenet_cog.aggregate:timings_command",
    "results-figures": "imagenet_cog.figures:figures_command",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m imagenet_cog <command> [options]\n\ncommands:", file=sys.stderr)
        for name in sorted(COMMANDS):
            print(f"  {name}", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module_name, function_name = COMMANDS[argv[0]].split(":")
    command = getattr(importlib.import_module(module_name), function_name)
    return int(command(argv[1:]) or 0)
