"""The final classifier of an N = all linear probe, kept beside its result JSON.

Classifier file (``Layout.probe_classifier``, ``<result>.classifier.npz`` beside an N = all
probe's result JSON; numpy ``.npz``, written atomically):

* ``weight`` [C, D] float32, ``bias`` [C] float32: logits = weight @ x + bias, where x is
  the feature L2-normalised (``normalisation`` = "l2"), as the probe trained it;
* ``class_labels`` [C] int64: the split table's labels of the classes, in row order;
* ``class_wnids`` [C] str: their wnids (the folder above each training image's path);
* ``model``, ``dataset``, ``seed``, ``lr``, ``weight_decay``, ``study``: the run it
  belongs to (``study`` is the result JSON's Optuna study name).

The probe job (:mod:`imagenet_cog.probes.probe`) writes it after its result JSON, for
N = all only, and it is not a rule output: declaring it would make Snakemake rerun every
finished probe. A reader (the label-noise audit, :mod:`imagenet_cog.variants.audit`) uses a
kept file when its run matches the result JSON (same study and best parameters) and
otherwise refits it with :func:`imagenet_cog.probes.search.final_fit`, the probe job's own
final fit, from the stored best (lr, weight decay) and seed, then keeps it the same way
(:func:`load_or_refit`).
"""

from __future__ import annotations

import json
import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from imagenet_cog.core.device import resolve_device
from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.io import atomic_output
from imagenet_cog.core.layout import classifier_beside
from imagenet_cog.features.store import image_wnid, open_feature_file, read_features, read_labels
from imagenet_cog.probes.linear import resolve_precision
from imagenet_cog.probes.search import SearchSettings, contiguous_labels, final_fit, normalised_on_device

log = logging.getLogger("imagenet_cog.probes.classifier")


class ClassifierError(ExplainedError, ValueError):
    """A classifier cannot be kept or used as asked."""


@dataclass
class Classifier:
    weight: np.ndarray  # float32 [C, D]
    bias: np.ndarray  # float32 [C]
    class_wnids: list[str]
    run: dict


def class_wnids(feature_path: str | Path, labels: np.ndarray) -> list[str]:
    """The wnid of each class (sorted labels): the folder (or synset tar) holding its images'
    files (:func:`imagenet_cog.features.store.image_wnid`)."""
    with open_feature_file(feature_path) as handle:
        valid = handle["valid"][...].astype(bool)
        folders = np.array([image_wnid(path) for path in handle["path"].asstr()[...][valid]])
    wnids = []
    for label in np.unique(labels):
        names = np.unique(folders[labels == label])
        if names.size != 1:
            raise ClassifierError(
                f"{feature_path}: class {label} has images in folders {names[:3].tolist()}, not one wnid folder"
            )
        wnids.append(str(names[0]))
    return wnids


def keep_classifier(result_json: str | Path, result: dict, weight: np.ndarray, bias: np.ndarray,
                    train_features: str | Path) -> str:
    """Write the classifier file of an N = all run beside its result JSON; returns its path."""
    labels = read_labels(train_features)
    wnids = class_wnids(train_features, labels)
    if len(wnids) != weight.shape[0]:
        raise ClassifierError(f"{train_features}: {len(wnids)} classes, but the classifier has {weight.shape[0]}")
    path = classifier_beside(str(result_json))
    with atomic_output(path) as temporary, open(temporary, "wb") as handle:
        np.savez(
            handle,
            weight=np.asarray(weight, dtype=np.float32),
            bias=np.asarray(bias, dtype=np.float32),
            class_labels=np.unique(labels).astype(np.int64),
            class_wnids=np.array(wnids),
            normalisation=np.array("l2"),
            model=np.array(str(result["model"])),
            dataset=np.array(str(result["dataset"])),
            seed=np.array(int(result["seed"])),
            lr=np.array(float(result["best_params"]["lr"])),
            weight_decay=np.array(float(result["best_params"]["weight_decay"])),
            study=np.array(str(result["study"]["name"])),
        )
    return path


def read_classifier(path: str | Path) -> Classifier:
    with np.load(path, allow_pickle=False) as stored:
        run = {key: stored[key].item() for key in ("model", "dataset", "seed", "lr", "weight_decay", "study")}
        return Classifier(stored["weight"], stored["bias"], [str(w) for w in stored["class_wnids"]], run)


def matches(classifier: Classifier, result: dict) -> bool:
    return (
        classifier.run["study"] == result["study"]["name"]
        and classifier.run["lr"] == result["best_params"]["lr"]
        and classifier.run["weight_decay"] == result["best_params"]["weight_decay"]
    )


def refit_classifier(result_json: str | Path, train_features: str | Path, device: str = "cpu") -> Classifier:
    """Refit an N = all run's final classifier from its result JSON, keep it, return it."""
    result = json.loads(Path(result_json).read_text())
    if str(result["shots"]) != "all":
        raise ClassifierError(f"{result_json}: a classifier is kept for N = all runs only, not shots={result['shots']}")
    stored = result["settings"]
    settings = SearchSettings(**{**stored, "lr_range": tuple(stored["lr_range"]), "wd_range": tuple(stored["wd_range"])})
    train = read_features(train_features)
    target = resolve_device(device, "probes.device")
    precision = resolve_precision(settings.precision, target)
    labels, _, num_classes = contiguous_labels(train.labels, train.labels, str(train_features))
    features = normalised_on_device(train.features, target, precision, str(train_features))
    probe = final_fit(
        features, torch.from_numpy(labels).to(target), num_classes, result["best_params"], settings,
        int(result["seed"]), precision,
    )
    weight, bias = probe.weight[0].float().cpu().numpy(), probe.bias[0].float().cpu().numpy()
    path = keep_classifier(result_json, result, weight, bias, train_features)
    log.info("refitted %s", path)
    return read_classifier(path)


def load_or_refit(result_json: str | Path, train_features: str | Path, device: str = "cpu") -> Classifier:
    result = json.loads(Path(result_json).read_text())
    path = Path(classifier_beside(str(result_json)))
    if path.is_file():
        try:
            kept = read_classifier(path)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:  # cut short: refitted
            log.warning("%s unreadable (%s): refitting", path, error)
        else:
            if matches(kept, result):
                return kept
            log.info("%s belongs to another run of this probe: refitting", path)
    return refit_classifier(result_json, train_features, device)

