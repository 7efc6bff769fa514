"""A training run's checkpoints as a series (imagenet_cog.models.series): a pattern's or a map's
files, one model per step, duplicates by content, files still being written, the series
protocol, and each bad entry's message; the weights a job finds in its environment.

The files here are a few bytes each (their content is all a series reads); the workflow's dry
runs with real checkpoints are in tests/test_series_workflow.py.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml

from conftest import REPOSITORY
from imagenet_cog.models.registry import ModelSpec, checkpoint_sha256, file_sha256
from imagenet_cog.models.series import (
    STEP_UNITS,
    WEIGHTS_VARIABLE,
    SeriesError,
    SeriesProtocol,
    checkpoint_entry,
    checkpoint_model,
    expand_series,
    resolve_weights,
    series_of_model,
    series_weights,
    weights_variable,
)


def expanded(name, entry, settings, **options):
    return expand_series(name, entry, settings, file_sha256, **options)


SETTINGS = {"shots": ["all", 8], "seeds": 1, "trials": 10, "knn": True, "concepts": True,
            "full_protocol_steps": ["last"], "settle_seconds": 0}


def written(folder, name: str, content: bytes = b"weights", age: float = 3600.0) -> str:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    modified = path.stat().st_mtime - age
    os.utime(path, (modified, modified))
    return str(path)


def entry(checkpoints, **more) -> dict:
    return {"arch": "demo_cnn", "checkpoints": checkpoints, "step_unit": "epoch", "label": "DINO", **more}


def test_a_pattern_makes_a_model_per_step_in_step_order(tmp_path):
    for step in (100, 20, 3):
        written(tmp_path, f"run/checkpoint{step:04d}.pth", f"step {step}".encode())
    written(tmp_path, "run/checkpointlast.pth", b"latest")
    series, lacks = expanded("dino", entry(str(tmp_path / "run/checkpoint{step}.pth")), SETTINGS)
    assert lacks == []
    assert [checkpoint.step for checkpoint in series.checkpoints] == [3, 20, 100]
    assert [checkpoint.model for checkpoint in series.checkpoints] == ["dino@3", "dino@20", "dino@100"]
    assert series.checkpoints[0].path == str(tmp_path / "run/checkpoint0003.pth")
    # the field matches digits only: the other file the glob finds is passed over and said so
    assert series.passed_over == (str(tmp_path / "run/checkpointlast.pth"),)
    assert any("checkpointlast.pth passed over" in line for line in series.screen_lines())
    # full_protocol_steps [last]: the last step alone takes the full protocol
    assert [checkpoint.model for checkpoint in series.full()] == ["dino@100"]
    assert [checkpoint.model for checkpoint in series.reduced()] == ["dino@3", "dino@20"]


def test_a_map_names_each_step_and_relative_paths_are_under_checkpoints_dir(tmp_path):
    written(tmp_path, "a.pth", b"a")
    written(tmp_path, "b.pth", b"b")
    series, lacks = expanded("run", entry({10: "a.pth", "20": "b.pth"}), {**SETTINGS, "full_protocol_steps": [10]},
                                  checkpoints_dir=str(tmp_path))
    assert lacks == []
    assert [(checkpoint.step, checkpoint.path) for checkpoint in series.checkpoints] == [
        (10, str(tmp_path / "a.pth")), (20, str(tmp_path / "b.pth"))]
    assert [checkpoint.model for checkpoint in series.full()] == ["run@10"]


def test_a_relative_checkpoints_dir_is_taken_once_for_a_step_and_never_for_the_workflows_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    written(tmp_path, "ckpts/run/c1.pth", b"a")
    made = "results/demo/pretrained/demo_cnn.pt"
    series, lacks = expanded("run", entry({1: "run/c1.pth", 2: made}), SETTINGS, checkpoints_dir="ckpts",
                             made_by_workflow=[made])
    assert lacks == []
    for checkpoint, expected in zip(series.checkpoints, [str(tmp_path / "ckpts/run/c1.pth"), made]):
        spec = ModelSpec.from_config(checkpoint.model, checkpoint_entry(entry({}), checkpoint), "ckpts",
                                     made_by_workflow=[made])
        assert spec.weights == expected


def test_identical_content_is_evaluated_once_at_its_first_step(tmp_path):
    for step, content in ((1, b"x"), (2, b"y"), (3, b"x")):
        written(tmp_path, f"c{step}.pt", content)
    series, _ = expanded("s", entry(str(tmp_path / "c{step}.pt")), {**SETTINGS, "full_protocol_steps": []})
    assert [(checkpoint.model, checkpoint.same_as) for checkpoint in series.checkpoints] == [
        ("s@1", None), ("s@2", None), ("s@3", "s@1")]
    assert [checkpoint.model for checkpoint in series.evaluated()] == ["s@1", "s@2"]
    assert any("s@3 has the content of s@1" in line for line in series.screen_lines())


def test_a_full_step_identical_to_an_earlier_one_gives_the_earlier_one_the_full_protocol(tmp_path):
    for step, content in ((1, b"x"), (2, b"x")):
        written(tmp_path, f"c{step}.pt", content)
    series, _ = expanded("s", entry(str(tmp_path / "c{step}.pt")), SETTINGS)
    assert [(checkpoint.model, checkpoint.full_protocol) for checkpoint in series.checkpoints] == [
        ("s@1", True), ("s@2", False)]


def test_a_file_still_being_written_is_left_for_the_next_run(tmp_path):
    written(tmp_path, "c1.pt", b"old")
    young = written(tmp_path, "c2.pt", b"new", age=0)
    series, _ = expanded("s", entry(str(tmp_path / "c{step}.pt")), {**SETTINGS, "settle_seconds": 60})
    assert [checkpoint.step for checkpoint in series.checkpoints] == [1]
    assert series.unsettled == (young,)
    assert any("left for the next run" in line and young in line for line in series.screen_lines())


def test_a_checkpoint_folder_is_its_weights_and_settles_with_its_newest_file(tmp_path):
    """A transformers Trainer's checkpoint-<step> folders: each step's content is its
    model.safetensors (the optimizer's state beside it aside), and a folder whose newest file is
    young is left for the next run."""
    for step, weights in ((1, b"a"), (2, b"b"), (3, b"a")):
        written(tmp_path, f"run/checkpoint-{step}/model.safetensors", weights)
        written(tmp_path, f"run/checkpoint-{step}/optimizer.pt", f"state {step}".encode())
    written(tmp_path, "run/checkpoint-2/trainer_state.json", b"{}", age=0)
    for step in (1, 2, 3):
        old = (tmp_path / "run" / f"checkpoint-{step}" / "model.safetensors").stat().st_mtime
        os.utime(tmp_path / "run" / f"checkpoint-{step}", (old, old))
    series, lacks = expand_series("vit", entry(str(tmp_path / "run/checkpoint-{step}")),
                                  {**SETTINGS, "settle_seconds": 60}, checkpoint_sha256)
    assert lacks == [] and series.unsettled == (str(tmp_path / "run/checkpoint-2"),)
    assert [(checkpoint.step, checkpoint.same_as) for checkpoint in series.checkpoints] == [(1, None), (3, "vit@1")]


def test_a_workflow_made_checkpoint_need_not_exist_yet(tmp_path):
    made = "results/demo/pretrained/epoch-2.pt"
    series, lacks = expanded("demo", entry({2: made, 4: "results/demo/pretrained/demo_cnn.pt"}), SETTINGS,
                                  made_by_workflow={made, "results/demo/pretrained/demo_cnn.pt"})
    assert lacks == []
    assert [checkpoint.path for checkpoint in series.checkpoints] == [made, "results/demo/pretrained/demo_cnn.pt"]


def test_a_pattern_matching_no_file_names_the_pattern_and_its_folder(tmp_path):
    (tmp_path / "run").mkdir()
    pattern = str(tmp_path / "run/ckpt{step}.pth")
    series, lacks = expanded("dino", entry(pattern), SETTINGS)
    assert series.checkpoints == ()
    assert len(lacks) == 1
    assert pattern in lacks[0] and f"in {tmp_path / 'run'} (which exists)" in lacks[0]


def test_a_map_step_whose_file_is_missing_is_named(tmp_path):
    _, lacks = expanded("dino", entry({5: str(tmp_path / "gone.pth")}), SETTINGS)
    assert lacks == [f"model 'dino': the checkpoints of step 5 ({tmp_path / 'gone.pth'}) are not there; "
                     "fix their paths or wait for them."]
    # one line for the series: the first three named, the count of the others
    _, lacks = expanded("dino", entry({step: str(tmp_path / f"gone{step}.pth") for step in range(1, 6)}), SETTINGS)
    assert len(lacks) == 1 and "step 3 (" in lacks[0] and "step 4" not in lacks[0] and "and 2 more" in lacks[0]


@pytest.mark.parametrize("pattern, found", [
    ("runs/checkpoint.pth", "none"),
    ("runs/{epoch}/checkpoint{step}.pth", "{epoch}, {step}"),
    ("runs/checkpoint{epoch}.pth", "{epoch}"),
])
def test_a_pattern_needs_exactly_one_step_field(pattern, found):
    with pytest.raises(SeriesError, match="needs exactly one field") as error:
        expanded("dino", entry(pattern), SETTINGS)
    assert f"it has {found}" in str(error.value) and "config.yaml: model 'dino'" in str(error.value)


@pytest.mark.parametrize("step", ["last", 1.5, -2, True])
def test_a_map_step_that_is_not_an_integer_is_refused(step):
    with pytest.raises(SeriesError, match=r"checkpoints has step .* which is not a non-negative integer"):
        expanded("dino", entry({step: "a.pth"}), SETTINGS)


def test_two_files_of_one_step_are_refused(tmp_path):
    written(tmp_path, "c01.pt", b"a")
    written(tmp_path, "c1.pt", b"b")
    with pytest.raises(SeriesError, match="finds two files of step 1"):
        expanded("s", entry(str(tmp_path / "c{step}.pt")), SETTINGS)


def test_a_full_step_the_series_lacks_is_said(tmp_path):
    written(tmp_path, "c1.pt")
    series, _ = expanded("s", entry(str(tmp_path / "c{step}.pt")), {**SETTINGS, "full_protocol_steps": [9]})
    assert series.full() == () and series.unknown_full_steps == (9,)
    assert any("names step 9" in line for line in series.screen_lines())


def test_an_entry_overrides_the_series_section():
    protocol = SeriesProtocol.of(SETTINGS, {"trials": 4, "shots": ["all"]})
    assert (protocol.trials, protocol.shots, protocol.seeds) == (4, ("all",), 1)
    assert protocol.probe_trials(30) == 4 and protocol.probe_trials(3) == 3
    assert protocol.probe_seeds(["22", "37"]) == ["22"]
    assert protocol.deviation({"seeds": [22, 37], "trials": 30}) == {
        "name": "series", "shots": ["all"], "seeds": ["22"], "trials": 4, "knn_probe": True, "concepts": True}


def test_a_checkpoint_model_keeps_its_series_entry_and_takes_the_file_as_weights(tmp_path):
    written(tmp_path, "c7.pt")
    series, _ = expanded("s", entry(str(tmp_path / "c{step}.pt"), category="ssl"), SETTINGS)
    model = checkpoint_entry(entry("x", category="ssl", weights="pretrained"), series.checkpoints[0])
    assert model == {"arch": "demo_cnn", "label": "DINO@7", "category": "ssl", "weights": str(tmp_path / "c7.pt")}
    assert checkpoint_model("s", 7) == "s@7" and series_of_model("s@7") == ("s", 7)
    assert series_of_model("resnet50") is None


def test_a_job_finds_a_checkpoint_in_its_environment_by_its_model(tmp_path):
    written(tmp_path, "c7.pt")
    series, _ = expanded("s", entry(str(tmp_path / "c{step}.pt")), SETTINGS)
    environ = {WEIGHTS_VARIABLE: weights_variable([series])}
    assert json.loads(environ[WEIGHTS_VARIABLE]) == {"s@7": str(tmp_path / "c7.pt")}
    assert resolve_weights(series_weights("s@7"), environ) == str(tmp_path / "c7.pt")
    assert resolve_weights("random:3", environ) == "random:3"
    with pytest.raises(SeriesError, match="names no checkpoint of model s@8"):
        resolve_weights(series_weights("s@8"), environ)


def test_the_schema_knows_the_step_units():
    schema = yaml.safe_load((REPOSITORY / "workflow/schemas/config.schema.yaml").read_text())
    entry_schema = schema["properties"]["models"]["additionalProperties"]["properties"]
    assert tuple(entry_schema["step_unit"]["enum"]) == STEP_UNITS


def test_the_series_protocol_is_the_runs_with_the_deviation_named():
    from imagenet_cog.core.config_check import check_config, load_schema, read_yaml
    from imagenet_cog.results.protocol import digest, run_protocol, series_protocol

    config = check_config(read_yaml(REPOSITORY / "config.yaml"),
                          load_schema(REPOSITORY / "workflow/schemas/config.schema.yaml"))
    deviation = SeriesProtocol.of(config["series"]).deviation(config["probes"])
    shots = [str(shots) for shots in config["series"]["shots"]]
    assert deviation == {"name": "series", "shots": shots, "seeds": ["22"], "trials": 6, "knn_probe": True,
                         "concepts": True}
    protocol = series_protocol(config, deviation)
    run = run_protocol(config)
    assert protocol["probes"] == {**run["probes"], "shots": shots, "seeds": ["22"], "trials": 6}
    assert protocol["deviations"] == [deviation] and "deviations" not in run
    assert digest(protocol) != digest(run)


def stand_in_config(series_entry, final_weights, **changes) -> dict:
    """The config keys stand_in_models reads: the series and a configured model, 'final'."""
    config = {"models": {"dino": series_entry, "final": {"arch": "demo_cnn", "weights": final_weights, "label": "final"},
                         "random": {"arch": "demo_cnn", "weights": "random"}},
              "series": SETTINGS, "probes": {"shots": [1, 8, "all"], "kinds": ["linear", "knn"], "kind_models": {"knn": None}},
              "analyses": {"concepts": {"enabled": True, "models": None}}, "results": {"models": None},
              "checkpoints_dir": None}
    for section, values in changes.items():
        config[section] = {**config[section], **values}
    return config


def test_a_configured_model_of_the_same_content_stands_for_a_checkpoint(tmp_path):
    from imagenet_cog.models.series import stand_in_models

    for step in (10, 20):
        written(tmp_path, f"run/checkpoint{step}.pth", f"step {step}".encode())
    final = written(tmp_path, "final.pth", b"step 20")
    series_entry = entry(str(tmp_path / "run/checkpoint{step}.pth"))
    stand_ins = stand_in_models(series_entry, stand_in_config(series_entry, final), file_sha256, own_job_kinds=["knn"])
    assert stand_ins == {file_sha256(final): "final"}
    series, _ = expanded("dino", series_entry, SETTINGS, stand_ins=stand_ins)
    assert [(checkpoint.step, checkpoint.same_as) for checkpoint in series.checkpoints] == [(10, None), (20, "final")]
    assert [checkpoint.model for checkpoint in series.evaluated()] == ["dino@10"]
    # a model whose runs do not cover the series protocol, or another network, stands for nothing
    uncovered = stand_in_config(series_entry, final, probes={"shots": [1, "all"]})
    assert stand_in_models(series_entry, uncovered, file_sha256) == {}
    no_knn = stand_in_config(series_entry, final, probes={"kind_models": {"knn": ["random"]}})
    assert stand_in_models(series_entry, no_knn, file_sha256, own_job_kinds=["knn"]) == {}
    assert stand_in_models(series_entry, stand_in_config(series_entry, final, analyses={"concepts": {
        "enabled": True, "models": ["random"]}}), file_sha256) == {}
    assert stand_in_models({**series_entry, "arch": "resnet50"}, stand_in_config(series_entry, final), file_sha256) == {}
