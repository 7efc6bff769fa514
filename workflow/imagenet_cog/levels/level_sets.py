"""Level sets besides Lin's levels (paper Sec. 3.3 and supp. D.1, Fig. 7).

A *level set* is another way of choosing the unseen concepts of the levels, all drawn from
the eligible concepts of the Lin ranking (``ranking.tsv``), so that every set can reuse the
features of the same concepts:

* a WordNet measure (``wup``, ``path``, ``jcn``, ``res``; see :mod:`imagenet_cog.levels.similarity`):
  all eligible concepts ranked by their highest similarity to IN-1K, ties by increasing
  wnid, and cut into levels exactly as Lin's (:func:`imagenet_cog.levels.cut.assign_levels`);
* ``word2vec``: the concepts of Lin's levels (not the gaps) re-ranked by the cosine
  similarity of their word vectors to IN-1K's (see :mod:`imagenet_cog.levels.word_vectors`) and cut
  into consecutive levels;
* ``random``: draw k of ``draws`` is ``concepts`` eligible concepts picked with a generator
  seeded by (seed, k) alone, so adding draws never changes the earlier ones.

Each set also reports its overlap with Lin's levels: how many concepts of Lin level i are in
its level j.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from imagenet_cog.core.io import read_lines, read_tsv, write_lines, write_tsv
from imagenet_cog.core.naming import (
    LEVEL_SETS,
    RANKED_LEVEL_SETS,
    draw_id,
    is_level,
    level_names,
    random_dataset,
)
from imagenet_cog.core.sampling import derived_rng
from imagenet_cog.levels.cut import (
    LevelError,
    RankedConcept,
    _format,
    assign_levels,
    summarise_levels,
)
from imagenet_cog.levels.similarity import Taxonomy, max_similarity
from imagenet_cog.levels.word_vectors import WordVectorError, max_cosine_similarity
from imagenet_cog.levels.wordnet import load_noun_graph, nltk_synset_names


def check_level_sets(names: Sequence[str]) -> None:
    unknown = [name for name in names if name not in LEVEL_SETS]
    if unknown:
        raise LevelError(
            f"level_sets.sets names {', '.join(map(repr, unknown))}, which is not a level set; "
            f"known: {', '.join(LEVEL_SETS)} (lin is always there)."
        )


def rank(concepts: Sequence[str], similarity: Sequence[float], nearest: Sequence[str]) -> list[RankedConcept]:
    """By decreasing similarity, ties by increasing wnid (as Lin's ranking)."""
    ranked = [RankedConcept(w, float(s), n) for w, s, n in zip(concepts, similarity, nearest)]
    ranked.sort(key=lambda r: (-r.similarity, r.wnid))
    return ranked


def overlap_matrix(lin_levels: Sequence[Sequence[str]], levels: Sequence[Sequence[str]]) -> list[list[int]]:
    """Entry [i][j]: concepts of Lin level i that are in level j of the other set."""
    return [[len(set(lin) & set(level)) for level in levels] for lin in lin_levels]


def write_overlap(path: str, lin_names: Sequence[str], names: Sequence[str], matrix: list[list[int]]) -> None:
    write_tsv(path, ["lin_level", *names], [(lin, *row) for lin, row in zip(lin_names, matrix)])


def random_draw(eligible: Sequence[str], draw: int, size: int, seed: int) -> list[str]:
    """Draw ``draw`` (from 1): ``size`` of the eligible concepts, sorted."""
    if size > len(eligible):
        raise LevelError(
            f"level_sets.random.concepts is {size} but only {len(eligible)} concepts are eligible; lower it."
        )
    chosen = derived_rng("random-level", seed, draw).choice(len(eligible), size=size, replace=False)
    ordered = sorted(eligible)
    return sorted(ordered[i] for i in chosen.tolist())


def level_set_command(argv: list[str]) -> int:
    args = _level_set_parser().parse_args(argv)

    catalogue = read_tsv(args.catalogue)
    names = {row["wnid"]: row["name"] for row in catalogue}
    in1k = sorted(row["wnid"] for row in catalogue if row["in1k"] == "1")
    lin_levels = [read_lines(path) for path in args.lin_levels]
    names_of_levels = level_names(args.num_levels)
    try:
        ranked = _ranked_by_measure(args, catalogue, in1k, lin_levels)
        labels = assign_levels(len(ranked), args.num_levels, args.concepts_per_level)
    except LevelError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    levels = [[r.wnid for r, label in zip(ranked, labels) if label == name] for name in names_of_levels]

    write_tsv(
        args.ranking,
        ["rank", "wnid", "name", "sim_in1k", "nearest_in1k_wnid", "nearest_in1k_name", "level"],
        [
            (position, r.wnid, names[r.wnid], repr(r.similarity), r.nearest, names[r.nearest], label)
            for position, (r, label) in enumerate(zip(ranked, labels), 1)
        ],
    )
    summaries = summarise_levels(ranked, labels, names_of_levels)
    write_tsv(
        args.summary,
        ["level", "n_concepts", "first_rank", "last_rank", "sim_max", "sim_min",
         "tied_outside_at_top", "tied_outside_at_bottom"],
        [
            (s.level, s.size, *(_format(v) for v in (s.first_rank, s.last_rank, s.sim_max, s.sim_min)),
             s.tied_outside_top, s.tied_outside_bottom)
            for s in summaries
        ],
    )
    matrix = overlap_matrix(lin_levels, levels)
    write_overlap(args.overlap, names_of_levels, names_of_levels, matrix)
    for path, level in zip(args.level_outputs, levels):
        write_lines(path, level)
    print(f"{args.measure}: {len(ranked)} concepts ranked, {len({r.similarity for r in ranked})} distinct values")
    for name, row in zip(names_of_levels, matrix):
        print(f"Lin {name} in {args.measure} levels: {row}")
    return 0


def _level_set_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog level-set",
        description="Rank the eligible concepts by another similarity to IN-1K and cut its levels.",
    )
    parser.add_argument("--measure", required=True, choices=RANKED_LEVEL_SETS)
    parser.add_argument("--wordnet", required=True, help="NLTK data folder from wordnet-corpus")
    parser.add_argument("--catalogue", required=True, help="concepts.tsv from concept-catalogue")
    parser.add_argument("--lin-ranking", required=True, help="ranking.tsv of cut-levels: the eligible concepts")
    parser.add_argument("--lin-levels", nargs="+", required=True, help="Lin's level files, l1 first")
    parser.add_argument("--num-levels", type=int, required=True)
    parser.add_argument("--concepts-per-level", type=int, required=True)
    parser.add_argument("--embeddings", help="word2vec: a word2vec-format file of word vectors")
    parser.add_argument("--binary", action="store_true", help="word2vec: the file is in the binary format")
    parser.add_argument("--ranking", required=True)
    parser.add_argument("--summary", required=True)
    parser.add_argument("--overlap", required=True, help="Lin level x this set's level concept counts")
    parser.add_argument("--level-outputs", nargs="+", required=True, help="one wnid file per level, l1 first")
    return parser


def _ranked_by_measure(args: argparse.Namespace, catalogue: list[dict], in1k: list[str],
                       lin_levels: list[list[str]]) -> list[RankedConcept]:
    """The concepts ranked by ``args.measure``: word2vec re-ranks Lin's level concepts, the
    WordNet measures every eligible concept of Lin's ranking."""
    if args.measure == "word2vec":
        concepts = sorted(w for level in lin_levels for w in level)
        try:
            result, report = max_cosine_similarity(
                args.embeddings, args.binary, catalogue, concepts, in1k
            )
        except WordVectorError as error:
            raise LevelError(str(error)) from None
        print(report)
        return rank(concepts, result.similarity.tolist(), result.nearest)
    eligible = [row["wnid"] for row in read_tsv(args.lin_ranking)]
    graph = load_noun_graph(args.wordnet)
    taxonomy = Taxonomy(graph, [row["wnid"] for row in catalogue])
    synset_names = None
    if args.measure == "wup":
        if (Path(args.wordnet) / "corpora" / "wordnet" / "index.noun").is_file():
            synset_names = nltk_synset_names(args.wordnet, graph.closure(in1k))
        else:  # a hand-made noun graph (tests) has no sense index, hence no NLTK names
            print("no index.noun: Wu-Palmer subsumer ties broken by wnid instead of NLTK's synset name")
    result = max_similarity(taxonomy, eligible, in1k, args.measure, names=synset_names)
    return rank(eligible, result.similarity.tolist(), result.nearest)


def random_level_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog random-level",
        description="Draw random eligible concepts: a baseline level (paper Fig. 7, orange line).",
    )
    parser.add_argument("--lin-ranking", required=True, help="ranking.tsv of cut-levels: the eligible concepts")
    parser.add_argument("--lin-levels", nargs="+", required=True, help="Lin's level files, l1 first")
    parser.add_argument("--draw", type=int, required=True, help="the draw's number, from 1")
    parser.add_argument("--concepts", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--overlap", required=True, help="concepts of each Lin level in the draw")
    args = parser.parse_args(argv)
    eligible = [row["wnid"] for row in read_tsv(args.lin_ranking)]
    try:
        drawn = random_draw(eligible, args.draw, args.concepts, args.seed)
    except LevelError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    lin_levels = [read_lines(path) for path in args.lin_levels]
    lin_names = level_names(len(lin_levels))
    name = random_dataset(draw_id(args.draw))
    write_overlap(args.overlap, lin_names, [name], overlap_matrix(lin_levels, [drawn]))
    write_lines(args.output, drawn)
    in_levels = sum(row[0] for row in overlap_matrix(lin_levels, [drawn]))
    print(f"{name}: {len(drawn)} of {len(eligible)} eligible concepts, {in_levels} in Lin's levels")
    return 0


def pool_concepts_command(argv: list[str]) -> int:
    """Eligible concepts outside Lin's levels: the one extra dataset level sets may need."""
    parser = argparse.ArgumentParser(prog="python -m imagenet_cog pool-concepts", description=pool_concepts_command.__doc__)
    parser.add_argument("--lin-ranking", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    pool = sorted(row["wnid"] for row in read_tsv(args.lin_ranking) if not is_level(row["level"]))
    write_lines(args.output, pool)
    print(f"{len(pool)} eligible concepts outside Lin's levels")
    return 0

