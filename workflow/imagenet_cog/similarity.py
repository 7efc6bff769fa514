"""Lin similarity over the WordNet fragment spanned by ImageNet (paper supp. A.2).

The taxonomy is every IN-21K and IN-1K concept plus all its ancestors, on every hypernym
path, instance-hypernym edges included. A node's probability is the share of taxonomy
nodes at or below it, so p(entity) = 1, and IC(c) = -log p(c). For two concepts

    lin(c1, c2) = 2 IC(LCS) / (IC(c1) + IC(c2))

where the LCS is the common ancestor with the *highest IC* (as NLTK's ``lin_similarity``
picks it), which is not always the deepest one.

The similarity of many concepts to a fixed reference set (IN-1K) is computed at once:
for each reference r and each taxonomy node a, B[a, r] = IC(a) if a is an ancestor of r
else 0. The LCS IC of (c, r) is then the maximum of B over the rows of c's ancestors,
a gather and a segmented maximum in numpy, done once per distinct ancestor set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from imagenet_cog.wordnet import NounGraph


class Taxonomy:
    """The WordNet fragment above a set of concepts, with each node's information content."""

    def __init__(self, graph: NounGraph, concepts: Sequence[str]):
        self.graph = graph
        self.nodes = sorted(graph.closure(concepts))
        self.index = {node: i for i, node in enumerate(self.nodes)}
        below = np.zeros(len(self.nodes), dtype=np.int64)
        for node in self.nodes:
            for ancestor in graph.ancestors(node):
                below[self.index[ancestor]] += 1
        self.counts = below
        total = len(self.nodes)
        # math.log, as NLTK uses, so that values match its lin_similarity to the last bit.
        self.ic = np.array([-math.log(count / total) for count in below.tolist()])

    def __len__(self) -> int:
        return len(self.nodes)

    def information_content(self, node: str) -> float:
        return float(self.ic[self.index[node]])

    def nltk_ic(self) -> dict:
        """The taxonomy as an information-content dict for NLTK's ``lin_similarity``."""
        counts = {int(node[1:]): float(count) for node, count in zip(self.nodes, self.counts.tolist())}
        counts[0] = float(len(self.nodes))
        return {"n": counts}

    def lin(self, first: str, second: str) -> float:
        """Lin similarity of one pair (the loop the vectorised version must agree with)."""
        common = self.graph.ancestors(first) & self.graph.ancestors(second)
        lcs_ic = max(self.information_content(a) for a in common) if common else 0.0
        return 2.0 * lcs_ic / (self.information_content(first) + self.information_content(second))


@dataclass
class NearestReference:
    """For each concept: its highest similarity to a reference set, and that reference."""

    similarity: np.ndarray  # float64, one per concept
    nearest: list[str]  # the reference reaching it; the smallest wnid among ties


def max_lin_similarity(
    taxonomy: Taxonomy, concepts: Sequence[str], references: Sequence[str], chunk_size: int = 512
) -> NearestReference:
    """Lin similarity of every concept to its most similar reference concept."""
    missing = [c for c in (*concepts, *references) if c not in taxonomy.index]
    if missing:
        raise KeyError(f"{len(missing)} concepts are outside the taxonomy, e.g. {missing[0]}")
    references = sorted(references)  # argmax takes the first maximum: the smallest wnid
    ic = taxonomy.ic
    reference_ic = ic[[taxonomy.index[r] for r in references]]

    # Only nodes above some reference can be a common ancestor; row 0 stands for "none".
    shared_nodes = sorted(taxonomy.graph.closure(references))
    shared_row = {node: row + 1 for row, node in enumerate(shared_nodes)}
    ancestor_ic = np.zeros((len(shared_nodes) + 1, len(references)))
    for column, reference in enumerate(references):
        for ancestor in taxonomy.graph.ancestors(reference):
            ancestor_ic[shared_row[ancestor], column] = ic[taxonomy.index[ancestor]]

    # Concepts with the same ancestors among the shared nodes have the same LCS with every
    # reference (5,146 eligible concepts have 878 such sets): compute each set once.
    groups: dict[frozenset[str], int] = {}
    group_of = np.array(
        [groups.setdefault(frozenset(taxonomy.graph.ancestors(c) & shared_row.keys()), len(groups)) for c in concepts],
        dtype=np.int64,
    )
    group_lcs_ic = np.empty((len(groups), len(references)))
    group_list = list(groups)
    for start in range(0, len(group_list), chunk_size):
        rows, segment_starts = [], []
        for ancestors in group_list[start : start + chunk_size]:
            segment_starts.append(len(rows))
            rows.extend(sorted(shared_row[a] for a in ancestors) or [0])
        group_lcs_ic[start : start + len(segment_starts)] = np.maximum.reduceat(ancestor_ic[rows], segment_starts, axis=0)

    concept_ic = ic[[taxonomy.index[c] for c in concepts]]
    similarity = np.empty(len(concepts))
    nearest_index = np.empty(len(concepts), dtype=np.int64)
    for start in range(0, len(concepts), chunk_size):
        stop = min(start + chunk_size, len(concepts))
        lin = 2.0 * group_lcs_ic[group_of[start:stop]] / (concept_ic[start:stop, None] + reference_ic[None, :])
        best = np.argmax(lin, axis=1)
        nearest_index[start:stop] = best
        similarity[start:stop] = lin[np.arange(stop - start), best]
    return NearestReference(similarity, [references[i] for i in nearest_index.tolist()])
