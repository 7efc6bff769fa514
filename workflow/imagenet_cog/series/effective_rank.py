"""The ``effective-rank`` command: RankMe of a checkpoint's IN-1K training features.

RankMe (Garrido et al., ICML 2023) is the exponential of the entropy of a feature matrix's
singular values normalised to sum 1: with σ the singular values of Z [n, d] (rows: images,
neither centred nor normalised, as the paper),

    p_k = σ_k / Σ σ + ε,    RankMe(Z) = exp(-Σ_k p_k log p_k),    ε = 1e-7 (the paper's)

A matrix of rank k with k equal singular values scores k (the ε terms add about d ε log(1/ε),
0.3% at d = 2048); isotropic features score about d. It needs no labels, so it can screen a
checkpoint before any probe is trained.

The matrix is a fixed-size sample of the valid training rows, drawn with a seed: the same
images for every checkpoint of a series (they share the split), so that the numbers compare.
The paper's 25,600 rows are kept: more rows than any model's width here (at most 2048 for a
ResNet-50's features), so the rank is not capped by the sample; a dataset with fewer rows is
read whole, and the result says how many rows it used. RankMe grows with the rows up to d:
numbers from samples of different sizes do not compare.

Result JSON (``Layout.effective_rank``): model, dataset, split, effective_rank, epsilon,
n_rows (sampled), n_valid_rows (the split's), sample_seed, feature_dim, max_rank (min of rows
and width), features (the file read), feature_metadata (its model, arch, weights identity),
timings {read_s, svd_s}, device, versions (``core.stack``).
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from imagenet_cog.core.command_line import add_compute_options, setup_logging
from imagenet_cog.core.device import resolve_device
from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.io import write_json
from imagenet_cog.core.stack import stack_versions
from imagenet_cog.features.store import read_features, read_labels

log = logging.getLogger("imagenet_cog.series.effective_rank")

# the paper's epsilon, added to each normalised singular value (its code's value for float32)
EPSILON = 1e-7
# what a result keeps of its feature file's attributes
FEATURE_METADATA = ("model", "arch", "weights", "feature_dim", "features_dtype", "dataset", "split")


class FeaturesUnfitError(ExplainedError, ValueError):
    """Features that give no effective rank: none, or not finite."""


def effective_rank(features: np.ndarray, epsilon: float = EPSILON, device: str | torch.device = "cpu") -> float:
    """RankMe of ``features`` [n, d] (the module docstring): singular values in float64 on ``device``."""
    matrix = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float64)).to(device)
    singular = torch.linalg.svdvals(matrix)
    total = singular.sum()
    if not total > 0:
        return 0.0  # all-zero features span nothing
    shares = singular / total + epsilon
    return float(torch.exp(-(shares * torch.log(shares)).sum()))


def sampled_rows(n_valid: int, size: int, seed: int) -> np.ndarray:
    """``size`` of ``n_valid`` rows (all when fewer), drawn without replacement with ``seed``, sorted."""
    if n_valid <= size:
        return np.arange(n_valid)
    return np.sort(np.random.default_rng(seed).choice(n_valid, size=size, replace=False))


def measure(path: Path, size: int, seed: int, device: str | torch.device = "cpu", epsilon: float = EPSILON) -> dict:
    """RankMe of a sample of a feature file's valid rows, with what it was computed from."""
    started = time.perf_counter()
    n_valid = int(read_labels(path).size)
    rows = sampled_rows(n_valid, size, seed)
    if rows.size == 0:
        raise FeaturesUnfitError(f"{path}: no valid rows (every image undecodable); re-extract the features.")
    loaded = read_features(path, rows)
    if not np.isfinite(loaded.features).all():
        raise FeaturesUnfitError(
            f"{path}: the features contain NaN or infinite values; delete them and extract them again "
            "(features.dtype: float32 if a model's activations overflow float16)."
        )
    read_s = time.perf_counter() - started
    value = effective_rank(loaded.features, epsilon, device)
    return {
        "model": loaded.metadata.get("model"), "dataset": loaded.metadata.get("dataset"),
        "split": loaded.metadata.get("split"), "effective_rank": value, "epsilon": epsilon,
        "n_rows": int(rows.size), "n_valid_rows": n_valid, "sample_seed": seed,
        "feature_dim": int(loaded.features.shape[1]), "max_rank": int(min(loaded.features.shape)),
        "features": str(path),
        "feature_metadata": {key: loaded.metadata[key] for key in FEATURE_METADATA if key in loaded.metadata},
        "timings": {"read_s": read_s, "svd_s": time.perf_counter() - started - read_s},
        "device": str(device), "versions": stack_versions(),
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog effective-rank", description=__doc__.split("\n")[0])
    parser.add_argument("--features", type=Path, required=True, help="a merged feature file (IN-1K's training split)")
    parser.add_argument("--output", type=Path, required=True, help="the result JSON")
    parser.add_argument("--rows", type=int, required=True, help="the sample's size (the paper: 25600)")
    parser.add_argument("--seed", type=int, required=True, help="the sample's seed")
    add_compute_options(parser, "the training features' singular values are computed")
    return parser


def effective_rank_command(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    setup_logging()
    torch.set_num_threads(max(1, args.threads))
    result = measure(args.features, args.rows, args.seed, resolve_device(args.device, "analyses.device"))
    write_json(args.output, result)
    log.info("%s: RankMe %.2f of at most %d (%d of %d rows, %.1f s)", result["model"], result["effective_rank"],
             result["max_rank"], result["n_rows"], result["n_valid_rows"], sum(result["timings"].values()))
    return 0
