"""The workflow's file layout under a run's results folder (``results_dir``, default
``results/``), in one place.

Rules (through ``PATHS`` in ``workflow/rules/common.smk``), the package and the tests all
build paths with :class:`Layout`, so the layout documented in the README is the one used.
Every output, log and benchmark of a run is under its root, so two configurations with
their own roots never touch each other's files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .naming import LINEAR, PCA, RANDOM, ZEROSHOT, view_parts

# results stage: the tables (each in every TABLE_FORMATS) and figures it writes
TABLE_FORMATS = ("csv", "md", "tex")
FIGURE_FORMATS = ("png", "pdf")
RESULT_FIGURES = ("top1_levels", "relative_levels", "few_shot", "few_shot_relative", PCA, "pca_relative")
# the figures drawn for each probe kind with tables of its own (the linear probe's, and the k-NN's)
KIND_FIGURES = ("top1_levels", "relative_levels", "few_shot", "few_shot_relative")
# a kind with tables of its own beside the linear probe (results-tables; the k-NN's: knn_vs_linear,
# knn_rank_agreement): top-1 of both, and Kendall's tau of their rankings
COMPARISON_TABLES = ("vs_linear", "rank_agreement")
# paired tests against the baseline and Kendall's tau of rankings (results-statistics)
STATISTICS_TABLES = ("paired_tests", "rank_agreement")
# drop from IN-1K to each level (results-drop): a table and a figure of the same name
DROP_NAME = "generalization_drop"
# ours against the paper's published top-1 (results-published)
PUBLISHED_FIGURE = "published_vs_ours"
# every model beside the paper's (results-leaderboard): tables of these names, and the page
LEADERBOARD_NAME = "leaderboard"
LEADERBOARD_SAMPLES = "leaderboard_samples"
LEADERBOARD_PROTOCOLS = "leaderboard_protocols"
# the releases the leaderboard's reproduced numbers were computed with, per protocol
LEADERBOARD_STACKS = "leaderboard_stacks"
# top-1 per level of every level set (level-sets-results): a table and a figure of the same name
LEVEL_SETS_NAME = "level_sets"
# the fine-tuning control's table and figure (finetune-results), of the same name
FINETUNE_NAME = "finetune"
# per-concept accuracy against similarity to IN-1K (concept-results): the per-concept table (CSV
# only: a row per model and concept), the curve's numbers and figure (one name), the outliers
CONCEPT_TABLE = "concepts"
CONCEPT_CURVE = "concept_curve"
CONCEPT_OUTLIERS = "concept_outliers"
# a checkpoint series' results (series-results): the long table (CSV only: a row per checkpoint,
# probe kind, dataset, N and seed), the numbers at each step, the verdicts per level, the figure
SERIES_TABLE = "series"
SERIES_STEPS = "series_steps"
SERIES_SUMMARY = "series_summary"
SERIES_FIGURE = "series"


def classifier_beside(result_json: str) -> str:
    """The classifier file kept beside an N = all probe's result JSON."""
    return str(result_json).removesuffix(".json") + ".classifier.npz"


def published_table_names(datasets: list[str]) -> list[str]:
    """Every compared cell (tidy), and ours - published as models x N per dataset."""
    return ["published_comparison", *(f"published_{dataset}" for dataset in datasets)]


# analyses stage: the per-(model, dataset) analyses, and the tables and figures of each
ANALYSES = ("kmeans", "alignment_uniformity", "learnability")
ANALYSIS_TABLES = {
    "kmeans": ("analyses_clustering",),
    "alignment_uniformity": ("analyses_geometry",),
    "learnability": ("analyses_learnability",),
}
ANALYSIS_FIGURES = {
    "kmeans": ("analyses_purity_levels",),
    "alignment_uniformity": ("analyses_ratio_levels", "analyses_alignment_uniformity"),
    "learnability": ("analyses_learnability_levels",),
    "agreement": ("analyses_agreement",),
}


def analysis_table_names(analyses: list[str], datasets: list[str]) -> list[str]:
    """Tables of the switched-on analyses (``agreement``: one matrix per dataset)."""
    names = [name for analysis in ANALYSES if analysis in analyses for name in ANALYSIS_TABLES[analysis]]
    if "agreement" in analyses:
        names += [f"analyses_agreement_{dataset}" for dataset in datasets]
    return names


def analysis_figure_names(analyses: list[str]) -> list[str]:
    return [name for analysis, names in ANALYSIS_FIGURES.items() if analysis in analyses for name in names]


def kind_result_name(name: str, kind: str = LINEAR) -> str:
    """A result table's or figure's name for a probe kind: the linear probe's keeps the
    plain name (``top1_levels``), another kind's is prefixed (``knn_top1_levels``)."""
    return name if kind == LINEAR else f"{kind}_{name}"


def kind_table_names(datasets: list[str], kind: str = LINEAR) -> list[str]:
    """One kind's models x datasets at N=all (absolute, relative) and models x N per dataset (both)."""
    names = [
        "top1_levels", "relative_levels",
        *(f"top1_{dataset}" for dataset in datasets),
        *(f"relative_{dataset}" for dataset in datasets),
    ]
    return [kind_result_name(name, kind) for name in names]


def result_table_names(datasets: list[str], kinds: Sequence[str] = ()) -> list[str]:
    """The linear probe's tables and the other kinds' comparisons; for each of ``kinds`` (the
    configured kinds besides linear with tables of their own: knn) its own tables and its
    comparison with the linear probe."""
    names = [*kind_table_names(datasets), "probe_kinds", "pca_top1", "pca_relative"]
    for kind in kinds:
        names += [*kind_table_names(datasets, kind), *(kind_result_name(name, kind) for name in COMPARISON_TABLES)]
    return names


def result_figure_names(kinds: Sequence[str] = ()) -> list[str]:
    """The linear probe's and the pca figures, and each of ``kinds``' set."""
    return [*RESULT_FIGURES, *(kind_result_name(name, kind) for kind in kinds for name in KIND_FIGURES)]


@dataclass(frozen=True)
class Layout:
    root: str = "results"

    # every stage: the jobs' logs and Snakemake's benchmark files --------------------
    def log(self, relative: str) -> str:
        """A job's log (or, under ``benchmarks/``, its benchmark file) below the run's logs."""
        return f"{self.root}/logs/{relative}"

    def benchmarks(self) -> str:
        """Snakemake's benchmark files of the extraction, probe and other timed jobs."""
        return self.log("benchmarks")

    def failure_reasons(self) -> str:
        """Why this run's jobs failed on purpose, a JSON file per job log (core.failures)."""
        return self.log("reasons")

    def checkpoint_fits(self) -> str:
        """Whether each checkpoint file fits its arch, a JSON file per verdict, judged when the
        Snakefile is read and kept for the next reading (models.checkpoint_fit)."""
        return self.log("checkpoint_fits")

    # plan stage ---------------------------------------------------------------------
    def plan(self) -> str:
        """stage, model, jobs, images_read, bytes_written, trial_epochs, gpu_hours, rates."""
        return f"{self.root}/plan.tsv"

    def plan_measured(self) -> str:
        """rule, model, dataset, jobs, measured_s, projected_s, ratio: a run's measured jobs."""
        return f"{self.root}/plan_measured.tsv"

    # levels stage ---------------------------------------------------------------
    def wordnet_corpus(self) -> str:
        """NLTK data folder holding ``corpora/wordnet`` built from a WordNet dict dir."""
        return f"{self.root}/levels/nltk_data"

    def concept_catalogue(self) -> str:
        """wnid, name, gloss of every IN-21K and IN-1K concept."""
        return f"{self.root}/levels/concepts.tsv"

    def image_counts(self) -> str:
        """wnid, n_images used for the minimum-images filter."""
        return f"{self.root}/levels/image_counts.tsv"

    def eligibility_report(self) -> str:
        """step, description, remaining: the count after each eligibility filter."""
        return f"{self.root}/levels/eligibility_report.tsv"

    def ranking(self) -> str:
        """Every eligible concept ranked by similarity to IN-1K, with its level or gap."""
        return f"{self.root}/levels/ranking.tsv"

    def level_summary(self) -> str:
        """Per level: rank span, similarity range and the ties its boundaries cut through."""
        return f"{self.root}/levels/level_summary.tsv"

    def level_concepts(self, dataset: str) -> str:
        """wnids of one dataset (``in1k`` or a level ``l1``..), one a line."""
        return f"{self.root}/levels/{dataset}.txt"

    def levels_figure(self, extension: str) -> str:
        return f"{self.root}/levels/levels_figure.{extension}"

    # level sets (besides Lin's levels above) ---------------------------------------
    def level_set_ranking(self, level_set: str) -> str:
        return f"{self.root}/levels/{level_set}/ranking.tsv"

    def level_set_summary(self, level_set: str) -> str:
        return f"{self.root}/levels/{level_set}/level_summary.tsv"

    def level_set_overlap(self, level_set: str) -> str:
        """Lin level x this set's level: how many concepts of the one are in the other."""
        return f"{self.root}/levels/{level_set}/overlap_lin.tsv"

    def level_set_figure(self, level_set: str, extension: str) -> str:
        return f"{self.root}/levels/{level_set}/levels_figure.{extension}"

    def random_draw(self, draw: str) -> str:
        """The wnids of random draw ``draw`` (two digits, from 01)."""
        return f"{self.root}/levels/random/draw-{draw}.txt"

    def random_draw_overlap(self, draw: str) -> str:
        return f"{self.root}/levels/random/overlap_lin-{draw}.tsv"

    def dataset_concepts(self, dataset: str) -> str:
        """The wnid list behind any dataset: in1k, a Lin level, ``pool``, ``<set>-l<k>`` or ``random-<NN>``."""
        if "-" not in dataset:
            return self.level_concepts(dataset)
        level_set, level = view_parts(dataset)
        return self.random_draw(level) if level_set == RANDOM else f"{self.root}/levels/{level_set}/{level}.txt"

    def concept_names(self, named: str) -> str:
        """label, wnid, name, lemmas, rule: the names a zero-shot classifier calls a default
        dataset's concepts by, or (``open-set``) every dataset's together (core/names_table.py)."""
        return f"{self.root}/levels/names/{named}.tsv"

    def word_vectors_demo(self) -> str:
        """The demo's generated word2vec text file (real runs: level_sets.word2vec.embeddings)."""
        return f"{self.root}/demo/word_vectors.txt"

    # splits and the demo world -------------------------------------------------------
    def demo_images(self, source: str) -> str:
        """Generated images: ``in21k`` as <root>/<wnid>/, ``in1k`` as <root>/{train,val}/<wnid>/."""
        return f"{self.root}/demo/{source}"

    def demo_concepts(self, dataset: str) -> str:
        """The concepts of ``dataset`` that the demo world draws images for."""
        return f"{self.root}/demo/concepts/{dataset}.txt"

    def demo_pretraining_concepts(self) -> str:
        """The IN-1K concepts the demo's network is pretrained on (IN-1K is probed on some of them)."""
        return f"{self.root}/demo/concepts/pretraining.txt"

    def demo_checkpoint(self) -> str:
        """The demo's small network pretrained on the demo's IN-1K images (rule pretrain_demo_model)."""
        return f"{self.root}/demo/pretrained/demo_cnn.pt"

    def demo_epoch_checkpoint(self, epoch: int) -> str:
        """The demo network's weights after ``epoch`` epochs of its pretraining (demo.pretraining.keep_epochs)."""
        return f"{self.root}/demo/pretrained/demo_cnn-epoch-{epoch}.pt"

    def demo_preview(self) -> str:
        """A few generated images of each demo dataset, one row per dataset (for the report)."""
        return f"{self.root}/demo/preview.png"

    def image_index(self, source: str) -> str:
        """The index of an image root's tars (in21k, in1k, in1k_blurred): each image's
        folder, name, byte offset and size (``core/archives.py``)."""
        return f"{self.root}/images/{source}.index.h5"

    def preflight(self) -> str:
        """dataset, wnid, images, val_images, needed, fall11_images, status, detail: every
        concept of a real-data run checked against the copy before any split is drawn."""
        return f"{self.root}/splits/preflight.tsv"

    def needed_synsets(self) -> str:
        """wnid, name, tar, fall11_images, datasets: the IN-21K synsets a run needs."""
        return f"{self.root}/splits/needed_synsets.tsv"

    def needed_synset_tars(self) -> str:
        """The tars of the needed synsets, one ``<wnid>.tar`` a line (for rsync, tar, wget)."""
        return f"{self.root}/splits/needed_synsets.txt"

    def image_splits(self, dataset: str) -> str:
        """path, wnid, label, split: every image of a dataset, relative to its image root;
        label = index of wnid among the dataset's sorted wnids; train rows first, then test
        rows, each by concept, then path."""
        return f"{self.root}/splits/{dataset}.tsv"

    def balanced_split(self, dataset: str) -> str:
        """The class-balanced variant's split table of a default dataset (imagenet_cog/variants/balanced.py)."""
        return f"{self.root}/splits/balanced/{dataset}.tsv"

    def split_summary(self) -> str:
        """Per dataset: concepts, images and the range of images per concept in each split."""
        return f"{self.root}/splits/summary.tsv"

    # features stage ---------------------------------------------------------------
    def feature_shard(self, model: str, dataset: str, split: str, shard: str) -> str:
        return f"{self.root}/features/{model}/{dataset}/{split}/shard-{shard}.h5"

    def features(self, model: str, dataset: str, split: str) -> str:
        """One HDF5 file presenting all shards of a split as single virtual datasets."""
        return f"{self.root}/features/{model}/{dataset}/{split}.h5"

    def zeroshot_classifier(self, model: str, named: str) -> str:
        """An image-text model's text classifier of a names table (features/zeroshot_classifier.py)."""
        return f"{self.root}/features/{model}/{ZEROSHOT}/{named}.h5"

    # probes stage -----------------------------------------------------------------
    def probe_dir(self, model: str, dataset: str, kind: str = LINEAR) -> str:
        """The linear probe's results sit where they did before other kinds existed; every
        other kind has a folder of its own below the dataset."""
        folder = f"{self.root}/probes/{model}/{dataset}"
        return folder if kind == LINEAR else f"{folder}/{kind}"

    def probe_classifier(self, model: str, dataset: str, seed: str) -> str:
        """The final classifier of an N = all probe, beside its result JSON (not a rule
        output: imagenet_cog/probes/classifier.py describes the file and when it is written)."""
        return classifier_beside(self.probe_result(model, dataset, "all", seed))

    # label-noise audit (supp. A.3) --------------------------------------------------
    def audit_predictions(self, model: str) -> str:
        """Test images one dataset's classifier predicts with confidence above the threshold."""
        return f"{self.root}/audit/{model}/confident_predictions.tsv"

    def audit_shares(self, model: str) -> str:
        """Per (classifier dataset, image dataset, seed): the share of confident predictions."""
        return f"{self.root}/audit/{model}/shares.tsv"

    def audit_contact_sheet(self, model: str) -> str:
        """The most confident cross-predictions: image, its own label, the predicted concept."""
        return f"{self.root}/audit/{model}/contact_sheet.png"

    def probe_result(self, model: str, dataset: str, shots: str, seed: str, kind: str = LINEAR) -> str:
        return f"{self.probe_dir(model, dataset, kind)}/shots-{shots}/seed-{seed}.json"

    def probe_study(self, model: str, dataset: str, shots: str, seed: str, kind: str = LINEAR) -> str:
        """Optuna journal of the search; not a rule output, so it survives a failed job."""
        return f"{self.probe_dir(model, dataset, kind)}/shots-{shots}/seed-{seed}.optuna.jsonl"

    def zeroshot_result(self, model: str, named: str) -> str:
        """One model's zero-shot top-1 and top-5 on a dataset, or (``open-set``) on every
        dataset among all the run's concepts with where the errors go (probes/zeroshot.py)."""
        return f"{self.root}/probes/{model}/{named}/{ZEROSHOT}.json"

    def pca_components(self, model: str, dataset: str) -> str:
        """Principal components of a dataset's training features (imagenet_cog.probes.pca)."""
        return f"{self.root}/probes/{model}/{dataset}/pca-components.h5"

    # analyses stage: human forced-choice sheets -----------------------------------
    def rater_sheets(self, dataset: str) -> str:
        """Folder of self-contained HTML pages for raters (index.html lists them)."""
        return f"{self.root}/analyses/raters/{dataset}/sheets"

    def rater_key(self, dataset: str) -> str:
        """The sheets' answer key: one row per task (kept apart from the pages)."""
        return f"{self.root}/analyses/raters/{dataset}/key.tsv"

    def model_describability_answers(self, model: str, dataset: str) -> str:
        """An image-text model's answers to the key's describability tasks, per description source."""
        return f"{self.root}/analyses/{model}/{dataset}/model_describability_answers.tsv"

    # fine-tuning stage ---------------------------------------------------------------
    def finetune_result(self, model: str, dataset: str) -> str:
        """One model fine-tuned on one dataset: its top-1, top-5, recipe and epochs (JSON)."""
        return f"{self.root}/finetune/{model}/{dataset}.json"

    def finetune_checkpoint(self, model: str, dataset: str) -> str:
        """The last finished epoch of a fine-tuning job; not a rule output, so it survives a
        killed job, which resumes from it; removed once the result is written."""
        return f"{self.root}/finetune/{model}/{dataset}.checkpoint.pt"

    # results stage ----------------------------------------------------------------
    def table(self, name: str, extension: str) -> str:
        return f"{self.root}/tables/{name}.{extension}"

    def figure(self, name: str, extension: str) -> str:
        return f"{self.root}/figures/{name}.{extension}"

    def level_sets_figure(self, extension: str) -> str:
        """Top-1 per level of every level set, random draws as a band (paper supp. Fig. 7)."""
        return self.figure(LEVEL_SETS_NAME, extension)

    def level_sets_table(self, extension: str) -> str:
        return self.table(LEVEL_SETS_NAME, extension)

    def results_summary(self) -> str:
        """Tidy CSV: one row per model x dataset x shots, mean/std of test top-1 over seeds."""
        return self.table("summary", "csv")

    def seed_results(self) -> str:
        """Tidy CSV: one row per probe result (model, dataset, shots, seed, test top-1/5)."""
        return self.table("seed_results", "csv")

    def timings(self, extension: str) -> str:
        """Seconds per model and dataset: extraction and probe benchmarks."""
        return self.table("timings", extension)

    def result_tables(self, datasets: list[str], kinds: Sequence[str] = ()) -> list[str]:
        return [
            self.table(name, extension) for name in result_table_names(datasets, kinds) for extension in TABLE_FORMATS
        ]

    def statistics_tables(self) -> list[str]:
        return [self.table(name, extension) for name in STATISTICS_TABLES for extension in TABLE_FORMATS]

    def drop_outputs(self) -> list[str]:
        return [
            *(self.table(DROP_NAME, extension) for extension in TABLE_FORMATS),
            *(self.figure(DROP_NAME, extension) for extension in FIGURE_FORMATS),
        ]

    def published_outputs(self, datasets: list[str]) -> list[str]:
        return [
            *(self.table(name, extension) for name in published_table_names(datasets) for extension in TABLE_FORMATS),
            *(self.figure(PUBLISHED_FIGURE, extension) for extension in FIGURE_FORMATS),
        ]

    def leaderboard_outputs(self) -> list[str]:
        """The leaderboard (results-leaderboard): its long CSV and wide Markdown tables, the
        samples, protocols and stacks a merge re-ranks from and names, and its page."""
        return [
            self.table(LEADERBOARD_NAME, "csv"),
            self.table(LEADERBOARD_NAME, "md"),
            self.table(LEADERBOARD_SAMPLES, "csv"),
            self.table(LEADERBOARD_PROTOCOLS, "json"),
            self.table(LEADERBOARD_STACKS, "json"),
            self.leaderboard_page(),
        ]

    def leaderboard_page(self) -> str:
        """The leaderboard's self-contained HTML page."""
        return f"{self.root}/{LEADERBOARD_NAME}.html"

    def result_figures(self, kinds: Sequence[str] = ()) -> list[str]:
        return [self.figure(name, extension) for name in result_figure_names(kinds) for extension in FIGURE_FORMATS]

    def result_targets(self, datasets: list[str], kinds: Sequence[str] = ()) -> list[str]:
        """Every file of the results stage (``kinds``: those of result_table_names)."""
        return [
            self.results_summary(),
            self.seed_results(),
            *self.result_tables(datasets, kinds),
            *self.statistics_tables(),
            *self.drop_outputs(),
            *self.published_outputs(datasets),
            self.timings("csv"),
            self.timings("md"),
            *self.result_figures(kinds),
        ]

    # analyses stage -----------------------------------------------------------------
    def analysis_result(self, model: str, dataset: str, analysis: str) -> str:
        """JSON of one analysis: ``metrics`` [{metric, value, low, high, spread}], settings."""
        return f"{self.root}/analyses/{model}/{dataset}/{analysis}.json"

    def kmeans_assignments(self, model: str, dataset: str) -> str:
        """path, label, cluster of every test image (the kept k-means run)."""
        return f"{self.root}/analyses/{model}/{dataset}/kmeans_test_assignments.tsv"

    def learnability_concepts(self, model: str, dataset: str) -> str:
        """Per concept: correct answers and accuracy with random and hard negatives."""
        return f"{self.root}/analyses/{model}/{dataset}/learnability_concepts.tsv"

    def captions(self, captioner: str, dataset: str) -> str:
        """path, group (wnid), caption of the captioned test images (analyses.captions)."""
        return f"{self.root}/analyses/captions/{captioner}/{dataset}/captions.tsv"

    def auto_descriptions(self, captioner: str, dataset: str, model: str | None = None) -> str:
        """group, description, score, captions: Eq. 4's description of each concept, or with
        ``model`` of each of that model's k-means clusters."""
        folder = f"{self.root}/analyses/captions/{captioner}/{dataset}"
        return f"{folder}/descriptions.tsv" if model is None else f"{folder}/clusters/{model}.tsv"

    def detection_result(self, model: str) -> str:
        """Unseen-concept detection of a model: AUROC and FPR@95 per score, seed and level (analyses/detection.py)."""
        return f"{self.root}/analyses/{model}/detection.json"

    def detection_seeds(self, model: str) -> str:
        """The same rows as a TSV: model, score, seed, dataset, auroc, fpr95, n_known, n_unknown."""
        return f"{self.root}/analyses/{model}/detection_seeds.tsv"

    def concept_accuracy(self, model: str) -> str:
        """Per dataset, probe seed and concept: n_test, top-1 and top-5 correct, the most-confused
        concept and its count (analyses/concept_accuracy.py)."""
        return f"{self.root}/analyses/{model}/concepts.tsv"

    def concept_outputs(self) -> list[str]:
        """concept-results' tables and figure."""
        return [
            self.table(CONCEPT_TABLE, "csv"),
            *(self.table(name, extension) for name in (CONCEPT_CURVE, CONCEPT_OUTLIERS) for extension in TABLE_FORMATS),
            *(self.figure(CONCEPT_CURVE, extension) for extension in FIGURE_FORMATS),
        ]

    def agreement_matrix(self, dataset: str) -> str:
        """Adjusted NMI between every pair of models' k-means clusterings (and the labels)."""
        return f"{self.root}/analyses/agreement/{dataset}.csv"

    def analyses_summary(self) -> str:
        """Tidy CSV: model, dataset, metric, value, low, high, spread."""
        return f"{self.root}/analyses/summary.csv"

    def analysis_tables(self, analyses: list[str], datasets: list[str]) -> list[str]:
        return [self.table(name, extension) for name in analysis_table_names(analyses, datasets)
                for extension in TABLE_FORMATS]

    def analysis_figures(self, analyses: list[str]) -> list[str]:
        return [self.figure(name, extension) for name in analysis_figure_names(analyses) for extension in FIGURE_FORMATS]

    # series stage -----------------------------------------------------------------
    def effective_rank(self, model: str) -> str:
        """RankMe of a model's IN-1K training features (JSON; series/effective_rank.py)."""
        return f"{self.root}/series/{model}/effective_rank.json"

    def series_outputs(self) -> list[str]:
        """series-results' tables and figure."""
        return [
            self.table(SERIES_TABLE, "csv"),
            *(self.table(name, extension) for name in (SERIES_STEPS, SERIES_SUMMARY) for extension in TABLE_FORMATS),
            *(self.figure(SERIES_FIGURE, extension) for extension in FIGURE_FORMATS),
        ]
