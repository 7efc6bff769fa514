"""The model registry: paper feature sizes and preprocessing, weight identities, checkpoints."""

from __future__ import annotations

import argparse
import textwrap

import pytest
import torch
import torchvision

from imagenet_cog.models.checkpoints import CheckpointMismatch
from imagenet_cog.models.registry import (
    REGISTRY,
    ModelSpec,
    build_model,
    is_random_weights,
    weights_identity,
)

pytestmark = pytest.mark.heavy

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
# Paper supp. B.1 and Table 3: (feature size, S, mean, std) of every registered model.
PAPER = {
    "resnet50": (2048, 224, *IMAGENET),
    "resnet152": (2048, 224, *IMAGENET),
    "inception_v3": (2048, 299, *IMAGENET),
    "vgg19": (4096, 224, *IMAGENET),
    "efficientnet_b1": (1280, 240, *IMAGENET),
    "efficientnet_b4": (1792, 380, *IMAGENET),
    "deit_small": (384, 224, *IMAGENET),
    "deit_small_distilled": (384, 224, *IMAGENET),
    "deit_base_distilled_384": (768, 384, *IMAGENET),
    "clip_resnet50": (2048, 224, (0.481, 0.457, 0.408), (0.268, 0.261, 0.275)),
    "semi_sup_resnet50": (2048, 224, *IMAGENET),
    "semi_weakly_sup_resnet50": (2048, 224, *IMAGENET),
    "simclr_v2_resnet50": (2048, 224, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
    "nat_m4": (1536, 224, *IMAGENET),
    "t2t_vit_t_14": (384, 224, *IMAGENET),
}


DEMO_ONLY = {"demo_cnn"}  # the demo's own small network, pretrained by the workflow


def test_every_registered_model_is_checked_against_the_paper():
    assert set(REGISTRY) - DEMO_ONLY == set(PAPER)


@pytest.mark.parametrize("arch", sorted(PAPER))
def test_registered_model_gives_paper_features_and_preprocessing(arch):
    dim, size, mean, std = PAPER[arch]
    # build_model measures the feature size with a forward pass at the model's input size.
    model = build_model(ModelSpec(arch, arch, "random"))
    preprocessing = model.preprocessing
    assert model.feature_dim == dim
    assert (preprocessing.size, preprocessing.mean, preprocessing.std) == (size, mean, std)
    assert preprocessing.interpolation == "bicubic"
    # Networks written in the project add the digest of their code.
    assert model.random_weights and model.weights_identity.split("+")[0] == "random:0"
    assert not model.network.training


def test_weights_identities_name_their_source(tmp_path):
    checkpoint = tmp_path / "weights.pth"
    checkpoint.write_bytes(b"not really a checkpoint")
    assert weights_identity(ModelSpec("m", "resnet50", "random:7")) == "random:7"
    assert weights_identity(ModelSpec("m", "resnet50", "pretrained")) == "torchvision:ResNet50_Weights.IMAGENET1K_V1"
    assert weights_identity(ModelSpec("m", "deit_small", "pretrained")) == "timm:deit_small_patch16_224.fb_in1k"
    first = weights_identity(ModelSpec("m", "resnet50", str(checkpoint)))
    checkpoint.write_bytes(b"other bytes")
    second = weights_identity(ModelSpec("m", "resnet50", str(checkpoint)))
    assert first.startswith("sha256:") and first != second
    assert is_random_weights("random:3") and is_random_weights("random")
    assert not is_random_weights(first) and not is_random_weights("torchvision:x")


def test_unknown_arch_and_missing_checkpoint_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="unknown arch 'resnet5'.*resnet50"):
        ModelSpec.from_config("mine", {"arch": "resnet5"})
    with pytest.raises(FileNotFoundError, match="mine.*nothere.pth"):
        ModelSpec.from_config("mine", {"arch": "resnet50", "weights": str(tmp_path / "nothere.pth")})
    with pytest.raises(ValueError, match="no library weights"):
        ModelSpec.from_config("mine", {"arch": "simclr_v2_resnet50", "weights": "pretrained"})


def _reference_resnet50(seed: int):
    torch.manual_seed(seed)
    network = torchvision.models.resnet50()
    network.eval()
    return network


@pytest.mark.parametrize(
    "container, prefix",
    [("state_dict", "module.encoder_q."), ("model", "module.encoder."), (None, "online_network.encoder."),
     ("network", "backbone.")],
)
def test_prefixed_resnet50_checkpoint_loads_onto_torchvision(tmp_path, container, prefix):
    reference = _reference_resnet50(seed=123)
    state = {prefix + key: value for key, value in reference.state_dict().items()}
    # Pretraining heads and a momentum encoder sit next to the backbone in such files.
    state[prefix + "fc.0.weight"] = torch.zeros(128, 2048)
    state["module.encoder_k.conv1.weight"] = torch.zeros(64, 3, 7, 7)
    state["queue"] = torch.zeros(128, 16)
    checkpoint = tmp_path / "ssl.pth"
    # InfoMin-style files also pickle their training options.
    torch.save({container: state, "epoch": 200, "opt": argparse.Namespace(lr=0.03)} if container else state, checkpoint)

    trusted = ("argparse.Namespace",) if container else ()
    model = build_model(ModelSpec("ssl", "resnet50", str(checkpoint), trusted_globals=trusted))
    reference.fc = torch.nn.Identity()
    images = torch.rand(2, 3, 96, 96)
    with torch.inference_mode():
        assert torch.equal(model.network(images), reference(images))
    assert model.weights_identity.startswith("sha256:") and not model.random_weights
    backbone_tensors = len(reference.state_dict())
    assert f"loaded {backbone_tensors} tensors" in model.notes[0]
    assert ("trusted_globals (argparse.Namespace)" in model.notes[0]) is bool(container)


def test_checkpoint_of_another_network_names_file_and_keys(tmp_path):
    checkpoint = tmp_path / "resnet18.pth"
    torch.save({"state_dict": torchvision.models.resnet18().state_dict()}, checkpoint)
    with pytest.raises(CheckpointMismatch) as failure:
        build_model(ModelSpec("wrong", "resnet50", str(checkpoint)))
    message = str(failure.value)
    assert str(checkpoint) in message
    assert "missing" in message and "layer1.0.conv3.weight" in message
    assert "other shapes" in message


def test_a_series_checkpoint_of_another_network_names_its_step_and_file(tmp_path):
    checkpoint = tmp_path / "checkpoint40.pth"
    torch.save(torchvision.models.resnet18().state_dict(), checkpoint)
    with pytest.raises(CheckpointMismatch) as failure:
        build_model(ModelSpec("dino@40", "demo_cnn", str(checkpoint)))
    assert str(failure.value).startswith(f"model 'dino@40' (series dino, step 40): checkpoint {checkpoint} does not fit")


def test_checkpoint_with_foreign_keys_is_refused(tmp_path):
    state = _reference_resnet50(seed=1).state_dict()
    state["layer5.0.conv1.weight"] = torch.zeros(1)
    checkpoint = tmp_path / "extra.pth"
    torch.save(state, checkpoint)
    with pytest.raises(CheckpointMismatch, match=r"unexpected keys: layer5\.0\.conv1\.weight"):
        build_model(ModelSpec("extra", "resnet50", str(checkpoint)))


def test_custom_factory_model_from_config(tmp_path, monkeypatch):
    (tmp_path / "my_backbones.py").write_text(textwrap.dedent("""
        import torch.nn as nn

        def tiny(weights):
            network = nn.Sequential(nn.Conv2d(3, 5, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())
            return network, {"size": 40, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = ModelSpec.from_config("mine", {"arch": "custom", "factory": "my_backbones:tiny", "weights": "random:4"})
    model = build_model(spec)
    assert model.feature_dim == 5 and model.preprocessing.size == 40
    assert model.weights_identity.startswith("random:4+my_backbones:tiny@sha256:")
    assert model.random_weights
    with pytest.raises(ValueError, match="factory"):
        ModelSpec.from_config("mine", {"arch": "custom"})
