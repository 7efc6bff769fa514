"""An open_clip CoCa model as an image captioner: ``arch: open_clip/coca_<name>``.

CoCa (open_clip's ``coca_ViT-B-32``, ``coca_ViT-L-14``, the workflow's tiny
``CoG-demo-CoCa``) is an image-text model with a text decoder: open_clip's own
``CoCa.generate`` writes a caption of each image of a batch, by beam search (the default of
open_clip's generation) or by sampling among the ``top_k`` or ``top_p`` most likely tokens
(``top_k`` with ``top_k: 1`` is greedy decoding). Its token ids are decoded by the model's
tokenizer, cut at the end-of-text token, the start token removed.

The model is built as the image features' and the zero-shot classifier's open_clip models
are (:func:`imagenet_cog.models.open_clip_text.build_text_model`: a pretrained tag, a
checkpoint read tensors-only, or seeded random weights), so that its text tower, the
sentence encoder of class-level captioning (:mod:`imagenet_cog.analyses.captions`), is the
captioner's own. Images are preprocessed as extraction preprocesses this model's images
(open_clip's evaluation transform for the weights), normalised on the device.

open_clip's generation uses the ``transformers`` package's logit processors and beam scorer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import open_clip
import torch

from imagenet_cog.models.open_clip_text import TextModel, build_text_model
from imagenet_cog.models.registry import (
    ModelSpec,
    Preprocessing,
    is_open_clip_arch,
    is_random_weights,
    planned_preprocessing,
)

# open_clip's generation types (CoCa.generate's generation_type)
GENERATION_TYPES = ("beam_search", "top_k", "top_p")
# the tokens open_clip's CLIP tokenizer wraps a text in
START_OF_TEXT = "<start_of_text>"
END_OF_TEXT = "<end_of_text>"


@dataclass(frozen=True)
class Generation:
    """How captions are generated: open_clip's ``CoCa.generate`` arguments. ``seq_len`` is the
    longest caption in tokens, start and end included; ``min_seq_len`` the shortest."""

    generation_type: str = "beam_search"
    seq_len: int = 30
    min_seq_len: int = 5
    num_beams: int = 6
    num_beam_groups: int = 3
    top_k: int = 1
    top_p: float = 0.1
    temperature: float = 1.0
    repetition_penalty: float = 1.0

    def __post_init__(self):
        if self.generation_type not in GENERATION_TYPES:
            raise ValueError(f"generation_type must be one of {', '.join(GENERATION_TYPES)}, "
                             f"not '{self.generation_type}'.")
        if self.seq_len <= self.min_seq_len:
            raise ValueError(f"seq_len ({self.seq_len}) must be larger than min_seq_len ({self.min_seq_len}).")
        if self.generation_type == "beam_search" and self.num_beams % self.num_beam_groups:
            raise ValueError(f"num_beams ({self.num_beams}) must be a multiple of num_beam_groups "
                             f"({self.num_beam_groups}) for beam search.")

    def arguments(self) -> dict[str, Any]:
        return {"generation_type": self.generation_type, "seq_len": self.seq_len, "min_seq_len": self.min_seq_len,
                "num_beams": self.num_beams, "num_beam_groups": self.num_beam_groups, "top_k": self.top_k,
                "top_p": self.top_p, "temperature": self.temperature,
                "repetition_penalty": self.repetition_penalty}


@dataclass
class Captioner:
    """A CoCa model (both towers and its decoder, eval mode), its tokenizer and preprocessing."""

    text_model: TextModel
    preprocessing: Preprocessing

    @property
    def network(self):
        return self.text_model.network


def build_captioner(spec: ModelSpec, identity: str | None = None) -> Captioner:
    """``spec``'s CoCa model; any other model is refused with what to name instead."""
    if not is_open_clip_arch(spec.arch):
        raise ValueError(f"captioner '{spec.name}': captions need an open_clip CoCa model "
                         f"(arch: open_clip/coca_ViT-B-32, ...), not arch '{spec.arch}'.")
    text_model = build_text_model(spec, identity)
    if not isinstance(text_model.network, open_clip.CoCa):
        coca = ", ".join(name for name in open_clip.list_models() if "coca" in name.lower())
        raise ValueError(f"captioner '{spec.name}': open_clip's {spec.arch.split('/', 1)[1]} is a "
                         f"{type(text_model.network).__name__}, which has no text decoder; name a CoCa model "
                         f"({coca}).")
    if is_random_weights(spec.weights):
        # open_clip's CoCa decoder leaves its output projection as torch.empty (its
        # init_parameters, never called, fails on an attribute the class lacks): drawn here,
        # right after the seeded build, as that initialiser would, so random weights repeat
        decoder = text_model.network.text_decoder
        torch.nn.init.normal_(decoder.text_projection, std=decoder.width**-0.5)
    return Captioner(text_model, planned_preprocessing(spec))


def decode(tokenizer, tokens: torch.Tensor) -> list[str]:
    """The captions of generated token ids ``[batch, length]``: each cut at its end-of-text
    token (what follows is padding), the start token removed, white space collapsed."""
    texts = []
    for row in tokens.cpu():
        text = open_clip.decode(row) if not hasattr(tokenizer, "decode") else tokenizer.decode(row.tolist())
        text = text.split(END_OF_TEXT, 1)[0].replace(START_OF_TEXT, "")
        texts.append(" ".join(text.split()))
    return texts


def caption(captioner: Captioner, pixels: torch.Tensor, device: torch.device, generation: Generation) -> list[str]:
    """Captions of a batch of preprocessed uint8 images ``[batch, 3, size, size]``."""
    network = captioner.network.to(device)
    p = captioner.preprocessing
    mean = torch.tensor(p.mean, device=device).view(1, 3, 1, 1) * 255.0
    std = torch.tensor(p.std, device=device).view(1, 3, 1, 1) * 255.0
    images = (pixels.to(device).float() - mean) / std
    with torch.inference_mode():
        tokens = network.generate(images, **generation.arguments())
    return decode(captioner.text_model.tokenizer, tokens)
