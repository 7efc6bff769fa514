"""open_clip models by name: the image embedding or the tower's pooled features, exactly as
open_clip computes them, its own preprocessing, pretrained tags, checkpoints, unknown names
and unreachable weights. Random weights only: nothing is downloaded."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import open_clip
import pytest
import torch
from PIL import Image

from conftest import make_world
from imagenet_cog.features.extract import ExtractionOptions, ImageRows, SplitImages, extract_shard
from imagenet_cog.models.checkpoints import CheckpointMismatch, UnsafeCheckpoint
from imagenet_cog.models.open_clip_catalogue import model_configs
from imagenet_cog.models.open_clip_models import resolve
from imagenet_cog.models.registry import (
    ModelSpec,
    build_model,
    describe_models,
    extract_options,
    file_sha256,
    planned_feature_dim,
    planned_preprocessing,
    weights_identity,
)

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.heavy]

# open_clip's smallest ViT (its own VisionTransformer tower), a ResNet (an attention pool that
# projects), and a timm tower with a pretrained tag whose preprocessing is not open_clip's
# default (squashed, bilinear, mean and std 0.5).
VIT = "ViT-S-32-alt"
RESNET = "RN50"
TIMM_TOWER, TIMM_TOWER_TAG = "PE-Core-T-16-384", "meta"


def jpeg(path, width: int, height: int, seed: int):
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    Image.fromarray(small).resize((width, height), Image.Resampling.BILINEAR).save(path, quality=95)
    return path


def normalised(rows: ImageRows):
    """The extraction's pixels of every row, normalised as the extraction does on the device."""
    p = rows.preprocessing
    pixels = torch.stack([rows[position][0] for position in range(len(rows))]).float()
    return (pixels - torch.tensor(p.mean).view(1, 3, 1, 1) * 255) / (torch.tensor(p.std).view(1, 3, 1, 1) * 255)


def open_clips_pixels(preprocess, root, paths):
    """open_clip's own evaluation transform of the same files."""
    with torch.inference_mode():
        return torch.stack([preprocess(Image.open(root / path)) for path in paths])


@pytest.mark.parametrize("image_features", ["embedding", "pooled"])
def test_extracted_features_are_what_open_clip_computes(image_features, tmp_path):
    table = make_world(tmp_path, concepts=2, train=2, test=1)
    spec = ModelSpec.from_config("clip", {"arch": f"open_clip/{VIT}", "weights": "random:7",
                                          "image_features": image_features})
    output = tmp_path / "shard.h5"
    images = SplitImages(table, tmp_path / "images", "l1", "train")
    attributes = extract_shard(spec, images, 0, 100, output, ExtractionOptions(batch_size=4, device="cpu", dtype="float32"))
    with h5py.File(output) as handle:
        features = torch.from_numpy(handle["features"][...])
        paths = list(handle["path"].asstr()[...])

    # The same model built by open_clip alone, its own transform on the same files.
    torch.manual_seed(7)
    reference, _, preprocess = open_clip.create_model_and_transforms(VIT)
    reference.eval()
    batch = open_clips_pixels(preprocess, tmp_path / "images", paths)
    torch.testing.assert_close(normalised(ImageRows(tmp_path / "images", paths, planned_preprocessing(spec))), batch,
                               rtol=0, atol=1e-5)
    with torch.inference_mode():
        embedding = reference.encode_image(batch)
        projection = reference.visual.proj
        reference.visual.proj = None  # open_clip's tower without its projection: the pooled features
        pooled = reference.encode_image(batch)
        torch.testing.assert_close(pooled @ projection, embedding, rtol=1e-4, atol=1e-5)
    expected = embedding if image_features == "embedding" else pooled
    assert features.shape == expected.shape == (len(paths), attributes["feature_dim"])
    # the extraction runs the network channels-last: equal up to float32 summation order
    torch.testing.assert_close(features, expected, rtol=1e-4, atol=1e-4)
    assert attributes["feature_dim"] == planned_feature_dim(spec) == (256 if image_features == "embedding" else 384)
    assert attributes["weights"] == f"random:7+image_features:{image_features}" and attributes["random_weights"]
    assert attributes["open_clip_model"] == VIT and attributes["image_features"] == image_features
    assert attributes["open_clip_version"] == open_clip.__version__ and "open_clip_pretrained" not in attributes
    assert json.loads(attributes["preprocessing"])["mode"] == "model"


@pytest.fixture
def weights_in_cache(monkeypatch):
    """open_clip's pretrained loading as if the tag's file were in its cache: nothing is
    downloaded and the model keeps its seeded initialisation."""
    monkeypatch.setattr(open_clip.pretrained, "download_pretrained", lambda *args, **kwargs: "cached-file")
    monkeypatch.setattr(open_clip.factory, "download_pretrained", lambda *args, **kwargs: "cached-file")
    monkeypatch.setattr(open_clip.factory, "load_checkpoint", lambda *args, **kwargs: None)


def test_a_pretrained_tag_takes_its_releases_preprocessing_and_the_timm_trunks_pooled_features(weights_in_cache, tmp_path):
    entry = {"arch": f"open_clip/{TIMM_TOWER}", "weights": TIMM_TOWER_TAG}
    embedding_spec = ModelSpec.from_config("pe", entry)
    pooled_spec = ModelSpec.from_config("pe", {**entry, "image_features": "pooled"})
    torch.manual_seed(0)  # build_model's seed for weights that are not random
    reference, _, preprocess = open_clip.create_model_and_transforms(TIMM_TOWER, pretrained=TIMM_TOWER_TAG)
    reference.eval()

    planned = planned_preprocessing(embedding_spec)
    assert (planned.size, planned.resize, planned.crop_mode, planned.interpolation) == (384, 384, "squash", "bilinear")
    assert planned.mean == planned.std == (0.5, 0.5, 0.5)
    sizes = [(500, 375), (333, 700), (1024, 301)]
    paths = [jpeg(tmp_path / f"{number}.jpg", *size, seed=number).name for number, size in enumerate(sizes)]
    batch = open_clips_pixels(preprocess, tmp_path, paths)
    torch.testing.assert_close(normalised(ImageRows(tmp_path, paths, planned)), batch, rtol=0, atol=1e-5)

    embedding_model, pooled_model = build_model(embedding_spec), build_model(pooled_spec)
    with torch.inference_mode():
        embedding = embedding_model.network(batch)
        pooled = pooled_model.network(batch)
        torch.testing.assert_close(embedding, reference.encode_image(batch), rtol=1e-4, atol=1e-5)
        # the trunk's classifier is this tower's projection: it maps the pooled features to the embedding
        torch.testing.assert_close(reference.visual.trunk.get_classifier()(pooled), embedding, rtol=1e-4, atol=1e-5)
    assert pooled_model.feature_dim == planned_feature_dim(pooled_spec) != embedding_model.feature_dim
    assert weights_identity(pooled_spec) == f"open_clip:{TIMM_TOWER}/{TIMM_TOWER_TAG}+image_features:pooled"
    assert pooled_model.provenance["open_clip_pretrained"] == TIMM_TOWER_TAG
    assert f"pretrained weights '{TIMM_TOWER_TAG}'" in pooled_model.notes[0]
    assert extract_options(pooled_spec) == ["--image-features", "pooled"]


def test_a_resnet_tower_gives_its_embedding_and_has_no_pooled_features():
    model = build_model(ModelSpec.from_config("rn", {"arch": f"open_clip/{RESNET}", "weights": "random:2"}))
    torch.manual_seed(2)
    reference = open_clip.create_model(RESNET).eval()
    images = torch.rand(2, 3, 224, 224)
    with torch.inference_mode():
        torch.testing.assert_close(model.network(images), reference.encode_image(images), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="projects as it pools .* use image_features: embedding"):
        ModelSpec.from_config("rn", {"arch": f"open_clip/{RESNET}", "weights": "random", "image_features": "pooled"})


@pytest.mark.parametrize("name", [VIT, RESNET, TIMM_TOWER, "coca_ViT-B-32", "ViT-B-16-SigLIP", "CoG-demo-CLIP",
                                  "CoG-demo-CoCa"])
def test_a_random_model_is_planned_from_its_config_file_as_open_clip_resolves_it(name):
    assert set(model_configs()) == set(open_clip.list_models())
    spec = ModelSpec.from_config("mine", {"arch": f"open_clip/{name}", "weights": "random:3"})
    model = resolve(spec.arch, spec.weights)
    assert spec.random_weights_plan() == (model.preprocessing(), model.feature_dim())


def test_the_models_table_reads_open_clip_sizes():
    rows = describe_models({
        "clip": {"arch": "open_clip/ViT-B-32", "weights": "laion2b_s34b_b79k"},
        "clip_pooled": {"arch": "open_clip/ViT-B-32", "weights": "laion2b_s34b_b79k", "image_features": "pooled"},
        "siglip": {"arch": "open_clip/ViT-B-16-SigLIP-256", "weights": "webli"},
    })
    assert [(row["input_size"], row["feature_dim"]) for row in rows] == [(224, 512), (224, 768), (256, 768)]


# checkpoints ----------------------------------------------------------------------------


def test_a_checkpoint_of_a_random_model_reproduces_its_features(tmp_path):
    original = build_model(ModelSpec.from_config("original", {"arch": f"open_clip/{VIT}", "weights": "random:3"}))
    torch.manual_seed(3)
    state = open_clip.create_model(VIT).state_dict()
    # open_clip's training checkpoint: the DistributedDataParallel prefix, the epoch beside it
    path = tmp_path / "epoch_3.pt"
    torch.save({"epoch": 3, "name": "run", "state_dict": {f"module.{key}": value for key, value in state.items()}}, path)
    try:
        loaded = build_model(ModelSpec.from_config("from_file", {"arch": f"open_clip/{VIT}", "weights": str(path)}))
        assert loaded.weights_identity == f"sha256:{file_sha256(path)}+image_features:embedding"
    finally:
        path.unlink()  # 180 MB
    images = torch.rand(2, 3, 224, 224)
    with torch.inference_mode():
        assert torch.equal(loaded.network(images), original.network(images))
    assert not loaded.random_weights and "tensors-only" in loaded.notes[0]


def test_checkpoints_of_another_model_or_with_python_objects_are_refused(tmp_path):
    other = tmp_path / "other.pth"
    torch.save({"conv1.weight": torch.zeros(2, 3)}, other)
    with pytest.raises(CheckpointMismatch, match=f"model 'mine': checkpoint {other} does not hold weights of open_clip/{VIT}"):
        build_model(ModelSpec.from_config("mine", {"arch": f"open_clip/{VIT}", "weights": str(other)}))
    pickled = tmp_path / "options.pth"
    torch.save({"args": argparse.Namespace(lr=0.1), "state_dict": {"conv1.weight": torch.zeros(2)}}, pickled)
    with pytest.raises(UnsafeCheckpoint, match=r"argparse.Namespace"):
        ModelSpec.from_config("mine", {"arch": f"open_clip/{VIT}", "weights": str(pickled)})


# names, settings and weights that cannot be had --------------------------------------------


@pytest.mark.parametrize("entry, answers", [
    ({"arch": "open_clip/ViT-B-33"}, ["open_clip knows no model 'ViT-B-33'. The closest names open_clip knows: ViT-B-32"]),
    ({"arch": "open_clip/ViT-B-32", "weights": "pretrained"}, ["a pretrained tag of 'ViT-B-32' (its tags are openai, "]),
    ({"arch": "open_clip/ViT-B-32", "weights": "openai"}, ["trained with QuickGELU", "Name arch open_clip/ViT-B-32-quickgelu"]),
    ({"arch": "open_clip/ViT-B-32", "weights": "laion2b"}, ["weights 'laion2b' is neither 'random', an open_clip tag"]),
    ({"arch": "open_clip/ViT-B-32", "image_features": "tokens"}, ["image_features must be one of embedding, pooled"]),
    ({"arch": "open_clip/ViT-B-32", "preprocessing": "model"}, ["settings of timm models", "open_clip's own preprocessing"]),
    ({"arch": "resnet50", "image_features": "pooled"}, ["image_features is a setting of open_clip models"]),
])
def test_unknown_names_and_settings_fail_clearly(entry, answers):
    with pytest.raises((ValueError, FileNotFoundError), match="config.yaml: model 'mine'") as failure:
        ModelSpec.from_config("mine", {"weights": "random", **entry})
    for answer in answers:
        assert answer in str(failure.value)


def test_pretrained_weights_out_of_reach_name_the_model_and_how_to_fetch_them(tmp_path):
    """A node without internet and without open_clip's cache: the job says which model, where
    open_clip looked and how to fill the cache."""
    table = make_world(tmp_path, concepts=1, train=1, test=1)
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    job = subprocess.run(
        [sys.executable, "-m", "imagenet_cog", "extract", "--split-table", str(table),
         "--image-root", str(tmp_path / "images"), "--dataset", "l1", "--split", "train", "--shard", "0",
         "--shard-size", "10", "--model-name", "clip", "--arch", "open_clip/ViT-B-32",
         "--weights", "laion2b_s34b_b79k", "--image-features", "pooled", "--device", "cpu",
         "--output", str(tmp_path / "shard.h5")],
        capture_output=True, text=True, env=environment, timeout=600,
    )
    assert job.returncode != 0 and not (tmp_path / "shard.h5").exists()
    assert "PretrainedWeightsUnavailable" in job.stderr
    assert "model 'clip'" in job.stderr and "weights 'laion2b_s34b_b79k' of open_clip/ViT-B-32" in job.stderr
    assert "https://huggingface.co/laion/CLIP-ViT-B-32-laion2B-s34B-b79K" in job.stderr
    assert "open_clip.create_model('ViT-B-32', pretrained='laion2b_s34b_b79k')" in job.stderr
