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
    "level-set": "imagenet_cog.level_sets:level_set_command",
    "random-level": "imagenet_cog.level_sets:random_level_command",
    "pool-concepts": "imagenet_cog.level_sets:pool_concepts_command",
    "level-set-view": "imagenet_cog.views:view_command",
    "demo-pool": "imagenet_cog.demo:demo_pool_command",
    "pretrain-demo": "imagenet_cog.demo_pretraining:pretrain_demo_command",
    "level-sets-results": "imagenet_cog.level_set_results:level_sets_results_command",
    "demo-embeddings": "imagenet_cog.word_vectors:demo_embeddings_command",
    # splits and demo world
    "demo-world": "imagenet_cog.demo:demo_world",
    "image-splits": "imagenet_cog.splits:image_splits",
    "split-summary": "imagenet_cog.splits:split_summary",
    "balanced-split": "imagenet_cog.balanced:balanced_split_command",
    "balanced-view": "imagenet_cog.balanced:balanced_view_command",
    "balanced-results": "imagenet_cog.balanced:balanced_results_command",
    "demo-blurred": "imagenet_cog.blurred:demo_blurred_command",
    "blurred-results": "imagenet_cog.blurred:blurred_results_command",
    # features stage
    "extract": "imagenet_cog.extract:extract_command",
    "merge-shards": "imagenet_cog.extract:merge_command",
    "models": "imagenet_cog.extract:describe_models_command",
    # probes stage
    "probe": "imagenet_cog.search:main",
    "label-audit": "imagenet_cog.audit:label_audit_command",
    "pca-components": "imagenet_cog.pca:main",
    # results stage
    "aggregate-probes": "imagenet_cog.aggregate:aggregate_command",
    "results-tables": "imagenet_cog.aggregate:tables_command",
    "results-timings": "imagenet_cog.aggregate:timings_command",
    "results-figures": "imagenet_cog.figures:figures_command",
    "results-statistics": "imagenet_cog.aggregate:statistics_command",
    "results-drop": "imagenet_cog.drop:drop_command",
    "results-published": "imagenet_cog.published:published_command",
    # analyses stage
    "rater-sheets": "imagenet_cog.analyses.raters:rater_sheets_command",
    "score-raters": "imagenet_cog.analyses.raters:score_raters_command",
    # analyses stage
    "analyses-kmeans": "imagenet_cog.analyses.clustering:kmeans_command",
    "analyses-geometry": "imagenet_cog.analyses.geometry:geometry_command",
    "analyses-learnability": "imagenet_cog.analyses.learnability:learnability_command",
    "analyses-agreement": "imagenet_cog.analyses.agreement:agreement_command",
    "analyses-summary": "imagenet_cog.analyses.report:summary_command",
    "analyses-tables": "imagenet_cog.analyses.report:tables_command",
    "analyses-figures": "imagenet_cog.analyses.report:figures_command",
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
