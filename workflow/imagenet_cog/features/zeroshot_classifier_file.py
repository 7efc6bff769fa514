"""The zero-shot classifier file (``zeroshot-classifier`` writes it, the zero-shot probes and
detection read it), read and written with h5py alone: its readers import no open_clip.

One HDF5 file:

* ``classifier`` [embedding width, concepts] float32: column ``label`` is that concept's;
* ``wnid``, ``name`` [concepts] str: the names table's, in label order;
* attributes: ``logit_scale`` (the model's, exponentiated) and the provenance
  (:data:`PROVENANCE`): ``model``, ``arch``, ``weights`` (the weights identity),
  ``open_clip_version``, ``templates``, ``names_sha256`` (the names table's bytes).

Written atomically.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import h5py
import numpy as np

from imagenet_cog.core.io import atomic_output
from imagenet_cog.features.store import open_feature_file

PROVENANCE = ("model", "arch", "weights", "open_clip_version", "templates", "names_sha256")


@dataclass
class ZeroShotClassifier:
    """A classifier file's content: ``weights`` [width, concepts], their wnids and names."""

    weights: np.ndarray
    wnids: list[str]
    names: list[str]
    logit_scale: float
    provenance: dict[str, str]


def read_provenance(path: str | os.PathLike) -> dict[str, str] | None:
    """A classifier file's provenance; None where there is no readable classifier file."""
    try:
        with h5py.File(path, "r") as handle:
            return {key: str(handle.attrs[key]) for key in PROVENANCE if key in handle.attrs}
    except (OSError, KeyError):
        return None


def write_classifier(path: str | os.PathLike, classifier: ZeroShotClassifier) -> None:
    with atomic_output(path) as temporary:
        with h5py.File(temporary, "w") as handle:
            handle.create_dataset("classifier", data=classifier.weights.astype(np.float32))
            handle.create_dataset("wnid", data=classifier.wnids, dtype=h5py.string_dtype())
            handle.create_dataset("name", data=classifier.names, dtype=h5py.string_dtype())
            handle.attrs["logit_scale"] = classifier.logit_scale
            handle.attrs.update(classifier.provenance)


def read_classifier(path: str | os.PathLike) -> ZeroShotClassifier:
    with open_feature_file(path) as handle:  # one cut short is named with its rebuild
        return ZeroShotClassifier(handle["classifier"][...], list(handle["wnid"].asstr()[...]),
                                  list(handle["name"].asstr()[...]), float(handle.attrs["logit_scale"]),
                                  {key: str(handle.attrs[key]) for key in PROVENANCE})
