"""Principal components of a dataset's training features, for PCA + linear probes (CoG preprint C.2).

The CoG preprint: the first version of "Concept Generalization in Visual Representation
Learning" (arXiv v1, 2020); the ICCV 2021 paper dropped this analysis.

The paper fits scikit-learn's PCA to all training features of a dataset (N = All) and
projects train and test onto the first d components, d in 32 ... 1024, before its LogReg
protocol. Here the components are computed once per model x dataset, all min(n, D) of them,
and every d and seed reads the first d: adding a d never recomputes them.

The computation is scikit-learn's (centred, not whitened; components are the eigenvectors
of the sample covariance, ddof=1, by decreasing eigenvalue; signs as sklearn's
``svd_flip``), done as a covariance matrix X^T X accumulated over row chunks in float64 and
one symmetric eigendecomposition of that D x D matrix, with torch on the probe device. For
n >> D (ImageNet: 1.28M x 2048) this is one pass of large matrix products, far cheaper than
the SVD of the n x D data (``benchmarks/README.md`` compares the two).

Normalisation: the components are fitted to the raw features; projected features are then
L2-normalised by the linear probe exactly as unprojected ones are (the paper applies its
LogReg protocol, which normalises its input, to the compressed features).

HDF5 file (``Layout.pca_components``): ``mean`` [D], ``components`` [k, D] (rows),
``explained_variance`` [k], ``explained_variance_ratio`` [k]; attributes ``n_samples``,
``feature_dim``.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass

import h5py
import numpy as np
import torch

from imagenet_cog.core.command_line import add_compute_options, setup_logging
from imagenet_cog.core.device import resolve_device
from imagenet_cog.core.io import atomic_output
from imagenet_cog.features.store import read_features

log = logging.getLogger("imagenet_cog.probes.pca")


@dataclass
class PrincipalComponents:
    mean: np.ndarray
    components: np.ndarray
    explained_variance: np.ndarray
    explained_variance_ratio: np.ndarray
    n_samples: int

    def project(self, features: np.ndarray, dim: int, chunk: int = 65536) -> np.ndarray:
        """``features`` [n, D] centred and projected onto the first ``dim`` components, float32."""
        basis = self.components[:dim].T.astype(np.float32)
        mean = self.mean.astype(np.float32)
        projected = np.empty((features.shape[0], dim), dtype=np.float32)
        for start in range(0, features.shape[0], chunk):
            rows = np.asarray(features[start : start + chunk], dtype=np.float32) - mean
            projected[start : start + chunk] = rows @ basis
        return projected


def fit_pca(features: np.ndarray, device: str = "cpu", chunk: int = 65536) -> PrincipalComponents:
    """All min(n, D) principal components of ``features`` [n, D] (see the module doc)."""
    count, dim = features.shape
    if count < 2:
        raise ValueError(f"PCA needs at least 2 training samples, not {count}")
    target = torch.device(device)
    total = torch.zeros(dim, dtype=torch.float64, device=target)
    for start in range(0, count, chunk):
        total += torch.from_numpy(np.asarray(features[start : start + chunk])).to(target, torch.float64).sum(dim=0)
    mean = total / count
    scatter = torch.zeros(dim, dim, dtype=torch.float64, device=target)
    for start in range(0, count, chunk):
        rows = torch.from_numpy(np.asarray(features[start : start + chunk])).to(target, torch.float64) - mean
        scatter.addmm_(rows.t(), rows)
    eigenvalues, eigenvectors = torch.linalg.eigh(scatter / (count - 1))
    kept = min(count, dim)
    order = torch.argsort(eigenvalues, descending=True)[:kept]
    variance = eigenvalues[order].clamp_min(0)
    components = eigenvectors[:, order].t()
    # sklearn's svd_flip (u-based): the largest-magnitude coordinate of each component's
    # projections is positive; on the components themselves, the largest |entry| is
    # positive, which fixes the same sign up to ties and is independent of n
    largest = components.abs().argmax(dim=1)
    signs = torch.sign(components.gather(1, largest.view(-1, 1)))
    components = components * signs
    total_variance = torch.diagonal(scatter).sum() / (count - 1)
    return PrincipalComponents(
        mean=mean.cpu().numpy(),
        components=components.cpu().numpy(),
        explained_variance=variance.cpu().numpy(),
        explained_variance_ratio=(variance / total_variance).cpu().numpy(),
        n_samples=count,
    )


def write_components(path: str, pca: PrincipalComponents) -> None:
    with atomic_output(path) as temporary, h5py.File(temporary, "w") as handle:
        handle["mean"] = pca.mean
        handle["components"] = pca.components
        handle["explained_variance"] = pca.explained_variance
        handle["explained_variance_ratio"] = pca.explained_variance_ratio
        handle.attrs["n_samples"] = pca.n_samples
        handle.attrs["feature_dim"] = pca.mean.shape[0]


def read_components(path: str) -> PrincipalComponents:
    with h5py.File(path, "r") as handle:
        return PrincipalComponents(
            mean=handle["mean"][()],
            components=handle["components"][()],
            explained_variance=handle["explained_variance"][()],
            explained_variance_ratio=handle["explained_variance_ratio"][()],
            n_samples=int(handle.attrs["n_samples"]),
        )


def check_dim(dim: int, pca: PrincipalComponents, where: str) -> None:
    """A d the components cannot give is a configuration error naming probes.pca_dims."""
    if not 0 < dim <= pca.components.shape[0]:
        raise ValueError(
            f"{where}: probes.pca_dims asks for d={dim}, but {pca.n_samples} training samples of "
            f"width {pca.mean.shape[0]} give at most {pca.components.shape[0]} principal components; "
            f"remove {dim} from probes.pca_dims in config.yaml."
        )


def main(argv: list[str]) -> int:
    """``pca-components``: principal components of one training feature file."""
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog pca-components", description=__doc__.split("\n")[0])
    parser.add_argument("--train", required=True, help="training features (HDF5)")
    parser.add_argument("--output", required=True, help="components (HDF5)")
    add_compute_options(parser, "the principal components are fitted")
    args = parser.parse_args(argv)
    setup_logging()
    torch.set_num_threads(max(1, args.threads))
    train = read_features(args.train)
    pca = fit_pca(train.features, str(resolve_device(args.device, "probes.device")))
    write_components(args.output, pca)
    log.info("%s: %d components of %d x %d features", args.output, pca.components.shape[0], *train.features.shape)
    return 0
