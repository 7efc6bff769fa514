"""What each model was pretrained on and its exposure (models/pretraining.py): the shipped tables
read and checked, the exposure of every model of config/modern_models.yaml and of the paper's 31,
an undeclared checkpoint, a series inheriting its entry's, the precedence of the classes, timm's
tags never given less exposure than they name, and the run's note."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import timm
import yaml

from conftest import REPOSITORY
from imagenet_cog.models.pretraining import (
    IMAGES,
    LABELS,
    NONE,
    PRECEDENCE,
    UNDECLARED,
    WEB,
    Catalogue,
    Pretraining,
    PretrainingDataError,
    premise_note,
    pretraining_json,
    read_datasets,
    read_pretraining_json,
    read_releases,
)
from imagenet_cog.models.registry import kept_models
from imagenet_cog.models.series import checkpoint_entry, expand_series
from imagenet_cog.results.paper import published_model_names

RESOURCES = REPOSITORY / "resources"
DATASETS = RESOURCES / "pretraining_datasets.tsv"
RELEASES = RESOURCES / "pretraining_releases.tsv"
# config/modern_models.yaml, read from its releases' papers (resources/pretraining_releases.tsv)
MODERN = {
    "dinov3_vitb16": (IMAGES, "lvd1689m"), "dinov3_convnext_base": (IMAGES, "lvd1689m"),
    "dinov2_reg_vits14": (IMAGES, "lvd142m"), "ijepa_vith14": (NONE, "in1k"), "mae_vitb16": (NONE, "in1k"),
    "eva02_vitb14": (IMAGES, "in21k-images"), "aimv2_vitl14": (WEB, "dfn2b,coyo700m,aimv2-private"),
    "pe_core_vitb16": (WEB, "metaclip-pe"), "clip_vitb16": (WEB, "wit400m"), "siglip_vitb16": (WEB, "webli"),
    "dfn_vith14": (WEB, "dfn5b"), "metaclip_vitb16": (WEB, "metaclip2.5b"),
    "web_dino_vit1b": (WEB, "mc2b"), "web_mae_vit1b": (WEB, "mc2b"),
}
# the paper's use-of-web-data models (Sec. 4.1, Table 1); the other 27 are IN-1K only
PAPER_WEB = {"d-Semi-Sup.": "yfcc100m,in1k", "d-Semi-Weakly-Sup.": "ig1b,in1k", "d-CLIP": "wit400m",
             "d-MoPro": "webvision1"}


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return Catalogue.read(DATASETS, RELEASES)


def entries(path: Path) -> dict:
    return kept_models(yaml.safe_load(path.read_text())["models"])


def test_every_dataset_and_release_row_has_a_source_and_the_paper_rows_are_the_published_31(catalogue):
    assert all(dataset.source and dataset.title for dataset in catalogue.datasets.values())
    assert all(release.source for release in catalogue.releases)
    assert list(catalogue.papers) == published_model_names(RESOURCES / "published_top1.tsv")
    assert {name: dataset.exposure for name, dataset in catalogue.datasets.items()
            if name in ("in1k", "in21k", "in21k-images", "lvd142m", "wit400m")} == {
        "in1k": NONE, "in21k": LABELS, "in21k-images": IMAGES, "lvd142m": IMAGES, "wit400m": WEB}


def test_the_exposure_of_every_modern_model(catalogue):
    found = {name: (value.exposure, value.data_text()) for name, value in (
        (name, catalogue.of_entry(name, entry, checkpoint=False)) for name, entry in entries(
            REPOSITORY / "config" / "modern_models.yaml").items())}
    assert found == MODERN


def test_the_exposure_of_the_papers_31_from_their_entries_and_their_published_rows(catalogue):
    models = entries(REPOSITORY / "config" / "paper_models.yaml")
    assert len(models) == 31
    for name, entry in models.items():
        checkpoint = entry["weights"] != "pretrained"
        value = catalogue.of_entry(name, entry, checkpoint)
        published = catalogue.of_paper(entry["paper_name"])
        web = next((data for paper, data in PAPER_WEB.items() if published.source == catalogue.papers[paper].source),
                   None)
        assert (value.exposure, value.data_text()) == ((WEB, web) if web else (NONE, "in1k")), name
        assert (published.exposure, published.data_text()) == (value.exposure, value.data_text()), name
    assert sorted(name for name in catalogue.papers if catalogue.of_paper(name).exposure == WEB) == sorted(PAPER_WEB)


def test_the_demos_models_keep_the_premise(catalogue):
    for name, entry in entries(REPOSITORY / "config.yaml").items():
        assert catalogue.of_entry(name, entry, checkpoint="checkpoints" in entry).exposure == NONE, name


def test_a_checkpoint_or_a_factory_that_says_nothing_is_undeclared_and_a_declaration_overrides(catalogue):
    mine = {"arch": "resnet50", "weights": "/runs/mine/checkpoint.pth"}
    assert catalogue.of_entry("mine", mine, checkpoint=True) == Pretraining(None, UNDECLARED, "")
    assert catalogue.of_entry("mine", {**mine, "weights": "pretrained"}, checkpoint=False).exposure == NONE
    factory = {"arch": "custom", "factory": "my_models:build", "weights": "pretrained"}
    assert catalogue.of_entry("mine", factory, checkpoint=False).exposure == UNDECLARED
    declared = catalogue.of_entry("mine", {**mine, "pretraining_data": ["in21k-images", "in1k"]}, checkpoint=True)
    assert (declared.exposure, declared.data_text(), declared.source) == (IMAGES, "in21k-images,in1k",
                                                                          "the entry's pretraining_data")
    # fine-tuning on IN-1K after IN-21K keeps the exposure; an empty declaration saw nothing
    assert catalogue.of_entry("m", {**mine, "pretraining_data": ["in21k", "in1k"]}, checkpoint=True).exposure == LABELS
    assert catalogue.of_entry("m", {**mine, "pretraining_data": []}, checkpoint=True) == Pretraining((), NONE,
                                                                                                     "the entry's pretraining_data")
    # a timm release read from a file is that file's, not the tag's
    dinov2 = {"arch": "timm/vit_small_patch14_dinov2.lvd142m", "weights": "/copies/model.safetensors"}
    assert catalogue.of_entry("d", dinov2, checkpoint=True).exposure == UNDECLARED
    assert catalogue.of_entry("d", {**dinov2, "weights": "pretrained"}, checkpoint=False).exposure == IMAGES


def test_a_series_takes_its_entrys_declaration(catalogue, tmp_path):
    for step in (10, 20):
        (tmp_path / f"checkpoint{step}.pth").write_bytes(str(step).encode())
    entry = {"arch": "resnet50", "checkpoints": str(tmp_path / "checkpoint{step}.pth"), "step_unit": "epoch",
             "pretraining_data": ["lvd142m"]}
    settings = {"shots": ["all"], "seeds": 1, "trials": 1, "knn": False, "concepts": False,
                "full_protocol_steps": ["last"], "settle_seconds": 0}
    series, _ = expand_series("run", entry, settings, str)
    for checkpoint in series.evaluated():
        value = catalogue.of_entry(checkpoint.model, checkpoint_entry(entry, checkpoint), checkpoint=True)
        assert (value.exposure, value.data_text()) == (IMAGES, "lvd142m")
    undeclared = {key: value for key, value in entry.items() if key != "pretraining_data"}
    checkpoint = series.evaluated()[0]
    assert catalogue.of_entry(checkpoint.model, checkpoint_entry(undeclared, checkpoint), True).exposure == UNDECLARED


def test_the_classes_take_the_furthest_from_the_premise(catalogue):
    assert PRECEDENCE == (NONE, WEB, IMAGES, LABELS)
    assert catalogue.exposure_of(("in1k", "wit400m", "in21k-images", "in21k")) == LABELS
    assert catalogue.exposure_of(("wit400m", "in21k-images")) == IMAGES
    assert catalogue.exposure_of(("in1k", "laion2b")) == WEB
    assert catalogue.exposure_of(("in1k",)) == catalogue.exposure_of(()) == NONE
    assert catalogue.exposure_of(None) == UNDECLARED


def test_an_unknown_dataset_is_refused_with_the_catalogues_names(catalogue):
    with pytest.raises(PretrainingDataError) as refused:
        catalogue.of_entry("mine", {"arch": "resnet50", "pretraining_data": ["in1k", "imagenet-22k"]}, False)
    message = str(refused.value)
    assert message.startswith("config.yaml: model 'mine': pretraining_data names 'imagenet-22k'")
    assert all(name in message for name in catalogue.datasets) and "'in1k'" not in message


@pytest.mark.parametrize("row, expected", [
    ("in1k\tx\tyes\tno\tno\tno\ts", "IN-21K labels"),
    ("in1k\tx\tno\tyes\tno\tno\ts", "IN-21K labels without IN-21K images"),
    ("in1k\tx\tno\tno\tno\tall\ts", "gathered_over is 'all'"),
    ("in1k\tx\tno\tno\tno\tno", "does not have 7 tab-separated values"),
])
def test_a_catalogue_row_that_contradicts_itself_is_refused(tmp_path, row, expected):
    path = tmp_path / "datasets.tsv"
    path.write_text("dataset\ttitle\tin21k_images\tin21k_labels\tweb\tgathered_over\tsource\n" + row + "\n")
    if expected == "IN-21K labels":  # a consistent row reads
        assert read_datasets(path)["in1k"].exposure == IMAGES
        return
    with pytest.raises(PretrainingDataError, match=re.escape(expected)) as refused:
        read_datasets(path)
    assert str(path) in str(refused.value)


def test_a_release_row_naming_an_unknown_dataset_or_a_paper_row_with_an_arch_is_refused(tmp_path, catalogue):
    path = tmp_path / "releases.tsv"
    path.write_text("arch\tweights\tpaper_name\tpretraining_data\tsource\ntimm/*.x\tpretrained\t-\tin1k,jft\ts\n")
    with pytest.raises(PretrainingDataError, match="names jft, which the datasets' catalogue lacks"):
        read_releases(path, catalogue.datasets)
    path.write_text("arch\tweights\tpaper_name\tpretraining_data\tsource\nresnet50\t*\tResNet50\tin1k\ts\n")
    with pytest.raises(PretrainingDataError, match="write \\* as its arch and weights"):
        read_releases(path, catalogue.datasets)
    path.write_text("arch\tweights\tsource\nx\ty\tz\n")
    with pytest.raises(PretrainingDataError, match="the header must be arch, weights, paper_name"):
        read_releases(path, catalogue.datasets)


# a token of a timm tag -> the least exposure a release whose tag names it may be given
TAG_TOKENS = {
    r"in12k|in21k|inw21k|(?<!mim_)in22k(?!_ijepa)": LABELS,
    r"mim_in22k|in22k_ijepa|lvd142m|lvd1689m": IMAGES,
    r"openai|laion|webli|dfn\d|dfndr|metaclip|datacomp|yfcc|ig1b|jft|merged2b|cc12m|apple_pt$|swag|seer": WEB,
}


def test_no_timm_release_is_given_less_exposure_than_its_tag_names(catalogue):
    """Every pretrained release timm lists: the class its tag's data names is a floor (undeclared
    claims nothing, so it passes); a tag naming IN-1K alone is none."""
    checked = 0
    for name in timm.list_models(pretrained=True):
        if "." not in name:
            continue
        tag = name.split(".", 1)[1]
        value = catalogue.of_entry(name, {"arch": f"timm/{name}", "weights": "pretrained"}, checkpoint=False)
        floors = [exposure for pattern, exposure in TAG_TOKENS.items() if re.search(pattern, tag)]
        if value.exposure == UNDECLARED:
            continue
        checked += 1
        floor = max(floors, key=PRECEDENCE.index, default=NONE)
        assert PRECEDENCE.index(value.exposure) >= PRECEDENCE.index(floor), (name, value, floor)
        if not floors and re.fullmatch(r"([a-z0-9]+_)*in1k(_\d+)?", tag):
            assert value.exposure == NONE, name
    assert checked > 1000


def test_open_clip_tags_and_hugging_face_names_of_the_other_releases(catalogue):
    cases = {
        ("open_clip/ViT-B-32", "laion2b_s34b_b79k"): (WEB, "laion2b"),
        ("open_clip/ViT-B-32-quickgelu", "openai"): (WEB, "wit400m"),
        ("open_clip/ViT-L-14", "datacomp_xl_s13b_b90k"): (WEB, "datacomp"),
        ("hf/facebook/webssl-dino1b-full2b-224", "pretrained"): (WEB, "mc2b"),
        ("hf/facebook/dinov2-with-registers-small", "pretrained"): (IMAGES, "lvd142m"),
        ("hf/facebook/dinov3-vitb16-pretrain-lvd1689m", "pretrained"): (IMAGES, "lvd1689m"),
        ("hf/facebook/ijepa_vith14_1k", "pretrained"): (NONE, "in1k"),
        ("hf/facebook/ijepa_vith14_22k", "pretrained"): (IMAGES, "in21k-images"),
        ("hf/google/siglip-base-patch16-224", "pretrained"): (WEB, "webli"),
        ("hf/facebook/dinov3-vitl16-pretrain-sat493m", "pretrained"): (UNDECLARED, "?"),
    }
    for (arch, weights), expected in cases.items():
        value = catalogue.of_entry("m", {"arch": arch, "weights": weights}, checkpoint=False)
        assert (value.exposure, value.data_text()) == expected, arch


def test_the_option_round_trips_and_the_note_names_the_models_apart():
    models = {"dino": Pretraining(("lvd142m",), IMAGES), "mine": Pretraining(None, UNDECLARED),
              "resnet": Pretraining(("in1k",), NONE)}
    assert read_pretraining_json(pretraining_json(models)) == (models, {})
    note = premise_note(models)
    assert note.startswith("2 of 3 models were pretrained on more than IN-1K")
    lines = note.splitlines()
    assert lines[1].startswith("  images (") and lines[1].endswith("): dino (lvd142m)")
    assert lines[2].startswith("  undeclared (") and "declare models.<name>.pretraining_data" in lines[2]
    assert "resnet" not in note and premise_note({"resnet": models["resnet"]}) is None
