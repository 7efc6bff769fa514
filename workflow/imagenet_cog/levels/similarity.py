"""WordNet similarities over the fragment spanned by ImageNet (paper supp. A.2, D.1).

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

The other measures of :data:`MEASURES` follow NLTK's definitions on the same graph (hypernym
and instance-hypernym edges) and the same information content:

* ``res``: IC(LCS); ``jcn``: 1 / (IC(c1) + IC(c2) - 2 IC(LCS)), 0 when either IC is 0 and
  1e300 when the distance is 0;
* ``path``: 1 / (d + 1), d the fewest edges from c1 up to a common ancestor and down to c2;
* ``wup``: 2 D / (d1 + d2 + 2 D), the subsumer being the common ancestor of greatest
  *minimum* depth (ties: c1 itself, else the smallest NLTK synset name, as NLTK picks it),
  D its maximum depth + 1 and d1, d2 the shortest paths from c1, c2 to it (as NLTK, a
  shortest path may climb above the subsumer and come back down).

In every measure, a concept's nearest reference is the smallest wnid among those reaching
its maximum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from imagenet_cog.core.naming import LIN, WORDNET_MEASURES
from imagenet_cog.levels.wordnet import NounGraph

MEASURES = (LIN, *WORDNET_MEASURES)
# What NLTK's jcn_similarity returns for a zero distance.
JCN_INFINITY = 1e300


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
        self._up_distances: dict[str, dict[str, int]] = {}
        self._min_depth: dict[str, int] = {}
        self._max_depth: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    def information_content(self, node: str) -> float:
        return float(self.ic[self.index[node]])

    def nltk_ic(self) -> dict:
        """The taxonomy as an information-content dict for NLTK's ``lin_similarity``."""
        counts = {int(node[1:]): float(count) for node, count in zip(self.nodes, self.counts.tolist())}
        counts[0] = float(len(self.nodes))
        return {"n": counts}

    def lcs_information_content(self, first: str, second: str) -> float:
        common = self.graph.ancestors(first) & self.graph.ancestors(second)
        return max(self.information_content(a) for a in common) if common else 0.0

    def lin(self, first: str, second: str) -> float:
        """Lin similarity of one pair (the loop the vectorised version must agree with)."""
        lcs_ic = self.lcs_information_content(first, second)
        return 2.0 * lcs_ic / (self.information_content(first) + self.information_content(second))

    def res(self, first: str, second: str) -> float:
        return self.lcs_information_content(first, second)

    def jcn(self, first: str, second: str) -> float:
        return _jcn(self.information_content(first), self.information_content(second),
                    self.lcs_information_content(first, second))

    def up_distances(self, node: str) -> dict[str, int]:
        """Fewest edges from ``node`` up to each of its ancestors (itself at 0)."""
        known = self._up_distances.get(node)
        if known is None:
            known, frontier, step = {node: 0}, [node], 0
            while frontier:
                step += 1
                frontier = [p for n in frontier for p in self.graph.parents(n) if p not in known]
                for parent in frontier:
                    known.setdefault(parent, step)
            self._up_distances[node] = known
        return known

    def depth(self, node: str, longest: bool) -> int:
        """Edges on the shortest (or longest) path from ``node`` up to a root."""
        cache = self._max_depth if longest else self._min_depth
        pick = max if longest else min
        stack = [node]
        while stack:  # iterative post-order: deep chains never hit the recursion limit
            current = stack[-1]
            pending = [p for p in self.graph.parents(current) if p not in cache]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            parents = self.graph.parents(current)
            cache[current] = 1 + pick(cache[p] for p in parents) if parents else 0
        return cache[node]

    def shortest_path(self, first: str, second: str) -> int | None:
        """Fewest edges from ``first`` up to a common ancestor and down to ``second``."""
        up_first, up_second = self.up_distances(first), self.up_distances(second)
        common = up_first.keys() & up_second.keys()
        return min(up_first[a] + up_second[a] for a in common) if common else None

    def path(self, first: str, second: str) -> float:
        distance = self.shortest_path(first, second)
        return 0.0 if distance is None else 1.0 / (distance + 1)

    def wup_subsumer(self, first: str, second: str, names: Mapping[str, str] | None = None) -> str | None:
        common = self.graph.ancestors(first) & self.graph.ancestors(second)
        if not common:
            return None
        deepest = max(self.depth(a, longest=False) for a in common)
        lowest = [a for a in common if self.depth(a, longest=False) == deepest]
        if first in lowest:
            return first
        return min(lowest, key=lambda a: (names or {}).get(a, a))

    def wup(self, first: str, second: str, names: Mapping[str, str] | None = None) -> float:
        """Wu-Palmer similarity of one pair; ``names``: NLTK synset names for its tie-break."""
        subsumer = self.wup_subsumer(first, second, names)
        if subsumer is None:
            return 0.0
        depth = self.depth(subsumer, longest=True) + 1
        # As NLTK: the shortest path to the subsumer, which may climb above it and come back.
        return 2.0 * depth / (self.shortest_path(first, subsumer) + self.shortest_path(second, subsumer) + 2 * depth)

    def pair(self, measure: str, first: str, second: str, names: Mapping[str, str] | None = None) -> float:
        if measure == "wup":
            return self.wup(first, second, names)
        return getattr(self, measure)(first, second)


@dataclass
class NearestReference:
    """For each concept: its highest similarity to a reference set, and that reference."""

    similarity: np.ndarray  # float64, one per concept
    nearest: list[str]  # the reference reaching it; the smallest wnid among ties


def _jcn(first_ic: float, second_ic: float, lcs_ic: float) -> float:
    if first_ic == 0 or second_ic == 0:
        return 0.0
    distance = first_ic + second_ic - 2 * lcs_ic
    return JCN_INFINITY if distance == 0 else 1 / distance


def max_lin_similarity(
    taxonomy: Taxonomy, concepts: Sequence[str], references: Sequence[str], chunk_size: int = 512
) -> NearestReference:
    """Lin similarity of every concept to its most similar reference concept."""
    return max_similarity(taxonomy, concepts, references, "lin", chunk_size=chunk_size)


def max_similarity(
    taxonomy: Taxonomy,
    concepts: Sequence[str],
    references: Sequence[str],
    measure: str = "lin",
    names: Mapping[str, str] | None = None,
    chunk_size: int = 512,
) -> NearestReference:
    """``measure`` of every concept to its most similar reference concept (``names``: the
    NLTK synset names that break Wu-Palmer's subsumer ties; the wnid where absent)."""
    if measure not in MEASURES:
        raise ValueError(f"unknown similarity measure {measure!r}; known: {', '.join(MEASURES)}")
    missing = [c for c in (*concepts, *references) if c not in taxonomy.index]
    if missing:
        raise KeyError(f"{len(missing)} concepts are outside the taxonomy, e.g. {missing[0]}")
    references = sorted(references)  # argmax takes the first maximum: the smallest wnid
    if measure in ("lin", "res", "jcn"):
        rows = _information_content_rows(taxonomy, concepts, references, measure, chunk_size)
    else:
        rows = _path_rows(taxonomy, concepts, references, measure, names or {}, chunk_size)
    similarity = np.empty(len(concepts))
    nearest_index = np.empty(len(concepts), dtype=np.int64)
    for start, values in rows:
        best = np.argmax(values, axis=1)
        nearest_index[start : start + len(values)] = best
        similarity[start : start + len(values)] = values[np.arange(len(values)), best]
    return NearestReference(similarity, [references[i] for i in nearest_index.tolist()])


def _information_content_rows(taxonomy, concepts, references, measure, chunk_size):
    """Chunks of the [concept, reference] matrix of an IC measure: (first row, values)."""
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
    for start in range(0, len(concepts), chunk_size):
        stop = min(start + chunk_size, len(concepts))
        lcs_ic = group_lcs_ic[group_of[start:stop]]
        first_ic, second_ic = concept_ic[start:stop, None], reference_ic[None, :]
        if measure == "lin":
            values = 2.0 * lcs_ic / (first_ic + second_ic)
        elif measure == "res":
            values = lcs_ic
        else:
            distance = first_ic + second_ic - 2 * lcs_ic
            with np.errstate(divide="ignore"):
                values = np.where(distance == 0, JCN_INFINITY, 1 / distance)
            values = np.where((first_ic == 0) | (second_ic == 0), 0.0, values)
        yield start, values


def _path_rows(taxonomy, concepts, references, measure, names, chunk_size):
    """Chunks of the [concept, reference] matrix of ``path`` or ``wup``: per concept, a
    gather over the rows of its ancestors among the nodes above some reference."""
    shared_nodes = sorted(taxonomy.graph.closure(references))
    shared_row = {node: row for row, node in enumerate(shared_nodes)}
    unreachable = np.iinfo(np.int64).max // 4
    up_reference = np.full((len(shared_nodes), len(references)), unreachable, dtype=np.int64)
    for column, reference in enumerate(references):
        for ancestor, distance in taxonomy.up_distances(reference).items():
            up_reference[shared_row[ancestor], column] = distance
    if measure == "wup":
        min_depth = np.array([taxonomy.depth(n, longest=False) for n in shared_nodes])
        max_depth = np.array([taxonomy.depth(n, longest=True) for n in shared_nodes])
        # The subsumer: greatest minimum depth, then the smallest name (a rank per node).
        order = sorted(range(len(shared_nodes)), key=lambda r: (-min_depth[r], names.get(shared_nodes[r], shared_nodes[r])))
        preference = np.empty(len(shared_nodes), dtype=np.float64)
        preference[order] = np.arange(len(shared_nodes))
        first_of_depth = {}
        for rank, row in enumerate(order):
            first_of_depth.setdefault(int(min_depth[row]), rank)
        candidate = np.where(up_reference < unreachable, preference[:, None], np.inf)
        reference_to_subsumer = np.zeros_like(up_reference)
        for column, reference in enumerate(references):
            for ancestor in taxonomy.graph.ancestors(reference):
                reference_to_subsumer[shared_row[ancestor], column] = taxonomy.shortest_path(reference, ancestor)
    for start in range(0, len(concepts), chunk_size):
        chunk = concepts[start : start + chunk_size]
        values = np.zeros((len(chunk), len(references)))
        for offset, concept in enumerate(chunk):
            up = {a: d for a, d in taxonomy.up_distances(concept).items() if a in shared_row}
            if not up:
                continue
            rows = np.array([shared_row[a] for a in up])
            up_concept = np.array(list(up.values()), dtype=np.int64)
            through = up_concept[:, None] + up_reference[rows]
            if measure == "path":
                shortest = through.min(axis=0)
                values[offset] = np.where(shortest < unreachable, 1.0 / (shortest + 1), 0.0)
                continue
            choice = candidate[rows]
            if concept in shared_row:  # NLTK prefers the concept itself among equal depths
                own = rows.tolist().index(shared_row[concept])
                mine = choice[own] < np.inf
                choice[own, mine] = first_of_depth[int(min_depth[shared_row[concept]])] - 0.5
            pick = np.argmin(choice, axis=0)
            found = np.isfinite(choice[pick, np.arange(len(references))])
            subsumers = rows[pick]
            depth = max_depth[subsumers] + 1
            concept_to_subsumer = {row: taxonomy.shortest_path(concept, shared_nodes[row]) for row in set(subsumers.tolist())}
            total = (
                np.array([concept_to_subsumer[row] for row in subsumers.tolist()])
                + reference_to_subsumer[subsumers, np.arange(len(references))]
                + 2 * depth
            )
            values[offset] = np.where(found, 2.0 * depth / total, 0.0)
        yield start, values
