"""The names a zero-shot classifier calls a dataset's concepts by (``concept-names``).

IN-1K (and its blurred and class-balanced datasets) takes open_clip's curated class names,
the list its ImageNet zero-shot results use (rule ``open_clip``). Every other dataset is
named from WordNet 3.0: a synset's first lemma, underscores as spaces (rule ``lemma``).
Concepts of one dataset that would share a name (case aside) are told apart by their
hypernyms (rule ``hypernym``): each takes ``<name> (<qualifier>)``, the qualifier the first
lemma of its nearest hypernym whose name differs from its own, along the chain of first
hypernyms (WordNet's order); one whose qualified name is still taken moves to the next
different name up its chain, then to its other lemmas (rule ``synonym``: sister species
often share a common name and a hypernym chain, not their Latin names), and one whose
candidates run out takes a phrase of its WordNet gloss, a few words first, more while it
still collides (rule ``gloss``): a name a text encoder reads, never a wnid.
docs/probes.md shows the rule on real WordNet and the table's format (``core.names_table``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Sequence

from imagenet_cog.core.names_table import ConceptName, shared_names, write_names_table
from imagenet_cog.core.naming import IN1K, IN1K_BLURRED, balanced_source
from imagenet_cog.levels.concepts import ConceptError, check_in_wordnet, concept_file, read_wnids
from imagenet_cog.levels.wordnet import NounGraph, WordNetError, load_noun_graph

CURATED_RULE = "open_clip"
LEMMA_RULE = "lemma"
HYPERNYM_RULE = "hypernym"
SYNONYM_RULE = "synonym"
GLOSS_RULE = "gloss"
# words of a gloss's first clause tried first as a qualifier, then the clause, then the gloss
GLOSS_WORDS = 6
# datasets whose concepts are IN-1K classes
CURATED_DATASETS = (IN1K, IN1K_BLURRED)


def open_clip_classnames() -> tuple[str, ...]:
    """open_clip's curated IN-1K class names, in the order of the sorted IN-1K wnids.

    Read from open_clip's ``zero_shot_metadata.py`` (which imports nothing) without
    importing open_clip, which would import torch: the levels stage runs without it."""
    spec = importlib.util.find_spec("open_clip")
    locations = spec.submodule_search_locations if spec else None
    path = next((Path(p) / "zero_shot_metadata.py" for p in locations or ()
                 if (Path(p) / "zero_shot_metadata.py").is_file()), None)
    if path is None:
        raise ConceptError("open_clip is not installed (or ships no zero_shot_metadata.py), so its curated "
                           "IN-1K class names are unavailable; install open_clip_torch.")
    module_spec = importlib.util.spec_from_file_location("open_clip_zero_shot_metadata", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return tuple(module.IMAGENET_CLASSNAMES)


def curated_names(wnids: Sequence[str], in1k_wnids: Sequence[str], classnames: Sequence[str],
                  concepts_path: str) -> list[tuple[str, str]]:
    """(name, rule) of IN-1K concepts: the curated name at the wnid's place among IN-1K's sorted wnids."""
    ordered = sorted(in1k_wnids)
    if len(ordered) != len(classnames):
        raise ConceptError(f"the IN-1K list has {len(ordered)} wnids and open_clip {len(classnames)} class names; "
                           f"give --in1k-synsets the 1000 IN-1K wnids.")
    position = {wnid: index for index, wnid in enumerate(ordered)}
    outside = [wnid for wnid in wnids if wnid not in position]
    if outside:
        raise ConceptError(f"{concepts_path}: {len(outside)} concepts are no IN-1K classes, e.g. {outside[0]}; "
                           f"open_clip's curated names cover IN-1K only: name another dataset, or fix the list.")
    return [(classnames[position[wnid]], CURATED_RULE) for wnid in wnids]


def first_lemma(graph: NounGraph, node: str) -> str:
    return graph.synsets[node].lemmas[0].replace("_", " ")


def qualifiers(graph: NounGraph, node: str) -> list[tuple[str, str]]:
    """(qualifier, rule) candidates of ``node``, in the order they are tried: the names up its
    chain of first hypernyms, nearest first, then its other lemmas; a name equal to its own
    or to the candidate before it is left out (it tells nothing apart)."""
    own = first_lemma(graph, node)
    names: list[tuple[str, str]] = []
    parents = graph.parents(node)
    while parents:
        names.append((first_lemma(graph, parents[0]), HYPERNYM_RULE))
        parents = graph.parents(parents[0])
    names += [(lemma.replace("_", " "), SYNONYM_RULE) for lemma in graph.synsets[node].lemmas[1:]]
    names += [(phrase, GLOSS_RULE) for phrase in gloss_phrases(graph.synsets[node].gloss)]
    found: list[tuple[str, str]] = []
    for name, rule in names:
        if name.casefold() != own.casefold() and (not found or found[-1][0].casefold() != name.casefold()):
            found.append((name, rule))
    return found


def gloss_phrases(gloss: str) -> list[str]:
    """Qualifiers from a WordNet gloss, shortest first: its first clause's first
    :data:`GLOSS_WORDS` words, the clause, the whole gloss (brackets made commas, so that a
    name keeps one pair)."""
    text = " ".join(gloss.replace("(", ",").replace(")", ",").split()).strip(" ,;")
    clause = text.split(";")[0].strip(" ,")
    phrases = [" ".join(clause.split()[:GLOSS_WORDS]), clause, text]
    return [phrase for number, phrase in enumerate(phrases) if phrase and phrase not in phrases[:number]]


def wordnet_names(graph: NounGraph, wnids: Sequence[str], fixed: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(name, rule) of each concept: its first lemma, qualified by hypernyms where shared with
    another concept or with one of the ``fixed`` names (the open set's curated IN-1K names)."""
    names = {wnid: (first_lemma(graph, wnid), LEMMA_RULE) for wnid in wnids}
    groups: dict[str, list[str]] = {}
    for wnid in wnids:
        groups.setdefault(names[wnid][0].casefold(), []).append(wnid)
    fixed_names = {name.casefold() for name in fixed}
    taken = {name.casefold() for name, _ in names.values()} | fixed_names
    for name, shared in groups.items():
        if len(shared) > 1 or name in fixed_names:
            names.update(_told_apart(graph, shared, taken))
    return [names[wnid] for wnid in wnids]


def _told_apart(graph: NounGraph, shared: list[str], taken: set[str]) -> dict[str, tuple[str, str]]:
    """Names for concepts that share one: one qualifier deeper each round for those still
    colliding with each other or with a name already taken (``taken`` grows). Concepts alike
    down to their glosses are numbered in wnid order."""
    chains = {wnid: qualifiers(graph, wnid) for wnid in shared}
    named: dict[str, tuple[str, str]] = {}
    depth = 0
    while len(named) < len(shared):
        pending = [wnid for wnid in shared if wnid not in named]
        candidates = {wnid: (f"{first_lemma(graph, wnid)} ({chains[wnid][depth][0]})", chains[wnid][depth][1])
                      if depth < len(chains[wnid]) else
                      (_numbered(graph, wnid, depth - len(chains[wnid]) + 1 + pending.index(wnid)), GLOSS_RULE)
                      for wnid in pending}
        folded = [name.casefold() for name, _ in candidates.values()]
        for wnid, (name, rule) in candidates.items():
            if folded.count(name.casefold()) == 1 and name.casefold() not in taken:
                named[wnid] = (name, rule)
                taken.add(name.casefold())
        depth += 1
    return named


def _numbered(graph: NounGraph, wnid: str, number: int) -> str:
    phrases = gloss_phrases(graph.synsets[wnid].gloss)
    return f"{first_lemma(graph, wnid)} ({phrases[-1] if phrases else 'kind'}, {number})"


def concept_names(dataset: str, wnids: Sequence[str], graph: NounGraph, in1k_wnids: Sequence[str],
                  concepts_path: str) -> list[ConceptName]:
    """The names table's rows of a dataset's concepts, labelled as the split tables label them
    (by sorted wnid)."""
    ordered = sorted(wnids)
    if balanced_source(dataset) in CURATED_DATASETS:
        chosen = curated_names(ordered, in1k_wnids, open_clip_classnames(), concepts_path)
    else:
        chosen = wordnet_names(graph, ordered)
    return [ConceptName(label, wnid, name, graph.name(wnid), rule)
            for label, (wnid, (name, rule)) in enumerate(zip(ordered, chosen))]


def open_set_names(datasets: Sequence[str], concept_lists: Sequence[Sequence[str]], graph: NounGraph,
                   in1k_wnids: Sequence[str], concept_paths: Sequence[str]) -> list[ConceptName]:
    """The open-set table: every dataset's concepts, dataset after dataset, each by sorted wnid.
    IN-1K keeps its curated names; the others take WordNet's, told apart across all datasets
    (from each other and from the curated names), as one dataset's are."""
    curated = {dataset: concept_names(dataset, wnids, graph, in1k_wnids, path)
               for dataset, wnids, path in zip(datasets, concept_lists, concept_paths)
               if balanced_source(dataset) in CURATED_DATASETS}
    named = [(dataset, wnid) for dataset, wnids in zip(datasets, concept_lists) if dataset not in curated
             for wnid in sorted(wnids)]
    fixed = [n.name for names in curated.values() for n in names]
    chosen = dict(zip(named, wordnet_names(graph, [wnid for _, wnid in named], fixed)))
    rows = []
    for dataset, wnids in zip(datasets, concept_lists):
        for wnid in sorted(wnids):
            if dataset in curated:
                name, rule = next((n.name, n.rule) for n in curated[dataset] if n.wnid == wnid)
            else:
                name, rule = chosen[dataset, wnid]
            rows.append(ConceptName(len(rows), wnid, name, graph.name(wnid), rule, dataset))
    return rows


def concept_names_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog concept-names",
        description="Write the names a zero-shot classifier calls a dataset's concepts by: an editable TSV "
                    "(label, wnid, name, lemmas, rule).",
    )
    parser.add_argument("--dataset", nargs="+", required=True, help="the dataset (in1k and its variants take "
                        "open_clip's curated IN-1K names; the others WordNet's); several: the open-set table of "
                        "all their concepts")
    parser.add_argument("--concepts", nargs="+", required=True, help="each dataset's concept list (wnids, one a line)")
    parser.add_argument("--wordnet", required=True, help="NLTK data folder from wordnet-corpus")
    parser.add_argument("--in1k-synsets", default=None, help="the 1000 IN-1K wnids; default: timm's imagenet_synsets.txt")
    parser.add_argument("--output", required=True, help="the names table to write (TSV)")
    args = parser.parse_args(argv)
    try:
        graph = load_noun_graph(args.wordnet)
        if len(args.dataset) != len(args.concepts):
            raise ConceptError(f"{len(args.dataset)} datasets but {len(args.concepts)} concept lists; "
                               f"give one --concepts file per --dataset, in the same order.")
        concept_lists = [read_wnids(path) for path in args.concepts]
        for wnids, path in zip(concept_lists, args.concepts):
            check_in_wordnet(wnids, graph, Path(path))
        in1k_wnids = read_wnids(concept_file("in1k_synsets", args.in1k_synsets))
        if len(args.dataset) == 1:
            names = concept_names(args.dataset[0], concept_lists[0], graph, in1k_wnids, args.concepts[0])
        else:
            names = open_set_names(args.dataset, concept_lists, graph, in1k_wnids, args.concepts)
    except (ConceptError, WordNetError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    write_names_table(args.output, names)
    rules = {rule: sum(1 for n in names if n.rule == rule) for rule in dict.fromkeys(n.rule for n in names)}
    print(f"{len(names)} names of {' '.join(args.dataset)} written to {args.output} "
          f"({', '.join(f'{count} by {rule}' for rule, count in rules.items())})")
    for name, labels in shared_names(names).items():
        # open_clip's curated list itself names two pairs of IN-1K classes alike
        print(f"note: labels {', '.join(map(str, labels))} share the name '{name}'; edit the table to tell them apart")
    return 0
