"""Hugging Face ``transformers`` models (``arch: hf/<org>/<name>``, ``hf/<folder>``) built:
on the meta device for their features' width (planning), and with their safetensors weights,
in eval mode, for extraction. What a release is and how it is read is decided in
:mod:`imagenet_cog.models.hf_catalogue`; here the network is transformers' own (``AutoModel``,
or an image-text model's vision tower class), loaded by ``from_pretrained`` from the release's
folder (a Hub repo's snapshot in the Hugging Face cache), and read from its outputs:

* ``cls``: the last block's class token of ``last_hidden_state`` (which the model's final norm
  made), and with ``blocks`` > 1 the class tokens of the blocks before it, each through that
  norm (caught by forward hooks on the blocks), earliest first: DINOv2's linear input;
* ``avgpool``: the mean of ``last_hidden_state``'s patch tokens, past the class and register
  tokens;
* ``pooler_output``: the model's own.

ViTMAE's random masking (``mask_ratio`` 0.75, a new draw each forward) is switched off: its
config's ``mask_ratio`` is 0 and its ``noise`` keeps the patches in order, so every patch enters
and two extractions of the same images are equal.
"""

from __future__ import annotations

import functools
import re

import torch
import transformers
from transformers import AutoConfig, AutoModel

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.models.checkpoints import key_listing
from imagenet_cog.models.hf_catalogue import HfModel
from imagenet_cog.models.hf_release import checkpoint_weight_files
from imagenet_cog.models.tokens import POOLER_OUTPUT


class HfWeightsMismatch(ExplainedError, ValueError):
    """A release whose weights leave tensors of its network unset (they would be random)."""


def network_class(model: HfModel):
    """transformers' class of the network read: ``AutoModel``, or the vision tower's."""
    return getattr(transformers, model.family.tower) if model.family.tower else AutoModel


def network_config(model: HfModel):
    """The release's config (an image-text model's: its vision tower's), random masking off."""
    config = AutoConfig.from_pretrained(model.release.folder, trust_remote_code=model.trust_remote_code)
    if model.family.vision_config:
        config = getattr(config, model.family.vision_config)
    if model.family.masks_tokens:
        config.mask_ratio = 0.0
    return config


def init_options(model: HfModel) -> dict:
    """The network's own options: ViTModel's pooler only where it is read (a release without
    its weights would leave it random)."""
    return {"add_pooling_layer": model.choice.tokens == POOLER_OUTPUT} if model.family.pooling_layer else {}


def create(model: HfModel):
    """The network with transformers' initialisation (the caller chooses the device)."""
    config, options = network_config(model), init_options(model)
    if model.family.tower:
        return network_class(model)._from_config(config, dtype=torch.float32, **options)
    return AutoModel.from_config(config, trust_remote_code=model.trust_remote_code, dtype=torch.float32, **options)


@functools.cache
def feature_dim(model: HfModel) -> int:
    """The features' width, from a forward pass on the meta device (no weights, no compute);
    a network whose forward needs real values falls back to its config's width."""
    with torch.device("meta"):
        network = create(model)
        size = model.preprocessing()["size"]
        try:
            return int(HfFeatures(network, model)(torch.empty(1, 3, size, size)).shape[-1])
        except Exception:  # any forward the meta device cannot run
            return model.choice.width(int(network.config.hidden_size))


def block_list(network, depth: int) -> torch.nn.ModuleList:
    """The network's blocks: its list of ``depth`` modules (transformers names it per family)."""
    for module in network.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == depth:
            return module
    raise ValueError(f"{type(network).__name__} has no list of its {depth} blocks")


class HfFeatures(torch.nn.Module):
    """A transformers network whose forward returns the chosen reading of ``model``: the
    extraction's backbone."""

    def __init__(self, network, model: HfModel):
        super().__init__()
        self.network = network
        self.choice = model.choice
        self.first_patch = int(model.family.class_token) + model.registers
        self.masks_tokens = model.family.masks_tokens
        self.earlier: list[torch.Tensor] = []
        self.norm = torch.nn.Identity()
        if self.choice.class_tokens and self.choice.blocks > 1:
            self.norm = getattr(network, model.family.final_norm)
            for block in block_list(network, model.depth)[-self.choice.blocks:-1]:
                block.register_forward_hook(self.keep)

    def keep(self, _module, _inputs, output) -> None:
        self.earlier.append(output[0] if isinstance(output, tuple) else output)

    def noise(self, images: torch.Tensor) -> torch.Tensor:
        """ViTMAE's per-patch noise in increasing order: its shuffle keeps the patches in place."""
        patch = self.network.config.patch_size
        count = (images.shape[-2] // patch) * (images.shape[-1] // patch)
        return torch.arange(count, device=images.device, dtype=torch.float32).expand(images.shape[0], -1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        self.earlier = []
        extra = {"noise": self.noise(images)} if self.masks_tokens else {}
        outputs = self.network(pixel_values=images, **extra)
        if self.choice.tokens == POOLER_OUTPUT:
            if outputs.pooler_output is None:
                raise ValueError(f"{type(self.network).__name__} gives no pooler_output (its config leaves its head out)")
            return outputs.pooler_output
        tokens = outputs.last_hidden_state
        parts = []
        if self.choice.class_tokens:
            parts += [self.norm(hidden[:, 0]) for hidden in self.earlier] + [tokens[:, 0]]
        if self.choice.patch_mean:
            parts.append(tokens[:, self.first_patch:].mean(dim=1))
        return torch.cat(parts, dim=-1)


def build(model: HfModel, owner: str, checkpoint: str | None = None) -> tuple[HfFeatures, list[str]]:
    """The network of ``model`` with its release's safetensors weights (or a ``checkpoint``
    folder's, a Trainer's checkpoint-<step>), read as chosen, in eval mode, and lines for the
    log; weights that leave a tensor of the network unset, or give it another shape, are refused."""
    release = model.release
    # transformers maps the folder's keys (a task model's prefix, its renamings) as for any release
    network, loading = network_class(model).from_pretrained(
        checkpoint or release.folder, config=network_config(model), dtype=torch.float32, use_safetensors=True,
        output_loading_info=True, trust_remote_code=model.trust_remote_code, local_files_only=True,
        ignore_mismatched_sizes=True, **init_options(model))
    unset = sorted(loading.get("missing_keys", ())) + sorted(map(other_shape, loading.get("mismatched_keys", ())))
    if unset:
        weights = f"checkpoint {checkpoint} leaves" if checkpoint else f"the weights of {release.title} leave"
        raise HfWeightsMismatch(
            f"{owner}: {weights} {len(unset)} tensors of its {type(network).__name__} "
            f"unset ({', '.join(unset[:5])}{', ...' if len(unset) > 5 else ''}): the features would read random "
            f"weights. Check the arch's repo or folder, and the tokens read (a pooler the release lacks).")
    where = f" at commit {release.commit}" if release.commit else ""
    files = checkpoint_weight_files(checkpoint) if checkpoint else release.weight_files()
    notes = [f"transformers {transformers.__version__}: {type(network).__name__} of {release.title}{where} "
             f"({model.family.title}), safetensors {', '.join(map(str, files))}",
             f"features: tokens {model.choice.tokens}" + (f" of the last {model.choice.blocks} block(s)"
                                                           if model.choice.reads_tokens else "")]
    return HfFeatures(network.eval(), model).eval(), notes


def other_shape(mismatched) -> str:
    """A tensor of loading_info's mismatched_keys: (key, the file's shape, the network's)."""
    if isinstance(mismatched, str):
        return mismatched
    key, shape, own = mismatched
    return f"{key} {tuple(shape)} in the file, {tuple(own)} in the network"


def checkpoint_misfit(model: HfModel, checkpoint: str) -> str | None:
    """What of a checkpoint folder's weights does not fit ``model``'s network (to follow
    "checkpoint <folder> "), None when :func:`build` loads them: the files' keys renamed as
    ``from_pretrained`` renames them (the model's conversion mapping, its base-model prefix added or
    taken off), against the network built on the meta device, shapes from the files' headers alone.
    Keys the network lacks (a task head, a decoder) are left, as transformers leaves them."""
    from safetensors import safe_open
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key

    with torch.device("meta"):
        network = create(model)
    expected = network.state_dict()
    mapping = get_model_conversion_mapping(network)
    renamings = [entry for entry in mapping if isinstance(entry, WeightRenaming)]
    converters = [entry for entry in mapping if isinstance(entry, WeightConverter)]
    prefix = network.base_model_prefix
    found, other_shapes = set(), []
    for path in checkpoint_weight_files(checkpoint):
        with safe_open(path, framework="pt") as header:
            for key in header.keys():
                renamed, converted = rename_source_key(key, renamings, converters, prefix, expected)
                if renamed not in expected and key in expected:
                    renamed, converted = rename_source_key(key, [], [], prefix, expected)
                if renamed not in expected:
                    continue
                found.add(renamed)
                shape, own = tuple(header.get_slice(key).get_shape()), tuple(expected[renamed].shape)
                # a converter's tensors are reshaped by its operations: their keys alone are compared
                if converted is None and shape != own:
                    other_shapes.append(f"{key} {shape} in the file, {own} in the network")
    ignored = [re.compile(pattern) for pattern in network._keys_to_ignore_on_load_missing or ()]
    missing = sorted(key for key in set(expected) - found if not any(pattern.search(key) for pattern in ignored))
    problems = ([f"{len(missing)} of {len(expected)} tensors of the network not in the file: {key_listing(missing)}"]
                if missing else [])
    problems += [f"{len(other_shapes)} tensors of other shapes: {key_listing(other_shapes, shown=3)}"] if other_shapes else []
    return f"does not fit a {type(network).__name__} ({'; '.join(problems)})" if problems else None

