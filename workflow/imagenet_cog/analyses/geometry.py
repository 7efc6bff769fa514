"""Alignment and uniformity of the test features (CoG preprint, Sec. 4.3.2, supp. D.2;
Wang & Isola, ICML 2020), exact over all pairs, computed in blocks.

On L2-normalised features x (the test set of one dataset):

- ``alignment`` = E ||x - y||^alpha over all unordered pairs of distinct test images of the
  same concept (pooled over concepts), alpha = 2 by default. Lower: a concept's images lie
  closer together.
- ``uniformity`` = -log E exp(-t ||x - y||^2) over all unordered pairs of distinct test
  images, t = 2. Wang & Isola's uniformity *loss* is the logarithm without the minus sign
  (at most 0, lower is more uniform); this analysis reports its negation, positive and
  higher for more uniform features, which is the convention of the values the CoG preprint reports
  (1.8-3.1). ``uniformity_loss`` is recorded too.
- ``alignment_uniformity_ratio`` = alignment / uniformity; the summary adds it relative to
  the model's IN-1K ratio (CoG preprint, Fig. 6).

50,000 test images make 1.25e9 pairs: the squared distances are formed one block of rows
at a time against all rows (``||x||^2 + ||y||^2 - 2 x.y``, matrix products on the GPU when
there is one), never as a full matrix, and summed in float64. Nothing is sampled.
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
import torch

from imagenet_cog.core.command_line import add_compute_options, add_job_options, setup_logging
from imagenet_cog.core.device import DeviceError, resolve_device
from imagenet_cog.core.io import write_json
from imagenet_cog.core.stack import stack_versions

from .common import AnalysisInputError, l2_normalised, load_split, metric, provenance

log = logging.getLogger("imagenet_cog.analyses.geometry")


def _squared_distances(rows, columns, row_norms, column_norms):
    distances = row_norms[:, None] + column_norms[None, :] - 2.0 * (rows @ columns.T)
    return torch.clamp_min_(distances, 0.0)


def uniformity_loss(features: np.ndarray, t: float = 2.0, block_size: int = 1024, device: str = "auto") -> float:
    """log of the mean of exp(-t ||x_i - x_j||^2) over all pairs i < j, exactly."""
    target = resolve_device(device, "analyses.device")
    count = features.shape[0]
    if count < 2:
        raise AnalysisInputError(f"uniformity needs at least 2 test images, not {count}.")
    data = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32)).to(target)
    norms = (data * data).sum(dim=1)
    total = torch.zeros((), dtype=torch.float64, device=target)
    for start in range(0, count, block_size):
        stop = min(count, start + block_size)
        # Only columns j > i of each row i: the pairs of this block with rows at or after it.
        kernel = _squared_distances(data[start:stop], data[start:], norms[start:stop], norms[start:])
        kernel.mul_(-t).exp_()
        # The leading square holds the pairs within the block: keep its upper triangle only.
        within = torch.tril(kernel[:, : stop - start]).sum(dtype=torch.float64)
        total += kernel.sum(dtype=torch.float64) - within
    pairs = count * (count - 1) / 2
    return float(torch.log(total / pairs))


def alignment(features: np.ndarray, labels: np.ndarray, alpha: float = 2.0, device: str = "auto") -> float:
    """Mean ||x_i - x_j||^alpha over all pairs i < j of the same label, pooled over labels."""
    target = resolve_device(device, "analyses.device")
    total, pairs = 0.0, 0
    for label in np.unique(labels):
        members = torch.from_numpy(np.ascontiguousarray(features[labels == label], dtype=np.float32)).to(target)
        count = members.shape[0]
        if count < 2:
            continue
        norms = (members * members).sum(dim=1)
        distances = _squared_distances(members, members, norms, norms)
        upper = torch.ones(distances.shape, dtype=torch.bool, device=target).triu_(diagonal=1)
        total += float(distances[upper].to(torch.float64).pow(alpha / 2).sum())
        pairs += count * (count - 1) // 2
    if pairs == 0:
        raise AnalysisInputError("alignment needs a concept with at least 2 test images; every concept has 1.")
    return total / pairs


def geometry_metrics(features: np.ndarray, labels: np.ndarray, alpha: float, t: float, block_size: int,
                     device: str) -> list[dict]:
    normalised = l2_normalised(features)
    aligned = alignment(normalised, labels, alpha, device)
    loss = uniformity_loss(normalised, t, block_size, device)
    return [
        metric("alignment", aligned),
        metric("uniformity", -loss),
        metric("uniformity_loss", loss),
        metric("alignment_uniformity_ratio", aligned / -loss if loss != 0 else float("nan")),
    ]


def geometry_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="analyses-geometry", description="Alignment and uniformity of test features.")
    add_job_options(parser, "test")
    parser.add_argument("--output", required=True, help="result JSON")
    parser.add_argument("--alpha", type=float, default=2.0)
    parser.add_argument("--t", type=float, default=2.0)
    parser.add_argument("--block-size", type=int, default=1024)
    add_compute_options(parser, "alignment and uniformity are computed")
    args = parser.parse_args(argv)
    setup_logging()

    torch.set_num_threads(max(1, args.threads))
    # Full float32 products on a GPU too: TF32's 10-bit mantissa would move the distances
    # (2 - 2 x.y) by ~1e-3, far more than the 1e-5 the sums are checked to.
    torch.set_float32_matmul_precision("highest")
    started = time.perf_counter()
    try:
        test = load_split(args.test)
        metrics = geometry_metrics(test.features, test.labels, args.alpha, args.t, args.block_size, args.device)
    except (AnalysisInputError, DeviceError) as error:
        log.error("%s: %s", args.test, error)
        return 1
    write_json(args.output, {
        "analysis": "alignment_uniformity",
        "model": args.model,
        "dataset": args.dataset,
        "random_weights": bool(test.metadata.get("random_weights")),
        "metrics": metrics,
        "settings": {"alpha": args.alpha, "t": args.t, "block_size": args.block_size, "device": args.device,
                     "l2_normalise": True, "pairs": "all unordered pairs of distinct test images"},
        "device": str(resolve_device(args.device, "analyses.device")),
        "seconds": round(time.perf_counter() - started, 3),
        "test": provenance(test),
        "versions": stack_versions(),
    })
    return 0
