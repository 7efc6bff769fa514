"""Zero-shot results of an image-text model: ``probe-zeroshot`` scores one
dataset's test features with its text classifier (``features.zeroshot_classifier``);
``probe-zeroshot-open-set`` scores every dataset's test features with the classifier of all
the run's concepts together and says where the errors go.

The classifier's columns are matched to the features' labels through the split tables
(label -> wnid), so a names table of another dataset, or rows in another order, is refused
rather than scored.

``probe-zeroshot`` writes one JSON (``Layout.zeroshot_result``): ``model``, ``dataset``,
``probe`` ("zeroshot"), ``random_weights``, ``test_top1``, ``test_top5`` (percent),
``n_test``, ``n_classes``, ``feature_dim``, ``logit_scale``, ``classifier`` (its
provenance: weights, open_clip version, templates, the names table's hash), ``versions``,
``device`` and ``timings``.

``probe-zeroshot-open-set`` writes one JSON per model with the same fields but ``dataset``
("open-set"), ``datasets`` in their place: per dataset its ``test_top1``, ``test_top5``,
``n_test``, ``n_classes`` and ``predicted`` (dataset -> percent of its test images whose
top-1 concept belongs to that dataset; its own share includes the correct ones), and
``errors`` (percent of its test images): ``same`` (another concept of its own dataset),
``in1k`` (an IN-1K concept, for a level) and ``other_level`` (a concept of another level;
for IN-1K, every level).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from imagenet_cog.core.command_line import add_device_option, setup_logging
from imagenet_cog.core.device import DeviceError, resolve_device
from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.io import write_json
from imagenet_cog.core.naming import IN1K, OPEN_SET, ZEROSHOT
from imagenet_cog.core.stack import stack_versions
from imagenet_cog.features.store import read_features
from imagenet_cog.features.zeroshot_classifier_file import ZeroShotClassifier, read_classifier
from imagenet_cog.models.registry import file_sha256
from imagenet_cog.probes.zeroshot import SCORE_BLOCK, zeroshot_accuracy, zeroshot_logits

log = logging.getLogger("imagenet_cog.probes.zeroshot_probe")


class ZeroShotInputError(ExplainedError, ValueError):
    """Inputs that do not belong together (the message names the files and the fix)."""


def label_wnids(split_table: str | Path) -> list[str]:
    """The wnid of each label of a split table, label 0 first."""
    rows = pd.read_csv(split_table, sep="\t", usecols=["wnid", "label"], dtype={"wnid": str, "label": np.int64})
    pairs = rows.drop_duplicates().sort_values("label")
    if pairs["label"].tolist() != list(range(len(pairs))) or pairs["wnid"].duplicated().any():
        raise ZeroShotInputError(f"{split_table}: labels do not number its wnids 0, 1, ... once each; "
                                 f"write it again with the splits stage.")
    return pairs["wnid"].tolist()


def columns_of(wnids: list[str], classifier: ZeroShotClassifier, classifier_path: str, split_table: str) -> np.ndarray:
    """The classifier column of each label's wnid."""
    column = {wnid: index for index, wnid in enumerate(classifier.wnids)}
    missing = [wnid for wnid in wnids if wnid not in column]
    if missing:
        raise ZeroShotInputError(
            f"{classifier_path} names no concept {missing[0]} ({len(missing)} of the {len(wnids)} concepts of "
            f"{split_table} missing): its names table is another dataset's; point probes.zeroshot.names at "
            f"this dataset's table, or leave it out to use the workflow's.")
    return np.array([column[wnid] for wnid in wnids], dtype=np.int64)


def common_fields(args: argparse.Namespace, classifier: ZeroShotClassifier, features, device: torch.device) -> dict:
    return {
        "model": args.model, "probe": ZEROSHOT, "random_weights": bool(features.metadata.get("random_weights", False)),
        "feature_dim": int(features.features.shape[1]), "logit_scale": classifier.logit_scale,
        "classifier": dict(classifier.provenance),
        "versions": stack_versions(),
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
    }


def checked_classifier(classifier: ZeroShotClassifier, features, args: argparse.Namespace, test: str) -> None:
    """The image features are in the classifier's space: the same model's embedding."""
    model = features.metadata.get("model")
    if model != classifier.provenance.get("model") or features.features.shape[1] != classifier.weights.shape[0]:
        raise ZeroShotInputError(
            f"{test} holds {features.features.shape[1]}-d features of model {model!r} but {args.classifier} is "
            f"the {classifier.weights.shape[0]}-d text classifier of {classifier.provenance.get('model')!r}: "
            f"score a model's features with its own classifier.")


def dataset_result(args: argparse.Namespace, device: torch.device) -> dict:
    started = time.perf_counter()
    classifier = read_classifier(args.classifier)
    test = read_features(args.test)
    checked_classifier(classifier, test, args, args.test)
    columns = columns_of(label_wnids(args.splits), classifier, args.classifier, args.splits)
    if not np.array_equal(columns, np.arange(len(classifier.wnids))):
        # the classifier may name the concepts in another order, or more of them: score ours, in label order
        classifier.weights = classifier.weights[:, columns]
    features = torch.from_numpy(test.features).to(device)
    scores = zeroshot_accuracy(features, torch.from_numpy(test.labels), torch.from_numpy(classifier.weights),
                               classifier.logit_scale)
    return {**common_fields(args, classifier, test, device), "dataset": args.dataset, **scores,
            "n_test": int(test.labels.size), "n_classes": int(columns.size),
            "timings": {"total_s": time.perf_counter() - started}}


def open_set_predictions(features: torch.Tensor, weights: torch.Tensor, logit_scale: float, k: int) -> torch.Tensor:
    """The top-k classifier columns of each image, [images, k], scored in blocks."""
    blocks = [zeroshot_logits(features[start:start + SCORE_BLOCK], weights, logit_scale).topk(k, dim=1).indices
              for start in range(0, features.shape[0], SCORE_BLOCK)]
    return torch.cat(blocks) if blocks else torch.empty((0, k), dtype=torch.int64)


def open_set_scores(dataset: str, top: np.ndarray, truth: np.ndarray, column_dataset: np.ndarray) -> dict:
    """One dataset's open-set top-1, top-5, the datasets its top-1 predictions fall in and its
    errors by destination, in percent of its test images (``truth``: each image's column)."""
    count = max(1, truth.size)
    hit = top == truth[:, None]
    predicted_in = column_dataset[top[:, 0]]
    wrong = ~hit[:, 0]
    shares = {name: 100.0 * float(np.sum(predicted_in == name)) / count for name in dict.fromkeys(column_dataset)}
    elsewhere = wrong & (predicted_in != dataset)
    into_in1k = elsewhere & (predicted_in == IN1K)
    return {
        "test_top1": 100.0 * float(hit[:, 0].sum()) / count, "test_top5": 100.0 * float(hit.any(axis=1).sum()) / count,
        "n_test": int(truth.size), "n_classes": int(np.sum(column_dataset == dataset)), "predicted": shares,
        "errors": {"same": 100.0 * float(np.sum(wrong & (predicted_in == dataset))) / count,
                   IN1K: 100.0 * float(into_in1k.sum()) / count,
                   "other_level": 100.0 * float(np.sum(elsewhere & ~into_in1k)) / count},
    }


def open_set_result(args: argparse.Namespace, device: torch.device) -> dict:
    started = time.perf_counter()
    if not len(args.dataset) == len(args.test) == len(args.splits):
        raise ZeroShotInputError("give one --test and one --splits file per --dataset, in the same order")
    classifier = read_classifier(args.classifier)
    names_dataset = dict(zip(classifier.wnids, classifier_datasets(args, classifier)))
    column_dataset = np.array([names_dataset[wnid] for wnid in classifier.wnids])
    weights = torch.from_numpy(classifier.weights).to(device)
    per_dataset, first = {}, None
    for dataset, test_path, split_table in zip(args.dataset, args.test, args.splits):
        test = read_features(test_path)
        checked_classifier(classifier, test, args, test_path)
        first = test if first is None else first
        columns = columns_of(label_wnids(split_table), classifier, args.classifier, split_table)
        top = open_set_predictions(torch.from_numpy(test.features).to(device), weights, classifier.logit_scale,
                                   min(5, column_dataset.size)).cpu().numpy()
        per_dataset[dataset] = open_set_scores(dataset, top, columns[test.labels], column_dataset)
    return {**common_fields(args, classifier, first, device), "dataset": OPEN_SET, "n_classes": int(column_dataset.size),
            "datasets": per_dataset, "timings": {"total_s": time.perf_counter() - started}}


def classifier_datasets(args: argparse.Namespace, classifier: ZeroShotClassifier) -> list[str]:
    """The dataset of each open-set classifier column, from the names table it was built from."""
    if file_sha256(args.names) != classifier.provenance.get("names_sha256"):
        raise ZeroShotInputError(f"{args.classifier} was not built from {args.names} (another names_sha256): "
                                 f"build the classifier again from this table (zeroshot-classifier).")
    rows = pd.read_csv(args.names, sep="\t", dtype=str, keep_default_na=False)
    if "dataset" not in rows.columns:
        raise ZeroShotInputError(f"{args.names} has no dataset column: the open-set classifier is built from the "
                                 f"names table of every dataset together (concept-names with several --dataset).")
    return rows["dataset"].tolist()


def _parser(open_set: bool) -> argparse.ArgumentParser:
    command = "probe-zeroshot-open-set" if open_set else "probe-zeroshot"
    parser = argparse.ArgumentParser(prog=f"python -m imagenet_cog {command}", description=(
        "Classify every dataset's test features among all the run's concepts (IN-1K and the levels together)."
        if open_set else "Classify a dataset's test features by its concepts' names (zero-shot top-1, top-5)."))
    parser.add_argument("--model", required=True)
    many = "+" if open_set else None
    parser.add_argument("--dataset", nargs=many, required=True)
    parser.add_argument("--test", nargs=many, required=True, help="the test feature files (features.h5)")
    parser.add_argument("--splits", nargs=many, required=True, help="the split tables (label -> wnid)")
    parser.add_argument("--classifier", required=True, help="the text classifier (zeroshot-classifier)")
    if open_set:
        parser.add_argument("--names", required=True, help="the open-set names table (its dataset column)")
    add_device_option(parser, "the test features are scored against the text classifier")
    parser.add_argument("--output", required=True, help="the result JSON")
    return parser


def run(argv: list[str], open_set: bool) -> int:
    setup_logging(to_stdout=True)
    args = _parser(open_set).parse_args(argv)
    try:
        device = resolve_device(args.device, "probes.device")
        result = open_set_result(args, device) if open_set else dataset_result(args, device)
    except (ZeroShotInputError, DeviceError, FileNotFoundError, ValueError, KeyError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    write_json(args.output, result)
    scored = result["datasets"] if open_set else {args.dataset: result}
    for dataset, scores in scored.items():
        log.info(f"{args.model} {dataset}{' (open set)' if open_set else ''}: zero-shot top-1 "
                 f"{scores['test_top1']:.2f}%, top-5 {scores['test_top5']:.2f}% over {scores['n_test']} test images")
    return 0


def main(argv: list[str]) -> int:
    return run(argv, open_set=False)


def open_set_main(argv: list[str]) -> int:
    return run(argv, open_set=True)
