"""benchmarks/scale_world.py, the scale rehearsal's world (docs/scale.md), at a
small size: the releases' shapes it writes are what the project's readers take, so the
rehearsal's index, labels and images keep working (no timing asserted)."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from PIL import Image

from conftest import REPOSITORY
from imagenet_cog.core.archives import ImageIndex
from imagenet_cog.core.image_roots import detect_layout
from imagenet_cog.core.val_labels import find_labels, read_val_labels
from imagenet_cog.levels.concepts import concept_file

SYNSETS = ["n00005787", "n00006484", "n00007846"]  # Fall 2011 counts 1264, 1257, 1012 (the shipped file)
CAP, CLASSES = 4, 3


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("scale-world")
    needed = base / "needed_synsets.txt"
    needed.write_text("".join(f"{wnid}.tar\n" for wnid in SYNSETS))
    result = subprocess.run([sys.executable, "benchmarks/scale_world.py", "--out", str(base / "world"), "--in21k-synsets",
                             str(needed), "--cap", str(CAP), "--in1k-classes", str(CLASSES)],
                            cwd=REPOSITORY, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"in21k: 3 synset tars, {3 * CAP} images" in result.stdout
    assert f"in1k: {CLASSES} classes, {CLASSES * CAP * 2} images" in result.stdout
    return base / "world"


def index(tmp_path, source, root):
    output = tmp_path / f"{source}.h5"
    result = subprocess.run([sys.executable, "-m", "imagenet_cog", "index-images", "--source", source, "--root", str(root),
                             "--layout", detect_layout(source, root), "--output", str(output)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return ImageIndex(output)


def test_the_worlds_roots_are_the_releases_shapes_and_index_image_by_image(world, tmp_path):
    assert detect_layout("in21k", world / "in21k") == "tars" and detect_layout("in1k", world / "in1k") == "tars"
    in21k = index(tmp_path, "in21k", world / "in21k")
    assert in21k.wnid_counts() == {wnid: CAP for wnid in SYNSETS}
    in1k = index(tmp_path, "in1k", world / "in1k")
    classes = sorted(concept_file("in1k_synsets", None).read_text().split())[:CLASSES]
    # the training tar's per-class tars; the validation tar's flat files, labelled by the devkit
    assert {wnid: count for wnid, count in in1k.wnid_counts().items() if wnid in classes} == {wnid: CAP for wnid in classes}
    labels = read_val_labels(find_labels(world / "in1k"))
    assert len(labels) == CLASSES * CAP and sorted(set(labels.values())) == classes
    folder = in21k.folders_of(SYNSETS[0])[0]
    names = in21k.names([folder])[0]
    assert names == [f"{SYNSETS[0]}_{number}.JPEG" for number in range(1, CAP + 1)]
    data = in21k.reader([f"{folder.path}/{names[-1]}"]).read(0)
    with Image.open(io.BytesIO(data)) as image:
        assert image.size == (8, 8) and image.convert("RGB").getpixel((4, 4))[0] > 100


def test_the_paper_sized_in1k_has_the_releases_totals():
    sys.path.insert(0, str(REPOSITORY / "benchmarks"))
    from scale_world import IN1K_TRAIN, in1k_class_sizes

    sizes = in1k_class_sizes(1000, None)
    assert sum(sizes) == IN1K_TRAIN == 1_281_167 and max(sizes) == 1300 and min(sizes) >= 732
