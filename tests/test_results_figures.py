"""Every result figure is drawn from a small summary, labelled, and saved as PNG and PDF; given the
models' exposure classes, every figure that compares models sets apart those pretrained beyond IN-1K."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from PIL import Image
from test_results import DATASETS, MODELS, SEEDS, SHOTS, write_results

from imagenet_cog.core.layout import DROP_NAME, RESULT_FIGURES, Layout
from imagenet_cog.core.plots import APART_STYLE, ModelStyles
from imagenet_cog.models.pretraining import IMAGES, NONE, WEB
from imagenet_cog.results.drop import drop_command, drop_figure
from imagenet_cog.results.exposure import figure_marks
from imagenet_cog.results.figures import build_figures, figures_command, interval, shot_positions
from imagenet_cog.results.summary import load_probe_results, summarise


@pytest.fixture()
def summary(tmp_path):
    root = tmp_path / "results"
    write_results(root)
    runs = load_probe_results(str(root), list(MODELS), DATASETS, SHOTS, SEEDS)
    return summarise(runs, MODELS, DATASETS, SHOTS, SEEDS)


@pytest.fixture()
def figures(summary):
    built = build_figures(summary, "resnet50")
    yield built
    for fig in built.values():
        plt.close(fig)


def visible_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def legend_labels(fig):
    return [text.get_text() for legend in fig.legends for text in legend.get_texts()]


def test_every_figure_is_built(figures):
    assert list(figures) == list(RESULT_FIGURES)


def test_levels_figure_axes(figures):
    (ax,) = visible_axes(figures["top1_levels"])
    assert ax.get_ylabel() == "Top-1 accuracy (%)"
    assert ax.get_xlabel().startswith("Dataset")
    assert [tick.get_text() for tick in ax.get_xticklabels()] == ["IN-1K", "L1"]
    assert legend_labels(figures["top1_levels"]) == ["ResNet50", "DeiT-S†", "dino"]


def test_relative_levels_has_one_panel_per_category(figures):
    axes = visible_axes(figures["relative_levels"])
    assert [ax.get_title() for ax in axes] == ["Architecture", "Self-supervision"]
    assert all(ax.get_ylabel() == "Top-1 relative to ResNet50 (points)" for ax in axes)
    assert "ResNet50 (baseline)" in legend_labels(figures["relative_levels"])
    # the baseline itself is the zero line, not a curve
    assert "ResNet50" not in legend_labels(figures["relative_levels"])


def test_few_shot_panels_per_dataset_with_log2_axis(figures):
    axes = visible_axes(figures["few_shot"])
    assert [ax.get_title() for ax in axes] == ["IN-1K", "L1"]
    for ax in axes:
        assert ax.get_ylabel() == "Top-1 accuracy (%)"
        assert "log$_2$" in ax.get_xlabel()
        assert [tick.get_text() for tick in ax.get_xticklabels()] == ["1", "All"]
    relative_axes = visible_axes(figures["few_shot_relative"])
    assert all(ax.get_ylabel() == "Top-1 relative to ResNet50 (points)" for ax in relative_axes)


def test_error_bars_are_the_95_percent_intervals(figures):
    (ax,) = visible_axes(figures["top1_levels"])
    resnet = next(container for container in ax.containers if container.get_label() == "ResNet50")
    # the bar of IN-1K spans the t interval of 70, 72, 74: 72 -+ 4.303 * 2 / sqrt(3)
    segment = resnet.lines[2][0].get_segments()[0]
    assert [y for _, y in segment] == pytest.approx([72.0 - 4.968, 72.0 + 4.968], abs=1e-3)


def test_relative_bars_come_from_the_paired_differences(summary, tmp_path):
    root = tmp_path / "results"
    seeds = load_probe_results(str(root), list(MODELS), DATASETS, SHOTS, SEEDS)
    built = build_figures(summary, "resnet50", seeds)
    try:
        ax = visible_axes(built["relative_levels"])[1]  # self-supervision: dino
        dino = next(container for container in ax.containers if container.get_label() == "dino")
        segment = dino.lines[2][0].get_segments()[0]
        # per-seed differences 5, 4, 3: 4 -+ 4.303 / sqrt(3)
        assert [y for _, y in segment] == pytest.approx([4.0 - 2.484, 4.0 + 2.484], abs=1e-3)
    finally:
        for fig in built.values():
            plt.close(fig)


def test_few_shot_line_leaves_a_gap_for_a_missing_seed(figures):
    in1k = visible_axes(figures["few_shot"])[0]
    dino = next(line for line in in1k.get_lines() if line.get_label() == "dino")
    y = list(dino.get_ydata())
    assert y[0] != y[0] and y[1] == pytest.approx(76.0)  # NaN at N=1, the mean at All


def test_shot_positions_place_all_after_the_largest_n():
    assert shot_positions(["1", "2", "8", "all"]) == {"1": 0.0, "2": 1.0, "8": 3.0, "all": 4.0}
    assert shot_positions(["all"]) == {"all": 0.0}


def test_command_writes_decodable_png_and_pdf(summary, tmp_path):
    summary_path = tmp_path / "summary.csv"
    summary.to_csv(summary_path, index=False)
    seeds_path = tmp_path / "seeds.csv"
    source = tmp_path / "results"
    load_probe_results(str(source), list(MODELS), DATASETS, SHOTS, SEEDS).to_csv(seeds_path, index=False)
    root = tmp_path / "out"
    assert figures_command(["--summary", str(summary_path), "--seed-results", str(seeds_path),
                            "--results-root", str(root), "--baseline", "resnet50"]) == 0
    layout = Layout(str(root))
    for name in RESULT_FIGURES:
        with Image.open(layout.figure(name, "png")) as image:
            image.load()
            assert image.width > 300 and image.height > 200
        pdf = open(layout.figure(name, "pdf"), "rb").read()
        assert pdf.startswith(b"%PDF") and b"%%EOF" in pdf[-1024:]


def test_summary_without_the_baseline_still_draws(summary):
    built = build_figures(summary[summary["model"] != "resnet50"], "resnet50")
    try:
        assert all(visible_axes(fig) for fig in built.values())
    finally:
        for fig in built.values():
            plt.close(fig)



def test_summary_without_n_all_still_draws(summary):
    built = build_figures(summary[summary["shots"] != "all"], "resnet50")
    try:
        (ax,) = visible_axes(built["top1_levels"])
        assert "no N=all results" in " ".join(text.get_text() for text in ax.texts)
        few_shot_ticks = [tick.get_text() for tick in visible_axes(built["few_shot"])[0].get_xticklabels()]
        assert few_shot_ticks == ["1"]
    finally:
        for fig in built.values():
            plt.close(fig)


def test_pca_figure_draws_top1_against_d_with_all_dimensions_last(tmp_path):
    root = tmp_path / "results"
    write_results(root)
    write_results(root, {("resnet50", "in1k", "all"): [50.0], ("deit_small", "in1k", "all"): [20.0]}, "pca-8", ["22"])
    frames = [summarise(load_probe_results(str(root), list(MODELS), DATASETS, SHOTS, SEEDS), MODELS, DATASETS, SHOTS, SEEDS)]
    runs = load_probe_results(str(root), list(MODELS), DATASETS, ["all"], ["22"], "pca-8")
    frames.append(summarise(runs, MODELS, DATASETS, ["all"], ["22"], "pca-8"))
    built = build_figures(pd.concat(frames, ignore_index=True), "resnet50")
    try:
        axes = visible_axes(built["pca"])
        assert [ax.get_title() for ax in axes] == ["IN-1K", "L1"]
        in1k = {line.get_label(): list(line.get_ydata()) for line in axes[0].get_lines() if not line.get_label().startswith("_")}
        assert in1k["ResNet50"] == [50.0, 72.0]
        assert [tick.get_text() for tick in axes[0].get_xticklabels()] == ["8", "All"]
        relative = visible_axes(built["pca_relative"])[0]
        deit = next(line for line in relative.get_lines() if line.get_label() == "DeiT-S†")
        assert list(deit.get_ydata()) == [-30.0, -42.0]
    finally:
        for fig in built.values():
            plt.close(fig)


def test_interval_bars_stay_within_the_range_of_top1():
    rows = pd.DataFrame({"mean": [50.0, 95.0], "ci95_low": [-20.0, 80.0], "ci95_high": [120.0, 101.0],
                         "relative": [0.0, 5.0], "relative_low": [-150.0, 1.0], "relative_high": [30.0, 9.0]})
    low, high = interval(rows, "mean")
    assert low.tolist() == [0.0, 80.0] and high.tolist() == [100.0, 100.0]
    low, high = interval(rows, "relative")
    assert low.tolist() == [-100.0, 1.0] and high.tolist() == [30.0, 9.0]


EXPOSURES = {"resnet50": NONE, "deit_small": WEB, "dino": IMAGES}
APART = {"DeiT-S† [web]", "dino [images]"}


def model_lines(fig) -> dict:
    """label -> the data line of each model's curve (an error bar's or a plain line) in ``fig``."""
    lines = {}
    for ax in visible_axes(fig):
        lines.update({container.get_label(): container.lines[0] for container in ax.containers})
        lines.update({line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")})
    return lines


def assert_set_apart(fig) -> None:
    """The web and images models drawn dash-dotted with open markers, their class after the name; the
    none model as every model is drawn without the classes; the legend's title says what the mark means."""
    lines = model_lines(fig)
    for label in APART:
        assert (lines[label].get_linestyle(), lines[label].get_markerfacecolor()) == tuple(APART_STYLE.values()), label
    if "ResNet50" in lines:
        assert lines["ResNet50"].get_linestyle() == "-"
        assert lines["ResNet50"].get_markerfacecolor() == lines["ResNet50"].get_color()
    title = fig.legends[0].get_title().get_text()
    assert "Dash-dotted lines and open markers" in title and "not directly comparable" in title
    assert "[web] web data of unknown overlap" in title and "[images] IN-21K images without their labels" in title


def test_the_models_pretrained_beyond_in1k_are_set_apart_in_every_result_figure(summary):
    """Every figure of results-figures, the PCA and k-NN kinds' too (the same drawing), given the classes."""
    built = build_figures(summary, "resnet50", exposures=EXPOSURES)
    try:
        for name in ("top1_levels", "relative_levels", "few_shot", "few_shot_relative"):
            assert_set_apart(built[name])
        assert set(legend_labels(built["top1_levels"])) == {"ResNet50", *APART}
    finally:
        for fig in built.values():
            plt.close(fig)


def test_without_the_classes_or_with_none_models_only_no_model_is_set_apart(summary):
    for exposures in (None, dict.fromkeys(EXPOSURES, NONE)):
        built = build_figures(summary, "resnet50", exposures=exposures)
        try:
            assert legend_labels(built["top1_levels"]) == ["ResNet50", "DeiT-S†", "dino"]
            assert {line.get_linestyle() for line in model_lines(built["few_shot"]).values()} == {"-"}
            assert all(legend.get_title().get_text() == "" for fig in built.values() for legend in fig.legends)
        finally:
            for fig in built.values():
                plt.close(fig)


def test_the_drop_figure_sets_apart_the_models_its_exposures_option_says(summary, tmp_path):
    fig = drop_figure(summary, EXPOSURES)
    try:
        assert_set_apart(fig)
    finally:
        plt.close(fig)
    summary_path = tmp_path / "summary.csv"
    summary.to_csv(summary_path, index=False)
    assert drop_command(["--summary", str(summary_path), "--results-root", str(tmp_path / "out"),
                         "--exposures", json.dumps({"deit_small": WEB})]) == 0
    assert Image.open(Layout(str(tmp_path / "out")).figure(DROP_NAME, "png")).width > 300


def test_a_scatter_and_a_line_without_markers_set_apart_alike(summary):
    styles = ModelStyles(summary, **figure_marks(EXPOSURES, summary["model"]))
    assert styles.points("deit_small")["facecolors"] == "white"
    assert styles.points("deit_small")["edgecolors"] == styles["deit_small"]["color"]
    assert styles.points("resnet50") == {"marker": "o", "label": "ResNet50", "color": styles["resnet50"]["color"]}
    assert styles.line("dino") == {"color": styles["dino"]["color"], "label": "dino [images]", "linestyle": "-."}
    assert "linestyle" not in styles.markers("dino") and styles.markers("dino")["markerfacecolor"] == "white"
    assert styles.legend_title(lines=False).startswith("Open markers, [class] after the name: pretrained beyond IN-1K")
    assert styles.legend_title(lines=False, markers=False).startswith("[class] after the name:")
    # the classes listed are those of the models drawn
    assert "[web]" in styles.legend_title(models=["deit_small"]) and "[images]" not in styles.legend_title(models=["deit_small"])
    assert styles.legend_title(models=["resnet50"]) is None
