"""Whether a configured checkpoint fits its arch, judged when the Snakefile is read.

The extraction job loads a checkpoint with :func:`imagenet_cog.models.checkpoints.load_checkpoint`,
which maps the file's keys onto the network (:func:`~imagenet_cog.models.checkpoints.fit_checkpoint`)
and refuses a file whose keys or shapes do not fit. :func:`checkpoint_misfit` asks the same function
before any job, of the file's shapes (``read_checkpoint(..., shapes_only=True)``: no tensor data is
read) and the network built on the meta device (no weights made), so that planning refuses exactly
the files the job would. :func:`judged_misfit` keeps each verdict in a small JSON file named by the
file's content (its weights identity, the sha256 a series and the features' params compute anyway),
the model's arch settings, the libraries' versions and this code's: an unchanged file is judged once.

Judged: the registry's archs (torchvision, timm and the project's networks), which the job loads
through ``load_checkpoint``, and the ``hf/`` archs' checkpoint folders, whose keys are renamed as
transformers' ``from_pretrained`` renames them in the job
(:func:`imagenet_cog.models.hf_models.checkpoint_misfit`). The ``timm/`` and ``open_clip/`` archs'
files are loaded by those libraries' own loaders (a model's checkpoint filter may convert tensors),
and a custom factory reads its file itself: their jobs judge them.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
from pathlib import Path
from typing import Any, Sequence

from imagenet_cog.core.io import write_json
from imagenet_cog.models.checkpoints import CheckpointMismatch, fit_checkpoint, misfit, read_checkpoint
from imagenet_cog.models.registry import BUILDERS, REGISTRY, ModelSpec, file_sha256, is_hf_arch, weights_identity

# the libraries whose networks (or whose reading of a file) a verdict depends on, and the modules
LIBRARIES = ("torch", "torchvision", "timm", "safetensors", "transformers")
CODE = ("imagenet_cog.models.checkpoints", "imagenet_cog.models.registry", "imagenet_cog.models.hf_models", __name__)
# an error of a file torch or safetensors cannot read is shown up to this many characters
SHOWN_ERROR = 300


def fit_checked(spec: ModelSpec) -> bool:
    """Whether ``spec``'s checkpoint is judged before any job (a registry arch's file, an hf/
    arch's folder)."""
    return spec.is_checkpoint() and (spec.arch in REGISTRY or is_hf_arch(spec.arch))


def checkpoint_misfit(spec: ModelSpec) -> str | None:
    """What of ``spec``'s checkpoint does not fit its arch (to follow "checkpoint <file> "),
    None when its extraction job loads it."""
    import torch

    if is_hf_arch(spec.arch):
        from imagenet_cog.models.hf_models import checkpoint_misfit as hf_checkpoint_misfit

        try:
            return hf_checkpoint_misfit(spec.hf_model(), spec.weights)
        except Exception as error:  # safetensors cannot read a file of the folder, nor can the job
            return f"cannot be read as a checkpoint ({type(error).__name__}: {str(error)[:SHOWN_ERROR]})"
    architecture = REGISTRY[spec.arch]
    with torch.device("meta"):
        network = BUILDERS[architecture.library](architecture, pretrained=False)
    try:
        payload, _ = read_checkpoint(spec.weights, spec.trusted_globals, shapes_only=True)
        fit = fit_checkpoint(payload, network.state_dict(), spec.weights)
    except CheckpointMismatch as error:  # no state dict in the file
        return str(error).removeprefix(f"checkpoint {spec.weights}: ")
    except Exception as error:  # torch or safetensors cannot read it, nor can the job
        return f"cannot be read as a checkpoint ({type(error).__name__}: {str(error)[:SHOWN_ERROR]})"
    return misfit(network, fit) if fit.problems else None


@functools.cache
def judging_code() -> dict[str, Any]:
    """The libraries' versions and this code's digests: the same for every file a reading judges."""
    return {"libraries": {name: importlib.metadata.version(name) for name in LIBRARIES},
            "code": [file_sha256(importlib.util.find_spec(module).origin)[:16] for module in CODE]}


def verdict_key(spec: ModelSpec) -> dict[str, Any]:
    """What a verdict depends on: the file's content (and a project network's code, both in its
    weights identity), the arch and the objects its file may hold, the libraries, this code."""
    return {"weights": weights_identity(spec), "arch": spec.arch, "trusted_globals": sorted(spec.trusted_globals),
            **judging_code()}


def judged_misfit(spec: ModelSpec, folder: str | Path) -> str | None:
    """:func:`checkpoint_misfit`, kept in ``folder`` by :func:`verdict_key` and read back while
    nothing of the key changes; a verdict that cannot be kept is judged again next time."""
    key = verdict_key(spec)
    path = Path(folder) / f"{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()}.json"
    try:
        return json.loads(path.read_text())["misfit"]
    except (OSError, ValueError, KeyError):
        pass
    found = checkpoint_misfit(spec)
    try:
        write_json(path, {**key, "misfit": found})
    except OSError:
        pass
    return found


def refusal_line(owner: str, arch: str, misfits: Sequence[tuple[int | None, str, str]]) -> str:
    """The line of what the run lacks for the model ``owner`` or, where steps are given, the
    series ``owner``: ``misfits`` holds (step, file, what does not fit) of each checkpoint that
    does not fit its arch (step None for a model of its own)."""
    step, path, reason = misfits[0]
    if step is None:
        return (f"config.yaml: model '{owner}': checkpoint {path} {reason}. Fix: set the model's arch to the "
                f"network that wrote the file, or convert the file to a state dict of {arch}.")
    others = [f"step {other} ({other_path})" for other, other_path, _ in misfits[1:4]]
    more = f" and {len(misfits) - 4} more" if len(misfits) > 4 else ""
    alike = "in the same way" if all(other == reason for _, _, other in misfits[1:]) else "either"
    verb = "does" if len(misfits) == 2 else "do"
    besides = f"; {', '.join(others)}{more} {verb} not fit {alike}" if others else ""
    return (f"config.yaml: model '{owner}' (a series of arch {arch}): step {step}, checkpoint {path} {reason}"
            f"{besides}. Fix: set the series' arch to the network that wrote its checkpoints, take the file out "
            f"of the series (move it, or drop its step from the map), or convert it to a state dict of {arch}.")
