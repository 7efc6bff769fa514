"""The series' tables and figure (series/table.py, summary.py, figure.py, results.py) on
synthetic probe result files shaped as the probe jobs write them: the long table equals the
per-checkpoint results it is built from, and the summary's numbers are their direct
recomputation."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from imagenet_cog.core.io import write_json
from imagenet_cog.core.layout import SERIES_STEPS, SERIES_SUMMARY, SERIES_TABLE, Layout
from imagenet_cog.models.series import Series, SeriesCheckpoint, checkpoint_model
from imagenet_cog.results.statistics import holm
from imagenet_cog.series.results import series_results_command
from imagenet_cog.series.table import MissingSeriesResultError

# the k-NN at N = all (every seed the same) beside the linear probe; the one-seed world probes less
KINDS, DATASETS, SHOTS = ["linear", "knn"], ["in1k", "l1", "l5"], ["all"]
ONE_SEED_GRID = {"kinds": ["linear"], "shots": ["all"]}
STEPS = [10, 20, 30, 40]  # 40's checkpoint is 30's, copied
# mean top-1 per dataset and step: IN-1K keeps rising, L5 peaks at step 20
MEANS = {"in1k": [50.0, 60.0, 66.0], "l1": [40.0, 47.0, 50.0], "l5": [20.0, 26.0, 21.0]}
RANKS = {10: 30.0, 20: 55.0, 30: 48.0}


def one_series(seeds=("0", "1", "2")) -> tuple[Series, list[str]]:
    checkpoints = tuple(
        SeriesCheckpoint(step=step, model=checkpoint_model("run", step), path=f"runs/checkpoint_{step}.pth",
                         same_as=checkpoint_model("run", 30) if step == 40 else None)
        for step in STEPS
    )
    return Series("run", "epoch", checkpoints), list(seeds)


def probe_result(model, dataset, shots, seed, kind, top1) -> dict:
    """A probe result JSON's fields (probes/search.py and probes/knn_probe.py document them all)."""
    return {
        "model": model, "dataset": dataset, "probe": kind, "shots": shots if shots == "all" else int(shots),
        "seed": int(seed), "best_params": {"lr": 0.1, "weight_decay": 1e-5}, "val_top1": top1 + 1.0,
        "test_top1": top1, "test_top5": min(100.0, top1 + 20.0), "n_train": 500, "n_test": 100, "n_classes": 10,
        "feature_dim": 64, "random_weights": False, "timings": {"search_s": 1.0, "final_s": 0.5, "total_s": 1.5},
        "seeds_together": [int(seed)],
    }


def write_world(root, seeds, kinds=KINDS, shots_list=SHOTS):
    """Each evaluated checkpoint's probe results and RankMe, and a concept curve table."""
    layout, rng = Layout(str(root)), np.random.default_rng(0)
    series, seeds = one_series(seeds)
    for index, checkpoint in enumerate(series.evaluated()):
        write_json(layout.effective_rank(checkpoint.model), {"model": checkpoint.model, "effective_rank": RANKS[checkpoint.step]})
        for kind in kinds:
            for dataset in DATASETS:
                for shots in shots_list:
                    for seed in seeds:
                        # the k-NN at N = all draws nothing: every seed the same
                        noise = 0.0 if (kind, shots) == ("knn", "all") else rng.normal(0, 0.5)
                        top1 = MEANS[dataset][index] - (5.0 if kind == "knn" else 0.0) - (10.0 if shots != "all" else 0.0)
                        write_json(layout.probe_result(checkpoint.model, dataset, shots, seed, kind),
                                   probe_result(checkpoint.model, dataset, shots, seed, kind, top1 + noise))
    write_concepts(layout, series)
    return layout, series, seeds


# the per-concept curve: CONCEPTS concepts a level at similarities spread over each level's span,
# each checkpoint's accuracy rising with similarity by its own slope (more with training)
CONCEPTS, TESTED = 8, 20
SPANS = {"l1": (0.7, 0.9), "l5": (0.2, 0.4)}


def concept_similarities() -> dict[tuple[str, str], float]:
    return {(level, f"n{index + (100 if level == 'l5' else 0):08d}"): float(low + (high - low) * index / (CONCEPTS - 1))
            for level, (low, high) in SPANS.items() for index in range(CONCEPTS)}


def write_concepts(layout, series):
    """analyses-concepts' seed table of each evaluated checkpoint (one seed) and Lin's ranking."""
    concepts = concept_similarities()
    ranking = Path(layout.ranking())
    ranking.parent.mkdir(parents=True, exist_ok=True)
    ranking.write_text("rank\twnid\tname\tsim_in1k\tnearest_in1k_wnid\tnearest_in1k_name\tlevel\n" + "".join(
        f"{rank}\t{wnid}\tconcept {wnid}\t{similarity}\tn09999999\tseen\t{level}\n"
        for rank, ((level, wnid), similarity) in enumerate(sorted(concepts.items(), key=lambda item: -item[1]), 1)))
    for position, checkpoint in enumerate(series.evaluated()):
        rows = [{"model": checkpoint.model, "dataset": level, "seed": "0", "wnid": wnid, "n_test": TESTED,
                 "top1_correct": correct(position, similarity), "top5_correct": TESTED, "confused_wnid": "",
                 "confused_count": 0}
                for (level, wnid), similarity in concepts.items()]
        path = Path(layout.concept_accuracy(checkpoint.model))
        path.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(path, sep="\t", index=False)


def correct(position: int, similarity: float) -> int:
    return int(round(TESTED * min(1.0, 0.1 + (0.3 + 0.2 * position) * similarity)))


def expected_slope(position: int) -> float:
    """The least-squares slope of a checkpoint's curve, in top-1 points per 0.1 similarity."""
    concepts = concept_similarities()
    x = np.array(list(concepts.values()))
    y = np.array([100.0 * correct(position, similarity) / TESTED for similarity in concepts.values()])
    return float(np.polyfit(x, y, 1)[0]) * 0.1


def series_json(series, kinds, shots, seeds):
    # as the rule writes it: no checkpoint's path; the N and seeds each kind ran
    checkpoints = [{key: value for key, value in dataclasses.asdict(checkpoint).items() if key != "path"}
                   for checkpoint in series.checkpoints]
    grid = {kind: {"shots": list(shots), "seeds": list(seeds)} for kind in kinds}
    return json.dumps({series.name: {"step_unit": series.step_unit, "checkpoints": checkpoints, "grid": grid}})


def run_command(layout, series, seeds, *extra, kinds=KINDS, shots=SHOTS):
    return series_results_command(["--results-root", layout.root, "--series", series_json(series, kinds, shots, seeds),
                                   "--datasets", *DATASETS, *extra])


def curve_options(layout, series):
    return ["--concept-tables", *(layout.concept_accuracy(checkpoint.model) for checkpoint in series.evaluated()),
            "--ranking", layout.ranking(), "--levels", *SPANS, "--resamples", "200"]


@pytest.fixture(scope="module")
def three_seeds(tmp_path_factory):
    root = tmp_path_factory.mktemp("series")
    layout, series, seeds = write_world(root, ("0", "1", "2"))
    assert run_command(layout, series, seeds, *curve_options(layout, series)) == 0
    return layout, {name: read_table(layout, name) for name in (SERIES_TABLE, SERIES_STEPS, SERIES_SUMMARY)}


def read_table(layout, name):
    """A CSV as written, its text columns' empty cells empty strings."""
    text = ("same_as", "note", "rankme_note", "final_below_best")
    table = pd.read_csv(layout.table(name, "csv"), dtype={"shots": str, "seed": str, **dict.fromkeys(text, str)})
    return table.fillna({column: "" for column in text if column in table})


def test_the_series_table_equals_the_checkpoints_result_files(three_seeds):
    layout, read = three_seeds
    table = read[SERIES_TABLE]
    assert len(table) == len(STEPS) * len(KINDS) * len(DATASETS) * len(SHOTS) * 3
    assert list(table.drop_duplicates("step")["step"]) == STEPS
    for row in table.itertuples():
        source = row.same_as or row.model
        result = json.loads(open(layout.probe_result(source, row.dataset, row.shots, row.seed, row.probe)).read())
        assert (row.test_top1, row.test_top5) == (result["test_top1"], result["test_top5"])
        assert row.model == checkpoint_model("run", row.step) and row.step_unit == "epoch"
        assert row.effective_rank == RANKS[30 if row.step == 40 else row.step]
    assert set(table[table["step"] == 40]["same_as"]) == {"run@30"} and set(table[table["step"] != 40]["same_as"]) == {""}


def test_each_step_holds_the_mean_interval_gap_and_slope(three_seeds):
    _, read = three_seeds
    table, steps = read[SERIES_TABLE], read[SERIES_STEPS]
    cell = table[(table["probe"] == "linear") & (table["shots"] == "all") & (table["step"] == 20)]
    l5, in1k = cell[cell["dataset"] == "l5"]["test_top1"], cell[cell["dataset"] == "in1k"]["test_top1"]
    row = steps[(steps["probe"] == "linear") & (steps["shots"] == "all") & (steps["step"] == 20)
                & (steps["dataset"] == "l5")].iloc[0]
    low, high = stats.t.interval(0.95, 2, loc=l5.mean(), scale=stats.sem(l5))
    assert (row["top1_mean"], row["top1_ci95_low"], row["top1_ci95_high"]) == pytest.approx((l5.mean(), low, high))
    assert row["gap_in1k"] == pytest.approx(l5.mean() - in1k.mean())
    assert row["concept_slope"] == pytest.approx(expected_slope(1)) and row["effective_rank"] == RANKS[20]
    assert row["concept_slope_ci95_low"] <= row["concept_slope"] <= row["concept_slope_ci95_high"]
    # the curve is the linear N = all classifiers': no slope on other rows; a copied step has its stand-in's
    assert steps[steps["probe"] != "linear"]["concept_slope"].isna().all()
    final = steps[(steps["probe"] == "linear") & (steps["shots"] == "all") & (steps["step"] == 40)]
    assert list(final["concept_slope"]) == pytest.approx([expected_slope(2)] * len(final))


def test_the_summary_finds_the_best_step_and_tests_the_final_one_against_it(three_seeds):
    _, read = three_seeds
    table, summary = read[SERIES_TABLE], read[SERIES_SUMMARY]
    p_values = []
    for row in summary.itertuples():
        cell = table[(table["probe"] == row.probe) & (table["shots"] == row.shots) & (table["dataset"] == row.dataset)]
        means = cell.groupby("step")["test_top1"].mean()
        assert row.best_step == means.idxmax() and row.final_step == 40 and row.n_steps == 3
        assert row.best_selected_on.startswith("test top-1 (descriptive")
        best, final = (cell[cell["step"] == step].set_index("seed")["test_top1"] for step in (row.best_step, 40))
        assert row.final_minus_best == pytest.approx((final - best).mean())
        if row.best_step == 30:
            assert row.note == "the final checkpoint is the best" and row.final_below_best == ""
        elif (row.probe, row.shots) == ("knn", "all"):
            assert row.note.startswith("not testable: equal differences")
        else:
            test = stats.ttest_rel(final, best, alternative="less")
            assert row.p_value == pytest.approx(test.pvalue) and row.t == pytest.approx(test.statistic)
            p_values.append((row.Index, test.pvalue))
        distinct = cell[cell["step"] != 40].groupby("step")["test_top1"].mean()
        rho = stats.spearmanr([RANKS[step] for step in distinct.index], distinct.to_numpy()).statistic
        assert row.rankme_spearman == pytest.approx(rho) and row.rankme_steps == 3
        # the exact permutation p-value of three checkpoints: the share of the 6 orders at least as correlated
        orders = [stats.spearmanr([RANKS[step] for step in distinct.index], order).statistic
                  for order in itertools.permutations(distinct.to_numpy())]
        assert row.rankme_p_value == pytest.approx(np.mean(np.abs(orders) >= abs(rho) - 1e-12))
    assert p_values, "no tested row"
    adjusted = holm([p for _, p in p_values])
    for (index, _), p_holm in zip(p_values, adjusted):
        assert summary.loc[index, "p_holm"] == pytest.approx(p_holm)
        assert summary.loc[index, "final_below_best"] == ("yes" if p_holm < 0.05 else "no")
    l5 = summary[(summary["probe"] == "linear") & (summary["shots"] == "all") & (summary["dataset"] == "l5")].iloc[0]
    assert l5["best_step"] == 20 and l5["final_below_best"] == "yes"


def test_the_figure_and_markdown_are_written(three_seeds):
    layout, _ = three_seeds
    for extension in ("png", "pdf"):
        assert (layout.root and open(layout.figure("series", extension), "rb").read(4))
    text = open(layout.table(SERIES_SUMMARY, "md")).read()
    assert "chosen on the test images" in text and "| run | linear | all | l5 |" in text


def test_one_seed_is_not_testable_and_a_missing_result_is_named(tmp_path):
    layout, series, seeds = write_world(tmp_path, ("0",), ONE_SEED_GRID["kinds"], ONE_SEED_GRID["shots"])
    assert run_command(layout, series, seeds, "--no-effective-rank", **ONE_SEED_GRID) == 0
    assert read_table(layout, SERIES_STEPS)["concept_slope"].isna().all()
    summary = read_table(layout, SERIES_SUMMARY)
    assert set(summary[summary["best_step"] != 30]["note"]) == {"not testable: one seed"}
    assert set(summary["rankme_note"]) == {"fewer than 3 checkpoints with RankMe"}
    missing = layout.probe_result("run@20", "l5", "all", "0")
    os.remove(missing)
    with pytest.raises(MissingSeriesResultError, match=f"{missing}: not found"):
        run_command(layout, series, seeds, **ONE_SEED_GRID)
