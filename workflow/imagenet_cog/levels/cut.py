"""Eligible unseen concepts, their ranking by similarity to IN-1K, and the levels L1..LN.

Paper Sec. 3.2-3.3 and supplementary A.1. The filters run in the paper's order, each on
what the previous one left (another order gives another count):

1. the IN-21K concepts (Fall 2011: 21,841)
2. minus the IN-1K concepts (20,842)
3. minus every ancestor of an IN-1K concept (20,081)
4. minus the subtrees of ``concepts.excluded_subtrees`` (person.n.01), instance edges
   included (17,254)
5. minus every concept that is an ancestor of another remaining one: leaves only (14,248)
6. minus concepts with fewer than ``levels.min_images`` images (782: 5,216)
7. minus the 70 concepts discarded by hand (supplementary Table 2: 5,146)

Ranking: by decreasing sim_IN1K, ties broken by increasing wnid. sim_IN1K takes few
distinct values, so ties straddle level boundaries; ``level_summary.tsv`` counts them.

Levels: L levels of K concepts spread over the N ranked concepts with even gaps; level k
(0-based) starts at rank round_half_even(k (N - K) / (L - 1)), which for N = 5,146 gives
0, 1036, 2073, 3110, 4146. The concepts between two levels form the gaps gap1..gap(L-1).
"""

from __future__ import annotations

import argparse
import pickle
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Sequence

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.io import read_tsv, write_lines, write_tsv
from imagenet_cog.core.naming import gap_name, level_name, level_names
from imagenet_cog.core.pickles import read_data_pickle
from imagenet_cog.levels.concepts import WNID, ConceptError, read_wnids
from imagenet_cog.levels.similarity import Taxonomy, max_lin_similarity
from imagenet_cog.levels.wordnet import NounGraph, load_noun_graph


class LevelError(ExplainedError, ValueError):
    """The levels cannot be built as configured."""


@dataclass
class Step:
    description: str
    remaining: list[str]


def eligible_concepts(
    graph: NounGraph,
    in21k: Sequence[str],
    in1k: Sequence[str],
    image_counts: dict[str, int],
    min_images: int,
    excluded_subtrees: Sequence[str],
    discarded: Sequence[str],
) -> list[Step]:
    """The filter steps of the module docstring; the last step's list is the eligible set."""
    steps = [Step("IN-21K concepts", sorted(in21k))]

    def keep(description, predicate):
        steps.append(Step(description, [c for c in steps[-1].remaining if predicate(c)]))

    seen = set(in1k)
    keep("minus the IN-1K concepts", lambda c: c not in seen)
    above_seen = graph.closure(in1k)
    keep("minus ancestors of IN-1K concepts", lambda c: c not in above_seen)
    excluded = set(excluded_subtrees)
    names = ", ".join(f"{w} ({graph.name(w).split(', ')[0]})" if w in graph else w for w in excluded_subtrees)
    keep(f"minus the subtrees of {names or 'no concept'}", lambda c: not (graph.ancestors(c) & excluded))
    current = steps[-1].remaining
    has_descendant = set()
    for concept in current:
        has_descendant |= graph.ancestors(concept) - {concept}
    keep("leaves only: minus ancestors of other remaining concepts", lambda c: c not in has_descendant)
    keep(f"with at least {min_images} images", lambda c: image_counts.get(c, 0) >= min_images)
    dropped = set(discarded)
    keep(f"minus the {len(dropped)} concepts discarded by hand", lambda c: c not in dropped)
    return steps


@dataclass
class RankedConcept:
    wnid: str
    similarity: float
    nearest: str


def rank_concepts(taxonomy: Taxonomy, eligible: Sequence[str], in1k: Sequence[str]) -> list[RankedConcept]:
    """Eligible concepts by decreasing Lin similarity to IN-1K, ties by increasing wnid."""
    nearest = max_lin_similarity(taxonomy, list(eligible), list(in1k))
    ranked = [RankedConcept(w, float(s), n) for w, s, n in zip(eligible, nearest.similarity.tolist(), nearest.nearest)]
    ranked.sort(key=lambda r: (-r.similarity, r.wnid))
    return ranked


def level_starts(total: int, num_levels: int, per_level: int) -> list[int]:
    """First rank of each level: even gaps, the first level at the top, the last at the bottom."""
    if num_levels * per_level > total:
        raise LevelError(
            f"{num_levels} levels of {per_level} concepts need {num_levels * per_level} eligible concepts but "
            f"only {total} are eligible; lower levels.num_levels, levels.concepts_per_level or levels.min_images."
        )
    if num_levels == 1:
        return [0]
    # round() on a Fraction rounds half to even, exactly.
    return [round(Fraction(k * (total - per_level), num_levels - 1)) for k in range(num_levels)]


def assign_levels(total: int, num_levels: int, per_level: int) -> list[str]:
    """The level (l1..) or gap (gap1..) of each rank."""
    labels = []
    starts = level_starts(total, num_levels, per_level)
    for k, start in enumerate(starts):
        if k:
            labels.extend([gap_name(k)] * (start - len(labels)))
        labels.extend([level_name(k + 1)] * per_level)
    return labels


def load_published_levels(path: str | Path, num_levels: int, per_level: int) -> list[list[str]]:
    """The authors' level pickle: a list of ``num_levels`` lists of ``per_level`` wnids."""
    try:
        levels = read_data_pickle(path)
    except FileNotFoundError:
        raise LevelError(f"levels.published_levels = {str(path)!r} does not exist; fix the path.") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as error:
        raise LevelError(f"{path} is not a readable pickle ({error}); levels.published_levels must be the authors' level file.") from None
    if isinstance(levels, (str, bytes, dict)) or not hasattr(levels, "__len__"):
        raise LevelError(f"{path}: expected a list of level lists of wnids, got a {type(levels).__name__}.")
    levels = [list(level) for level in levels]
    if len(levels) != num_levels:
        raise LevelError(f"{path} holds {len(levels)} levels but levels.num_levels is {num_levels}; set it to {len(levels)}.")
    for k, level in enumerate(levels, 1):
        bad = [w for w in level if not isinstance(w, str) or not WNID.match(w)]
        if bad:
            raise LevelError(f"{path}: level {k} holds entries that are not wnids, e.g. {bad[0]!r}.")
        if len(level) != per_level:
            raise LevelError(
                f"{path}: level {k} holds {len(level)} concepts but levels.concepts_per_level is {per_level}; "
                f"set it to {len(level)}."
            )
    every = [w for level in levels for w in level]
    if len(set(every)) != len(every):
        raise LevelError(f"{path}: some wnids appear twice across levels; levels must be disjoint.")
    return levels


@dataclass
class LevelSummary:
    level: str
    size: int
    first_rank: int | None
    last_rank: int | None
    sim_max: float | None
    sim_min: float | None
    tied_outside_top: int
    tied_outside_bottom: int
    unranked: int


def summarise_levels(ranked: Sequence[RankedConcept], labels: Sequence[str], level_names: Sequence[str]) -> list[LevelSummary]:
    """Per level: its rank span and similarity range, and how many concepts outside it share
    the similarity of its top or bottom member (ties the wnid tie-break decided)."""
    by_similarity: dict[float, list[int]] = {}
    for rank, concept in enumerate(ranked):
        by_similarity.setdefault(concept.similarity, []).append(rank)
    summaries = []
    for name in level_names:
        ranks = [rank for rank, label in enumerate(labels) if label == name]
        if not ranks:
            summaries.append(LevelSummary(name, 0, None, None, None, None, 0, 0, 0))
            continue
        inside = set(ranks)
        top, bottom = ranked[ranks[0]].similarity, ranked[ranks[-1]].similarity
        tied_top = sum(1 for r in by_similarity[top] if r not in inside)
        tied_bottom = sum(1 for r in by_similarity[bottom] if r not in inside) if bottom != top else 0
        summaries.append(LevelSummary(name, len(ranks), ranks[0] + 1, ranks[-1] + 1, top, bottom, tied_top, tied_bottom, 0))
    return summaries


def _format(value) -> str:
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def cut_levels_command(argv: list[str]) -> int:
    parser = _cut_levels_parser()
    args = parser.parse_args(argv)

    graph = load_noun_graph(args.wordnet)
    catalogue = read_tsv(args.catalogue)
    names = {row["wnid"]: row["name"] for row in catalogue}
    in21k = [row["wnid"] for row in catalogue if row["in21k"] == "1"]
    in1k = [row["wnid"] for row in catalogue if row["in1k"] == "1"]
    counts = {row["wnid"]: int(row["n_images"]) for row in read_tsv(args.image_counts)}
    names_of_levels = level_names(args.num_levels)
    if len(args.level_outputs) != args.num_levels:
        parser.error(f"--level-outputs needs {args.num_levels} files, one per level")
    try:
        discarded = read_wnids(args.discarded)
        unknown = [w for w in args.excluded_subtrees if w not in graph]
        if unknown:
            raise LevelError(f"concepts.excluded_subtrees: {unknown[0]} is not a WordNet 3.0 noun synset.")
        steps = eligible_concepts(graph, in21k, in1k, counts, args.min_images, args.excluded_subtrees, discarded)
        eligible = steps[-1].remaining
        taxonomy = Taxonomy(graph, [*in21k, *in1k])
        ranked = rank_concepts(taxonomy, eligible, in1k)
        if args.published_levels:
            levels = load_published_levels(args.published_levels, args.num_levels, args.concepts_per_level)
            unknown = sorted(w for level in levels for w in level if w not in names)
            if unknown:
                raise LevelError(f"{args.published_levels}: {len(unknown)} wnids are not IN-21K concepts, e.g. {unknown[0]}.")
            membership = {w: name for name, level in zip(names_of_levels, levels) for w in level}
            labels = [membership.get(r.wnid, "-") for r in ranked]
        else:
            labels = assign_levels(len(ranked), args.num_levels, args.concepts_per_level)
            levels = [[r.wnid for r, label in zip(ranked, labels) if label == name] for name in names_of_levels]
    except (LevelError, ConceptError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1

    summaries = _write_tables(args, steps, ranked, labels, levels, names, names_of_levels)
    write_lines(args.in1k_output, sorted(in1k))
    for path, level in zip(args.level_outputs, levels):
        write_lines(path, level)

    _print_report(steps, ranked, taxonomy, summaries)
    return 0


def _cut_levels_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog cut-levels",
        description="Filter eligible unseen concepts, rank them by Lin similarity to IN-1K and cut the levels.",
    )
    parser.add_argument("--wordnet", required=True, help="NLTK data folder from wordnet-corpus")
    parser.add_argument("--catalogue", required=True, help="concepts.tsv from concept-catalogue")
    parser.add_argument("--image-counts", required=True, help="image_counts.tsv from image-counts")
    parser.add_argument("--discarded", required=True, help="wnids removed by hand, one a line")
    parser.add_argument("--excluded-subtrees", nargs="*", default=[], help="wnids whose whole subtree is ineligible")
    parser.add_argument("--min-images", type=int, required=True)
    parser.add_argument("--num-levels", type=int, required=True)
    parser.add_argument("--concepts-per-level", type=int, required=True)
    parser.add_argument("--similarity", choices=["lin"], default="lin")
    parser.add_argument("--published-levels", default=None, help="the authors' level pickle: use its levels instead of cutting")
    parser.add_argument("--eligibility-report", required=True)
    parser.add_argument("--ranking", required=True)
    parser.add_argument("--summary", required=True, help="per-level rank span, similarity range and boundary ties")
    parser.add_argument("--in1k-output", required=True, help="the IN-1K wnids, one a line")
    parser.add_argument("--level-outputs", nargs="+", required=True, help="one wnid file per level, l1 first")
    return parser


def _write_tables(args: argparse.Namespace, steps, ranked: Sequence[RankedConcept], labels: Sequence[str],
                  levels: Sequence[Sequence[str]], names: dict[str, str], names_of_levels: Sequence[str]) -> list[LevelSummary]:
    """The eligibility report, the ranking and the level summary; returns the summaries."""
    write_tsv(
        args.eligibility_report,
        ["step", "description", "remaining"],
        [(number, step.description, len(step.remaining)) for number, step in enumerate(steps, 1)],
    )
    write_tsv(
        args.ranking,
        ["rank", "wnid", "name", "sim_in1k", "nearest_in1k_wnid", "nearest_in1k_name", "level"],
        [
            (rank, r.wnid, names[r.wnid], repr(r.similarity), r.nearest, names[r.nearest], label)
            for rank, (r, label) in enumerate(zip(ranked, labels), 1)
        ],
    )
    summaries = summarise_levels(ranked, labels, names_of_levels)
    ranked_set = {r.wnid for r in ranked}
    for summary, level in zip(summaries, levels):
        summary.unranked = sum(1 for w in level if w not in ranked_set)
    write_tsv(
        args.summary,
        ["level", "n_concepts", "first_rank", "last_rank", "sim_max", "sim_min",
         "tied_outside_at_top", "tied_outside_at_bottom", "not_in_ranking"],
        [
            (s.level, s.size + s.unranked, *(_format(v) for v in (s.first_rank, s.last_rank, s.sim_max, s.sim_min)),
             s.tied_outside_top, s.tied_outside_bottom, s.unranked)
            for s in summaries
        ],
    )
    return summaries


def _print_report(steps, ranked: Sequence[RankedConcept], taxonomy: Taxonomy, summaries: Sequence[LevelSummary]) -> None:
    for number, step in enumerate(steps, 1):
        print(f"step {number}: {step.description}: {len(step.remaining)}")
    distinct = len({r.similarity for r in ranked})
    print(f"{len(ranked)} eligible concepts, {distinct} distinct sim_IN1K values, taxonomy of {len(taxonomy)} nodes")
    for s in summaries:
        print(f"{s.level}: ranks {s.first_rank}-{s.last_rank}, sim {s.sim_max}..{s.sim_min}, "
              f"tied outside: {s.tied_outside_top} at top, {s.tied_outside_bottom} at bottom; not ranked: {s.unranked}")
