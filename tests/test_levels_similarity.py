"""Lin similarity: hand-checked small taxonomies (multiple inheritance, instance edges, an LCS
that is not the deepest common ancestor) and agreement with NLTK's lin_similarity."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
from wordnet_world import real_corpus, synthetic_graph  # noqa: F401 (fixture)

from imagenet_cog.levels.concepts import read_wnids, timm_info_file
from imagenet_cog.levels.similarity import Taxonomy, max_lin_similarity, max_similarity
from imagenet_cog.levels.wordnet import load_noun_graph, nltk_reader, nltk_synset_names

E, A, B, C, D, F = (f"n0000000{i}" for i in range(1, 7))


def small_taxonomy() -> Taxonomy:
    """E above A and B; C under both A and B; D an instance of C; F under B."""
    graph = synthetic_graph({A: [E], B: [E], C: [A, B], F: [B]}, {D: [C]})
    return Taxonomy(graph, [D, F, A])


def test_information_content_counts_nodes_below():
    taxonomy = small_taxonomy()
    assert taxonomy.nodes == sorted([E, A, B, C, D, F])
    below = dict(zip(taxonomy.nodes, taxonomy.counts.tolist()))
    assert below == {E: 6, A: 3, B: 4, C: 2, D: 1, F: 1}
    assert taxonomy.information_content(E) == 0.0
    assert taxonomy.information_content(B) == pytest.approx(math.log(6 / 4))


def test_lin_of_hand_computed_pairs():
    taxonomy = small_taxonomy()
    # D and F share B and E; B has the higher IC.
    assert taxonomy.lin(D, F) == pytest.approx(2 * math.log(6 / 4) / (2 * math.log(6)))
    # D is below C (an instance edge), so C is their LCS.
    assert taxonomy.lin(D, C) == pytest.approx(2 * math.log(3) / (math.log(6) + math.log(3)))
    assert taxonomy.lin(A, F) == 0.0  # only the root in common
    assert taxonomy.lin(D, D) == pytest.approx(1.0)


def test_lcs_is_the_most_informative_not_the_deepest():
    # X is deep (E > P > Q > X) but has many descendants; Y sits right under E with few.
    parents = {"n00000020": ["n00000001"], "n00000021": ["n00000020"], "n00000022": ["n00000021"]}
    parents["n00000023"] = ["n00000001"]  # Y
    many = [f"n0000010{i}" for i in range(8)]
    parents.update({m: ["n00000022"] for m in many})
    c1, c2 = "n00000030", "n00000031"
    parents[c1] = ["n00000022", "n00000023"]
    parents[c2] = ["n00000022", "n00000023"]
    taxonomy = Taxonomy(synthetic_graph(parents), [c1, c2, *many])
    deep, informative = "n00000022", "n00000023"
    assert taxonomy.information_content(informative) > taxonomy.information_content(deep)
    ic = taxonomy.information_content
    assert taxonomy.lin(c1, c2) == pytest.approx(2 * ic(informative) / (ic(c1) + ic(c2)))
    result = max_lin_similarity(taxonomy, [c1], [c2, many[0]])
    assert result.similarity[0] == pytest.approx(taxonomy.lin(c1, c2))
    assert result.nearest == [c2]


def test_vectorised_maximum_agrees_with_pairs_and_breaks_ties_by_wnid():
    taxonomy = small_taxonomy()
    concepts = [D, F, C, A]
    references = [F, A]
    result = max_lin_similarity(taxonomy, concepts, references, chunk_size=3)
    for concept, similarity, nearest in zip(concepts, result.similarity, result.nearest):
        pairs = {r: taxonomy.lin(concept, r) for r in references}
        assert similarity == pytest.approx(max(pairs.values()), abs=1e-15)
        best = max(pairs.values())
        assert nearest == min(r for r, value in pairs.items() if value == best)
    # A: lin(A, A) = 1 beats F; F: itself.
    assert result.nearest[3] == A and result.nearest[1] == F
    tied = Taxonomy(synthetic_graph({A: [E], B: [E], C: [E]}), [A, B, C])
    assert max_lin_similarity(tied, [A], [C, B]).nearest == [B]


def test_concepts_outside_the_taxonomy_are_refused():
    with pytest.raises(KeyError, match="outside the taxonomy"):
        max_lin_similarity(small_taxonomy(), ["n00000099"], [A])


@pytest.fixture(scope="module")
def real_wordnet(real_corpus) -> SimpleNamespace:
    """WordNet 3.0's taxonomy of the IN-21K and IN-1K concepts, NLTK's reader of the same corpus and
    the information content, read once for the module (seconds each)."""
    in21k = read_wnids(timm_info_file("imagenet22k_synsets.txt"))
    in1k = read_wnids(timm_info_file("imagenet_synsets.txt"))
    taxonomy = Taxonomy(load_noun_graph(real_corpus), [*in21k, *in1k])
    return SimpleNamespace(in21k=in21k, in1k=in1k, taxonomy=taxonomy, reader=nltk_reader(real_corpus),
                           ic=taxonomy.nltk_ic(), names=nltk_synset_names(real_corpus, taxonomy.nodes))


def test_agrees_with_nltk_lin_similarity(real_wordnet):
    in21k, in1k, taxonomy, reader, ic = (real_wordnet.in21k, real_wordnet.in1k, real_wordnet.taxonomy,
                                         real_wordnet.reader, real_wordnet.ic)
    assert len(taxonomy) == 23547
    rng = random.Random(0)
    # Bram Stoker and Citizen Genet: IN-21K concepts below person only through instance edges.
    concepts = rng.sample(in21k, 40) + ["n11318824", "n10994097"]
    references = sorted(rng.sample(in1k, 25) + ["n04399382"])  # teddy bear: IN-1K only
    result = max_lin_similarity(taxonomy, concepts, references)
    for index, concept in enumerate(concepts):
        synset = reader.synset_from_pos_and_offset("n", int(concept[1:]))
        expected = [
            synset.lin_similarity(reader.synset_from_pos_and_offset("n", int(r[1:])), ic) for r in references
        ]
        for reference, value in zip(references, expected):
            assert taxonomy.lin(concept, reference) == pytest.approx(value, rel=1e-12, abs=1e-15)
        assert result.similarity[index] == pytest.approx(max(expected), rel=1e-12, abs=1e-15)
        assert result.nearest[index] == references[int(np.argmax(expected))]


MEASURES_BY_NLTK = {
    "wup": lambda s, o, ic: s.wup_similarity(o),
    "path": lambda s, o, ic: s.path_similarity(o),
    "jcn": lambda s, o, ic: s.jcn_similarity(o, ic),
    "res": lambda s, o, ic: s.res_similarity(o, ic),
}


def test_pair_measures_by_hand():
    taxonomy = small_taxonomy()
    # D -> C -> {A, B} -> E; F -> B. Minimum depths: E 0, A 1, B 1, C 2, D 3, F 2.
    assert taxonomy.depth(D, longest=False) == 3 and taxonomy.depth(D, longest=True) == 3
    assert taxonomy.path(D, F) == pytest.approx(1 / (3 + 1))  # D C B F
    assert taxonomy.wup_subsumer(D, F) == B
    assert taxonomy.wup(D, F) == pytest.approx(2 * 2 / (2 + 1 + 2 * 2))
    assert taxonomy.res(D, F) == pytest.approx(math.log(6 / 4))
    assert taxonomy.jcn(D, F) == pytest.approx(1 / (2 * math.log(6) - 2 * math.log(6 / 4)))
    assert taxonomy.jcn(D, D) == 1e300 and taxonomy.jcn(E, D) == 0.0
    # A and B tie as subsumers of C and C: C is itself the subsumer; of (D, C) too.
    assert taxonomy.wup_subsumer(D, C) == C
    tied = Taxonomy(synthetic_graph({A: [E], B: [E], C: [A, B], F: [A, B]}), [C, F])
    assert tied.wup_subsumer(C, F) == A
    assert tied.wup_subsumer(C, F, names={A: "z.n.01", B: "a.n.01"}) == B


@pytest.mark.parametrize("measure", ["wup", "path", "jcn", "res"])
def test_vectorised_measures_agree_with_pairs(measure):
    parents = {A: [E], B: [E], C: [A, B], F: [A, B], "n00000010": [C], "n00000011": [F, C]}
    taxonomy = Taxonomy(synthetic_graph(parents, {D: [C]}), list(parents) + [D])
    concepts = [D, F, C, A, "n00000010", "n00000011", E]
    references = [F, A, "n00000011", D]
    result = max_similarity(taxonomy, concepts, references, measure, chunk_size=3)
    for concept, similarity, nearest in zip(concepts, result.similarity, result.nearest):
        pairs = {r: taxonomy.pair(measure, concept, r) for r in references}
        best = max(pairs.values())
        assert similarity == pytest.approx(best, rel=1e-12)
        assert nearest == min(r for r, value in pairs.items() if value == best)


def test_unknown_measure_is_refused():
    with pytest.raises(ValueError, match="unknown similarity measure 'lch'"):
        max_similarity(small_taxonomy(), [D], [A], "lch")


@pytest.mark.parametrize("measure", ["wup", "path", "jcn", "res"])
def test_agrees_with_nltk_measures(real_wordnet, measure):
    in21k, in1k, taxonomy, reader, ic, names = (real_wordnet.in21k, real_wordnet.in1k, real_wordnet.taxonomy,
                                                real_wordnet.reader, real_wordnet.ic, real_wordnet.names)
    rng = random.Random(1)
    concepts = rng.sample(in21k, 30) + ["n11318824", "n10994097"]
    references = sorted(rng.sample(in1k, 20) + ["n04399382"])
    result = max_similarity(taxonomy, concepts, references, measure, names=names)
    synset = {w: reader.synset_from_pos_and_offset("n", int(w[1:])) for w in (*concepts, *references)}
    for index, concept in enumerate(concepts):
        expected = [MEASURES_BY_NLTK[measure](synset[concept], synset[r], ic) for r in references]
        for reference, value in zip(references, expected):
            assert taxonomy.pair(measure, concept, reference, names) == pytest.approx(value, rel=1e-12, abs=1e-15)
        assert result.similarity[index] == pytest.approx(max(expected), rel=1e-12, abs=1e-15)
        assert result.nearest[index] == references[int(np.argmax(expected))]
