"""Checkpoints: the published layouts of paper Table 1's releases, and a generic fallback.

:func:`load_checkpoint` loads a checkpoint file into a registry network (already cut at its
penultimate layer): it tries every layout of :data:`CHECKPOINT_LAYOUTS` (a release's
container, key prefix, heads and momentum encoders) and takes the first that accounts for
every key with the backbone complete; a file none of them fits goes through a search of
the usual containers and prefixes, and keys that do not fit are named.

``torch`` is imported inside functions, as in :mod:`imagenet_cog.models.registry`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# The generic fallback for checkpoints no layout of CHECKPOINT_LAYOUTS describes: key
# prefixes that commonly wrap a backbone (DataParallel, query encoders, encoders, ...).
CHECKPOINT_PREFIXES = (
    "module.", "encoder_q.", "encoder.", "backbone.", "online_network.encoder.",
    "online_network.", "net.", "model.", "feature_extractor.", "base_encoder.", "trunk.",
)
# Containers a checkpoint's state dict is commonly nested in.
CHECKPOINT_CONTAINERS = ("state_dict", "model", "network", "model_state", "state", "teacher")
# Projection heads, prototypes and classifiers of pretraining: never part of the backbone.
HEAD_PREFIXES = ("fc.", "head.", "heads.", "projection_head.", "projector.", "prototypes.",
                 "predictor.", "classifier.", "AuxLogits.", "queue", "mlp.")


class CheckpointMismatch(ValueError):
    """A checkpoint's keys do not fit the network of its registry entry."""


@dataclass(frozen=True)
class CheckpointLayout:
    """How one published release stores its backbone.

    ``container``: the key the state dict is nested under ("" for a bare state dict);
    ``prefix``: the prefix of the backbone's keys; ``heads``: prefixes (after ``prefix``) of
    pretraining heads and classifiers, dropped; ``others``: prefixes of whole keys that belong
    to other networks or buffers (momentum encoders, queues, attackers), dropped;
    ``with_heads``: whether the release always has (True) or never has (False) a head key,
    which tells apart releases with otherwise equal layouts; ``rename``: a function from
    a converted key to the torchvision key (TensorFlow releases).
    """

    name: str
    container: str = ""
    prefix: str = ""
    heads: tuple[str, ...] = ("fc.",)
    others: tuple[str, ...] = ()
    with_heads: bool | None = None
    rename: Callable[[str], str | None] | None = None


def simclr_v2_torchvision_key(key: str) -> str | None:
    """A key of SimCLR-v2's PyTorch conversion (github Separius/SimCLRv2-Pytorch, ``r50_1x_sk0``)
    as the torchvision ResNet50 key; None for keys of no backbone.

    The conversion nests the stem as ``net.0`` (conv ``0``, batch norm ``1.0``), stage ``s`` as
    ``net.<s>.blocks.<b>`` with ``net.{0,2,4}`` convolutions, ``net.{1,3,5}.0`` batch norms and
    ``projection.{shortcut,bn.0}`` the downsampling; strides sit on the 3x3 convolution and
    padding is symmetric, as in torchvision.
    """
    parts = key.split(".")
    if parts[0] == "fc":
        return key
    if parts[:2] == ["net", "0"]:
        layer = {"0": "conv1", "1": "bn1"}.get(parts[2])
        if layer is None:
            return None
        return ".".join([layer] + parts[4 if layer == "bn1" else 3:])
    if parts[0] != "net" or len(parts) < 6 or parts[2] != "blocks":
        return None
    block = f"layer{parts[1]}.{parts[3]}"
    if parts[4] == "projection":
        layer = {"shortcut": "downsample.0", "bn": "downsample.1"}.get(parts[5])
        rest = parts[7:] if parts[5] == "bn" else parts[6:]
    elif parts[4] == "net":
        layer = {"0": "conv1", "1": "bn1", "2": "conv2", "3": "bn2", "4": "conv3", "5": "bn3"}.get(parts[5])
        rest = parts[7:] if layer and layer.startswith("bn") else parts[6:]
    else:
        return None
    return ".".join([block, layer] + rest) if layer else None


# The checkpoint layouts of paper Table 1's releases (the files the authors' prepare_models/
# scripts fetch, github naver/cog), tried in this order; the first that accounts for every
# key with the backbone complete is used, and its name goes to the log. Checkpoints none of
# them fits go through the generic prefix search below.
CHECKPOINT_LAYOUTS: tuple[CheckpointLayout, ...] = (
    CheckpointLayout("MoCo-v2 / MoChi (state_dict, module.encoder_q., momentum encoder and queue)",
                     "state_dict", "module.encoder_q.", others=("module.encoder_k.", "module.queue")),
    CheckpointLayout("MoPro (state_dict, module.encoder_q. with classifier, momentum encoder, queue and prototypes)",
                     "state_dict", "module.encoder_q.", heads=("classifier.", "fc"),
                     others=("module.encoder_k.", "module.queue", "module.prototypes"), with_heads=True),
    CheckpointLayout("InfoMin (model, module.encoder., heads module.head*)",
                     "model", "module.encoder.", others=("module.head", "module.linear", "module.jig")),
    CheckpointLayout("Adv-Robust (model, module.model., attacker copy and normaliser)",
                     "model", "module.model.", others=("module.attacker.", "module.normalizer.")),
    CheckpointLayout("CompReSS (model, module., 8192-d fc)", "model", "module."),
    CheckpointLayout("OBoW (network, torchvision keys, 8192-to-2048 fc)", "network"),
    CheckpointLayout("SimCLR-v2 converted (resnet, github Separius/SimCLRv2-Pytorch)", "resnet",
                     rename=simclr_v2_torchvision_key),
    CheckpointLayout("T2T-ViT (state_dict_ema, the EMA weights)", "state_dict_ema", heads=("head.",)),
    CheckpointLayout("CutMix / MixUp / Manifold-MixUp (state_dict, module., classifier)",
                     "state_dict", "module."),
    CheckpointLayout("SwAV (module., projection head and prototypes)", "", "module.",
                     heads=("projection_head.", "prototypes."), with_heads=True),
    CheckpointLayout("MEAL-v2 / DataParallel classifier (module., classifier)", "", "module.",
                     with_heads=True),
    CheckpointLayout("DINO / BarlowTwins (bare backbone, no classifier)", with_heads=False),
    CheckpointLayout("NAT-M4 (bare state dict, classifier.linear)", heads=("classifier.",), with_heads=True),
    CheckpointLayout("ReLabel / BYOL converted / torchvision (bare state dict with classifier)",
                     with_heads=True),
)


def _ignorable(key: str) -> bool:
    """Keys whose absence does not change eval-mode features: BatchNorm's step counter
    (older checkpoints predate it) and Inception-v3's auxiliary classifier."""
    return key.endswith("num_batches_tracked") or key.startswith("AuxLogits.")


def match_layout(payload: Any, layout: CheckpointLayout, expected: set[str]) -> dict[str, Any] | None:
    """The backbone's tensors if ``payload`` has exactly ``layout``, else None."""
    import torch

    state = payload.get(layout.container) if layout.container else payload
    if not isinstance(state, dict) or not state:
        return None
    if not all(isinstance(value, torch.Tensor) for value in state.values()):
        return None
    mapped: dict[str, Any] = {}
    head_keys = 0
    for key, value in state.items():
        if key.startswith(layout.others) and layout.others:
            continue
        if not key.startswith(layout.prefix):
            return None
        rest = key[len(layout.prefix):]
        if layout.rename is not None:
            rest = layout.rename(rest)
            if rest is None:
                return None
        if rest in expected:
            mapped[rest] = value
        elif rest.startswith(layout.heads):
            head_keys += 1
        else:
            return None
    if layout.with_heads is not None and layout.with_heads != (head_keys > 0):
        return None
    if any(key not in mapped for key in expected if not _ignorable(key)):
        return None
    return mapped


def unwrap_state_dict(payload: Any, checkpoint: str) -> dict[str, Any]:
    import torch

    while isinstance(payload, dict):
        tensors = {k: v for k, v in payload.items() if isinstance(v, torch.Tensor)}
        if tensors and len(tensors) >= len(payload) // 2:
            return tensors
        inner = next((payload[k] for k in CHECKPOINT_CONTAINERS if isinstance(payload.get(k), dict)), None)
        if inner is None:
            break
        payload = inner
    if hasattr(payload, "state_dict"):
        return payload.state_dict()
    raise CheckpointMismatch(
        f"checkpoint {checkpoint}: no state dict found (looked for tensors at the top level "
        f"and under {', '.join(CHECKPOINT_CONTAINERS)}); save the backbone's state_dict()."
    )


def _strip(key: str, prefix: str) -> str | None:
    return key[len(prefix):] if key.startswith(prefix) else None


def map_checkpoint_keys(state: dict[str, Any], expected: set[str]) -> tuple[dict[str, Any], str, list[str]]:
    """Find the key prefix under which ``state`` holds the backbone ``expected`` describes.

    Returns the backbone's entries with the prefix removed and heads dropped, the prefix,
    and the keys under the prefix that belong neither to the backbone nor to a known head.
    """
    prefixes = {""}
    for key in state:
        remainder, prefix = key, ""
        while True:
            step = next((p for p in CHECKPOINT_PREFIXES if remainder.startswith(p)), None)
            if step is None:
                break
            prefix += step
            remainder = remainder[len(step):]
            prefixes.add(prefix)

    def matches(prefix: str) -> int:
        return sum(1 for key in state if (rest := _strip(key, prefix)) is not None and rest in expected)

    best = max(sorted(prefixes), key=matches)
    mapped, unexpected = {}, []
    for key, value in state.items():
        rest = _strip(key, best)
        if rest is None:
            continue
        if rest in expected:
            mapped[rest] = value
        elif not rest.startswith(HEAD_PREFIXES):
            unexpected.append(key)
    return mapped, best, unexpected


def read_checkpoint(checkpoint: str) -> tuple[Any, str]:
    """A checkpoint file's content and how it was read: safetensors, or torch with tensors
    only, else with full unpickling."""
    import torch

    if str(checkpoint).endswith(".safetensors"):
        from safetensors.torch import load_file

        return load_file(checkpoint), "safetensors"
    try:
        return torch.load(checkpoint, map_location="cpu", weights_only=True), "tensors only"
    except Exception:
        # Some published checkpoints pickle their training options (e.g. InfoMin's argparse
        # Namespace); those need full unpickling, which runs code from the file.
        return (torch.load(checkpoint, map_location="cpu", weights_only=False),
                "full unpickling (the file holds Python objects besides tensors)")


def load_checkpoint(network, checkpoint: str) -> str:
    """Load a checkpoint file into ``network`` (already cut); returns a line for the log."""
    payload, loaded_as = read_checkpoint(checkpoint)
    own = network.state_dict()
    expected = set(own)
    if isinstance(payload, dict):
        for layout in CHECKPOINT_LAYOUTS:
            mapped = match_layout(payload, layout, expected)
            if mapped is not None and all(tuple(v.shape) == tuple(own[k].shape) for k, v in mapped.items()):
                network.load_state_dict(mapped, strict=False)
                return (f"checkpoint {checkpoint}: format {layout.name}; loaded {len(mapped)} "
                        f"tensors, 0 backbone keys missing or unexpected; read with {loaded_as}")
    state = unwrap_state_dict(payload, checkpoint)
    mapped, prefix, unexpected = map_checkpoint_keys(state, expected)
    missing = sorted(k for k in expected - set(mapped) if not _ignorable(k))
    wrong_shape = sorted(k for k, v in mapped.items() if tuple(v.shape) != tuple(own[k].shape))
    if missing or unexpected or wrong_shape:
        def listing(keys: list[str]) -> str:
            return ", ".join(keys[:8]) + (f" (+{len(keys) - 8} more)" if len(keys) > 8 else "")

        problems = []
        if missing:
            problems.append(f"{len(missing)} backbone keys missing: {listing(missing)}")
        if unexpected:
            problems.append(f"{len(unexpected)} unexpected keys: {listing(unexpected)}")
        if wrong_shape:
            problems.append(f"{len(wrong_shape)} keys with other shapes: {listing(wrong_shape)}")
        raise CheckpointMismatch(
            f"checkpoint {checkpoint} does not fit a {type(network).__name__} backbone "
            f"(best key prefix '{prefix}'): " + "; ".join(problems) + ". Check the model's "
            "'arch' in config.yaml, or convert the checkpoint to a state dict of that network."
        )
    network.load_state_dict(mapped, strict=False)
    ignored = len(state) - len(mapped)
    return (f"checkpoint {checkpoint}: format not among the known releases, generic prefix "
            f"search; loaded {len(mapped)} tensors under prefix '{prefix}', ignored {ignored} "
            f"(heads and other networks); read with {loaded_as}")

