"""Concept lists, names and image counts: timm's files, user-given files and their errors,
and counting images from an ImageNet-21K folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from wordnet_world import synthetic_graph, write_data_noun

from imagenet_cog.core.io import read_tsv, write_lines, write_tsv
from imagenet_cog.levels.concepts import (
    ConceptError,
    build_catalogue,
    concept_catalogue_command,
    concept_file,
    count_images,
    image_counts_command,
    read_image_counts,
    read_wnid_table,
    read_wnids,
    timm_info_file,
)


def test_timm_files_are_found_without_importing_torch():
    import sys

    already = "torch" in sys.modules
    in21k = read_wnids(timm_info_file("imagenet22k_synsets.txt"))
    assert len(in21k) == 21841 and in21k == sorted(in21k)
    assert len(read_wnids(timm_info_file("imagenet_synsets.txt"))) == 1000
    assert read_wnid_table(timm_info_file("imagenet_synset_to_lemma.txt"))["n01440764"] == "tench, Tinca tinca"
    assert already or "torch" not in sys.modules


def test_configured_files_replace_timm(tmp_path):
    path = tmp_path / "mine.txt"
    write_lines(path, ["n00000001"])
    assert concept_file("in1k_synsets", str(path)) == path
    with pytest.raises(ConceptError, match=r"concepts.in1k_synsets = .*does not exist"):
        concept_file("in1k_synsets", str(tmp_path / "absent.txt"))


def test_malformed_lists_name_the_file(tmp_path):
    path = tmp_path / "list.txt"
    path.write_text("n00000001\ndog\n")
    with pytest.raises(ConceptError, match=f"{path}: 1 lines are not wnids.*'dog'"):
        read_wnids(path)
    path.write_text("n00000001\nn00000001\n")
    with pytest.raises(ConceptError, match="twice"):
        read_wnids(path)
    table = tmp_path / "names.txt"
    table.write_text("n00000001\tone\nn00000002 two\n")
    with pytest.raises(ConceptError, match=f"{table}, line 2"):
        read_wnid_table(table)


def test_catalogue_falls_back_to_wordnet_names():
    graph = synthetic_graph({"n00000002": ["n00000001"], "n00000003": ["n00000001"]})
    rows = build_catalogue(["n00000002"], ["n00000003"], {"n00000002": "two"}, {}, graph)
    assert rows == [("n00000002", "two", "gloss of n00000002"), ("n00000003", "c00000003", "gloss of n00000003")]


def test_catalogue_command_refuses_unknown_wnids(tmp_path, capsys):
    wordnet = write_data_noun(tmp_path / "nltk_data", {"n00000002": ["n00000001"]})
    in21k, in1k, names = tmp_path / "in21k.txt", tmp_path / "in1k.txt", tmp_path / "names.txt"
    write_lines(in21k, ["n00000002", "n00000009"])
    write_lines(in1k, ["n00000002"])
    names.write_text("n00000002\ttwo\n")
    arguments = ["--wordnet", str(wordnet), "--in21k-synsets", str(in21k), "--in1k-synsets", str(in1k),
                 "--synset-names", str(names), "--synset-glosses", str(names), "--output", str(tmp_path / "c.tsv")]
    assert concept_catalogue_command(arguments) == 1
    assert f"{in21k}: 1 wnids are not WordNet 3.0 noun synsets, e.g. n00000009" in capsys.readouterr().err
    write_lines(in21k, ["n00000001", "n00000002"])
    assert concept_catalogue_command(arguments) == 0
    rows = read_tsv(tmp_path / "c.tsv")
    assert [(r["wnid"], r["name"], r["in21k"], r["in1k"]) for r in rows] == [
        ("n00000001", "c00000001", "1", "0"), ("n00000002", "two", "1", "1")]


def test_image_counts_file_is_checked(tmp_path):
    path = tmp_path / "counts.tsv"
    write_tsv(path, ["wnid", "n_images"], [("n00000001", 5), ("n00000002", "many")])
    with pytest.raises(ConceptError, match=f"{path}, line 3"):
        read_image_counts(path)
    write_tsv(path, ["wnid", "images"], [("n00000001", 5)])
    with pytest.raises(ConceptError, match="header 'wnid<TAB>n_images'"):
        read_image_counts(path)
    with pytest.raises(ConceptError, match="fix concepts.image_counts"):
        read_image_counts(tmp_path / "absent.tsv")


def _catalogue(tmp_path: Path, wnids: list[str]) -> Path:
    path = tmp_path / "concepts.tsv"
    write_tsv(path, ["wnid", "name", "gloss", "in21k", "in1k"], [(w, w, "", 1, 0) for w in wnids])
    return path


def test_image_counts_command_needs_every_concept(tmp_path, capsys):
    catalogue = _catalogue(tmp_path, ["n00000001", "n00000002"])
    counts = tmp_path / "counts.tsv"
    write_tsv(counts, ["wnid", "n_images"], [("n00000001", 5)])
    output = tmp_path / "out.tsv"
    assert image_counts_command(["--catalogue", str(catalogue), "--counts", str(counts), "--output", str(output)]) == 1
    assert "no count for 1 IN-21K concepts, e.g. n00000002" in capsys.readouterr().err
    assert not output.exists()


def test_images_are_counted_from_the_folder(tmp_path):
    root = tmp_path / "in21k"
    (root / "n00000001").mkdir(parents=True)
    for name in ("a.JPEG", "b.jpg", "c.png", "notes.txt"):
        (root / "n00000001" / name).write_bytes(b"x")
    (root / "n00000001" / "sub.jpg").mkdir()
    assert count_images(root, ["n00000001", "n00000002"], threads=2) == {"n00000001": 3, "n00000002": 0}
    catalogue = _catalogue(tmp_path, ["n00000001", "n00000002"])
    output = tmp_path / "out.tsv"
    assert image_counts_command(["--catalogue", str(catalogue), "--count-root", str(root), "--output", str(output)]) == 0
    assert read_tsv(output) == [{"wnid": "n00000001", "n_images": "3"}, {"wnid": "n00000002", "n_images": "0"}]
    with pytest.raises(ConceptError, match="data.in21k_root"):
        count_images(tmp_path / "absent", ["n00000001"], threads=1)
