"""The k-NN probe's results: its summary rows on the linear grid, its own set of
tables and figures, and its top-1 and ranking of the models beside the linear probe's."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from PIL import Image
from scipy import stats
from test_results import DATASETS, MODELS, SEEDS, SHOTS, write_results

from imagenet_cog.core.layout import (
    Layout,
    kind_table_names,
    result_figure_names,
    result_table_names,
)
from imagenet_cog.results.figures import build_figures, figures_command
from imagenet_cog.results.statistics import kind_rank_agreement
from imagenet_cog.results.summary import aggregate_command, load_probe_results, read_seed_results, read_summary
from imagenet_cog.results.tables import kind_vs_linear, tables_command

# (model, dataset, shots) -> k-NN top-1 per seed. At N = all every seed is the same (the k-NN
# has no randomness there; decimals whose differences round, as real top-1s do). Linear top-1 at N = all (test_results.TOP1): IN-1K resnet50 72,
# deit_small 30, dino 76; L1 resnet50 61, deit_small 26, dino none. The k-NN ranks the models
# on IN-1K as the linear probe does (tau 1) and the two with L1 results the other way (tau -1).
KNN_TOP1 = {
    ("resnet50", "in1k", "1"): [30.0, 33.0, 36.0],
    ("resnet50", "in1k", "all"): [60.1] * 3,
    ("resnet50", "l1", "1"): [15.0, 16.0, 17.0],
    ("resnet50", "l1", "all"): [40.2] * 3,
    ("deit_small", "in1k", "1"): [8.0, 9.0, 10.0],
    ("deit_small", "in1k", "all"): [20.3] * 3,
    ("deit_small", "l1", "1"): [4.0, 6.0, 5.0],
    ("deit_small", "l1", "all"): [45.9] * 3,
    ("dino", "in1k", "1"): [40.0, 44.0, 45.0],
    ("dino", "in1k", "all"): [70.7] * 3,
    ("dino", "l1", "1"): [20.0, 21.0, 22.0],
    ("dino", "l1", "all"): [50.3] * 3,
}


def write_knn_results(root: Path) -> None:
    """k-NN results in the contract's shape: one job per model and dataset, each result's
    total_s the seconds of the N's seeds together (seeds_together), as probe-knn writes them."""
    layout = Layout(str(root))
    for (model, dataset, shots), values in KNN_TOP1.items():
        for seed, value in zip(SEEDS, values):
            path = Path(layout.probe_result(model, dataset, shots, seed, "knn"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({
                "model": model, "dataset": dataset, "probe": "knn", "shots": shots, "seed": int(seed),
                "random_weights": MODELS[model]["weights"] == "random",
                "test_top1": value, "test_top5": min(100.0, value + 15.0),
                "knn": {"reported_k": 20, "per_k": [{"k": 20, "neighbours": 20, "test_top1": value, "test_top5": 90.0}]},
                "n_train": 10, "n_test": 5, "n_classes": 2, "feature_dim": 8,
                "timings": {"total_s": 2.0, "load_s": 1.0}, "seeds_together": SEEDS,
            }))


@pytest.fixture(scope="module")
def knn_run(tmp_path_factory):
    """Linear and k-NN results aggregated (an mlp kind on a smaller grid beside them), and
    results-tables run on them: (results root, summary path, per-seed results path); read only."""
    tmp_path = tmp_path_factory.mktemp("knn")
    root = tmp_path / "results"
    write_results(root)
    write_knn_results(root)
    write_results(root, {("resnet50", "in1k", "all"): [80.0]}, "mlp", ["22"])
    summary, seeds = tmp_path / "summary.csv", tmp_path / "seed_results.csv"
    grid = ["--results-root", str(root), "--models", json.dumps(MODELS), "--datasets", *DATASETS,
            "--shots", *SHOTS, "--seeds", *SEEDS, "--kinds", "linear", "knn", "mlp",
            "--other-kinds-shots", "all", "--other-kinds-seeds", "22"]
    assert aggregate_command([*grid, "--output", str(summary), "--seed-output", str(seeds)]) == 0
    assert tables_command(["--summary", str(summary), "--seed-results", str(seeds),
                           "--results-root", str(root), "--baseline", "resnet50"]) == 0
    return root, summary, seeds


def test_knn_rows_cover_the_linear_grid_and_keep_their_own_timing_share(knn_run):
    root, summary_path, seeds_path = knn_run
    summary = read_summary(summary_path)
    knn = summary[summary["probe"] == "knn"]
    assert len(knn) == len(MODELS) * len(DATASETS) * len(SHOTS)  # not the mlp's N = all, one seed
    assert set(knn["shots"]) == set(SHOTS) and (knn["expected_seeds"] == len(SEEDS)).all() and knn["complete"].all()
    full = knn[(knn["model"] == "dino") & (knn["dataset"] == "in1k") & (knn["shots"] == "all")].iloc[0]
    assert (full["mean"], full["std"], full["ci95_low"], full["ci95_high"]) == pytest.approx((70.7, 0.0, 70.7, 70.7))
    assert len(summary[summary["probe"] == "mlp"]) == len(MODELS) * len(DATASETS)
    seeds = read_seed_results(seeds_path)
    assert len(seeds[seeds["probe"] == "knn"]) == len(KNN_TOP1) * len(SEEDS)
    # a k-NN result's total_s times every seed of its N, as a grouped linear job's: a share each
    runs = load_probe_results(str(root), ["resnet50"], ["in1k"], ["all"], SEEDS, "knn")
    assert runs["probe_s"].tolist() == pytest.approx([2.0 / len(SEEDS)] * len(SEEDS))


def test_knn_tables_hold_the_knn_cells_and_leave_the_linear_tables_alone(knn_run):
    root, _, _ = knn_run
    layout = Layout(str(root))
    for path in layout.result_tables(DATASETS, kinds=["knn"]):
        assert Path(path).stat().st_size > 0, path
    levels = pd.read_csv(layout.table("knn_top1_levels", "csv")).set_index("Model")
    assert levels.loc["dino"].tolist() == ["70.7 ± 0.0 [70.7, 70.7]", "50.3 ± 0.0 [50.3, 50.3]"]
    markdown = open(layout.table("knn_top1_levels", "md")).read()
    assert "weighted k-NN classifiers (k = probes.knn.reported_k)" in markdown
    assert "no randomness" in markdown
    in1k = pd.read_csv(layout.table("knn_top1_in1k", "csv")).set_index("Model")
    assert in1k.loc["ResNet50", "N=1"] == "33.0 ± 2.4 [25.5, 40.5]"
    # relative to the baseline's k-NN (not its linear probe): dino - resnet50 on IN-1K at N=1,
    # per-seed differences 10, 11, 9 (± is dino's own std), p = 0.003 among the k-NN's 9 tests
    relative = pd.read_csv(layout.table("knn_relative_in1k", "csv")).set_index("Model")
    assert relative.loc["dino", "N=1"] == "+10.0 ± 2.2 [7.5, 12.5]*"
    # at N = all every seed's difference is the same: a zero-width interval and no test
    full = pd.read_csv(layout.table("knn_relative_levels", "csv")).set_index("Model")
    assert full.loc["DeiT-S†", "L1"] == "+5.7 ± 0.0 [5.7, 5.7]"
    assert "tables/paired_tests" not in open(layout.table("knn_relative_in1k", "md")).read()
    linear = pd.read_csv(layout.table("top1_levels", "csv")).set_index("Model")
    assert linear.loc["ResNet50", "IN-1K"] == "72.0 ± 1.6 [67.0, 77.0]"
    assert "k-NN" not in open(layout.table("top1_levels", "md")).read()


def test_knn_beside_linear_per_model_dataset_and_n():
    summary = pd.DataFrame([
        {"model": model, "label": model.upper(), "probe": probe, "dataset": "l1", "shots": shots, "mean": mean,
         "std": std, "complete": complete}
        for model, probe, shots, mean, std, complete in [
            ("a", "linear", "1", 20.0, 1.0, True), ("a", "linear", "all", 60.0, 0.5, True),
            ("b", "linear", "1", float("nan"), float("nan"), False), ("b", "linear", "all", 50.0, 0.2, True),
            ("a", "knn", "1", 25.0, 2.0, True), ("a", "knn", "all", 55.0, 0.0, True),
            ("b", "knn", "1", 10.0, 1.0, True), ("b", "knn", "all", 52.0, 0.0, True),
        ]
    ])
    table = kind_vs_linear(summary, "knn")
    assert table[["model", "shots"]].values.tolist() == [["a", "1"], ["b", "1"], ["a", "all"], ["b", "all"]]
    rows = table.set_index(["model", "shots"])
    assert rows.loc[("a", "all"), ["knn_mean", "linear_mean", "knn_minus_linear"]].tolist() == [55.0, 60.0, -5.0]
    assert rows.loc[("a", "1"), "knn_minus_linear"] == 5.0
    assert pd.isna(rows.loc[("b", "1"), "linear_mean"]) and pd.isna(rows.loc[("b", "1"), "knn_minus_linear"])
    assert rows.loc[("b", "all"), "label"] == "B"


def test_knn_rank_agreement_is_kendalls_tau_of_the_two_rankings(knn_run):
    root, summary_path, _ = knn_run
    table = pd.read_csv(Layout(str(root)).table("knn_rank_agreement", "csv"), dtype={"shots": str})
    rows = table.set_index(["shots", "dataset"])
    linear_in1k, knn_in1k = [72.0, 30.0, 76.0], [60.1, 20.3, 70.7]
    assert rows.loc[("all", "in1k"), "kendall_tau"] == pytest.approx(stats.kendalltau(linear_in1k, knn_in1k).statistic)
    assert rows.loc[("all", "in1k"), "kendall_tau"] == pytest.approx(1.0)
    assert rows.loc[("all", "in1k"), "p_value"] == pytest.approx(stats.kendalltau(linear_in1k, knn_in1k).pvalue)
    assert rows.loc[("all", "in1k"), "n_models"] == 3
    # dino has no linear result on L1: two models, ranked the other way round
    assert rows.loc[("all", "l1"), "kendall_tau"] == pytest.approx(-1.0)
    assert rows.loc[("all", "l1"), "n_models"] == 2
    # dino misses a linear seed on IN-1K at N = 1: the two complete models, in the same order
    assert (rows.loc[("1", "in1k"), "n_models"], rows.loc[("1", "in1k"), "kendall_tau"]) == (2, 1.0)
    assert len(table) == len(SHOTS) * len(DATASETS)

    reversed_order = pd.DataFrame([
        {"model": model, "probe": probe, "dataset": "l3", "shots": "all", "mean": mean, "complete": True}
        for probe, means in (("linear", [50.0, 40.0, 30.0, 20.0]), ("knn", [10.0, 20.0, 30.0, 40.0]))
        for model, mean in zip("abcd", means)
    ])
    (row,) = kind_rank_agreement(reversed_order, "knn").to_dict("records")
    expected = stats.kendalltau([50.0, 40.0, 30.0, 20.0], [10.0, 20.0, 30.0, 40.0])
    assert (row["kendall_tau"], row["p_value"], row["n_models"]) == pytest.approx((-1.0, expected.pvalue, 4))


def test_knn_figures_are_drawn_by_the_linear_probes_figure_functions(knn_run, tmp_path):
    root, summary_path, seeds_path = knn_run
    summary = read_summary(summary_path)
    figures = build_figures(summary[summary["level_set"] == "lin"], "resnet50", read_seed_results(seeds_path))
    try:
        assert list(figures) == result_figure_names(kinds=["knn"])
        (ax,) = [ax for ax in figures["knn_top1_levels"].axes if ax.get_visible()]
        assert ax.get_title() == "Weighted k-NN classification (k = probes.knn.reported_k) with all training images"
        dino = next(container for container in ax.containers if container.get_label() == "dino")
        assert dino.lines[0].get_ydata().tolist() == pytest.approx([70.7, 50.3])
        in1k = [ax for ax in figures["knn_few_shot"].axes if ax.get_visible()][0]
        dino = next(line for line in in1k.get_lines() if line.get_label() == "dino")
        assert dino.get_ydata().tolist() == pytest.approx([43.0, 70.7])
        assert in1k.get_ylabel() == "k-NN top-1 accuracy (%)"
        relative = [ax for ax in figures["knn_relative_levels"].axes if ax.get_visible()]
        assert {ax.get_ylabel() for ax in relative} == {"k-NN top-1 relative to ResNet50 (points)"}
        (linear_ax,) = [ax for ax in figures["top1_levels"].axes if ax.get_visible()]
        assert linear_ax.get_title() == "Linear classification with all training images"
    finally:
        for fig in figures.values():
            plt.close(fig)
    out = tmp_path / "out"
    assert figures_command(["--summary", str(summary_path), "--seed-results", str(seeds_path),
                            "--results-root", str(out), "--baseline", "resnet50"]) == 0
    for path in Layout(str(out)).result_figures(kinds=["knn"]):
        if path.endswith(".png"):
            with Image.open(path) as image:
                assert image.width > 300
        else:
            assert open(path, "rb").read(4) == b"%PDF"


def test_without_knn_no_knn_table_or_figure_is_named_or_written(tmp_path):
    assert result_table_names(["in1k"]) == [*kind_table_names(["in1k"]), "probe_kinds", "pca_top1", "pca_relative"]
    assert result_table_names(["in1k"], kinds=["knn"])[-6:] == [
        "knn_top1_levels", "knn_relative_levels", "knn_top1_in1k", "knn_relative_in1k", "knn_vs_linear",
        "knn_rank_agreement",
    ]
    assert not [name for name in result_figure_names() if name.startswith("knn")]
    layout = Layout(str(tmp_path / "results"))
    assert set(layout.result_targets(DATASETS, kinds=["knn"])) - set(layout.result_targets(DATASETS)) == {
        *layout.result_tables(DATASETS, kinds=["knn"]), *layout.result_figures(kinds=["knn"])
    } - {*layout.result_tables(DATASETS), *layout.result_figures()}
    root = tmp_path / "results"
    write_results(root)
    summary, seeds = tmp_path / "summary.csv", tmp_path / "seeds.csv"
    grid = ["--results-root", str(root), "--models", json.dumps(MODELS), "--datasets", *DATASETS,
            "--shots", *SHOTS, "--seeds", *SEEDS]
    assert aggregate_command([*grid, "--output", str(summary), "--seed-output", str(seeds)]) == 0
    assert tables_command(["--summary", str(summary), "--seed-results", str(seeds),
                           "--results-root", str(root), "--baseline", "resnet50"]) == 0
    written = {path.stem for path in (root / "tables").iterdir()}
    assert written == {*result_table_names(DATASETS)}
