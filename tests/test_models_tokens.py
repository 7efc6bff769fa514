"""Which tokens of a ViT the features are (tokens, blocks): each choice against a hand
computation from the network's blocks, on random-weight ViTs of timm's families at the
demo's size (a class-token ViT, DINOv2 and DINOv3 with registers, an average-pool model,
EVA-02's pooled norm), their widths, the refusals, and the choice as the features' identity."""

from __future__ import annotations

import argparse

import h5py
import pytest
import timm
import torch

from conftest import make_world
from imagenet_cog.features.extract import (
    ExtractionOptions,
    ImageRows,
    SplitImages,
    add_model_arguments,
    extract_shard,
    model_spec_of,
)
from imagenet_cog.models.registry import (
    ModelSpec,
    extract_options,
    planned_feature_dim,
    planned_preprocessing,
    weights_identity,
)
from imagenet_cog.models.timm_models import TokenFeatures, pre_logits
from imagenet_cog.models.tokens import TokenChoice

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = {"depth": 3, "embed_dim": 48, "num_heads": 2}
# timm's name, the keywords that make it small, its side, and how timm's own pre-logits pool:
# 'cls' (its final class token), 'avgpool' (the mean of its normalised patch tokens).
FAMILIES = {
    "vit_class_token": ("vit_tiny_patch16_224", SMALL, 32, "cls"),
    "dinov2_registers": ("vit_small_patch14_reg4_dinov2", SMALL, 28, "cls"),
    "dinov3_registers_rope": ("vit_small_patch16_dinov3", SMALL, 32, "avgpool"),
    "gap_no_class_token": ("vit_huge_patch14_gap_224", SMALL, 28, "avgpool"),
    "eva02_pooled_norm": ("eva02_tiny_patch14_224", {"depth": 3}, 28, "avgpool"),
}


def small_network(family: str, seed: int = 0):
    name, options, size, _ = FAMILIES[family]
    torch.manual_seed(seed)
    return timm.create_model(name, img_size=size, **options).eval()


def block_outputs(network, images) -> list[torch.Tensor]:
    """Every block's output tokens, caught by hooks in the network's own forward."""
    caught: list[torch.Tensor] = []
    handles = [block.register_forward_hook(lambda _m, _i, output: caught.append(output)) for block in network.blocks]
    network.forward_features(images)
    for handle in handles:
        handle.remove()
    return caught


def by_hand(network, images, choice: TokenChoice) -> torch.Tensor:
    """DINOv2's create_linear_input, written out: the class token (position 0) of the last n
    blocks through the final norm, then the last block's patch tokens (after the class and
    register tokens) averaged; a model that normalises after pooling (fc_norm) normalises the
    class token and the mean instead."""
    outputs = block_outputs(network, images)[-choice.blocks:]
    prefix = network.num_prefix_tokens
    pools_first = isinstance(network.norm, torch.nn.Identity)
    parts = []
    for tokens in outputs if choice.class_tokens else ():
        parts.append(network.fc_norm(tokens[:, 0]) if pools_first else network.norm(tokens)[:, 0])
    if choice.patch_mean:
        last = outputs[-1]
        parts.append(network.fc_norm(last[:, prefix:].mean(1)) if pools_first
                     else network.norm(last)[:, prefix:].mean(1))
    return torch.cat(parts, dim=-1)


def choices_of(family: str) -> list[TokenChoice]:
    network = small_network(family)
    has_class = getattr(network, "has_class_token", getattr(network, "cls_token", None) is not None)
    if not has_class:
        return [TokenChoice("avgpool", 1)]
    return [TokenChoice("cls", 1), TokenChoice("cls", 3), TokenChoice("avgpool", 1), TokenChoice("cls+avgpool", 2)]


@pytest.mark.parametrize("family", FAMILIES)
def test_each_choice_is_the_hand_computation_from_the_blocks(family):
    _, _, size, timm_pools = FAMILIES[family]
    images = torch.randn(2, 3, size, size)
    width = small_network(family).num_features
    for choice in choices_of(family):
        reference = small_network(family)
        with torch.inference_mode():
            expected = by_hand(reference, images, choice)
            features = TokenFeatures(small_network(family), choice)(images)
        torch.testing.assert_close(features, expected, rtol=1e-5, atol=1e-5)
        assert features.shape == (2, choice.width(width))
        assert choice.width(width) == width * {"cls": choice.blocks, "avgpool": 1, "cls+avgpool": choice.blocks + 1}[
            choice.tokens]
        if choice == TokenChoice(timm_pools, 1):
            # the choice timm's own head makes is its pre-logits, to the bit
            with torch.inference_mode():
                torch.testing.assert_close(features, pre_logits(small_network(family), images), rtol=0, atol=0)


def test_register_tokens_never_enter():
    """Changing only the register tokens' values leaves the class token of the input layer
    alone but moves every later token; the features then follow the hand computation that
    skips them, and a mean over every non-class token differs from them."""
    network = small_network("dinov2_registers")
    assert network.num_reg_tokens == 4 and network.num_prefix_tokens == 5
    images = torch.randn(2, 3, 28, 28)
    with torch.inference_mode():
        features = TokenFeatures(small_network("dinov2_registers"), TokenChoice("avgpool", 1))(images)
        last = network.norm(block_outputs(network, images)[-1])
        with_registers = last[:, 1:].mean(1)
        without = last[:, 5:].mean(1)
    torch.testing.assert_close(features, without)
    assert not torch.allclose(features, with_registers, atol=1e-4)


@pytest.mark.parametrize(("arch", "choice", "refusal"), [
    ("timm/convnext_atto", TokenChoice("cls", 1), "convnext_atto.d2_in1k has no tokens"),
    ("timm/resnet18", TokenChoice("avgpool", 1), "supports tokens: pre_logits only"),
    ("timm/vit_huge_patch14_gap_224", TokenChoice("cls", 1), "has no class token: it supports tokens: pre_logits or avgpool"),
    ("timm/vit_tiny_patch16_224", TokenChoice("cls", 13), "has 12 blocks: blocks must be 1 to 12"),
    ("timm/vit_tiny_patch16_224", TokenChoice("avgpool", 4), "tokens: avgpool reads the last block alone"),
    ("timm/vit_tiny_patch16_224", TokenChoice("pre_logits", 2), "reads timm's head"),
    ("timm/vit_tiny_patch16_224", TokenChoice("pooler_output", 1), "pooler_output is the pooled output of transformers"),
])
def test_refusals_name_the_model_and_what_it_supports(arch, choice, refusal):
    spec = ModelSpec("vit", arch, "random", tokens=choice.tokens, blocks=choice.blocks)
    with pytest.raises(ValueError, match="config.yaml: model 'vit': ") as raised:
        spec.check()
    assert refusal in str(raised.value)


@pytest.mark.parametrize("arch", ["open_clip/CoG-demo-CLIP", "demo_cnn"])
def test_tokens_are_refused_outside_timm_and_transformers(arch):
    with pytest.raises(ValueError, match="tokens and blocks are settings of timm and transformers models"):
        ModelSpec("other", arch, "random", tokens="cls").check()


def test_widths_are_planned_without_weights():
    """The probes stage and the plan read the width on the meta device, at the real size."""
    arch = "timm/vit_small_patch14_reg4_dinov2.lvd142m"
    widths = {tokens: planned_feature_dim(ModelSpec("d", arch, "pretrained", input_size=224, tokens=tokens, blocks=blocks))
              for tokens, blocks in [("cls", 4), ("avgpool", 1), ("cls+avgpool", 4)]}
    assert widths == {"cls": 4 * 384, "avgpool": 384, "cls+avgpool": 5 * 384}


def test_the_choice_is_the_identity_and_the_command_line_of_that_model_alone():
    arch = "timm/vit_tiny_patch16_224"
    default = ModelSpec("vit", arch, "random:3")
    spelled_out = ModelSpec("vit", arch, "random:3", tokens="pre_logits", blocks=1)
    changed = ModelSpec("vit", arch, "random:3", tokens="cls+avgpool", blocks=2)
    # today's features stay current: the default adds nothing to the identity or the command
    assert weights_identity(default) == weights_identity(spelled_out) == "random:3"
    assert extract_options(default) == extract_options(spelled_out) == ["--preprocessing", "paper"]
    assert weights_identity(changed) == "random:3+tokens:cls+avgpool/blocks:2"
    assert extract_options(changed) == ["--preprocessing", "paper", "--tokens", "cls+avgpool", "--blocks", "2"]
    # the command reads back the spec the config gave
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    arguments = parser.parse_args(["--model-name", "vit", "--arch", arch, "--weights", "random:3", *extract_options(changed)])
    read = model_spec_of(arguments)
    assert read.token_choice == changed.token_choice and weights_identity(read) == weights_identity(changed)


def test_a_shard_records_the_tokens_and_holds_them(tmp_path):
    """End to end on a 12-block ViT at 32 pixels: the shard's features are the hand computation
    on the same preprocessed images, its attributes the choice and its width."""
    table = make_world(tmp_path, concepts=2, train=2, test=1)
    arch = "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k"
    spec = ModelSpec("vit", arch, "random:7", input_size=32, tokens="cls+avgpool", blocks=4)
    output = tmp_path / "shard.h5"
    images = SplitImages(table, tmp_path / "images", "l1", "train")
    attributes = extract_shard(spec, images, 0, 100, output, ExtractionOptions(batch_size=4, device="cpu", dtype="float32"))
    with h5py.File(output) as handle:
        features = torch.from_numpy(handle["features"][...])
        paths = list(handle["path"].asstr()[...])
        recorded = {key: handle.attrs[key] for key in ("tokens", "blocks", "weights", "feature_dim")}
    assert recorded == {"tokens": "cls+avgpool", "blocks": 4, "weights": "random:7+tokens:cls+avgpool/blocks:4",
                        "feature_dim": 5 * 192}
    assert attributes["feature_dim"] == planned_feature_dim(spec) == 5 * 192

    preprocessing = planned_preprocessing(spec)
    rows = ImageRows(tmp_path / "images", paths, preprocessing)
    pixels = torch.stack([rows[position][0] for position in range(len(rows))]).float()
    mean = torch.tensor(preprocessing.mean).view(1, 3, 1, 1) * 255
    std = torch.tensor(preprocessing.std).view(1, 3, 1, 1) * 255
    torch.manual_seed(7)
    reference = timm.create_model("vit_tiny_patch16_224", img_size=32).eval()
    with torch.inference_mode():
        expected = by_hand(reference, (pixels - mean) / std, TokenChoice("cls+avgpool", 4))
    # the extraction runs the network channels-last: equal up to float32 summation order
    torch.testing.assert_close(features, expected, rtol=1e-4, atol=1e-4)
