"""The leaderboard's tables, ranks with ties, protocol digests and the merge of runs, on small
synthetic results folders (the demo's page is tested in tests/test_browser_leaderboard.py)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from imagenet_cog.core.config_check import check_config, load_schema, read_yaml
from imagenet_cog.core.layout import Layout
from imagenet_cog.models.pretraining import NONE, WEB, Catalogue, Pretraining, pretraining_json
from imagenet_cog.results.leaderboard import leaderboard_command, results_leaderboard_command
from imagenet_cog.results.leaderboard_cells import PUBLISHED_PREFIX, off_grid_cells
from imagenet_cog.results.leaderboard_page import wide_columns
from imagenet_cog.results.leaderboard_ranks import rank_group, slopes, with_class_ranks
from imagenet_cog.results.protocol import PAPER_DIGEST, PAPER_PROTOCOL, digest, run_protocol
from imagenet_cog.results.statistics import TOP1_RANGE, mean_interval
from imagenet_cog.results.summary import SUMMARY_COLUMNS

REPOSITORY = Path(__file__).resolve().parents[1]
PUBLISHED = REPOSITORY / "resources" / "published_top1.tsv"
DATASETS = ["in1k", "l1", "l2", "l3", "l4", "l5"]
SEEDS = ["22", "37", "45"]
MODELS = {
    "resnet": {"label": "ResNet", "category": "baseline", "weights": "pretrained", "paper_name": "ResNet50"},
    "strong": {"label": "Strong", "category": "self-supervision", "weights": "pretrained"},
    "twin": {"label": "Twin", "category": "self-supervision", "weights": "pretrained"},
}
CATALOGUE = Catalogue.read(REPOSITORY / "resources" / "pretraining_datasets.tsv",
                           REPOSITORY / "resources" / "pretraining_releases.tsv")
# per model: top-1 on IN-1K, falling by this many points per level; seed noise added
TOP1 = {"resnet": (70.0, 6.0), "strong": (80.0, 4.0), "twin": (80.2, 4.0)}
PROTOCOL = {"images": "demo", "probes": {"shots": ["4", "all"], "seeds": SEEDS}}
# the releases the synthetic probe results say they were computed with: one stack, and one other
STACK = {"imagenet_cog": "0.1.0", "torch": "2.14.1", "numpy": "2.4.6"}
OTHER_STACK = {**STACK, "torch": "2.15.0"}


def seed_rows(model: str, skip: tuple = ()) -> list[dict]:
    start, fall = TOP1[model]
    rng = np.random.default_rng(len(model))
    rows = []
    for position, dataset in enumerate(DATASETS):
        for shots, offset in (("4", -20.0), ("all", 0.0)):
            if (dataset, shots) in skip:
                continue
            for seed in SEEDS:
                top1 = start - fall * position + offset + float(rng.normal(0, 0.3))
                rows.append({"model": model, "dataset": dataset, "shots": shots, "seed": seed,
                             "test_top1": top1, "test_top5": min(top1 + 10, 100.0), "probe": "linear"})
    return rows


def summary_of(seeds: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (model, dataset, shots), group in seeds.groupby(["model", "dataset", "shots"], sort=False):
        values = group["test_top1"].to_numpy()
        low, high = mean_interval(values, TOP1_RANGE)
        rows.append({"model": model, "label": MODELS[model]["label"], "category": MODELS[model]["category"],
                     "random_weights": False, "probe": "linear", "dataset": dataset, "shots": shots,
                     "mean": values.mean(), "std": values.std(), "ci95_low": low, "ci95_high": high,
                     "top5_mean": 0.0, "top5_std": 0.0, "n_seeds": len(values), "expected_seeds": len(SEEDS),
                     "complete": True, "missing_seeds": "", "protocol_deviations": ""})
    return pd.DataFrame(rows, columns=[*SUMMARY_COLUMNS, "protocol_deviations"])


def concept_table(models: list[str], shift: dict) -> pd.DataFrame:
    """Per model and level, 20 concepts whose top-1 falls with their Lin similarity."""
    rng = np.random.default_rng(0)
    rows = []
    for position, dataset in enumerate(DATASETS[1:]):
        for number in range(20):
            similarity = 0.9 - 0.1 * position - 0.004 * number
            base = 100 * similarity + float(rng.normal(0, 5))
            rows += [{"model": model, "dataset": dataset, "wnid": f"n{position}{number:04d}",
                      "lin_similarity": similarity, "top1_mean": base + shift[model]} for model in models]
    return pd.DataFrame(rows)


def pretraining_argument(models: list[str], exposures: dict[str, str]) -> str:
    """--pretraining: each model's exposure (none unless named), the paper's from the shipped table."""
    data = {NONE: ("in1k",), WEB: ("wit400m",)}
    return pretraining_json({model: Pretraining(data[exposures.get(model, NONE)], exposures.get(model, NONE))
                             for model in models},
                            {name: CATALOGUE.of_paper(name) for name in CATALOGUE.papers})


def write_probe_results(layout: Layout, seeds: pd.DataFrame, stacks: dict[str, dict]) -> None:
    """Each seed row's probe result, as far as the leaderboard reads it: its model's stack."""
    for row in seeds.to_dict("records"):
        path = Path(layout.probe_result(row["model"], row["dataset"], row["shots"], row["seed"], row["probe"]))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**row, "random_weights": False, "versions": stacks.get(row["model"], STACK)}))


def write_run(root: Path, models: list[str], protocol: dict, skip: dict | None = None,
              concepts: bool = False, exposures: dict[str, str] | None = None,
              stacks: dict[str, dict] | None = None) -> list[str]:
    """A results folder with the tables the leaderboard reads (``stacks``: a model's results'
    releases, other than ``STACK``); the command's arguments (the models' exposures none unless
    ``exposures`` says)."""
    layout = Layout(str(root))
    Path(layout.table("summary", "csv")).parent.mkdir(parents=True)
    seeds = pd.DataFrame([row for model in models for row in seed_rows(model, (skip or {}).get(model, ()))])
    seeds.to_csv(layout.seed_results(), index=False)
    write_probe_results(layout, seeds, stacks or {})
    summary_of(seeds).to_csv(layout.results_summary(), index=False)
    arguments = ["--results-root", str(root), "--summary", layout.results_summary(),
                 "--seed-results", layout.seed_results(), "--published", str(PUBLISHED),
                 "--models", json.dumps({model: MODELS[model] for model in models}),
                 "--protocol", json.dumps(protocol), "--pretraining", pretraining_argument(models, exposures or {})]
    if concepts:
        concept_table(models, {"resnet": 0.0, "strong": 3.0, "twin": 3.5}).to_csv(layout.table("concepts", "csv"), index=False)
        curve = pd.DataFrame([{"model": model, "statistic": "slope", "value": 1.0 + index, "ci95_low": 0.5 + index,
                               "ci95_high": 1.5 + index} for index, model in enumerate(models)])
        curve.to_csv(layout.table("concept_curve", "csv"), index=False)
        arguments += ["--concepts", layout.table("concepts", "csv"), "--concept-curve", layout.table("concept_curve", "csv")]
    return arguments


def long_table(root: Path) -> pd.DataFrame:
    table = pd.read_csv(Layout(str(root)).table("leaderboard", "csv"), dtype={"shots": str, "paper_name": str})
    return table.fillna({"compared_by": ""})


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("run") / "results"
    assert results_leaderboard_command(write_run(root, list(MODELS), PROTOCOL, {"twin": (("l5", "all"),)},
                                                 concepts=True, stacks={"twin": OTHER_STACK})) == 0
    return root


def test_the_page_names_the_releases_each_protocols_results_were_computed_with(run):
    """Each distinct stack of the run's probe results, with its number of results, the most first."""
    results = {model: len(seed_rows(model, (("l5", "all"),) if model == "twin" else ())) for model in MODELS}
    expected = [{"results": results["resnet"] + results["strong"], "versions": STACK},
                {"results": results["twin"], "versions": OTHER_STACK}]
    layout = Layout(str(run))
    assert json.loads(Path(layout.table("leaderboard_stacks", "json")).read_text()) == {
        digest(PROTOCOL): expected}
    page = Path(layout.leaderboard_page()).read_text()
    data = json.loads(page.split('id="leaderboard-data">', 1)[1].split("</script>", 1)[0])
    assert data["stacks"] == {digest(PROTOCOL): expected} and 'id="stacks"' in page


def test_every_reproduced_number_is_the_summarys_and_the_papers_31_models_are_beside_them(run):
    long, summary = long_table(run), pd.read_csv(Layout(str(run)).results_summary(), dtype={"shots": str})
    top1 = long[(long["measure"] == "top1") & (long["provenance"] == "reproduced")]
    joined = top1.merge(summary, on=["model", "dataset", "shots"], suffixes=("", "_summary"))
    assert len(joined) == len(summary) == len(top1)
    for column, source in (("value", "mean"), ("ci95_low", "ci95_low"), ("ci95_high", "ci95_high")):
        assert np.allclose(joined[column], joined[source])
    published = long[long["provenance"] == "published"]
    assert published["model"].nunique() == 31
    assert set(published["protocol"]) == {PAPER_DIGEST} and not (published["protocol"] == digest(PROTOCOL)).any()
    assert set(published["category"]) == {"baseline", "architecture", "self-supervision", "regularization", "data"}
    paper = pd.read_csv(PUBLISHED, sep="\t", comment="#", dtype={"shots": str})
    resnet = paper[(paper["model"] == "ResNet50") & (paper["dataset"] == "l3") & (paper["shots"] == "all")]["mean"].item()
    ours = top1[(top1["model"] == "resnet") & (top1["dataset"] == "l3") & (top1["shots"] == "all")].iloc[0]
    assert ours["published_value"] == resnet and ours["published_diff"] == pytest.approx(ours["value"] - resnet)
    assert top1.loc[top1["model"] == "strong", "published_value"].isna().all()


def test_a_missing_cell_is_empty_never_zero(run):
    long = long_table(run)
    assert long[(long["model"] == "twin") & (long["dataset"] == "l5") & (long["shots"] == "all")].empty
    markdown = Layout(str(run)).table("leaderboard", "md")
    twin = next(line for line in Path(markdown).read_text().splitlines() if line.startswith("| Twin"))
    header = next(line for line in Path(markdown).read_text().splitlines() if line.startswith("| Model"))
    cells = dict(zip([cell.strip() for cell in header.split("|")], [cell.strip() for cell in twin.split("|")]))
    assert cells["L5 top-1, N = all"] == ""
    l4 = long[(long["model"] == "twin") & (long["dataset"] == "l4") & (long["shots"] == "all") & (long["measure"] == "top1")]
    assert cells["L4 top-1, N = all"].startswith(f"{l4['value'].item():.1f} [")


def test_the_drop_is_each_seeds_first_level_minus_its_last(run):
    long, seeds = long_table(run), pd.read_csv(Layout(str(run)).seed_results(), dtype={"shots": str, "seed": str})
    at_all = seeds[(seeds["model"] == "resnet") & (seeds["shots"] == "all")].pivot(index="seed", columns="dataset",
                                                                                   values="test_top1")
    drop = long[(long["model"] == "resnet") & (long["measure"] == "drop_points")].iloc[0]
    assert drop["value"] == pytest.approx((at_all["l1"] - at_all["l5"]).mean())
    assert drop["ci95_low"] < drop["value"] < drop["ci95_high"]


def test_paired_concepts_tell_apart_what_seeds_cannot(run):
    """Twin is 0.5 points above Strong on every concept of L1 (paired: apart) while their seeds'
    top-1 overlap on IN-1K, where no concepts exist (tied over seeds)."""
    long = long_table(run)
    l1 = long[(long["measure"] == "top1") & (long["dataset"] == "l1") & (long["shots"] == "all")
              & (long["provenance"] == "reproduced")].set_index("model")
    assert l1.loc["twin", "compared_by"] == "concepts" or l1.loc["strong", "compared_by"] == "concepts"
    assert l1.loc["strong", "tie_first"] != l1.loc["twin", "tie_first"]
    in1k = long[(long["measure"] == "top1") & (long["dataset"] == "in1k") & (long["shots"] == "all")
                & (long["provenance"] == "reproduced")].set_index("model")
    assert in1k.loc[["strong", "twin"], "tie_first"].nunique() == 1 and in1k.loc["resnet", "rank"] == 3
    assert in1k.loc["resnet", "tie_first"] == 3 and set(in1k["compared_by"]) == {"", "seeds"}


def test_ranks_are_within_a_protocol():
    """Three models of one protocol and two of another: each protocol's ranks start at 1."""
    cells = pd.DataFrame({"model": list("abcde"), "value": [90.0, 89.9, 50.0, 70.0, 60.0],
                          "std_error": [1.0, 1.0, 1.0, 0.1, 0.1], "n_seeds": [5] * 5, "measure": "top1"})
    first = rank_group(cells.iloc[:3], pd.DataFrame(columns=["model", "unit", "key", "value", "x"]), True, 0)
    assert first["rank"].tolist() == [1, 2, 3] and first["tie_first"].tolist() == [1, 1, 3]
    assert first["tie_last"].tolist() == [2, 2, 3] and first["compared_by"].tolist() == ["", "standard errors"] * 1 + ["standard errors"]
    second = rank_group(cells.iloc[3:], pd.DataFrame(columns=["model", "unit", "key", "value", "x"]), True, 0)
    assert second["rank"].tolist() == [1, 2] and second["tie_first"].tolist() == [1, 2]


def test_a_kind_off_the_grid_has_one_value_and_wilsons_interval_the_open_set_none(tmp_path):
    closed, opened = tmp_path / "closed.json", tmp_path / "open.json"
    closed.write_text(json.dumps({"model": "clip", "dataset": "l5", "probe": "zeroshot", "test_top1": 50.0, "n_test": 100}))
    opened.write_text(json.dumps({"model": "clip", "dataset": "open-set", "probe": "zeroshot", "datasets": {}}))
    [cell] = off_grid_cells([closed, opened])
    assert cell["measure"] == "zeroshot_top1" and cell["value"] == 50.0 and cell["n_seeds"] == 1
    assert (cell["ci95_low"], cell["ci95_high"]) == pytest.approx((40.38, 59.62), abs=0.01)
    assert cell["std_error"] == pytest.approx(5.0)


def test_the_few_shot_column_is_an_n_the_runs_models_have():
    """The paper's rows have N = 4; a run of N = 2 and all shows its own N = 2 beside N = all."""
    cells = pd.DataFrame({"model": ["ours", "ours", "paper:x", "paper:x"], "dataset": "l1", "measure": "top1",
                          "shots": ["2", "all", "4", "all"]})
    columns = wide_columns(cells, ["ours"], ["l1"], ["l1"])
    assert [column["key"] for column in columns] == ["top1|l1|all", "top1|l1|2"]


def test_the_bootstrap_slope_is_least_squares():
    rng = np.random.default_rng(1)
    x, y = rng.random((4, 30)), rng.random((4, 30))
    assert np.allclose(slopes(x, y), [np.polyfit(a, b, 1)[0] for a, b in zip(x, y)])


def merged_config(*files: str) -> dict:
    def merge(base, over):
        out = copy.deepcopy(base)
        for key, value in over.items():
            out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        return out

    config = read_yaml(REPOSITORY / "config.yaml")
    for name in files:
        config = merge(config, read_yaml(REPOSITORY / name))
    config["models"] = {name: entry for name, entry in config["models"].items() if entry is not None}
    return check_config(config, load_schema(REPOSITORY / "workflow" / "schemas" / "config.schema.yaml"))


def test_the_real_config_is_the_papers_protocol_and_the_demo_is_not():
    assert run_protocol(merged_config("config/imagenet.yaml")) == PAPER_PROTOCOL
    # the add-on files switch on stages outside the protocol: a run with them is the paper's
    add_ons = ["config/level_sets.yaml", "config/balanced.yaml", "config/label_audit.yaml", "config/finetune.yaml",
               "config/analyses.yaml"]
    assert run_protocol(merged_config("config/imagenet.yaml", *add_ons)) == PAPER_PROTOCOL
    assert digest(run_protocol(merged_config())) != PAPER_DIGEST
    shorter = merged_config("config/imagenet.yaml")
    shorter["probes"]["epochs"] = 50
    assert digest(run_protocol(shorter)) != PAPER_DIGEST


def test_a_merge_leaves_out_or_marks_the_rows_of_another_protocol(run, tmp_path, capsys):
    """The module's run (resnet, strong, twin) beside a run of another protocol (other seeds)
    whose model is also named twin."""
    first, second = run, tmp_path / "second"
    other = {**PROTOCOL, "probes": {**PROTOCOL["probes"], "seeds": ["1", "2", "3"]}}
    assert results_leaderboard_command(write_run(second, ["twin"], other)) == 0
    capsys.readouterr()
    assert leaderboard_command([str(first), str(second), "--output", str(tmp_path / "merged")]) == 0
    said = capsys.readouterr().out
    assert f"left out, another protocol: Twin ({second}, protocol {digest(other)})" in said
    long = long_table(tmp_path / "merged")
    assert set(long.loc[long["provenance"] == "reproduced", "model"]) == {"resnet", "strong", "twin"}
    assert long[long["provenance"] == "published"]["model"].nunique() == 31 and not long["other_protocol"].all()
    assert (long[long["model"] == "twin"]["protocol"] == digest(PROTOCOL)).all()
    assert "Left out, another protocol: Twin" in Path(Layout(str(tmp_path / "merged")).leaderboard_page()).read_text()
    stacks = json.loads(Path(Layout(str(tmp_path / "merged")).table("leaderboard_stacks", "json")).read_text())
    assert set(stacks) == {digest(PROTOCOL)}  # the left-out run's stack with its rows

    assert leaderboard_command([str(first), str(second), "--output", str(tmp_path / "kept"),
                                "--keep-other-protocols"]) == 0
    kept = long_table(tmp_path / "kept")
    renamed = f"twin@{second.name}"
    other_twin = kept[(kept["model"] == renamed) & (kept["measure"] == "top1")]
    assert set(other_twin["label"]) == {f"Twin ({second.name})"}
    assert len(other_twin) and other_twin["other_protocol"].all() and (other_twin["rank"] == 1).all()
    stacks = json.loads(Path(Layout(str(tmp_path / "kept")).table("leaderboard_stacks", "json")).read_text())
    assert set(stacks) == {digest(PROTOCOL), digest(other)}
    ours = kept[kept["model"].isin(["resnet", "strong", "twin"])]
    assert not ours["other_protocol"].any()
    assert kept[kept["model"] == PUBLISHED_PREFIX + "ResNet50"]["other_protocol"].all()
    in1k = ours[(ours["dataset"] == "in1k") & (ours["shots"] == "all") & (ours["measure"] == "top1")]
    assert sorted(in1k["rank"]) == [1, 2, 3]  # ranked among the first run's rows, not with the other twin

    Path(Layout(str(second)).table("leaderboard_samples", "csv")).unlink()
    with pytest.raises(SystemExit, match="leaderboard_samples.csv; make its leaderboard first"):
        leaderboard_command([str(first), str(second), "--output", str(tmp_path / "refused")])


def test_each_exposure_class_is_ranked_within_itself_and_rank_all_ranks_them_together():
    """Within one protocol: two none models and a web model above both. The web model leads its own
    class, the none models rank 1 and 2 among themselves; the *_all columns rank the three as one."""
    cells = pd.DataFrame({"model": ["a", "b", "c"], "dataset": "l5", "measure": "top1", "shots": "all",
                          "value": [60.0, 90.0, 50.0], "std_error": [0.1] * 3, "n_seeds": [5] * 3})
    models = pd.DataFrame({"model": ["a", "b", "c"], "protocol": "p", "exposure": [NONE, WEB, NONE]})
    samples = pd.DataFrame(columns=["model", "dataset", "measure", "shots", "unit", "key", "value", "x"])
    ranked = with_class_ranks(cells, samples, models).set_index("model")
    assert ranked.loc[["a", "c", "b"], "rank"].tolist() == [1, 2, 1]
    assert ranked.loc[["b", "a", "c"], "rank_all"].tolist() == [1, 2, 3]
    assert ranked.loc["a", "compared_by"] == "" and ranked.loc["a", "compared_by_all"] == "standard errors"


def test_a_web_model_and_the_papers_four_web_models_are_ranked_in_their_class(tmp_path):
    """Strong declared web: ranked alone in its class, while Twin and ResNet rank among the none
    models; the paper's d- rows rank 1 to 4 among themselves, and among all 31 in rank_all."""
    root = tmp_path / "results"
    assert results_leaderboard_command(write_run(root, list(MODELS), PROTOCOL, exposures={"strong": WEB})) == 0
    long = long_table(root)
    l1 = long[(long["measure"] == "top1") & (long["dataset"] == "l1") & (long["shots"] == "all")].set_index("model")
    assert l1.loc["strong", "exposure"] == WEB and l1.loc["strong", "rank"] == 1 and l1.loc["strong", "pretraining_data"] == "wit400m"
    assert l1.loc[["twin", "resnet"], "rank"].tolist() == [1, 2] and l1.loc[["strong", "twin", "resnet"], "rank_all"].tolist() == [2, 1, 3]
    web = [PUBLISHED_PREFIX + name for name in ("d-Semi-Sup.", "d-Semi-Weakly-Sup.", "d-CLIP", "d-MoPro")]
    published = l1[l1["provenance"] == "published"]
    assert set(published.index[published["exposure"] == WEB]) == set(web)
    assert sorted(published.loc[web, "rank"]) == [1, 2, 3, 4]
    assert sorted(published.loc[published["exposure"] == NONE, "rank"]) == list(range(1, 28))
    assert sorted(published["rank_all"]) == list(range(1, 32))
    lines = Path(Layout(str(root)).table("leaderboard", "md")).read_text().splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| Model")]
    exposures = [row.split("|")[2].strip() for row in rows]
    assert exposures[:3] == [NONE, NONE, WEB]  # the run's protocol first, the premise's class first
    assert any("not directly comparable" in line for line in lines)


def test_a_merge_refuses_a_leaderboard_written_before_its_exposure_column(run, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(run, old)
    csv = Path(Layout(str(old)).table("leaderboard", "csv"))
    pd.read_csv(csv).drop(columns=["exposure", "pretraining_data"]).to_csv(csv, index=False)
    with pytest.raises(SystemExit, match="has no exposure column .*make it again"):
        leaderboard_command([str(run), str(old), "--output", str(tmp_path / "merged")])
