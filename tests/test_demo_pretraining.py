"""The demo's pretrained network: trained by the workflow, loaded like any checkpoint."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from imagenet_cog.demo.pretraining import pretrain, pretrain_demo_command
from imagenet_cog.demo.world import CANVAS_SCALE, prototype, render
from imagenet_cog.models.registry import ModelSpec, build_model, weights_identity

CONCEPTS = ["n10000001", "n10000002", "n10000003"]


@pytest.fixture(scope="module")
def in1k_images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("in1k")
    for wnid in CONCEPTS:
        look = prototype(wnid, seed=0, size=math.ceil(32 * CANVAS_SCALE))
        for index in range(12):
            folder = root / ("train" if index < 8 else "val") / wnid
            folder.mkdir(parents=True, exist_ok=True)
            render(look, wnid, index, 0, 32).save(folder / f"{wnid}_{index}.JPEG", quality=90)
    return root


def test_same_seed_same_weights_and_they_load_as_a_checkpoint(in1k_images, tmp_path, one_torch_thread):
    first, second = tmp_path / "a.pt", tmp_path / "b.pt"
    scores = pretrain(in1k_images, CONCEPTS, first, epochs=3, batch_size=8, learning_rate=1e-3, seed=0)
    pretrain(in1k_images, CONCEPTS, second, epochs=3, batch_size=8, learning_rate=1e-3, seed=0,
             kept_epochs={2: tmp_path / "epoch-2.pt"})
    assert scores["train_top1"] > 1 / len(CONCEPTS)
    # keeping an epoch's weights changes nothing of the training; they are what two epochs give
    assert first.read_bytes() == second.read_bytes()
    pretrain(in1k_images, CONCEPTS, tmp_path / "two.pt", epochs=2, batch_size=8, learning_rate=1e-3, seed=0)
    assert (tmp_path / "epoch-2.pt").read_bytes() == (tmp_path / "two.pt").read_bytes()
    states = [torch.load(path, weights_only=True)["state_dict"] for path in (first, second)]
    assert all(torch.equal(states[0][key], states[1][key]) for key in states[0])
    model = build_model(ModelSpec("demo_cnn", "demo_cnn", str(first)))
    assert model.feature_dim == 128 and not model.random_weights
    assert "generic prefix search; loaded 24 tensors" in model.notes[0]
    assert weights_identity(model.spec).startswith("sha256:")
    # same seed, same bytes: the identity that features record does not change from run to run
    assert weights_identity(model.spec) == weights_identity(ModelSpec("demo_cnn", "demo_cnn", str(second)))
    # the loaded backbone is the trained one, not the seeded initialisation
    trained = states[0]["features.0.weight"]
    assert torch.equal(model.network.features[0].weight, trained)


def test_a_kept_epoch_must_come_before_the_last(in1k_images, tmp_path):
    with pytest.raises(ValueError, match=r"must lie in 1..2"):
        pretrain(in1k_images, CONCEPTS, tmp_path / "a.pt", epochs=3, batch_size=8, learning_rate=1e-3, seed=0,
                 kept_epochs={3: tmp_path / "epoch-3.pt"})
    assert not (tmp_path / "a.pt").exists()


def test_too_few_concepts_is_a_clear_error(in1k_images, tmp_path):
    concepts = tmp_path / "one.txt"
    concepts.write_text(CONCEPTS[0] + "\n")
    with pytest.raises(SystemExit, match="pretraining needs 2 or more"):
        pretrain_demo_command(["--images", str(in1k_images), "--concepts", str(concepts),
                               "--output", str(tmp_path / "c.pt")])
    assert not (tmp_path / "c.pt").exists()


def test_texture_jitter_is_seeded_bounded_and_can_be_switched_off():
    from imagenet_cog.core.sampling import derived_rng
    from imagenet_cog.demo.pretraining import JITTER_STRENGTH, texture_jitter
    from imagenet_cog.demo.world import TEXTURE_AMPLITUDE

    first = texture_jitter(64, 32, 0.7, derived_rng("jitter", 0))
    assert first.shape == (64, 1, 32, 32)
    assert torch.equal(first, texture_jitter(64, 32, 0.7, derived_rng("jitter", 0)))
    assert float(first.abs().max()) <= JITTER_STRENGTH * TEXTURE_AMPLITUDE
    textured = (first.flatten(1).abs().amax(1) > 0).float().mean()
    assert 0.5 < float(textured) < 0.9
    assert not texture_jitter(16, 32, 0.0, derived_rng("jitter", 0)).any()
