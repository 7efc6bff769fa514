"""Aggregation of hand-written probe results into the summary and the paper's tables."""

from __future__ import annotations

import json
import math
from pathlib import Path

import h5py
import pandas as pd
import pytest
import yaml

from conftest import copy_of_demo, other_kind_probes_per_dataset, read_run_config, snakemake, stage_model_names
from imagenet_cog.core.layout import Layout, result_table_names
from imagenet_cog.models.pretraining import IMAGES, NONE, UNDECLARED, WEB
from imagenet_cog.probes.kinds import KINDS
from imagenet_cog.results.summary import aggregate_command, lin_rows, load_probe_results, read_summary, summarise
from imagenet_cog.results.tables import tables_command
from imagenet_cog.results.timings import benchmark_seconds, timings_command

MODELS = {
    "resnet50": {"arch": "resnet50", "weights": "pretrained", "category": "baseline", "label": "ResNet50"},
    "deit_small": {"arch": "deit_small", "weights": "random", "category": "architecture", "label": "DeiT-S"},
    "dino": {"arch": "resnet50", "weights": "dino.pth", "category": "self-supervision", "label": None},
}
DATASETS = ["in1k", "l1"]
SHOTS = ["1", "all"]
SEEDS = ["22", "37", "45"]

# (model, dataset, shots) -> top-1 per seed; None marks a run whose file is absent.
TOP1 = {
    ("resnet50", "in1k", "1"): [40.0, 42.0, 44.0],
    ("resnet50", "in1k", "all"): [70.0, 72.0, 74.0],
    ("resnet50", "l1", "1"): [20.0, 20.0, 20.0],
    ("resnet50", "l1", "all"): [60.0, 61.0, 62.0],
    ("deit_small", "in1k", "1"): [10.0, 11.0, 12.0],
    ("deit_small", "in1k", "all"): [30.0, 30.0, 30.0],
    ("deit_small", "l1", "1"): [5.0, 5.0, 5.0],
    ("deit_small", "l1", "all"): [25.0, 26.0, 27.0],
    ("dino", "in1k", "1"): [50.0, None, 54.0],
    ("dino", "in1k", "all"): [75.0, 76.0, 77.0],
    # dino has no result on l1 at all
}


def write_results(root, top1=TOP1, kind="linear", seeds=SEEDS):
    layout = Layout(str(root))
    for (model, dataset, shots), values in top1.items():
        for seed, value in zip(seeds, values):
            if value is None:
                continue
            path = Path(layout.probe_result(model, dataset, shots, seed, kind))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({
                "model": model, "dataset": dataset, "shots": shots, "seed": int(seed),
                "best_params": {"lr": 1.0, "weight_decay": 1e-6},
                "val_top1": value, "test_top1": value, "test_top5": min(100.0, value + 20.0),
                "n_trials": 3, "trials": [], "n_train": 10, "n_test": 5, "n_classes": 2,
                "feature_dim": 8, "random_weights": MODELS[model]["weights"] == "random",
                "timings": {"search_s": 1.0, "final_s": 0.5, "total_s": 1.5},
                "versions": {}, "device": "cpu",
            }))


@pytest.fixture()
def results_root(tmp_path):
    root = tmp_path / "results"
    write_results(root)
    return root


@pytest.fixture()
def summary(results_root):
    runs = load_probe_results(str(results_root), list(MODELS), DATASETS, SHOTS, SEEDS)
    return summarise(runs, MODELS, DATASETS, SHOTS, SEEDS)


def cell(frame, model, dataset, shots):
    rows = frame[(frame["model"] == model) & (frame["dataset"] == dataset) & (frame["shots"] == shots)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_summary_has_every_cell_of_the_grid(summary):
    assert len(summary) == len(MODELS) * len(DATASETS) * len(SHOTS)


def test_mean_and_population_std_over_seeds(summary):
    row = cell(summary, "resnet50", "in1k", "all")
    assert row["mean"] == pytest.approx(72.0)
    assert row["std"] == pytest.approx(math.sqrt(8 / 3))
    assert row["top5_mean"] == pytest.approx(92.0)
    assert (row["n_seeds"], row["expected_seeds"], bool(row["complete"])) == (3, 3, True)


def test_missing_seed_gives_no_mean(summary):
    row = cell(summary, "dino", "in1k", "1")
    assert math.isnan(row["mean"]) and math.isnan(row["std"])
    assert (row["n_seeds"], bool(row["complete"]), row["missing_seeds"]) == (2, False, "37")


def test_missing_dataset_is_a_row_with_zero_seeds(summary):
    row = cell(summary, "dino", "l1", "all")
    assert (row["n_seeds"], bool(row["complete"]), row["missing_seeds"]) == (0, False, "22;37;45")
    assert row["label"] == "dino"  # a null label falls back to the config key


def test_random_weights_flag(summary):
    assert bool(cell(summary, "deit_small", "l1", "1")["random_weights"])
    assert not bool(cell(summary, "resnet50", "l1", "1")["random_weights"])


def run_pipeline(results_root, tmp_path):
    summary_path = tmp_path / "summary.csv"
    grid = ["--results-root", str(results_root), "--models", json.dumps(MODELS),
            "--datasets", *DATASETS, "--shots", *SHOTS, "--seeds", *SEEDS]
    seed_path = tmp_path / "seeds.csv"
    assert aggregate_command([*grid, "--output", str(summary_path), "--seed-output", str(seed_path)]) == 0
    assert tables_command(["--summary", str(summary_path), "--seed-results", str(seed_path),
                           "--results-root", str(results_root), "--baseline", "resnet50"]) == 0
    return summary_path, grid


def test_tables_hold_the_expected_cells(results_root, tmp_path):
    run_pipeline(results_root, tmp_path)
    layout = Layout(str(results_root))
    for path in layout.result_tables(DATASETS):
        assert Path(path).stat().st_size > 0

    levels = pd.read_csv(layout.table("top1_levels", "csv"))
    assert list(levels.columns) == ["Model", "IN-1K", "L1"]
    assert levels.to_dict("records") == [
        # [low, high]: mean -+ t(0.975, 2 df) = 4.303 times the std (ddof=1) / sqrt(3)
        {"Model": "ResNet50", "IN-1K": "72.0 ± 1.6 [67.0, 77.0]", "L1": "61.0 ± 0.8 [58.5, 63.5]"},
        {"Model": "DeiT-S†", "IN-1K": "30.0 ± 0.0 [30.0, 30.0]", "L1": "26.0 ± 0.8 [23.5, 28.5]"},
        {"Model": "dino", "IN-1K": "76.0 ± 0.8 [73.5, 78.5]", "L1": "— (0/3 seeds)"},
    ]

    in1k = pd.read_csv(layout.table("top1_in1k", "csv"))
    assert list(in1k.columns) == ["Model", "N=1", "All"]
    assert in1k.set_index("Model").loc["dino", "N=1"] == "— (2/3 seeds)"
    assert in1k.set_index("Model").loc["ResNet50", "N=1"] == "42.0 ± 1.6 [37.0, 47.0]"

    relative = pd.read_csv(layout.table("relative_levels", "csv")).set_index("Model")
    assert relative.loc["ResNet50", "IN-1K"] == "+0.0 ± 1.6 [0.0, 0.0]"
    # the same difference on every seed: a zero-width interval and no test, so no mark
    assert relative.loc["DeiT-S†", "L1"] == "-35.0 ± 0.8 [-35.0, -35.0]"
    # per-seed differences 5, 4, 3: paired t-test p = 0.020, the largest of 3 Holm-corrected
    assert relative.loc["dino", "IN-1K"] == "+4.0 ± 0.8 [1.5, 6.5]*"

    markdown = open(layout.table("top1_levels", "md")).read()
    assert "| DeiT-S† | 30.0 ± 0.0 [30.0, 30.0] | 26.0 ± 0.8 [23.5, 28.5] |" in markdown
    assert "† randomly initialised weights" in markdown
    assert "95% confidence interval of the mean over seeds" in markdown
    latex = open(layout.table("top1_l1", "tex")).read()
    assert r"DeiT-S$^\dagger$ & 5.0 $\pm$ 0.0 [5.0, 5.0] & 26.0 $\pm$ 0.8 [23.5, 28.5] \\" in latex
    relative_latex = open(layout.table("relative_levels", "tex")).read()
    assert r"+4.0 $\pm$ 0.8 [1.5, 6.5]$^{*}$" in relative_latex
    assert "Holm-corrected" in open(layout.table("relative_levels", "md")).read()
    assert r"\begin{tabular}{lrr}" in latex


def test_with_the_models_exposures_every_table_says_each_models_exposure(results_root, tmp_path):
    """An Exposure column beside the model's name, a model the option leaves out undeclared, and a
    note on what the classes mean: the top-1 and relative tables compare models."""
    summary_path, _ = run_pipeline(results_root, tmp_path)
    assert tables_command(["--summary", str(summary_path), "--seed-results", str(tmp_path / "seeds.csv"),
                           "--results-root", str(results_root), "--baseline", "resnet50",
                           "--exposures", json.dumps({"resnet50": NONE, "dino": IMAGES})]) == 0
    layout = Layout(str(results_root))
    for name in ("top1_levels", "relative_levels", "top1_in1k", "relative_l1"):
        table = pd.read_csv(layout.table(name, "csv"))
        assert list(table.columns[:2]) == ["Model", "Exposure"]
        assert table["Exposure"].tolist() == [NONE, UNDECLARED, IMAGES]
    markdown = Path(layout.table("top1_levels", "md")).read_text()
    assert "| ResNet50 | none | 72.0 ± 1.6 [67.0, 77.0] |" in markdown
    assert "images: IN-21K images without their labels" in markdown and "not directly comparable" in markdown


def test_summary_csv_round_trips(results_root, tmp_path):
    summary_path, _ = run_pipeline(results_root, tmp_path)
    summary = read_summary(summary_path)
    assert cell(summary, "resnet50", "in1k", "all")[["ci95_low", "ci95_high"]].tolist() == pytest.approx(
        [72.0 - 4.302653 * 2 / math.sqrt(3), 72.0 + 4.302653 * 2 / math.sqrt(3)], abs=1e-5
    )
    row = cell(summary, "dino", "in1k", "1")
    assert math.isnan(row["mean"]) and row["missing_seeds"] == "37" and not row["complete"]
    assert cell(summary, "resnet50", "l1", "all")["mean"] == pytest.approx(61.0)


def test_corrupt_result_names_the_file(results_root):
    path = results_root / "probes/resnet50/in1k/shots-1/seed-22.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="seed-22.json: not valid JSON.*--forcerun .*seed-22.json"):
        load_probe_results(str(results_root), list(MODELS), DATASETS, SHOTS, SEEDS)


def test_result_without_scores_names_the_missing_keys(results_root):
    path = results_root / "probes/resnet50/in1k/shots-1/seed-22.json"
    path.write_text(json.dumps({"model": "resnet50"}))
    with pytest.raises(ValueError, match="lacks dataset, shots, seed, test_top1"):
        load_probe_results(str(results_root), list(MODELS), DATASETS, SHOTS, SEEDS)


def test_timings_join_benchmarks_and_probe_results(results_root, tmp_path):
    _, grid = run_pipeline(results_root, tmp_path)
    benchmarks = tmp_path / "logs" / "benchmarks"
    for split, seconds in (("train", 3.0), ("test", 2.0)):
        path = benchmarks / "features" / "resnet50" / "in1k" / f"{split}-00000.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:0{int(seconds)}\t100\n")
    assert len(benchmark_seconds(benchmarks, list(MODELS), DATASETS)) == 2
    # the merged feature files' invalid rows: the images the extraction left out undecoded
    for split, invalid in (("train", 2), ("test", 1)):
        path = Path(Layout(str(results_root)).features("resnet50", "in1k", split))
        path.parent.mkdir(parents=True, exist_ok=True)
        with h5py.File(path, "w") as handle:
            handle.attrs["num_invalid"] = invalid
    output = tmp_path / "timings.csv"
    assert timings_command([*grid, "--benchmark-root", str(benchmarks), "--output", str(output)]) == 0
    table = pd.read_csv(output).set_index(["model", "dataset"])
    assert table.loc[("resnet50", "in1k"), "features_s"] == pytest.approx(5.0)
    assert table.loc[("resnet50", "in1k"), "probe_runs"] == 6
    assert table.loc[("resnet50", "in1k"), "probe_s_from_results"] == pytest.approx(9.0)
    assert table.loc[("dino", "in1k"), "probe_runs"] == 5
    assert table.loc[("resnet50", "in1k"), "undecodable_images"] == 3
    assert pd.isna(table.loc[("dino", "in1k"), "undecodable_images"])  # no feature files to read

    # seeds that shared one job (probes.seeds_together) each record the job's time: a third each
    layout = Layout(str(results_root))
    for seed in SEEDS:
        path = Path(layout.probe_result("resnet50", "l1", "all", seed))
        result = json.loads(path.read_text())
        path.write_text(json.dumps({**result, "timings": {**result["timings"], "total_s": 4.5}, "seeds_together": SEEDS}))
    runs = load_probe_results(str(results_root), ["resnet50"], ["l1"], ["all"], SEEDS)
    assert runs["probe_s"].sum() == pytest.approx(4.5)
    assert output.with_suffix(".md").read_text().startswith("**Seconds per model")


def test_table_names_cover_every_dataset():
    assert result_table_names(["in1k", "l3"]) == [
        "top1_levels", "relative_levels", "top1_in1k", "top1_l3", "relative_in1k", "relative_l3", "probe_kinds",
        "pca_top1", "pca_relative",
    ]


@pytest.mark.e2e
def test_demo_summary_is_complete(demo_run):
    config = read_run_config(demo_run / "config.yaml")
    layout = Layout()
    knn = "knn" in config["probes"]["kinds"]
    tabled = [kind for kind in config["probes"]["kinds"] if kind != "linear" and KINDS[kind].texts]
    for path in layout.result_targets(config["datasets"], tabled):
        assert (demo_run / path).stat().st_size > 0, path
    summary = lin_rows(read_summary(demo_run / layout.results_summary()))
    assert len(summary) == len(config["models"]) * len(config["datasets"]) * len(config["probes"]["shots"])
    assert summary["complete"].all()
    if knn:  # the k-NN on the linear probe's grid, every seed
        knn_rows = lin_rows(read_summary(demo_run / layout.results_summary()), every_probe=True).query("probe == 'knn'")
        knn_models = stage_model_names(config, "probes.kind_models.knn")
        assert sorted(set(knn_rows["model"])) == sorted(knn_models) and knn_rows["complete"].all()
        assert len(knn_rows) == len(knn_models) * len(config["datasets"]) * len(config["probes"]["shots"])
    assert (summary["n_seeds"] == len(config["probes"]["seeds"])).all()
    assert summary["mean"].between(0, 100).all()
    timings = pd.read_csv(demo_run / layout.timings("csv"))
    assert {"features_s", "probes_s", "probe_s_from_results"} <= set(timings.columns)
    linear_runs = len(config["probes"]["shots"]) * len(config["probes"]["seeds"])
    # every kind's probes of a model and dataset, for the kinds that probe the model
    # (probes.kind_models): the k-NN's on the linear grid, the others' on theirs
    for model, runs in timings.groupby("model")["probe_runs"]:
        kinds = [kind for kind in config["probes"]["kinds"] if kind in ("linear", "zeroshot")
                 or model in stage_model_names(config, f"probes.kind_models.{kind}")]
        others = {**config["probes"], "kinds": [kind for kind in kinds if kind != "knn"]}
        expected_runs = linear_runs * (2 if "knn" in kinds else 1) + other_kind_probes_per_dataset({**config, "probes": others})
        assert (runs == expected_runs).all(), model


@pytest.mark.e2e
def test_tables_from_existing_results_mark_a_failed_probe(demo_run, tmp_path):
    workdir = copy_of_demo(demo_run, tmp_path / "partial")
    config = read_run_config(workdir / "config.yaml")
    seeds = [str(seed) for seed in config["probes"]["seeds"]]
    model = list(config["models"])[-1]
    lost = Path(workdir / Layout().probe_result(model, "l2", "all", seeds[0]))
    lost.unlink()
    (workdir / "partial.yaml").write_text("results: {allow_missing: true}\n")
    snakemake(workdir, "tables", "--cores", "1", "--configfile", "partial.yaml")
    assert not lost.exists()  # the failed probe is reported, not re-run
    levels = pd.read_csv(workdir / Layout().table("top1_levels", "csv")).set_index("Model")
    assert levels.loc[f"{config['models'][model]['label']}†", "L2"] == f"— ({len(seeds) - 1}/{len(seeds)} seeds)"


def test_without_n_all_every_table_is_still_written(results_root, tmp_path):
    few_shot = {key: values for key, values in TOP1.items() if key[2] != "all"}
    root = tmp_path / "few-shot-only"
    write_results(root, few_shot)
    runs = load_probe_results(str(root), list(MODELS), DATASETS, ["1"], SEEDS)
    summary_path = tmp_path / "few.csv"
    summarise(runs, MODELS, DATASETS, ["1"], SEEDS).to_csv(summary_path, index=False)
    seeds_path = tmp_path / "few-seeds.csv"
    runs.to_csv(seeds_path, index=False)
    assert tables_command(["--summary", str(summary_path), "--seed-results", str(seeds_path),
                           "--results-root", str(root), "--baseline", "resnet50"]) == 0
    layout = Layout(str(root))
    assert all(Path(path).exists() for path in layout.result_tables(DATASETS))
    levels = pd.read_csv(layout.table("top1_levels", "csv"))
    assert levels.to_dict("records")[0] == {"Model": "ResNet50", "IN-1K": "—", "L1": "—"}


def test_relative_cell_without_a_complete_baseline(results_root, tmp_path):
    (results_root / "probes/resnet50/l1/shots-1/seed-45.json").unlink()
    run_pipeline(results_root, tmp_path)
    layout = Layout(str(results_root))
    relative = pd.read_csv(layout.table("relative_l1", "csv")).set_index("Model")
    assert relative.loc["ResNet50", "N=1"] == "— (2/3 seeds)"
    assert relative.loc["DeiT-S†", "N=1"] == "— (no baseline)"
    assert "the baseline has no complete result" in open(layout.table("relative_l1", "md")).read()


def test_other_probe_kinds_get_rows_and_a_table_relative_to_the_linear_probe(results_root, tmp_path):
    """MLP kinds on their own grid (N=all, one seed): summary rows with probe=mlp, the
    paper's linear tables unchanged, and the CoG preprint's Tab. 3, 100 x (MLP - LogReg) / LogReg."""
    write_results(results_root, {("resnet50", "in1k", "all"): [79.2], ("resnet50", "l1", "all"): [54.9]}, "mlp", ["22"])
    write_results(results_root, {("resnet50", "in1k", "all"): [36.0]}, "mlp_noact", ["22"])
    summary_path = tmp_path / "summary.csv"
    grid = ["--results-root", str(results_root), "--models", json.dumps(MODELS), "--datasets", *DATASETS,
            "--shots", *SHOTS, "--seeds", *SEEDS, "--kinds", "linear", "mlp", "mlp_noact",
            "--other-kinds-shots", "all", "--other-kinds-seeds", "22"]
    seeds_path = tmp_path / "seed_results.csv"
    assert aggregate_command([*grid, "--output", str(summary_path), "--seed-output", str(seeds_path)]) == 0
    summary = read_summary(summary_path)
    assert sorted(set(summary["probe"])) == ["linear", "mlp", "mlp_noact"]
    mlp = summary[summary["probe"] == "mlp"]
    assert len(mlp) == len(MODELS) * len(DATASETS) and set(mlp["shots"]) == {"all"}
    assert cell(mlp, "resnet50", "in1k", "all")["mean"] == pytest.approx(79.2)
    assert cell(summary[summary["probe"] == "linear"], "resnet50", "in1k", "all")["mean"] == pytest.approx(72.0)
    assert tables_command(["--summary", str(summary_path), "--seed-results", str(seeds_path),
                           "--results-root", str(results_root), "--baseline", "resnet50"]) == 0
    layout = Layout(str(results_root))
    kinds = pd.read_csv(layout.table("probe_kinds", "csv")).set_index("Model")
    assert list(kinds.columns) == ["MLP IN-1K", "MLP L1", "MLP-NoAct IN-1K", "MLP-NoAct L1"]
    assert kinds.loc["ResNet50", "MLP IN-1K"] == f"{100 * (79.2 - 72.0) / 72.0:+.1f}"
    assert kinds.loc["ResNet50", "MLP L1"] == f"{100 * (54.9 - 61.0) / 61.0:+.1f}"
    assert kinds.loc["ResNet50", "MLP-NoAct IN-1K"] == "-50.0"
    assert kinds.loc["dino", "MLP IN-1K"] == "—"
    levels = pd.read_csv(layout.table("top1_levels", "csv"))
    assert levels["Model"].tolist() == ["ResNet50", "DeiT-S†", "dino"]
    assert levels.loc[0, "IN-1K"].startswith("72.0 ± 1.6 [")


def test_pca_kinds_give_top1_against_d_absolute_and_relative_to_the_baseline(results_root, tmp_path):
    write_results(results_root, {("resnet50", "in1k", "all"): [50.0], ("deit_small", "in1k", "all"): [20.0]}, "pca-8", ["22"])
    write_results(results_root, {("resnet50", "in1k", "all"): [65.0], ("deit_small", "in1k", "all"): [28.0]}, "pca-32", ["22"])
    summary_path = tmp_path / "summary.csv"
    grid = ["--results-root", str(results_root), "--models", json.dumps(MODELS), "--datasets", *DATASETS,
            "--shots", *SHOTS, "--seeds", *SEEDS, "--kinds", "linear", "pca-8", "pca-32",
            "--other-kinds-shots", "all", "--other-kinds-seeds", "22"]
    seeds_path = tmp_path / "seed_results.csv"
    assert aggregate_command([*grid, "--output", str(summary_path), "--seed-output", str(seeds_path)]) == 0
    assert tables_command(["--summary", str(summary_path), "--seed-results", str(seeds_path),
                           "--results-root", str(results_root), "--baseline", "resnet50"]) == 0
    layout = Layout(str(results_root))
    absolute = pd.read_csv(layout.table("pca_top1", "csv")).set_index(["Model", "Dataset"])
    assert list(absolute.columns) == ["d=8", "d=32", "All dims"]
    assert absolute.loc[("ResNet50", "IN-1K")].tolist() == ["50.0", "65.0", "72.0"]
    assert absolute.loc[("DeiT-S†", "L1"), "d=8"] == "—"
    relative = pd.read_csv(layout.table("pca_relative", "csv")).set_index(["Model", "Dataset"])
    assert relative.loc[("DeiT-S†", "IN-1K")].tolist() == ["-30.0", "-37.0", "-42.0"]
    # the PCA tables compare models: with their classes, each row says its model's
    assert tables_command(["--summary", str(summary_path), "--seed-results", str(seeds_path),
                           "--results-root", str(results_root), "--baseline", "resnet50",
                           "--exposures", json.dumps({"resnet50": NONE, "deit_small": WEB})]) == 0
    for name in ("pca_top1", "pca_relative"):
        table = pd.read_csv(layout.table(name, "csv"))
        assert list(table.columns) == ["Model", "Exposure", "Dataset", "d=8", "d=32", "All dims"]
        assert dict(zip(table["Model"], table["Exposure"])) == {"ResNet50": NONE, "DeiT-S†": WEB, "dino": UNDECLARED}
        assert "web: web data of unknown overlap" in Path(layout.table(name, "md")).read_text()


def test_an_aggregate_csv_without_its_columns_names_the_file_and_the_fix(tmp_path):
    from imagenet_cog.results.summary import read_seed_results

    path = tmp_path / "seed_results.csv"
    path.write_text("model,dataset\nm,l1\n")
    for reader in (read_summary, read_seed_results):
        with pytest.raises(ValueError, match=r"seed_results.csv: not a .*lacks .*shots.*aggregate-probes"):
            reader(path)


def test_a_protocol_deviation_is_named_in_the_per_seed_results_and_marked_in_the_tables(results_root, tmp_path):
    """probes.two_stage is no paper protocol: every run records it, and so must each table cell
    its runs make (a mark and a note); a summary from before the column still reads."""
    layout = Layout(str(results_root))
    for seed in SEEDS:
        path = Path(layout.probe_result("dino", "in1k", "all", seed))
        result = json.loads(path.read_text())
        deviation = {"name": "two_stage", "short_epochs": 3, "finalists": 2}
        path.write_text(json.dumps({**result, "protocol_deviations": [deviation]}))
    summary_path, _ = run_pipeline(results_root, tmp_path)
    seeds = pd.read_csv(tmp_path / "seeds.csv", dtype={"seed": str}, keep_default_na=False)
    marked = seeds[seeds["protocol_deviations"] == "two_stage"]
    assert sorted(zip(marked["model"], marked["dataset"], marked["shots"].astype(str))) == [("dino", "in1k", "all")] * 3
    assert cell(read_summary(summary_path), "dino", "in1k", "all")["protocol_deviations"] == "two_stage"
    assert cell(read_summary(summary_path), "resnet50", "in1k", "all")["protocol_deviations"] == ""
    levels = pd.read_csv(layout.table("top1_levels", "csv")).set_index("Model")
    assert levels.loc["dino", "IN-1K"] == "76.0 ± 0.8 [73.5, 78.5]‡"
    assert levels.loc["ResNet50", "IN-1K"] == "72.0 ± 1.6 [67.0, 77.0]"
    assert "‡ a protocol deviation (two_stage)" in open(layout.table("top1_levels", "md")).read()
    assert r"[73.5, 78.5]$^\ddagger$" in open(layout.table("top1_levels", "tex")).read()
    # a summary written before the column existed reads as the paper's protocol
    old = pd.read_csv(summary_path).drop(columns="protocol_deviations")
    old.to_csv(summary_path, index=False)
    assert set(read_summary(summary_path)["protocol_deviations"]) == {""}


def test_level_sets_table_shows_the_linear_probes_lin_levels_not_a_mean_over_kinds():
    """Lin's levels have a row per probe kind (linear, knn, mlp, ...); the level sets are probed
    linearly, so supp. Fig. 7's Lin line is the linear probe's top-1."""
    from imagenet_cog.results.level_set_results import level_set_frame, level_set_table

    summary = pd.DataFrame([
        {"model": "m", "label": "M", "probe": probe, "dataset": dataset, "level_set": level_set, "shots": "all",
         "mean": mean}
        for probe, dataset, level_set, mean in [
            ("linear", "l1", "lin", 80.0), ("knn", "l1", "lin", 60.0), ("mlp", "l1", "lin", 40.0),
            ("linear", "wup-l1", "wup", 70.0),
        ]
    ])
    table = level_set_table(level_set_frame(summary, "all")).set_index("level set")
    assert table.loc["Lin", "L1"] == "80.0" and table.loc["Wu-Palmer", "L1"] == "70.0"
