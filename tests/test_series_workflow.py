"""A training run's checkpoints as a series in a finished demo: what the workflow plans for it.

One private copy of the finished demo gains a series of the demo network's checkpoints (random
initialisations saved as safetensors files, ~1 MB each; one copied, a duplicate), and one
checkpoint's features of one split are made. Then the folder is moved, the files renamed, the
pattern edited to match and a later checkpoint added: the dry run plans the series'
checkpoints' jobs and nothing else (no finished job of the demo runs again), none of the made
jobs again (a checkpoint is its content, not its path), and the later checkpoint's own jobs,
as many as an unfinished checkpoint's. The per-checkpoint jobs are the series protocol's:
the linear probe at series.shots on its first seed, the k-NN, the per-concept accuracy.
A transformers Trainer's run (checkpoint-<step> folders of a small ViT) is a series the same
way: a step's features made, the run moved, nothing made again.
"""

from __future__ import annotations

import shutil
from collections import Counter

import pytest
import yaml
from safetensors.torch import save_file

from conftest import copy_of_demo, dry_run, planned_jobs, snakemake
from imagenet_cog.core.layout import Layout
from imagenet_cog.models.registry import ModelSpec, build_model

pytestmark = pytest.mark.e2e

SERIES = "dino"


def save_checkpoint(path, seed: int) -> None:
    """The demo network's random initialisation of ``seed`` as a safetensors file (tensors alone:
    planning has no Python objects in it to refuse)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(build_model(ModelSpec(SERIES, "demo_cnn", f"random:{seed}")).network.state_dict(), path)


def overlay(workdir, pattern: str, arch: str = "demo_cnn", name: str = SERIES, step_unit: str = "epoch") -> str:
    # the series protocol's default N (the demo's own series probes N = all alone)
    entry = {"arch": arch, "checkpoints": pattern, "step_unit": step_unit, "series": {"shots": ["all", 8]}}
    settings = {"models": {name: entry},
                "series": {"settle_seconds": 0, "full_protocol_steps": []}}
    (workdir / "series.yaml").write_text(yaml.safe_dump(settings))
    return "series.yaml"


@pytest.fixture(scope="module")
def workdir(demo_run, tmp_path_factory):
    workdir = copy_of_demo(demo_run, tmp_path_factory.mktemp("series") / "demo")
    for step, seed in ((1, 1), (2, 2)):
        save_checkpoint(workdir / f"runs/dino/checkpoint{step}.safetensors", seed)
    shutil.copy(workdir / "runs/dino/checkpoint1.safetensors", workdir / "runs/dino/checkpoint3.safetensors")
    return workdir


def test_a_series_plans_its_checkpoints_jobs_and_a_moved_folder_reruns_nothing(workdir):
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    # one checkpoint's features of one split, made
    made = Layout("results").features("dino@1", "l1", "test")
    snakemake(workdir, made, "--cores", "2", "--configfile", overlay(workdir, "runs/dino/checkpoint{step}.safetensors"))

    moved = workdir / "elsewhere" / "dino-run"
    shutil.move(workdir / "runs/dino", moved)
    for step in (1, 2, 3):
        (moved / f"checkpoint{step}.safetensors").rename(moved / f"epoch_{step:03d}.safetensors")
    save_checkpoint(moved / "epoch_004.safetensors", 4)
    jobs, result = dry_run(workdir, "--configfile", overlay(workdir, str(moved / "epoch_{step}.safetensors")))
    # every planned job is a checkpoint's: the finished demo stays current; dino@3 is dino@1's content
    by_model = Counter(wildcards["model"] for rule, wildcards in jobs if "model" in wildcards)
    assert set(by_model) == {"dino@1", "dino@2", "dino@4"}
    # and the series' tables, which read every checkpoint
    assert {rule for rule, wildcards in jobs if "model" not in wildcards} == {"all", "series_results"}
    assert "series dino: dino@3 has the content of dino@1" in result.stderr
    # the made jobs stay made; the later checkpoint plans its own jobs, as many as dino@2's
    assert not [w for rule, w in jobs if w.get("model") == "dino@1" and w.get("dataset") == "l1" and w.get("split") == "test"]
    assert by_model["dino@1"] == by_model["dino@2"] - 2
    assert by_model["dino@4"] == by_model["dino@2"]
    # the series protocol: the linear probe at N = all and 8 on the first seed, one job a run;
    # the k-NN; the per-concept accuracy; nothing of the other stages
    datasets = config["datasets"]
    probes = {(w["dataset"], w["shots"], w["seed"]) for rule, w in jobs if rule == "probe" and w["model"] == "dino@2"}
    first_seed = str(config["probes"]["seeds"][0])
    assert probes == {(dataset, shots, first_seed) for dataset in datasets for shots in ("all", "8")}
    assert Counter(rule for rule, w in jobs if w.get("model") == "dino@2") == {
        "extract_features": 2 * len(datasets), "merge_features": 2 * len(datasets), "probe": 2 * len(datasets),
        "probe_knn": len(datasets), "analyses_concepts": 1, "effective_rank": 1}


def test_a_checkpoint_that_does_not_fit_the_arch_is_refused_before_any_job(workdir):
    """A step's file of another shape stops the dry run at once, naming the series, the step, the
    file and the tensor; the step that fits is not named, and nothing is planned."""
    save_checkpoint(workdir / "runs/misfit/checkpoint1.safetensors", 5)
    state = build_model(ModelSpec(SERIES, "demo_cnn", "random:6")).network.state_dict()
    state["features.0.weight"] = state["features.0.weight"].repeat(2, 1, 1, 1)
    save_file(state, workdir / "runs/misfit/checkpoint2.safetensors")
    result = snakemake(workdir, "--cores", "2", "--dry-run", "--configfile",
                       overlay(workdir, "runs/misfit/checkpoint{step}.safetensors"), check=False)
    told = result.stdout + result.stderr
    assert result.returncode != 0 and "no job was started" in told
    assert (f"series.yaml: model '{SERIES}' (a series of arch demo_cnn): step 2, checkpoint "
            "runs/misfit/checkpoint2.safetensors does not fit a DemoCNN backbone") in told
    assert "features.0.weight (64, 3, 3, 3) in the file, (32, 3, 3, 3) in the network" in told
    assert "checkpoint1" not in told and "Job stats" not in told


def test_a_transformers_trainer_run_is_a_series_and_a_moved_run_makes_nothing_again(workdir):
    """arch: hf/<folder>, the network's config and image processor (no weights); checkpoints:
    the folders a Trainer writes (a ViT fine-tuned for classification: its backbone under vit.,
    its head, the optimizer's pickle); a step's features are its weights' in that network."""
    import h5py
    import torch
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                       image_size=32, patch_size=8)
    config.save_pretrained(workdir / "models/vit-base")
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(workdir / "models/vit-base")
    for step in (100, 200):
        torch.manual_seed(step)
        ViTForImageClassification(config).save_pretrained(workdir / f"runs/vit/checkpoint-{step}")
        torch.save({"state": {}}, workdir / f"runs/vit/checkpoint-{step}/optimizer.pt")
    layout = Layout("results")
    made = layout.features("vit@100", "l1", "test")
    snakemake(workdir, made, "--cores", "2", "--configfile",
              overlay(workdir, "runs/vit/checkpoint-{step}", "hf/./models/vit-base", "vit", "iteration"))
    with h5py.File(workdir / layout.feature_shard("vit@100", "l1", "test", "00000")) as handle:
        assert (handle.attrs["hf_model_type"], handle.attrs["tokens"], handle.attrs["feature_dim"]) == ("vit", "cls", 32)
        assert handle.attrs["weights"].startswith("hf:config:")

    moved = workdir / "elsewhere" / "vit-run"
    shutil.move(workdir / "runs/vit", moved)
    settings = overlay(workdir, str(moved / "checkpoint-{step}"), "hf/./models/vit-base", "vit", "iteration")
    assert planned_jobs(workdir, made, "--configfile", settings) == []
    # the other step's features are its own to make
    other = layout.features("vit@200", "l1", "test")
    assert {rule for rule, _ in planned_jobs(workdir, other, "--configfile", settings)} == {
        "extract_features", "merge_features"}
