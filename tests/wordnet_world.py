"""Test helpers of the levels stage: the real WordNet 3.0 (Debian's dict folder, installed by
scripts/install-system-deps.sh) as a built corpus, and small hand-made noun graphs written
as ``data.noun`` files so that the commands can run on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagenet_cog.levels.wordnet import DEBIAN_DICT_DIR, NounGraph, Synset, build_nltk_corpus, locate_wordnet


@pytest.fixture(scope="session")
def real_corpus(tmp_path_factory) -> Path:
    """NLTK data folder holding WordNet 3.0 from /usr/share/wordnet."""
    assert (DEBIAN_DICT_DIR / "data.noun").is_file(), (
        "the levels tests need Debian's WordNet: run scripts/install-system-deps.sh"
    )
    nltk_data = tmp_path_factory.mktemp("wordnet") / "nltk_data"
    build_nltk_corpus(locate_wordnet(str(DEBIAN_DICT_DIR)), nltk_data)
    return nltk_data


def synthetic_graph(parents: dict[str, list[str]], instance_parents: dict[str, list[str]] | None = None) -> NounGraph:
    """A noun graph from ``node -> hypernyms`` (and instance hypernyms), lemmas = the wnid."""
    instance_parents = instance_parents or {}
    nodes = set(parents) | set(instance_parents)
    for values in (*parents.values(), *instance_parents.values()):
        nodes |= set(values)
    return NounGraph(
        {
            node: Synset((f"c{node[1:]}",), f"gloss of {node}", tuple(parents.get(node, [])) + tuple(instance_parents.get(node, [])))
            for node in nodes
        }
    )


def write_data_noun(folder: Path, parents: dict[str, list[str]], instance_parents: dict[str, list[str]] | None = None) -> Path:
    """A ``data.noun`` in WordNet's format (offsets need not be byte offsets here)."""
    instance_parents = instance_parents or {}
    graph = synthetic_graph(parents, instance_parents)
    lines = ["  1 This is a test header line, as WordNet's license lines are.\n"]
    for node in sorted(graph.synsets):
        pointers = [("@", p) for p in parents.get(node, [])] + [("@i", p) for p in instance_parents.get(node, [])]
        pointers.append(("~", "n00000001"))  # a hyponym pointer, which must be ignored
        fields = [node[1:], "03", "n", "01", f"c{node[1:]}", "0", f"{len(pointers):03d}"]
        fields += [f"{symbol} {target[1:]} n 0000" for symbol, target in pointers]
        lines.append(" ".join(fields) + f" | gloss of {node}  \n")
    corpus = folder / "corpora" / "wordnet"
    corpus.mkdir(parents=True, exist_ok=True)
    (corpus / "data.noun").write_text("".join(lines))
    return folder
