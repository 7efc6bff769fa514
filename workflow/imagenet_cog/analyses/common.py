"""What every analysis shares: reading a split's features, the metric records, provenance."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.features.store import open_feature_file, read_features


class AnalysisInputError(ExplainedError, ValueError):
    """The features or settings cannot support the requested analysis."""


@dataclass
class SplitFeatures:
    """The valid rows of one feature file with the image paths they belong to."""

    features: np.ndarray  # float32 [n, d]
    labels: np.ndarray  # int64 [n]
    paths: list[str]
    metadata: dict[str, Any]
    source: str


def load_split(path: str | os.PathLike) -> SplitFeatures:
    """Features, labels and paths of a feature file; non-finite features are an error."""
    loaded = read_features(path)
    with open_feature_file(path) as handle:
        valid = handle["valid"][...].astype(bool)
        paths = list(handle["path"].asstr()[...][valid])
    if not np.isfinite(loaded.features).all():
        raise AnalysisInputError(
            f"{path}: the features contain NaN or infinite values; delete the feature files of "
            f"this model and dataset and extract them again (features.dtype: float32 if a "
            f"model's activations overflow float16)."
        )
    return SplitFeatures(loaded.features, loaded.labels, paths, loaded.metadata, str(path))


def l2_normalised(features: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (all-zero rows stay zero), float32."""
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    return (features / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


def metric(name: str, value: float, low: float | None = None, high: float | None = None,
           spread: float | None = None) -> dict[str, Any]:
    """One record of an analysis JSON's ``metrics`` list (non-finite values become null)."""

    def plain(number):
        return None if number is None or not math.isfinite(float(number)) else float(number)

    return {"metric": name, "value": plain(value), "low": plain(low), "high": plain(high), "spread": plain(spread)}


def provenance(split: SplitFeatures) -> dict[str, Any]:
    """What the result was computed from, for its JSON."""
    keep = ("model", "arch", "weights", "feature_dim", "features_dtype", "dataset", "split")
    return {
        "features": split.source,
        "n_images": int(split.labels.size),
        "n_concepts": int(np.unique(split.labels).size),
        "feature_metadata": {key: split.metadata[key] for key in keep if key in split.metadata},
    }
