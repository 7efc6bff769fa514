"""Every published checkpoint layout of paper Table 1's ResNet50 releases loads exactly.

Each case synthesises a checkpoint with the container, key prefixes and extra heads of
the file the authors' prepare_models/ scripts (github naver/cog) fetch, from a randomly
initialised torchvision ResNet50, and checks that the backbone gets every tensor, nothing
else, and that the log names the release's format.
"""

from __future__ import annotations

import argparse
import itertools

import pytest
import torch
import torchvision
import yaml

from imagenet_cog.models.checkpoints import CHECKPOINT_LAYOUTS, load_checkpoint
from imagenet_cog.models.registry import PAPER_MODELS_CONFIG, ModelSpec, build_model


@pytest.fixture(scope="module")
def reference():
    torch.manual_seed(11)
    network = torchvision.models.resnet50()
    network.eval()
    return network


def _backbone(reference, prefix: str = "", classifier: bool = True) -> dict[str, torch.Tensor]:
    return {prefix + key: value.clone() for key, value in reference.state_dict().items()
            if classifier or not key.startswith("fc.")}


def _mlp(prefix: str, widths: tuple[int, ...]) -> dict[str, torch.Tensor]:
    layers = {}
    for index, (fan_in, fan_out) in enumerate(itertools.pairwise(widths)):
        layers[f"{prefix}{2 * index}.weight"] = torch.randn(fan_out, fan_in)
        layers[f"{prefix}{2 * index}.bias"] = torch.randn(fan_out)
    return layers


def moco_v2(reference):
    state = _backbone(reference, "module.encoder_q.", classifier=False)
    state |= _mlp("module.encoder_q.fc.", (2048, 2048, 128))
    state |= _backbone(reference, "module.encoder_k.", classifier=False)
    state |= _mlp("module.encoder_k.fc.", (2048, 2048, 128))
    state |= {"module.queue": torch.randn(128, 65536), "module.queue_ptr": torch.zeros(1, dtype=torch.long)}
    return {"epoch": 800, "arch": "resnet50", "state_dict": state, "optimizer": {"state": {}, "param_groups": []}}


def mochi(reference):
    # MoChi is trained with the MoCo-v2 code base and released in its format.
    return moco_v2(reference) | {"epoch": 1000}


def mopro(reference):
    state = _backbone(reference, "module.encoder_q.", classifier=False)
    state |= {"module.encoder_q.classifier.weight": torch.randn(1000, 2048),
              "module.encoder_q.classifier.bias": torch.randn(1000)}
    # The projection's keys start with 'fc' (the authors' loader drops 'module.encoder_q.fc*').
    state |= {"module.encoder_q.fc1.weight": torch.randn(2048, 2048), "module.encoder_q.fc1.bias": torch.randn(2048),
              "module.encoder_q.fc2.weight": torch.randn(128, 2048), "module.encoder_q.fc2.bias": torch.randn(128)}
    state |= _backbone(reference, "module.encoder_k.")
    state |= {"module.queue": torch.randn(128, 8192), "module.queue_ptr": torch.zeros(1, dtype=torch.long),
              "module.prototypes": torch.randn(1000, 128)}
    return {"epoch": 90, "state_dict": state, "optimizer": {}}


def infomin(reference):
    state = _backbone(reference, "module.encoder.", classifier=False)
    state |= _mlp("module.head.", (2048, 2048, 128))
    state |= _mlp("module.head_jig.", (2048, 2048, 128))
    return {"opt": argparse.Namespace(method="InfoMin", arch="resnet50"), "model": state,
            "contrast": {"memory": torch.randn(16, 128)}, "epoch": 800}


def compress(reference):
    state = _backbone(reference, "module.", classifier=False)
    state |= {"module.fc.weight": torch.randn(8192, 2048), "module.fc.bias": torch.randn(8192)}
    # CompReSS's train_student.py saves its options next to the student, as InfoMin does.
    return {"opt": argparse.Namespace(arch="resnet50"), "model": state, "epoch": 130}


def swav(reference):
    state = _backbone(reference, "module.", classifier=False)
    state |= {"module.projection_head.0.weight": torch.randn(2048, 2048),
              "module.projection_head.0.bias": torch.randn(2048),
              "module.projection_head.1.weight": torch.randn(2048),
              "module.projection_head.1.bias": torch.randn(2048),
              "module.projection_head.1.running_mean": torch.randn(2048),
              "module.projection_head.1.running_var": torch.rand(2048),
              "module.projection_head.1.num_batches_tracked": torch.tensor(5),
              "module.projection_head.3.weight": torch.randn(128, 2048),
              "module.projection_head.3.bias": torch.randn(128),
              "module.prototypes.weight": torch.randn(3000, 128)}
    return state


def dino(reference):
    return _backbone(reference, classifier=False)


def barlow_twins(reference):
    return _backbone(reference, classifier=False)


def obow(reference):
    state = _backbone(reference, classifier=False)
    state |= {"fc.weight": torch.randn(2048, 8192), "fc.bias": torch.randn(2048)}
    return {"network": state}


def byol(reference):
    # github chigur/byol-convert writes torchvision's key names, classifier included.
    return _backbone(reference)


def simclr_v2(reference):
    """github Separius/SimCLRv2-Pytorch's conversion of r50_1x_sk0: {'resnet': ..., 'head': ...}."""
    own = reference.state_dict()
    state: dict[str, torch.Tensor] = {}

    def batch_norm(target: str, source: str) -> None:
        for stat in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
            state[f"{target}.0.{stat}"] = own[f"{source}.{stat}"].clone()

    state["net.0.0.weight"] = own["conv1.weight"].clone()
    batch_norm("net.0.1", "bn1")
    for stage, blocks in enumerate((3, 4, 6, 3), start=1):
        for block in range(blocks):
            converted, torchvision_block = f"net.{stage}.blocks.{block}", f"layer{stage}.{block}"
            for index, conv in enumerate(("conv1", "conv2", "conv3")):
                state[f"{converted}.net.{2 * index}.weight"] = own[f"{torchvision_block}.{conv}.weight"].clone()
                batch_norm(f"{converted}.net.{2 * index + 1}", f"{torchvision_block}.bn{index + 1}")
            if block == 0:
                state[f"{converted}.projection.shortcut.weight"] = own[f"{torchvision_block}.downsample.0.weight"].clone()
                batch_norm(f"{converted}.projection.bn", f"{torchvision_block}.downsample.1")
    state["fc.weight"], state["fc.bias"] = torch.randn(1000, 2048), torch.randn(1000)
    head = {"layers.0.weight": torch.randn(2048, 2048), "layers.1.weight": torch.randn(2048)}
    return {"resnet": state, "head": head}


def cutmix(reference):
    return {"epoch": 300, "arch": "resnet50", "state_dict": _backbone(reference, "module."),
            "best_err1": torch.tensor(21.4), "optimizer": {}}


def mixup(reference):
    return cutmix(reference)


def manifold_mixup(reference):
    return cutmix(reference)


def relabel(reference):
    return _backbone(reference)


def adv_robust(reference):
    state = _backbone(reference, "module.model.")
    state |= _backbone(reference, "module.attacker.model.")
    for holder in ("module.normalizer.", "module.attacker.normalize."):
        state |= {holder + "new_mean": torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1),
                  holder + "new_std": torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)}
    return {"model": state, "optimizer": {}, "schedule": None, "epoch": 90}


def meal_v2(reference):
    return _backbone(reference, "module.")


RELEASES = {
    "MoCo-v2": (moco_v2, "MoCo-v2 / MoChi"),
    "MoChi": (mochi, "MoCo-v2 / MoChi"),
    "MoPro": (mopro, "MoPro"),
    "InfoMin": (infomin, "InfoMin"),
    "CompReSS": (compress, "CompReSS"),
    "SwAV": (swav, "SwAV"),
    "DINO": (dino, "DINO / BarlowTwins"),
    "BarlowTwins": (barlow_twins, "DINO / BarlowTwins"),
    "OBoW": (obow, "OBoW"),
    "BYOL": (byol, "BYOL converted"),
    "SimCLR-v2": (simclr_v2, "SimCLR-v2 converted"),
    "CutMix": (cutmix, "CutMix / MixUp / Manifold-MixUp"),
    "MixUp": (mixup, "CutMix / MixUp / Manifold-MixUp"),
    "Manifold-MixUp": (manifold_mixup, "CutMix / MixUp / Manifold-MixUp"),
    "ReLabel": (relabel, "ReLabel"),
    "Adv-Robust": (adv_robust, "Adv-Robust"),
    "MEAL-v2": (meal_v2, "MEAL-v2"),
}
# The releases whose files pickle their training options (config/paper_models.yaml lists them).
TRUSTED_GLOBALS = {"InfoMin": ("argparse.Namespace",), "CompReSS": ("argparse.Namespace",)}


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_published_layout_loads_every_backbone_tensor(tmp_path, reference, release, one_torch_thread):
    synthesise, format_name = RELEASES[release]
    checkpoint = tmp_path / "model.ckpt"
    torch.save(synthesise(reference), checkpoint)

    network = torchvision.models.resnet50()
    network.fc = torch.nn.Identity()
    note = load_checkpoint(network, str(checkpoint), TRUSTED_GLOBALS.get(release, ()))

    assert "format " in note and format_name in note.split("format ", 1)[1].split(";")[0]
    assert "0 backbone keys missing or unexpected" in note
    expected = {key: value for key, value in reference.state_dict().items() if not key.startswith("fc.")}
    loaded = network.state_dict()
    assert set(loaded) == set(expected)
    assert all(torch.equal(loaded[key], expected[key]) for key in expected)


def test_every_layout_is_exercised():
    tested = {format_name for _, format_name in RELEASES.values()}
    listed = {layout.name for layout in CHECKPOINT_LAYOUTS}
    # Every ResNet50 layout is among the tested ones; T2T-ViT and NAT-M4 are tested below.
    untested = {name for name in listed if not any(name.startswith(prefix) or prefix in name for prefix in tested)}
    assert untested == {layout.name for layout in CHECKPOINT_LAYOUTS if layout.name.startswith(("T2T-ViT", "NAT-M4"))}


def test_simclr_v2_features_equal_the_reference(tmp_path, reference, one_torch_thread):
    checkpoint = tmp_path / "r50_1x_sk0.pth"
    torch.save(simclr_v2(reference), checkpoint)
    model = build_model(ModelSpec("simclr", "simclr_v2_resnet50", str(checkpoint)))
    images = torch.rand(2, 3, 64, 64)
    trunk = torchvision.models.resnet50()
    trunk.load_state_dict(reference.state_dict())
    trunk.fc = torch.nn.Identity()
    trunk.eval()
    with torch.inference_mode():
        assert torch.equal(model.network(images), trunk(images))


def test_a_layout_with_a_stray_backbone_key_is_not_taken(tmp_path, reference):
    state = moco_v2(reference)
    state["state_dict"]["module.encoder_q.layer5.0.conv1.weight"] = torch.zeros(1)
    checkpoint = tmp_path / "odd.pth"
    torch.save(state, checkpoint)
    network = torchvision.models.resnet50()
    network.fc = torch.nn.Identity()
    with pytest.raises(ValueError, match=r"unexpected keys: module\.encoder_q\.layer5"):
        load_checkpoint(network, str(checkpoint))


def test_the_paper_config_trusts_the_objects_of_exactly_these_releases():
    models = yaml.safe_load(PAPER_MODELS_CONFIG.read_text())["models"]
    trusted = {entry["label"].split("-", 1)[1]: tuple(entry["trusted_globals"])
               for entry in models.values() if entry and "trusted_globals" in entry}
    # T2T-ViT's file (timm's checkpoint saver) is tested in test_models_backbones.py.
    assert trusted == TRUSTED_GLOBALS | {"T2T-ViT-t-14": ("argparse.Namespace",)}
