"""open_clip's model configs read from their JSON files, without importing open_clip (which
imports torch and torchvision): what Snakemake needs to plan an open_clip model with random
weights, its embedding as features (the demo's), while it builds the DAG.

open_clip keeps each model's config as a JSON file of its package (``model_configs/``); the
workflow adds its own (``open_clip_configs/``, the demo's small models), which win over
open_clip's of the same name, as ``open_clip.add_model_config`` makes them. A model with
random weights is preprocessed with open_clip's defaults at its tower's image size, and its
embedding is ``embed_dim`` wide. Anything else (a pretrained tag, a checkpoint, pooled
features, a name open_clip does not know) is :mod:`imagenet_cog.models.open_clip_models`'s,
which asks open_clip itself.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

EMBEDDING = "embedding"
POOLED = "pooled"
IMAGE_FEATURES = (EMBEDDING, POOLED)
DEFAULT_IMAGE_FEATURES = EMBEDDING
# The workflow's own model configs, named as open_clip's are (the demo's small CoG-demo-CLIP,
# whose 32-pixel tower fits the demo's images).
SHIPPED_CONFIGS = Path(__file__).with_name("open_clip_configs")
# The keys open_clip requires of a model config file (open_clip.factory._rescan_model_configs).
REQUIRED_KEYS = ("embed_dim", "vision_cfg", "text_cfg")
# open_clip's preprocessing defaults (open_clip.transform.PreprocessCfg) besides its mean and
# std, which its constants module holds.
DEFAULT_INTERPOLATION = "bicubic"


def image_features_read(setting: str | None) -> str:
    """The image features a model's ``image_features`` setting reads (absent: the embedding)."""
    return setting or DEFAULT_IMAGE_FEATURES


def open_clip_file(name: str) -> Path:
    """A file or folder of the installed open_clip package, found without importing it."""
    spec = importlib.util.find_spec("open_clip")
    for location in (spec.submodule_search_locations or ()) if spec else ():
        if (Path(location) / name).exists():
            return Path(location) / name
    raise ModuleNotFoundError(f"open_clip is not installed (or ships no {name}); install open_clip_torch.")


@functools.cache
def model_configs() -> dict[str, dict[str, Any]]:
    """Every model config open_clip lists, the workflow's own included, by name."""
    configs = {}
    for folder in (open_clip_file("model_configs"), SHIPPED_CONFIGS):
        for path in sorted(folder.glob("*.json")):
            config = json.loads(path.read_text())
            if all(key in config for key in REQUIRED_KEYS):
                configs[path.stem] = config
    return configs


@functools.cache
def default_mean_std() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """open_clip's default normalisation, from its constants module (which imports nothing)."""
    spec = importlib.util.spec_from_file_location("open_clip_constants", open_clip_file("constants.py"))
    constants = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(constants)
    return constants.OPENAI_DATASET_MEAN, constants.OPENAI_DATASET_STD


def random_weights_plan(name: str, image_features: str | None) -> tuple[dict[str, Any], int] | None:
    """The preprocessing fields (as ``OpenClipModel.preprocessing`` gives them) and the feature
    width of the open_clip model ``name`` with random weights, from its config file; None
    where open_clip must be asked (an unknown name, features other than the embedding, a
    tower whose image size is not one number)."""
    config = model_configs().get(name)
    if config is None or image_features_read(image_features) != EMBEDDING:
        return None
    size = config["vision_cfg"].get("image_size")
    if not isinstance(size, int):
        return None
    mean, std = default_mean_std()
    preprocessing = {"size": size, "mean": tuple(float(v) for v in mean), "std": tuple(float(v) for v in std),
                     "interpolation": DEFAULT_INTERPOLATION, "mode": "model"}
    return preprocessing, int(config["embed_dim"])
