"""Checkpoint files cannot run code: tensors-only by default; a file holding other objects is
refused at planning and at loading, naming the file, the objects and the two ways on (the
model's trusted_globals, or convert-checkpoint), and the file its unpickling would create is
never created."""

from __future__ import annotations

import argparse
import pathlib

import pytest
import torch

from imagenet_cog.backbones.demo_cnn import demo_cnn
from imagenet_cog.models.checkpoints import UnsafeCheckpoint, checkpoint_globals, convert_checkpoint_command, read_checkpoint
from imagenet_cog.models.registry import ModelSpec, build_model, extract_options, file_sha256, weights_identity


class CreatesAFile:
    """What a replaced checkpoint could hold: an object whose unpickling creates a file."""

    def __init__(self, path: pathlib.Path):
        self.path = path

    def __reduce__(self):
        return pathlib.Path.touch, (self.path,)


@pytest.fixture(scope="module")
def state():
    torch.manual_seed(3)
    return {key: value for key, value in demo_cnn().state_dict().items() if not key.startswith(("classifier.", "head."))}


def training_file(path, state, **extra) -> pathlib.Path:
    """A training script's file: the weights under 'model' beside the pickled options."""
    torch.save({"opt": argparse.Namespace(lr=0.1, epochs=[30, 60]), "model": state, "epoch": 9, **extra}, path)
    return path


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "torch<1.6 format"])
def test_a_checkpoint_that_would_create_a_file_is_refused_and_creates_nothing(tmp_path, state, legacy):
    created = tmp_path / "created-by-the-checkpoint"
    checkpoint = tmp_path / "model.pth"
    torch.save({"model": state, "hook": CreatesAFile(created)}, checkpoint, _use_new_zipfile_serialization=not legacy)
    digest = file_sha256(checkpoint)

    with pytest.raises(UnsafeCheckpoint) as planning:  # the Snakefile builds every spec before any job
        ModelSpec.from_config("mine", {"arch": "demo_cnn", "weights": str(checkpoint)})
    with pytest.raises(UnsafeCheckpoint) as loading:  # and the extraction job loads the file
        build_model(ModelSpec("mine", "demo_cnn", str(checkpoint)))
    for error in (planning, loading):
        message = str(error.value)
        assert str(checkpoint) in message and "pathlib.Path" in message
        # no way on is offered for objects that act on the system
        assert "do not trust this file" in message and "trusted_globals" not in message
    assert "model 'mine'" in str(planning.value)
    assert not created.exists() and file_sha256(checkpoint) == digest


def test_trusted_globals_allow_the_listed_objects_for_that_model_only(tmp_path, state):
    checkpoint = training_file(tmp_path / "infomin.pth", state)
    assert checkpoint_globals(checkpoint) == ["argparse.Namespace"]
    with pytest.raises(UnsafeCheckpoint, match=r"\(argparse\.Namespace\)") as refused:
        build_model(ModelSpec("plain", "demo_cnn", str(checkpoint)))
    assert f"convert-checkpoint {checkpoint} " in str(refused.value)
    assert "'trusted_globals: [argparse.Namespace]'" in str(refused.value)

    spec = ModelSpec.from_config("infomin", {"arch": "demo_cnn", "weights": str(checkpoint),
                                             "trusted_globals": ["argparse.Namespace"]})
    model = build_model(spec)
    assert "besides the model's trusted_globals (argparse.Namespace)" in model.notes[0]
    loaded = model.network.state_dict()
    assert all(torch.equal(loaded[key], value) for key, value in state.items())
    # the identity is the file's, as before the setting existed; the job learns the setting
    assert weights_identity(spec) == weights_identity(ModelSpec("plain", "demo_cnn", str(checkpoint)))
    assert weights_identity(spec).startswith(f"sha256:{file_sha256(checkpoint)}+")
    assert extract_options(spec) == ["--trusted-globals", "argparse.Namespace"]
    assert extract_options(ModelSpec("plain", "demo_cnn", str(checkpoint))) == []

    created = tmp_path / "created"
    worse = training_file(tmp_path / "worse.pth", state, hook=CreatesAFile(created))
    with pytest.raises(UnsafeCheckpoint) as refused:
        read_checkpoint(str(worse), ("argparse.Namespace",))
    assert "(builtins.getattr, pathlib.Path, pathlib.PosixPath)" in str(refused.value) and not created.exists()


@pytest.mark.parametrize("suffix", [".tensors.pth", ".safetensors"])
def test_convert_checkpoint_writes_a_tensors_only_file_that_loads_the_same(tmp_path, state, suffix, capsys):
    source = training_file(tmp_path / "infomin.pth", state)
    output = tmp_path / f"infomin{suffix}"

    assert convert_checkpoint_command([str(source), str(output)]) == 0

    printed = capsys.readouterr().out
    assert "allowed to build argparse.Namespace" in printed and f"wrote {output}" in printed
    assert checkpoint_globals(output) == []
    payload, loaded_as = read_checkpoint(str(output))
    assert loaded_as == ("safetensors" if suffix == ".safetensors" else "tensors only")
    if suffix != ".safetensors":
        assert payload["opt"] == {"lr": 0.1, "epochs": [30, 60]} and payload["epoch"] == 9
    images = torch.rand(2, 3, 32, 32)
    converted = build_model(ModelSpec("converted", "demo_cnn", str(output)))
    original = build_model(ModelSpec("original", "demo_cnn", str(source), trusted_globals=("argparse.Namespace",)))
    with torch.inference_mode():
        assert torch.equal(converted.network(images), original.network(images))
    assert not list(tmp_path.glob(".*partial"))


def test_convert_checkpoint_list_unpickles_nothing(tmp_path, state, capsys):
    created = tmp_path / "created"
    source = tmp_path / "model.pth"
    torch.save({"model": state, "hook": CreatesAFile(created)}, source)
    assert convert_checkpoint_command([str(source), str(tmp_path / "out.pth"), "--list"]) == 0
    assert "pathlib.Path" in capsys.readouterr().out
    assert not created.exists() and not (tmp_path / "out.pth").exists()
