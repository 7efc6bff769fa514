"""The text side of an open_clip model: a zero-shot classifier from the names of concepts.

Each concept's name fills every prompt template of a set; the text tower encodes the
prompts, each embedding is L2-normalised, their mean over the templates normalised again:
the concept's column of the classifier, ``[embedding width, concepts]``, as open_clip's own
``build_zero_shot_classifier`` builds it (tests/test_models_open_clip_text.py holds them
equal). The template sets are open_clip's (``open_clip.zero_shot_metadata``): ``openai``,
the 80 ImageNet templates of CLIP's paper, and ``simple``, open_clip's subset of 7.

The whole model is built by the image side's builder (``open_clip_models.create_network``)
after torch is seeded as the extraction seeds it (``registry.seed_torch``): with random
weights too, the text tower is the one that goes with the image tower the features came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import open_clip
import torch
import torch.nn.functional as F
from open_clip.zero_shot_metadata import OPENAI_IMAGENET_TEMPLATES, SIMPLE_IMAGENET_TEMPLATES

from imagenet_cog.models.open_clip_models import create_network
from imagenet_cog.models.registry import ModelSpec, is_open_clip_arch, seed_torch, weights_identity
from imagenet_cog.models.timm_models import PretrainedWeightsUnavailable

TEMPLATE_SETS: dict[str, Sequence[Callable[[str], str]]] = {
    "openai": OPENAI_IMAGENET_TEMPLATES,
    "simple": SIMPLE_IMAGENET_TEMPLATES,
}
# prompts the text tower encodes at once: 80 templates x 12 concepts
PROMPT_BATCH = 960


@dataclass
class TextModel:
    """An open_clip model (both towers, eval mode) with its tokenizer and weights identity."""

    network: Any
    tokenizer: Callable[[Sequence[str]], torch.Tensor]
    weights_identity: str
    notes: list[str]

    def logit_scale(self) -> float:
        """The learnt temperature's inverse: what scales cosine similarities into logits."""
        return float(self.network.logit_scale.exp())


def build_text_model(spec: ModelSpec, identity: str | None = None) -> TextModel:
    """``spec``'s open_clip model and tokenizer; ``identity`` its weights identity, when known."""
    if not is_open_clip_arch(spec.arch):
        raise ValueError(f"model '{spec.name}': zero-shot classification needs an image-text model "
                         f"(arch: open_clip/<name>), not arch '{spec.arch}'.")
    spec.check()
    identity = identity or weights_identity(spec)
    seed = seed_torch(spec)
    model = spec.open_clip_model()
    network, notes = create_network(model, None if seed is not None else spec.weights,
                                    f"model '{spec.name}'", spec.trusted_globals)
    for parameter in network.parameters():
        parameter.requires_grad_(False)
    return TextModel(network, _tokenizer(model.name, spec.name), identity, notes)


def _tokenizer(name: str, owner: str):
    try:
        return open_clip.get_tokenizer(name)
    except OSError as error:
        # Hugging Face tokenizers (SigLIP's, ...) come from the hub on first use, CLIP's ships with open_clip
        raise PretrainedWeightsUnavailable(
            f"model '{owner}': open_clip's tokenizer of {name} could not be loaded ({type(error).__name__}: "
            f"{error}). It comes from the Hugging Face hub on first use: run python -c \"import open_clip; "
            f"open_clip.get_tokenizer('{name}')\" once where there is internet with the same HF_HOME."
        ) from error


def prompts(names: Sequence[str], templates: Sequence[Callable[[str], str]]) -> list[str]:
    """Every template filled with every name, the templates of one name together."""
    return [template(name) for name in names for template in templates]


def text_classifier(model: TextModel, names: Sequence[str], templates: Sequence[Callable[[str], str]],
                    device: torch.device, batch: int = PROMPT_BATCH) -> torch.Tensor:
    """The zero-shot classifier of ``names``: ``[embedding width, len(names)]`` float32 on the
    CPU, the normalised mean of the normalised text embeddings of the filled templates."""
    embeddings = text_embeddings(model, prompts(names, templates), device, batch)
    per_concept = embeddings.reshape(len(names), len(templates), -1).mean(dim=1)
    return F.normalize(per_concept, dim=-1).T.contiguous()


def text_embeddings(model: TextModel, texts: Sequence[str], device: torch.device,
                    batch: int = PROMPT_BATCH) -> torch.Tensor:
    """The text tower's L2-normalised embeddings of ``texts``, ``[len(texts), width]`` float32
    on the CPU, encoded ``batch`` at a time on ``device``."""
    network = model.network.to(device)
    embeddings = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch):
            tokens = model.tokenizer(list(texts[start : start + batch])).to(device)
            embeddings.append(network.encode_text(tokens, normalize=True).float().cpu())
    return torch.cat(embeddings)
