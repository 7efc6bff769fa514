"""The zeroshot-classifier command: the classifier file and its provenance, kept while the
provenance holds and computed again when the weights, a name or the templates change, and
its errors. A random tiny open_clip model: nothing is downloaded."""

from __future__ import annotations

import os

import h5py
import pytest
import torch

from imagenet_cog.core.names_table import ConceptName, write_names_table
from imagenet_cog.features.zeroshot_classifier import zeroshot_classifier_command
from imagenet_cog.features.zeroshot_classifier_file import read_classifier
from imagenet_cog.models.open_clip_text import TEMPLATE_SETS, build_text_model, text_classifier
from imagenet_cog.models.registry import ModelSpec, file_sha256

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# the workflow's two-layer CLIP config (models/open_clip_configs), with CLIP's tokenizer
VIT = "CoG-demo-CLIP"


def names_table(path, names):
    write_names_table(path, [ConceptName(label, f"n0000000{label + 1}", name, name, "lemma")
                             for label, name in enumerate(names)])
    return path


def run(tmp_path, names, output, weights="random:3", templates="simple"):
    return zeroshot_classifier_command(["--model-name", "clip", "--arch", f"open_clip/{VIT}", "--weights", weights,
                                        "--names", str(names), "--templates", templates, "--device", "cpu",
                                        "--output", str(output)])


def test_the_file_holds_the_classifier_and_its_provenance(tmp_path):
    names = names_table(tmp_path / "names.tsv", ["tench", "goldfish"])
    output = tmp_path / "classifier.h5"
    assert run(tmp_path, names, output) == 0
    written = read_classifier(output)
    model = build_text_model(ModelSpec.from_config("clip", {"arch": f"open_clip/{VIT}", "weights": "random:3"}))
    expected = text_classifier(model, ["tench", "goldfish"], TEMPLATE_SETS["simple"], torch.device("cpu"))
    torch.testing.assert_close(torch.from_numpy(written.weights), expected)
    assert written.wnids == ["n00000001", "n00000002"] and written.names == ["tench", "goldfish"]
    assert written.logit_scale == pytest.approx(model.logit_scale())
    assert written.provenance == {
        "model": "clip", "arch": f"open_clip/{VIT}", "weights": "random:3+image_features:embedding",
        "open_clip_version": __import__("open_clip").__version__, "templates": "simple",
        "names_sha256": file_sha256(names)}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_the_file_is_kept_while_its_provenance_holds_and_computed_again_when_it_changes(tmp_path):
    names = names_table(tmp_path / "names.tsv", ["tench", "goldfish"])
    output = tmp_path / "classifier.h5"
    assert run(tmp_path, names, output) == 0
    first = os.stat(output).st_ino
    assert run(tmp_path, names, output) == 0
    assert os.stat(output).st_ino == first  # kept, not written again
    before = read_classifier(output).weights
    # an edited name, other templates, other weights: each computes the file again
    for change in ({"names": names_table(tmp_path / "names.tsv", ["tench", "carp"])}, {"templates": "openai"},
                   {"weights": "random:4"}):
        inode = os.stat(output).st_ino
        assert run(tmp_path, **{"names": names, "output": output, **change}) == 0
        assert os.stat(output).st_ino != inode
    after = read_classifier(output)
    assert after.names == ["tench", "carp"] and after.provenance["weights"].startswith("random:4")
    assert not (after.weights[:, 0] == before[:, 0]).all()


def test_a_file_with_another_provenance_is_computed_again(tmp_path):
    names = names_table(tmp_path / "names.tsv", ["tench"])
    output = tmp_path / "classifier.h5"
    assert run(tmp_path, names, output) == 0
    with h5py.File(output, "a") as handle:
        handle.attrs["open_clip_version"] = "0.0.1"
    inode = os.stat(output).st_ino
    assert run(tmp_path, names, output) == 0
    assert os.stat(output).st_ino != inode and read_classifier(output).provenance["open_clip_version"] != "0.0.1"


def test_errors_name_the_file_and_the_fix(tmp_path, capsys):
    broken = tmp_path / "names.tsv"
    broken.write_text("label\twnid\tname\n1\tn00000001\ttench\n")
    assert run(tmp_path, broken, tmp_path / "classifier.h5") == 1
    assert f"{broken}, line 2: expected label 0" in capsys.readouterr().err
    names = names_table(tmp_path / "names.tsv", ["tench"])
    assert zeroshot_classifier_command(["--model-name", "r", "--arch", "timm/resnet18", "--weights", "random",
                                        "--names", str(names), "--output", str(tmp_path / "c.h5")]) == 1
    assert "needs an image-text model (arch: open_clip/<name>)" in capsys.readouterr().err
    assert run(tmp_path, names, tmp_path / "c.h5", weights=str(tmp_path / "absent.pt")) == 1
    assert "absent.pt" in capsys.readouterr().err
    assert not (tmp_path / "classifier.h5").exists() and not (tmp_path / "c.h5").exists()


def test_a_table_of_another_datasets_concepts_is_refused_before_anything_is_written(tmp_path, capsys):
    names = names_table(tmp_path / "names.tsv", ["tench", "goldfish"])  # n00000001, n00000002
    (tmp_path / "l1.txt").write_text("n00000007\nn00000001\n")
    (tmp_path / "l2.txt").write_text("n00000002\nn00000003\n")
    output = tmp_path / "classifier.h5"
    assert zeroshot_classifier_command([
        "--model-name", "clip", "--arch", f"open_clip/{VIT}", "--weights", "random:3", "--names", str(names),
        "--named", "l1", "--concepts", str(tmp_path / "l1.txt"), "--other-concepts", f"l2={tmp_path / 'l2.txt'}",
        "--device", "cpu", "--output", str(output)]) == 1
    error = capsys.readouterr().err
    assert f"{names}: 1 of its 2 wnids are not concepts of l1 (1 of them l2's); it leaves out 1 of the 2" in error
    assert "probes.zeroshot.names.l1" in error and not output.exists() and len(error.splitlines()) <= 3
