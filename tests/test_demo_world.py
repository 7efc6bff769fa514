"""The generated demo world: concept choice, image layout, determinism, and images that
follow the semantic similarity of their concepts to IN-1K."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from conftest import copy_workflow, snakemake
from imagenet_cog.core.io import read_lines, read_tsv, write_lines, write_tsv
from imagenet_cog.core.layout import Layout
from imagenet_cog.core.sampling import spread
from imagenet_cog.demo.world import (
    CANVAS_SCALE,
    SEEN_SIMILARITY,
    TEXTURE_AMPLITUDE,
    choose_concepts,
    concept_look,
    demo_world,
    prototype,
    seen_weight,
    texture,
)

pytestmark = pytest.mark.heavy

IN1K = [f"n0{index:07d}" for index in range(1, 21)]
LEVEL_SIMILARITY = {"l1": 0.9, "l2": 0.7, "l3": 0.5, "l4": 0.3, "l5": 0.1}


def fake_levels(layout: Layout) -> None:
    """Small stand-ins for the levels stage's files: 5 levels of 12 concepts in rank order,
    each concept's nearest IN-1K concept one of 20, similarity falling with the level."""
    rows, rank = [], 0
    for level_index, (level, similarity) in enumerate(LEVEL_SIMILARITY.items(), start=1):
        wnids = [f"n1{level_index}{index:06d}" for index in range(12)]
        write_lines(layout.level_concepts(level), wnids)
        for index, wnid in enumerate(wnids):
            rank += 1
            nearest = IN1K[(3 * rank) % len(IN1K)]
            rows.append((rank, wnid, f"concept {wnid}", similarity, nearest, f"concept {nearest}", level))
    write_lines(layout.level_concepts("in1k"), IN1K)
    write_tsv(
        layout.ranking(),
        ("rank", "wnid", "name", "sim_in1k", "nearest_in1k_wnid", "nearest_in1k_name", "level"),
        rows,
    )


def run_demo(layout: Layout, datasets=("in1k", "l1", "l2", "l3", "l4", "l5"), **options) -> None:
    argv = ["--ranking", layout.ranking()]
    for dataset in ("in1k", "l1", "l2", "l3", "l4", "l5"):
        argv += ["--level-concepts", f"{dataset}={layout.level_concepts(dataset)}"]
    for dataset in datasets:
        argv += ["--demo-concepts", f"{dataset}={layout.demo_concepts(dataset)}"]
    argv += ["--in21k-images", layout.demo_images("in21k"), "--in1k-images", layout.demo_images("in1k")]
    argv += ["--preview", layout.demo_preview(), "--pretraining-concepts", layout.demo_pretraining_concepts()]
    for option, value in options.items():
        argv += [f"--{option.replace('_', '-')}", str(value)]
    assert demo_world(argv) == 0


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Layout:
    layout = Layout(str(tmp_path_factory.mktemp("demo") / "results"))
    fake_levels(layout)
    run_demo(layout)
    return layout


def folder_digest(folder: str) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(Path(folder).rglob("*")) if path.is_file()
    }


def concept_pixels(folder: Path) -> np.ndarray:
    return np.stack([np.asarray(Image.open(path), dtype=np.float32) / 255 for path in sorted(folder.glob("*.JPEG"))])


def test_seen_concepts_are_the_nearest_ones_of_the_near_levels_first():
    levels = {"l2": ["c", "d"], "l1": ["a", "b"]}
    nearest = {"a": "x", "b": "x", "c": "y", "d": "z"}
    chosen, seen = choose_concepts(levels, ["u", "v", "w", "x", "y", "z"], nearest, 2)
    assert seen == ["x", "y"] and chosen == {"in1k": ["x", "y"], "l2": ["c", "d"], "l1": ["a", "b"]}
    # too few distinct nearest concepts: the rest are spread over the remaining IN-1K list
    chosen, seen = choose_concepts({"l1": ["a", "b"]}, ["u", "v", "w", "x"], nearest, 3)
    assert seen == ["x", "u", "w"] == chosen["in1k"]


def test_in1k_is_probed_on_as_many_concepts_as_each_level_among_the_seen_ones():
    levels = {"l1": ["a", "b"], "l2": ["c", "d"]}
    nearest = {"a": "x", "b": "x", "c": "y", "d": "z"}
    chosen, seen = choose_concepts(levels, ["u", "v", "w", "x", "y", "z"], nearest, 2, seen_count=4)
    assert seen[:3] == ["x", "y", "z"] and len(seen) == 4
    assert chosen["in1k"] == [seen[0], seen[-1]]
    assert chosen["l1"] == ["a", "b"] and chosen["l2"] == ["c", "d"]


def test_a_level_concept_keeps_its_nearest_look_by_similarity_and_carries_its_texture_by_the_rest():
    low, high = SEEN_SIMILARITY
    assert seen_weight(low) == seen_weight(0.0) == 0.0 and seen_weight(high) == seen_weight(1.0) == 1.0
    assert seen_weight((low + high) / 2) == pytest.approx(0.5)
    size = 48
    nearest = prototype("n10000002", 0, size)
    # near: the IN-1K concept's look itself
    assert np.allclose(concept_look("n10000001", "n10000002", high, seed=0, size=size), nearest, atol=1e-6)
    # far: the concept's own texture, in luminance only, around the IN-1K look's mean colour
    far = concept_look("n10000001", "n10000002", low, seed=0, size=size)
    deviation = far - nearest.mean(axis=(0, 1))
    unclipped = (far > 0) & (far < 1)
    assert np.allclose(deviation[unclipped.all(axis=2)], np.repeat(TEXTURE_AMPLITUDE * texture("n10000001", 0, size)[
        unclipped.all(axis=2)][:, None], 3, axis=1), atol=1e-5)
    # between: the texture's strength and the IN-1K look's contrast trade off
    half = concept_look("n10000001", "n10000002", (low + high) / 2, seed=0, size=size)
    assert 0.3 < np.abs(half - nearest).mean() / np.abs(far - nearest).mean() < 0.7
    assert not np.array_equal(texture("n10000001", 0, size), texture("n10000003", 0, size))


def test_layout_and_counts(world):
    for level in LEVEL_SIMILARITY:
        wnids = read_lines(world.demo_concepts(level))
        assert wnids == spread(read_lines(world.level_concepts(level)), 4)
        for wnid in wnids:
            names = sorted(path.name for path in (Path(world.demo_images("in21k")) / wnid).iterdir())
            assert names == sorted(f"{wnid}_{index}.JPEG" for index in range(32))
    in1k = read_lines(world.demo_concepts("in1k"))
    assert len(in1k) == 4 and set(in1k) <= set(read_lines(world.demo_pretraining_concepts())) <= set(IN1K)
    for wnid in in1k:
        for folder, count in (("train", 24), ("val", 8)):
            files = list((Path(world.demo_images("in1k")) / folder / wnid).glob("*.JPEG"))
            assert len(files) == count
    with Image.open(next(Path(world.demo_images("in1k")).rglob("*.JPEG"))) as image:
        assert (image.format, image.mode, image.size) == ("JPEG", "RGB", (96, 96))
    with Image.open(world.demo_preview()) as preview:  # 6 datasets x (4 concepts x 2 images)
        assert preview.size == (48 + 8 * 100, 6 * 100)
    # the demo's seen concepts are those its L1 concepts are nearest to, first
    ranking = {row["wnid"]: row["nearest_in1k_wnid"] for row in read_tsv(world.ranking())}
    assert read_lines(world.demo_pretraining_concepts())[0] == ranking[read_lines(world.demo_concepts("l1"))[0]]


def test_same_config_same_bytes(world, tmp_path):
    again = Layout(str(tmp_path / "results"))
    fake_levels(again)
    run_demo(again)
    for source in ("in21k", "in1k"):
        assert folder_digest(again.demo_images(source)) == folder_digest(world.demo_images(source))
    other_seed = Layout(str(tmp_path / "other"))
    fake_levels(other_seed)
    run_demo(other_seed, seed=1)
    first = sorted(Path(world.demo_images("in1k")).rglob("*.JPEG"))[0]
    assert (Path(other_seed.demo_images("in1k")) / first.relative_to(world.demo_images("in1k"))).read_bytes() != first.read_bytes()


def test_near_concepts_look_like_their_in1k_concept_and_far_ones_do_not(world):
    """Pixel distance between the look a level concept's images are drawn from and that of
    its nearest IN-1K concept grows from L1 (similarity 0.9) to L5 (0.1). (Means of a few
    dozen images would mostly measure the clutter, which is the same for all levels.)"""
    ranking = {row["wnid"]: (row["nearest_in1k_wnid"], float(row["sim_in1k"])) for row in read_tsv(world.ranking())}
    size = math.ceil(96 * CANVAS_SCALE)
    distances = {}
    for level in LEVEL_SIMILARITY:
        gaps = []
        for wnid in read_lines(world.demo_concepts(level)):
            nearest, similarity = ranking[wnid]
            look = concept_look(wnid, nearest, similarity, seed=0, size=size)
            reference = prototype(nearest, seed=0, size=size)
            gaps.append(np.abs(look - reference).mean())
        distances[level] = float(np.mean(gaps))
    assert list(distances.values()) == sorted(distances.values())
    assert distances["l1"] < 0.25 * distances["l5"]


def test_concepts_are_learnable_but_images_vary(world):
    """Nearest class mean on raw pixels beats chance on the test images, yet no two images
    of a concept are the same."""
    root = Path(world.demo_images("in1k"))
    wnids = read_lines(world.demo_concepts("in1k"))
    means = np.stack([concept_pixels(root / "train" / wnid).mean(axis=0).ravel() for wnid in wnids])
    correct = total = 0
    for label, wnid in enumerate(wnids):
        test = concept_pixels(root / "val" / wnid).reshape(8, -1)
        predicted = np.argmin(((test[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1)
        correct += int((predicted == label).sum())
        total += len(test)
        assert len({image.tobytes() for image in test}) == len(test)
    assert correct / total > 0.5  # chance is 0.25


def test_split_stage_runs_on_the_demo_world(tmp_path):
    """The rules: demo images, then split lists using the demo's own test size."""
    workdir = copy_workflow(tmp_path / "workflow-copy")
    fake_levels(Layout(str(workdir / "results")))
    # fake_levels ranks 60 concepts, fewer than a random level set draws
    (workdir / "lin_only.yaml").write_text("level_sets: {sets: []}\n")
    snakemake(workdir, "results/splits/l2.tsv", "results/splits/in1k.tsv", "--cores", "1", "--configfile", "lin_only.yaml")
    rows = read_tsv(workdir / "results/splits/l2.tsv")
    demo = yaml.safe_load((workdir / "config.yaml").read_text())["demo"]
    concepts = min(12, demo["concepts_per_dataset"])  # fake_levels has 12 per level
    train, test = concepts * demo["train_images_per_concept"], concepts * demo["test_images_per_concept"]
    assert [row["split"] for row in rows] == ["train"] * train + ["test"] * test
    assert all((workdir / "results/demo/in21k" / row["path"]).is_file() for row in rows)
    assert Path(workdir / Layout().demo_preview()).is_file()
    in1k = read_tsv(workdir / "results/splits/in1k.tsv")
    assert {row["path"].split("/")[0] for row in in1k if row["split"] == "test"} == {"val"}
    assert "Nothing to be done" in snakemake(workdir, "results/splits/l2.tsv", "-n", "--configfile", "lin_only.yaml").stdout


def test_level_concepts_missing_from_the_ranking_get_their_own_look(tmp_path):
    """Published levels may name concepts the recomputed ranking lacks."""
    layout = Layout(str(tmp_path / "results"))
    fake_levels(layout)
    write_lines(layout.level_concepts("l5"), ["n19999998", "n19999999"])
    run_demo(layout, datasets=("l5",), train_images=2, test_images=1)
    assert read_lines(layout.demo_concepts("l5")) == ["n19999998", "n19999999"]
    assert len(list(Path(layout.demo_images("in21k")).rglob("*.JPEG"))) == 6
