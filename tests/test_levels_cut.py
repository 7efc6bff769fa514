"""Eligibility filters, ranking and tie-break, the level cut, published levels, the command on
a hand-made WordNet, the paper's counts on the real one, and the figure."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from wordnet_world import real_corpus, synthetic_graph, write_data_noun  # noqa: F401 (fixture)

from imagenet_cog.core.io import read_lines, read_tsv, write_lines, write_tsv
from imagenet_cog.levels.concepts import concept_catalogue_command, image_counts_command
from imagenet_cog.levels.cut import (
    LevelError,
    RankedConcept,
    assign_levels,
    cut_levels_command,
    eligible_concepts,
    level_starts,
    load_published_levels,
    summarise_levels,
)
from imagenet_cog.levels.figure import level_runs, levels_figure_command

REPOSITORY = Path(__file__).resolve().parents[1]

# A hand-made world. Root R; a "person" P; IN-1K concepts K1 (under G) and K2 (under H).
R, P, G, H, K1, K2 = "n00000001", "n00000002", "n00000003", "n00000004", "n00000005", "n00000006"
PARENTS = {
    P: [R], G: [R], H: [R], K1: [G], K2: [H],
    "n00000010": [G],               # sibling of K1: close to IN-1K
    "n00000011": [G],               # another one, tied with n00000010
    "n00000012": [H],               # sibling of K2
    "n00000013": ["n00000014"],     # under an inner node far from IN-1K
    "n00000014": [R],               # inner: parent of n00000013, dropped by the leaf step
    "n00000015": [P],               # in the person subtree
    "n00000017": ["n00000014"],     # too few images
    "n00000018": ["n00000014"],     # discarded by hand
    "n00000019": [R],
}
INSTANCES = {"n00000016": [P]}      # reaches person only by an instance edge
IN1K = [K1, K2]
IN21K = [G, K1, *sorted(w for w in PARENTS if w >= "n00000010"), "n00000016"]
COUNTS = {w: 1000 for w in IN21K} | {"n00000017": 10}


def test_each_filter_in_order():
    graph = synthetic_graph(PARENTS, INSTANCES)
    steps = eligible_concepts(graph, IN21K, IN1K, COUNTS, 782, [P], ["n00000018"])
    remaining = [set(step.remaining) for step in steps]
    assert remaining[0] == set(IN21K)
    assert remaining[1] == remaining[0] - {K1}                              # seen
    assert remaining[2] == remaining[1] - {G}                               # ancestor of K1
    assert remaining[3] == remaining[2] - {"n00000015", "n00000016"}        # person, instance too
    assert remaining[4] == remaining[3] - {"n00000014"}                     # not a leaf
    assert remaining[5] == remaining[4] - {"n00000017"}                     # 10 images < 782
    assert remaining[6] == remaining[5] - {"n00000018"}                     # by hand
    assert steps[-1].remaining == ["n00000010", "n00000011", "n00000012", "n00000013", "n00000019"]
    assert "n00000002 (c00000002)" in steps[3].description


def test_leaf_step_counts_only_concepts_still_remaining():
    # n00000014's only child is in the person subtree (removed first): it becomes a leaf.
    graph = synthetic_graph({"n00000014": [R], "n00000020": ["n00000014", P], P: [R]})
    steps = eligible_concepts(graph, ["n00000014", "n00000020"], [], {}, 0, [P], [])
    assert steps[-1].remaining == ["n00000014"]


def test_level_starts_of_the_paper():
    assert level_starts(5146, 5, 1000) == [0, 1036, 2073, 3110, 4146]
    assert level_starts(5000, 5, 1000) == [0, 1000, 2000, 3000, 4000]
    assert level_starts(7, 1, 3) == [0]
    assert level_starts(10, 3, 2) == [0, 4, 8]


def test_assign_levels_spans_the_ranking_with_gaps():
    labels = assign_levels(5146, 5, 1000)
    assert len(labels) == 5146
    assert labels[0] == "l1" and labels[999] == "l1" and labels[1000] == "gap1" and labels[1036] == "l2"
    assert labels[-1] == "l5" and labels.count("l3") == 1000
    assert [labels.count(f"gap{k}") for k in range(1, 5)] == [36, 37, 37, 36]
    assert assign_levels(4, 2, 2) == ["l1", "l1", "l2", "l2"]


def test_too_few_concepts_is_a_clear_error():
    with pytest.raises(LevelError, match="need 5000 eligible concepts but only 4999.*levels.num_levels"):
        level_starts(4999, 5, 1000)


def test_boundary_ties_are_counted():
    similarities = [0.9, 0.8, 0.8, 0.8, 0.5, 0.5]
    ranked = [RankedConcept(f"n0000000{i}", s, K1) for i, s in enumerate(similarities)]
    labels = ["l1", "l1", "gap1", "l2", "l2", "l2"]
    l1, l2 = summarise_levels(ranked, labels, ["l1", "l2"])
    assert (l1.first_rank, l1.last_rank, l1.sim_max, l1.sim_min) == (1, 2, 0.9, 0.8)
    assert (l1.tied_outside_top, l1.tied_outside_bottom) == (0, 2)  # ranks 3 and 4 share 0.8
    assert (l2.tied_outside_top, l2.tied_outside_bottom) == (2, 0)  # ranks 2 and 3 share 0.8


def _published(tmp_path, levels) -> Path:
    path = tmp_path / "levels.pkl"
    with open(path, "wb") as stream:
        pickle.dump(levels, stream)
    return path


def test_published_levels_are_read_and_checked(tmp_path):
    levels = [["n00000010", "n00000011"], ["n00000013", "n00000019"]]
    assert load_published_levels(_published(tmp_path, levels), 2, 2) == levels
    assert load_published_levels(_published(tmp_path, tuple(map(tuple, levels))), 2, 2) == levels
    with pytest.raises(LevelError, match="holds 2 levels but levels.num_levels is 5"):
        load_published_levels(_published(tmp_path, levels), 5, 2)
    with pytest.raises(LevelError, match="level 1 holds 2 concepts but levels.concepts_per_level is 1000"):
        load_published_levels(_published(tmp_path, levels), 2, 1000)
    with pytest.raises(LevelError, match="twice"):
        load_published_levels(_published(tmp_path, [levels[0], levels[0]]), 2, 2)
    with pytest.raises(LevelError, match="not wnids"):
        load_published_levels(_published(tmp_path, [["dog", "cat"]]), 1, 2)
    with pytest.raises(LevelError, match="expected a list"):
        load_published_levels(_published(tmp_path, {"l1": levels[0]}), 1, 2)
    with pytest.raises(LevelError, match="does not exist"):
        load_published_levels(tmp_path / "missing.pkl", 2, 2)
    (tmp_path / "broken.pkl").write_bytes(b"not a pickle")
    with pytest.raises(LevelError, match="not a readable pickle"):
        load_published_levels(tmp_path / "broken.pkl", 2, 2)


@pytest.fixture
def small_world(tmp_path) -> dict[str, Path]:
    """The hand-made world as files: WordNet, catalogue, counts, discarded list."""
    wordnet = write_data_noun(tmp_path / "nltk_data", PARENTS, INSTANCES)
    catalogue = tmp_path / "concepts.tsv"
    write_tsv(catalogue, ["wnid", "name", "gloss", "in21k", "in1k"],
              [(w, f"name {w}", "", int(w in IN21K), int(w in IN1K)) for w in sorted(set(IN21K) | set(IN1K))])
    counts = tmp_path / "image_counts.tsv"
    write_tsv(counts, ["wnid", "n_images"], sorted(COUNTS.items()))
    discarded = tmp_path / "discarded.txt"
    write_lines(discarded, ["# by hand", "n00000018"])
    return {"wordnet": wordnet, "catalogue": catalogue, "counts": counts, "discarded": discarded, "dir": tmp_path}


def _cut(world, *extra, levels=2, per_level=2):
    out = world["dir"] / "out"
    arguments = [
        "--wordnet", str(world["wordnet"]), "--catalogue", str(world["catalogue"]),
        "--image-counts", str(world["counts"]), "--discarded", str(world["discarded"]),
        "--excluded-subtrees", P, "--min-images", "782", "--num-levels", str(levels),
        "--concepts-per-level", str(per_level),
        "--eligibility-report", str(out / "eligibility.tsv"), "--ranking", str(out / "ranking.tsv"),
        "--summary", str(out / "summary.tsv"), "--in1k-output", str(out / "in1k.txt"),
        "--level-outputs", *(str(out / f"l{k}.txt") for k in range(1, levels + 1)), *extra,
    ]
    return cut_levels_command(arguments), out


def test_cut_levels_command_on_a_small_world(small_world):
    status, out = _cut(small_world)
    assert status == 0
    assert [int(row["remaining"]) for row in read_tsv(out / "eligibility.tsv")] == [12, 11, 10, 8, 7, 6, 5]
    ranking = read_tsv(out / "ranking.tsv")
    # Siblings of IN-1K concepts first: under H (3 nodes) before under G (4 nodes, less
    # informative); the tie of n00000010 and n00000011 broken by wnid, and cut by the gap.
    assert [row["wnid"] for row in ranking] == ["n00000012", "n00000010", "n00000011", "n00000013", "n00000019"]
    assert ranking[1]["sim_in1k"] == ranking[2]["sim_in1k"]
    assert [row["nearest_in1k_wnid"] for row in ranking[:3]] == [K2, K1, K1]
    assert ranking[1]["nearest_in1k_name"] == f"name {K1}"
    assert [row["level"] for row in ranking] == ["l1", "l1", "gap1", "l2", "l2"]
    similarity = [float(row["sim_in1k"]) for row in ranking]
    assert similarity == sorted(similarity, reverse=True)
    assert read_lines(out / "l1.txt") == ["n00000012", "n00000010"]
    assert read_lines(out / "l2.txt") == ["n00000013", "n00000019"]
    assert read_lines(out / "in1k.txt") == IN1K
    summary = read_tsv(out / "summary.tsv")
    assert [row["first_rank"] for row in summary] == ["1", "4"]
    assert [row["tied_outside_at_bottom"] for row in summary] == ["1", "0"]


def test_cut_levels_fails_clearly_with_too_few_concepts(small_world, capsys):
    status, out = _cut(small_world, levels=3, per_level=2)
    assert status == 1
    assert "only 5 are eligible" in capsys.readouterr().err
    assert not (out / "l1.txt").exists()


def test_published_levels_replace_the_cut(small_world):
    levels = [["n00000019", "n00000012"], ["n00000010", "n00000015"]]
    published = _published(small_world["dir"], levels)
    status, out = _cut(small_world, "--published-levels", str(published))
    assert status == 0
    assert read_lines(out / "l1.txt") == levels[0] and read_lines(out / "l2.txt") == levels[1]
    labels = {row["wnid"]: row["level"] for row in read_tsv(out / "ranking.tsv")}
    assert labels == {"n00000010": "l2", "n00000011": "-", "n00000012": "l1", "n00000013": "-", "n00000019": "l1"}
    summary = {row["level"]: row for row in read_tsv(out / "summary.tsv")}
    assert summary["l2"]["not_in_ranking"] == "1" and summary["l2"]["n_concepts"] == "2"  # person n00000015


def test_published_levels_must_be_imagenet_concepts(small_world, capsys):
    published = _published(small_world["dir"], [["n00000010", "n00000099"], ["n00000012", "n00000013"]])
    status, _ = _cut(small_world, "--published-levels", str(published))
    assert status == 1 and "not IN-21K concepts, e.g. n00000099" in capsys.readouterr().err


def test_level_runs():
    assert level_runs(["l1", "l1", "gap1", "l2"]) == [("l1", 1, 2), ("gap1", 3, 3), ("l2", 4, 4)]


def test_paper_counts_levels_and_figure(real_corpus, tmp_path):
    """The real pipeline: 21,841 ... 5,146 eligible concepts and five levels of 1000."""
    catalogue, counts = tmp_path / "concepts.tsv", tmp_path / "image_counts.tsv"
    assert concept_catalogue_command(["--wordnet", str(real_corpus), "--output", str(catalogue)]) == 0
    rows = read_tsv(catalogue)
    assert len(rows) == 21842 and sum(r["in1k"] == "1" for r in rows) == 1000
    teddy = next(r for r in rows if r["wnid"] == "n04399382")
    assert (teddy["in21k"], teddy["in1k"], teddy["name"]) == ("0", "1", "teddy, teddy bear")
    assert image_counts_command([
        "--catalogue", str(catalogue), "--counts", str(REPOSITORY / "resources/imagenet21k_fall11_image_counts.tsv"),
        "--output", str(counts),
    ]) == 0
    world = {"wordnet": real_corpus, "catalogue": catalogue, "counts": counts,
             "discarded": REPOSITORY / "resources/discarded_wnids.txt", "dir": tmp_path}
    out = tmp_path / "out"
    arguments = [
        "--wordnet", str(real_corpus), "--catalogue", str(catalogue), "--image-counts", str(counts),
        "--discarded", str(world["discarded"]), "--excluded-subtrees", "n00007846", "--min-images", "782",
        "--num-levels", "5", "--concepts-per-level", "1000",
        "--eligibility-report", str(out / "eligibility.tsv"), "--ranking", str(out / "ranking.tsv"),
        "--summary", str(out / "summary.tsv"), "--in1k-output", str(out / "in1k.txt"),
        "--level-outputs", *(str(out / f"l{k}.txt") for k in range(1, 6)),
    ]
    assert cut_levels_command(arguments) == 0
    report = read_tsv(out / "eligibility.tsv")
    assert [int(row["remaining"]) for row in report] == [21841, 20842, 20081, 17254, 14248, 5216, 5146]
    assert len(read_lines(world["discarded"])) == 70
    ranking = read_tsv(out / "ranking.tsv")
    assert len(ranking) == 5146
    similarity = [float(row["sim_in1k"]) for row in ranking]
    assert similarity == sorted(similarity, reverse=True)
    assert len(set(similarity)) == 338
    levels = [read_lines(out / f"l{k}.txt") for k in range(1, 6)]
    assert [len(level) for level in levels] == [1000] * 5
    starts = [next(i for i, row in enumerate(ranking) if row["level"] == f"l{k}") for k in range(1, 6)]
    assert starts == [0, 1036, 2073, 3110, 4146]
    by_wnid = {row["wnid"]: float(row["sim_in1k"]) for row in ranking}
    for upper, lower in zip(levels, levels[1:]):
        assert min(by_wnid[w] for w in upper) >= max(by_wnid[w] for w in lower)
    in1k = set(read_lines(out / "in1k.txt"))
    assert len(in1k) == 1000 and {row["nearest_in1k_wnid"] for row in ranking} <= in1k

    figure = [str(tmp_path / "levels.png"), str(tmp_path / "levels.pdf")]
    assert levels_figure_command(["--ranking", str(out / "ranking.tsv"), "--outputs", *figure]) == 0
    assert Path(figure[0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert Path(figure[1]).read_bytes()[:5] == b"%PDF-"
