"""Zero-shot scoring, by hand on small tensors: logits = scale x normalised image @ classifier,
top-1 and top-5 (top-k over every concept when there are fewer than five)."""

from __future__ import annotations

import pytest
import torch

from imagenet_cog.probes import zeroshot
from imagenet_cog.probes.zeroshot import zeroshot_accuracy, zeroshot_logits

# three concepts along the axes of a 3-d embedding space: columns of the classifier
CLASSIFIER = torch.eye(3)


def test_logits_are_the_scaled_cosine_of_image_and_concept():
    features = torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.0, -2.0]])
    logits = zeroshot_logits(features, CLASSIFIER, 10.0)
    # |(3, 4, 0)| = 5: cosines 0.6 and 0.8 with the first two concepts
    torch.testing.assert_close(logits, torch.tensor([[6.0, 8.0, 0.0], [0.0, 0.0, -10.0]]))
    # half precision features are scored in float32
    assert zeroshot_logits(features.half(), CLASSIFIER, 1.0).dtype == torch.float32


def test_top1_and_top5_by_hand():
    features = torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.2, 0.5], [-1.0, 0.0, 0.0]])
    labels = torch.tensor([1, 2, 2, 0])
    # predictions 1, 2, 0, then 1 or 2 (a tie); with three concepts top-5 is every concept
    assert zeroshot_accuracy(features, labels, CLASSIFIER, 100.0) == {"test_top1": 50.0, "test_top5": 100.0}
    # six concepts: the last image's true concept is its sixth best, outside the top five
    six = torch.cat([torch.eye(3), -torch.eye(3)], dim=1)
    wide = torch.tensor([[1.0, 0.3, 0.2], [0.0, 1.0, 0.1]])
    # logits of the second image: 0, 1, 0.1, 0, -1, -0.1 -> concept 4 ranks last
    assert zeroshot_accuracy(wide, torch.tensor([0, 4]), six, 1.0) == {"test_top1": 50.0, "test_top5": 50.0}
    assert zeroshot_accuracy(wide, torch.tensor([3, 3]), six, 1.0) == {"test_top1": 0.0, "test_top5": 50.0}


def test_blocks_change_nothing(monkeypatch):
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(50, 8, generator=generator)
    classifier = torch.nn.functional.normalize(torch.randn(8, 7, generator=generator), dim=0)
    labels = torch.randint(0, 7, (50,), generator=generator)
    whole = zeroshot_accuracy(features, labels, classifier, 50.0)
    monkeypatch.setattr(zeroshot, "SCORE_BLOCK", 7)
    assert zeroshot_accuracy(features, labels, classifier, 50.0) == pytest.approx(whole)
    ranked = zeroshot_logits(features, classifier, 50.0).argsort(dim=1, descending=True)
    assert whole["test_top1"] == pytest.approx(100 * (ranked[:, 0] == labels).float().mean().item())
    assert whole["test_top5"] == pytest.approx(100 * (ranked[:, :5] == labels[:, None]).any(dim=1).float().mean().item())
