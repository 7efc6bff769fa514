"""config/modern_models.yaml: every release is one timm or open_clip lists (or a Hub repo of
Web-SSL's), the file validates over the real-data config, each entry says why its features are
read so, and the plan prices every library model offline, downloading nothing; the Hub repos,
offline with an empty cache, are named unpriced with the command that fills the cache."""

from __future__ import annotations

import copy
import re
import socket

import open_clip
import pytest
import timm
import yaml
from huggingface_hub import constants
from snakemake.utils import validate

from conftest import REPOSITORY
from imagenet_cog.models.registry import kept_models
from imagenet_cog.plan.work import model_widths

MODERN_MODELS = REPOSITORY / "config" / "modern_models.yaml"
SCHEMA = REPOSITORY / "workflow" / "schemas" / "config.schema.yaml"
# The widths each reading gives (D of the network, x blocks for class tokens, + 1 for the mean).
WIDTHS = {
    "dinov3_vitb16": 768, "dinov3_convnext_base": 1024, "dinov2_reg_vits14": 5 * 384, "ijepa_vith14": 1280,
    "mae_vitb16": 768, "eva02_vitb14": 768, "aimv2_vitl14": 1024, "pe_core_vitb16": 768,
    "clip_vitb16": 768, "siglip_vitb16": 768, "dfn_vith14": 1024, "metaclip_vitb16": 512,
}


@pytest.fixture(scope="module")
def models():
    return kept_models(yaml.safe_load(MODERN_MODELS.read_text())["models"])


def test_every_release_is_listed_by_its_library(models):
    released = set(timm.list_models(pretrained=True))
    tagged = set(open_clip.list_pretrained())
    for name, entry in models.items():
        library, release = entry["arch"].split("/", 1)
        if library == "timm":
            assert release in released and entry["weights"] == "pretrained", name
        elif library == "hf":
            # Web-SSL's Hub repos as its README lists them
            assert re.fullmatch(r"facebook/webssl-(dino|mae)[0-9]+[mb]-full2b-224", release), name
            assert entry["weights"] == "pretrained" and "MC-2B" in entry["label"], name
        else:
            assert library == "open_clip" and (release, entry["weights"]) in tagged, name
    families = " ".join(entry["arch"] for entry in models.values())
    for family in ("dinov3_lvd1689m", "convnext", "reg4_dinov2", "ijepa", ".mae", "eva02", "aimv2", "vit_pe_core",
                   "open_clip/ViT-B-16-quickgelu", "SigLIP", "ViT-H-14-quickgelu", "webssl-dino", "webssl-mae"):
        assert family in families, family
    assert {entry["weights"] for entry in models.values() if "quickgelu" in entry["arch"]} == {
        "openai", "dfn5b", "metaclip_fullcc"}


def test_each_entry_says_why_and_validates_over_the_real_config(models):
    text = MODERN_MODELS.read_text()
    blocks = re.split(r"\n  (?=[a-z0-9_]+:\n)", text.split("\nmodels:\n", 1)[1])
    commented = {block.split(":", 1)[0].strip() for block in blocks if "\n    #" in block or "  # " in block}
    assert set(models) <= commented
    config = yaml.safe_load((REPOSITORY / "config.yaml").read_text())
    for layer in (REPOSITORY / "config" / "imagenet.yaml", MODERN_MODELS):
        for key, value in yaml.safe_load(layer.read_text()).items():
            config[key] = {**config[key], **value} if isinstance(value, dict) and isinstance(config.get(key), dict) else value
    config["models"] = kept_models(config["models"])
    validate(copy.deepcopy(config), str(SCHEMA))
    assert set(config["models"]) == set(models) | {"resnet50"}


def test_the_plan_prices_every_model_offline(models, monkeypatch, tmp_path):
    """The widths the plan and the probes' job sizes read, from networks built on the meta
    device, with every network connection refused: nothing is downloaded. A Hub repo needs its
    config: with an empty Hugging Face cache it is unpriced, the command that fills it named."""

    def refuse(*_arguments):
        raise OSError("the network is out of bounds in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    widths, unpriced = model_widths(models)
    hub = {name: entry["arch"].removeprefix("hf/") for name, entry in models.items() if entry["arch"].startswith("hf/")}
    assert set(unpriced) == set(hub)
    for name, repo in hub.items():
        assert f"hf download {repo} --include '*.json' --include '*.safetensors'" in unpriced[name], name
    assert {name: width for name, (_, width) in widths.items()} == WIDTHS
