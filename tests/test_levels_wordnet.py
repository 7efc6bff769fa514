"""WordNet 3.0: locating it, building NLTK's corpus layout, the version check, and the noun
graph read from data.noun against NLTK's reader."""

from __future__ import annotations

import random
import shutil

import pytest
from wordnet_world import real_corpus, synthetic_graph, write_data_noun  # noqa: F401 (fixture)

from imagenet_cog.levels.wordnet import (
    DEBIAN_DICT_DIR,
    LEXNAMES,
    READER_FILES,
    WordNetError,
    build_nltk_corpus,
    load_noun_graph,
    locate_wordnet,
    nltk_reader,
    parse_data_noun,
    wnid,
    wordnet_corpus_command,
)


@pytest.fixture(scope="module")
def reader(real_corpus):
    return nltk_reader(real_corpus)


def test_corpus_is_laid_out_for_nltk(real_corpus):
    corpus = real_corpus / "corpora" / "wordnet"
    for name in ("data.noun", "index.noun", "index.sense", "noun.exc", "verb.exc", "lexnames"):
        assert (corpus / name).is_file() and not (corpus / name).is_symlink()
    lexnames = (corpus / "lexnames").read_text().splitlines()
    assert len(lexnames) == 45 == len(LEXNAMES)
    assert lexnames[3] == "03\tnoun.Tops\t1" and lexnames[18] == "18\tnoun.person\t1"


def test_nltk_reads_the_built_corpus(reader):
    assert reader.get_version() == "3.0"
    assert reader.synset_from_pos_and_offset("n", 1440764).name() == "tench.n.01"
    assert reader.synset("person.n.01").offset() == 7846


def test_graph_matches_nltk_hypernyms(real_corpus, reader):
    graph = load_noun_graph(real_corpus)
    assert len(graph.synsets) == 82115
    sample = random.Random(0).sample(sorted(graph.synsets), 400)
    sample += ["n01440764", "n04399382", "n11318824"]  # tench, teddy bear, Bram Stoker (an instance)
    for node in sample:
        synset = reader.synset_from_pos_and_offset("n", int(node[1:]))
        expected = {wnid(s.offset()) for s in synset.hypernyms() + synset.instance_hypernyms()}
        assert set(graph.parents(node)) == expected, node
        closure = {wnid(s.offset()) for level in synset._iter_hypernym_lists() for s in level}
        assert graph.ancestors(node) == closure, node
    assert graph.synsets["n01440764"].lemmas == ("tench", "Tinca_tinca")
    assert graph.name("n01440764") == "tench, Tinca tinca"


def test_instance_hypernyms_are_edges(real_corpus):
    graph = load_noun_graph(real_corpus)
    # Bram Stoker (n11318824) is an instance of writer: only that edge leads to person.n.01.
    stoker = "n11318824"
    assert graph.synsets[stoker].lemmas[0] == "Stoker"
    assert "n00007846" in graph.ancestors(stoker)


def test_parse_skips_header_and_non_hypernym_pointers(tmp_path):
    write_data_noun(tmp_path, {"n00000010": ["n00000002"]}, {"n00000011": ["n00000010"]})
    with open(tmp_path / "corpora" / "wordnet" / "data.noun") as stream:
        synsets = parse_data_noun(stream)
    assert set(synsets) == {"n00000002", "n00000010", "n00000011"}
    assert synsets["n00000011"].parents == ("n00000010",)
    assert synsets["n00000002"].parents == ()
    assert synsets["n00000010"].gloss == "gloss of n00000010"


def test_dict_dir_without_data_noun_names_both_ways(tmp_path):
    with pytest.raises(WordNetError) as error:
        locate_wordnet(str(tmp_path))
    message = str(error.value)
    assert str(tmp_path) in message
    assert "nltk.download('wordnet')" in message and "wordnet.dict_dir" in message
    assert "apt-get install wordnet-base wordnet-sense-index" in message


def test_missing_index_sense_is_named(tmp_path):
    dict_dir = tmp_path / "dict"
    shutil.copytree(DEBIAN_DICT_DIR, dict_dir, ignore=shutil.ignore_patterns("index.sense", "*.vrb", "cntlist*"))
    with pytest.raises(WordNetError, match="lacks index.sense.*wordnet-sense-index"):
        build_nltk_corpus(locate_wordnet(str(dict_dir)), tmp_path / "nltk_data")
    assert not (tmp_path / "nltk_data").exists()


def test_other_wordnet_versions_are_refused(tmp_path):
    dict_dir = tmp_path / "dict"
    shutil.copytree(DEBIAN_DICT_DIR, dict_dir, ignore=shutil.ignore_patterns("*.vrb", "cntlist*"))
    data_noun = dict_dir / "data.noun"
    # Shift every byte by one line: offsets no longer point at their synsets (as in WordNet 2.1).
    data_noun.write_bytes(b"  extra header\n" + data_noun.read_bytes())
    output = tmp_path / "nltk_data"
    assert wordnet_corpus_command(["--dict-dir", str(dict_dir), "--output", str(output)]) == 1
    assert not output.exists() and not list(tmp_path.glob(".nltk_data.*"))


def test_command_builds_corpus(tmp_path, capsys):
    output = tmp_path / "nltk_data"
    assert wordnet_corpus_command(["--dict-dir", str(DEBIAN_DICT_DIR), "--output", str(output)]) == 0
    assert (output / "corpora" / "wordnet" / "index.sense").stat().st_size > 0
    assert "WordNet 3.0" in capsys.readouterr().out


def test_ancestors_survive_deep_chains():
    chain = {f"n{index:08d}": [f"n{index - 1:08d}"] for index in range(1, 5000)}
    graph = synthetic_graph(chain)
    assert len(graph.ancestors("n00004999")) == 5000


def test_nltk_data_folder_is_used_when_no_dict_dir_is_set(real_corpus, monkeypatch):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(real_corpus)])
    assert locate_wordnet(None).description == f"NLTK data {real_corpus / 'corpora' / 'wordnet'}"


def test_nltk_downloader_zip_is_used_when_no_dict_dir_is_set(tmp_path, monkeypatch):
    import zipfile

    import nltk

    # The layout nltk.download('wordnet') leaves: <data>/corpora/wordnet.zip holding wordnet/*.
    archive = tmp_path / "nltk_data" / "corpora" / "wordnet.zip"
    archive.parent.mkdir(parents=True)
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as stream:
        for path in sorted(DEBIAN_DICT_DIR.iterdir()):
            if path.name in READER_FILES:
                stream.write(path, f"wordnet/{path.name}")
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "nltk_data")])
    source = locate_wordnet(None)
    assert source.description.startswith("NLTK data")
    corpus = build_nltk_corpus(source, tmp_path / "built")
    assert (corpus / "data.noun").read_bytes() == (DEBIAN_DICT_DIR / "data.noun").read_bytes()
    assert len((corpus / "lexnames").read_text().splitlines()) == 45


def test_no_wordnet_anywhere_names_both_ways(tmp_path, monkeypatch):
    import nltk

    import imagenet_cog.levels.wordnet as wordnet

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    monkeypatch.setattr(wordnet, "DEBIAN_DICT_DIR", tmp_path / "absent")
    with pytest.raises(WordNetError) as error:
        wordnet.locate_wordnet(None)
    assert "nltk.download('wordnet')" in str(error.value) and "wordnet.dict_dir" in str(error.value)
