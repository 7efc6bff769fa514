"""Hugging Face transformers models by name (arch: hf/<org>/<name>, hf/<folder>), on small models
of each family the tests build and save with an image processor beside them (no network):

- the features are transformers' own forward on its image processor's output, read as the
  family's evaluation reads it (DINOv2 with and without registers, ViT, ViT-MAE, ConvNeXt);
  ViT-MAE is read with every patch, and two extractions are equal;
- the workflow's transform is the image processor's output, exactly for the backend that
  resizes as the extraction's host path does, within one grey level across them;
- the identity is the release's content: a copied folder keeps it, a Hub repo's is its commit
  and its weights' sha256, the same from the Hub's listing and from the cache;
- what is refused before any job, each naming the repo or folder, and all in one screen;
- the plan prices such a model, its width from the network on the meta device.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import torch
import transformers
from huggingface_hub import constants
from huggingface_hub.errors import RepositoryNotFoundError
from huggingface_hub.hf_api import BlobLfsInfo, RepoSibling
from PIL import Image
from safetensors.torch import load_file
from torchcodec.decoders import decode_jpeg
from transformers import (
    AutoImageProcessor,
    AutoModel,
    BertConfig,
    BertModel,
    BitImageProcessor,
    ConvNextConfig,
    ConvNextImageProcessor,
    ConvNextModel,
    Dinov2Config,
    Dinov2Model,
    Dinov2WithRegistersConfig,
    Dinov2WithRegistersModel,
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessor,
    ViTMAEConfig,
    ViTMAEModel,
    ViTModel,
)

from conftest import copy_workflow, make_world, refused_overlay
from imagenet_cog.features.decoding import resize_and_crop
from imagenet_cog.features.extract import ExtractionOptions, ImageRows, SplitImages, extract_shard
from imagenet_cog.models import hf_catalogue, hf_release
from imagenet_cog.models.checkpoint_fit import checkpoint_misfit
from imagenet_cog.models.hf_catalogue import DEFAULT_DEPTH, DEFAULT_IMAGE_SIZE, PROCESSORS, processor_preprocessing
from imagenet_cog.models.registry import (
    ModelSpec,
    Preprocessing,
    build_model,
    checkpoint_sha256,
    describe_models,
    file_sha256,
    planned_feature_dim,
    planned_preprocessing,
    weights_identity,
)
from imagenet_cog.models.series import checkpoint_entry, expand_series
from imagenet_cog.plan.work import model_widths

pytestmark = pytest.mark.usefixtures("one_torch_thread")

IMAGENET = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}
SMALL = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
# Each family's small model and image processor (make_world's images are 40 to 52 pixels wide,
# 36 to 46 high: every processor here shrinks them), and its width read as the family reads it.
FAMILIES = {
    "dinov2": (lambda: Dinov2Model(Dinov2Config(**SMALL, num_hidden_layers=4, image_size=28, patch_size=14)),
               lambda: BitImageProcessor(size={"shortest_edge": 33}, crop_size={"height": 28, "width": 28}, **IMAGENET),
               5 * 32),
    "dinov2_with_registers": (
        lambda: Dinov2WithRegistersModel(Dinov2WithRegistersConfig(**SMALL, num_hidden_layers=4, image_size=28,
                                                                   patch_size=14, num_register_tokens=4)),
        lambda: BitImageProcessor(size={"shortest_edge": 33}, crop_size={"height": 28, "width": 28}, **IMAGENET),
        5 * 32),
    "vit": (lambda: ViTModel(ViTConfig(**SMALL, num_hidden_layers=2, image_size=32, patch_size=8), add_pooling_layer=False),
            lambda: ViTImageProcessor(size={"height": 32, "width": 32}), 32),
    "vit_mae": (lambda: ViTMAEModel(ViTMAEConfig(**SMALL, num_hidden_layers=2, image_size=32, patch_size=8)),
                lambda: ViTImageProcessor(size={"height": 32, "width": 32}, resample=3, **IMAGENET), 32),
    "convnext": (lambda: ConvNextModel(ConvNextConfig(hidden_sizes=[8, 16, 24, 40], depths=[1, 1, 1, 1])),
                 lambda: ConvNextImageProcessor(size={"shortest_edge": 32}), 40),
}


def save_release(folder: Path, family: str, seed: int = 0) -> Path:
    """A family's small model with random weights and its image processor, as save_pretrained writes them."""
    network, processor, _ = FAMILIES[family]
    torch.manual_seed(seed)
    network().save_pretrained(folder)
    processor().save_pretrained(folder)
    return folder


def hf_spec(folder: Path, name: str = "model", **settings) -> ModelSpec:
    return ModelSpec(name, f"hf/{folder}", **settings)


def reference_reading(family: str, folder: Path, pixels: torch.Tensor) -> torch.Tensor:
    """The family's reading of transformers' own forward, written out per family."""
    with torch.inference_mode():
        if family.startswith("dinov2"):
            # dinov2/hub/classifiers.py's linear input: the last 4 blocks' class tokens through the
            # final norm, then the mean of the patch tokens past the class and register tokens
            model = AutoModel.from_pretrained(folder).eval()
            output = model(pixel_values=pixels, output_hidden_states=True)
            earlier = [model.layernorm(hidden[:, 0]) for hidden in output.hidden_states[-4:-1]]
            first_patch = 1 + getattr(model.config, "num_register_tokens", 0)
            patches = output.last_hidden_state[:, first_patch:].mean(dim=1)
            return torch.cat([*earlier, output.last_hidden_state[:, 0], patches], dim=-1)
        if family == "vit":
            return AutoModel.from_pretrained(folder, add_pooling_layer=False).eval()(pixels).last_hidden_state[:, 0]
        if family == "vit_mae":
            # every patch, kept in order: no masking ratio, noise in increasing order
            model = AutoModel.from_pretrained(folder, mask_ratio=0.0).eval()
            noise = torch.arange(16, dtype=torch.float32).expand(len(pixels), -1)
            return model(pixel_values=pixels, noise=noise).last_hidden_state[:, 0]
        return AutoModel.from_pretrained(folder).eval()(pixels).pooler_output


def extract(spec: ModelSpec, world: Path, output: Path) -> tuple[torch.Tensor, list[str], dict]:
    images = SplitImages(world / "splits.tsv", world / "images", "l1", "train")
    attributes = extract_shard(spec, images, 0, 100, output, ExtractionOptions(batch_size=4, device="cpu", dtype="float32"))
    with h5py.File(output) as handle:
        return torch.from_numpy(handle["features"][...]), list(handle["path"].asstr()[...]), attributes


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("world")
    make_world(root, concepts=2, train=4, test=1)
    return root


@pytest.mark.parametrize("family", FAMILIES)
def test_features_are_transformers_forward_on_the_processors_output(family, world, tmp_path):
    folder = save_release(tmp_path / family, family)
    spec = hf_spec(folder)
    features, paths, attributes = extract(spec, world, tmp_path / "shard.h5")
    processor = AutoImageProcessor.from_pretrained(folder, backend="pil")
    images = [Image.open(world / "images" / path).convert("RGB") for path in paths]
    expected = reference_reading(family, folder, processor(images, return_tensors="pt")["pixel_values"])
    assert features.shape == expected.shape == (len(paths), FAMILIES[family][2])
    torch.testing.assert_close(features, expected, rtol=1e-4, atol=1e-5)
    # the width is known before any weight is read: the network on the meta device
    assert attributes["feature_dim"] == planned_feature_dim(spec) == FAMILIES[family][2]
    assert attributes["hf_model"] == str(folder) and attributes["hf_model_type"] == family
    assert attributes["weights"] == weights_identity(spec) and not attributes["random_weights"]
    assert attributes["transformers_version"] == transformers.__version__


def test_vit_mae_reads_every_patch_the_same_way_twice(world, tmp_path):
    """ViTMAEModel drops three patches in four at random by default (a new draw each forward):
    the extraction reads them all, in order, and two extractions are equal."""
    folder = save_release(tmp_path / "mae", "vit_mae")
    pixels = torch.rand(2, 3, 32, 32)
    masking = AutoModel.from_pretrained(folder).eval()
    with torch.inference_mode():
        first, second = masking(pixel_values=pixels).last_hidden_state, masking(pixel_values=pixels).last_hidden_state
    assert first.shape[1] == 1 + 16 // 4 and not torch.equal(first, second)
    spec = hf_spec(folder, tokens="avgpool")
    once, _, _ = extract(spec, world, tmp_path / "once.h5")
    again, _, _ = extract(spec, world, tmp_path / "again.h5")
    assert torch.equal(once, again)


def test_deeper_readings_and_the_pooler_are_the_entrys_choice(world, tmp_path):
    folder = save_release(tmp_path / "dinov2", "dinov2")
    cls_two = hf_spec(folder, tokens="cls", blocks=2)
    features, paths, _ = extract(cls_two, world, tmp_path / "cls.h5")
    full, _, _ = extract(hf_spec(folder), world, tmp_path / "full.h5")
    # the class tokens of the last two blocks are the default's third and fourth, in order
    torch.testing.assert_close(features, full[:, 2 * 32:4 * 32])
    # a ViT saved with its pooler is read by it on request
    torch.manual_seed(3)
    vit = tmp_path / "vit_pooler"
    ViTModel(ViTConfig(**SMALL, num_hidden_layers=2, image_size=32, patch_size=8)).save_pretrained(vit)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(vit)
    pooled, paths, _ = extract(hf_spec(vit, tokens="pooler_output"), world, tmp_path / "pooled.h5")
    processor = AutoImageProcessor.from_pretrained(vit, backend="pil")
    pixels = processor([Image.open(world / "images" / path).convert("RGB") for path in paths], return_tensors="pt")
    with torch.inference_mode():
        expected = AutoModel.from_pretrained(vit).eval()(**pixels).pooler_output
    torch.testing.assert_close(pooled, expected, rtol=1e-4, atol=1e-5)
    # one saved without it is refused: its pooler would be random
    no_pooler = save_release(tmp_path / "vit", "vit")
    with pytest.raises(ValueError, match=r"leave 2 tensors .* unset \(pooler.dense.bias, pooler.dense.weight\)"):
        build_model(hf_spec(no_pooler, tokens="pooler_output"))


def jpeg(path: Path, width: int, height: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    Image.fromarray(small).resize((width, height), Image.Resampling.BILINEAR).save(path, quality=95)
    return path.name


PROCESSOR_CONFIGS = {
    "bit, odd crop margins": {"image_processor_type": "BitImageProcessor", "size": {"shortest_edge": 73},
                              "crop_size": {"height": 64, "width": 64}},
    "vit, squash": {"image_processor_type": "ViTImageProcessor", "size": {"height": 64, "width": 64}},
    "convnext, crop_pct": {"image_processor_type": "ConvNextImageProcessor", "size": {"shortest_edge": 64}},
    "convnext, 384 squash": {"image_processor_type": "ConvNextImageProcessor", "size": {"shortest_edge": 384}},
    "siglip": {"image_processor_type": "SiglipImageProcessor", "size": {"height": 48, "width": 48}},
    "clip, fast spelling": {"image_processor_type": "CLIPImageProcessorFast", "size": {"shortest_edge": 57},
                            "crop_size": 50},
    "dinov3, float resize": {"image_processor_type": "DINOv3ViTImageProcessor", "size": {"height": 64, "width": 64}},
    # a feature extractor's config as old releases saved it: size a number, most keys left out
    "vit, legacy": {"feature_extractor_type": "ViTFeatureExtractor", "size": 40, "resample": 3, **IMAGENET},
}


@pytest.mark.parametrize("name", PROCESSOR_CONFIGS)
def test_the_transform_is_the_image_processors_output(name, tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(PROCESSOR_CONFIGS[name]))
    fields = processor_preprocessing(PROCESSOR_CONFIGS[name], hf_catalogue.HF_FAMILIES["vit"], name)
    preprocessing = Preprocessing(**fields)
    sizes = [(512, 410), (431, 640), (450, 450), (1024, 405), (401, 399)]
    paths = [jpeg(tmp_path / f"{number}.jpg", *size, seed=number) for number, size in enumerate(sizes)]
    mean = torch.tensor(preprocessing.mean).view(3, 1, 1) * 255
    std = torch.tensor(preprocessing.std).view(3, 1, 1) * 255
    for backend in ("pil", "torchvision"):
        # DINOv3's processor has a torchvision backend only, which transformers falls back to
        processor = AutoImageProcessor.from_pretrained(tmp_path, backend=backend)
        host_resize = {"pil": "pil", "torchvision": "tensor"}[processor.backend]
        for host in ("pil", "tensor"):
            rows = ImageRows(tmp_path, paths, preprocessing, host_resize=host)
            for position, path in enumerate(paths):
                output = processor(Image.open(tmp_path / path).convert("RGB"), return_tensors="pt")["pixel_values"][0]
                grey_levels = output * std + mean
                ours = rows[position][0].float()
                assert ours.shape == grey_levels.shape == (3, preprocessing.size, preprocessing.size)
                difference = (grey_levels - ours).abs()
                if host == host_resize:
                    # the same resize: the same pixels (DINOv3's resizes floats, which are not rounded)
                    assert difference.max() <= (1 + 1e-3 if "float" in name else 1e-3), (backend, host, path)
                else:
                    # PIL's and torchvision's antialiased kernels: a grey level or two, here and there
                    assert difference.max() <= 2 + 1e-3 and difference.mean() < 0.5, (backend, host, path)
        # the device path (features.decode: device) crops at the same place
        for path in paths:
            decoded = decode_jpeg(torch.from_numpy(np.fromfile(tmp_path / path, dtype=np.uint8)), mode="RGB")
            output = processor(Image.open(tmp_path / path).convert("RGB"), return_tensors="pt")["pixel_values"][0]
            assert (resize_and_crop(decoded, preprocessing).float() - (output * std + mean)).abs().mean() < 1.5


def test_the_processor_defaults_are_transformers():
    """The defaults of the keys a saved config leaves out, held to transformers' classes; the
    families' config defaults likewise."""
    for name, rule in PROCESSORS.items():
        kind = getattr(transformers, f"{name}Pil", None) or getattr(transformers, name)
        processor = kind()
        assert int(processor.resample) == rule.resample, name
        assert (tuple(processor.image_mean), tuple(processor.image_std)) == rule.mean_std, name
        size = {key: value for key, value in vars(processor.size).items() if value is not None}
        assert size == rule.size and bool(processor.default_to_square) == rule.default_to_square, name
        crop = processor.crop_size and {key: value for key, value in vars(processor.crop_size).items() if value is not None}
        assert (crop or None) == rule.crop_size and bool(processor.do_center_crop) == rule.do_center_crop, name
        assert getattr(processor, "crop_pct", None) == rule.crop_pct, name
    for config in (Dinov2Config, Dinov2WithRegistersConfig, transformers.DINOv3ViTConfig, ViTConfig, ViTMAEConfig,
                   transformers.IJepaConfig, transformers.SiglipVisionConfig):
        assert (config().num_hidden_layers, config().image_size) == (DEFAULT_DEPTH, DEFAULT_IMAGE_SIZE), config


# identity ----------------------------------------------------------------------------------


def test_a_copied_folder_keeps_its_identity_and_a_change_makes_another(tmp_path):
    folder = save_release(tmp_path / "vit", "vit")
    spec = hf_spec(folder)
    identity = weights_identity(spec)
    assert identity.startswith("hf:folder+config:") and identity.endswith("+tokens:cls/blocks:1")
    copied = tmp_path / "elsewhere" / "vit-copy"
    shutil.copytree(folder, copied)
    assert weights_identity(hf_spec(copied)) == identity
    assert planned_preprocessing(hf_spec(copied)) == planned_preprocessing(spec)
    assert weights_identity(hf_spec(copied, tokens="avgpool")) != identity
    other_weights = save_release(tmp_path / "vit-other", "vit", seed=1)
    assert weights_identity(hf_spec(other_weights)).split("+")[2] != identity.split("+")[2]
    config = json.loads((copied / "config.json").read_text())
    (copied / "config.json").write_text(json.dumps({**config, "layer_norm_eps": 1e-6}))
    assert weights_identity(hf_spec(copied)).split("+")[1] != identity.split("+")[1]


def fill_cache(cache: Path, repo: str, folder: Path, commit: str, ref: str = "main") -> None:
    """The Hugging Face cache's layout of ``folder``'s files as the Hub's ``commit`` of ``repo``:
    blobs named by their sha256, the snapshot's links to them, the ref."""
    root = cache / f"models--{repo.replace('/', '--')}"
    for path in folder.iterdir():
        blob = root / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, blob)
        link = root / "snapshots" / commit / path.name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / ref).write_text(commit)


def forget_releases() -> None:
    """Releases are read afresh (planning keeps what it read: the Hub's listings, the releases)."""
    hf_release.hub_listing.cache_clear()
    hf_release.resolve_release.cache_clear()
    hf_catalogue.resolve.cache_clear()


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty Hugging Face cache and a Hub out of reach (HF_HUB_OFFLINE), for this test."""
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    forget_releases()
    yield tmp_path / "hf-cache"
    forget_releases()


def test_a_hub_repo_is_its_commit_and_its_weights_the_same_online_and_from_the_cache(hub, tmp_path, monkeypatch):
    folder = save_release(tmp_path / "release", "vit")
    commit = "a" * 40
    fill_cache(hub, "lab/tiny-vit", folder, commit)
    spec = ModelSpec("vit", "hf/lab/tiny-vit")
    offline = weights_identity(spec)
    weights = weights_identity(hf_spec(folder)).split("+")[2]
    assert offline == f"hf:lab/tiny-vit@{commit}+{weights}+tokens:cls/blocks:1"

    # online: the Hub's listing (commit, LFS sha256) and its downloads into the cache
    def model_info(_api, repo, revision=None, files_metadata=False):
        assert (repo, revision, files_metadata) == ("lab/tiny-vit", None, True)
        return SimpleNamespace(sha=commit, siblings=[
            RepoSibling(path.name, lfs=BlobLfsInfo(path.stat().st_size, file_sha256(path), 128)) for path in folder.iterdir()])

    snapshot = hub / "models--lab--tiny-vit" / "snapshots" / commit
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_release.HfApi, "model_info", model_info)
    monkeypatch.setattr(hf_release, "hf_hub_download", lambda repo, name, revision: str(snapshot / name))
    forget_releases()
    assert weights_identity(spec) == offline
    assert build_model(spec).provenance["hf_commit"] == commit

    # a new commit of the same weights is another revision: that model's features again
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    fill_cache(hub, "lab/tiny-vit", folder, "b" * 40)
    forget_releases()
    assert weights_identity(spec) == offline.replace(commit, "b" * 40)
    assert weights_identity(ModelSpec("vit", "hf/lab/tiny-vit", revision=commit)) == offline


# refusals ----------------------------------------------------------------------------------


def refusal(spec: ModelSpec) -> str:
    """What checking ``spec`` refuses, its release read afresh (planning keeps what it read)."""
    forget_releases()
    with pytest.raises((ValueError, FileNotFoundError)) as refused:
        spec.check()
    return str(refused.value)


def test_remote_code_needs_the_entrys_opt_in_and_a_pinned_commit(hub, tmp_path):
    folder = save_release(tmp_path / "remote", "vit")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "modeling_mine.MyViT"}}))
    assert "asks for remote code (AutoModel)" in refusal(hf_spec(folder)) and "trust_remote_code: true" in refusal(
        hf_spec(folder))
    pinned = ModelSpec("m", "hf/lab/remote-vit", trust_remote_code=True, revision="main")
    assert "pin the commit you have read: revision: <its 40-hex commit>" in refusal(pinned)
    # opted in, a folder (the code is the user's own) or a pinned repo is read by its pooled output
    trusted = ModelSpec("m", f"hf/{folder}", trust_remote_code=True)
    assert trusted.hf_model().choice.tokens == "pooler_output"
    fill_cache(hub, "lab/remote-vit", folder, "c" * 40)
    assert ModelSpec("m", "hf/lab/remote-vit", trust_remote_code=True, revision="c" * 40).hf_model().release.commit == "c" * 40


def test_what_cannot_be_read_is_refused_naming_the_repo_or_folder(hub, tmp_path, monkeypatch):
    assert "folder ./no/such/model does not exist" in refusal(ModelSpec("m", "hf/./no/such/model"))
    pickled = tmp_path / "pickled"
    save_release(pickled, "vit")
    os.replace(pickled / "model.safetensors", pickled / "pytorch_model.bin")
    assert f"folder {pickled} holds its weights only as pytorch_model.bin, a pickle" in refusal(hf_spec(pickled))
    text = tmp_path / "bert"
    BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)).save_pretrained(text)
    ViTImageProcessor().save_pretrained(text)
    assert "names model_type 'bert', which is not a vision family the workflow reads" in refusal(hf_spec(text))
    # offline, a repo the cache lacks: the command that fills the cache
    absent = refusal(ModelSpec("m", "hf/lab/absent", revision="v1"))
    assert "has no lab/absent at revision 'v1'" in absent
    assert "hf download lab/absent --revision v1 --include '*.json' --include '*.safetensors'" in absent
    # online, a repo the Hub does not have
    missing = RepositoryNotFoundError.__new__(RepositoryNotFoundError)

    def model_info(*_arguments, **_options):
        raise missing

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_release.HfApi, "model_info", model_info)
    assert "the Hub has no model repo lab/typo" in refusal(ModelSpec("m", "hf/lab/typo"))


@pytest.mark.parametrize("family, settings, refused", [
    ("convnext", {"tokens": "cls"}, "(ConvNeXt) cannot give tokens: cls; it gives pooler_output"),
    ("vit_mae", {"tokens": "pooler_output"}, "(ViT-MAE) cannot give tokens: pooler_output; it gives cls, avgpool"),
    ("dinov2", {"tokens": "cls", "blocks": 5}, "has 4 blocks: blocks must be 1 to 4"),
    ("vit", {"tokens": "pre_logits"}, "tokens: pre_logits is timm's head"),
    ("vit", {"tokens": "avgpool", "blocks": 2}, "blocks: 2 counts the class tokens of the last blocks"),
    ("vit", {"weights": "random"}, "an hf/ model's weights are its repo's or folder's"),
    ("vit", {"input_size": 224}, "preprocessing and input_size are settings of timm models"),
])
def test_readings_and_settings_the_family_cannot_take_are_refused(family, settings, refused, tmp_path):
    assert refused in refusal(hf_spec(save_release(tmp_path / family, family), **settings))


def test_processors_and_input_sizes_the_extraction_cannot_reproduce_are_refused(tmp_path):
    folder = save_release(tmp_path / "vit", "vit")
    ViTImageProcessor(size={"height": 40, "width": 40}).save_pretrained(folder)
    assert "gives 40 x 40 images, and its ViT network takes 32 x 32 only" in refusal(hf_spec(folder))
    BitImageProcessor(size={"shortest_edge": 32}, do_center_crop=False).save_pretrained(folder)
    assert "resizes the shortest side to 32 without a crop" in refusal(hf_spec(folder))
    (folder / "preprocessor_config.json").unlink()
    assert "has no preprocessor_config.json" in refusal(hf_spec(folder))


def test_every_refusal_is_told_in_one_screen_before_any_job(tmp_path):
    workdir = copy_workflow(tmp_path / "workflow")
    remote = save_release(workdir / "models" / "remote", "vit")
    config = json.loads((remote / "config.json").read_text())
    (remote / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "mine.ViT"}}))
    save_release(workdir / "models" / "mae", "vit_mae")
    # a series whose second step is another network's: its shapes, read from the files' headers
    save_release(workdir / "models" / "vit", "vit")
    trainer_checkpoint(workdir / "runs" / "vit" / "checkpoint-1", seed=1)
    trainer_checkpoint(workdir / "runs" / "vit" / "checkpoint-2", seed=2, hidden_size=48)
    told = refused_overlay(workdir, {"models": {
        "missing": {"arch": "hf/./models/missing"},
        "remote": {"arch": "hf/./models/remote"},
        "mae_pooler": {"arch": "hf/./models/mae", "tokens": "pooler_output"},
        "vit_run": {"arch": "hf/./models/vit", "checkpoints": "runs/vit/checkpoint-{step}", "step_unit": "iteration"},
    }, "series": {"settle_seconds": 0}})
    assert "This run lacks 4 things it needs; no job was started" in told
    assert "folder ./models/missing does not exist" in told
    assert "asks for remote code" in told and "cannot give tokens: pooler_output" in told
    assert ("model 'vit_run' (a series of arch hf/./models/vit): step 2, checkpoint runs/vit/checkpoint-2 does not fit "
            "a ViTModel (36 tensors of other shapes: vit.embeddings.cls_token (1, 1, 48) in the file") in told
    assert "checkpoint-1 " not in told


# a training run's checkpoints as a series --------------------------------------------------

VIT_CONFIG = {**SMALL, "num_hidden_layers": 2, "image_size": 32, "patch_size": 8}
SERIES_SETTINGS = {"shots": ["all"], "seeds": 1, "trials": 2, "knn": True, "concepts": True, "full_protocol_steps": [],
                   "settle_seconds": 0}


def trainer_checkpoint(folder: Path, seed: int, **config) -> Path:
    """A folder as transformers' Trainer writes each checkpoint-<step> of a ViT fine-tuned for
    classification: the task model's safetensors (the backbone's keys under its prefix, vit.,
    and the head's) and config, the trainer's state, and the optimizer's, a pickle never read."""
    torch.manual_seed(seed)
    ViTForImageClassification(ViTConfig(**{**VIT_CONFIG, **config})).save_pretrained(folder)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": seed}))
    torch.save({"state": {}}, folder / "optimizer.pt")
    return folder


def series_specs(name: str, arch: Path, pattern: Path):
    """The series of ``pattern``'s folders (the Snakefile's reading) and each evaluated step's spec."""
    entry = {"arch": f"hf/{arch}", "checkpoints": str(pattern), "step_unit": "iteration"}
    series, lacks = expand_series(name, entry, SERIES_SETTINGS, checkpoint_sha256)
    specs = {checkpoint.step: ModelSpec.from_config(checkpoint.model, checkpoint_entry(entry, checkpoint))
             for checkpoint in series.evaluated()}
    return series, lacks, specs


def test_a_trainer_runs_checkpoint_folders_are_a_series_of_the_arch_whose_identity_is_their_weights(tmp_path):
    """arch: the network's config and image processor (here a folder without weights); each step
    the weights of a Trainer's checkpoint-<step>, loaded as transformers loads a task model's into
    its backbone, its identity its weights' content: a copy of a step is that step, a moved run the
    same series."""
    base = tmp_path / "first" / "vit-base"
    ViTConfig(**VIT_CONFIG).save_pretrained(base)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(base)
    run = tmp_path / "first" / "run"
    for step in (500, 1000):
        trainer_checkpoint(run / f"checkpoint-{step}", seed=step)
    shutil.copytree(run / "checkpoint-500", run / "checkpoint-1500")
    (run / "checkpoint-last").mkdir()
    series, lacks, specs = series_specs("vit", base, run / "checkpoint-{step}")
    assert lacks == [] and [checkpoint.step for checkpoint in series.checkpoints] == [500, 1000, 1500]
    assert series.checkpoints[2].same_as == "vit@500" and series.passed_over == (str(run / "checkpoint-last"),)
    identities = {step: weights_identity(spec) for step, spec in specs.items()}
    assert identities[500].startswith("hf:config:") and identities[500] != identities[1000]
    assert identities[500].split("+")[1] == f"safetensors:{file_sha256(run / 'checkpoint-500' / 'model.safetensors')}"
    # each step is its weights loaded into the arch's network: the task model's backbone
    pixels = torch.rand(2, 3, 32, 32)
    with torch.inference_mode():
        for step, spec in specs.items():
            assert checkpoint_misfit(spec) is None
            trained = ViTForImageClassification.from_pretrained(run / f"checkpoint-{step}").eval()
            expected = trained.vit(pixel_values=pixels).last_hidden_state[:, 0]
            torch.testing.assert_close(build_model(spec).network(pixels), expected)
    # the run copied elsewhere (new files), and its base: the same steps, the same identities
    moved = shutil.copytree(tmp_path / "first", tmp_path / "moved", copy_function=shutil.copy)
    _, _, moved_specs = series_specs("vit", moved / "vit-base", moved / "run" / "checkpoint-{step}")
    assert {step: weights_identity(spec) for step, spec in moved_specs.items()} == identities


def test_a_step_that_does_not_fit_the_arch_is_refused_as_its_job_would_refuse_it(tmp_path):
    base = save_release(tmp_path / "vit-base", "vit")
    run = tmp_path / "run"
    trainer_checkpoint(run / "checkpoint-1", seed=1)
    trainer_checkpoint(run / "checkpoint-2", seed=2, hidden_size=48)
    _, lacks, specs = series_specs("vit", base, run / "checkpoint-{step}")
    assert lacks == [] and checkpoint_misfit(specs[1]) is None
    verdict = checkpoint_misfit(specs[2])
    assert verdict.startswith("does not fit a ViTModel (36 tensors of other shapes: vit.embeddings.cls_token (1, 1, 48) "
                              "in the file, (1, 1, 32) in the network")
    with pytest.raises(ValueError, match=r"model 'vit@2' \(series vit, step 2\): checkpoint .*checkpoint-2 leaves 36 "
                                         r"tensors of its ViTModel unset \(embeddings.cls_token \(1, 1, 48\) in the file"):
        build_model(specs[2])


def test_sharded_weights_are_one_content_and_a_folder_without_safetensors_is_a_lack_naming_its_step(tmp_path):
    base = save_release(tmp_path / "vit-base", "vit")
    run = tmp_path / "run"
    torch.manual_seed(1)
    ViTModel(ViTConfig(**VIT_CONFIG), add_pooling_layer=False).save_pretrained(run / "checkpoint-1", max_shard_size="40KB")
    shards = sorted((run / "checkpoint-1").glob("model-*.safetensors"))
    assert len(shards) > 1 and not (run / "checkpoint-1" / "model.safetensors").exists()
    pickled = run / "checkpoint-2"
    trainer_checkpoint(pickled, seed=2)
    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    series, lacks, specs = series_specs("vit", base, run / "checkpoint-{step}")
    assert [checkpoint.step for checkpoint in series.checkpoints] == [1]
    assert lacks == [f"model 'vit': step 2: checkpoint {pickled} has no model.safetensors (nor "
                     f"model.safetensors.index.json); its weights are pytorch_model.bin, a pickle, which is not loaded. "
                     f"Save the weights as safetensors (Trainer's default, save_safetensors; save_pretrained's)."]
    assert checkpoint_misfit(specs[1]) is None
    shard_lines = "".join(f"{shard.name} {file_sha256(shard)}\n" for shard in shards)
    assert weights_identity(specs[1]).split("+")[1] == f"safetensors:{hashlib.sha256(shard_lines.encode()).hexdigest()}"
    with torch.inference_mode():
        pixels = torch.rand(1, 3, 32, 32)
        expected = ViTModel.from_pretrained(run / "checkpoint-1", add_pooling_layer=False).eval()(pixels).last_hidden_state
        torch.testing.assert_close(build_model(specs[1]).network(pixels), expected[:, 0])
    # a model of its own may name such a folder as its weights (a run's final checkpoint)
    assert "checkpoint folder 'gone' does not exist" in refusal(hf_spec(base, weights="gone"))


# the plan and the models table -------------------------------------------------------------


def test_the_plan_prices_it_and_the_models_table_lists_it(hub, tmp_path):
    folder = save_release(tmp_path / "dinov2", "dinov2")
    models = {"dinov2": {"arch": f"hf/{folder}", "label": "DINOv2 (hf)"}, "absent": {"arch": "hf/lab/absent"}}
    widths, unpriced = model_widths(models)
    assert widths == {"dinov2": (f"hf/{folder}", 160)}
    assert "hf download lab/absent" in unpriced["absent"]
    rows = describe_models(models)
    assert rows[0] == {"name": "DINOv2 (hf)", "category": "other", "arch": f"hf/{folder}", "input_size": 28,
                       "feature_dim": 160}
    assert (rows[1]["input_size"], rows[1]["feature_dim"]) == ("?", "?") and "hf download" in rows[1]["missing"]
    # a series of a Trainer's run, its arch a config and an image processor without weights: the
    # models table lists the entry, the plan prices each step (the Snakefile's models)
    base = tmp_path / "vit-base"
    ViTConfig(**VIT_CONFIG).save_pretrained(base)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(base)
    step = trainer_checkpoint(tmp_path / "run" / "checkpoint-500", seed=5)
    series = {"vit": {"arch": f"hf/{base}", "checkpoints": str(tmp_path / "run/checkpoint-{step}"),
                      "step_unit": "iteration"}}
    assert [(row["input_size"], row["feature_dim"]) for row in describe_models(series)] == [(32, 32)]
    assert model_widths({"vit@500": {"arch": f"hf/{base}", "weights": str(step)}}) == ({"vit@500": (f"hf/{base}", 32)}, {})
