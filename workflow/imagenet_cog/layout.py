"""The workflow's file layout under ``results/``, in one place.

Rules (through ``workflow/rules/common.smk``), the package and the tests all build paths
with :class:`Layout`, so the layout documented in the README is the one used.
"""

from __future__ import annotations

from dataclasses import dataclass


# results stage: the tables (each in every TABLE_FORMATS) and figures it writes
TABLE_FORMATS = ("csv", "md", "tex")
FIGURE_FORMATS = ("png", "pdf")
RESULT_FIGURES = ("top1_levels", "relative_levels", "few_shot", "few_shot_relative")


def result_table_names(datasets: list[str]) -> list[str]:
    """Models x datasets at N=all (absolute, relative) and models x N per dataset (both)."""
    return [
        "top1_levels", "relative_levels",
        *(f"top1_{dataset}" for dataset in datasets),
        *(f"relative_{dataset}" for dataset in datasets),
    ]


@dataclass(frozen=True)
class Layout:
    root: str = "results"

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
        if dataset.startswith("random-"):
            return self.random_draw(dataset.split("-", 1)[1])
        if "-" in dataset:
            level_set, level = dataset.split("-", 1)
            return f"{self.root}/levels/{level_set}/{level}.txt"
        return self.level_concepts(dataset)

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

    def demo_preview(self) -> str:
        """A few generated images of each demo dataset, one row per dataset (for the report)."""
        return f"{self.root}/demo/preview.png"

    def image_splits(self, dataset: str) -> str:
        """path, wnid, label, split: every image of a dataset, relative to its image root;
        label = index of wnid among the dataset's sorted wnids; train rows first, then test
        rows, each by path."""
        return f"{self.root}/splits/{dataset}.tsv"

    def split_summary(self) -> str:
        """Per dataset: concepts, images and the range of images per concept in each split."""
        return f"{self.root}/splits/summary.tsv"

    # features stage ---------------------------------------------------------------
    def feature_shard(self, model: str, dataset: str, split: str, shard: str) -> str:
        return f"{self.root}/features/{model}/{dataset}/{split}/shard-{shard}.h5"

    def features(self, model: str, dataset: str, split: str) -> str:
        """One HDF5 file presenting all shards of a split as single virtual datasets."""
        return f"{self.root}/features/{model}/{dataset}/{split}.h5"

    # probes stage -----------------------------------------------------------------
    def probe_result(self, model: str, dataset: str, shots: str, seed: str) -> str:
        return f"{self.root}/probes/{model}/{dataset}/shots-{shots}/seed-{seed}.json"

    def probe_study(self, model: str, dataset: str, shots: str, seed: str) -> str:
        """Optuna journal of the search; not a rule output, so it survives a failed job."""
        return f"{self.root}/probes/{model}/{dataset}/shots-{shots}/seed-{seed}.optuna.jsonl"

    # results stage ----------------------------------------------------------------
    def table(self, name: str, extension: str) -> str:
        return f"{self.root}/tables/{name}.{extension}"

    def figure(self, name: str, extension: str) -> str:
        return f"{self.root}/figures/{name}.{extension}"

    def level_sets_figure(self, extension: str) -> str:
        """Top-1 per level of every level set, random draws as a band (paper supp. Fig. 7)."""
        return self.figure("level_sets", extension)

    def level_sets_table(self, extension: str) -> str:
        return self.table("level_sets", extension)

    def results_summary(self) -> str:
        """Tidy CSV: one row per model x dataset x shots, mean/std of test top-1 over seeds."""
        return self.table("summary", "csv")

    def timings(self, extension: str) -> str:
        """Seconds per model and dataset: extraction and probe benchmarks."""
        return self.table("timings", extension)

    def result_tables(self, datasets: list[str]) -> list[str]:
        return [
            self.table(name, extension) for name in result_table_names(datasets) for extension in TABLE_FORMATS
        ]

    def result_figures(self) -> list[str]:
        return [self.figure(name, extension) for name in RESULT_FIGURES for extension in FIGURE_FORMATS]

    def result_targets(self, datasets: list[str]) -> list[str]:
        """Every file of the results stage."""
        return [
            self.results_summary(),
            *self.result_tables(datasets),
            self.timings("csv"),
            self.timings("md"),
            *self.result_figures(),
        ]
