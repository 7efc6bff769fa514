"""End to end: the whole workflow on its built-in demo world, as `make demo` runs it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import copy_of_demo, other_probe_kinds, read_run_config, snakemake, stage_model_names
from imagenet_cog.core.io import read_lines, read_tsv
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.naming import dataset_title
from imagenet_cog.models.registry import is_random_weights
from imagenet_cog.probes.kinds import KINDS
from imagenet_cog.results.summary import read_summary

pytestmark = pytest.mark.e2e

PAPER_ELIGIBILITY_COUNTS = [21841, 20842, 20081, 17254, 14248, 5216, 5146]


@pytest.fixture(scope="module")
def demo_config(demo_run):
    from snakemake.utils import validate

    config = read_run_config(demo_run / "config.yaml")
    validate(config, str(demo_run / "workflow" / "schemas" / "config.schema.yaml"))
    return config


# The demo's story (paper Fig. 3): the network the workflow pretrains on the demo's seen IN-1K
# concepts is best on IN-1K and loses top-1 from L1 to L5, the random-weights control does
# not. Mean over the probe seeds, all training images, both product precisions whatever the
# host (a CPU without bfloat16 multiplies float32 under `auto`, one with it bfloat16).
# Measured on 2 CPU cores (this demo, float32): pretrained IN-1K 99.7, L1 94.6, L5 38.7;
# control L1 70.3, L5 74.7. Over 3 pretraining seeds x 2 CPU kernel sets x 2 precisions
# (docs/demo.md) the smallest pretrained margins were 4.4 (IN-1K over L1), 53.0 (L1 over L5)
# and 19.7 (over the control on IN-1K), the control's largest fall 0.6: the constants ask
# for half of each pretrained margin and a control fall under a quarter of the smallest one.
PRETRAINED_MODEL, CONTROL_MODEL = "demo_cnn", "demo_cnn_random"
STORY_PRECISIONS = ("float32", "bfloat16")
IN1K_ABOVE_L1 = 2.0
PRETRAINED_FALL = 25.0
CONTROL_FALL_AT_MOST = 12.0
PRETRAINED_ABOVE_CONTROL = 10.0


@pytest.fixture(scope="module", params=STORY_PRECISIONS)
def story(request, demo_run, tmp_path_factory) -> dict[str, list[float]]:
    """Top-1 at N = all of IN-1K and the levels per model, mean over seeds, at one precision:
    the demo's own probes where they multiplied at it (`auto` resolved to it on this host),
    else the demo's N = all probes rerun at it on a copy of the finished demo (features kept)."""
    config = yaml.safe_load((demo_run / "config.yaml").read_text())
    layout = Layout()
    seeds = [str(seed) for seed in config["probes"]["seeds"]]
    datasets = ["in1k", *(f"l{k}" for k in range(1, 6))]
    results = {(model, dataset, seed): layout.probe_result(model, dataset, "all", seed)
               for model in (PRETRAINED_MODEL, CONTROL_MODEL) for dataset in datasets for seed in seeds}
    workdir = demo_run
    if json.loads((demo_run / next(iter(results.values()))).read_text())["matmul_precision"] != request.param:
        workdir = copy_of_demo(demo_run, tmp_path_factory.mktemp("story") / "copy")
        # one job per N (probes.group: shots), as the story reads N = all alone: a grouping
        # changes no run's numbers (docs/probes.md), and the resident job would probe every N
        settings = {"probes": {"precision": request.param, "group": "shots"}}
        (workdir / "precision.yaml").write_text(yaml.safe_dump(settings))
        # the targets first: --configfile takes every argument after it
        snakemake(workdir, *results.values(), "--cores", "2", "--configfile", "precision.yaml")
    top1 = {}
    for (model, dataset, seed), path in results.items():
        result = json.loads((workdir / path).read_text())
        assert result["matmul_precision"] == request.param, path
        top1.setdefault(model, {}).setdefault(dataset, []).append(result["test_top1"])
    return {model: [float(np.mean(by_dataset[dataset])) for dataset in datasets] for model, by_dataset in top1.items()}


def test_the_pretrained_model_falls_from_l1_to_l5_and_the_random_one_does_not(story, demo_config):
    assert not is_random_weights(demo_config["models"][PRETRAINED_MODEL]["weights"])
    assert is_random_weights(demo_config["models"][CONTROL_MODEL]["weights"])
    (in1k, *pretrained), control = story[PRETRAINED_MODEL], story[CONTROL_MODEL][1:]
    assert in1k - pretrained[0] > IN1K_ABOVE_L1, story
    assert pretrained[0] - pretrained[-1] > PRETRAINED_FALL, story
    assert control[0] - control[-1] < CONTROL_FALL_AT_MOST, story
    assert pretrained[0] > control[0] + PRETRAINED_ABOVE_CONTROL, story


def test_the_demo_probes_in1k_on_as_many_concepts_as_each_level(demo_run, demo_config):
    layout = Layout()
    counts = {dataset: len(read_lines(demo_run / layout.demo_concepts(dataset))) for dataset in demo_config["datasets"]}
    assert set(counts.values()) == {demo_config["demo"]["concepts_per_dataset"]}, counts
    seen = read_lines(demo_run / layout.demo_pretraining_concepts())
    assert len(seen) == demo_config["demo"]["in1k_concepts"]
    assert set(read_lines(demo_run / layout.demo_concepts("in1k"))) <= set(seen)


def test_eligibility_report_reproduces_the_paper(demo_run):
    report = read_tsv(demo_run / Layout().eligibility_report())
    assert [int(row["remaining"]) for row in report] == PAPER_ELIGIBILITY_COUNTS


def test_five_levels_of_1000_with_decreasing_similarity(demo_run):
    layout = Layout()
    ranking = {row["wnid"]: float(row["sim_in1k"]) for row in read_tsv(demo_run / layout.ranking())}
    levels = [read_lines(demo_run / layout.level_concepts(f"l{k}")) for k in range(1, 6)]
    assert [len(set(level)) for level in levels] == [1000] * 5
    assert len(set().union(*levels)) == 5000
    for nearer, further in zip(levels, levels[1:]):
        assert min(ranking[w] for w in nearer) >= max(ranking[w] for w in further)
    assert min(ranking[w] for w in levels[0]) > max(ranking[w] for w in levels[-1])
    assert len(read_lines(demo_run / layout.level_concepts("in1k"))) == 1000


def test_every_configured_output_exists(demo_run, demo_config):
    layout = Layout()
    for dataset in demo_config["datasets"]:
        rows = read_tsv(demo_run / layout.image_splits(dataset))
        assert {row["split"] for row in rows} == {"train", "test"}
        for model in demo_config["models"]:
            for split in ("train", "test"):
                assert (demo_run / layout.features(model, dataset, split)).stat().st_size > 0
            for shots in demo_config["probes"]["shots"]:
                for seed in demo_config["probes"]["seeds"]:
                    result = json.loads((demo_run / layout.probe_result(model, dataset, str(shots), str(seed))).read_text())
                    assert 0.0 <= result["test_top1"] <= 100.0
                    assert result["n_trials"] == demo_config["probes"]["trials"]
                    assert result["random_weights"] is is_random_weights(demo_config["models"][model]["weights"])
    tabled = [kind for kind in demo_config["probes"]["kinds"] if kind != "linear" and KINDS[kind].texts]
    for target in layout.result_targets(demo_config["datasets"], tabled):
        assert (demo_run / target).stat().st_size > 0, target
    assert (demo_run / layout.levels_figure("png")).stat().st_size > 0


def test_level_set_outputs(demo_run, demo_config):
    """Each configured level set: ranking, levels, summary, figure and overlap with Lin; its
    views read only already-extracted features; its probes; the Fig. 7-like figure and table."""
    import h5py
    import pandas as pd

    layout = Layout()
    sets = demo_config["level_sets"]["sets"]
    lin_levels = [set(read_lines(demo_run / layout.level_concepts(f"l{k}"))) for k in range(1, 6)]
    for name in (s for s in sets if s != "random"):
        ranking = read_tsv(demo_run / layout.level_set_ranking(name))
        assert len(ranking) == (5000 if name == "word2vec" else 5146)
        levels = [read_lines(demo_run / layout.dataset_concepts(f"{name}-l{k}")) for k in range(1, 6)]
        assert [len(level) for level in levels] == [1000] * 5
        overlap = read_tsv(demo_run / layout.level_set_overlap(name))
        assert [[int(row[f"l{j}"]) for j in range(1, 6)] for row in overlap] == [
            [len(lin & set(level)) for level in levels] for lin in lin_levels
        ]
        assert (demo_run / layout.level_set_figure(name, "png")).stat().st_size > 0
    draws = demo_config["level_sets"]["random"]["draws"]
    for draw in range(1, draws + 1):
        assert len(read_lines(demo_run / layout.random_draw(f"{draw:02d}"))) == demo_config["level_sets"]["random"]["concepts"]
    views = [f"{name}-l{k}" for name in sets if name != "random" for k in range(1, 6)]
    views += [f"random-{draw:02d}" for draw in range(1, draws + 1)]
    extracted = {"pool", *demo_config["datasets"]}
    set_models = stage_model_names(demo_config, "level_sets")
    for model in set_models:
        for view in views:
            with h5py.File(demo_run / layout.features(model, view, "train")) as handle:
                assert handle["features"].is_virtual
                assert {Path(s.file_name).parts[-3] for s in handle["features"].virtual_sources()} <= extracted
            for seed in demo_config["level_sets"]["seeds"]:
                result = json.loads((demo_run / layout.probe_result(model, view, "all", str(seed))).read_text())
                assert 0.0 <= result["test_top1"] <= 100.0
    summary = pd.read_csv(demo_run / layout.results_summary())
    assert set(summary["level_set"]) == {"lin", *sets}
    assert set(summary[summary["level_set"] == "lin"]["dataset"]) == set(demo_config["datasets"])
    for path in (layout.level_sets_figure("png"), layout.level_sets_figure("pdf"), layout.level_sets_table("csv")):
        assert (demo_run / path).stat().st_size > 0
    table = pd.read_csv(demo_run / layout.level_sets_table("csv"))
    # Lin's row of every model; a row per set of each level-set model (random: 1 row)
    assert len(table) == len(demo_config["models"]) + len(set_models) * len(sets)


def test_every_configured_probe_kind_ran(demo_run, demo_config):
    """The demo runs each other kind (CoG preprint, C.2, C.3) on its own shots and seeds, at small d."""
    layout, probes = Layout(), demo_config["probes"]
    kinds = other_probe_kinds(demo_config)
    assert {"mlp", "mlp_noact"} <= set(kinds) and any(kind.startswith("pca-") for kind in kinds)
    for kind in kinds:
        for model in stage_model_names(demo_config, f"probes.kind_models.{kind.split('-')[0]}"):
            for dataset in demo_config["datasets"]:
                for shots in probes["other_kinds_shots"]:
                    for seed in probes["other_kinds_seeds"]:
                        path = demo_run / layout.probe_result(model, dataset, str(shots), str(seed), kind)
                        result = json.loads(path.read_text())
                        assert result["probe"] == kind and 0.0 <= result["test_top1"] <= 100.0
                        if kind.startswith("pca-"):
                            assert result["feature_dim"] == int(kind.split("-")[1])
    summary = read_summary(demo_run / layout.results_summary())
    assert set(summary["probe"]) == {"linear", "knn", *kinds} and summary["complete"].all()


def test_the_knn_probe_tells_the_demos_story_on_the_linear_grid(demo_run, demo_config):
    """The k-NN probe ran every N and seed of the linear grid, one job per model and dataset, and
    tells the story the linear probe tells (the demo's pretrained network, float32 on 2 CPU
    cores: IN-1K 100.0, L1 93.8, L5 32.3 at k = 10; the control L1 56.8, L5 60.4)."""
    layout, probes = Layout(), demo_config["probes"]
    top1 = {}
    for model in (PRETRAINED_MODEL, CONTROL_MODEL):
        for dataset in demo_config["datasets"]:
            for shots in probes["shots"]:
                results = [json.loads((demo_run / layout.probe_result(model, dataset, str(shots), str(seed), "knn"))
                                      .read_text()) for seed in probes["seeds"]]
                assert all(r["probe"] == "knn" and r["knn"]["reported_k"] == probes["knn"]["reported_k"] for r in results)
                assert [entry["k"] for entry in results[0]["knn"]["per_k"]] == probes["knn"]["k"]
                if shots == "all":  # nothing drawn: every seed the same numbers
                    assert all(r["knn"] == results[0]["knn"] for r in results)
                    top1.setdefault(model, []).append(results[0]["test_top1"])
    (in1k, *pretrained), control = top1[PRETRAINED_MODEL], top1[CONTROL_MODEL][1:]
    assert in1k - pretrained[0] > IN1K_ABOVE_L1, top1
    assert pretrained[0] - pretrained[-1] > PRETRAINED_FALL, top1
    assert control[0] - control[-1] < CONTROL_FALL_AT_MOST, top1
    assert pretrained[0] > control[0] + PRETRAINED_ABOVE_CONTROL, top1


OUTPUT_MAP = Path(__file__).resolve().parents[1] / "docs" / "outputs.md"


def path_pattern(path: str) -> re.Pattern:
    """A path as docs/outputs.md writes it, as a pattern: ``{a,b}`` one of its choices, ``{name}``
    (a wildcard), ``{l1,..,l5}`` and ``*`` any text of one path component."""
    pieces = []
    for index, part in enumerate(re.split(r"(\{[^}]*\}|\*)", path)):
        choices = part[1:-1].split(",")
        if index % 2 == 0:
            pieces.append(re.escape(part))
        elif part.startswith("{") and len(choices) > 1 and ".." not in choices:
            pieces.append("(?:" + "|".join(map(re.escape, choices)) + ")")
        else:
            pieces.append("[^/]+")
    return re.compile("".join(pieces))


def output_map_patterns() -> list[re.Pattern]:
    """The paths of docs/outputs.md's table (the backticked paths of its second column)."""
    return [path_pattern(path) for row in OUTPUT_MAP.read_text().splitlines() if row.startswith("|")
            for path in re.findall(r"`([^`\s]+/[^`\s]+)`", row.split("|")[2])]


def test_the_output_map_names_every_table_and_figure_of_the_demo(demo_run, demo_config):
    results = demo_run / demo_config["results_dir"]
    written = sorted(str(path.relative_to(results)) for folder in ("tables", "figures") for path in (results / folder).iterdir())
    patterns = output_map_patterns()
    unnamed = [path for path in written if not any(pattern.fullmatch(path) for pattern in patterns)]
    assert written and not unnamed, f"docs/outputs.md names no row for {unnamed}"


def test_rerun_does_nothing(demo_run):
    result = snakemake(demo_run, "--cores", "2", "--dry-run")
    assert "Nothing to be done" in result.stdout + result.stderr


def test_rater_sheets_hold_the_key_tasks_and_score(demo_run, demo_config, tmp_path):
    from imagenet_cog.analyses.raters import NEGATIVE_KINDS, VARIANTS, score_raters_command

    layout = Layout()
    raters = demo_config["analyses"]["raters"]
    assert raters["enabled"]
    concepts = min(raters["concepts_per_dataset"], demo_config["demo"]["concepts_per_dataset"])
    answers = ["rater,task,choice"]
    for dataset in demo_config["datasets"]:
        key = read_tsv(demo_run / layout.rater_key(dataset))
        assert len(key) == concepts * raters["tasks_per_concept"] * len(VARIANTS) * len(NEGATIVE_KINDS)
        sheets = demo_run / layout.rater_sheets(dataset)
        pages = {path.name: path.read_text() for path in sheets.glob("*.html")}
        assert len(pages) == 1 + len(VARIANTS) * len(NEGATIVE_KINDS) * raters["tasks_per_concept"]
        shown = "".join(pages.values())
        assert all(f'data-task="{row["task"]}"' in shown for row in key)
        assert not any(row["wnid"] in shown or row["query_a"] in shown for row in key)
        answers += [f"key,{row['task']},{row['answer']}" for row in key]
    (tmp_path / "answers.csv").write_text("\n".join(answers) + "\n")
    keys = [str(demo_run / layout.rater_key(dataset)) for dataset in demo_config["datasets"]]
    assert score_raters_command(["--answers", str(tmp_path / "answers.csv"), "--key", *keys,
                                 "--output", str(tmp_path / "scores.tsv")]) == 0
    scores = read_tsv(tmp_path / "scores.tsv")
    assert len(scores) == len(demo_config["datasets"]) * len(VARIANTS) * len(NEGATIVE_KINDS)
    assert {row["accuracy"] for row in scores} == {"1"}


def test_statistics_drop_and_published_comparison_of_the_demo(demo_run, demo_config):
    from imagenet_cog.results.summary import lin_rows, read_summary

    layout = Layout()
    models = list(demo_config["models"])
    baseline = demo_config["results"]["baseline_model"]
    datasets = demo_config["datasets"]
    shots = [str(shot) for shot in demo_config["probes"]["shots"]]
    summary = lin_rows(read_summary(demo_run / layout.results_summary()))
    with_interval = summary[summary["ci95_low"].notna()]
    assert len(with_interval) == len(summary)  # the demo runs 2 seeds: every cell has one
    assert (with_interval["ci95_low"] <= with_interval["mean"]).all()
    assert (with_interval["mean"] <= with_interval["ci95_high"]).all()

    seeds = pd.read_csv(demo_run / layout.seed_results())
    seeds = seeds[(seeds["probe"] == "linear") & seeds["dataset"].isin(datasets)]
    assert len(seeds) == len(models) * len(datasets) * len(shots) * len(demo_config["probes"]["seeds"])
    tests = pd.read_csv(demo_run / layout.table("paired_tests", "csv"))
    assert len(tests) == (len(models) - 1) * len(datasets) * len(shots)
    assert baseline not in set(tests["model"])
    ranks = pd.read_csv(demo_run / layout.table("rank_agreement", "csv"))
    assert len(ranks) == (len(datasets) - 1) * len(shots)
    drop = pd.read_csv(demo_run / layout.table("generalization_drop", "csv"))
    assert len(drop) == len(models)
    assert [column for column in drop.columns if column.endswith("drop (%)")] == [
        f"{dataset.upper()} drop (%)" for dataset in datasets if dataset != "in1k"
    ]

    mapped = [model for model, entry in demo_config["models"].items() if entry.get("paper_name")]
    comparison = pd.read_csv(demo_run / layout.table("published_comparison", "csv"))
    assert sorted(set(comparison["model"])) == sorted(mapped)
    assert len(comparison) == len(mapped) * len(datasets) * len(shots)
    assert comparison["published_mean"].between(0, 100).all()
    for dataset in datasets:
        table = pd.read_csv(demo_run / layout.table(f"published_{dataset}", "csv"))
        assert len(table) == len(mapped)

ANALYSIS_METRICS = {
    "kmeans": {"paper_purity", "cluster_purity", "entropy_purity", "nmi", "ami", "ari"},
    "alignment_uniformity": {"alignment", "uniformity", "uniformity_loss", "alignment_uniformity_ratio"},
    "learnability": {"learnability_random", "learnability_hard"},
}


def test_every_analysis_ran_for_every_model_and_dataset(demo_run, demo_config):
    layout = Layout()
    datasets, models = demo_config["datasets"], stage_model_names(demo_config, "analyses")
    analyses = demo_config["analyses"]
    for model in models:
        for dataset in datasets:
            for analysis, metrics in ANALYSIS_METRICS.items():
                result = json.loads((demo_run / layout.analysis_result(model, dataset, analysis)).read_text())
                assert {record["metric"] for record in result["metrics"]} == metrics
                assert result["model"] == model and result["dataset"] == dataset
            kmeans = json.loads((demo_run / layout.analysis_result(model, dataset, "kmeans")).read_text())
            assert kmeans["k"] == demo_config["demo"]["concepts_per_dataset"]
            assert [run["seed"] for run in kmeans["runs"]] == analyses["kmeans"]["seeds"]
            values = {record["metric"]: record["value"] for record in kmeans["metrics"]}
            assert 1 / kmeans["k"] <= values["paper_purity"] <= 1.0
            assignments = read_tsv(demo_run / layout.kmeans_assignments(model, dataset))
            assert len(assignments) == kmeans["n_test"]
            concepts = read_tsv(demo_run / layout.learnability_concepts(model, dataset))
            assert len(concepts) == demo_config["demo"]["concepts_per_dataset"]
            assert all(int(row["tasks"]) == analyses["learnability"]["tasks"] for row in concepts)
    summary = pd.read_csv(demo_run / layout.analyses_summary())
    assert list(summary.columns) == ["model", "dataset", "metric", "value", "low", "high", "spread"]
    learn = summary[summary["metric"].str.startswith("learnability_")]
    assert len(learn) == 2 * len(models) * len(datasets)
    assert ((learn["low"] <= learn["value"]) & (learn["value"] <= learn["high"])).all()
    ratios = summary[(summary["metric"] == "alignment_uniformity_ratio_rel_in1k") & (summary["dataset"] == "in1k")]
    assert np.allclose(ratios["value"], 1.0) and len(ratios) == len(models)
    for dataset in datasets:
        matrix = pd.read_csv(demo_run / layout.agreement_matrix(dataset), index_col="model")
        assert list(matrix.index) == [*models, "concepts"]
        assert np.allclose(matrix.to_numpy(), matrix.to_numpy().T)
    analyses_on = ["kmeans", "alignment_uniformity", "learnability", "agreement"]
    for target in [*layout.analysis_tables(analyses_on, datasets), *layout.analysis_figures(analyses_on)]:
        assert (demo_run / target).stat().st_size > 0, target


def test_label_audit_lists_confident_predictions_with_both_labels(demo_run, demo_config):
    layout = Layout(str(demo_run / "results"))
    levels = [d for d in demo_config["datasets"] if d != "in1k"]
    pairs = {(level, "in1k") for level in levels} | {("in1k", levels[-1])}
    seeds = {str(seed) for seed in demo_config["probes"]["seeds"]}
    names = {row["wnid"]: row["name"] for row in read_tsv(layout.concept_catalogue())}
    for model in stage_model_names(demo_config, "label_audit"):
        shares = read_tsv(layout.audit_shares(model))
        assert {(r["classifier_dataset"], r["image_dataset"]) for r in shares} == pairs
        assert {r["seed"] for r in shares} == seeds | {"mean"}
        for row in read_tsv(layout.audit_predictions(model)):
            assert float(row["confidence"]) > demo_config["label_audit"]["threshold"]
            assert row["true_name"] == names[row["true_wnid"]] and row["predicted_name"] == names[row["predicted_wnid"]]
            assert (row["classifier_dataset"], row["image_dataset"]) in pairs
        assert Path(layout.audit_contact_sheet(model)).stat().st_size > 0
        for dataset in demo_config["datasets"]:
            for seed in seeds:
                assert Path(layout.probe_classifier(model, dataset, seed)).is_file()


def test_balanced_variant_table_compares_every_model_and_dataset(demo_run, demo_config):
    layout = Layout(str(demo_run / "results"))
    table = pd.read_csv(layout.table("balanced", "csv"))
    assert len(table) == len(stage_model_names(demo_config, "balanced")) * len(demo_config["datasets"])
    assert np.allclose(table["balanced - default"], table["balanced"] - table["default"], atol=0.011)
    k = demo_config["balanced"]["train_per_concept"]
    for dataset in demo_config["datasets"]:
        rows = read_tsv(layout.balanced_split(dataset))
        train = pd.Series([r["wnid"] for r in rows if r["split"] == "train"]).value_counts()
        assert set(train) == {k}
        default = {tuple(r.values()) for r in read_tsv(layout.image_splits(dataset))}
        assert {tuple(r.values()) for r in rows} <= default
        model = demo_config["results"]["baseline_model"]
        result = json.loads(Path(layout.probe_result(model, f"balanced-{dataset}", "all", "22")).read_text())
        assert result["n_train"] == k * len(train)


def test_in1k_blurred_table_figure_and_missing_images(demo_run, demo_config):
    """IN-1K-b beside IN-1K (supp. E): one row per model and N with the drop, their mean, the
    Fig. 8 figure, and the images the demo's blurred copy left out counted in the summary."""
    layout = Layout(str(demo_run / "results"))
    settings = demo_config["in1k_blurred"]
    table = pd.read_csv(layout.table("in1k_blurred", "csv"))
    cells = table[table["model"] != "mean"]
    assert len(cells) == len(stage_model_names(demo_config, "in1k_blurred")) * len(settings["shots"])
    assert np.allclose(cells["drop"].astype(float), cells["IN-1K"].astype(float) - cells["IN-1K-b"].astype(float), atol=0.011)
    assert float(table.loc[table["model"] == "mean", "drop"].iloc[0]) == pytest.approx(cells["drop"].astype(float).mean(), abs=0.011)
    for extension in ("png", "pdf"):
        assert Path(layout.figure("in1k_blurred", extension)).stat().st_size > 0
    summary = {row["dataset"]: row for row in read_tsv(layout.split_summary())}
    missing = int(summary["in1k_blurred"]["train_missing_vs_in1k"]) + int(summary["in1k_blurred"]["test_missing_vs_in1k"])
    assert missing == settings.get("demo_dropped", 3)


# The fine-tuning control's story (ICCV supp. C.2, Fig. 6): the demo network keeps almost all
# of what fine-tuning reaches on IN-1K, whose look it was pretrained on, and much less on L5,
# whose concepts differ by the texture it learned to ignore. Measured (2 cores, float32):
# frozen / fine-tuned 99.5% on IN-1K, 73% on L5; the constant asks for less than half that gap.
FINETUNE_FALL = 10.0


def test_the_fine_tuning_control_sets_the_frozen_probe_relative_to_fine_tuning(demo_run, demo_config):
    layout = Layout(str(demo_run / "results"))
    settings = demo_config["finetune"]
    model = demo_config["results"]["baseline_model"]
    test_images = demo_config["demo"]["concepts_per_dataset"] * demo_config["demo"]["test_images_per_concept"]
    datasets = settings["datasets"] or demo_config["datasets"]
    for dataset in datasets:
        result = json.loads(Path(layout.finetune_result(model, dataset)).read_text())
        assert len(result["history"]) == result["recipe"]["epochs"] == settings["recipe"]["epochs"]
        assert result["test_images"] == test_images and result["processes"] == 1
        assert 0.0 <= result["top1"] <= result["top5"] <= 100.0
        assert not Path(layout.finetune_checkpoint(model, dataset)).exists()
    table = pd.read_csv(layout.table("finetune", "csv")).set_index("dataset")
    assert list(table.index) == [dataset_title(dataset) for dataset in datasets]
    relative = table["frozen / fine-tuned (%)"]
    assert np.allclose(relative, 100 * table["frozen linear top-1"] / table["fine-tuned top-1"], atol=0.2)
    assert relative["L5"] < relative["IN-1K"] - FINETUNE_FALL, relative.to_dict()
    for extension in ("png", "pdf"):
        assert Path(layout.figure("finetune", extension)).stat().st_size > 0


def test_the_image_text_model_is_scored_zero_shot_on_every_dataset_and_the_open_set(demo_run, demo_config):
    """The demo's CLIP (random weights: chance, ~1 in 12) through the zero-shot jobs: names
    tables, classifiers, a result per dataset and the open set, and the zero-shot tables; the
    demo's CNNs have no text tower and no zero-shot result."""
    layout = Layout(str(demo_run / "results"))
    demo = demo_config["demo"]
    concepts, test_images = demo["concepts_per_dataset"], demo["concepts_per_dataset"] * demo["test_images_per_concept"]
    in1k_names = read_tsv(layout.concept_names("in1k"))
    assert len(in1k_names) == concepts and {row["rule"] for row in in1k_names} == {"open_clip"}
    open_names = read_tsv(layout.concept_names("open-set"))
    assert [row["dataset"] for row in open_names] == [d for d in demo_config["datasets"] for _ in range(concepts)]
    assert len({row["name"].casefold() for row in open_names}) == len(open_names)
    for dataset in demo_config["datasets"]:
        result = json.loads(Path(layout.zeroshot_result("demo_clip", dataset)).read_text())
        assert (result["n_classes"], result["n_test"]) == (concepts, test_images)
        assert 0.0 <= result["test_top1"] <= result["test_top5"] <= 100.0 and result["random_weights"]
        assert result["classifier"]["templates"] == demo_config["probes"]["zeroshot"]["templates"]
    open_set = json.loads(Path(layout.zeroshot_result("demo_clip", "open-set")).read_text())
    assert open_set["n_classes"] == concepts * len(demo_config["datasets"])
    for dataset, scores in open_set["datasets"].items():
        assert scores["test_top1"] + sum(scores["errors"].values()) == pytest.approx(100.0)
        assert sum(scores["predicted"].values()) == pytest.approx(100.0)
    assert not Path(layout.zeroshot_result("demo_cnn", "in1k")).exists()
    table = pd.read_csv(layout.table("zeroshot", "csv"))
    assert len(table) == len(demo_config["datasets"]) and table["linear top-1 (N = all)"].notna().all()
    assert len(pd.read_csv(layout.table("zeroshot_open_set", "csv"))) == len(demo_config["datasets"])
    for name in ("zeroshot", "zeroshot_vs_nshot"):
        assert Path(layout.figure(name, "png")).stat().st_size > 0


def test_captions_descriptions_and_the_describability_a_model_answers(demo_run, demo_config):
    """The demo's tiny CoCa captions L1's first test images of each concept; Eq. 4 picks each
    concept's and each model's k-means clusters' description among them; the demo's CLIP
    answers every dataset's describability tasks with the gloss, and L1's with the automatic
    description too, tabled per level."""
    layout = Layout(str(demo_run / "results"))
    captions_settings = demo_config["analyses"]["captions"]
    captioner, concepts = captions_settings["captioner"]["name"], demo_config["demo"]["concepts_per_dataset"]
    captions = read_tsv(layout.captions(captioner, "l1"))
    assert len(captions) == concepts * captions_settings["images_per_concept"]
    assert all(row["caption"].strip() for row in captions)
    descriptions = read_tsv(layout.auto_descriptions(captioner, "l1"))
    assert len(descriptions) == concepts and {row["captions"] for row in descriptions} == {"4"}
    by_group = {}
    for row in captions:
        by_group.setdefault(row["group"], []).append(row["caption"])
    assert all(row["description"] in by_group[row["group"]] for row in descriptions)
    for model in stage_model_names(demo_config, "analyses"):  # captions.models null: the analyses' models
        clusters = read_tsv(layout.auto_descriptions(captioner, "l1", model))
        assert clusters and all(row["group"].startswith("cluster-") for row in clusters)
    for dataset in demo_config["datasets"]:
        result = json.loads(Path(layout.analysis_result("demo_clip", dataset, "model_describability")).read_text())
        assert result["settings"]["sources"] == (["gloss", "auto"] if dataset == "l1" else ["gloss"])
        assert all(m["value"] is None or 0.0 <= m["value"] <= 100.0 for m in result["metrics"])
        assert not Path(layout.analysis_result("demo_cnn", dataset, "model_describability")).exists()
    assert len(pd.read_csv(layout.table("analyses_describability", "csv"))) > 0


def test_unseen_concept_detection_scores_every_model_and_level(demo_run, demo_config):
    """analyses.detection: per model, a row per probe seed of each probe score and one of each
    seed-free score per level, AUROC and FPR@95 in [0, 100] with IN-1K's and the level's test
    images; MCM only for the image-text model; a table per score with a row per model and level
    and both figures. No story is asserted: not measured on both product precisions."""
    layout = Layout(str(demo_run / "results"))
    demo, seeds = demo_config["demo"], [str(seed) for seed in demo_config["probes"]["seeds"]]
    levels = [dataset for dataset in demo_config["datasets"] if dataset != "in1k"]
    test_images = demo["concepts_per_dataset"] * demo["test_images_per_concept"]
    models = stage_model_names(demo_config, "analyses.detection")
    for model in models:
        rows = pd.read_csv(layout.detection_seeds(model), sep="\t", dtype={"seed": str}, keep_default_na=False)
        scores = set(rows["score"])
        assert scores == {"msp", "max_logit", "energy", "knn_distance"} | ({"mcm"} if model == "demo_clip" else set())
        for score, group in rows.groupby("score"):
            expected = seeds if score in ("msp", "max_logit", "energy") else [""]
            assert sorted(zip(group["seed"], group["dataset"])) == sorted((s, level) for s in expected for level in levels)
        assert rows["auroc"].between(0, 100).all() and rows["fpr95"].between(0, 100).all()
        assert (rows["n_known"] == test_images).all() and (rows["n_unknown"] == test_images).all()
        assert json.loads(Path(layout.detection_result(model)).read_text())["settings"]["k"] == \
            demo_config["analyses"]["detection"]["k"]
    for score in ("msp", "max_logit", "energy", "knn_distance", "mcm"):
        table = pd.read_csv(layout.table(f"detection_{score}", "csv"))
        scored = ["demo_clip"] if score == "mcm" else models
        assert sorted(zip(table["model"], table["dataset"])) == sorted((m, level.upper()) for m in scored for level in levels)
        assert table["auroc_mean"].between(0, 100).all()
    for name in ("detection", "detection_vs_recognition"):
        assert Path(layout.figure(name, "png")).stat().st_size > 0


def test_concept_accuracy_adds_up_to_the_probes_and_the_curve_is_drawn(demo_run, demo_config):
    """analyses.concepts: per model, dataset and seed, the concepts' top-1 and top-5 counts add up
    to the probe's own test top-1 and top-5 (within two test images: a bf16 product may flip a
    near tie); the per-concept table has every level's concepts with their similarity; the curve's
    slope lies in its interval; the figure is drawn. No story is asserted."""
    layout = Layout(str(demo_run / "results"))
    levels = [dataset for dataset in demo_config["datasets"] if dataset != "in1k"]
    concepts, per_test = demo_config["demo"]["concepts_per_dataset"], demo_config["demo"]["test_images_per_concept"]
    models = stage_model_names(demo_config, "analyses.concepts")
    for model in models:
        seeds = pd.read_csv(layout.concept_accuracy(model), sep="\t", dtype={"seed": str}, keep_default_na=False)
        assert set(levels) <= set(seeds["dataset"])
        for (dataset, seed), group in seeds.groupby(["dataset", "seed"]):
            result = json.loads(Path(layout.probe_result(model, dataset, "all", seed)).read_text())
            tolerance = 100.0 * 2 / group["n_test"].sum()
            for column, reported in (("top1_correct", "test_top1"), ("top5_correct", "test_top5")):
                assert 100.0 * group[column].sum() / group["n_test"].sum() == pytest.approx(result[reported], abs=tolerance)
    table = pd.read_csv(layout.table("concepts", "csv"), keep_default_na=False, na_values=[""])
    lin = table[table["dataset"].isin(levels)]
    assert len(lin) == len(models) * len(levels) * concepts and (lin["n_test"] == per_test).all()
    assert (lin["similarity"] == lin["lin_similarity"]).all() and (lin["top5_mean"] >= lin["top1_mean"]).all()
    curve = pd.read_csv(layout.table("concept_curve", "csv"))
    assert sorted(set(curve["model"])) == sorted(models) and (curve["n_concepts"] == len(levels) * concepts).all()
    bounded = curve.dropna(subset=["ci95_low", "ci95_high"])
    assert len(bounded) and (bounded["ci95_low"] <= bounded["ci95_high"]).all()
    slope = curve[curve["statistic"] == "slope"]
    assert ((slope["ci95_low"] <= slope["value"]) & (slope["value"] <= slope["ci95_high"])).all()
    outliers = pd.read_csv(layout.table("concept_outliers", "csv"))
    assert set(outliers["side"]) == {"above", "below"} and (outliers.groupby("model").size() <= 2 * 20).all()
    assert Path(layout.figure("concept_curve", "png")).stat().st_size > 0
