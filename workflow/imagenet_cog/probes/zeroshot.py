"""Zero-shot scoring of image features by a text classifier (``features.zeroshot_classifier``).

An image's logits are ``logit_scale x normalised(image embedding) @ classifier``: the cosine
similarity of the image to each concept's text embedding (the classifier's columns are
normalised), scaled as the model was trained. The features must be the image embedding
(``image_features: embedding``), the space the text tower shares: the tower's pooled
features are not in it. Nothing is trained, so top-1 and top-5 follow directly; with fewer
than five concepts, top-5 is top-k over all of them. Ties between equal logits rank as
``torch.topk`` ranks them, which real features practically never meet.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from imagenet_cog.probes.linear import topk_accuracy

TOP_KS = (1, 5)
# test images scored at once: a [block, concepts] logits matrix
SCORE_BLOCK = 8192


def zeroshot_logits(features: torch.Tensor, classifier: torch.Tensor, logit_scale: float) -> torch.Tensor:
    """``[images, concepts]`` logits of image embeddings ``[images, width]`` against a classifier
    ``[width, concepts]`` (float32 on the features' device)."""
    return logit_scale * F.normalize(features.float(), dim=-1) @ classifier.to(features.device, torch.float32)


def zeroshot_accuracy(features: torch.Tensor, labels: torch.Tensor, classifier: torch.Tensor,
                      logit_scale: float) -> dict[str, float]:
    """Top-1 and top-5 accuracy (percent) of the zero-shot classifier on labelled features,
    scored in blocks of :data:`SCORE_BLOCK` images."""
    def logits(block: torch.Tensor) -> torch.Tensor:
        # topk_accuracy scores several classifiers at once: this is one
        return zeroshot_logits(block, classifier, logit_scale).unsqueeze(1)

    accuracy = topk_accuracy(logits, torch.Size((1, classifier.shape[1])), features, labels.to(features.device),
                             TOP_KS, SCORE_BLOCK, None)
    top1, top5 = accuracy[0].tolist()
    return {"test_top1": top1, "test_top5": top5}
