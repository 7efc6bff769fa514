"""Checkpoints: the published layouts of paper Table 1's releases, and a generic fallback.

:func:`load_checkpoint` loads a checkpoint file into a registry network (already cut at its
penultimate layer): it tries every layout of :data:`CHECKPOINT_LAYOUTS` (a release's
container, key prefix, heads and momentum encoders) and takes the first that accounts for
every key with the backbone complete; a file none of them fits goes through a search of
the usual containers and prefixes, and keys that do not fit are named.

Reading a file (:func:`read_checkpoint`) builds only what torch's ``weights_only=True`` builds
(tensors, containers, numbers, strings), or reads safetensors, plus the objects a model lists
in ``trusted_globals``: a checkpoint is a pickle, and anything else it names could run code.
A file holding more is refused (:class:`UnsafeCheckpoint`) naming those objects and the ways
on: that setting, or ``convert-checkpoint``, which rewrites it tensors-only once, knowingly.

``torch`` is imported inside functions, as in :mod:`imagenet_cog.models.registry`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pickle
import pickletools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.io import atomic_output

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


class CheckpointMismatch(ExplainedError, ValueError):
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


class UnsafeCheckpoint(ExplainedError, ValueError):
    """A checkpoint holds Python objects that tensors-only loading does not build."""


def checkpoint_globals(checkpoint: str | os.PathLike) -> list[str]:
    """The Python objects (``module.name``) a torch checkpoint holds beyond what torch builds
    with ``weights_only=True`` (tensors, containers, numbers, strings); read statically,
    nothing in the file is built or run. Empty for safetensors files."""
    if str(checkpoint).endswith(".safetensors"):
        return []
    import torch  # here, not above: Snakemake checks every configured checkpoint as it reads the Snakefile

    try:
        return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(checkpoint))
    except ValueError:  # not a zip file: the format torch wrote before 1.6
        return _legacy_checkpoint_globals(checkpoint)


def _legacy_checkpoint_globals(checkpoint: str | os.PathLike) -> list[str]:
    """:func:`checkpoint_globals` of the pre-1.6 format, which torch's own scan does not read:
    four pickles (magic number, protocol, system info, the object) before the raw storages."""
    from torch import _weights_only_unpickler

    found: set[str] = set()
    with open(checkpoint, "rb") as stream:
        for _ in range(4):
            strings: list[str] = []
            for opcode, argument, _ in pickletools.genops(stream):
                if opcode.name == "GLOBAL":
                    found.add(argument.replace(" ", "."))
                elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                    found.add(".".join(strings[-2:]))
                elif isinstance(argument, str):
                    strings.append(argument)
    # torch's scan of zip files subtracts the same allow-list (it has no public name).
    allowed = set(_weights_only_unpickler._get_allowed_globals()) | set(_weights_only_unpickler._get_user_allowed_globals())
    return sorted(found - allowed)


def resolve_globals(names: Sequence[str]) -> list[tuple[Any, str]]:
    """The objects of ``trusted_globals`` names (``module.name``), for torch's ``safe_globals``."""
    resolved = []
    for name in names:
        module, _, attribute = name.rpartition(".")
        try:
            resolved.append((getattr(importlib.import_module(module), attribute), name))
        except (ImportError, AttributeError, ValueError) as error:
            raise UnsafeCheckpoint(
                f"trusted_globals: '{name}' cannot be imported ({error}); list objects as the "
                f"refusal names them (module.name)."
            ) from None
    return resolved


# Modules whose objects act on the system: a training script's options never pickle them.
SYSTEM_MODULES = frozenset({
    "builtins", "os", "posix", "nt", "sys", "subprocess", "shutil", "pathlib", "importlib", "runpy",
    "socket", "pickle", "marshal", "types", "code", "codecs", "ctypes", "functools", "operator", "io",
    "tempfile", "webbrowser",
})


def refusal(checkpoint: str | os.PathLike, untrusted: Sequence[str], owner: str = "") -> str:
    """Why ``checkpoint`` is not loaded and the ways on (none for objects that act on the system)."""
    listed = ", ".join(untrusted)
    converted = Path(checkpoint).with_suffix(".tensors.pth")
    held = (f"{owner + ': ' if owner else ''}checkpoint {checkpoint} holds Python objects besides tensors "
            f"({listed}); building them can run code from the file, so it is not loaded.")
    if any(name.split(".", 1)[0] in SYSTEM_MODULES for name in untrusted):
        return (f"{held} Some of them act on the system, which no published checkpoint needs: do not "
                f"trust this file; download it again from its source (docs/models.md, 'Checkpoint files').")
    return (
        f"{held} If the "
        f"file comes from a source you trust, either convert it once to a tensors-only file, "
        f"'python -m imagenet_cog convert-checkpoint {checkpoint} {converted}', and set the "
        f"model's weights to the new file (its features are extracted again: the file differs), "
        f"or allow exactly these objects for this model in the config: 'trusted_globals: "
        f"[{listed}]' (docs/models.md, 'Checkpoint files')."
    )


def check_checkpoint_safety(checkpoint: str | os.PathLike, trusted_globals: Sequence[str] = (), owner: str = "") -> None:
    """Refuse, before any job runs, a checkpoint holding objects its model does not trust; a
    file that cannot be scanned is left to the loader's own error."""
    try:
        held = checkpoint_globals(checkpoint)
    except Exception:  # not a torch checkpoint at all: loading it names the problem
        return
    untrusted = [name for name in held if name not in trusted_globals]
    if untrusted:
        raise UnsafeCheckpoint(refusal(checkpoint, untrusted, owner))


def read_checkpoint(checkpoint: str, trusted_globals: Sequence[str] = (), shapes_only: bool = False) -> tuple[Any, str]:
    """A checkpoint file's content and how it was read: safetensors, or torch with tensors only
    (``weights_only``), the model's ``trusted_globals`` besides; anything else is refused with
    :class:`UnsafeCheckpoint`, nothing in the file having been built. ``shapes_only``: its
    tensors on the meta device, their data left unread (safetensors' header; torch reads the
    pickle alone of a zip file, the whole of the format before torch 1.6)."""
    import torch

    if str(checkpoint).endswith(".safetensors"):
        if shapes_only:
            from safetensors import safe_open

            with safe_open(checkpoint, framework="pt") as header:
                return {key: torch.empty(header.get_slice(key).get_shape(), device="meta")
                        for key in header.keys()}, "safetensors (shapes)"
        from safetensors.torch import load_file

        return load_file(checkpoint), "safetensors"
    try:
        with torch.serialization.safe_globals(resolve_globals(trusted_globals)):
            payload = torch.load(checkpoint, map_location="meta" if shapes_only else "cpu", weights_only=True)
    except pickle.UnpicklingError:
        untrusted = [name for name in checkpoint_globals(checkpoint) if name not in trusted_globals]
        if not untrusted:
            raise  # a broken file, not an unsafe one: torch's own message
        raise UnsafeCheckpoint(refusal(checkpoint, untrusted)) from None
    if trusted_globals:
        return payload, f"tensors only, besides the model's trusted_globals ({', '.join(trusted_globals)})"
    return payload, "tensors only"


@dataclass(frozen=True)
class CheckpointFit:
    """How a checkpoint's tensors map onto a network's: the backbone's tensors by the network's
    keys, how they were found (for the log), and what does not fit (empty when all does)."""

    mapped: dict[str, Any]
    found: str
    problems: tuple[str, ...] = ()
    # the generic search's key prefix ("" for a layout's)
    prefix: str = ""


def key_listing(keys: list[str], describe: Callable[[str], str] = str, shown: int = 8) -> str:
    """The first ``shown`` keys, each described, and how many more there are."""
    return ", ".join(map(describe, keys[:shown])) + (f" (+{len(keys) - shown} more)" if len(keys) > shown else "")


def fit_checkpoint(payload: Any, own: dict[str, Any], checkpoint: str) -> CheckpointFit:
    """How ``payload`` (a checkpoint file's content) fits the network whose state dict is
    ``own``: the first layout of :data:`CHECKPOINT_LAYOUTS` that accounts for every key with
    the shapes of ``own``, else the generic prefix search. Keys and shapes alone decide, so
    tensors on the meta device (:func:`read_checkpoint`'s ``shapes_only``, a network built
    there) give the verdict that loading the file's tensors into the network gives."""
    expected = set(own)
    if isinstance(payload, dict):
        for layout in CHECKPOINT_LAYOUTS:
            mapped = match_layout(payload, layout, expected)
            if mapped is not None and all(tuple(v.shape) == tuple(own[k].shape) for k, v in mapped.items()):
                return CheckpointFit(mapped, f"format {layout.name}; loaded {len(mapped)} tensors, "
                                             f"0 backbone keys missing or unexpected")
    state = unwrap_state_dict(payload, checkpoint)
    mapped, prefix, unexpected = map_checkpoint_keys(state, expected)
    needed = {key for key in expected if not _ignorable(key)}
    missing = sorted(needed - set(mapped))
    wrong_shape = sorted(k for k, v in mapped.items() if tuple(v.shape) != tuple(own[k].shape))

    def shapes(key: str) -> str:
        return f"{key} {tuple(mapped[key].shape)} in the file, {tuple(own[key].shape)} in the network"

    problems = []
    if missing:
        problems.append(f"{len(missing)} of {len(needed)} backbone keys missing: {key_listing(missing)}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected keys: {key_listing(unexpected)}")
    if wrong_shape:
        problems.append(f"{len(wrong_shape)} of {len(mapped)} keys with other shapes: {key_listing(wrong_shape, shapes, 3)}")
    found = (f"format not among the known releases, generic prefix search; loaded {len(mapped)} tensors under "
             f"prefix '{prefix}', ignored {len(state) - len(mapped)} (heads and other networks)")
    return CheckpointFit(mapped, found, tuple(problems), prefix)


def misfit(network, fit: CheckpointFit) -> str:
    """What of a checkpoint does not fit ``network`` (after "checkpoint <file> "), without the fix."""
    return f"does not fit a {type(network).__name__} backbone (best key prefix '{fit.prefix}'): {'; '.join(fit.problems)}"


def load_checkpoint(network, checkpoint: str, trusted_globals: Sequence[str] = ()) -> str:
    """Load a checkpoint file into ``network`` (already cut); returns a line for the log."""
    payload, loaded_as = read_checkpoint(checkpoint, trusted_globals)
    fit = fit_checkpoint(payload, network.state_dict(), checkpoint)
    if fit.problems:
        raise CheckpointMismatch(
            f"checkpoint {checkpoint} {misfit(network, fit)}. Check the model's 'arch' in config.yaml, or "
            "convert the checkpoint to a state dict of that network."
        )
    network.load_state_dict(fit.mapped, strict=False)
    return f"checkpoint {checkpoint}: {fit.found}; read with {loaded_as}"



# Converting a checkpoint once, knowingly -------------------------------------------------


def tensors_only(value: Any, where: str, dropped: list[str]) -> Any:
    """``value`` with only what tensors-only loading builds: tensors, containers, numbers and
    strings; a module becomes its state dict, argparse options a dict, numpy values tensors or
    numbers; anything else is left out (None in a sequence) and listed in ``dropped``."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, torch.nn.Module):
        value = value.state_dict()
    elif isinstance(value, argparse.Namespace):
        value = vars(value)
    elif isinstance(value, np.generic):
        return value.item()
    elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, dict):
        kept = {key: tensors_only(item, f"{where}[{key!r}]", dropped) for key, item in value.items()
                if isinstance(key, (str, int, float, bool))}
        return {key: item for key, item in kept.items() if item is not None or value[key] is None}
    if isinstance(value, (list, tuple)):
        return type(value)(tensors_only(item, f"{where}[{index}]", dropped) for index, item in enumerate(value))
    if value is None or isinstance(value, (str, bytes, int, float, bool)):
        return value
    dropped.append(f"{where} ({type(value).__module__}.{type(value).__qualname__})")
    return None


def flat_tensors(value: Any, prefix: str = "") -> dict[str, Any]:
    """The tensors of nested containers, keyed by their path joined with dots (safetensors
    holds one flat mapping)."""
    import torch

    if isinstance(value, torch.Tensor):
        return {prefix.rstrip("."): value.contiguous().clone()}
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    return {key: tensor for name, item in items for key, tensor in flat_tensors(item, f"{prefix}{name}.").items()}


def convert_checkpoint_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog convert-checkpoint",
        description="Rewrite a checkpoint that holds Python objects besides tensors as a tensors-only "
                    "file (.safetensors: flat safetensors; else a torch file keeping the nesting). The "
                    "source is fully unpickled, which runs any code it names: use it only on files "
                    "from a source you trust.")
    parser.add_argument("source", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--list", action="store_true", help="only list the objects the source holds; unpickle nothing")
    args = parser.parse_args(argv)
    import torch

    held = checkpoint_globals(args.source)
    print(f"{args.source} holds {', '.join(held) if held else 'nothing besides tensors, containers, numbers and strings'}")
    if args.list:
        return 0
    if args.output.resolve() == args.source.resolve():
        parser.error("the output must be a new file: the source stays as it is")
    if held:
        print(f"unpickling it fully, as asked: allowed to build {', '.join(held)}")
    payload = torch.load(args.source, map_location="cpu", weights_only=False)
    dropped: list[str] = []
    kept = tensors_only(payload, "checkpoint", dropped)
    with atomic_output(args.output) as temporary:
        # read back as the workflow will, before the file takes its name
        if args.output.suffix == ".safetensors":
            from safetensors.torch import load_file, save_file

            save_file(flat_tensors(kept), temporary)
            load_file(temporary)
        else:
            # through an open file, so the records are not named after the random temporary name:
            # converting the same file twice gives the same bytes (and weights identity)
            with open(temporary, "wb") as stream:
                torch.save(kept, stream)
            torch.load(temporary, map_location="cpu", weights_only=True)
    for entry in dropped:
        print(f"left out: {entry}")
    print(f"wrote {args.output}: loads with tensors only; set the model's weights to it")
    return 0
