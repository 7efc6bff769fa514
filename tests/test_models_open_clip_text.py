"""The zero-shot text classifier of an open_clip model: equal to open_clip's own
build_zero_shot_classifier, built from the same weights as the image features, its logit
scale. A random tiny model and open_clip's shipped tokenizer: nothing is downloaded."""

from __future__ import annotations

import open_clip
import pytest
import torch
from open_clip.zero_shot_classifier import build_zero_shot_classifier
from open_clip.zero_shot_metadata import OPENAI_IMAGENET_TEMPLATES, SIMPLE_IMAGENET_TEMPLATES

from imagenet_cog.models.open_clip_text import TEMPLATE_SETS, build_text_model, prompts, text_classifier
from imagenet_cog.models.registry import ModelSpec, build_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# the workflow's two-layer CLIP config (models/open_clip_configs): CLIP's text tower design and
# tokenizer (shipped with open_clip) at a size that builds and encodes in a fraction of a second
VIT = "CoG-demo-CLIP"
NAMES = ["tench", "crane (wading bird)", "crane (lifting device)"]


@pytest.fixture(scope="module")
def text_model():
    return build_text_model(ModelSpec.from_config("clip", {"arch": f"open_clip/{VIT}", "weights": "random:7"}))


@pytest.fixture(scope="module")
def reference():
    """The same model built by open_clip alone, seeded as the workflow seeds random weights."""
    torch.manual_seed(7)
    return open_clip.create_model(VIT).eval(), open_clip.get_tokenizer(VIT)


def test_the_template_sets_are_open_clips():
    assert TEMPLATE_SETS == {"openai": OPENAI_IMAGENET_TEMPLATES, "simple": SIMPLE_IMAGENET_TEMPLATES}
    assert len(TEMPLATE_SETS["openai"]) == 80 and len(TEMPLATE_SETS["simple"]) == 7
    assert prompts(["dog", "cat"], TEMPLATE_SETS["simple"][:2]) == [
        "itap of a dog.", "a bad photo of the dog.", "itap of a cat.", "a bad photo of the cat."]


@pytest.mark.parametrize("templates, batch", [("simple", 960), ("simple", 5), ("openai", 64)])
def test_the_classifier_is_open_clips_own(templates, batch, text_model, reference):
    network, tokenizer = reference
    expected = build_zero_shot_classifier(network, tokenizer, NAMES, TEMPLATE_SETS[templates],
                                          num_classes_per_batch=2, device="cpu")
    # batches of prompts that cut through a concept's templates change nothing
    classifier = text_classifier(text_model, NAMES, TEMPLATE_SETS[templates], torch.device("cpu"), batch=batch)
    assert classifier.shape == (network.text_projection.shape[1], len(NAMES)) and classifier.dtype == torch.float32
    torch.testing.assert_close(classifier, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(classifier.norm(dim=0), torch.ones(len(NAMES)))
    # the two cranes' names give two classifiers
    assert not torch.allclose(classifier[:, 1], classifier[:, 2])


def test_the_text_tower_goes_with_the_image_tower_the_features_came_from(text_model):
    image_side = build_model(ModelSpec.from_config("clip", {"arch": f"open_clip/{VIT}", "weights": "random:7"}))
    extracted = image_side.network.visual.state_dict()
    built = text_model.network.visual.state_dict()
    assert extracted.keys() == built.keys()
    assert all(torch.equal(extracted[key], built[key]) for key in extracted)
    assert text_model.weights_identity == image_side.weights_identity == "random:7+image_features:embedding"


def test_the_logit_scale_is_the_models(text_model, reference):
    # open_clip initialises it to log(1 / 0.07)
    assert text_model.logit_scale() == pytest.approx(1 / 0.07, rel=1e-6)
    assert text_model.logit_scale() == pytest.approx(float(reference[0].logit_scale.detach().exp()))


def test_a_model_without_a_text_tower_is_refused():
    spec = ModelSpec.from_config("resnet", {"arch": "timm/resnet18", "weights": "random"})
    with pytest.raises(ValueError, match="zero-shot classification needs an image-text model .*open_clip/<name>"):
        build_text_model(spec)
