"""Opt-in protocol deviations (probes.two_stage): off by default, named in every result they
touch, resumable, and the paper's protocol untouched by their existence."""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, replace

import pytest
from test_probes_search import QUICK, blobs, probe_command, write_feature_file

from imagenet_cog.probes.search import ProbeJob, SearchSettings, probe_dataset, study_name

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_paper_protocol_is_the_default_and_its_study_names_are_unchanged():
    settings = SearchSettings()
    assert settings.two_stage is None and settings.deviations == []
    assert "two_stage" not in settings.defining() and "fused" not in settings.defining()
    # the name of a paper-protocol study is that of the settings before deviations existed
    before = {key: value for key, value in asdict(settings).items() if key not in ("two_stage", "fused")}
    assert settings.defining() == {k: v for k, v in before.items() if k not in ("kind", "hidden_width", "hidden_layers",
                                                                                "pca_dim")}
    train = blobs()
    deviating = replace(settings, two_stage=(10, 3))
    assert study_name(*train, deviating, "all", 22) != study_name(*train, settings, "all", 22)


def test_two_stage_retrains_the_best_short_trials_and_names_the_deviation(tmp_path):
    train, test = blobs(classes=5, per_class=40, spread=2.0), blobs(classes=5, per_class=10, spread=2.0, seed=4)
    settings = replace(QUICK, trials=6, epochs=10, two_stage=(3, 2))
    journal = str(tmp_path / "study.jsonl")
    result = probe_dataset(ProbeJob(*train, *test, settings=settings, device="cpu"), shots="all", seed=22, journal=journal)
    assert result["protocol_deviations"] == [{"name": "two_stage", "short_epochs": 3, "finalists": 2}]
    assert result["settings"]["two_stage"] == [3, 2] and len(result["trials"]) == 6
    short = sorted(result["trials"], key=lambda t: (-t["val_top1"], t["number"]))[:2]
    finalists = result["finalists"]
    assert [(t["lr"], t["weight_decay"]) for t in finalists] == [(t["lr"], t["weight_decay"]) for t in short]
    best = max(finalists, key=lambda t: t["val_top1"])
    assert result["best_params"] == {"lr": best["lr"], "weight_decay": best["weight_decay"]}
    assert result["val_top1"] == best["val_top1"]
    # run again (a killed job's journal): both stages resume, nothing is trained twice
    again = probe_dataset(ProbeJob(*train, *test, settings=settings, device="cpu"), shots="all", seed=22, journal=journal)
    assert again["study"]["resumed_trials"] == 6 and again["finalists"] == finalists
    assert (again["test_top1"], again["best_params"]) == (result["test_top1"], result["best_params"])
    paper = probe_dataset(ProbeJob(*train, *test, settings=replace(settings, two_stage=None), device="cpu"), shots="all", seed=22, journal=str(tmp_path / "paper.jsonl"))
    assert "protocol_deviations" not in paper and "finalists" not in paper


def test_the_probe_command_takes_and_checks_the_deviation(tmp_path):
    write_feature_file(tmp_path / "train.h5", *blobs())
    write_feature_file(tmp_path / "test.h5", *blobs(seed=4))
    subprocess.run(probe_command(tmp_path, trials=3, epochs=4, extra=("--two-stage", "2", "1")), check=True,
                   capture_output=True, timeout=120)
    assert json.loads((tmp_path / "result.json").read_text())["protocol_deviations"][0]["name"] == "two_stage"
    failed = subprocess.run(probe_command(tmp_path, trials=3, epochs=4, extra=("--two-stage", "4", "1")),
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and "short_epochs < epochs" in failed.stderr
