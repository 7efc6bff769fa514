"""Agreement between models' clusterings (Laina et al. 2020, Sec. 5.1): the adjusted (normalised)
mutual information between the k-means test assignments of every pair of models, per
dataset, as a symmetric matrix (scikit-learn's ``adjusted_mutual_info_score``). One more
row and column, ``concepts``, compares each clustering with the concept labels.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd
from sklearn.metrics import adjusted_mutual_info_score

from imagenet_cog.core.io import atomic_output, read_tsv

from .common import AnalysisInputError

LABELS_ROW = "concepts"


def read_assignments(path: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    rows = read_tsv(path)
    return ([row["path"] for row in rows], np.array([int(row["label"]) for row in rows]),
            np.array([int(row["cluster"]) for row in rows]))


def _adjusted_nmi(pair: tuple[np.ndarray, np.ndarray]) -> float:
    return float(adjusted_mutual_info_score(*pair))


def agreement_matrix(assignments: dict[str, str], processes: int = 1) -> pd.DataFrame:
    """Adjusted NMI of every pair of the given (model -> assignments TSV), plus the labels.

    A pair of 50,000 test images in 1000 clusters takes ~5 s (the expected mutual
    information dominates), so the pairs are spread over ``processes`` processes.
    """
    partitions, reference = {}, None
    for model, path in assignments.items():
        paths, labels, clusters = read_assignments(path)
        if reference is None:
            reference = (path, paths)
            partitions[LABELS_ROW] = labels
        elif paths != reference[1]:
            raise AnalysisInputError(
                f"{path} and {reference[0]} list different test images; both models' features of "
                f"this dataset must come from the same split table (re-run their features and k-means)."
            )
        partitions[model] = clusters
    names = [*assignments, LABELS_ROW]
    matrix = pd.DataFrame(np.eye(len(names)), index=names, columns=names)
    pairs = [(first, second) for row, first in enumerate(names) for second in names[row + 1 :]]
    arguments = [(partitions[first], partitions[second]) for first, second in pairs]
    if processes > 1 and len(pairs) > 1:
        with ProcessPoolExecutor(min(processes, len(pairs))) as pool:
            scores = list(pool.map(_adjusted_nmi, arguments))
    else:
        scores = [_adjusted_nmi(pair) for pair in arguments]
    for (first, second), score in zip(pairs, scores):
        matrix.loc[first, second] = matrix.loc[second, first] = score
    return matrix


def agreement_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="analyses-agreement", description="Adjusted NMI between models' k-means clusterings.")
    parser.add_argument("--models", nargs="+", required=True)
    parser.add_argument("--assignments", nargs="+", required=True, help="one TSV per model, in --models order")
    parser.add_argument("--output", required=True, help="matrix CSV")
    parser.add_argument("--threads", type=int, default=1, help="processes scoring pairs")
    args = parser.parse_args(argv)
    if len(args.models) != len(args.assignments):
        parser.error("give one --assignments file per --models entry")
    matrix = agreement_matrix(dict(zip(args.models, args.assignments)), args.threads)
    with atomic_output(args.output) as temporary:
        matrix.to_csv(temporary, index_label="model", float_format="%.6f")
    return 0
