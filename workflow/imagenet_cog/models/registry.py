"""The model registry: how each backbone of the benchmark is built, loaded, cut and fed.

A registry name (the ``arch`` of a ``models:`` entry in config.yaml) says which library
builds the network, where it is cut (the penultimate layer: the features the classifier of
the pretrained model reads, paper supp. B.1) and how images are preprocessed (resize the
shortest side to S with bicubic interpolation, center crop S x S, divide by 255, normalise
with the model's mean and std; paper supp. B.1 and Table 3).

The ``weights`` of an entry is one of

* ``random`` or ``random:<seed>``: seeded random initialisation (the demo and the tests;
  every output made this way says so, see :func:`is_random_weights`);
* ``pretrained``: the library's own download of the weights listed in the registry;
* a checkpoint path: a state dict mapped onto the registry's network (see
  :func:`imagenet_cog.models.checkpoints.load_checkpoint`). This is how the ResNet50 checkpoints of the self-supervised,
  regularised and web-data models of paper Table 1 are evaluated: SimCLR-v2 (use the
  ``simclr_v2_resnet50`` arch, which skips normalisation), MoCo-v2, MoChi, BYOL, SwAV,
  DINO, BarlowTwins, InfoMin, OBoW, CompReSS, MixUp, Manifold-MixUp, CutMix, ReLabel,
  Adv-Robust, MEAL-v2, MoPro, and CLIP-RN50 (``clip_resnet50``).

Paper Table 1 models that neither torchvision nor timm ship are written in the project
(:mod:`imagenet_cog.backbones`, ``library: project``), with the parameter names of their
published checkpoints: NAT-M4 (1536-d) and T2T-ViT-t-14 (384-d). Other networks can be
plugged in with ``arch: custom`` and a ``factory`` (a function ``factory(weights)`` returning
``(backbone, preprocessing dict)``). Every published ResNet50 checkpoint layout of Table 1
is listed in :data:`imagenet_cog.models.checkpoints.CHECKPOINT_LAYOUTS`; config/paper_models.yaml
configures all 31 models (``python -m imagenet_cog models`` prints them as paper Table 3). The paper's
EfficientNet-B1/B4 weights came from FAIR's pycls; the ``efficientnet_b1``/``_b4`` entries
use torchvision's networks of the same architecture, feature size and input size.

``torch`` is imported inside functions so that Snakemake can ask for weight identities and
preprocessing while building the DAG without loading it; an open_clip model with random
weights is planned from its config file (:mod:`imagenet_cog.models.open_clip_catalogue`), one
with a pretrained tag or a checkpoint by open_clip, which imports torch. A transformers model
(``hf/``) is checked, identified and preprocessed from its release's config files
(:mod:`imagenet_cog.models.hf_catalogue`, with huggingface_hub's client, imported only for such
archs); its width is measured on the meta device by transformers.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection

import yaml

from imagenet_cog.models.checkpoints import CheckpointMismatch, check_checkpoint_safety, load_checkpoint
from imagenet_cog.models.open_clip_catalogue import EMBEDDING, image_features_read, random_weights_plan
from imagenet_cog.models.pretraining import DATASETS_TABLE, RELEASES_TABLE, Catalogue
from imagenet_cog.models.series import series_of_model
from imagenet_cog.models.tokens import TokenChoice

# The paper's 31 models, in the workflow's folder (where Snakemake runs, next to config.yaml):
# the default of the models command, run there; an installed package has no checkout to look in.
PAPER_MODELS_CONFIG = Path("config") / "paper_models.yaml"

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# CLIP's normalisation as printed in paper supp. B.1.
CLIP_MEAN = (0.481, 0.457, 0.408)
CLIP_STD = (0.268, 0.261, 0.275)
# SimCLR-v2 networks take raw [0, 1] pixels.
NO_MEAN = (0.0, 0.0, 0.0)
NO_STD = (1.0, 1.0, 1.0)

DEFAULT_RANDOM_SEED = 0
# Archs built by timm by name (imagenet_cog.models.timm_models), e.g. timm/vit_small_patch14_dinov2.lvd142m.
TIMM_PREFIX = "timm/"
# Image-text models built by open_clip by name (imagenet_cog.models.open_clip_models), e.g. open_clip/ViT-B-32.
OPEN_CLIP_PREFIX = "open_clip/"
# transformers checkpoints, a Hub repo or a save_pretrained folder (imagenet_cog.models.hf_catalogue),
# e.g. hf/facebook/webssl-dino1b-full2b-224, hf/./models/my-vit
HF_PREFIX = "hf/"


def is_timm_arch(arch: str) -> bool:
    """Whether ``arch`` names a timm network rather than a registry entry."""
    return arch.startswith(TIMM_PREFIX)


def is_open_clip_arch(arch: str) -> bool:
    """Whether ``arch`` names an open_clip image-text model rather than a registry entry."""
    return arch.startswith(OPEN_CLIP_PREFIX)


def is_hf_arch(arch: str) -> bool:
    """Whether ``arch`` names a transformers checkpoint (a Hub repo or a folder) rather than a registry entry."""
    return arch.startswith(HF_PREFIX)


def has_text_tower(entry: dict) -> bool:
    """An open_clip model whose image features are the embedding, the space its text tower
    shares; its pooled features are not in that space, and the other archs have no text tower."""
    return is_open_clip_arch(entry["arch"]) and image_features_read(entry.get("image_features")) == EMBEDDING


def output_size(width: int, height: int, size: int) -> tuple[int, int]:
    """Shortest side to ``size``, the other rounded down, as torchvision's ``Resize(int)``."""
    if width <= height:
        return size, int(size * height / width)
    return int(size * width / height), size


@dataclass(frozen=True)
class Preprocessing:
    """Shortest side to ``size`` (``interpolation``), center crop ``size``, /255, normalise.

    timm models record which ``mode`` made it (``paper`` or ``model``); timm's own evaluation
    transform resizes to ``resize`` first (``size`` / crop_pct), the shortest side or, for
    the ``squash`` crop mode, both sides. ``crop_rounding`` places the crop of an odd margin:
    torchvision's ``round``, or transformers' image processors' ``floor``.
    """

    size: int = 224
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    interpolation: str = "bicubic"
    mode: str | None = None
    resize: int | None = None
    crop_mode: str = "center"
    crop_rounding: str = "round"

    def to_dict(self) -> dict[str, Any]:
        # Keys beyond the paper's four only where set: the registry's JSON, a planning
        # parameter of every finished extraction, stays as it was.
        values = {"size": self.size, "mean": list(self.mean), "std": list(self.std),
                  "interpolation": self.interpolation}
        if self.mode is not None:
            values["mode"] = self.mode
        if self.resize is not None:
            values.update(resize=self.resize, crop_mode=self.crop_mode)
        if self.crop_rounding != "round":
            values["crop_rounding"] = self.crop_rounding
        return values

    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """The (width, height) an image is resized to before the center crop."""
        side = self.resize or self.size
        return (side, side) if self.crop_mode == "squash" else output_size(width, height, side)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str) -> "Preprocessing":
        """Validated preprocessing from a user's dict; ``source`` names it in errors."""
        known = {"size", "mean", "std", "interpolation"}
        unknown = set(values) - known
        if unknown or "size" not in values:
            raise ValueError(
                f"{source}: the preprocessing dict needs 'size' and may have {sorted(known)}; "
                f"got {sorted(values)}."
            )
        mean = tuple(float(v) for v in values.get("mean", IMAGENET_MEAN))
        std = tuple(float(v) for v in values.get("std", IMAGENET_STD))
        interpolation = values.get("interpolation", "bicubic")
        if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
            raise ValueError(f"{source}: mean and std need three values each, std positive.")
        if interpolation not in ("bicubic", "bilinear"):
            raise ValueError(f"{source}: interpolation must be 'bicubic' or 'bilinear'.")
        if int(values["size"]) < 1:
            raise ValueError(f"{source}: size must be a positive number of pixels.")
        return cls(int(values["size"]), mean, std, interpolation)


@dataclass(frozen=True)
class Architecture:
    """One registry entry. ``builder`` is the library's constructor name."""

    library: str  # "torchvision", "timm" or "project" (imagenet_cog.backbones)
    builder: str
    feature_dim: int
    preprocessing: Preprocessing = field(default_factory=Preprocessing)
    pretrained: str = ""  # torchvision weights enum member, or timm pretrained tag
    paper_name: str = ""


REGISTRY: dict[str, Architecture] = {
    "resnet50": Architecture(
        "torchvision", "resnet50", 2048, pretrained="ResNet50_Weights.IMAGENET1K_V1",
        paper_name="ResNet50 (the baseline)"),
    "resnet152": Architecture(
        "torchvision", "resnet152", 2048, pretrained="ResNet152_Weights.IMAGENET1K_V1",
        paper_name="a-ResNet152"),
    "inception_v3": Architecture(
        "torchvision", "inception_v3", 2048, Preprocessing(size=299),
        pretrained="Inception_V3_Weights.IMAGENET1K_V1", paper_name="a-Inception-v3"),
    # The authors' VGG19 checkpoint is torchvision's batch-normalised one.
    "vgg19": Architecture(
        "torchvision", "vgg19_bn", 4096, pretrained="VGG19_BN_Weights.IMAGENET1K_V1",
        paper_name="a-VGG19"),
    "efficientnet_b1": Architecture(
        "torchvision", "efficientnet_b1", 1280, Preprocessing(size=240),
        pretrained="EfficientNet_B1_Weights.IMAGENET1K_V1", paper_name="a-EfficientNet-B1"),
    "efficientnet_b4": Architecture(
        "torchvision", "efficientnet_b4", 1792, Preprocessing(size=380),
        pretrained="EfficientNet_B4_Weights.IMAGENET1K_V1", paper_name="a-EfficientNet-B4"),
    "deit_small": Architecture(
        "timm", "deit_small_patch16_224", 384, pretrained="deit_small_patch16_224.fb_in1k",
        paper_name="a-DeiT-S"),
    "deit_small_distilled": Architecture(
        "timm", "deit_small_distilled_patch16_224", 384,
        pretrained="deit_small_distilled_patch16_224.fb_in1k", paper_name="a-DeiT-S-distilled"),
    "deit_base_distilled_384": Architecture(
        "timm", "deit_base_distilled_patch16_384", 768, Preprocessing(size=384),
        pretrained="deit_base_distilled_patch16_384.fb_in1k", paper_name="a-DeiT-B-distilled"),
    # CLIP's ResNet50 with global average pooling in place of its attention pool: the
    # 2048-d trunk features of paper Table 3.
    "clip_resnet50": Architecture(
        "timm", "resnet50_clip_gap", 2048, Preprocessing(mean=CLIP_MEAN, std=CLIP_STD),
        pretrained="resnet50_clip_gap.openai", paper_name="d-CLIP"),
    "semi_sup_resnet50": Architecture(
        "timm", "resnet50", 2048, pretrained="resnet50.fb_ssl_yfcc100m_ft_in1k",
        paper_name="d-Semi-Sup"),
    "semi_weakly_sup_resnet50": Architecture(
        "timm", "resnet50", 2048, pretrained="resnet50.fb_swsl_ig1b_ft_in1k",
        paper_name="d-Semi-Weakly-Sup"),
    "simclr_v2_resnet50": Architecture(
        "torchvision", "resnet50", 2048, Preprocessing(mean=NO_MEAN, std=NO_STD),
        paper_name="s-SimCLR-v2 (checkpoint path only)"),
    # Paper supp. B.1 uses S = 224 for NAT-M4 (its release was trained at 240).
    "nat_m4": Architecture(
        "project", "imagenet_cog.backbones.nat:nat_m4", 1536,
        paper_name="a-NAT-M4 (checkpoint path only)"),
    "t2t_vit_t_14": Architecture(
        "project", "imagenet_cog.backbones.t2t_vit:t2t_vit_t_14", 384,
        paper_name="a-T2T-ViT-t-14 (checkpoint path only)"),
    # The demo's small network on its 32-pixel images (imagenet_cog.backbones.demo_cnn),
    # pretrained by the workflow's rule pretrain_demo_model; in no paper.
    "demo_cnn": Architecture(
        "project", "imagenet_cog.backbones.demo_cnn:demo_cnn", 128,
        Preprocessing(size=32, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), interpolation="bilinear"),
        paper_name="demo only (checkpoint path only)"),
}



@dataclass(frozen=True)
class ModelSpec:
    """A ``models:`` entry of config.yaml, by its short name."""

    name: str
    arch: str
    weights: str = "pretrained"
    factory: str | None = None
    # timm/ archs only (imagenet_cog.models.timm_models): "paper" (the default) or "model", and S
    preprocessing: str | None = None
    input_size: int | None = None
    # Python objects the checkpoint may hold besides tensors (module.name), built by torch's
    # tensors-only loader for this model alone (docs/models.md, "Checkpoint files").
    trusted_globals: tuple[str, ...] = ()
    # open_clip/ archs only (imagenet_cog.models.open_clip_models): "embedding" (the default) or "pooled"
    image_features: str | None = None
    # timm/ and hf/ archs (imagenet_cog.models.tokens): which of a ViT's tokens, of how many last blocks
    tokens: str | None = None
    blocks: int | None = None
    # hf/ archs only (imagenet_cog.models.hf_catalogue): a Hub repo's branch, tag or commit, and
    # whether the repo's own Python code may be run (with a pinned commit)
    revision: str | None = None
    trust_remote_code: bool | None = None

    @classmethod
    def from_config(cls, name: str, entry: dict[str, Any],
                    checkpoints_dir: str | os.PathLike | None = None,
                    made_by_workflow: Collection[str] = (), check_checkpoint: bool = True) -> "ModelSpec":
        """The spec of a ``models:`` entry; a relative checkpoint path is taken under
        ``checkpoints_dir`` (config key ``checkpoints_dir``) when that is set. A checkpoint
        in ``made_by_workflow`` (written by a rule, e.g. the demo's pretrained network) is
        taken as it is and need not exist yet; nor need any with ``check_checkpoint`` false
        (the entry is checked all the same)."""
        spec = cls.of_entry(name, entry)
        under_checkpoints_dir = spec.weights not in made_by_workflow and not Path(spec.weights).is_absolute()
        if checkpoints_dir and spec.is_checkpoint() and under_checkpoints_dir:
            spec = dataclasses.replace(spec, weights=str(Path(checkpoints_dir) / spec.weights))
        weights = spec.weights
        try:
            spec.check(checkpoint_made_later=weights in made_by_workflow or not check_checkpoint)
            # a custom factory reads its file itself, transformers its folder's safetensors; every other
            # checkpoint goes through read_checkpoint
            if (check_checkpoint and spec.is_checkpoint() and spec.arch != "custom" and not is_hf_arch(spec.arch)
                    and weights not in made_by_workflow):
                check_checkpoint_safety(weights, spec.trusted_globals, f"config.yaml: model '{name}'")
        except FileNotFoundError as missing:
            if entry.get("source"):
                published = f" (published as '{entry['published_file']}')" if entry.get("published_file") else ""
                raise FileNotFoundError(
                    f"{missing} Download the checkpoint from {entry['source']}{published} and "
                    f"save it as {weights}; docs/paper-models.md says how."
                ) from None
            raise
        return spec

    @classmethod
    def of_entry(cls, name: str, entry: dict[str, Any]) -> "ModelSpec":
        """The spec of a ``models:`` entry as written, unchecked: what planning reads of a model
        (its preprocessing, its feature width) before its checkpoint is fetched."""
        return cls(name, entry["arch"], str(entry.get("weights", "pretrained")), entry.get("factory"),
                   entry.get("preprocessing"), entry.get("input_size"), tuple(entry.get("trusted_globals") or ()),
                   entry.get("image_features"), entry.get("tokens"), entry.get("blocks"), entry.get("revision"),
                   entry.get("trust_remote_code"))

    @property
    def token_choice(self) -> TokenChoice:
        """The entry's tokens and blocks, defaults filled (timm's pre-logits)."""
        return TokenChoice.of(self.tokens, self.blocks)

    def is_checkpoint(self) -> bool:
        """Whether the weights are a checkpoint file (not random, not the library's)."""
        return not (is_random_weights(self.weights) or self.weights == "pretrained" or self.is_open_clip_tag())

    def is_open_clip_tag(self) -> bool:
        """Whether the weights are a pretrained tag of the entry's open_clip model (random
        weights are none: open_clip is not asked)."""
        if not is_open_clip_arch(self.arch) or is_random_weights(self.weights):
            return False
        from imagenet_cog.models.open_clip_models import is_tag

        return is_tag(self.arch.removeprefix(OPEN_CLIP_PREFIX), self.weights)

    def timm_model(self, check_weights: bool = True):
        """The ``timm/`` arch resolved against timm's registry (unknown names fail with the
        closest names timm knows)."""
        from imagenet_cog.models.timm_models import resolve

        return resolve(self.arch, input_size=self.input_size, mode=self.preprocessing,
                       pretrained=check_weights and self.weights == "pretrained",
                       owner=f"config.yaml: model '{self.name}'", choice=self.token_choice)

    def open_clip_model(self, check_weights: bool = True):
        """The ``open_clip/`` arch resolved against open_clip's configs (unknown names fail with
        the closest names open_clip knows), with its weights and image features."""
        from imagenet_cog.models.open_clip_models import resolve

        return resolve(self.arch, self.weights, self.image_features, check_weights=check_weights,
                       owner=f"config.yaml: model '{self.name}'")

    def open_clip_plan(self) -> tuple[dict[str, Any], int]:
        """The ``open_clip/`` arch's preprocessing fields and feature width: from its config file
        alone where that says all (random weights, the embedding), so that planning the demo
        imports no torch; otherwise as open_clip resolves the model."""
        plan = self.random_weights_plan()
        if plan is None:
            model = self.open_clip_model(check_weights=False)
            plan = model.preprocessing(), model.feature_dim()
        return plan

    def hf_model(self, fetch_weights: bool = False, check_weights: bool = True):
        """The ``hf/`` arch resolved from its release's config files (refused, naming the repo or
        folder, where it cannot be read as configured); ``fetch_weights`` downloads its weights.
        With a checkpoint as its weights, or ``check_weights`` false (planning: a series entry's
        weights are its checkpoints), the release gives the network's config and image processor
        alone: its weights are neither read nor required."""
        from imagenet_cog.models.hf_catalogue import resolve

        release_weights = check_weights and not self.is_checkpoint()
        return resolve(self.arch.removeprefix(HF_PREFIX), self.revision, self.tokens, self.blocks,
                       bool(self.trust_remote_code), f"config.yaml: model '{self.name}'",
                       fetch_weights=fetch_weights and release_weights, release_weights=release_weights)

    def random_weights_plan(self) -> tuple[dict[str, Any], int] | None:
        """The plan read from the config file alone; None unless the weights are random."""
        if not is_random_weights(self.weights):
            return None
        return random_weights_plan(self.arch.removeprefix(OPEN_CLIP_PREFIX), self.image_features)

    def check(self, checkpoint_made_later: bool = False) -> None:
        self._check_library_settings()
        if is_timm_arch(self.arch):
            self.timm_model()
        elif is_open_clip_arch(self.arch):
            # a model its config file plans is one open_clip knows, with valid features
            if self.random_weights_plan() is None:
                self.open_clip_model()
        elif is_hf_arch(self.arch):
            self._check_hf(release_made_later=checkpoint_made_later)
            return
        elif self.arch == "custom":
            if not self.factory or ":" not in self.factory:
                raise ValueError(
                    f"config.yaml: model '{self.name}' has arch 'custom' but no factory; set "
                    f"factory: 'module:function' (a function of weights returning "
                    f"(backbone, preprocessing dict))."
                )
        elif self.arch not in REGISTRY:
            raise ValueError(
                f"config.yaml: model '{self.name}' has unknown arch '{self.arch}'; use one of "
                f"{', '.join(sorted(REGISTRY))}, or 'custom' with a factory."
            )
        elif self.weights == "pretrained" and not REGISTRY[self.arch].pretrained:
            raise ValueError(
                f"config.yaml: model '{self.name}' (arch '{self.arch}') has no library weights; "
                f"set weights to a checkpoint path."
            )
        random_seed(self.weights)
        if self.is_checkpoint() and not checkpoint_made_later and not Path(self.weights).is_file():
            library = "'pretrained'"
            if is_open_clip_arch(self.arch):
                from imagenet_cog.models.open_clip_models import tags_text

                library = f"an open_clip tag of the model ({tags_text(self.arch.removeprefix(OPEN_CLIP_PREFIX))})"
            raise FileNotFoundError(
                f"config.yaml: model '{self.name}': weights '{self.weights}' is neither "
                f"'random', {library} nor an existing checkpoint file; fix the path."
            )

    def _check_hf(self, release_made_later: bool) -> None:
        """An ``hf/`` entry: its weights are its release's, or a checkpoint folder's of the same
        network; the release itself (its files, its config, its processor, the reading) and the
        checkpoint's weights are read unless they may come later (a checkpoint not yet downloaded
        is noted among what the run lacks)."""
        from imagenet_cog.models.hf_catalogue import check_entry
        from imagenet_cog.models.hf_release import checkpoint_weight_files

        if is_random_weights(self.weights):
            raise ValueError(
                f"config.yaml: model '{self.name}': an hf/ model's weights are its repo's or folder's (pretrained), or a "
                f"checkpoint folder of the same network (a Trainer's checkpoint-<step>), not '{self.weights}'; another "
                f"revision is revision: <branch, tag or commit>.")
        if self.trusted_globals:
            raise ValueError(
                f"config.yaml: model '{self.name}': trusted_globals is for pickled checkpoints; an hf/ model's weights "
                f"are read from safetensors only.")
        check_entry(self.arch.removeprefix(HF_PREFIX), self.revision, self.trust_remote_code,
                    f"config.yaml: model '{self.name}'")
        if release_made_later:
            return
        self.hf_model()
        if self.is_checkpoint():
            if not Path(self.weights).exists():
                raise FileNotFoundError(f"config.yaml: model '{self.name}': checkpoint folder '{self.weights}' does not "
                                        f"exist; fix the path.")
            try:
                checkpoint_weight_files(self.weights)
            except ValueError as error:
                raise ValueError(f"config.yaml: model '{self.name}': {error}") from None

    def _check_library_settings(self) -> None:
        """The settings of one library's models are refused on every other arch."""
        if (self.preprocessing is not None or self.input_size is not None) and not is_timm_arch(self.arch):
            taken = ("open_clip's own preprocessing for the model and its weights" if is_open_clip_arch(self.arch)
                     else "its release's image processor" if is_hf_arch(self.arch)
                     else "preprocessed as the paper did")
            raise ValueError(
                f"config.yaml: model '{self.name}': preprocessing and input_size are settings of "
                f"timm models (arch: timm/<name>); arch '{self.arch}' is {taken}."
            )
        if self.image_features is not None and not is_open_clip_arch(self.arch):
            raise ValueError(
                f"config.yaml: model '{self.name}': image_features is a setting of open_clip models "
                f"(arch: open_clip/<name>); arch '{self.arch}' gives its penultimate layer's features."
            )
        if (self.tokens is not None or self.blocks is not None) and not (is_timm_arch(self.arch) or is_hf_arch(self.arch)):
            taken = ("its image_features (embedding or pooled)" if is_open_clip_arch(self.arch)
                     else "its penultimate layer's features")
            raise ValueError(
                f"config.yaml: model '{self.name}': tokens and blocks are settings of timm and transformers models "
                f"(arch: timm/<name>, hf/<repo>); arch '{self.arch}' gives {taken}."
            )
        if (self.revision is not None or self.trust_remote_code is not None) and not is_hf_arch(self.arch):
            raise ValueError(
                f"config.yaml: model '{self.name}': revision and trust_remote_code are settings of transformers "
                f"models (arch: hf/<org>/<name>); arch '{self.arch}' is no Hub repo."
            )


def kept_models(models: dict[str, Any]) -> dict[str, Any]:
    """The models of a config: a file laid over another removes one by setting it to null
    (Snakemake merges ``models`` key by key, so it cannot drop one otherwise)."""
    return {name: entry for name, entry in models.items() if entry is not None}


def is_random_weights(weights_or_identity: str) -> bool:
    """True for a weights setting or identity meaning random initialisation.

    Probes and results call this on a feature file's ``weights`` attribute to mark
    numbers that say nothing about a real model.
    """
    return weights_or_identity == "random" or weights_or_identity.startswith("random:")


def random_seed(weights: str) -> int | None:
    if not is_random_weights(weights):
        return None
    if weights == "random":
        return DEFAULT_RANDOM_SEED
    seed = weights.split(":", 1)[1]
    if not seed.isdigit():
        raise ValueError(f"weights '{weights}': write random or random:<non-negative integer>.")
    return int(seed)


def checkpoint_sha256(path: str | os.PathLike) -> str:
    """A checkpoint's content: a file's sha256, or a transformers checkpoint folder's weights'
    (:func:`imagenet_cog.models.hf_release.checkpoint_digest`; a series' steps are compared by it)."""
    if not os.path.isdir(path):
        return file_sha256(path)
    from imagenet_cog.models.hf_release import checkpoint_digest

    return checkpoint_digest(path, file_sha256)


def file_sha256(path: str | os.PathLike) -> str:
    """A file's sha256, read once per process while its size and modification time stay (a
    series' checkpoint is digested for its duplicates and for its identity)."""
    status = os.stat(path)
    return _file_sha256(os.path.realpath(path), status.st_size, status.st_mtime_ns)


@functools.cache
def _file_sha256(path: str, size: int, modified_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_identity(spec: ModelSpec) -> str:
    """A string that changes exactly when the network's weights or code change.

    ``random:<seed>``, ``torchvision:<enum>``, ``timm:<tag>``, ``open_clip:<name>/<tag>``,
    ``sha256:<checkpoint digest>``; a custom factory adds the digest of its module's source
    file, an open_clip model the image features it gives (``+image_features:pooled``), a timm
    model read otherwise than by its pre-logits the tokens it reads (``+tokens:cls/blocks:4``).
    A transformers model's is ``hf:<repo>@<commit>+safetensors:<sha256>`` (a folder's:
    ``hf:folder+config:<digest>+safetensors:<sha256>``, its content, not its path; with a
    checkpoint folder as its weights, ``hf:config:<digest>+safetensors:<the checkpoint's>``) and
    the tokens it reads, always.
    """
    if is_hf_arch(spec.arch):
        return spec.hf_model().identity(file_sha256, spec.weights if spec.is_checkpoint() else None)
    seed = random_seed(spec.weights)
    if seed is not None:
        identity = f"random:{seed}"
    elif spec.is_open_clip_tag():
        identity = f"open_clip:{spec.arch.removeprefix(OPEN_CLIP_PREFIX)}/{spec.weights}"
    elif spec.weights == "pretrained":
        if spec.arch == "custom":
            identity = "pretrained"
        elif is_timm_arch(spec.arch):
            identity = f"timm:{spec.timm_model().full_name}"
        else:
            architecture = REGISTRY[spec.arch]
            identity = f"{architecture.library}:{architecture.pretrained}"
    else:
        identity = f"sha256:{file_sha256(spec.weights)}"
    if spec.arch in REGISTRY and REGISTRY[spec.arch].library == "project":
        # The network's code is the project's own: editing it re-extracts that model.
        module_name = REGISTRY[spec.arch].builder.split(":", 1)[0]
        origin = importlib.util.find_spec(module_name).origin
        identity += f"+{module_name}@sha256:{file_sha256(origin)[:16]}"
    if spec.arch == "custom":
        module_name = spec.factory.split(":", 1)[0]
        module = importlib.util.find_spec(module_name)
        if module is None or module.origin is None:
            raise ModuleNotFoundError(
                f"config.yaml: model '{spec.name}': factory module '{module_name}' cannot be "
                f"imported; put it on PYTHONPATH (e.g. next to the Snakefile)."
            )
        identity += f"+{spec.factory}@sha256:{file_sha256(module.origin)[:16]}"
    if is_open_clip_arch(spec.arch):
        identity += f"+image_features:{image_features_read(spec.image_features)}"
    if is_timm_arch(spec.arch):
        identity += spec.token_choice.identity()
    return identity


def planned_preprocessing(spec: ModelSpec) -> Preprocessing | None:
    """The registry's, timm's, open_clip's or a transformers release's image processor's
    preprocessing; None for custom models (their factory decides)."""
    if is_timm_arch(spec.arch):
        return Preprocessing(**spec.timm_model(check_weights=False).preprocessing())
    if is_open_clip_arch(spec.arch):
        return Preprocessing(**spec.open_clip_plan()[0])
    if is_hf_arch(spec.arch):
        return Preprocessing(**spec.hf_model(check_weights=False).preprocessing())
    return REGISTRY[spec.arch].preprocessing if spec.arch in REGISTRY else None


def planned_feature_dim(spec: ModelSpec) -> int | None:
    """The feature size known before extraction: the registry's, or a timm, open_clip or
    transformers model's measured on the meta device; None for custom models."""
    if is_timm_arch(spec.arch):
        return spec.timm_model(check_weights=False).feature_dim()
    if is_open_clip_arch(spec.arch):
        return spec.open_clip_plan()[1]
    if is_hf_arch(spec.arch):
        from imagenet_cog.models.hf_models import feature_dim

        return feature_dim(spec.hf_model(check_weights=False))
    return REGISTRY[spec.arch].feature_dim if spec.arch in REGISTRY else None


def extract_options(spec: ModelSpec) -> list[str]:
    """The extract command's options besides arch and weights: a custom model's factory, a
    timm model's preprocessing, input size and tokens, an open_clip model's image features,
    a transformers model's revision, remote-code opt-in and tokens, the objects its checkpoint
    may hold."""
    trusted = ["--trusted-globals", *spec.trusted_globals] if spec.trusted_globals else []
    if is_timm_arch(spec.arch):
        model = spec.timm_model(check_weights=False)
        size = ["--input-size", str(model.input_size)] if model.input_size else []
        return ["--preprocessing", model.mode, *size, *model.choice.options(), *trusted]
    if is_open_clip_arch(spec.arch):
        return ["--image-features", image_features_read(spec.image_features)] + trusted
    if is_hf_arch(spec.arch):
        # as the entry sets them: the family's default reading is the job's to resolve
        return ([*(["--revision", spec.revision] if spec.revision else []),
                 *(["--trust-remote-code"] if spec.trust_remote_code else []),
                 *(["--tokens", spec.tokens] if spec.tokens else []),
                 *(["--blocks", str(spec.blocks)] if spec.blocks is not None else [])])
    return (["--factory", spec.factory] if spec.factory else []) + trusted


# Building networks -----------------------------------------------------------------


def _cut_torchvision(builder: str, network):
    """Replace the final classifier by identity so the network returns penultimate features."""
    import torch.nn as nn

    if builder.startswith(("resnet", "inception")):
        network.fc = nn.Identity()
    elif builder.startswith("vgg"):
        # classifier = fc6, ReLU, Dropout, fc7, ReLU, Dropout, fc8: keep fc7's output.
        network.classifier[6] = nn.Identity()
    elif builder.startswith("efficientnet"):
        network.classifier = nn.Identity()
    else:
        raise ValueError(f"no penultimate cut known for torchvision '{builder}'")
    return network


def _build_torchvision(architecture: Architecture, pretrained: bool):
    import torchvision

    builder = getattr(torchvision.models, architecture.builder)
    options: dict[str, Any] = {}
    if architecture.builder == "inception_v3":
        # The pretrained Inception-v3 re-normalises ImageNet-normalised input internally and
        # carries the auxiliary classifier; keep both for random weights too, so that the
        # same graph runs whatever the weights.
        options = {"aux_logits": True, "transform_input": True, "init_weights": True}
    weights = None
    if pretrained:
        enum_name, member = architecture.pretrained.split(".")
        weights = getattr(getattr(torchvision.models, enum_name), member)
        options.pop("init_weights", None)
    network = builder(weights=weights, **options)
    return _cut_torchvision(architecture.builder, network)


def _build_timm(architecture: Architecture, pretrained: bool):
    import timm

    name = architecture.pretrained if pretrained else architecture.builder
    # num_classes=0 makes timm return the pooled pre-logits features.
    return timm.create_model(name, pretrained=pretrained, num_classes=0)


def _build_project(architecture: Architecture, pretrained: bool):
    from torch import nn

    module_name, function_name = architecture.builder.split(":")
    network = getattr(importlib.import_module(module_name), function_name)()
    # Cut the ImageNet classifier: NAT-M4 names it 'classifier', T2T-ViT 'head'.
    for classifier in ("classifier", "head"):
        if hasattr(network, classifier):
            setattr(network, classifier, nn.Identity())
    return network


BUILDERS = {"torchvision": _build_torchvision, "timm": _build_timm, "project": _build_project}


def _call_factory(spec: ModelSpec):
    module_name, function_name = spec.factory.split(":", 1)
    module = importlib.import_module(module_name)
    factory: Callable = getattr(module, function_name)
    result = factory(spec.weights)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise TypeError(
            f"config.yaml: model '{spec.name}': factory {spec.factory} must return "
            f"(backbone, preprocessing dict), got {type(result).__name__}."
        )
    backbone, preprocessing = result
    return backbone, Preprocessing.from_dict(dict(preprocessing), f"factory {spec.factory}")


@dataclass
class LoadedModel:
    """A frozen backbone in eval mode, ready for feature extraction."""

    spec: ModelSpec
    network: Any
    preprocessing: Preprocessing
    feature_dim: int
    weights_identity: str
    notes: list[str] = field(default_factory=list)
    # attributes the shards record besides the common ones (a timm model's release, version, tokens)
    provenance: dict[str, str | int] = field(default_factory=dict)

    @property
    def random_weights(self) -> bool:
        return is_random_weights(self.weights_identity)


def seed_torch(spec: ModelSpec) -> int | None:
    """Seed torch before building ``spec``'s network, and return its random weights' seed (None
    for other weights). Seeded also for checkpoints: layers the checkpoint leaves alone are
    then reproducible; and the same seed gives an open_clip model's text tower the weights
    that go with the image tower the features came from."""
    import torch

    seed = random_seed(spec.weights)
    torch.manual_seed(DEFAULT_RANDOM_SEED if seed is None else seed)
    return seed


def checkpoint_owner(spec: ModelSpec) -> str:
    """The model a checkpoint is refused for: a series checkpoint's with its series and step."""
    step = series_of_model(spec.name)
    return f"model '{spec.name}'" + (f" (series {step[0]}, step {step[1]})" if step else "")


def loaded_checkpoint(spec: ModelSpec, network) -> str:
    """The checkpoint loaded into ``network``; one that does not fit is refused naming the model
    (a series checkpoint's step with it, imagenet_cog.models.series)."""
    try:
        return load_checkpoint(network, spec.weights, spec.trusted_globals)
    except CheckpointMismatch as error:
        raise CheckpointMismatch(f"{checkpoint_owner(spec)}: {error}") from None


def build_model(spec: ModelSpec, identity: str | None = None) -> LoadedModel:
    """Build, load and cut the backbone of ``spec``; the feature size is measured."""
    import torch

    spec.check()
    identity = identity or weights_identity(spec)
    seed = seed_torch(spec)
    notes: list[str] = []
    provenance: dict[str, str | int] = {}
    if spec.arch == "custom":
        network, preprocessing = _call_factory(spec)
    elif is_timm_arch(spec.arch):
        from imagenet_cog.models.timm_models import build as build_timm

        timm_model = spec.timm_model()
        weights = None if seed is not None else spec.weights
        network, notes = build_timm(timm_model, weights, f"model '{spec.name}'", spec.trusted_globals)
        preprocessing, provenance = Preprocessing(**timm_model.preprocessing()), timm_model.provenance()
    elif is_open_clip_arch(spec.arch):
        from imagenet_cog.models.open_clip_models import build as build_open_clip

        open_clip_model = spec.open_clip_model()
        weights = None if seed is not None else spec.weights
        network, notes = build_open_clip(open_clip_model, weights, f"model '{spec.name}'", spec.trusted_globals)
        preprocessing, provenance = Preprocessing(**open_clip_model.preprocessing()), open_clip_model.provenance()
    elif is_hf_arch(spec.arch):
        from imagenet_cog.models.hf_models import build as build_hf

        hf_model = spec.hf_model(fetch_weights=True)
        checkpoint = spec.weights if spec.is_checkpoint() else None
        network, notes = build_hf(hf_model, checkpoint_owner(spec), checkpoint)
        preprocessing, provenance = Preprocessing(**hf_model.preprocessing()), hf_model.provenance()
    else:
        architecture = REGISTRY[spec.arch]
        network = BUILDERS[architecture.library](architecture, pretrained=spec.weights == "pretrained")
        preprocessing = architecture.preprocessing
        if seed is None and spec.weights != "pretrained":
            notes.append(loaded_checkpoint(spec, network))
    network.eval()
    for parameter in network.parameters():
        parameter.requires_grad_(False)
    with torch.inference_mode():
        probe = torch.zeros(1, 3, preprocessing.size, preprocessing.size)
        output = network(probe)
    if output.ndim != 2:
        raise ValueError(
            f"model '{spec.name}': the backbone returns shape {tuple(output.shape)}; it must "
            f"return one feature vector per image ([batch, dim])."
        )
    feature_dim = int(output.shape[1])
    if spec.arch in REGISTRY and feature_dim != REGISTRY[spec.arch].feature_dim:
        raise AssertionError(
            f"registry entry '{spec.arch}' gives {feature_dim}-d features, expected "
            f"{REGISTRY[spec.arch].feature_dim}"
        )
    return LoadedModel(spec, network, preprocessing, feature_dim, identity, notes, provenance)


def describe_registry() -> list[dict[str, Any]]:
    """One row per registry entry (for docs and tests)."""
    return [
        {"arch": name, "library": a.library, "builder": a.builder, "feature_dim": a.feature_dim,
         "pretrained": a.pretrained, "paper_name": a.paper_name, **a.preprocessing.to_dict()}
        for name, a in REGISTRY.items()
    ]


def describe_models(models: dict[str, dict[str, Any]], catalogue: Catalogue | None = None) -> list[dict[str, Any]]:
    """Paper Table 3 for config ``models:`` entries: name (Table 1's, else the label or key),
    category, arch, input size S and feature dim (the registry's, timm's, open_clip's or a
    transformers release's; a custom model's factory decides both, shown as '?', and so is a
    transformers release neither the Hub nor the cache can give, the reason in ``missing``); with
    a ``catalogue``, what each was pretrained on and its exposure (a series' checkpoints are files:
    their entry's declaration, if any, says)."""
    rows = []
    for key, entry in models.items():
        spec = ModelSpec.of_entry(key, entry)
        missing = None
        try:
            preprocessing, feature_dim = planned_preprocessing(spec), planned_feature_dim(spec)
        except FileNotFoundError as error:
            preprocessing, feature_dim, missing = None, None, str(error)
        row = {
            "name": entry.get("label") or entry.get("paper_name") or key,
            "category": entry.get("category") or "other",
            "arch": entry["arch"],
            "input_size": preprocessing.size if preprocessing else "?",
            "feature_dim": feature_dim or "?",
            **({"missing": missing} if missing else {}),
        }
        if catalogue is not None:
            pretraining = catalogue.of_entry(key, entry, "checkpoints" in entry or spec.is_checkpoint())
            row.update(pretraining_data=pretraining.data_text(), exposure=pretraining.exposure)
        rows.append(row)
    return rows


def describe_models_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog models",
        description="Paper Table 3 for the models of a config: name, category, input size S, "
                    "feature dim, what each was pretrained on and its exposure (a tab-separated table); "
                    "--config registry: the registry's architectures.")
    parser.add_argument("--config", type=Path, default=PAPER_MODELS_CONFIG,
                        help="a config with 'models:' (default: the paper's 31, %(default)s of the "
                             "workflow's folder, the working directory); "
                             "'registry' lists the registry's architectures instead")
    parser.add_argument("--pretraining-datasets", type=Path, default=DATASETS_TABLE,
                        help="the datasets' catalogue (default: %(default)s of the workflow's folder)")
    parser.add_argument("--pretraining-releases", type=Path, default=RELEASES_TABLE,
                        help="the releases' pretraining data (default: %(default)s of the workflow's folder)")
    args = parser.parse_args(argv)
    columns = ["name", "category", "arch", "input_size", "feature_dim"]
    if str(args.config) == "registry":
        # A registry entry's paper name carries Table 1's category prefix (a-, s-, d-).
        groups = {"a": "architecture", "s": "self-supervision", "r": "regularization", "d": "data"}
        rows = [{"name": row["paper_name"], "category": groups.get(row["paper_name"][:2].rstrip("-"), "baseline"),
                 "arch": row["arch"], "input_size": row["size"], "feature_dim": row["feature_dim"]}
                for row in describe_registry()]
    else:
        if not args.config.is_file():
            parser.error(f"--config {args.config}: no such file (relative paths start at {Path.cwd()}: run in the "
                         f"workflow's folder, or name the file)")
        catalogue = Catalogue.read(args.pretraining_datasets, args.pretraining_releases)
        rows = describe_models(kept_models(yaml.safe_load(args.config.read_text())["models"]), catalogue)
        columns += ["pretraining_data", "exposure"]
    print("\t".join(columns))
    for row in rows:
        print("\t".join(str(row[column]) for column in columns))
    for row in rows:
        if "missing" in row:
            print(row["missing"], file=sys.stderr)
    return 0
