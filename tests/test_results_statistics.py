"""Intervals, paired tests with Holm's correction, rank agreement and the generalization drop,
against values computed by hand or read from t tables."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from test_results import DATASETS, MODELS, SEEDS, SHOTS, write_results

from imagenet_cog.core.layout import DROP_NAME, FIGURE_FORMATS, STATISTICS_TABLES, TABLE_FORMATS, Layout
from imagenet_cog.results.drop import drop_command, drop_table
from imagenet_cog.results.statistics import (
    DIFFERENCE_RANGE,
    TOP1_RANGE,
    generalization_drop,
    holm,
    mean_interval,
    mean_intervals,
    paired_tests,
    rank_agreement,
)
from imagenet_cog.results.summary import aggregate_command, summarise
from imagenet_cog.results.tables import statistics_command

# two-sided 95% quantiles of Student's t, from printed tables
T_975 = {2: 4.302653, 4: 2.776445}


def test_interval_of_a_mean_matches_the_t_table():
    low, high = mean_interval([1.0, 2.0, 3.0, 4.0, 5.0], (-100.0, 100.0))
    half = T_975[4] * math.sqrt(2.5) / math.sqrt(5)
    assert (low, high) == pytest.approx((3.0 - half, 3.0 + half), abs=1e-5)
    low, high = mean_interval([70.0, 72.0, 74.0], TOP1_RANGE)
    assert (low, high) == pytest.approx((72.0 - T_975[2] * 2 / math.sqrt(3), 72.0 + T_975[2] * 2 / math.sqrt(3)), abs=1e-5)


def test_interval_needs_two_seeds_and_is_a_point_without_variance():
    assert all(math.isnan(end) for end in mean_interval([50.0], TOP1_RANGE))
    assert mean_interval([40.0, 40.0, 40.0], TOP1_RANGE) == (40.0, 40.0)


def test_interval_of_a_top1_stays_within_0_and_100():
    # the demo's IN-1K: mean 99.67, t interval [98.2, 101.1] -> its upper end cut at 100
    values = [100.0, 99.0, 100.0]
    half = T_975[2] * float(np.std(values, ddof=1)) / math.sqrt(3)
    assert 100.0 < 99.0 + 2 / 3 + half  # the uncut interval would leave [0, 100]
    assert mean_interval(values, TOP1_RANGE) == pytest.approx((99.0 + 2 / 3 - half, 100.0))
    assert mean_interval([0.0, 1.0, 0.0], TOP1_RANGE)[0] == 0.0
    # a difference of two top-1s stays within [-100, 100]
    assert mean_interval([-100.0, -99.0, -100.0], DIFFERENCE_RANGE)[0] == -100.0


def test_holm_matches_a_hand_computed_example():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> monotone 0.06
    adjusted = holm([0.01, 0.04, math.nan, 0.03, 0.005])
    assert adjusted[[0, 1, 3, 4]] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert math.isnan(adjusted[2])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


# baseline per seed; models derived from it
BASE = {"in1k": [70.0, 71.5, 69.0, 72.0, 70.5], "l1": [50.0, 52.0, 49.5, 51.0, 50.5]}
SEEDS5 = ["0", "1", "2", "3", "4"]


def seed_frame(offsets: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for model, offset in offsets.items():
        for dataset, values in BASE.items():
            for shots in ("1", "all"):
                for seed, value, delta in zip(SEEDS5, values, offset):
                    rows.append({"model": model, "probe": "linear", "dataset": dataset, "shots": shots, "seed": seed,
                                 "test_top1": value + delta, "test_top5": 99.0, "random_weights": False})
    return pd.DataFrame(rows)


def paired_against_base(offsets: dict[str, list[float]]) -> pd.DataFrame:
    seeds = seed_frame(offsets)
    models = {model: {"label": model, "category": "other", "weights": "pretrained"} for model in offsets}
    summary = summarise(seeds, models, list(BASE), ["1", "all"], SEEDS5)
    return paired_tests(seeds, summary, "base")


def test_a_model_planted_far_above_the_noise_is_marked():
    tests = paired_against_base({
        "base": [0.0] * 5,
        "better": [10.0, 10.3, 9.8, 10.1, 9.9],
        "equal": [0.2, -0.2, 0.1, -0.1, 0.0],
    })
    better = tests[tests["model"] == "better"]
    assert better["significant"].all()
    assert better["mean_diff"].to_numpy() == pytest.approx([10.02] * 4)
    assert not tests.loc[tests["model"] == "equal", "significant"].any()
    assert tests.loc[tests["model"] == "equal", "p_value"].to_numpy() == pytest.approx([1.0] * 4)
    # 8 tests in one family: Holm multiplies the smallest p-value by 8
    assert tests["p_holm"].min() == pytest.approx(8 * tests["p_value"].min())


def test_identical_models_mark_nothing():
    tests = paired_against_base({"base": [0.0] * 5, "twin": [0.0] * 5, "other_twin": [0.0] * 5})
    assert not tests["significant"].any()
    assert tests["p_value"].isna().all()
    assert (tests["note"].str.contains("zero variance")).all()


def test_the_same_test_images_more_on_every_seed_is_no_test_even_when_rounding_differs():
    """A model 3 test images (of 192) above the baseline on every seed: the differences of the
    percentages differ only in their last bits, which gave t ~ 1e12 and a mark."""
    base = [100 * 100 / 192, 100 * 121 / 192, 100 * 122 / 192]
    better = [100 * 103 / 192, 100 * 124 / 192, 100 * 125 / 192]
    differences = np.subtract(better, base)
    assert len(set(differences.tolist())) > 1  # the float differences are not all equal
    seeds = pd.DataFrame({
        "model": ["base"] * 3 + ["m"] * 3, "probe": ["linear"] * 6, "dataset": ["in1k"] * 6, "shots": ["all"] * 6,
        "seed": ["0", "1", "2"] * 2, "test_top1": base + better, "test_top5": [90.0] * 6, "random_weights": [False] * 6,
    })
    summary = summarise(seeds, {"base": {}, "m": {}}, ["in1k"], ["all"], ["0", "1", "2"])
    (row,) = paired_tests(seeds, summary, "base").to_dict("records")
    assert math.isnan(row["p_value"]) and not row["significant"]
    assert "zero variance" in row["note"]
    assert row["mean_diff"] == pytest.approx(100 * 3 / 192)
    assert row["ci95_low"] == row["ci95_high"] == pytest.approx(100 * 3 / 192)
    # a real difference of one test image on one seed is tested
    one_more = seeds.assign(test_top1=base + [better[0] + 100 / 192, *better[1:]])
    (row,) = paired_tests(one_more, summarise(one_more, {"base": {}, "m": {}}, ["in1k"], ["all"], ["0", "1", "2"]),
                          "base").to_dict("records")
    assert math.isfinite(row["t"]) and 0 < row["p_value"] < 1


def test_paired_t_test_matches_the_closed_form_for_two_degrees_of_freedom():
    seeds = pd.DataFrame({
        "model": ["base"] * 3 + ["m"] * 3, "probe": ["linear"] * 6, "dataset": ["in1k"] * 6, "shots": ["all"] * 6,
        "seed": ["0", "1", "2"] * 2, "test_top1": [50.0, 50.0, 50.0, 51.0, 52.0, 53.0],
        "test_top5": [90.0] * 6, "random_weights": [False] * 6,
    })
    models = {"base": {}, "m": {}}
    summary = summarise(seeds, models, ["in1k"], ["all"], ["0", "1", "2"])
    (row,) = paired_tests(seeds, summary, "base").to_dict("records")
    t = 2.0 / (1.0 / math.sqrt(3))
    assert row["t"] == pytest.approx(t)
    assert row["p_value"] == pytest.approx(1 - t / math.sqrt(2 + t * t))  # Student t, 2 df
    assert (row["ci95_low"], row["ci95_high"]) == pytest.approx((2 - T_975[2] / math.sqrt(3), 2 + T_975[2] / math.sqrt(3)), abs=1e-5)


def test_one_seed_gives_no_test():
    seeds = seed_frame({"base": [0.0] * 5, "m": [5.0] * 5})
    seeds = seeds[seeds["seed"] == "0"]
    summary = summarise(seeds, {"base": {}, "m": {}}, list(BASE), ["1", "all"], ["0"])
    tests = paired_tests(seeds, summary, "base")
    assert tests["p_value"].isna().all() and not tests["significant"].any()
    assert (tests["note"] == "fewer than 2 seeds: no test").all()


def test_kendall_tau_of_rankings_matches_the_exact_distribution():
    means = {"a": (80.0, 60.0), "b": (75.0, 58.0), "c": (70.0, 50.0), "d": (65.0, 52.0)}
    summary = pd.DataFrame([
        {"model": model, "label": model, "dataset": dataset, "shots": "all", "mean": value, "complete": True}
        for model, values in means.items() for dataset, value in zip(("in1k", "l1"), values)
    ])
    (row,) = rank_agreement(summary).to_dict("records")
    # one discordant pair of six: tau = (5 - 1) / 6; 4 of the 24 orders have at most one
    # inversion, so the two-sided exact p-value is 8 / 24
    assert row["kendall_tau"] == pytest.approx(4 / 6)
    assert row["p_value"] == pytest.approx(8 / 24)
    assert row["n_models"] == 4


def test_drop_in_points_and_percent_of_the_in1k_top1():
    summary = pd.DataFrame([
        {"model": "m", "label": "M", "dataset": "in1k", "shots": "all", "mean": 80.0, "complete": True},
        {"model": "m", "label": "M", "dataset": "l5", "shots": "all", "mean": 56.0, "complete": True},
    ])
    (row,) = generalization_drop(summary).to_dict("records")
    assert (row["drop_points"], row["drop_percent"]) == pytest.approx((24.0, 30.0))
    table, shots = drop_table(summary)
    assert shots == "all"
    assert table.to_dict("records") == [
        {"Model": "M", "IN-1K top-1": 80.0, "L5 drop (points)": 24.0, "L5 drop (%)": 30.0}
    ]
    table, _ = drop_table(summary, {"m": "web"})
    assert list(table.columns[:2]) == ["Model", "Exposure"] and table["Exposure"].tolist() == ["web"]


def test_statistics_and_drop_commands_write_every_table_and_figure(tmp_path):
    root = tmp_path / "results"
    write_results(root)
    grid = ["--results-root", str(root), "--models", json.dumps(MODELS),
            "--datasets", *DATASETS, "--shots", *SHOTS, "--seeds", *SEEDS]
    summary, seeds = tmp_path / "summary.csv", tmp_path / "seeds.csv"
    assert aggregate_command([*grid, "--output", str(summary), "--seed-output", str(seeds)]) == 0
    assert statistics_command(["--summary", str(summary), "--seed-results", str(seeds),
                               "--results-root", str(root), "--baseline", "resnet50"]) == 0
    assert drop_command(["--summary", str(summary), "--results-root", str(root)]) == 0
    layout = Layout(str(root))
    for name in STATISTICS_TABLES:
        for extension in TABLE_FORMATS:
            assert (root / "tables" / f"{name}.{extension}").stat().st_size > 0
    for extension in FIGURE_FORMATS:
        assert (root / "figures" / f"{DROP_NAME}.{extension}").stat().st_size > 0
    tests = pd.read_csv(layout.table("paired_tests", "csv"), dtype={"shots": str}).set_index(["model", "dataset", "shots"])
    assert tests.loc[("dino", "in1k", "all"), "mean_diff"] == pytest.approx(4.0)
    assert bool(tests.loc[("dino", "in1k", "all"), "significant"])
    assert "Holm" in open(layout.table("paired_tests", "md")).read()
    assert "exposure" not in tests.columns
    # the paired tests compare models: given their classes, each row says its model's (undeclared where
    # the option says nothing); rank agreement ranks every model together and has no model's row
    assert statistics_command(["--summary", str(summary), "--seed-results", str(seeds), "--results-root", str(root),
                               "--baseline", "resnet50", "--exposures", json.dumps({"dino": "images"})]) == 0
    tests = pd.read_csv(layout.table("paired_tests", "csv"))
    assert list(tests.columns[:3]) == ["model", "label", "exposure"]
    assert dict(zip(tests["model"], tests["exposure"])) == {"deit_small": "undeclared", "dino": "images"}
    markdown = open(layout.table("paired_tests", "md")).read()
    assert "images: IN-21K images without their labels" in markdown and "not directly comparable" in markdown
    assert "exposure" not in pd.read_csv(layout.table("rank_agreement", "csv")).columns
    drop = pd.read_csv(layout.table(DROP_NAME, "csv")).set_index("Model")
    assert drop.loc["ResNet50", "L1 drop (points)"] == pytest.approx(11.0)
    assert drop.loc["ResNet50", "L1 drop (%)"] == pytest.approx(100 * 11 / 72)
    assert np.isnan(drop.loc["dino", "L1 drop (%)"])


def test_mean_intervals_are_mean_interval_row_by_row():
    """Rows of 1 to 4 values (NaN: missing), equal values, values near the bounds."""
    rng = np.random.default_rng(5)
    rows = np.round(rng.uniform(0, 100, size=(60, 4)), 1)
    rows[rng.random(rows.shape) < 0.3] = np.nan
    rows[0], rows[1], rows[2] = [40.0, 40.0, np.nan, 40.0], [99.0, 100.0, 100.0, np.nan], [np.nan, 7.0, np.nan, np.nan]
    low, high = mean_intervals(rows, TOP1_RANGE)
    for row, got_low, got_high in zip(rows, low, high):
        want = mean_interval(row[~np.isnan(row)], TOP1_RANGE)
        assert np.allclose([got_low, got_high], want, equal_nan=True, rtol=0, atol=1e-9), row
