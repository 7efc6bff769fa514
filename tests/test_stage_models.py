"""Each stage picks its models (a `models` list, null: every result model): a list
naming an unknown model, or a model without a text tower where a stage reads one, is refused
before any job with the key and the fix; the summary covers each kind for its own models."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import copy_workflow, refused_overlay
from imagenet_cog.core.layout import Layout
from imagenet_cog.results.summary import aggregate_command


@pytest.mark.parametrize(
    ("overlay", "key"),
    [
        ({"level_sets": {"models": ["demo_cnn", "resnet_typo"]}}, "level_sets.models"),
        ({"probes": {"kind_models": {"knn": ["resnet_typo"]}}}, "probes.kind_models.knn"),
        ({"analyses": {"captions": {"models": ["resnet_typo"]}}}, "analyses.captions.models"),
    ],
)
def test_a_stage_list_naming_an_unknown_model_is_refused_with_the_key_and_the_fix(tmp_path, overlay, key):
    workdir = copy_workflow(tmp_path / "copy")
    output = refused_overlay(workdir, overlay)
    assert f"{key} names resnet_typo, which 'models' does not define" in output
    assert "fix the list or add those models" in output
    assert not (workdir / "results").exists()


@pytest.mark.parametrize("section", [{"probes": {"zeroshot": {}}}, {"analyses": {"model_describability": {}}}])
def test_a_cnn_named_where_a_stage_reads_a_text_tower_is_refused_with_the_key_and_the_fix(tmp_path, section):
    (top, inner), = section.items()
    (name, _), = inner.items()
    workdir = copy_workflow(tmp_path / "copy")
    output = refused_overlay(workdir, {top: {name: {"models": ["demo_clip", "demo_cnn"]}}})
    assert f"{top}.{name}.models names demo_cnn, which has no text tower" in output
    assert "take it out of the list" in output
    assert not (workdir / "results").exists()


def write_result(layout: Layout, model: str, dataset: str, kind: str, top1: float) -> None:
    path = Path(layout.probe_result(model, dataset, "all", "22", kind))
    result = {"model": model, "dataset": dataset, "shots": "all", "seed": 22, "test_top1": top1, "test_top5": 100.0,
              "random_weights": False}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))


def test_the_summary_covers_each_kind_and_the_level_sets_for_their_own_models(tmp_path):
    layout = Layout(str(tmp_path))
    for model in ("cnn", "clip"):
        write_result(layout, model, "l1", "linear", 50.0)
    write_result(layout, "cnn", "l1", "mlp", 40.0)
    write_result(layout, "cnn", "wup-l1", "linear", 30.0)
    summary, seeds = tmp_path / "summary.csv", tmp_path / "seeds.csv"
    models = json.dumps({"cnn": {"weights": "cnn.pt"}, "clip": {"weights": "random"}})
    assert aggregate_command([
        "--results-root", str(tmp_path), "--models", models, "--datasets", "l1", "--shots", "all", "--seeds", "22",
        "--kinds", "linear", "mlp", "--kind-models", "mlp=cnn", "--level-set-datasets", "wup-l1",
        "--level-set-shots", "all", "--level-set-seeds", "22", "--level-set-models", "cnn",
        "--output", str(summary), "--seed-output", str(seeds),
    ]) == 0
    rows = pd.read_csv(summary)
    cells = sorted(zip(rows["model"], rows["probe"], rows["dataset"]))
    assert cells == [("clip", "linear", "l1"), ("cnn", "linear", "l1"), ("cnn", "linear", "wup-l1"), ("cnn", "mlp", "l1")]
    assert rows["complete"].all()


def test_every_kind_on_the_grid_besides_linear_has_a_models_list():
    import yaml

    from conftest import REPOSITORY
    from imagenet_cog.probes.kinds import KINDS

    schema = yaml.safe_load((REPOSITORY / "workflow" / "schemas" / "config.schema.yaml").read_text())
    listed = schema["properties"]["probes"]["properties"]["kind_models"]["properties"]
    assert list(listed) == [name for name, kind in KINDS.items() if name != "linear" and not kind.off_grid]
