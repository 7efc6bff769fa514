"""The workflow's file layout under ``results/``, in one place.

Rules (through ``workflow/rules/common.smk``), the package and the tests all build paths
with :class:`Layout`, so the layout documented in the README is the one used.
"""

from __future__ import annotations

from dataclasses import dataclass


# results stage: the tables (each in every TABLE_FORMATS) and figures it writes
TABLE_FORMATS = ("csv", "md", "tex")
FIGURE_FORMATS = ("png", "pdf")
RESULT_FIGURES = ("top1_levels", "relative_levels", "few_shot", "few_shot_relative", "pca", "pca_relative")


def result_table_names(datasets: list[str]) -> list[str]:
    """Models x datasets at N=all (absolute, relative) and models x N per dataset (both)."""
    return [
        "top1_levels", "relative_levels",
        *(f"top1_{dataset}" for dataset in datasets),
        *(f"relative_{dataset}" for dataset in datasets),
        "probe_kinds", "pca_top1", "pca_relative",
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
    def probe_dir(self, model: str, dataset: str, kind: str = "linear") -> str:
        """The linear probe's results sit where they did before other kinds existed; every
        other kind has a folder of its own below the dataset."""
        folder = f"{self.root}/probes/{model}/{dataset}"
        return folder if kind == "linear" else f"{folder}/{kind}"

    def probe_result(self, model: str, dataset: str, shots: str, seed: str, kind: str = "linear") -> str:
        return f"{self.probe_dir(model, dataset, kind)}/shots-{shots}/seed-{seed}.json"

    def probe_study(self, model: str, dataset: str, shots: str, seed: str, kind: str = "linear") -> str:
        """Optuna journal of the search; not a rule output, so it survives a failed job."""
        return f"{self.probe_dir(model, dataset, kind)}/shots-{shots}/seed-{seed}.optuna.jsonl"

    def pca_components(self, model: str, dataset: str) -> str:
        """Principal components of a dataset's training features (imagenet_cog.pca)."""
        return f"{self.root}/probes/{model}/{dataset}/pca-components.h5"

    # results stage ----------------------------------------------------------------
    def table(self, name: str, extension: str) -> str:
        return f"{self.root}/tables/{name}.{extension}"

    def figure(self, name: str, extension: str) -> str:
        return f"{self.root}/figures/{name}.{extension}"

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
