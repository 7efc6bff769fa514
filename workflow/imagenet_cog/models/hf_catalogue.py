"""The ``transformers`` model families the workflow reads (``arch: hf/<org>/<name>`` or
``hf/<folder>``), each read as its authors read it, and a release's image processor as the
workflow's transform; decided from the release's config files, without torch or transformers
(every Snakemake process reads the Snakefile, and planning checks every model).

A family (the config's ``model_type``) says which features it can give (``tokens``,
:mod:`imagenet_cog.models.tokens`): the class tokens of the last blocks through the final norm,
the mean of the last block's patch tokens (register tokens never enter), both, or the model's
own ``pooler_output``; and which of them its own evaluation reads (its default, with the source).
Refused before any job, naming the repo or folder: remote code (``auto_map``) the entry did not
opt into with a pinned commit, a ``model_type`` no family here reads (a text model, or a vision
family outside the table), a reading the family cannot give, an image processor whose output
the extraction cannot reproduce, and an input size a fixed-size network does not take.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
from dataclasses import dataclass
from typing import Any, Callable

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.models.hf_release import COMMIT, HfRelease, checkpoint_digest, names_folder, resolve_release
from imagenet_cog.models.tokens import AVGPOOL, CLS, CLS_AVGPOOL, POOLER_OUTPUT, PRE_LOGITS, TokenChoice

# transformers' config defaults where a saved config leaves a key out (the families' configs
# share them: tests/test_models_hf.py holds them to transformers' classes)
DEFAULT_DEPTH = 12
DEFAULT_IMAGE_SIZE = 224
# transformers' image-processor settings the workflow's transform reproduces
RESAMPLE = {2: "bilinear", 3: "bicubic"}  # PIL.Image.Resampling's numbers
RESCALE = 1 / 255
# transformers' image-processor mean and std constants (transformers.image_utils)
IMAGENET_DEFAULT = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
IMAGENET_STANDARD = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
OPENAI_CLIP = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))


class HfModelRefused(ExplainedError, ValueError):
    """A release the workflow does not read as configured, with the reason and the way on."""


@dataclass(frozen=True)
class HfFamily:
    """How a ``model_type`` is read: ``default`` is its own evaluation's reading; ``processor``
    the image processor transformers gives it where the repo names none; ``class_token``,
    ``registers`` (the config key of its register tokens' count), ``tokens`` (false: a CNN,
    ``pooler_output`` only) and ``pooler`` (a ``pooler_output`` of its own) its token layout;
    ``final_norm`` the module an earlier block's class token passes, as the last block's does;
    ``fixed_input_size``: the network takes its config's image size only; ``masks_tokens``:
    ViTMAE's random masking, switched off; ``pooling_layer``: built with its pooler only to read
    it (ViTModel's ``add_pooling_layer``); ``vision_config`` and ``tower``: an image-text model's
    vision tower, its config's key and its transformers class."""

    title: str
    default: TokenChoice
    processor: str
    class_token: bool = False
    registers: str | None = None
    tokens: bool = True
    pooler: bool = False
    final_norm: str = "layernorm"
    fixed_input_size: bool = False
    masks_tokens: bool = False
    pooling_layer: bool = False
    vision_config: str | None = None
    tower: str | None = None

    def readings(self) -> tuple[str, ...]:
        """The ``tokens`` values the family gives."""
        found = [CLS, AVGPOOL, CLS_AVGPOOL] if self.tokens and self.class_token else [AVGPOOL] if self.tokens else []
        return tuple(found + ([POOLER_OUTPUT] if self.pooler else []))


CNN = dict(tokens=False, pooler=True, default=TokenChoice(POOLER_OUTPUT))
HF_FAMILIES: dict[str, HfFamily] = {
    # dinov2/hub/classifiers.py: DINOv2's released linear heads read the class tokens of the
    # last 4 blocks and the mean of the patch tokens (layers=4), each through the final norm
    "dinov2": HfFamily("DINOv2", TokenChoice(CLS_AVGPOOL, 4), "BitImageProcessor", class_token=True, pooler=True),
    "dinov2_with_registers": HfFamily("DINOv2 with registers", TokenChoice(CLS_AVGPOOL, 4), "BitImageProcessor",
                                      class_token=True, registers="num_register_tokens", pooler=True),
    # DINOv3 keeps DINOv2's linear evaluation, on the last block's class token (its paper's
    # linear probes; its pooler_output is that token)
    "dinov3_vit": HfFamily("DINOv3 ViT", TokenChoice(CLS), "DINOv3ViTImageProcessor", class_token=True,
                           registers="num_register_tokens", pooler=True, final_norm="norm"),
    # the CNNs' pooler_output is the normalised global mean, what their classifiers read
    "dinov3_convnext": HfFamily("DINOv3 ConvNeXt", processor="DINOv3ViTImageProcessor", **CNN),
    "convnext": HfFamily("ConvNeXt", processor="ConvNextImageProcessor", **CNN),
    "convnextv2": HfFamily("ConvNeXt V2", processor="ConvNextImageProcessor", **CNN),
    # ViTForImageClassification reads the last block's class token through the final norm (its
    # pooler, a dense layer and tanh, is the pre-logits of Google's IN-21K releases only)
    "vit": HfFamily("ViT", TokenChoice(CLS), "ViTImageProcessor", class_token=True, pooler=True,
                    fixed_input_size=True, pooling_layer=True),
    # MAE's linear probing (main_linprobe.py, without --global_pool) reads the class token
    # through the final norm; every patch enters, in order (no random masking)
    "vit_mae": HfFamily("ViT-MAE", TokenChoice(CLS), "ViTImageProcessor", class_token=True, fixed_input_size=True,
                        masks_tokens=True),
    # no class token: I-JEPA's linear probe averages the last layer's patch tokens
    "ijepa": HfFamily("I-JEPA", TokenChoice(AVGPOOL), "ViTImageProcessor", fixed_input_size=True),
    # SigLIP's image embedding is its attention pool's output (no projection after it): what
    # its evaluations (zero-shot, retrieval) compare
    "siglip": HfFamily("SigLIP", TokenChoice(POOLER_OUTPUT), "SiglipImageProcessor", pooler=True,
                       final_norm="post_layernorm", fixed_input_size=True, vision_config="vision_config",
                       tower="SiglipVisionModel"),
    "siglip_vision_model": HfFamily("SigLIP vision tower", TokenChoice(POOLER_OUTPUT), "SiglipImageProcessor",
                                    pooler=True, final_norm="post_layernorm", fixed_input_size=True,
                                    tower="SiglipVisionModel"),
}
# remote code (auto_map): the repo's own classes, whose layout is unknown: their pooled output
REMOTE_CODE = HfFamily("remote code", TokenChoice(POOLER_OUTPUT), "", tokens=False, pooler=True)


@dataclass(frozen=True)
class ProcessorRule:
    """An image processor's defaults (transformers' class attributes) for the keys a saved
    config leaves out; ``crop_pct``: ConvNeXt's resize (the shortest side to S / crop_pct and a
    crop of S below 384, both sides to S from 384)."""

    resample: int
    mean_std: tuple[tuple[float, ...], tuple[float, ...]]
    size: dict[str, int]
    default_to_square: bool
    crop_size: dict[str, int] | None = None
    do_center_crop: bool = False
    crop_pct: float | None = None


SQUARE_224 = {"height": 224, "width": 224}
PROCESSORS: dict[str, ProcessorRule] = {
    "ViTImageProcessor": ProcessorRule(2, IMAGENET_STANDARD, SQUARE_224, True),
    "BitImageProcessor": ProcessorRule(3, OPENAI_CLIP, {"shortest_edge": 224}, False, SQUARE_224, True),
    "CLIPImageProcessor": ProcessorRule(3, OPENAI_CLIP, {"shortest_edge": 224}, False, SQUARE_224, True),
    "SiglipImageProcessor": ProcessorRule(3, IMAGENET_STANDARD, SQUARE_224, False),
    "DINOv3ViTImageProcessor": ProcessorRule(2, IMAGENET_DEFAULT, SQUARE_224, True),
    "ConvNextImageProcessor": ProcessorRule(3, IMAGENET_STANDARD, {"shortest_edge": 384}, False, crop_pct=224 / 256),
}


def processor_class(processor: dict[str, Any], family: HfFamily) -> str:
    """The processor's class as transformers picks it: its config's type (a fast, PIL or
    feature-extractor spelling of it), else the family's."""
    named = processor.get("image_processor_type") or processor.get("feature_extractor_type")
    if not named:
        return family.processor or "a processor of no name"
    named = named.replace("FeatureExtractor", "ImageProcessor")
    return named.removesuffix("Fast").removesuffix("Pil")


def size_dict(size: Any, default_to_square: bool) -> dict[str, int]:
    """A processor's size setting as transformers reads it (an int is a square or a shortest side)."""
    if isinstance(size, dict):
        return {key: int(value) for key, value in size.items() if value is not None}
    if isinstance(size, (list, tuple)) and len(size) == 2:
        return {"height": int(size[0]), "width": int(size[1])}
    return {"height": int(size), "width": int(size)} if default_to_square else {"shortest_edge": int(size)}


def three(values: Any) -> tuple[float, ...]:
    """A processor's mean or std per channel (one value is every channel's, as numpy broadcasts it)."""
    values = [values] if isinstance(values, (int, float)) else list(values)
    return tuple(float(value) for value in (values * 3 if len(values) == 1 else values))


def processor_preprocessing(processor: dict[str, Any] | None, family: HfFamily, title: str) -> dict[str, Any]:
    """The fields of the registry's ``Preprocessing`` that reproduce the release's image
    processor: its resize (shortest side, or both sides: squash), its center crop (placed as
    transformers places it), its interpolation, mean and std. What the extraction cannot do
    (no resize, a non-square output, a pad, another rescale) is refused, naming the setting."""
    if processor is None:
        raise HfModelRefused(f"{title} has no preprocessor_config.json: how its authors preprocess images is "
                             f"unknown. Add the image processor's config (save_pretrained of its image processor).")
    kind = processor_class(processor, family)
    rule = PROCESSORS.get(kind)
    if rule is None:
        raise HfModelRefused(f"{title}'s image processor is {kind}, whose output the extraction does not reproduce; "
                             f"it reproduces {', '.join(PROCESSORS)}.")

    def setting(key: str, default: Any) -> Any:
        return processor[key] if processor.get(key) is not None else default

    def refuse(why: str) -> HfModelRefused:
        return HfModelRefused(f"{title}'s image processor ({kind}) {why}; the extraction feeds square images, "
                              f"resized, center-cropped, scaled to [0, 1] and normalised.")

    if not setting("do_resize", True):
        raise refuse("does not resize (the input size would be each image's own)")
    if setting("do_pad", False):
        raise refuse("pads its images")
    if not setting("do_rescale", True) or not math.isclose(setting("rescale_factor", RESCALE), RESCALE, rel_tol=1e-6):
        raise refuse(f"scales pixels by {setting('rescale_factor', RESCALE) if setting('do_rescale', True) else 1}, "
                     f"not 1/255")
    interpolation = RESAMPLE.get(setting("resample", rule.resample))
    if interpolation is None:
        raise refuse(f"resamples with PIL's filter {setting('resample', rule.resample)}, not bilinear (2) or bicubic (3)")
    mean, std = ((three(setting("image_mean", rule.mean_std[0])), three(setting("image_std", rule.mean_std[1])))
                 if setting("do_normalize", True) else ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)))
    if len(mean) != 3 or len(std) != 3:
        raise refuse(f"normalises {len(mean)} channels, not RGB's 3")
    size = size_dict(setting("size", rule.size), rule.default_to_square)
    crop = size_dict(setting("crop_size", rule.crop_size), True) if setting("do_center_crop", rule.do_center_crop) else None
    resize, crop_mode, side = resize_geometry(size, crop, rule, setting("crop_pct", rule.crop_pct), refuse)
    return {"size": side, "mean": mean, "std": std, "interpolation": interpolation, "mode": "model",
            "resize": resize, "crop_mode": crop_mode, "crop_rounding": "floor"}


def resize_geometry(size: dict[str, int], crop: dict[str, int] | None, rule: ProcessorRule, crop_pct: float | None,
                    refuse: Callable[[str], HfModelRefused]) -> tuple[int, str, int]:
    """(the side resized to, the crop mode: center or squash, the square side fed)."""
    if rule.crop_pct is not None:
        if crop is not None or set(size) != {"shortest_edge"}:
            raise refuse(f"resizes to {size} and crops to {crop}, not ConvNeXt's shortest_edge alone")
        side = size["shortest_edge"]
        return (int(side / crop_pct), "center", side) if side < 384 else (side, "squash", side)
    if set(size) == {"shortest_edge"}:
        resize, crop_mode = size["shortest_edge"], "center"
    elif set(size) == {"height", "width"} and size["height"] == size["width"]:
        resize, crop_mode = size["height"], "squash"
    else:
        raise refuse(f"resizes to {size}, not a shortest side nor a square")
    if crop is None:
        if crop_mode == "center":
            raise refuse(f"resizes the shortest side to {resize} without a crop (a non-square image)")
        return resize, crop_mode, resize
    if crop["height"] != crop["width"] or crop["height"] > resize:
        raise refuse(f"crops {crop['height']} x {crop['width']} of an image resized to {resize}")
    return resize, crop_mode, crop["height"]


@dataclass(frozen=True)
class HfModel:
    """An ``hf/`` model entry resolved: its release, its family (``model_type``), the reading
    ``choice`` (the entry's, else the family's default) and whether its remote code is run."""

    release: HfRelease
    model_type: str
    family: HfFamily
    choice: TokenChoice
    trust_remote_code: bool = False

    @property
    def tower_config(self) -> dict[str, Any]:
        """The config of the network read: the model's, or an image-text model's vision tower's."""
        config = self.release.config
        return (config.get(self.family.vision_config) or {}) if self.family.vision_config else config

    @property
    def depth(self) -> int:
        return int(self.tower_config.get("num_hidden_layers", DEFAULT_DEPTH))

    @property
    def registers(self) -> int:
        return int(self.tower_config.get(self.family.registers, 0)) if self.family.registers else 0

    def preprocessing(self) -> dict[str, Any]:
        """The fields of the registry's ``Preprocessing`` for this release (its image processor)."""
        return processor_preprocessing(self.release.processor_config, self.family, self.release.title)

    def identity(self, digest: Callable, checkpoint: str | None = None) -> str:
        """The weights identity: the release's (repo, commit, weights' sha256; a folder's content)
        and the reading; with a ``checkpoint`` folder, the network's config and the checkpoint's
        weights, their content alone (a copied or moved run, or a new commit of the repo that
        leaves its config alone, is the same model)."""
        code = self.trust_remote_code
        weights = (self.release.identity(digest, code=code) if checkpoint is None else
                   f"hf:config:{self.release.config_digest(digest, code)}+safetensors:{checkpoint_digest(checkpoint, digest)}")
        return f"{weights}+tokens:{self.choice.tokens}/blocks:{self.choice.blocks}"

    def provenance(self) -> dict[str, str | int]:
        """What the shards record besides the arch: the release, its commit, the family, the reading,
        transformers' version."""
        return {"hf_model": self.release.source, "hf_commit": self.release.commit or "", "hf_model_type": self.model_type,
                **self.choice.provenance(), "transformers_version": importlib.metadata.version("transformers")}


def check_entry(source: str, revision: str | None, trust_remote_code: bool | None, owner: str) -> None:
    """What an entry's settings say wrong without its files: remote code needs a pinned commit."""
    if trust_remote_code and not names_folder(source) and not (revision and COMMIT.match(revision)):
        raise HfModelRefused(
            f"{owner}: trust_remote_code runs the Python files of repo {source} on every node that builds it; "
            f"pin the commit you have read: revision: <its 40-hex commit> (a branch or tag can move to other code).")


# Kept: planning resolves every model for each of its jobs' parameters.
@functools.cache
def resolve(source: str, revision: str | None = None, tokens: str | None = None, blocks: int | None = None,
            trust_remote_code: bool = False, owner: str = "", fetch_weights: bool = False,
            release_weights: bool = True) -> HfModel:
    """``source`` (of ``arch: hf/<source>``: a Hub repo ``<org>/<name>`` or a folder) resolved
    and checked: the release at ``revision``, its family, the reading (``tokens``, ``blocks``;
    absent: the family's), its image processor and input size. ``fetch_weights``: the weights
    are downloaded if need be; ``release_weights`` false: the release's weights are not the
    model's (a checkpoint's are), and are neither read nor required."""
    check_entry(source, revision, trust_remote_code, owner)
    release = resolve_release(source, revision, owner, code=trust_remote_code, fetch_weights=fetch_weights,
                              weights=release_weights)
    if release_weights:
        release.weight_files()
    config = release.config
    model_type = str(config.get("model_type", ""))
    remote = config.get("auto_map") or config.get("trust_remote_code")
    if remote and not trust_remote_code:
        asked = ", ".join(remote) if isinstance(remote, dict) else "trust_remote_code"
        pin = "" if release.is_folder else f" and revision: {release.commit} (the commit whose files you read)"
        raise HfModelRefused(
            f"{owner}: {release.title} asks for remote code ({asked}): building it runs its Python files, as loading "
            f"a pickle can. Read them, then set trust_remote_code: true{pin} (docs/models.md, 'Remote code').")
    family = REMOTE_CODE if remote else HF_FAMILIES.get(model_type)
    if family is None:
        raise HfModelRefused(
            f"{owner}: {release.title}'s config.json names model_type '{model_type}', which is not a vision family the "
            f"workflow reads ({', '.join(HF_FAMILIES)}); for another network, write a factory (arch: custom).")
    model = HfModel(release, model_type, family, reading(family, tokens, blocks), bool(trust_remote_code))
    problem = reading_problem(model) or input_size_problem(model)
    if problem:
        raise HfModelRefused(f"{owner}: {problem}")
    return model


def reading(family: HfFamily, tokens: str | None, blocks: int | None) -> TokenChoice:
    """The entry's reading, the family's default where it sets none (blocks: the default's
    with its tokens, else 1)."""
    if tokens is None:
        return TokenChoice(family.default.tokens, family.default.blocks if blocks is None else int(blocks))
    return TokenChoice.of(tokens, blocks)


def reading_problem(model: HfModel) -> str | None:
    """What the family cannot give of the chosen reading, naming what it gives."""
    choice, family, title = model.choice, model.family, model.release.title
    if choice.tokens == PRE_LOGITS:
        return (f"tokens: {PRE_LOGITS} is timm's head; {title} ({family.title}) gives tokens: "
                f"{', '.join(family.readings())} (absent: {family.default.tokens}).")
    problem = choice.problem()
    if problem:
        return problem
    if choice.tokens not in family.readings():
        return (f"{title} ({family.title}) cannot give tokens: {choice.tokens}; it gives "
                f"{', '.join(family.readings())}.")
    if choice.class_tokens and choice.blocks > model.depth:
        return f"{title} has {model.depth} blocks: blocks must be 1 to {model.depth}."
    return None


def input_size_problem(model: HfModel) -> str | None:
    """A fixed-size network fed another size than its config's (transformers' forward refuses it)."""
    side = model.preprocessing()["size"]
    expected = model.tower_config.get("image_size", DEFAULT_IMAGE_SIZE)
    if model.family.fixed_input_size and side != expected:
        return (f"{model.release.title}'s image processor gives {side} x {side} images, and its {model.family.title} "
                f"network takes {expected} x {expected} only (its config's image_size).")
    return None
