"""The transcribed published numbers and the comparison of ours with them."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from imagenet_cog.core.layout import FIGURE_FORMATS, PUBLISHED_FIGURE, TABLE_FORMATS, Layout, published_table_names
from imagenet_cog.results.paper import published_model_names, resolve_paper_names
from imagenet_cog.results.published import compare, difference_test, read_published, write_comparison

PUBLISHED = Path(__file__).resolve().parent.parent / "resources" / "published_top1.tsv"
PAPER_DATASETS = ["in1k", "l1", "l2", "l3", "l4", "l5"]
PAPER_SHOTS = ["1", "2", "4", "8", "16", "32", "64", "128", "all"]
T_975 = {4: 2.776445, 8: 2.306004}


@pytest.fixture(scope="module")
def published():
    return read_published(PUBLISHED)


def published_cell(published, model, dataset, shots):
    row = published[(published["model"] == model) & (published["dataset"] == dataset) & (published["shots"] == shots)]
    assert len(row) == 1
    return float(row["mean"].iloc[0]), float(row["std"].iloc[0])


def test_every_cell_of_tables_5_to_10(published):
    assert len(published) == 31 * 6 * 9
    assert published["model"].nunique() == 31
    assert (published.groupby("model").size() == 54).all()
    assert set(published["dataset"]) == set(PAPER_DATASETS)
    assert set(published["shots"]) == set(PAPER_SHOTS)
    assert published["mean"].between(0, 100).all() and published["std"].between(0, 1).all()
    assert open(PUBLISHED).readline().startswith("# Published top-1")


@pytest.mark.parametrize("model, dataset, shots, mean, std", [
    ("ResNet50", "in1k", "all", 75.8, 0.0),   # Table 5
    ("ResNet50", "in1k", "1", 45.0, 0.7),
    ("ResNet50", "l5", "all", 52.0, 0.0),     # Table 10
    ("ResNet50", "l1", "128", 61.9, 0.1),     # Table 6
    ("s-DINO", "l3", "all", 63.2, 0.0),       # Table 8
    ("a-T2T-ViT-14", "l4", "1", 17.8, 0.3),   # Table 9 prints "T2T-ViTt-14"
    ("d-Semi-Weakly-Sup.", "l1", "8", 54.4, 0.1),
    ("r-MEAL-v2", "l5", "all", 52.2, 0.0),
    ("r-AdvRobust", "in1k", "1", 42.6, 0.7),
])
def test_cells_against_the_paper_text(published, model, dataset, shots, mean, std):
    assert published_cell(published, model, dataset, shots) == (mean, std)


def test_paper_names_with_or_without_the_category_prefix(published):
    models = {"sup": {"paper_name": "ResNet50"}, "dino": {"paper_name": "DINO"},
              "mix": {"paper_name": "r-mixup"}, "mine": {"arch": "resnet50"}}
    assert resolve_paper_names(models, published_model_names(PUBLISHED)) == {"sup": "ResNet50", "dino": "s-DINO", "mix": "r-Mixup"}
    with pytest.raises(ValueError, match="'ResNet-51'.*use one of ResNet50, a-ResNet-152"):
        resolve_paper_names({"typo": {"paper_name": "ResNet-51"}}, published_model_names(PUBLISHED))


def test_one_seed_is_tested_against_the_papers_prediction_interval():
    # at the 95% prediction interval's edge of one more seed (t with 4 df), p = 0.05
    published_sample_std = 0.5 * math.sqrt(5 / 4)
    edge = T_975[4] * published_sample_std * math.sqrt(1 + 1 / 5)
    t, df, p = difference_test(edge, 1, math.nan, 0.5)
    assert (t, df) == pytest.approx((T_975[4], 4.0), abs=1e-5)
    assert p == pytest.approx(0.05, abs=1e-5)


def test_seeds_are_compared_with_welchs_test():
    # five seeds each, equal stds: Welch is Student's t with 8 df
    sample_std = 0.4 * math.sqrt(5 / 4)
    edge = T_975[8] * sample_std * math.sqrt(2 / 5)
    t, df, p = difference_test(edge, 5, 0.4, 0.4)
    assert df == pytest.approx(8.0)
    assert p == pytest.approx(0.05, abs=1e-5)
    # a printed std of 0.0 is taken as 0.05, so equal means never differ
    assert difference_test(0.0, 3, 0.0, 0.0)[2] == pytest.approx(1.0)


def summary_like_the_paper(published, shifted: dict[tuple[str, str], float]) -> pd.DataFrame:
    rows = []
    for model, paper_name in (("sup", "ResNet50"), ("dino", "s-DINO"), ("mine", None)):
        for dataset in ("in1k", "l5"):
            for shots in ("1", "all"):
                mean, std = published_cell(published, paper_name or "ResNet50", dataset, shots)
                rows.append({"model": model, "label": model.upper(), "dataset": dataset, "shots": shots,
                             "mean": mean + shifted.get((model, dataset), 0.0), "std": std, "n_seeds": 3,
                             "expected_seeds": 3, "complete": True, "random_weights": model == "dino"})
    return pd.DataFrame(rows)


MODELS = {"sup": {"paper_name": "ResNet50"}, "dino": {"paper_name": "DINO"}, "mine": {}}


def test_only_the_planted_difference_is_marked(published):
    summary = summary_like_the_paper(published, {("dino", "l5"): -8.0})
    comparison = compare(summary, published, resolve_paper_names(MODELS, published_model_names(PUBLISHED)))
    assert set(comparison["model"]) == {"sup", "dino"}  # no paper_name, no comparison
    assert len(comparison) == 8
    marked = comparison[comparison["differs"]]
    assert sorted(zip(marked["model"], marked["dataset"])) == [("dino", "l5"), ("dino", "l5")]
    assert marked["diff"].to_numpy() == pytest.approx([-8.0, -8.0])
    assert comparison.loc[~comparison["differs"], "diff"].abs().max() < 1e-9


def test_outputs_say_so_without_a_mapped_model(published, tmp_path):
    summary = summary_like_the_paper(published, {})
    layout = Layout(str(tmp_path))
    comparison = write_comparison(summary, published, {"mine": {}}, layout)
    assert comparison.empty
    for name in published_table_names(["in1k", "l5"]):
        for extension in TABLE_FORMATS:
            assert Path(layout.table(name, extension)).stat().st_size > 0
    for extension in FIGURE_FORMATS:
        assert Path(layout.figure(PUBLISHED_FIGURE, extension)).stat().st_size > 0
    assert "No configured model has a paper_name" in open(layout.table("published_l5", "md")).read()


def test_tables_per_dataset_show_ours_minus_published(published, tmp_path):
    summary = summary_like_the_paper(published, {("sup", "in1k"): 1.0})
    layout = Layout(str(tmp_path))
    write_comparison(summary, published, MODELS, layout)
    table = pd.read_csv(layout.table("published_in1k", "csv")).set_index("Model")
    assert table.loc["SUP (ResNet50)", "All"] == "+1.0 (76.8 vs 75.8)*"
    assert table.loc["DINO† (s-DINO)", "N=1"] == "+0.0 (23.6 vs 23.6)"
    assert "† randomly initialised weights" in open(layout.table("published_in1k", "md")).read()
    assert r"$^{*}$" in open(layout.table("published_in1k", "tex")).read()


def test_an_unknown_paper_name_stops_the_workflow_before_any_job(tmp_path):
    from conftest import copy_workflow, refused_overlay

    workdir = copy_workflow(tmp_path / "workflow-copy")
    output = refused_overlay(workdir, {"models": {"demo_cnn": {"paper_name": "ResNet-50x"}}})
    assert "paper_name not in resources/published_top1.tsv: demo_cnn: 'ResNet-50x'" in output


def test_figure_has_one_point_per_compared_cell_and_the_diagonal(published):
    import matplotlib.pyplot as plt

    from imagenet_cog.core.plots import ModelStyles
    from imagenet_cog.results.published import comparison_figure

    summary = summary_like_the_paper(published, {("sup", "l5"): 5.0})
    comparison = compare(summary, published, resolve_paper_names(MODELS, published_model_names(PUBLISHED)))
    fig = comparison_figure(comparison, ModelStyles(summary))
    try:
        (ax,) = fig.axes
        points = [point for container in ax.containers for point in zip(*container.lines[0].get_data())]
        assert sorted(points) == sorted(zip(comparison["published_mean"], comparison["mean"]))
        diagonal = ax.get_lines()[-1]
        assert list(diagonal.get_xdata()) == list(diagonal.get_ydata())
        assert ax.get_xlabel().startswith("Published top-1")
    finally:
        plt.close(fig)


def test_every_model_of_the_paper_config_has_its_published_row():
    import yaml

    from imagenet_cog.models.registry import kept_models

    repository = Path(__file__).resolve().parents[1]
    models = kept_models(yaml.safe_load((repository / "config" / "paper_models.yaml").read_text())["models"])
    names = published_model_names(repository / "resources" / "published_top1.tsv")
    rows = resolve_paper_names(models, names)
    assert len(models) == 31 and sorted(rows.values()) == sorted(names)
