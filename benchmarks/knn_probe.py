"""The k-NN probe against scikit-learn's KNeighborsClassifier on the same features.

Generated features (``--classes`` Gaussian concepts in ``--dim`` dimensions, overlapping so
that neighbours come from many classes), ``--train`` training and ``--test`` test rows. In
one run, for the k of ``--k``:

* ours: :func:`imagenet_cog.probes.knn.knn_scores`, every k in one pass (the neighbours of the
  largest k found block by block; each k votes from them), on ``--device``;
* scikit-learn as a user writes it: one ``KNeighborsClassifier(n_neighbors=k, metric="cosine",
  algorithm="brute", weights=exp((1 - d) / T))`` per k, ``predict`` and ``predict_proba``
  (for top-5), ``n_jobs=--threads``;
* scikit-learn's fastest way to every k: one ``kneighbors`` call for the largest k, the votes
  of each k counted from it in NumPy (what our pass does, on scikit-learn's search).

It prints the seconds of each, the ratios to ours, and each k's top-1 of both (equal when
the predictions are; ties as imagenet_cog/probes/knn.py names them).

    python benchmarks/knn_probe.py --train 50000 --test 10000 --dim 512 --classes 100 --threads 2
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from imagenet_cog.probes.knn import KnnSettings, knn_scores


def generated(args, device: torch.device) -> list[torch.Tensor]:
    """[train, train labels, test, test labels] drawn on ``device`` (IN-1K's size fits a GPU,
    not a float64 NumPy draw on the host)."""
    generator = torch.Generator(device=device).manual_seed(0)
    centres = torch.randn(args.classes, args.dim, generator=generator, device=device)
    drawn = []
    for rows in (args.train, args.test):
        labels = torch.randint(0, args.classes, (rows,), generator=generator, device=device)
        noise = torch.randn(rows, args.dim, generator=generator, device=device)
        drawn += [noise.mul_(args.noise).add_(centres[labels]), labels]
    return drawn


def ours(train, train_y, test, test_y, settings: KnnSettings, classes: int) -> tuple[float, dict]:
    """Normalising and scoring every k, from features on the device."""
    started = time.perf_counter()
    normalised = [tensor / tensor.norm(dim=1, keepdim=True) for tensor in (train, test)]
    scores = knn_scores(normalised[0], train_y, normalised[1], test_y, classes, settings)
    return time.perf_counter() - started, {entry["k"]: entry["test_top1"] for entry in scores}


def exponential(temperature: float):
    return lambda distances: np.exp((1.0 - distances) / temperature)


def sklearn_per_k(train, train_y, test, test_y, settings: KnnSettings, threads: int) -> tuple[float, dict]:
    from sklearn.neighbors import KNeighborsClassifier  # not on every GPU node: --skip-sklearn

    started = time.perf_counter()
    top1 = {}
    for k in settings.k:
        classifier = KNeighborsClassifier(n_neighbors=k, algorithm="brute", metric="cosine",
                                          weights=exponential(settings.temperature), n_jobs=threads).fit(train, train_y)
        top1[k] = 100.0 * float((classifier.predict(test) == test_y).mean())
        classifier.predict_proba(test)  # top-5 as a user gets it
    return time.perf_counter() - started, top1


def sklearn_one_search(train, train_y, test, test_y, settings: KnnSettings, classes: int, threads: int) -> tuple[float, dict]:
    from sklearn.neighbors import KNeighborsClassifier

    started = time.perf_counter()
    search = KNeighborsClassifier(n_neighbors=max(settings.k), algorithm="brute", metric="cosine", n_jobs=threads)
    distances, rows = search.fit(train, train_y).kneighbors(test)
    top1 = {}
    for k in settings.k:
        weights = np.exp((1.0 - distances[:, :k]) / settings.temperature)
        votes = np.zeros((test.shape[0], classes))
        np.add.at(votes, (np.arange(test.shape[0])[:, None], train_y[rows[:, :k]]), weights)
        top1[k] = 100.0 * float((votes.argmax(axis=1) == test_y).mean())
    return time.perf_counter() - started, top1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=int, default=50000)
    parser.add_argument("--test", type=int, default=10000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--noise", type=float,
                        help="within-class spread in units of the centres' (default 3 (dim / 128) ** 0.25: top-1 "
                             "between chance and 100%%, as nearest-neighbour margins grow with the square root of dim)")
    parser.add_argument("--k", type=int, nargs="+", default=[10, 20, 100, 200])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--skip-sklearn", action="store_true", help="ours only (e.g. IN-1K's size on a GPU)")
    args = parser.parse_args()
    args.noise = args.noise or 3.0 * (args.dim / 128) ** 0.25
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    settings = KnnSettings(k=tuple(args.k), reported_k=args.k[0])
    data = generated(args, device)
    print(f"{args.train} training x {args.test} test features, D={args.dim}, {args.classes} classes, k={args.k}, "
          f"{args.threads} threads, ours on {args.device}")
    ours(*(tensor[:1000] for tensor in data), settings, args.classes)  # warm-up: kernels loaded
    if device.type == "cuda":
        torch.cuda.synchronize()
    ours_s, ours_top1 = ours(*data, settings, args.classes)
    flops = 2.0 * args.dim * args.train * args.test
    print(f"ours (every k in one pass)              {ours_s:8.2f} s   {flops / ours_s / 1e12:.1f} TFLOP/s of similarities")
    if args.skip_sklearn:
        for k in settings.k:
            print(f"k={k:<4d} top-1 ours {ours_top1[k]:.2f}")
        return
    train, train_y, test, test_y = (tensor.cpu().numpy() for tensor in data)
    per_k_s, per_k_top1 = sklearn_per_k(train, train_y, test, test_y, settings, args.threads)
    one_s, one_top1 = sklearn_one_search(train, train_y, test, test_y, settings, args.classes, args.threads)
    print(f"scikit-learn, a classifier per k        {per_k_s:8.2f} s   {per_k_s / ours_s:6.1f}x ours")
    print(f"scikit-learn, one kneighbors + votes    {one_s:8.2f} s   {one_s / ours_s:6.1f}x ours")
    for k in settings.k:
        # equal: the same number of correct test images (the percentages are rounded alike)
        equal = len({round(top1[k] * args.test / 100) for top1 in (ours_top1, per_k_top1, one_top1)}) == 1
        print(f"k={k:<4d} top-1 ours {ours_top1[k]:.2f}  scikit-learn {per_k_top1[k]:.2f} / {one_top1[k]:.2f}"
              f"  {'equal' if equal else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
