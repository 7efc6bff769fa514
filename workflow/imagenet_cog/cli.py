"""Command-line entry point: ``python -m imagenet_cog <command> [options]``.

Each command lives in the module that holds its logic, in the package of the stage whose
rule file runs it; this file only maps names to ``module:function`` so that importing one
command does not import torch for all of them. Each function takes the remaining argument
list and returns an exit status.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, str] = {
    # levels stage (workflow/rules/levels.smk): Lin's levels and the other level sets
    "wordnet-corpus": "imagenet_cog.levels.wordnet:wordnet_corpus_command",
    "concept-catalogue": "imagenet_cog.levels.concepts:concept_catalogue_command",
    "image-counts": "imagenet_cog.levels.concepts:image_counts_command",
    "cut-levels": "imagenet_cog.levels.cut:cut_levels_command",
    "levels-figure": "imagenet_cog.levels.figure:levels_figure_command",
    "level-set": "imagenet_cog.levels.level_sets:level_set_command",
    "random-level": "imagenet_cog.levels.level_sets:random_level_command",
    "pool-concepts": "imagenet_cog.levels.level_sets:pool_concepts_command",
    "concept-names": "imagenet_cog.levels.concept_names:concept_names_command",
    # demo (demo.smk): the generated world, its pool, its pretrained network, its IN-1K-blurred
    # and its word vectors
    "demo-world": "imagenet_cog.demo.world:demo_world",
    "demo-pool": "imagenet_cog.demo.world:demo_pool_command",
    "pretrain-demo": "imagenet_cog.demo.pretraining:pretrain_demo_command",
    "demo-blurred": "imagenet_cog.demo.blurred:demo_blurred_command",
    "demo-embeddings": "imagenet_cog.demo.word_vectors:demo_embeddings_command",
    # splits stage (splits.smk)
    "index-images": "imagenet_cog.splits.image_index:index_images_command",
    "preflight": "imagenet_cog.splits.preflight:preflight_command",
    "needed-synsets": "imagenet_cog.splits.preflight:needed_synsets_command",
    "image-splits": "imagenet_cog.splits.image_splits:image_splits",
    "split-summary": "imagenet_cog.splits.summary:split_summary",
    # features stage (features.smk)
    "extract": "imagenet_cog.features.extract:extract_command",
    "merge-shards": "imagenet_cog.features.store:merge_command",
    "extract-split": "imagenet_cog.features.extract_split:extract_split_command",
    "level-set-view": "imagenet_cog.features.views:view_command",
    "zeroshot-classifier": "imagenet_cog.features.zeroshot_classifier:zeroshot_classifier_command",
    # the model registry (no rule: paper Table 3 for a config; a checkpoint made tensors-only)
    "models": "imagenet_cog.models.registry:describe_models_command",
    "convert-checkpoint": "imagenet_cog.models.checkpoints:convert_checkpoint_command",
    # probes stage (probes.smk)
    "probe": "imagenet_cog.probes.probe:main",
    "pca-components": "imagenet_cog.probes.pca:main",
    "probe-knn": "imagenet_cog.probes.knn_probe:main",
    "probe-zeroshot": "imagenet_cog.probes.zeroshot_probe:main",
    "probe-zeroshot-open-set": "imagenet_cog.probes.zeroshot_probe:open_set_main",
    # results stage (results.smk)
    "aggregate-probes": "imagenet_cog.results.summary:aggregate_command",
    "results-tables": "imagenet_cog.results.tables:tables_command",
    "results-statistics": "imagenet_cog.results.tables:statistics_command",
    "results-timings": "imagenet_cog.results.timings:timings_command",
    "results-figures": "imagenet_cog.results.figures:figures_command",
    "results-drop": "imagenet_cog.results.drop:drop_command",
    "results-published": "imagenet_cog.results.published:published_command",
    "level-sets-results": "imagenet_cog.results.level_set_results:level_sets_results_command",
    "results-leaderboard": "imagenet_cog.results.leaderboard:results_leaderboard_command",
    # several runs' leaderboards merged into one page (no rule)
    "leaderboard": "imagenet_cog.results.leaderboard:leaderboard_command",
    # analyses stage (analyses.smk)
    "analyses-kmeans": "imagenet_cog.analyses.clustering:kmeans_command",
    "analyses-geometry": "imagenet_cog.analyses.geometry:geometry_command",
    "analyses-learnability": "imagenet_cog.analyses.learnability:learnability_command",
    "analyses-agreement": "imagenet_cog.analyses.agreement:agreement_command",
    "analyses-summary": "imagenet_cog.analyses.report:summary_command",
    "analyses-tables": "imagenet_cog.analyses.report:tables_command",
    "analyses-figures": "imagenet_cog.analyses.report:figures_command",
    "analyses-detection": "imagenet_cog.analyses.detection:detection_command",
    "detection-results": "imagenet_cog.analyses.detection_report:detection_results_command",
    "analyses-concepts": "imagenet_cog.analyses.concept_accuracy:concept_accuracy_command",
    "concept-results": "imagenet_cog.analyses.concept_report:concept_results_command",
    "rater-sheets": "imagenet_cog.analyses.raters:rater_sheets_command",
    "score-raters": "imagenet_cog.analyses.raters:score_raters_command",
    "caption-images": "imagenet_cog.analyses.captions:caption_images_command",
    "auto-descriptions": "imagenet_cog.analyses.captions:auto_descriptions_command",
    "model-describability": "imagenet_cog.analyses.describability:model_describability_command",
    "model-describability-table": "imagenet_cog.analyses.describability_table:table_command",
    # series stage (series.smk): a training run's checkpoints as one series
    "effective-rank": "imagenet_cog.series.effective_rank:effective_rank_command",
    "series-results": "imagenet_cog.series.results:series_results_command",
    # variants stage (variants.smk): class-balanced, IN-1K-blurred, label-noise audit
    "balanced-split": "imagenet_cog.variants.balanced:balanced_split_command",
    "balanced-view": "imagenet_cog.variants.balanced:balanced_view_command",
    "balanced-results": "imagenet_cog.variants.balanced:balanced_results_command",
    "blurred-results": "imagenet_cog.variants.blurred:blurred_results_command",
    "label-audit": "imagenet_cog.variants.audit:label_audit_command",
    # fine-tuning stage (finetune.smk): the fine-tuning control of CoG supp. C.2
    "finetune": "imagenet_cog.finetune.train:finetune_command",
    "finetune-results": "imagenet_cog.finetune.results:finetune_results_command",
    "zeroshot-results": "imagenet_cog.results.zeroshot:zeroshot_results_command",
    # plan stage (plan.smk): what a run costs before it starts
    "plan": "imagenet_cog.plan.table:plan_command",
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


def run(argv: list[str] | None = None) -> int:
    """:func:`main` as a job runs it: an error raised on purpose or a full disk ends it with its
    reason written for the run's screen, the traceback in the job's log (core.failures)."""
    from imagenet_cog.core.failures import forget_failure, report_failure

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        status = main(argv)
    except Exception as error:
        if not report_failure(f"python -m imagenet_cog {argv[0]}", error):
            raise
        return 1
    forget_failure()
    return status
