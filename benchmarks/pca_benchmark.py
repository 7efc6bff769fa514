"""Principal components: ours (covariance + eigh with torch) against scikit-learn's PCA.

Both fit all components of the same generated features (n x D, float32); the script prints
the seconds of each, the ratio, and the largest difference of the explained variances.

    python benchmarks/pca_benchmark.py                 # n=20000, D=1024: seconds on 2 cores
    python benchmarks/pca_benchmark.py --count 200000 --dim 2048 --device cuda
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sklearn.decomposition import PCA
from threadpoolctl import threadpool_limits

from imagenet_cog.probes.pca import fit_pca


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    features = (rng.standard_normal((args.count, args.dim), dtype=np.float32)
                * np.linspace(3.0, 0.1, args.dim, dtype=np.float32))
    started = time.perf_counter()
    ours = fit_pca(features, args.device)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    ours_s = time.perf_counter() - started
    with threadpool_limits(args.threads):
        started = time.perf_counter()
        reference = PCA().fit(features)
        sklearn_s = time.perf_counter() - started
    solver = getattr(reference, "_fit_svd_solver", reference.svd_solver)
    difference = np.abs(ours.explained_variance - reference.explained_variance_).max()
    print(f"{args.count} x {args.dim}, {args.threads} thread(s): ours ({args.device}) {ours_s:.2f} s, "
          f"sklearn PCA ({solver}, CPU) {sklearn_s:.2f} s, ratio {sklearn_s / ours_s:.1f}x; "
          f"largest explained-variance difference {difference:.2e}")


if __name__ == "__main__":
    main()
