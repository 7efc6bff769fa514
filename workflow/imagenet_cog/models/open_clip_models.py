"""Any open_clip image-text model by name: ``arch: open_clip/<model name>``.

open_clip builds the image-text models most representation studies evaluate today (CLIP,
SigLIP, EVA-CLIP, MetaCLIP, DFN, ...) from its model configs (``open_clip.list_models()``)
and describes each pretrained release (a tag, ``open_clip.list_pretrained_tags_by_model``)
by where its weights are and how its images are preprocessed. As for timm models
(:mod:`imagenet_cog.models.timm_models`), nothing here is a table to maintain.

Only the image tower is kept. Its features (the model entry's ``image_features``):

* ``embedding`` (the default): the image embedding after the projection into the space
  shared with the text tower, exactly what ``model.encode_image(images)`` returns (not
  normalised): what zero-shot classification compares with text embeddings.
* ``pooled``: the tower's pooled features before that projection, what the tower itself
  has learnt to summarise an image into. Towers whose attention pool projects as it pools
  (the ResNets) have no such features and are refused.

Preprocessing is open_clip's own evaluation transform for the model and its weights, as
``open_clip.create_model_and_transforms`` builds it: the tower's image size, the release's
mean, std and interpolation (open_clip's defaults where the weights are a file or random)
and its resize mode: ``shortest`` (shortest side to S, center crop S, as the paper did) or
``squash`` (both sides to S).

Weights: an open_clip pretrained tag (open_clip's own download, into the Hugging Face
hub's cache), a checkpoint file (read tensors-only, as every checkpoint of the workflow,
then loaded by open_clip's own loader with its conversions), or ``random`` /
``random:<seed>`` (the caller seeds torch).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, Sequence

import open_clip
import torch
from open_clip.timm_model import TimmModel
from open_clip.transform import PreprocessCfg, merge_preprocess_dict
from open_clip.transformer import VisionTransformer
from timm.layers import AttentionPool2d, RotAttentionPool2d

from imagenet_cog.models.checkpoints import CheckpointMismatch, check_checkpoint_safety, resolve_globals
from imagenet_cog.models.open_clip_catalogue import (
    DEFAULT_IMAGE_FEATURES,
    EMBEDDING,
    IMAGE_FEATURES,
    POOLED,
    SHIPPED_CONFIGS,
    image_features_read,
)
from imagenet_cog.models.timm_models import PretrainedWeightsUnavailable, closest_names, pre_logits

# open_clip's resize modes the extraction reproduces; 'longest' (resize the longest side and
# pad) it does not.
RESIZE_MODES = ("shortest", "squash")
# The pools of open_clip's timm towers that project as they pool (its ResNets' attention pools).
PROJECTING_POOLS = (AttentionPool2d, RotAttentionPool2d)
# The workflow's own model configs: added to open_clip's list once, at import.
open_clip.add_model_config(SHIPPED_CONFIGS)


@dataclass(frozen=True)
class OpenClipModel:
    """An ``open_clip/`` model entry resolved against open_clip's configs.

    ``tag`` is the pretrained tag the weights name ('' for a checkpoint file or random
    weights); ``image_features`` which features every probe reads.
    """

    arch: str
    name: str
    tag: str
    image_features: str = DEFAULT_IMAGE_FEATURES

    def preprocess_config(self) -> dict[str, Any]:
        """open_clip's preprocessing config as ``create_model`` sets it: its defaults, the
        tag's values, the image tower's size."""
        release = open_clip.get_pretrained_cfg(self.name, self.tag) if self.tag else {}
        config = merge_preprocess_dict(PreprocessCfg(), release)
        return merge_preprocess_dict(config, {"size": _meta_model(self.name).visual.image_size})

    def preprocessing(self) -> dict[str, Any]:
        """The fields of the registry's ``Preprocessing`` (which wraps them) for this model."""
        config = self.preprocess_config()
        size = config["size"]
        height, width = (size, size) if isinstance(size, int) else size
        if height != width:
            raise ValueError(f"{self.arch}: open_clip's tower takes {height} x {width} images; the "
                             f"benchmark's center crop is square.")
        if config["resize_mode"] not in RESIZE_MODES:
            raise ValueError(f"{self.arch}: open_clip evaluates it with the '{config['resize_mode']}' resize "
                             f"mode, which the extraction does not do (it does {', '.join(RESIZE_MODES)}).")
        # open_clip evaluates every interpolation but bilinear as bicubic
        interpolation = "bilinear" if config["interpolation"] == "bilinear" else "bicubic"
        common = {"size": int(height), "mean": tuple(float(v) for v in config["mean"]),
                  "std": tuple(float(v) for v in config["std"]), "interpolation": interpolation, "mode": "model"}
        if config["resize_mode"] == "squash":
            return {**common, "resize": int(height), "crop_mode": "squash"}
        return common

    def feature_dim(self) -> int:
        """The width of the chosen features, from a forward pass on the meta device."""
        with torch.device("meta"):
            size = self.preprocessing()["size"]
            network = ImageFeatures(_meta_model(self.name).visual, self.image_features)
            return int(network(torch.empty(1, 3, size, size)).shape[-1])

    def provenance(self) -> dict[str, str]:
        """What the shards record besides the arch: the open_clip model, its tag, the features
        read and open_clip's version."""
        tag = {"open_clip_pretrained": self.tag} if self.tag else {}
        return {"open_clip_model": self.name, **tag, "image_features": self.image_features,
                "open_clip_version": open_clip.__version__}


def is_tag(name: str, weights: str) -> bool:
    """Whether ``weights`` is one of open_clip's pretrained tags of the model ``name``."""
    return weights in open_clip.list_pretrained_tags_by_model(name)


def tags_text(name: str) -> str:
    tags = open_clip.list_pretrained_tags_by_model(name)
    return f"its tags are {', '.join(tags)}" if tags else "open_clip has no pretrained weights for it"


# Kept: planning resolves every model for each of its jobs' parameters.
@functools.cache
def resolve(arch: str, weights: str, image_features: str | None = None, *, check_weights: bool = True,
            owner: str = "") -> OpenClipModel:
    """``arch`` (``open_clip/<name>``) checked against open_clip's configs (unknown names fail
    with its closest names), ``weights`` (a tag of the model, a file, random) and
    ``image_features``; ``check_weights`` refuses 'pretrained', which names no release.

    ``owner`` names the config entry in errors (e.g. "config.yaml: model 'clip'").
    """
    where = f"{owner}: " if owner else ""
    name = arch.split("/", 1)[1]
    if name not in open_clip.list_models():
        raise ValueError(f"{where}open_clip knows no model '{name}'. "
                         f"{closest_names(name, open_clip.list_models(), 'open_clip')}")
    choice = image_features_read(image_features)
    if choice not in IMAGE_FEATURES:
        raise ValueError(f"{where}image_features must be one of {', '.join(IMAGE_FEATURES)}, not '{choice}'.")
    if check_weights and weights == "pretrained":
        raise ValueError(f"{where}open_clip models name their release: set weights to a pretrained tag of "
                         f"'{name}' ({tags_text(name)}), a checkpoint file or random.")
    tag = weights if is_tag(name, weights) else ""
    if tag:
        _check_activation(name, tag, where)
    model = OpenClipModel(arch, name, tag, choice)
    try:
        model.preprocessing()
        model.feature_dim()
    except ValueError as error:
        raise ValueError(f"{where}{error}") from None
    return model


def _check_activation(name: str, tag: str, where: str) -> None:
    """open_clip only warns when a release was trained with QuickGELU and the model's config
    uses GELU (or the reverse): its features would not be the release's."""
    trained_with = open_clip.get_pretrained_cfg(name, tag).get("quick_gelu", False)
    if trained_with == open_clip.get_model_config(name).get("quick_gelu", False):
        return
    fix = f"{name}-quickgelu" if trained_with else name.removesuffix("-quickgelu")
    known = fix in open_clip.list_models() and is_tag(fix, tag)
    raise ValueError(
        f"{where}open_clip's '{tag}' weights were trained with{'' if trained_with else 'out'} QuickGELU, "
        f"which the '{name}' config does{' not' if trained_with else ''} use: the features would not be "
        f"the release's. {f'Name arch open_clip/{fix} instead.' if known else 'Pick another model config.'}"
    )


@functools.cache
def _meta_model(name: str):
    """The model ``name`` on the meta device (no weights, no compute): its image size and widths.

    open_clip warns through the root logger that no weights were loaded, which would give the
    root logger a handler of its own (logging's implicit basicConfig) and print every later
    message of the caller (Snakemake planning a run) twice: a handler-less root gets a
    NullHandler for the call. Building it draws from torch's random generator: its state is
    restored, so that a seeded build gives the same weights whether or not this came first."""
    root = logging.getLogger()
    quiet = logging.NullHandler() if not root.handlers else None
    if quiet:
        root.addHandler(quiet)
    try:
        # made on the meta device from the start: open_clip's device="meta" alone initialises
        # the weights on the CPU first (seconds for a ViT-H)
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            return open_clip.create_model(name, device="meta", pretrained_text=False)
    finally:
        if quiet:
            root.removeHandler(quiet)


def pooled_features(visual, images):
    """The pooled features of an open_clip image tower before its projection."""
    if isinstance(visual, VisionTransformer):
        # the tower's own forward up to the projection
        pooled, _ = visual._pool(visual.transformer(visual._embeds(images)))
        return pooled
    if isinstance(visual, TimmModel) and not any(isinstance(layer, PROJECTING_POOLS) for layer in visual.head):
        # the timm trunk's pooled pre-logits; a classifier it keeps is the projection
        return pre_logits(visual.trunk, images)
    raise ValueError(
        f"open_clip's {type(visual).__name__} image tower projects as it pools (an attention pool), so it "
        f"has no pooled features before the projection: use image_features: {EMBEDDING}."
    )


class ImageFeatures(torch.nn.Module):
    """An open_clip image tower whose forward returns the chosen features: the extraction's backbone."""

    def __init__(self, visual, image_features: str):
        super().__init__()
        self.visual = visual
        self.image_features = image_features

    def forward(self, images):
        if self.image_features == POOLED:
            return pooled_features(self.visual, images)
        output = self.visual(images)
        # towers that also return their tokens (CoCa's) give the embedding first
        return output[0] if isinstance(output, tuple) else output


def create_network(model: OpenClipModel, weights: str | None, owner: str,
                   trusted_globals: Sequence[str] = ()) -> tuple[torch.nn.Module, list[str]]:
    """The whole image-text model of ``model`` (both towers) with ``weights`` (a tag, a
    checkpoint path, or None for open_clip's random initialisation: the caller seeds torch),
    in eval mode, and log lines. The image features and the zero-shot text classifier of one
    model are built by this one function, so that both towers come from the same weights."""
    if weights is None:
        network, note = _create(model.name), "open_clip's random initialisation"
    elif model.tag:
        _fetch(model, owner)
        network, note = _create(model.name, model.tag), f"pretrained weights '{model.tag}'"
    else:
        network, note = _create_from_checkpoint(model, weights, owner, trusted_globals)
    return network.eval(), [f"open_clip {open_clip.__version__}: {model.name}, {note}"]


def build(model: OpenClipModel, weights: str | None, owner: str,
          trusted_globals: Sequence[str] = ()) -> tuple[ImageFeatures, list[str]]:
    """The image tower of ``model`` with ``weights`` (as :func:`create_network` takes them),
    in eval mode, and log lines."""
    network, notes = create_network(model, weights, owner, trusted_globals)
    notes = [f"{notes[0]}; image features: {model.image_features}"]
    # the probes need only the image tower: the rest is let go
    return ImageFeatures(network.visual, model.image_features), notes


def _create(name: str, pretrained: str | None = None):
    # pretrained_text=False: a text tower from the Hugging Face hub is not downloaded
    return open_clip.create_model(name, pretrained=pretrained, pretrained_text=False)


def _fetch(model: OpenClipModel, owner: str) -> None:
    """Download the tag's weights into open_clip's cache (a no-op when there), so that a node
    that cannot reach them is told what to do."""
    release = open_clip.get_pretrained_cfg(model.name, model.tag)
    try:
        open_clip.pretrained.download_pretrained(release)
    except OSError as error:
        hub = release.get("hf_hub", "").rstrip("/")
        source = f"the Hugging Face hub (https://huggingface.co/{hub})" if hub else release.get("url") or "its source"
        fetch = (f"python -c \"import open_clip; open_clip.create_model('{model.name}', "
                 f"pretrained='{model.tag}')\"")
        raise PretrainedWeightsUnavailable(
            f"{owner}: weights '{model.tag}' of open_clip/{model.name} could not be fetched from {source} "
            f"({type(error).__name__}: {error}). open_clip downloads them on first use into its cache "
            f"(HF_HOME, by default ~/.cache/huggingface; ~/.cache/clip for releases outside the hub), "
            f"which this machine cannot reach or fill. Run {fetch} once where there is internet with "
            f"the same cache as this node."
        ) from error


def _create_from_checkpoint(model: OpenClipModel, path: str, owner: str, trusted_globals: Sequence[str]):
    """The model with the weights of the checkpoint ``path``, by open_clip's loader (its
    conversions of other releases' keys, position embeddings resampled), which reads the file
    tensors-only, as torch's ``weights_only`` does, besides the model's ``trusted_globals``."""
    check_checkpoint_safety(path, trusted_globals, owner)
    try:
        with torch.serialization.safe_globals(resolve_globals(trusted_globals)):
            network = _create(model.name, path)
    except (RuntimeError, KeyError, ValueError) as error:
        raise CheckpointMismatch(
            f"{owner}: checkpoint {path} does not hold weights of open_clip/{model.name}: open_clip's "
            f"loader says {type(error).__name__}: {str(error)[:600]}. Check the model's arch, or "
            f"convert the file to that model's state dict."
        ) from None
    return network, f"checkpoint {path}, loaded by open_clip's loader tensors-only"
