"""NAT-M4 and T2T-ViT-t-14, written in the project: feature widths, sizes, published key names."""

from __future__ import annotations

import argparse

import pytest
import torch

from imagenet_cog.backbones.nat import nat_m4
from imagenet_cog.backbones.t2t_vit import t2t_vit_t_14
from imagenet_cog.models.registry import ModelSpec, build_model


def _trainable_millions(network, skip: tuple[str, ...]) -> float:
    return round(sum(p.numel() for name, p in network.named_parameters()
                     if p.requires_grad and not name.startswith(skip)) / 1e6, 1)


def test_nat_m4_features_size_and_names(one_torch_thread):
    torch.manual_seed(0)
    network = nat_m4().eval()
    # Paper Table 1: 7.6M parameters (the backbone, without the ImageNet classifier).
    assert _trainable_millions(network, skip=("classifier.",)) == 7.6
    names = set(network.state_dict())
    assert {"first_conv.conv.weight", "first_conv.bn.running_var",
            "blocks.0.mobile_inverted_conv.depth_conv.conv.weight",
            "blocks.4.mobile_inverted_conv.inverted_bottleneck.conv.weight",
            "blocks.4.mobile_inverted_conv.depth_conv.se.fc.reduce.weight",
            "blocks.19.mobile_inverted_conv.point_linear.bn.weight",
            "final_expand_layer.conv.weight", "feature_mix_layer.conv.weight",
            "classifier.linear.weight"} <= names
    # Expand ratio 1: the first block has no inverted bottleneck, as published.
    assert not any(name.startswith("blocks.0.mobile_inverted_conv.inverted_bottleneck") for name in names)
    network.classifier = torch.nn.Identity()
    with torch.inference_mode():
        assert network(torch.rand(2, 3, 64, 64)).shape == (2, 1536)


def test_t2t_vit_t_14_features_size_and_names(one_torch_thread):
    torch.manual_seed(0)
    network = t2t_vit_t_14(img_size=32).eval()
    full = t2t_vit_t_14()
    # Paper Table 1: 21.1M parameters (without the classifier; the position table is fixed).
    assert _trainable_millions(full, skip=("head.",)) == 21.1
    assert tuple(full.pos_embed.shape) == (1, 197, 384) and not full.pos_embed.requires_grad
    names = set(full.state_dict())
    assert {"cls_token", "pos_embed", "tokens_to_token.attention1.attn.qkv.weight",
            "tokens_to_token.attention2.mlp.fc2.bias", "tokens_to_token.project.weight",
            "blocks.13.attn.qkv.weight", "blocks.13.mlp.fc1.weight", "norm.weight", "head.weight"} <= names
    assert tuple(full.state_dict()["tokens_to_token.attention1.attn.qkv.weight"].shape) == (192, 147)
    assert tuple(full.state_dict()["blocks.0.mlp.fc1.weight"].shape) == (1152, 384)
    with torch.inference_mode():
        assert network.forward_features(torch.rand(2, 3, 32, 32)).shape == (2, 384)


@pytest.mark.parametrize("arch, release", [("nat_m4", "NAT-M4"), ("t2t_vit_t_14", "T2T-ViT")])
def test_published_checkpoint_layout_loads_into_the_registry_model(tmp_path, arch, release, one_torch_thread):
    torch.manual_seed(5)
    network = nat_m4() if arch == "nat_m4" else t2t_vit_t_14()
    state = network.state_dict()
    checkpoint = tmp_path / "model.ckpt"
    if arch == "nat_m4":
        torch.save(state, checkpoint)  # net.weights: the bare state dict
    else:
        # timm's checkpoint saver: raw and EMA weights (the authors evaluated the EMA ones)
        # and the training options, an argparse Namespace the model's config trusts.
        raw = {key: torch.zeros_like(value) for key, value in state.items()}
        torch.save({"epoch": 309, "arch": "T2t_vit_t_14", "args": argparse.Namespace(model="T2t_vit_t_14"),
                    "state_dict": raw, "state_dict_ema": state}, checkpoint)
    trusted = ("argparse.Namespace",) if arch == "t2t_vit_t_14" else ()

    model = build_model(ModelSpec("m", arch, str(checkpoint), trusted_globals=trusted))

    assert f"format {release}" in model.notes[0] and "0 backbone keys missing" in model.notes[0]
    module = "nat" if arch == "nat_m4" else "t2t_vit"
    assert model.weights_identity.startswith("sha256:")
    assert f"+imagenet_cog.backbones.{module}@sha256:" in model.weights_identity
    loaded = model.network.state_dict()
    assert all(torch.equal(loaded[key], state[key]) for key in loaded)
    assert set(state) - set(loaded) == {key for key in state if key.startswith(("classifier.", "head."))}
