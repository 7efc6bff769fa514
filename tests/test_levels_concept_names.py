"""Concept names for zero-shot classifiers: WordNet's first lemma, shared names told apart by
hypernyms, then synonyms, then the wnid; open_clip's curated names for IN-1K; the editable
table and its errors."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from wordnet_world import real_corpus  # noqa: F401  (a fixture)

from conftest import REPOSITORY
from imagenet_cog.core.io import write_lines
from imagenet_cog.core.names_table import ConceptName, NamesTableError, duplicate_names, read_names_table, shared_names
from imagenet_cog.levels.concept_names import concept_names_command, wordnet_names
from imagenet_cog.levels.wordnet import NounGraph, Synset


def graph_of(synsets: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]) -> NounGraph:
    """A noun graph from ``wnid -> (lemmas, hypernyms)``."""
    return NounGraph({wnid: Synset(lemmas, f"gloss of {wnid}", parents) for wnid, (lemmas, parents) in synsets.items()})


# entity <- animal <- bird <- wading_bird <- crane (bird); entity <- device <- lifting_device <-
# crane (device); two rheas with the same chain and other lemmas; two spirilla with nothing else.
WORLD = graph_of({
    "n00000001": (("entity",), ()),
    "n00000002": (("animal",), ("n00000001",)),
    "n00000003": (("bird",), ("n00000002",)),
    "n00000004": (("wading_bird",), ("n00000003",)),
    "n00000005": (("crane",), ("n00000004",)),
    "n00000006": (("device",), ("n00000001",)),
    "n00000007": (("lifting_device", "hoist"), ("n00000006",)),
    "n00000008": (("crane",), ("n00000007",)),
    "n00000009": (("ratite",), ("n00000003",)),
    "n00000010": (("rhea", "Rhea_americana"), ("n00000009",)),
    "n00000011": (("rhea", "nandu"), ("n00000009",)),
    "n00000012": (("Spirillum",), ("n00000003",)),
    "n00000013": (("spirillum",), ("n00000003",)),
    # a crane whose first hypernym has its name (case aside): skipped for the next one up
    "n00000014": (("Crane",), ("n00000006",)),
    "n00000016": (("crane",), ("n00000014",)),
})


def test_first_lemmas_with_spaces_where_no_two_concepts_share_a_name():
    assert wordnet_names(WORLD, ["n00000005", "n00000007", "n00000009"]) == [
        ("crane", "lemma"), ("lifting device", "lemma"), ("ratite", "lemma")]


def test_shared_names_are_told_apart_by_the_nearest_hypernym_whose_name_differs():
    assert wordnet_names(WORLD, ["n00000005", "n00000008"]) == [
        ("crane (wading bird)", "hypernym"), ("crane (lifting device)", "hypernym")]
    # its first hypernym is named as it is (case aside): the next one up qualifies it
    assert wordnet_names(WORLD, ["n00000005", "n00000016"]) == [
        ("crane (wading bird)", "hypernym"), ("crane (device)", "hypernym")]


def test_a_shared_chain_falls_back_to_synonyms_then_to_a_phrase_of_the_gloss_never_the_wnid():
    rheas = wordnet_names(WORLD, ["n00000010", "n00000011"])
    assert rheas == [("rhea (Rhea americana)", "synonym"), ("rhea (nandu)", "synonym")]
    # names equal but for case are one name to CLIP's tokenizer: the glosses' first words tell them apart
    world = NounGraph({**WORLD.synsets,
                       "n00000012": Synset(("Spirillum",), "spiral bacterium of the genus Spirillum (rods)", ("n00000003",)),
                       "n00000013": Synset(("spirillum",), "spirally twisted elongate rodlike bacteria; usually harmless",
                                           ("n00000003",))})
    assert wordnet_names(world, ["n00000012", "n00000013"]) == [
        ("Spirillum (spiral bacterium of the genus Spirillum)", "gloss"),
        ("spirillum (spirally twisted elongate rodlike bacteria)", "gloss")]
    # glosses alike in their first words: the longer phrase; alike whole: numbered
    alike = {wnid: Synset(("vibrio",), gloss, ("n00000003",)) for wnid, gloss in (
        ("n00000020", "a curved rod bacterium that moves; found in water"),
        ("n00000021", "a curved rod bacterium that moves; found in soil"),
        ("n00000022", "a curved rod bacterium that moves; found in soil"))}
    names = wordnet_names(NounGraph({**WORLD.synsets, **alike}), list(alike))
    assert [rule for _, rule in names] == ["gloss"] * 3 and len({name for name, _ in names}) == 3
    assert names[0] == ("vibrio (a curved rod bacterium that moves; found in water)", "gloss")
    assert not any(re.search(r"n[0-9]{8}", name) for name, _ in names)


def test_a_qualified_name_never_takes_another_concepts_name():
    # "crane (wading bird)" is taken by a concept of that name: the wading crane goes one up
    world = graph_of({**{w: (s.lemmas, s.parents) for w, s in WORLD.synsets.items()},
                      "n00000015": (("crane_(wading_bird)",), ("n00000001",))})
    names = wordnet_names(world, ["n00000005", "n00000008", "n00000015"])
    assert names == [("crane (bird)", "hypernym"), ("crane (lifting device)", "hypernym"),
                     ("crane (wading bird)", "lemma")]


def test_real_wordnet_tells_the_two_cranes_apart(real_corpus, tmp_path):
    concepts = tmp_path / "l1.txt"
    write_lines(concepts, ["n03126707", "n02012849", "n02084071"])
    output = tmp_path / "names.tsv"
    assert concept_names_command(["--dataset", "l1", "--concepts", str(concepts), "--wordnet", str(real_corpus),
                                  "--output", str(output)]) == 0
    rows = read_names_table(output)
    # labelled as the split tables label them: by sorted wnid
    assert [(r.label, r.wnid, r.name, r.rule) for r in rows] == [
        (0, "n02012849", "crane (wading bird)", "hypernym"),
        (1, "n02084071", "dog", "lemma"),
        (2, "n03126707", "crane (lifting device)", "hypernym"),
    ]
    assert rows[1].lemmas == "dog, domestic dog, Canis familiaris"


@pytest.mark.parametrize("dataset", ["in1k", "in1k_blurred", "balanced-in1k"])
def test_in1k_takes_open_clips_curated_names(dataset, real_corpus, tmp_path, capsys):
    concepts = tmp_path / "in1k.txt"
    # tench, goldfish, open_clip's two "missile"s, crane (the bird, "crane bird" in open_clip's list)
    write_lines(concepts, ["n01443537", "n01440764", "n03773504", "n04008634", "n02012849"])
    output = tmp_path / "names.tsv"
    assert concept_names_command(["--dataset", dataset, "--concepts", str(concepts), "--wordnet", str(real_corpus),
                                  "--output", str(output)]) == 0
    rows = read_names_table(output)
    assert [(r.wnid, r.name, r.rule) for r in rows] == [
        ("n01440764", "tench", "open_clip"), ("n01443537", "goldfish", "open_clip"),
        ("n02012849", "crane bird", "open_clip"), ("n03773504", "missile", "open_clip"),
        ("n04008634", "missile", "open_clip"),
    ]
    assert shared_names(rows) == {"missile": [3, 4]}
    assert "labels 3, 4 share the name 'missile'" in capsys.readouterr().out


def test_a_name_of_a_fixed_list_is_qualified_like_a_shared_one():
    # the open set's curated IN-1K names are fixed: a level concept that would take one is qualified
    assert wordnet_names(WORLD, ["n00000005", "n00000009"], fixed=["Crane"]) == [
        ("crane (wading bird)", "hypernym"), ("ratite", "lemma")]


def test_the_open_set_table_names_every_datasets_concepts_apart(real_corpus, tmp_path):
    in1k, l1, l2 = tmp_path / "in1k.txt", tmp_path / "l1.txt", tmp_path / "l2.txt"
    # each dataset alone names its crane "crane"; together they are told apart
    write_lines(in1k, ["n01443537", "n01440764"])
    write_lines(l1, ["n03126707"])
    write_lines(l2, ["n02084071", "n02012849"])
    output = tmp_path / "open-set.tsv"
    assert concept_names_command(["--dataset", "in1k", "l1", "l2", "--concepts", str(in1k), str(l1), str(l2),
                                  "--wordnet", str(real_corpus), "--output", str(output)]) == 0
    rows = read_names_table(output)
    # dataset after dataset, each by sorted wnid, labelled across them
    assert [(r.label, r.dataset, r.wnid, r.name) for r in rows] == [
        (0, "in1k", "n01440764", "tench"), (1, "in1k", "n01443537", "goldfish"),
        (2, "l1", "n03126707", "crane (lifting device)"),
        (3, "l2", "n02012849", "crane (wading bird)"), (4, "l2", "n02084071", "dog")]


def test_a_concept_outside_in1k_is_refused_for_in1k(real_corpus, tmp_path, capsys):
    concepts = tmp_path / "in1k.txt"
    write_lines(concepts, ["n01440764", "n02084071"])
    assert concept_names_command(["--dataset", "in1k", "--concepts", str(concepts), "--wordnet", str(real_corpus),
                                  "--output", str(tmp_path / "names.tsv")]) == 1
    assert f"{concepts}: 1 concepts are no IN-1K classes, e.g. n02084071" in capsys.readouterr().err
    assert not (tmp_path / "names.tsv").exists()


def test_curated_names_are_read_without_importing_torch():
    code = ("import sys; from imagenet_cog.levels.concept_names import open_clip_classnames; "
            "names = open_clip_classnames(); assert len(names) == 1000 and names[0] == 'tench'; "
            "assert 'torch' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"PYTHONPATH": str(REPOSITORY / "workflow")}, timeout=120)
    assert result.returncode == 0, result.stderr


def test_an_edited_table_is_read_and_a_broken_one_names_its_line(tmp_path):
    table = tmp_path / "names.tsv"
    table.write_text("label\twnid\tname\tlemmas\trule\tnote\n0\tn00000005\tcrane, the bird\tcrane\tlemma\tmine\n"
                     "1\tn00000008\t construction crane \tcrane\tlemma\t\n")
    assert [r.name for r in read_names_table(table)] == ["crane, the bird", "construction crane"]
    table.write_text("label\twnid\tname\n0\tn00000005\tcrane\n2\tn00000008\tcrane\n")
    with pytest.raises(NamesTableError, match=f"{table}, line 3: expected label 1"):
        read_names_table(table)
    table.write_text("label\twnid\tname\n0\tn00000005\t \n")
    with pytest.raises(NamesTableError, match="line 2: .*a non-empty name"):
        read_names_table(table)
    table.write_text("label\twnid\n0\tn00000005\n")
    with pytest.raises(NamesTableError, match=f"{table}: no column name"):
        read_names_table(table)
    with pytest.raises(NamesTableError, match="does not exist; write it with python -m imagenet_cog concept-names"):
        read_names_table(tmp_path / "absent.tsv")


def test_duplicate_names_are_told_with_their_lines_but_open_clips_two_curated_pairs():
    def table(*rows):
        return [ConceptName(label, wnid, name, "", "") for label, (wnid, name) in enumerate(rows)]

    curated = table(("n03773504", "missile"), ("n04008634", "missile"), ("n04355933", "sunglasses"),
                    ("n04356056", "Sunglasses"), ("n02012849", "crane"))
    assert duplicate_names("in1k.tsv", curated) is None
    problem = duplicate_names("mine.tsv", table(("n03773504", "missile"), ("n02012849", "crane"),
                                                ("n03126707", "Crane")))
    assert problem.startswith("mine.tsv: 1 name given to several concepts ('crane' on lines 3, 4)")
