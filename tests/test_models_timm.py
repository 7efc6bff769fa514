"""timm models by name: pooled pre-logits features of several families, their pretrained
configs, local checkpoints, unknown names and unreachable pretrained weights."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import timm
import torch
from PIL import Image
from safetensors.torch import save_file
from timm.data import create_transform, resolve_data_config, resolve_model_data_config
from torchvision import transforms

from conftest import make_world
from imagenet_cog.features.decoding import resize_and_crop
from imagenet_cog.features.extract import ExtractionOptions, ImageRows, SplitImages, extract_shard
from imagenet_cog.models.checkpoints import CheckpointMismatch
from imagenet_cog.models.registry import (
    REGISTRY,
    ModelSpec,
    build_model,
    describe_models,
    file_sha256,
    planned_feature_dim,
    planned_preprocessing,
    weights_identity,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# A small member of each family and the input side S the test runs it at.
FAMILIES = {
    "resnet": ("timm/resnet18.a1_in1k", 64),
    "vit_class_token": ("timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k", 32),
    "vit_average_pool": ("timm/vit_wee_patch16_reg1_gap_256.sbb_in1k", 32),
    "convnext": ("timm/convnext_atto.d2_in1k", 64),
    "clip_vit": ("timm/vit_xsmall_patch16_clip_224.tinyclip_yfcc15m", 32),
    "clip_resnet_attention_pool": ("timm/resnet50_clip.openai", 64),
}


def timm_name(arch: str) -> str:
    return arch.removeprefix("timm/")


@pytest.mark.parametrize("family", FAMILIES)
def test_preprocessing_comes_from_the_pretrained_config(family):
    arch, _ = FAMILIES[family]
    with torch.device("meta"):
        network = timm.create_model(timm_name(arch))
    published = resolve_model_data_config(network)
    paper = planned_preprocessing(ModelSpec(family, arch, "random"))
    assert paper.size == published["input_size"][-1]
    assert (paper.mean, paper.std) == (tuple(published["mean"]), tuple(published["std"]))
    assert paper.interpolation == published["interpolation"]
    assert paper.to_dict()["mode"] == "paper" and paper.resize is None
    evaluation = resolve_model_data_config(network, use_test_size=True)
    own = planned_preprocessing(ModelSpec(family, arch, "random", preprocessing="model"))
    assert own.size == evaluation["input_size"][-1] and own.crop_mode == evaluation["crop_mode"]
    assert own.resize == math.floor(own.size / evaluation["crop_pct"])
    assert own.to_dict()["mode"] == "model"


def test_pretrained_configs_differ_where_the_releases_do():
    """A few of the values the configs hold, written out: CLIP's normalisation, the test size
    and crop of timm's own ResNet recipe, a ViT's fixed input size."""
    clip = planned_preprocessing(ModelSpec("c", FAMILIES["clip_vit"][0], "random"))
    assert clip.mean == (0.48145466, 0.4578275, 0.40821073) and clip.std == (0.26862954, 0.26130258, 0.27577711)
    resnet = planned_preprocessing(ModelSpec("r", "timm/resnet18.a1_in1k", "random", preprocessing="model"))
    assert (resnet.size, resnet.resize) == (288, 288)  # test_input_size 288, test_crop_pct 1.0
    dinov2 = ModelSpec("d", "timm/vit_small_patch14_dinov2.lvd142m", "random")
    assert planned_preprocessing(dinov2).size == 518
    at_224 = ModelSpec("d", "timm/vit_small_patch14_dinov2.lvd142m", "random", input_size=224)
    assert planned_preprocessing(at_224).size == 224 and at_224.timm_model().create_options() == {"img_size": 224}


@pytest.mark.parametrize("family", FAMILIES)
def test_extracted_features_are_what_the_classifier_reads(family, tmp_path):
    arch, size = FAMILIES[family]
    table = make_world(tmp_path, concepts=2, train=3, test=1)
    spec = ModelSpec(family, arch, "random:7", input_size=size)
    output = tmp_path / "shard.h5"
    images = SplitImages(table, tmp_path / "images", "l1", "train")
    attributes = extract_shard(spec, images, 0, 100, output, ExtractionOptions(batch_size=4, device="cpu", dtype="float32"))
    with h5py.File(output) as handle:
        features = torch.from_numpy(handle["features"][...])
        paths = list(handle["path"].asstr()[...])

    # The same network built by timm alone, on the same preprocessed batch.
    torch.manual_seed(7)
    fixed = timm.models.get_pretrained_cfg(timm_name(arch)).fixed_input_size
    reference = timm.create_model(timm_name(arch), **({"img_size": size} if fixed else {})).eval()
    preprocessing = planned_preprocessing(spec)
    rows = ImageRows(tmp_path / "images", paths, preprocessing)
    pixels = torch.stack([rows[position][0] for position in range(len(rows))]).float()
    mean = torch.tensor(preprocessing.mean).view(1, 3, 1, 1) * 255
    std = torch.tensor(preprocessing.std).view(1, 3, 1, 1) * 255
    batch = (pixels - mean) / std
    with torch.inference_mode():
        expected = reference.forward_head(reference.forward_features(batch), pre_logits=True)
        logits = reference(batch)
    assert features.shape == expected.shape == (len(paths), attributes["feature_dim"])
    # the extraction runs the network channels-last: equal up to float32 summation order
    torch.testing.assert_close(features, expected, rtol=1e-4, atol=1e-5)
    # what the model's classifier reads: its logits follow from these features
    torch.testing.assert_close(reference.get_classifier()(features), logits, rtol=1e-3, atol=1e-4)
    # the feature size is discovered (planned on the meta device, measured at extraction)
    assert attributes["feature_dim"] == planned_feature_dim(spec) == reference.head_hidden_size
    recorded = json.loads(attributes["preprocessing"])
    assert recorded == {"size": size, "mean": list(preprocessing.mean), "std": list(preprocessing.std),
                        "interpolation": preprocessing.interpolation, "mode": "paper"}
    assert attributes["arch"] == arch and attributes["weights"] == "random:7" and attributes["random_weights"]
    assert attributes["timm_model"] == timm_name(arch) and attributes["timm_version"] == timm.__version__


def jpeg(path, width: int, height: int, seed: int):
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    Image.fromarray(small).resize((width, height), Image.Resampling.BILINEAR).save(path, quality=95)
    return path


@pytest.mark.parametrize("arch, crop_mode", [
    ("timm/convnext_atto.d2_in1k", "center"),  # test size 288, crop_pct 0.95
    ("timm/convnext_tiny.fb_in22k_ft_in1k_384", "squash"),
])
def test_model_preprocessing_gives_the_pixels_of_timms_own_eval_transform(arch, crop_mode, tmp_path):
    from torchcodec.decoders import decode_jpeg

    own = planned_preprocessing(ModelSpec("m", arch, "random", preprocessing="model"))
    assert own.crop_mode == crop_mode
    data = resolve_data_config(pretrained_cfg=timm.models.get_pretrained_cfg(timm_name(arch)).to_dict(), use_test_size=True)
    evaluation = create_transform(**data, is_training=False)
    # timm's transform up to its tensor conversion: the extraction normalises on the device
    resize_and_crop_steps = transforms.Compose(
        [step for step in evaluation.transforms if isinstance(step, (transforms.Resize, transforms.CenterCrop))])
    assert len(resize_and_crop_steps.transforms) == 2
    sizes = [(500, 375), (333, 700), (384, 384), (1024, 301)]
    paths = [jpeg(tmp_path / f"{number}.jpg", *size, seed=number).name for number, size in enumerate(sizes)]
    rows = ImageRows(tmp_path, paths, own)
    for position, name in enumerate(paths):
        with Image.open(tmp_path / name) as image:
            expected = np.array(resize_and_crop_steps(image.convert("RGB")))
        host = rows[position][0].permute(1, 2, 0).numpy()
        assert host.shape == (own.size, own.size, 3)
        np.testing.assert_array_equal(host, expected)
        # the device path (features.decode: device) resizes with the same sizes
        decoded = decode_jpeg(torch.from_numpy(np.fromfile(tmp_path / name, dtype=np.uint8)), mode="RGB")
        device = resize_and_crop(decoded, own).permute(1, 2, 0).numpy().astype(int)
        assert np.abs(device - expected.astype(int)).mean() < 1.5


def test_registry_preprocessing_is_recorded_as_before():
    """The registry's preprocessing JSON is a parameter of every finished extraction: it stays
    byte for byte what it was, so that no finished run re-extracts."""
    assert REGISTRY["resnet50"].preprocessing.to_json() == (
        '{"interpolation": "bicubic", "mean": [0.485, 0.456, 0.406], "size": 224, "std": [0.229, 0.224, 0.225]}')


def test_weights_identity_names_the_release(tmp_path):
    arch = "timm/vit_tiny_patch16_224"  # no tag: timm's default release
    assert weights_identity(ModelSpec("m", arch, "pretrained")) == "timm:vit_tiny_patch16_224.augreg_in21k_ft_in1k"
    assert weights_identity(ModelSpec("m", f"{arch}.augreg_in21k", "pretrained")) == "timm:vit_tiny_patch16_224.augreg_in21k"
    assert weights_identity(ModelSpec("m", arch, "random:4")) == "random:4"
    checkpoint = tmp_path / "mine.pth"
    checkpoint.write_bytes(b"any bytes")
    assert weights_identity(ModelSpec("m", arch, str(checkpoint))) == f"sha256:{file_sha256(checkpoint)}"


def test_the_models_table_reads_timm_sizes():
    rows = describe_models({"dinov2": {"arch": "timm/vit_small_patch14_dinov2.lvd142m", "input_size": 224},
                            "convnext": {"arch": "timm/convnext_atto.d2_in1k", "preprocessing": "model"}})
    assert [(row["input_size"], row["feature_dim"]) for row in rows] == [(224, 384), (288, 320)]


# checkpoints ----------------------------------------------------------------------------


def save(state, path, layout):
    if layout == "safetensors":
        save_file({key: value.contiguous() for key, value in state.items()}, path)
    elif layout == "timm training":
        # timm's train.py: model name, training options (pickled), EMA weights beside the live ones
        torch.save({"arch": "x", "args": argparse.Namespace(lr=0.1), "epoch": 9,
                    "state_dict": {key: torch.zeros_like(value) for key, value in state.items()},
                    "state_dict_ema": state}, path)
    elif layout == "backbone":
        # a self-supervised framework's file: the backbone under a wrapper prefix, without
        # classifier, beside a projection head and a momentum encoder
        wrapped = {f"module.base_encoder.{key}": value for key, value in state.items()}
        wrapped["module.projector.0.weight"] = torch.zeros(7, 3)
        wrapped["module.momentum_encoder.stem.0.weight"] = torch.zeros(2)
        torch.save({"state_dict": wrapped}, path)
    else:
        torch.save(state, path)


@pytest.mark.parametrize("family, layout", [
    ("vit_class_token", "whole"), ("vit_class_token", "timm training"), ("resnet", "safetensors"),
    ("convnext", "backbone"),
])
def test_a_checkpoint_of_a_random_timm_model_reproduces_its_features(family, layout, tmp_path):
    arch, size = FAMILIES[family]
    original = build_model(ModelSpec("original", arch, "random:3", input_size=size))
    network = original.network.network
    classifier = network.pretrained_cfg["classifier"]
    state = network.state_dict()
    if layout == "backbone":
        state = {key: value for key, value in state.items() if not key.startswith(f"{classifier}.")}
    path = tmp_path / ("model.safetensors" if layout == "safetensors" else "model.pth")
    save(state, path, layout)
    trusted = ("argparse.Namespace",) if layout == "timm training" else ()
    loaded = build_model(ModelSpec("from_file", arch, str(path), input_size=size, trusted_globals=trusted))
    images = torch.rand(3, 3, size, size)
    with torch.inference_mode():
        assert torch.equal(loaded.network(images), original.network(images))
    assert loaded.weights_identity == f"sha256:{file_sha256(path)}" and not loaded.random_weights
    assert f"timm/{timm_name(arch)}" in loaded.notes[0]
    if layout == "backbone":
        assert "'module.base_encoder.'" in loaded.notes[0] and "as a backbone" in loaded.notes[0]
    if layout == "timm training":
        assert "EMA" in loaded.notes[0]


def test_a_checkpoint_of_another_model_is_refused_naming_both(tmp_path):
    path = tmp_path / "checkpoint.pth.tar"
    torch.save({"arch": "resnet18", "state_dict": timm.create_model("resnet18").state_dict()}, path)
    with pytest.raises(CheckpointMismatch) as failure:
        build_model(ModelSpec("mine", "timm/vit_tiny_patch16_224", str(path), input_size=32))
    message = str(failure.value)
    assert "model 'mine'" in message and str(path) in message
    assert "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k" in message and "cls_token" in message
    assert "'resnet18'" in message and "conv1.weight" in message and "unexpected keys" in message

    # the same family at another width: the keys fit, their shapes do not
    wider = tmp_path / "convnext_femto.pth"
    torch.save(timm.create_model("convnext_femto").state_dict(), wider)
    with pytest.raises(CheckpointMismatch, match=r"keys of other shapes \(") as failure:
        build_model(ModelSpec("mine", "timm/convnext_atto", str(wider), input_size=32))
    assert "timm/convnext_atto" in str(failure.value) and "backbone keys missing" not in str(failure.value)


# names and weights that cannot be had ------------------------------------------------------


@pytest.mark.parametrize("arch, answer", [
    ("timm/vit_tiny_patch16_22", "closest names timm knows: vit_tiny_patch16_224"),
    ("timm/dinov2_vits14", "names with 'dinov2': "),
    ("timm/resnet18.tv_in1", "its tags are a1_in1k, "),
])
def test_an_unknown_timm_name_is_answered_with_the_closest_names(arch, answer):
    with pytest.raises(ValueError, match="config.yaml: model 'mine'") as failure:
        ModelSpec.from_config("mine", {"arch": arch, "weights": "random"})
    assert answer in str(failure.value)
    if "dinov2" in arch:
        assert "vit_small_patch14_dinov2" in str(failure.value)


def test_timm_settings_on_other_archs_and_weights_timm_lacks_fail_clearly():
    with pytest.raises(ValueError, match="settings of timm models"):
        ModelSpec.from_config("mine", {"arch": "resnet50", "preprocessing": "model"})
    without_weights = next(name for name in timm.list_models("vit_*") if name not in
                           {timm.models.split_model_name_tag(full)[0] for full in timm.list_models(pretrained=True)})
    with pytest.raises(ValueError, match=f"no pretrained weights for '{without_weights}"):
        ModelSpec.from_config("mine", {"arch": f"timm/{without_weights}", "weights": "pretrained"})


def test_pretrained_weights_out_of_reach_name_the_model_and_the_file_alternative(tmp_path):
    """A node without internet and without timm's cache: the job says which model, where timm
    looked, and how to give the weights as a file instead."""
    table = make_world(tmp_path, concepts=1, train=1, test=1)
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    job = subprocess.run(
        [sys.executable, "-m", "imagenet_cog", "extract", "--split-table", str(table),
         "--image-root", str(tmp_path / "images"), "--dataset", "l1", "--split", "train", "--shard", "0",
         "--shard-size", "10", "--model-name", "dino", "--arch", "timm/vit_small_patch14_dinov2.lvd142m",
         "--weights", "pretrained", "--preprocessing", "paper", "--input-size", "28", "--device", "cpu",
         "--output", str(tmp_path / "shard.h5")],
        capture_output=True, text=True, env=environment, timeout=600,
    )
    assert job.returncode != 0 and not (tmp_path / "shard.h5").exists()
    assert "PretrainedWeightsUnavailable" in job.stderr
    assert "model 'dino'" in job.stderr and "timm/vit_small_patch14_dinov2.lvd142m" in job.stderr
    assert "https://huggingface.co/timm/vit_small_patch14_dinov2.lvd142m" in job.stderr
    assert "set the model's weights to that file's path" in job.stderr
