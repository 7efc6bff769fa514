"""The fine-tuning control (imagenet_cog.finetune): recipe, rows, augmentation, resumption
after a kill, two processes through torchrun, and the table and Fig. 6."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import make_world
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.undecodable import UndecodableImagesError
from imagenet_cog.features.extract import SplitImages
from imagenet_cog.finetune import train as finetune_train
from imagenet_cog.finetune.data import TrainImages, epoch_rows, steps_per_epoch
from imagenet_cog.finetune.recipe import Recipe
from imagenet_cog.finetune.results import compared, finetune_results_command, read_results
from imagenet_cog.finetune.train import FinetuneJob, run_finetune
from imagenet_cog.models.registry import REGISTRY, ModelSpec

pytestmark = pytest.mark.heavy

TINY_RECIPE = Recipe(epochs=3, batch_size=4, crop_scale=(0.35, 1.0))


def test_the_schedule_warms_up_then_decays_to_zero_and_batch_norm_follows_the_reference():
    recipe = Recipe(warmup_epochs=1.0)
    steps, total = 10, 50
    factors = [recipe.lr_factor(step, total, steps) for step in range(total)]
    assert factors[:10] == pytest.approx([(step + 1) / 10 for step in range(10)])
    assert factors[10] == pytest.approx(1.0)
    assert all(later <= earlier for earlier, later in zip(factors[10:], factors[11:]))
    assert recipe.lr_factor(total, total, steps) == pytest.approx(0.0, abs=1e-12)
    assert Recipe(schedule="constant").lr_factor(37, total, steps) == 1.0
    # decay max(1 - 10/s, 0.9): torch's momentum min(10/s, 0.1)
    assert recipe.batch_norm_momentum(2860) == pytest.approx(10 / 2860)
    assert recipe.batch_norm_momentum(50) == pytest.approx(0.1)
    assert Recipe(bn_momentum=0.01).batch_norm_momentum(50) == 0.01
    with pytest.raises(ValueError, match="unknown settings lr"):
        Recipe.from_config({"lr": 0.1})
    assert Recipe.from_config({"crop_scale": [0.5, 1]}).crop_scale == (0.5, 1.0)


def test_every_process_gets_its_own_whole_batches_of_a_seeded_order():
    count, world, batch = 103, 3, 4
    shares = [epoch_rows(count, 0, 2, rank, world, batch) for rank in range(world)]
    assert all(len(share) == steps_per_epoch(count, world, batch) * batch == 32 for share in shares)
    assert len(set().union(*map(set, shares))) == 96 and set().union(*map(set, shares)) <= set(range(count))
    assert shares[1] == epoch_rows(count, 0, 2, 1, world, batch)
    assert epoch_rows(count, 0, 3, 0, world, batch) != shares[0]
    assert epoch_rows(count, 1, 2, 0, world, batch) != shares[0]


def test_augmentation_is_a_function_of_seed_epoch_and_row_alone(tmp_path):
    make_world(tmp_path, concepts=1, train=3, test=0)
    paths = [f"n00000000/n00000000_{number}.JPEG" for number in range(3)]
    preprocessing = REGISTRY["demo_cnn"].preprocessing

    def images(seed: int, epoch: int) -> TrainImages:
        rows = TrainImages(tmp_path / "images", paths, preprocessing, None, Recipe(), seed)
        rows.epoch = epoch
        return rows

    first = images(0, 0)[1][0]
    torch.manual_seed(123)  # the process's own random state changes nothing
    assert torch.equal(images(0, 0)[1][0], first)
    assert first.shape == (3, preprocessing.size, preprocessing.size) and first.dtype == torch.uint8
    assert not torch.equal(images(0, 1)[1][0], first)
    assert not torch.equal(images(1, 0)[1][0], first)


def tiny_job(root: Path, output: Path, seed: int = 0, recipe: Recipe = TINY_RECIPE) -> FinetuneJob:
    table = root / "splits.tsv"
    if not table.exists():
        make_world(root, concepts=3, train=6, test=3)
    images = {split: SplitImages(table, root / "images", "l1", split) for split in ("train", "test")}
    return FinetuneJob(ModelSpec("tiny", "demo_cnn", "random:3"), images["train"], images["test"], recipe, seed,
                       output.with_suffix(".checkpoint.pt"), output, device="cpu", threads=1)


WRITE_CHECKPOINT = finetune_train.write_checkpoint


def recording(states: list, killed_after: int | None = None):
    """The job's checkpoint writer, keeping a copy of each epoch's network; with
    ``killed_after``, the job is interrupted once that epoch's checkpoint is written."""

    def write(path, state):
        WRITE_CHECKPOINT(path, state)
        states.append({"epoch": state["epoch"], "network": copy.deepcopy(state["network"])})
        if state["epoch"] == killed_after:
            raise KeyboardInterrupt  # as a SIGINT or a preemption between epochs

    return write


def test_a_killed_job_resumes_to_what_the_uninterrupted_job_computes(tmp_path, monkeypatch, one_torch_thread):
    states: list = []
    monkeypatch.setattr(finetune_train, "write_checkpoint", recording(states))
    whole = run_finetune(tiny_job(tmp_path, tmp_path / "whole.json"))
    uninterrupted = states[-1]["network"]
    assert not (tmp_path / "whole.checkpoint.pt").exists()  # removed once the result is written
    assert whole["resumed_after_epoch"] == 0 and len(whole["history"]) == 3

    job = tiny_job(tmp_path, tmp_path / "resumed.json")
    monkeypatch.setattr(finetune_train, "write_checkpoint", recording(states, killed_after=1))
    with pytest.raises(KeyboardInterrupt):
        run_finetune(job)
    assert job.checkpoint.is_file() and not job.output.exists()
    # a kill -9 during a checkpoint write leaves its temporary file: the resumed job removes it
    cut_write = job.checkpoint.with_name(f".{job.checkpoint.name}.k1ll3d.partial")
    cut_write.write_bytes(b"half an epoch")
    states.clear()
    monkeypatch.setattr(finetune_train, "write_checkpoint", recording(states))
    resumed = run_finetune(job)
    assert resumed["resumed_after_epoch"] == 1
    assert [state["epoch"] for state in states] == [2, 3]
    assert [epoch["loss"] for epoch in resumed["history"]] == [epoch["loss"] for epoch in whole["history"]]
    for name, tensor in uninterrupted.items():
        assert torch.equal(states[-1]["network"][name], tensor), name
    assert (resumed["top1"], resumed["top5"]) == (whole["top1"], whole["top5"])
    assert json.loads(job.output.read_text())["top1"] == whole["top1"]
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".")) == []


def test_a_checkpoint_of_other_settings_is_set_aside(tmp_path, one_torch_thread):
    job = tiny_job(tmp_path, tmp_path / "seed0.json", recipe=Recipe(epochs=1, batch_size=4))
    other = tiny_job(tmp_path, tmp_path / "seed0.json", seed=1, recipe=Recipe(epochs=1, batch_size=4))
    finetune_train.write_checkpoint(job.checkpoint, {"fingerprint": "written for another run", "epoch": 1})
    result = run_finetune(other)
    assert result["resumed_after_epoch"] == 0 and result["seed"] == 1
    assert 0.0 <= result["top1"] <= result["top5"] <= 100.0 and result["test_images"] == 9


def test_too_few_images_for_one_batch_is_refused_with_the_setting(tmp_path):
    job = tiny_job(tmp_path, tmp_path / "big.json", recipe=Recipe(epochs=1, batch_size=64))
    with pytest.raises(ValueError, match=r"18 training images.*finetune.recipe.batch_size 64"):
        run_finetune(job)


def test_a_crop_range_torch_refuses_fails_the_job_and_writes_no_result(tmp_path):
    job = tiny_job(tmp_path, tmp_path / "reversed.json", recipe=Recipe(epochs=1, batch_size=4, crop_scale=(1.0, 0.35)))
    with pytest.raises(RuntimeError, match="expects to return a \\[from, to\\) range"):
        run_finetune(job)
    assert not job.output.exists()


def test_an_undecodable_training_image_fails_the_job_by_default_and_is_counted_when_allowed(tmp_path):
    corrupt = "n00000001/n00000001_2.JPEG"
    make_world(tmp_path, concepts=3, train=4, test=3, corrupt=(corrupt,))  # whole batches: every row read
    job = tiny_job(tmp_path, tmp_path / "strict.json", recipe=Recipe(epochs=1, batch_size=4))
    with pytest.raises(UndecodableImagesError, match=rf"1 of the 12 images of l1's training split \(epoch 1\)(.|\n)*{corrupt}"):
        run_finetune(job)
    assert not job.output.exists()
    allowed = dataclasses.replace(tiny_job(tmp_path, tmp_path / "allowed.json", recipe=Recipe(epochs=1, batch_size=4)),
                                  max_undecodable_fraction=0.1)
    result = run_finetune(allowed)
    assert result["history"][0]["undecodable"] == 1 and result["test_undecodable"] == 0


def test_two_processes_train_together_through_torchrun(tmp_path):
    """The multi-GPU path on CPU processes (gloo): one result, every test image counted once."""
    make_world(tmp_path, concepts=3, train=6, test=3)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "imagenet_cog", "finetune", "--split-table", str(tmp_path / "splits.tsv"),
               "--image-root", str(tmp_path / "images"), "--dataset", "l1", "--model-name", "tiny",
               "--arch", "demo_cnn", "--weights", "random:3", "--recipe", json.dumps({"epochs": 2, "batch_size": 4}),
               "--device", "cpu", "--threads", "2", "--checkpoint", str(tmp_path / "ddp.checkpoint.pt"),
               "--output", str(tmp_path / "ddp.json")]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    completed = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads((tmp_path / "ddp.json").read_text())
    # 18 images, 9 per process, the batch of 4 shared: 4 steps of 2 images each
    assert result["processes"] == 2 and result["steps_per_epoch"] == 4
    assert result["test_images"] == 9 and len(result["history"]) == 2
    assert not (tmp_path / "ddp.checkpoint.pt").exists()


def fabricated_results(root: Path) -> list[Path]:
    paths = []
    for dataset, top1 in (("in1k", 80.0), ("l1", 70.0), ("l5", 50.0)):
        path = root / "finetune" / f"{dataset}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"model": "m", "dataset": dataset, "top1": top1, "top5": 95.0, "test_images": 10,
                                    "train_images": 40, "recipe": {"epochs": 7}}))
        paths.append(path)
    return paths


def fabricated_summary(path: Path) -> Path:
    rows = [{"model": "m", "label": "Model M", "category": "baseline", "random_weights": False, "probe": "linear",
             "dataset": dataset, "level_set": "lin", "shots": "all", "mean": mean, "std": 0.5,
             "ci95_low": mean - 1, "ci95_high": mean + 1, "top5_mean": 90.0, "top5_std": 0.1, "n_seeds": 3,
             "expected_seeds": 3, "complete": True, "missing_seeds": "", "protocol_deviations": ""}
            for dataset, mean in (("in1k", 76.0), ("l1", 63.0), ("l5", 30.0))]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_the_table_and_fig_6_set_the_frozen_probe_relative_to_fine_tuning(tmp_path):
    results, summary = fabricated_results(tmp_path), fabricated_summary(tmp_path / "summary.csv")
    from imagenet_cog.results.summary import read_summary

    rows = compared(read_results(results), read_summary(summary)).set_index("dataset")
    assert rows.loc["in1k", "relative"] == pytest.approx(95.0)
    assert rows.loc["l5", "relative"] == pytest.approx(60.0)
    assert rows.loc["l1", "relative_low"] == pytest.approx(62 / 70 * 100)
    status = finetune_results_command(["--results-root", str(tmp_path / "results"), "--summary", str(summary),
                                       "--models", json.dumps({"m": {"label": "Model M"}}),
                                       "--datasets", "in1k", "l1", "l5", "--results", *map(str, results)])
    assert status == 0
    layout = Layout(str(tmp_path / "results"))
    table = pd.read_csv(layout.table("finetune", "csv"))
    assert list(table["dataset"]) == ["IN-1K", "L1", "L5"]
    assert list(table["frozen / fine-tuned (%)"]) == [95.0, 90.0, 60.0]
    assert all(Path(layout.figure("finetune", extension)).stat().st_size > 0 for extension in ("png", "pdf"))


def test_a_file_that_is_no_fine_tuning_result_is_named(tmp_path):
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"model": "m"}))
    with pytest.raises(ValueError, match=r"wrong.json: not a fine-tuning result \(no dataset, top1"):
        read_results([wrong])


def test_fine_tuned_top1_is_a_probability_of_the_test_rows(tmp_path, one_torch_thread):
    result = run_finetune(tiny_job(tmp_path, tmp_path / "one.json", recipe=Recipe(epochs=1, batch_size=6)))
    correct = result["top1"] * result["test_images"] / 100
    assert math.isclose(correct, round(correct), abs_tol=1e-9)
    assert result["classes"] == 3 and result["train_images"] == 18 and result["steps_per_epoch"] == 3
    assert np.isfinite([epoch["loss"] for epoch in result["history"]]).all()
