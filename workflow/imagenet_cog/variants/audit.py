"""Label-noise audit (paper supp. A.3, Fig. 5): confident predictions across datasets.

A probe trained on one dataset (e.g. level L3) is applied to the test images of another
(e.g. IN-1K), whose concepts it never saw. An image it assigns to one of its own concepts
with softmax confidence above a threshold (default 0.99) is a candidate for overlapping or
mislabelled concepts; the paper finds about 2.7% such images per pair and shows the most
confident ones. Listed here per (classifier dataset, image dataset, seed) with both
labels, the share per pair, and a contact sheet of the most confident.

The classifiers are the probe jobs' own final fits, kept beside their result JSONs or
refitted where missing (:mod:`imagenet_cog.probes.classifier` describes the file).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from PIL import Image

from imagenet_cog.core.archives import ImageFiles
from imagenet_cog.core.command_line import add_device_option, setup_logging
from imagenet_cog.core.io import read_tsv, write_tsv
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.plots import save_figure_file
from imagenet_cog.features.store import image_features
from imagenet_cog.probes.classifier import Classifier, ClassifierError, load_or_refit

log = logging.getLogger("imagenet_cog.variants.audit")

PREDICTION_COLUMNS = (
    "classifier_dataset", "seed", "image_dataset", "path", "true_wnid", "true_name",
    "predicted_wnid", "predicted_name", "confidence",
)
SHARE_COLUMNS = ("classifier_dataset", "image_dataset", "seed", "images", "confident", "share_percent")


def check_threshold(threshold: float) -> None:
    if not 0.0 < threshold < 1.0:
        raise ClassifierError(
            f"label_audit.threshold must lie strictly between 0 and 1 (a softmax confidence), "
            f"not {threshold}; fix config.yaml."
        )


def confident_predictions(classifier: Classifier, features: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, predicted class index, confidence) of the rows whose top softmax probability
    exceeds ``threshold``; features are L2-normalised as in training."""
    check_threshold(threshold)
    x = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))
    x = torch.nn.functional.normalize(x, dim=1)
    logits = torch.addmm(torch.from_numpy(classifier.bias), x, torch.from_numpy(classifier.weight).t())
    confidence, predicted = torch.softmax(logits.double(), dim=1).max(dim=1)
    rows = torch.nonzero(confidence > threshold).flatten().numpy()
    return rows, predicted.numpy()[rows], confidence.numpy()[rows]


def audit(pairs, seeds, model: str, layout: Layout, names: dict[str, str], threshold: float,
          device: str = "cpu") -> tuple[list[list], list[list]]:
    """Prediction rows (most confident first) and share rows of every (pair, seed)."""
    check_threshold(threshold)
    predictions, shares = [], []
    for source, target in pairs:
        features, paths, wnids = image_features(layout.features(model, target, "test"))
        per_seed = []
        for seed in seeds:
            classifier = load_or_refit(
                layout.probe_result(model, source, "all", seed), layout.features(model, source, "train"), device
            )
            rows, predicted, confidence = confident_predictions(classifier, features, threshold)
            for row, index, score in zip(rows, predicted, confidence):
                guess = classifier.class_wnids[index]
                predictions.append([
                    source, seed, target, paths[row], wnids[row], names.get(wnids[row], ""),
                    guess, names.get(guess, ""), float(score),
                ])
            share = 100.0 * rows.size / max(1, len(paths))
            per_seed.append(share)
            shares.append([source, target, seed, len(paths), int(rows.size), round(share, 4)])
        shares.append([source, target, "mean", len(paths), "", round(float(np.mean(per_seed)), 4)])
    predictions.sort(key=lambda row: -row[-1])
    return predictions, shares


def write_predictions(path: str | Path, predictions: list[list]) -> None:
    """The prediction rows as TSV. A confidence is written in full (the shortest text that
    reads back as the same float), so that a row just above the threshold never reads as at
    or below it."""
    write_tsv(path, PREDICTION_COLUMNS, [[*row[:-1], repr(float(row[-1]))] for row in predictions])


def contact_sheet(predictions: list[list], images: dict[str, ImageFiles], output: str | Path, count: int) -> None:
    """The ``count`` most confident predictions (one per image): image, own and predicted
    label; ``images``: each image dataset's root, in any layout."""
    seen, chosen = set(), []
    for row in predictions:
        key = (row[2], row[3])
        if key not in seen:
            seen.add(key)
            chosen.append(row)
        if len(chosen) == count:
            break
    columns = max(1, min(4, len(chosen)))
    rows = max(1, -(-len(chosen) // columns))
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.6 * rows), squeeze=False)
    for axis in axes.flat:
        axis.axis("off")
    for axis, row in zip(axes.flat, chosen):
        source, _, target, path, true_wnid, true_name, guess, guess_name, score = row
        with Image.open(images[target].open(path)) as image:
            axis.imshow(image.convert("RGB"))
        axis.set_title(
            f"{target}: {true_name or true_wnid}\n{source} says: {guess_name or guess}\np = {score:.4f}", fontsize=8
        )
    if not chosen:
        axes[0, 0].text(0.5, 0.5, "no prediction above the threshold", ha="center", va="center")
    figure.tight_layout()
    save_figure_file(figure, output, dpi=100)
    plt.close(figure)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog label-audit", description=__doc__.split("\n")[0])
    parser.add_argument("--results-root", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--pair", nargs=2, action="append", required=True, metavar=("CLASSIFIER", "IMAGES"),
                        help="a classifier dataset and the dataset whose test images it labels (repeatable)")
    parser.add_argument("--seeds", nargs="+", required=True)
    parser.add_argument("--image-root", action="append", default=[], metavar="DATASET=FOLDER")
    parser.add_argument("--image-index", action="append", default=[], metavar="DATASET=INDEX",
                        help="the image index of a dataset's root in a tar layout")
    parser.add_argument("--concepts", required=True, help="the concept catalogue (wnid, name, gloss)")
    parser.add_argument("--threshold", type=float, default=0.99)
    parser.add_argument("--contact-sheet-images", type=int, default=12)
    add_device_option(parser, "a missing N = all classifier is refitted")
    parser.add_argument("--predictions", required=True)
    parser.add_argument("--shares", required=True)
    parser.add_argument("--contact-sheet", required=True)
    return parser


def label_audit_command(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    setup_logging()
    try:
        check_threshold(args.threshold)
    except ClassifierError as error:
        log.error("%s", error)
        return 1
    names = {row["wnid"]: row["name"] for row in read_tsv(args.concepts)}
    indexes = dict(entry.split("=", 1) for entry in args.image_index)
    roots = {dataset: ImageFiles(root, indexes.get(dataset))
             for dataset, root in (entry.split("=", 1) for entry in args.image_root)}
    predictions, shares = audit(args.pair, args.seeds, args.model, Layout(args.results_root), names,
                                args.threshold, args.device)
    write_predictions(args.predictions, predictions)
    write_tsv(args.shares, SHARE_COLUMNS, shares)
    contact_sheet(predictions, roots, args.contact_sheet, args.contact_sheet_images)
    log.info("%s: %d confident predictions over %d pairs", args.model, len(predictions), len(args.pair))
    return 0
