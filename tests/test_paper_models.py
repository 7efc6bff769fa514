"""config/paper_models.yaml: the paper's 31 models, Table 1's metadata, checkpoint sources,
the parse-time check of a missing checkpoint, and Table 3 from `python -m imagenet_cog models`."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from conftest import REPOSITORY, copy_workflow, snakemake
from imagenet_cog.models.registry import REGISTRY, ModelSpec, kept_models

PAPER_MODELS = REPOSITORY / "config" / "paper_models.yaml"
SCHEMA = REPOSITORY / "workflow" / "schemas" / "config.schema.yaml"
# Paper Table 1, as printed.
TABLE_1 = {
    "ResNet50", "a-T2T-ViT-t-14", "a-DeiT-S", "a-DeiT-S-distilled", "a-Inception-v3", "a-NAT-M4",
    "a-EfficientNet-B1", "a-EfficientNet-B4", "a-DeiT-B-distilled", "a-ResNet152", "a-VGG19",
    "s-SimCLR-v2", "s-MoCo-v2", "s-BYOL", "s-MoChi", "s-InfoMin", "s-OBoW", "s-SwAV", "s-DINO",
    "s-BarlowTwins", "s-CompReSS", "r-MixUp", "r-Manifold-MixUp", "r-CutMix", "r-ReLabel",
    "r-Adv-Robust", "r-MEAL-v2", "d-MoPro", "d-Semi-Sup", "d-Semi-Weakly-Sup", "d-CLIP",
}
# Paper Table 3: feature dims of the unique architectures.
TABLE_3 = {"a-T2T-ViT-t-14": 384, "a-DeiT-S": 384, "a-DeiT-S-distilled": 384, "a-DeiT-B-distilled": 768,
           "a-NAT-M4": 1536, "a-EfficientNet-B1": 1280, "a-EfficientNet-B4": 1792, "a-VGG19": 4096}


@pytest.fixture(scope="module")
def paper_models():
    """The file's models, without the null entries that remove config.yaml's demo models."""
    config = yaml.safe_load(PAPER_MODELS.read_text())
    config["models"] = kept_models(config["models"])
    return config


def test_the_31_models_of_table_1_with_their_metadata(paper_models):
    models = paper_models["models"]
    assert len(models) == 31
    assert {entry["label"] for entry in models.values()} == TABLE_1
    assert len({entry["paper_name"] for entry in models.values()}) == 31
    for entry in models.values():
        prefix = entry["label"].split("-", 1)[0] if entry["label"] != "ResNet50" else "reference"
        assert entry["paper_category"] == prefix
        assert entry["arch"] in REGISTRY
        dim = REGISTRY[entry["arch"]].feature_dim
        assert dim == TABLE_3.get(entry["label"], 2048)
        # Library weights, or a relative checkpoint path with its public source.
        assert entry["weights"] == "pretrained" or (
            not Path(entry["weights"]).is_absolute() and entry["source"])
    checkpoints = [entry for entry in models.values() if entry["weights"] != "pretrained"]
    # The 10 self-supervised and 6 regularised ResNet50s, MoPro, NAT-M4 and T2T-ViT-t-14.
    assert len(checkpoints) == 19
    assert models["nat_m4"]["params_millions"] == 7.6 and models["vgg19"]["params_millions"] == 139.6
    assert models["semi_weakly_sup"]["extra_data"].startswith("IG-1B")


def test_merged_over_config_yaml_it_validates(paper_models):
    config = yaml.safe_load((REPOSITORY / "config.yaml").read_text())
    merged = copy.deepcopy(config)
    # the file as written (its nulls too), merged key by key and its nulls dropped, as the Snakefile does
    for key, value in yaml.safe_load(PAPER_MODELS.read_text()).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    merged["models"] = kept_models(merged["models"])
    validate(merged, str(SCHEMA))
    # The demo's entries are removed (null in the paper's file), not left beside the paper's.
    assert set(merged["models"]) == set(paper_models["models"])
    assert merged["checkpoints_dir"] == "checkpoints"


def test_relative_checkpoints_are_found_under_checkpoints_dir(tmp_path, paper_models):
    entry = paper_models["models"]["moco_v2"]
    (tmp_path / "mocov2" / "resnet50").mkdir(parents=True)
    (tmp_path / "mocov2" / "resnet50" / "model.ckpt").write_bytes(b"weights")
    spec = ModelSpec.from_config("moco_v2", entry, tmp_path)
    assert spec.weights == str(tmp_path / "mocov2" / "resnet50" / "model.ckpt")
    with pytest.raises(FileNotFoundError) as missing:
        ModelSpec.from_config("swav", paper_models["models"]["swav"], tmp_path)
    message = str(missing.value)
    assert "'swav'" in message and str(tmp_path / "swav" / "resnet50" / "model.ckpt") in message
    assert "https://dl.fbaipublicfiles.com/deepcluster/swav_800ep_pretrain.pth.tar" in message
    assert "swav_800ep_pretrain.pth.tar" in message


def test_workflow_checks_every_checkpoint_before_any_job(tmp_path, paper_models):
    workdir = copy_workflow(tmp_path / "workflow")
    checkpoints = tmp_path / "checkpoints"
    for name, entry in paper_models["models"].items():
        if entry["weights"] != "pretrained" and name != "dino":
            path = checkpoints / entry["weights"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(name.encode())
    # the demo's probe kinds but zero-shot: the paper's models have no text tower
    (workdir / "kinds.yaml").write_text("probes: {kinds: [linear, mlp, mlp_noact, pca, knn]}\n")
    arguments = ["--cores", "1", "--list-rules", "--configfile", str(PAPER_MODELS), "kinds.yaml",
                 "--config", f"checkpoints_dir={checkpoints}"]
    failed = snakemake(workdir, *arguments, check=False)
    assert failed.returncode != 0
    assert "model 'dino'" in failed.stderr and str(checkpoints / "dino/resnet50/model.ckpt") in failed.stderr
    assert "dino_resnet50_pretrain.pth" in failed.stderr

    (checkpoints / "dino" / "resnet50").mkdir(parents=True)
    (checkpoints / "dino" / "resnet50" / "model.ckpt").write_bytes(b"dino")
    snakemake(workdir, *arguments)


def test_models_command_prints_table_3():
    listing = subprocess.run([sys.executable, "-m", "imagenet_cog", "models"], capture_output=True,
                             text=True, check=True).stdout.splitlines()
    assert listing[0].split("\t") == ["name", "category", "arch", "input_size", "feature_dim", "pretraining_data",
                                      "exposure"]
    rows = {line.split("\t")[0]: line.split("\t") for line in listing[1:]}
    assert set(rows) == TABLE_1
    assert rows["a-NAT-M4"][1:] == ["architecture", "nat_m4", "224", "1536", "in1k", "none"]
    assert rows["a-DeiT-B-distilled"][3:5] == ["384", "768"]
    assert rows["a-Inception-v3"][3:5] == ["299", "2048"]
    assert rows["s-SwAV"][1:] == ["self-supervision", "resnet50", "224", "2048", "in1k", "none"]
    assert rows["d-Semi-Sup"][5:] == ["yfcc100m,in1k", "web"] and rows["d-CLIP"][5:] == ["wit400m", "web"]


def test_models_command_lists_the_registry():
    listing = subprocess.run([sys.executable, "-m", "imagenet_cog", "models", "--config", "registry"],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    rows = {line.split("\t")[2]: line.split("\t") for line in listing[1:]}
    assert set(rows) == set(REGISTRY)
    assert rows["t2t_vit_t_14"][1:] == ["architecture", "t2t_vit_t_14", "224", "384"]
    assert rows["resnet50"][1] == "baseline" and rows["clip_resnet50"][1] == "data"


def test_models_command_reads_the_workflow_folder_not_the_package_location(tmp_path):
    """An installed package has no checkout above it: the default is the working directory's
    config/paper_models.yaml, and elsewhere the error says where it looked."""
    elsewhere = subprocess.run([sys.executable, "-m", "imagenet_cog", "models"], capture_output=True, text=True,
                               cwd=tmp_path)
    assert elsewhere.returncode != 0 and str(tmp_path) in elsewhere.stderr
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "paper_models.yaml").write_text(PAPER_MODELS.read_text())
    (tmp_path / "resources").mkdir()
    for table in ("pretraining_datasets.tsv", "pretraining_releases.tsv"):
        (tmp_path / "resources" / table).write_text((PAPER_MODELS.parents[1] / "resources" / table).read_text())
    listing = subprocess.run([sys.executable, "-m", "imagenet_cog", "models"], capture_output=True, text=True,
                             cwd=tmp_path, check=True).stdout.splitlines()
    assert {line.split("\t")[0] for line in listing[1:]} == TABLE_1
