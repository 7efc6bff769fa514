"""Level sets: other WordNet measures, word2vec re-ranking, random draws and the pool of
concepts outside Lin's levels, on the hand-made world of test_levels_cut.py; word vectors read
from small generated files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_levels_cut import IN1K, _cut, small_world  # noqa: F401 (fixture)

from imagenet_cog.core.io import read_lines, read_tsv, write_lines, write_tsv
from imagenet_cog.demo.word_vectors import write_demo_embeddings
from imagenet_cog.levels.cut import LevelError
from imagenet_cog.levels.level_sets import (
    check_level_sets,
    level_set_command,
    overlap_matrix,
    pool_concepts_command,
    random_draw,
    random_level_command,
)
from imagenet_cog.levels.word_vectors import WordVectorError, max_cosine_similarity


def _level_set(world, lin_out, measure, *extra, levels=2, per_level=2):
    out = world["dir"] / measure
    arguments = [
        "--measure", measure, "--wordnet", str(world["wordnet"]), "--catalogue", str(world["catalogue"]),
        "--lin-ranking", str(lin_out / "ranking.tsv"),
        "--lin-levels", *(str(lin_out / f"l{k}.txt") for k in range(1, levels + 1)),
        "--num-levels", str(levels), "--concepts-per-level", str(per_level),
        "--ranking", str(out / "ranking.tsv"), "--summary", str(out / "summary.tsv"),
        "--overlap", str(out / "overlap.tsv"),
        "--level-outputs", *(str(out / f"l{k}.txt") for k in range(1, levels + 1)), *extra,
    ]
    return level_set_command(arguments), out


@pytest.mark.parametrize("measure", ["wup", "path", "jcn", "res"])
def test_wordnet_measure_ranks_every_eligible_concept(small_world, measure):
    status, lin_out = _cut(small_world)
    assert status == 0
    eligible = [row["wnid"] for row in read_tsv(lin_out / "ranking.tsv")]
    status, out = _level_set(small_world, lin_out, measure)
    assert status == 0
    ranking = read_tsv(out / "ranking.tsv")
    assert sorted(row["wnid"] for row in ranking) == sorted(eligible)
    keys = [(-float(row["sim_in1k"]), row["wnid"]) for row in ranking]
    assert keys == sorted(keys)  # decreasing similarity, ties by increasing wnid
    levels = [read_lines(out / f"l{k}.txt") for k in (1, 2)]
    assert [len(level) for level in levels] == [2, 2]
    assert levels[0] == [row["wnid"] for row in ranking[:2]] and levels[1] == [row["wnid"] for row in ranking[-2:]]
    lin_levels = [read_lines(lin_out / f"l{k}.txt") for k in (1, 2)]
    overlap = read_tsv(out / "overlap.tsv")
    assert [[int(row[f"l{j}"]) for j in (1, 2)] for row in overlap] == overlap_matrix(lin_levels, levels)
    assert {row["nearest_in1k_wnid"] for row in ranking} <= set(IN1K)
    assert [row["level"] for row in read_tsv(out / "summary.tsv")] == ["l1", "l2"]


def test_overlap_counts_lin_concepts_in_each_level():
    assert overlap_matrix([["a", "b"], ["c", "d"]], [["a", "c"], ["b", "x"]]) == [[1, 1], [1, 0]]


def test_unknown_level_set_names_the_setting():
    check_level_sets(["wup", "random"])
    with pytest.raises(LevelError, match=r"level_sets.sets names 'lch'.*known: wup, path, jcn, res, word2vec, random"):
        check_level_sets(["wup", "lch"])


def test_random_draws_are_seeded_per_draw_and_checked():
    eligible = [f"n{i:08d}" for i in range(50)]
    first = random_draw(eligible, 1, 10, seed=0)
    assert len(set(first)) == 10 and set(first) <= set(eligible) and first == sorted(first)
    assert random_draw(list(reversed(eligible)), 1, 10, seed=0) == first  # the order given does not matter
    assert random_draw(eligible, 2, 10, seed=0) != first
    assert random_draw(eligible, 1, 10, seed=1) != first
    with pytest.raises(LevelError, match="level_sets.random.concepts is 51 but only 50 concepts are eligible"):
        random_draw(eligible, 1, 51, seed=0)


def test_random_level_and_pool_commands(small_world, capsys):
    status, lin_out = _cut(small_world)
    ranking = read_tsv(lin_out / "ranking.tsv")
    out = small_world["dir"] / "random"
    lin_levels = [str(lin_out / f"l{k}.txt") for k in (1, 2)]
    arguments = ["--lin-ranking", str(lin_out / "ranking.tsv"), "--lin-levels", *lin_levels,
                 "--draw", "3", "--seed", "0", "--output", str(out / "draw-03.txt"), "--overlap", str(out / "overlap-03.tsv")]
    assert random_level_command([*arguments, "--concepts", "3"]) == 0
    drawn = read_lines(out / "draw-03.txt")
    assert len(drawn) == 3 and set(drawn) <= {row["wnid"] for row in ranking}
    assert sum(int(row["random-03"]) for row in read_tsv(out / "overlap-03.tsv")) == sum(
        1 for w in drawn for level in lin_levels if w in read_lines(level)
    )
    assert random_level_command([*arguments, "--concepts", "99"]) == 1
    assert "level_sets.random.concepts is 99" in capsys.readouterr().err
    assert pool_concepts_command(["--lin-ranking", str(lin_out / "ranking.tsv"), "--output", str(out / "pool.txt")]) == 0
    assert read_lines(out / "pool.txt") == sorted(row["wnid"] for row in ranking if not row["level"].startswith("l"))


def _vectors_file(path: Path, vectors: dict[str, list[float]]) -> Path:
    dimension = len(next(iter(vectors.values())))
    lines = [f"{len(vectors)} {dimension}"] + [w + " " + " ".join(map(str, v)) for w, v in vectors.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


CATALOGUE = [
    {"wnid": "n00000001", "name": "cat", "gloss": "small furry animal"},
    {"wnid": "n00000002", "name": "car", "gloss": "motor vehicle"},
    {"wnid": "n00000003", "name": "kitten", "gloss": "young furry animal"},
    {"wnid": "n00000004", "name": "truck", "gloss": "large motor vehicle"},
    {"wnid": "n00000005", "name": "zzyzx", "gloss": "qwxz"},
]


def test_word2vec_similarity_is_a_tfidf_weighted_mean_and_cosine(tmp_path):
    axes = {"cat": [1, 0, 0], "kitten": [1, 0.1, 0], "small": [0.5, 0.5, 0], "furry": [1, 0, 0.2], "animal": [1, 0, 0],
            "young": [0.2, 0, 1], "car": [0, 1, 0], "truck": [0, 1, 0.1], "motor": [0, 1, 0], "vehicle": [0, 1, 0],
            "large": [0.3, 0, 1]}
    path = _vectors_file(tmp_path / "vectors.txt", axes)
    result, report = max_cosine_similarity(path, False, CATALOGUE, ["n00000003", "n00000004", "n00000005"], ["n00000002", "n00000001"])
    assert result.nearest[:2] == ["n00000001", "n00000002"]
    assert result.similarity[2] == -1.0  # no word vector: ranked last
    assert "1 of 3 concepts" in report and "2 of" in report  # zzyzx and qwxz have no vector

    # By hand: tf-idf over the 10 names and glosses, each text's weighted mean, summed, cosine.
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = [row[k] for row in CATALOGUE for k in ("name", "gloss")]
    vectorizer = TfidfVectorizer().fit(texts)

    def concept_vector(row):
        total = np.zeros(3)
        for text in (row["name"], row["gloss"]):
            weights = vectorizer.transform([text]).toarray()[0]
            words = vectorizer.get_feature_names_out()
            known = [(weights[i], np.array(axes[w], dtype=float)) for i, w in enumerate(words) if weights[i] and w in axes]
            total += sum(w * v for w, v in known) / sum(w for w, _ in known)
        return total

    kitten, cat = concept_vector(CATALOGUE[2]), concept_vector(CATALOGUE[0])
    expected = kitten @ cat / np.linalg.norm(kitten) / np.linalg.norm(cat)
    assert result.similarity[0] == pytest.approx(expected, rel=1e-9)


def test_word2vec_file_errors_name_the_setting(tmp_path):
    concepts, references = ["n00000003"], ["n00000001"]
    with pytest.raises(WordVectorError, match="level_sets.word2vec.embeddings is not set"):
        max_cosine_similarity(None, False, CATALOGUE, concepts, references)
    with pytest.raises(WordVectorError, match="level_sets.word2vec.embeddings = .*does not exist"):
        max_cosine_similarity(tmp_path / "missing.txt", False, CATALOGUE, concepts, references)
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("these are not\nword vectors at all\n")
    with pytest.raises(WordVectorError, match="is not a word2vec text file"):
        max_cosine_similarity(garbage, False, CATALOGUE, concepts, references)
    unrelated = _vectors_file(tmp_path / "unrelated.txt", {"banana": [1.0, 0.0], "yellow": [0.0, 1.0]})
    with pytest.raises(WordVectorError, match="has no vector for any word of 1 of the 1 concepts to rank"):
        max_cosine_similarity(unrelated, False, CATALOGUE, concepts, references)


def test_binary_word2vec_files_are_read(tmp_path):
    from gensim.models import KeyedVectors

    text = _vectors_file(tmp_path / "v.txt", {"cat": [1.0, 0.0], "kitten": [0.9, 0.1], "car": [0.0, 1.0],
                                                "furry": [1.0, 0.2], "animal": [1.0, 0.0], "motor": [0.0, 1.0]})
    binary = tmp_path / "v.bin"
    KeyedVectors.load_word2vec_format(str(text)).save_word2vec_format(str(binary), binary=True)
    from_text, _ = max_cosine_similarity(text, False, CATALOGUE, ["n00000003"], ["n00000001", "n00000002"])
    from_binary, _ = max_cosine_similarity(binary, True, CATALOGUE, ["n00000003"], ["n00000001", "n00000002"])
    assert from_binary.nearest == from_text.nearest == ["n00000001"]
    assert from_binary.similarity[0] == pytest.approx(from_text.similarity[0], rel=1e-6)


def test_word2vec_level_set_reranks_lin_levels_only(small_world, tmp_path):
    status, lin_out = _cut(small_world)
    catalogue = read_tsv(small_world["catalogue"])
    for row in catalogue:  # glosses with words, so that the generated vectors cover them
        row["gloss"] = f"thing number {row['wnid'][-2:]}"
    write_tsv(small_world["catalogue"], ["wnid", "name", "gloss", "in21k", "in1k"],
              [(r["wnid"], r["name"], r["gloss"], r["in21k"], r["in1k"]) for r in catalogue])
    embeddings = tmp_path / "demo.txt"
    assert write_demo_embeddings(catalogue, embeddings, dimension=8, seed=0) > 0
    status, out = _level_set(small_world, lin_out, "word2vec", "--embeddings", str(embeddings))
    assert status == 0
    lin_concepts = sorted(w for k in (1, 2) for w in read_lines(lin_out / f"l{k}.txt"))
    ranking = read_tsv(out / "ranking.tsv")
    assert sorted(row["wnid"] for row in ranking) == lin_concepts
    assert [row["level"] for row in ranking] == ["l1", "l1", "l2", "l2"]  # consecutive: no gaps
    status, _ = _level_set(small_world, lin_out, "word2vec", "--embeddings", str(tmp_path / "nope.txt"))
    assert status == 1


@pytest.fixture(scope="module")
def workflow_copy(tmp_path_factory) -> Path:
    from conftest import copy_workflow

    return copy_workflow(tmp_path_factory.mktemp("level-set-config") / "workflow")


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"level_sets": {"sets": ["wup", "lch"]}}, "level_sets.sets names 'lch'"),
        # real data: the demo's pretrained model (a checkpoint only the demo makes) takes random weights
        ({"mode": "imagenet", "models": {"demo_cnn": {"weights": "random"}}, "level_sets": {"sets": ["word2vec"]}},
         "level_sets.word2vec.embeddings is not set"),
        ({"level_sets": {"sets": ["word2vec"], "word2vec": {"embeddings": "/nonexistent/vectors.txt"}}},
         "level_sets.word2vec.embeddings = '/nonexistent/vectors.txt' does not exist"),
        ({"level_sets": {"sets": ["word2vec"], "word2vec": {"embeddings": "config.yaml"}}},
         "is not in word2vec format"),
    ],
)
def test_bad_level_set_settings_stop_before_any_job(workflow_copy, settings, message):
    from conftest import refused_overlay

    output = refused_overlay(workflow_copy, settings)
    assert message in output
    assert "rule " not in output  # no job was planned


def test_a_random_draw_larger_than_the_eligible_concepts_stops_the_run(workflow_copy):
    from conftest import refused_overlay

    ranking = workflow_copy / "results" / "levels" / "ranking.tsv"
    write_tsv(ranking, ["rank", "wnid", "level"], [(k, f"n{k:08d}", "l1") for k in range(1, 11)])
    output = refused_overlay(workflow_copy, {"level_sets": {"sets": ["random"], "random": {"concepts": 11}}})
    assert "level_sets.random.concepts is 11 but only 10 concepts are eligible" in output
    ranking.unlink()


def test_demo_pool_draws_images_for_a_spread_beside_the_drawn_concepts(tmp_path):
    from imagenet_cog.demo.world import demo_pool_command

    ranking = tmp_path / "ranking.tsv"
    wnids = [f"n{k:08d}" for k in range(30)]
    write_tsv(ranking, ["rank", "wnid", "sim_in1k", "nearest_in1k_wnid", "level"],
              [(k + 1, w, repr(1 - k / 30), "n99999999", "l1") for k, w in enumerate(wnids)])
    drawn = tmp_path / "l1.txt"
    write_lines(drawn, wnids[:4])
    arguments = ["--ranking", str(ranking), "--exclude", str(drawn), "--count", "5", "--images", str(tmp_path / "pool"),
                 "--output", str(tmp_path / "pool.txt"), "--train-images", "2", "--test-images", "1", "--image-size", "16"]
    assert demo_pool_command(arguments) == 0
    pool = read_lines(tmp_path / "pool.txt")
    assert len(pool) == 5 and not set(pool) & set(wnids[:4])
    assert pool[0] == wnids[4] and pool[-1] == wnids[-1]  # spread over the rest of the ranking
    assert sorted(p.name for p in (tmp_path / "pool").iterdir()) == pool
    assert all(len(list((tmp_path / "pool" / w).glob("*.JPEG"))) == 3 for w in pool)
