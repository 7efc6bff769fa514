"""Any timm network by name: ``arch: timm/<name>`` or ``arch: timm/<name>.<pretrained tag>``.

timm builds well over a thousand networks and describes each pretrained release (a tag)
in its pretrained config: input size, interpolation, mean and std, crop. Nothing here is a
table to maintain: the network, its feature size and its preprocessing all come from timm.

Features are the pooled pre-logits features, ``forward_head(forward_features(x),
pre_logits=True)``: what the model's classifier reads, paper supp. B.1's penultimate layer
(for a CLIP image tower, the pooled features before the image projection). A network with
tokens (a ViT of any timm family) may be read instead as DINOv2's linear evaluation reads it
(the entry's ``tokens`` and ``blocks``, :mod:`imagenet_cog.models.tokens`), through timm's
intermediate-layer API (``forward_intermediates``); a network without tokens (a CNN), or
``blocks`` beyond its depth, is refused.

Preprocessing (the model entry's ``preprocessing``):

* ``paper`` (the default): shortest side resized to S, center crop S x S, the config's mean,
  std and interpolation, S the config's input size. This is what the paper did for all 31
  models (supp. B.1).
* ``model``: timm's own evaluation transform, as timm's validate.py applies it: the
  config's test input size S where it has one, the image resized to S / crop_pct (its
  shortest side, or both sides for the ``squash`` crop mode) and center-cropped to S, so
  that numbers can be set beside the model's published evaluation.

``input_size`` replaces S (e.g. DINOv2 at the paper's 224 instead of its 518); a network
built for one input size (a ViT) is then built for S, and timm resamples the position
embeddings of pretrained weights and checkpoints.

Weights: ``pretrained`` is timm's own download (the Hugging Face hub, kept in its cache);
``random`` or ``random:<seed>`` a seeded initialisation; a checkpoint file (``.pth``,
``.pt``, ``.bin`` or ``.safetensors``) is handed to timm's loader as the model's weights, so
that the model's own checkpoint filter converts the formats timm knows (original releases of
CLIP, DINOv2, ConvNeXt, ...) and resamples position embeddings. The file is first taken as a
whole release (classifier included), else as a backbone (its classifier, if any, is not
part of the features and is dropped); the usual containers and wrapper prefixes of
self-supervised frameworks are unwrapped first. A file that fits neither way is refused,
naming the model and what the file holds.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import re
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import timm
import torch
from timm.data import resolve_data_config
from timm.models import get_pretrained_cfg, split_model_name_tag

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.models.checkpoints import CheckpointMismatch, map_checkpoint_keys, read_checkpoint, unwrap_state_dict
from imagenet_cog.models.tokens import POOLER_OUTPUT, PRE_LOGITS, TokenChoice

PREPROCESSING_MODES = ("paper", "model")
DEFAULT_PREPROCESSING = "paper"
# How many of timm's names an unknown name is answered with, and the difflib ratio above
# which they are a typo's correction rather than guesses.
CLOSE_MATCHES = 6
NEAR = 0.8
# Containers of timm's own training checkpoints that hold the EMA weights, which timm's
# loader (and its training script's best-checkpoint choice) prefer.
EMA_CONTAINERS = ("state_dict_ema", "model_ema")


class PretrainedWeightsUnavailable(ExplainedError, RuntimeError):
    """timm could not fetch a model's pretrained weights (no internet, no cached copy)."""


@dataclass(frozen=True)
class TimmModel:
    """A ``timm/`` model entry resolved against timm's registry.

    ``name`` is the architecture, ``tag`` the pretrained tag whose config (and weights)
    are used: the one written in ``arch``, else timm's default for the architecture ('' when
    it has none). ``input_size`` is the entry's override of S, ``mode`` its preprocessing,
    ``choice`` which of its tokens the features are.
    """

    arch: str
    name: str
    tag: str
    input_size: int | None = None
    mode: str = DEFAULT_PREPROCESSING
    choice: TokenChoice = TokenChoice()

    @property
    def full_name(self) -> str:
        return f"{self.name}.{self.tag}" if self.tag else self.name

    def pretrained_cfg(self) -> dict[str, Any]:
        cfg = get_pretrained_cfg(self.full_name)
        return cfg.to_dict() if cfg is not None else {}

    def data_config(self) -> dict[str, Any]:
        """timm's resolved data config: the test input size and crop for ``model``."""
        cfg = self.pretrained_cfg()
        # An architecture without any pretrained config gets timm's defaults, as in timm.
        return resolve_data_config(args={} if cfg else {"input_size": (3, 224, 224)}, pretrained_cfg=cfg,
                                   use_test_size=self.mode == "model")

    def preprocessing(self) -> dict[str, Any]:
        """The fields of the registry's ``Preprocessing`` (which wraps them) for this release."""
        data = self.data_config()
        _, height, width = data["input_size"]
        if self.input_size is None and height != width:
            raise ValueError(
                f"{self.arch}: timm's config gives a {height} x {width} input; the benchmark's "
                f"center crop is square: set input_size to the side S to use."
            )
        size = self.input_size or height
        interpolation = data["interpolation"]
        if interpolation not in ("bicubic", "bilinear"):
            raise ValueError(f"{self.arch}: timm's config asks for '{interpolation}' interpolation; "
                             f"only bicubic and bilinear are supported.")
        common = {"size": size, "mean": tuple(float(v) for v in data["mean"]),
                  "std": tuple(float(v) for v in data["std"]), "interpolation": interpolation,
                  "mode": self.mode}
        if self.mode == "paper":
            return common
        if data["crop_mode"] not in ("center", "squash"):
            raise ValueError(
                f"{self.arch}: timm evaluates this model with the '{data['crop_mode']}' crop mode "
                f"(resize the longest side and pad), which the extraction does not do; use "
                f"preprocessing: paper."
            )
        return {**common, "resize": math.floor(size / data["crop_pct"]), "crop_mode": data["crop_mode"]}

    def create_options(self) -> dict[str, Any]:
        """Keyword arguments of ``timm.create_model``: a network built for one input size is
        built for the preprocessing's S."""
        cfg = self.pretrained_cfg()
        size = self.preprocessing()["size"]
        if cfg.get("fixed_input_size") and tuple(cfg.get("input_size", ()))[-2:] != (size, size):
            return {"img_size": size}
        return {}

    def create(self, pretrained: bool = False, **options):
        """The full network (classifier included) as timm builds it."""
        return timm.create_model(self.full_name, pretrained=pretrained, **self.create_options(), **options)

    def features(self, network) -> torch.nn.Module:
        """``network`` as the extraction's backbone: its pre-logits or the chosen tokens."""
        return TokenFeatures(network, self.choice) if self.choice.reads_tokens else PreLogits(network)

    @functools.cache
    def feature_dim(self) -> int:
        """The features' width, from a forward pass on the meta device (no weights, no
        compute); networks whose forward needs real values fall back to timm's attribute.
        Kept: planning asks for it at every job of the model."""
        with torch.device("meta"):
            network = self.create()
            size = self.preprocessing()["size"]
            try:
                return int(self.features(network)(torch.empty(1, 3, size, size)).shape[-1])
            except Exception:  # any forward the meta device cannot run
                if self.choice.reads_tokens:
                    return self.choice.width(int(network.num_features))
                return int(getattr(network, "head_hidden_size", None) or network.num_features)

    def provenance(self) -> dict[str, str | int]:
        """What the shards record besides the arch: the timm release, timm's version and the
        tokens read."""
        return {"timm_model": self.full_name, "timm_version": timm.__version__, **self.choice.provenance()}

    def check_tokens(self) -> None:
        """The token choice against the network: refused, naming what the network supports,
        for one without tokens (a CNN), a class token it lacks, or blocks beyond its depth."""
        problem = self.choice.problem()
        if self.choice.tokens == POOLER_OUTPUT:
            problem = (f"tokens: {POOLER_OUTPUT} is the pooled output of transformers models (arch: hf/<repo>); "
                       f"timm's {self.full_name} reads {PRE_LOGITS} (its head) or its tokens.")
        if problem or not self.choice.reads_tokens:
            if problem:
                raise ValueError(problem)
            return
        with torch.device("meta"):
            layout = token_layout(self.create())
        if layout is None:
            raise ValueError(f"timm's {self.full_name} has no tokens (a network without them, such as a CNN): "
                             f"it supports tokens: pre_logits only.")
        has_class_token, depth = layout
        if self.choice.class_tokens and not has_class_token:
            raise ValueError(f"timm's {self.full_name} has no class token: it supports tokens: pre_logits or "
                             f"avgpool.")
        if self.choice.blocks > depth:
            raise ValueError(f"timm's {self.full_name} has {depth} blocks: blocks must be 1 to {depth}.")


# Kept: planning resolves every model for each of its jobs' parameters, each a network or
# two built on the meta device.
@functools.cache
def resolve(arch: str, *, input_size: int | None = None, mode: str | None = None,
            pretrained: bool = False, owner: str = "", choice: TokenChoice = TokenChoice()) -> TimmModel:
    """``arch`` (``timm/<name>`` or ``timm/<name>.<tag>``) checked against timm's registry;
    unknown names fail with timm's closest names; ``choice`` against the network's tokens.

    ``owner`` names the config entry in errors (e.g. "config.yaml: model 'dino'").
    """
    where = f"{owner}: " if owner else ""
    requested = arch.split("/", 1)[1]
    name, tag = split_model_name_tag(requested)
    if not timm.is_model(name):
        candidates = sorted(_released()) if tag else timm.list_models()
        raise ValueError(f"{where}timm knows no model '{requested}'. {closest_names(requested, candidates)}")
    released = _released()
    tags = sorted(split_model_name_tag(full)[1] for full in released if split_model_name_tag(full)[0] == name)
    if tag and tag not in tags:
        known = f"its tags are {', '.join(tags)}" if tags else "it has no pretrained tags"
        raise ValueError(f"{where}timm's '{name}' has no pretrained tag '{tag}'; {known}.")
    if not tag:
        cfg = get_pretrained_cfg(name)
        tag = cfg.tag if cfg is not None and cfg.tag else ""
    model = TimmModel(arch, name, tag, input_size, mode or DEFAULT_PREPROCESSING, choice)
    if model.mode not in PREPROCESSING_MODES:
        raise ValueError(f"{where}preprocessing must be one of {', '.join(PREPROCESSING_MODES)}, not '{model.mode}'.")
    if input_size is not None and input_size < 1:
        raise ValueError(f"{where}input_size must be a positive number of pixels.")
    if pretrained and model.full_name not in released:
        raise ValueError(
            f"{where}timm has no pretrained weights for '{model.full_name}'; "
            f"{'pick one of its tags: ' + ', '.join(tags) if tags else 'set weights to a checkpoint file or random'}."
        )
    try:
        model.preprocessing()
        model.check_tokens()
    except ValueError as error:
        raise ValueError(f"{where}{error}") from None
    if model.create_options():
        # A network built for another input size may not take this one (window sizes, strides).
        try:
            with torch.device("meta"):
                model.create()
        except Exception as error:  # whatever the network's constructor objects to
            raise ValueError(f"{where}timm cannot build {model.full_name} for input_size {input_size}: "
                             f"{type(error).__name__}: {error}") from None
    return model


@functools.cache
def _released() -> frozenset[str]:
    """Every ``<name>.<tag>`` timm has pretrained weights for."""
    return frozenset(timm.list_models(pretrained=True))


def closest_names(name: str, candidates: list[str], library: str = "timm") -> str:
    """A library's names nearest to ``name`` as text (difflib); where none is near, the names
    sharing its rarest word (e.g. 'dinov2' in 'dinov2_vits14': vit_small_patch14_dinov2, ...).
    ``library`` names the library in the text (timm, open_clip)."""
    similar = difflib.get_close_matches(name, candidates, n=CLOSE_MATCHES, cutoff=0.5)
    if similar and difflib.SequenceMatcher(None, name, similar[0]).ratio() >= NEAR:
        return f"The closest names {library} knows: {', '.join(similar)}."
    sharing = {word: [c for c in candidates if word in c]
               for word in re.split(r"[_.\-]", name) if len(word) >= 3 and not word.isdigit()}
    sharing = {word: names for word, names in sharing.items() if names}
    if sharing:
        word = min(sharing, key=lambda w: len(sharing[w]))
        ranked = sorted(sharing[word], key=lambda c: -difflib.SequenceMatcher(None, name, c).ratio())
        more = f" (+{len(ranked) - CLOSE_MATCHES} more)" if len(ranked) > CLOSE_MATCHES else ""
        return f"{library}'s names with '{word}': {', '.join(ranked[:CLOSE_MATCHES])}{more}."
    if similar:
        return f"The closest names {library} knows: {', '.join(similar)}."
    return f"See {library}.list_models() for the names it knows."


def pre_logits(network, images):
    """The pooled pre-logits features of a timm network: what its classifier reads."""
    return network.forward_head(network.forward_features(images), pre_logits=True)


class PreLogits(torch.nn.Module):
    """A timm network whose forward returns :func:`pre_logits`: the extraction's backbone."""

    def __init__(self, network):
        super().__init__()
        self.network = network

    def forward(self, images):
        return pre_logits(self.network, images)


def token_layout(network) -> tuple[bool, int] | None:
    """(whether it has a class token, its number of blocks) of a timm network whose
    intermediate-layer API gives its prefix (class, register) tokens apart; None for one
    without tokens."""
    forward = getattr(network, "forward_intermediates", None)
    if forward is None or "return_prefix_tokens" not in inspect.signature(forward).parameters:
        return None
    if not hasattr(network, "blocks") or not hasattr(network, "num_prefix_tokens"):
        return None
    has_class_token = getattr(network, "has_class_token", getattr(network, "cls_token", None) is not None)
    return bool(has_class_token), len(network.blocks)


def pooled_norm(network) -> torch.nn.Module:
    """The norm a network applies to its pooled features (``fc_norm``, in place of the final
    ``norm`` of every token in models that pool first, EVA-02's, BEiT's); else none."""
    norm = getattr(network, "fc_norm", None)
    return norm if isinstance(norm, torch.nn.Module) and not isinstance(norm, torch.nn.Identity) else torch.nn.Identity()


class TokenFeatures(torch.nn.Module):
    """A timm network with tokens whose forward returns DINOv2's linear-evaluation input: the
    class tokens of the last ``blocks`` blocks, then the mean of the last block's patch tokens,
    as ``choice`` asks. Each token passes the final norm (timm's ``norm=True``), or, in models
    that normalise after pooling, the class token and the mean pass that norm; the prefix
    tokens come apart from the patch tokens, so register tokens never enter."""

    def __init__(self, network, choice: TokenChoice):
        super().__init__()
        self.choice = choice
        self.pooled_norm = pooled_norm(network)
        # the classifier (and blocks after the last one read, none here) is let go
        network.prune_intermediate_layers(indices=choice.blocks, prune_norm=False, prune_head=True)
        self.network = network

    def forward(self, images):
        outputs = self.network.forward_intermediates(
            images, indices=self.choice.blocks, return_prefix_tokens=True, norm=True, output_fmt="NLC",
            intermediates_only=True)
        parts = []
        if self.choice.class_tokens:
            # timm puts the class token first among the prefix tokens, registers after it
            parts += [self.pooled_norm(prefix[:, 0]) for _, prefix in outputs]
        if self.choice.patch_mean:
            # a model without prefix tokens gives its patch tokens alone
            patches = outputs[-1][0] if isinstance(outputs[-1], tuple) else outputs[-1]
            parts.append(self.pooled_norm(patches.mean(dim=1)))
        return torch.cat(parts, dim=-1)


def build(model: TimmModel, weights: str | None, owner: str,
          trusted_globals: Sequence[str] = ()) -> tuple[torch.nn.Module, list[str]]:
    """The network of ``model`` with ``weights`` ('pretrained', a checkpoint path, or None for
    timm's random initialisation: the caller seeds torch), in eval mode, and lines for the log."""
    notes: list[str] = []
    if weights == "pretrained":
        try:
            network = model.create(pretrained=True)
        except OSError as error:
            raise PretrainedWeightsUnavailable(_offline_advice(model, owner, error)) from error
        notes.append(f"timm {timm.__version__}: pretrained weights of {model.full_name}")
    elif weights is None:
        network = model.create()
    else:
        network, note = build_from_checkpoint(model, weights, owner, trusted_globals)
        notes.append(note)
    # timm keeps a state dict given through the pretrained config: it would be held twice.
    network.pretrained_cfg.pop("state_dict", None)
    if model.choice.reads_tokens:
        notes.append(f"features: tokens {model.choice.tokens} of the last {model.choice.blocks} block(s)")
    return model.features(network.eval()).eval(), notes


def _offline_advice(model: TimmModel, owner: str, error: Exception) -> str:
    cfg = model.pretrained_cfg()
    hub = cfg.get("hf_hub_id")
    source = f"the Hugging Face hub (https://huggingface.co/{hub})" if hub else (cfg.get("url") or "its source")
    fetch = f"python -c \"import timm; timm.create_model('{model.full_name}', pretrained=True)\""
    download = f"model.safetensors of https://huggingface.co/{hub}" if hub else f"the file at {source}"
    return (
        f"{owner}: weights 'pretrained' of timm/{model.full_name} could not be fetched from {source} "
        f"({type(error).__name__}: {error}). timm downloads them on first use into its cache "
        f"(HF_HOME, by default ~/.cache/huggingface), which this machine cannot reach or fill. "
        f"Either run {fetch} once where there is internet with the same HF_HOME as this node, or "
        f"download {download} and set the model's weights to that file's path."
    )


# Checkpoints --------------------------------------------------------------------------


def checkpoint_state(payload: Any, path: str) -> tuple[dict[str, Any], str]:
    """The state dict a checkpoint holds and where in the file it was found."""
    if isinstance(payload, dict):
        for container in EMA_CONTAINERS:
            if isinstance(payload.get(container), dict) and payload[container]:
                return dict(payload[container]), f"'{container}' (the EMA weights)"
        tensors = {key: value for key, value in payload.items() if isinstance(value, torch.Tensor)}
        if len(tensors) == len(payload):
            return tensors, "the top level"
    return dict(unwrap_state_dict(payload, path)), "its state dict"


def describe_checkpoint(payload: Any, state: dict[str, Any]) -> str:
    """What a checkpoint holds, for errors: the architecture it names, its size, its keys."""
    arch = payload.get("arch") if isinstance(payload, dict) else None
    values = sum(value.numel() for value in state.values() if isinstance(value, torch.Tensor))
    keys = list(state)
    shown = ", ".join(keys[:6]) + (", ..." if len(keys) > 6 else "")
    named = f"a checkpoint of '{arch}' (its 'arch' entry): " if isinstance(arch, str) and arch else ""
    return f"{named}{len(keys)} tensors of {values / 1e6:.2f} M values ({shown})"


def _classifier_names(cfg: dict[str, Any]) -> tuple[str, ...]:
    names = cfg.get("classifier") or ()
    return (names,) if isinstance(names, str) else tuple(names)


def _without_classifier(state: dict[str, Any], classifiers: tuple[str, ...]) -> dict[str, Any]:
    """``state`` without the keys of the modules at the classifier's place (a classifier for
    other classes, or a pretraining head in its place)."""
    prefixes = tuple(f"{name}." for name in classifiers)
    return {key: value for key, value in state.items() if not (prefixes and key.startswith(prefixes))}


def _create_with_state(model: TimmModel, state: dict[str, Any], without_classifier: bool):
    """The network built by timm's loader from ``state`` (strict: every key must fit), with
    the model's checkpoint filter applied; ``without_classifier`` builds it with none."""
    classes = {"num_classes": 0} if without_classifier else {}
    return model.create(pretrained=True, pretrained_cfg_overlay={"state_dict": state, "source": None, **classes},
                        **classes)


def _complaint(model: TimmModel, state: dict[str, Any], without_classifier: bool) -> str | None:
    """None when timm's loader takes ``state``, else its complaint; tried on the meta device,
    where no weights are made or copied."""
    try:
        with torch.device("meta"), warnings.catch_warnings():
            # copying a tensor into a meta parameter does nothing, which torch warns about
            warnings.simplefilter("ignore", UserWarning)
            _create_with_state(model, state, without_classifier)
    except Exception as error:  # a model's checkpoint filter may fail in its own way on a foreign file
        return f"{type(error).__name__}: {error}"
    return None


def build_from_checkpoint(model: TimmModel, path: str, owner: str, trusted_globals: Sequence[str] = ()):
    """The network of ``model`` with the weights of the checkpoint ``path``, and a log line."""
    payload, loaded_as = read_checkpoint(path, trusted_globals)
    state, found_in = checkpoint_state(payload, path)
    with torch.device("meta"):
        expected = model.create().state_dict()
    _, prefix, _ = map_checkpoint_keys(state, set(expected))
    if prefix:
        state = {key[len(prefix):]: value for key, value in state.items() if key.startswith(prefix)}
    classifiers = _classifier_names(model.pretrained_cfg())
    backbone = _without_classifier(state, classifiers)
    # A whole release first: a model's checkpoint filter may convert its classifier's keys.
    ways = (("as a whole release", state, False), ("as a backbone without classifier", backbone, True))
    complaints = []
    for description, candidate, without_classifier in ways:
        complaint = _complaint(model, candidate, without_classifier)
        if complaint is None:
            network = _create_with_state(model, candidate, without_classifier)
            dropped = len(state) - len(candidate)
            return network, (
                f"checkpoint {path}: {len(candidate)} tensors from {found_in}"
                f"{f' under the prefix {prefix!r}' if prefix else ''} loaded {description} of "
                f"timm/{model.full_name} by timm's loader"
                f"{f', dropping the {dropped} tensors at its classifier' if dropped else ''}; read with {loaded_as}"
            )
        complaints.append(complaint)
    backbone_keys = set(_without_classifier(dict.fromkeys(expected), classifiers))
    problems = [
        _listing("backbone keys missing", sorted(backbone_keys - set(backbone))),
        _listing("unexpected keys", sorted(set(backbone) - backbone_keys)),
        _listing("keys of other shapes", sorted(key for key in backbone_keys & set(backbone)
                                           if tuple(backbone[key].shape) != tuple(expected[key].shape))),
    ]
    # Keys that all fit can still fail in the model's checkpoint filter: then timm says why.
    details = " ".join(problem for problem in problems if problem) or f"timm's loader says: {complaints[-1][:600]}."
    raise CheckpointMismatch(
        f"{owner}: checkpoint {path} does not hold weights of timm/{model.full_name}: it holds "
        f"{describe_checkpoint(payload, state)}, and the model's backbone has {len(backbone_keys)} "
        f"tensors ({', '.join(list(expected)[:4])}, ...). {details} Check the model's arch (and "
        f"input_size), or convert the file to that model's state dict."
    )


def _listing(what: str, keys: list[str]) -> str:
    if not keys:
        return ""
    return f"{len(keys)} {what} ({', '.join(keys[:5])}{', ...' if len(keys) > 5 else ''})."
