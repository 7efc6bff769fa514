"""Detecting unseen concepts: does a model trained on IN-1K notice that an image
shows none of IN-1K's concepts, level by level? ``analyses-detection`` scores IN-1K's test
images (the known, positive class) and each level's test images (the unseen one) and writes
AUROC and FPR at 95% TPR per score, level and seed.

Every score is "higher = more known" (docs/analyses.md, "Detecting unseen concepts"):

* ``msp``: the largest softmax probability of the IN-1K linear probe (Hendrycks & Gimpel 2017);
* ``max_logit``: its largest logit (Hendrycks et al. 2022);
* ``energy``: the logsumexp of its logits, i.e. the negative free energy at T = 1 (Liu et al. 2020);
* ``knn_distance``: minus the distance from the L2-normalised feature to its k-th nearest L2-normalised
  IN-1K training feature (Sun et al. 2022);
* ``mcm``: for an image-text model, the largest softmax of the cosine similarities to the text
  classifier of IN-1K's names over a temperature (Ming et al. 2022; T = 1 as in their paper).

The probe's logits are those of the N = all classifier each probe seed keeps beside its result
JSON (:mod:`imagenet_cog.probes.classifier`), on L2-normalised features as it was trained; the
k-NN and MCM scores do not depend on the probe, so they have one value per level, not one per seed.

Metrics (OpenOOD's conventions): AUROC is scikit-learn's ``roc_auc_score`` (ties count one half);
FPR@95 is the share of unseen images scored at or above the highest threshold that keeps at
least 95% of the known images, read off ``roc_curve`` with every threshold kept. Both in percent.

Outputs: ``Layout.detection_seeds`` (TSV: model, score, seed (empty for a seed-free score),
dataset, auroc, fpr95, n_known, n_unknown) and ``Layout.detection_result`` (JSON: the same rows
with the settings and the inputs' provenance).
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import roc_auc_score, roc_curve

from imagenet_cog.analyses.common import AnalysisInputError, load_split, provenance
from imagenet_cog.analyses.detection_scores import NEIGHBOUR_SCORE, PROBE_SCORES, SCORES, SEED_COLUMNS
from imagenet_cog.core.command_line import add_compute_options, setup_logging
from imagenet_cog.core.device import resolve_device
from imagenet_cog.core.io import atomic_output, write_json
from imagenet_cog.core.naming import IN1K
from imagenet_cog.core.stack import stack_versions
from imagenet_cog.features.zeroshot_classifier_file import read_classifier
from imagenet_cog.probes.classifier import load_or_refit

log = logging.getLogger("imagenet_cog.analyses.detection")

TPR_LEVEL = 0.95
# rows of queries and of training features compared at a time (a 4096 x 65536 float32 block is 1 GiB)
QUERY_BLOCK = 4096
TRAIN_BLOCK = 65536


# scores -----------------------------------------------------------------------------------

def normalised(features: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(features.float(), dim=1)


def probe_scores(features: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> dict[str, np.ndarray]:
    """MSP, max-logit and energy of a linear classifier on L2-normalised features (float64)."""
    logits = (normalised(features) @ weight.float().t() + bias.float()).double()
    return {
        "msp": torch.softmax(logits, dim=1).amax(dim=1).cpu().numpy(),
        "max_logit": logits.amax(dim=1).cpu().numpy(),
        "energy": torch.logsumexp(logits, dim=1).cpu().numpy(),
    }


def mcm_scores(features: torch.Tensor, text: torch.Tensor, temperature: float) -> np.ndarray:
    """Ming et al.'s MCM: max softmax of the cosine similarities [images, concepts] / T;
    ``text`` is the [width, concepts] zero-shot classifier."""
    cosine = normalised(features) @ torch.nn.functional.normalize(text.float(), dim=0)
    return torch.softmax(cosine.double() / temperature, dim=1).amax(dim=1).cpu().numpy()


def kth_neighbour_distance(queries: torch.Tensor, train: torch.Tensor, k: int) -> np.ndarray:
    """Euclidean distance from each L2-normalised query to its k-th nearest L2-normalised
    training feature, in blocks: the k largest cosine similarities are kept across training
    blocks, and |a - b| = sqrt(2 - 2 cos) for unit vectors."""
    if not 1 <= k <= train.shape[0]:
        raise AnalysisInputError(f"analyses.detection.k is {k}, but IN-1K has {train.shape[0]} training images; "
                                 f"set k between 1 and {train.shape[0]}.")
    train = normalised(train)
    distances = []
    for start in range(0, queries.shape[0], QUERY_BLOCK):
        block = normalised(queries[start:start + QUERY_BLOCK])
        best = torch.empty((block.shape[0], 0), device=block.device)
        for train_start in range(0, train.shape[0], TRAIN_BLOCK):
            similarities = block @ train[train_start:train_start + TRAIN_BLOCK].t()
            best = torch.cat([best, similarities], dim=1).topk(min(k, best.shape[1] + similarities.shape[1]), dim=1).values
        distances.append(torch.sqrt(torch.clamp(2.0 - 2.0 * best[:, k - 1].double(), min=0.0)))
    return torch.cat(distances).cpu().numpy()


# metrics ----------------------------------------------------------------------------------

def labelled(known: np.ndarray, unknown: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(is-known labels, scores) of both groups together."""
    return (np.concatenate([np.ones(len(known)), np.zeros(len(unknown))]),
            np.concatenate([np.asarray(known, float), np.asarray(unknown, float)]))


def auroc(known: np.ndarray, unknown: np.ndarray) -> float:
    """AUROC (%) with the known images as the positive class."""
    return 100.0 * float(roc_auc_score(*labelled(known, unknown)))


def fpr_at_tpr(known: np.ndarray, unknown: np.ndarray, level: float = TPR_LEVEL) -> float:
    """FPR (%) of the unseen images at the highest threshold whose TPR reaches ``level``."""
    fpr, tpr, _ = roc_curve(*labelled(known, unknown), drop_intermediate=False)
    return 100.0 * float(fpr[np.argmax(tpr >= level)])


# the command ------------------------------------------------------------------------------

def score_rows(model: str, score: str, seed: str, scores: dict[str, np.ndarray]) -> list[dict]:
    known = scores[IN1K]
    return [{"model": model, "score": score, "seed": seed, "dataset": dataset, "auroc": auroc(known, values),
             "fpr95": fpr_at_tpr(known, values), "n_known": int(known.size), "n_unknown": int(values.size)}
            for dataset, values in scores.items() if dataset != IN1K]


def read_text_classifier(path: str, width: int) -> torch.Tensor:
    classifier = read_classifier(path)
    if classifier.weights.shape[0] != width:
        raise AnalysisInputError(f"{path} is a {classifier.weights.shape[0]}-d text classifier but the image features "
                                 f"are {width}-d: delete it and re-run the zero-shot classifier of this model.")
    return torch.from_numpy(classifier.weights)


def detection(args: argparse.Namespace, device: torch.device) -> tuple[list[dict], dict]:
    """Every (score, seed, level) row, and the inputs' provenance."""
    splits = {IN1K: load_split(args.known)} | {dataset: load_split(path) for dataset, path in zip(args.datasets, args.unknown)}
    features = {dataset: torch.from_numpy(split.features).to(device) for dataset, split in splits.items()}
    rows = []
    probe_wanted = [score for score in args.scores if score in PROBE_SCORES]
    seeded = zip(args.seeds, args.results) if probe_wanted else []
    for seed, result in seeded:
        classifier = load_or_refit(result, args.train, str(device))
        weight, bias = torch.from_numpy(classifier.weight).to(device), torch.from_numpy(classifier.bias).to(device)
        per_dataset = {dataset: probe_scores(values, weight, bias) for dataset, values in features.items()}
        for score in probe_wanted:
            rows += score_rows(args.model, score, seed, {dataset: per_dataset[dataset][score] for dataset in features})
    if NEIGHBOUR_SCORE in args.scores:
        train = torch.from_numpy(load_split(args.train).features).to(device)
        rows += score_rows(args.model, NEIGHBOUR_SCORE, "", {dataset: -kth_neighbour_distance(values, train, args.k)
                                                  for dataset, values in features.items()})
    if "mcm" in args.scores and args.text_classifier:
        text = read_text_classifier(args.text_classifier, features[IN1K].shape[1]).to(device)
        rows += score_rows(args.model, "mcm", "", {dataset: mcm_scores(values, text, args.temperature)
                                                  for dataset, values in features.items()})
    return rows, {dataset: provenance(split) for dataset, split in splits.items()}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog analyses-detection",
                                     description="AUROC and FPR@95 of unseen-concept detection per level.")
    parser.add_argument("--model", required=True)
    parser.add_argument("--train", required=True, help="IN-1K's training features (k-NN; a classifier's refit)")
    parser.add_argument("--known", required=True, help="IN-1K's test features: the known class")
    parser.add_argument("--datasets", nargs="+", required=True, help="the levels, in --unknown's order")
    parser.add_argument("--unknown", nargs="+", required=True, help="each level's test features")
    parser.add_argument("--seeds", nargs="+", default=[], help="the probe seeds, in --results' order")
    parser.add_argument("--results", nargs="+", default=[], help="the IN-1K N = all probe result JSONs")
    parser.add_argument("--text-classifier", help="the zero-shot classifier of IN-1K's names (MCM)")
    parser.add_argument("--scores", nargs="+", choices=SCORES, default=list(SCORES))
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--temperature", type=float, default=1.0)
    add_compute_options(parser, "the kept classifiers and the k-NN score the known and unseen test features")
    parser.add_argument("--output", required=True, help="the result JSON")
    parser.add_argument("--seed-table", required=True, help="the per-seed TSV")
    return parser


def detection_command(argv: Sequence[str]) -> int:
    setup_logging()
    args = _parser().parse_args(argv)
    if len(args.datasets) != len(args.unknown) or len(args.seeds) != len(args.results):
        raise SystemExit("analyses-detection: give one --unknown per --datasets entry and one --results per --seeds entry")
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device, "analyses.device")
    started = time.perf_counter()
    rows, inputs = detection(args, device)
    table = pd.DataFrame(rows, columns=SEED_COLUMNS)
    with atomic_output(args.seed_table) as temporary:
        table.to_csv(temporary, sep="\t", index=False)
    write_json(args.output, {
        "model": args.model, "analysis": "detection", "rows": rows,
        "settings": {"scores": args.scores, "k": args.k, "temperature": args.temperature, "seeds": args.seeds,
                     "tpr_level": TPR_LEVEL},
        "inputs": inputs, "versions": stack_versions(), "device": str(device),
        "timings": {"total_s": time.perf_counter() - started},
    })
    for row in rows:
        log.info("%s %s seed %s %s: AUROC %.2f, FPR@95 %.2f", row["model"], row["score"], row["seed"] or "-",
                 row["dataset"], row["auroc"], row["fpr95"])
    return 0
