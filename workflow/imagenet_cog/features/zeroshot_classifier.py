"""The zero-shot text classifier of an open_clip model for a dataset (``zeroshot-classifier``).

The dataset's names table (``concept-names``, ``core.names_table``) and a template set give
the classifier (``models.open_clip_text``): the text features of a dataset, as the image
features are its images'. One HDF5 file:

* ``classifier`` [embedding width, concepts] float32: column ``label`` is that concept's;
* ``wnid``, ``name`` [concepts] str: the names table's, in label order;
* attributes: ``logit_scale`` (the model's, exponentiated) and the provenance
  (:data:`PROVENANCE`): ``model``, ``arch``, ``weights`` (the weights identity),
  ``open_clip_version``, ``templates``, ``names_sha256`` (the names table's bytes).

The file is its own cache: when it exists with the provenance the command would write, the
command keeps it and computes nothing; any difference (other weights, an edited name,
another template set or open_clip version) computes it again. Written atomically.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import open_clip

from imagenet_cog.core.command_line import add_open_clip_model_options, setup_logging
from imagenet_cog.core.device import DeviceError, resolve_device
from imagenet_cog.core.io import atomic_output
from imagenet_cog.core.names_table import NamesTableError, read_names_table, shared_names
from imagenet_cog.models.open_clip_text import TEMPLATE_SETS, build_text_model, text_classifier
from imagenet_cog.models.registry import ModelSpec, file_sha256, weights_identity
from imagenet_cog.models.timm_models import PretrainedWeightsUnavailable

log = logging.getLogger("imagenet_cog.features.zeroshot_classifier")

PROVENANCE = ("model", "arch", "weights", "open_clip_version", "templates", "names_sha256")


@dataclass
class ZeroShotClassifier:
    """A classifier file's content: ``weights`` [width, concepts], their wnids and names."""

    weights: np.ndarray
    wnids: list[str]
    names: list[str]
    logit_scale: float
    provenance: dict[str, str]


def expected_provenance(spec: ModelSpec, identity: str, names_path: str | os.PathLike, templates: str) -> dict[str, str]:
    return {"model": spec.name, "arch": spec.arch, "weights": identity, "open_clip_version": open_clip.__version__,
            "templates": templates, "names_sha256": file_sha256(names_path)}


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
    with h5py.File(path, "r") as handle:
        return ZeroShotClassifier(handle["classifier"][...], list(handle["wnid"].asstr()[...]),
                                  list(handle["name"].asstr()[...]), float(handle.attrs["logit_scale"]),
                                  {key: str(handle.attrs[key]) for key in PROVENANCE})


def zeroshot_classifier_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog zeroshot-classifier",
        description="Write the zero-shot text classifier of an open_clip model for a dataset's names table "
                    "(kept when the file exists with the same provenance).",
    )
    add_open_clip_model_options(parser)
    parser.add_argument("--names", required=True, help="the dataset's names table (concept-names)")
    parser.add_argument("--templates", choices=sorted(TEMPLATE_SETS), default="openai",
                        help="open_clip's prompt templates: openai (80) or simple (7)")
    parser.add_argument("--output", required=True, help="the classifier file to write (HDF5)")
    args = parser.parse_args(argv)
    setup_logging(to_stdout=True)
    try:
        spec = ModelSpec.from_config(args.model_name, {"arch": args.arch, "weights": args.weights,
                                                       "trusted_globals": args.trusted_globals})
        names = read_names_table(args.names)
        identity = weights_identity(spec)
        provenance = expected_provenance(spec, identity, args.names, args.templates)
        if read_provenance(args.output) == provenance:
            log.info(f"{args.output} is up to date (same weights, names and templates): kept")
            return 0
        device = resolve_device(args.device, "features.device")
        model = build_text_model(spec, identity)
    except (NamesTableError, ValueError, OSError, PretrainedWeightsUnavailable, DeviceError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for name, labels in shared_names(names).items():
        log.warning(f"note: {args.names}: labels {', '.join(map(str, labels))} share the name '{name}'; "
                    f"the classifier cannot tell them apart")
    log.info("\n".join(model.notes))
    weights = text_classifier(model, [n.name for n in names], TEMPLATE_SETS[args.templates], device)
    write_classifier(args.output, ZeroShotClassifier(weights.numpy(), [n.wnid for n in names], [n.name for n in names],
                                                     model.logit_scale(), provenance))
    log.info(f"{Path(args.output)}: {weights.shape[1]} concepts x {len(TEMPLATE_SETS[args.templates])} "
             f"'{args.templates}' templates, {weights.shape[0]}-d on {device}")
    return 0
