"""Whether a checkpoint fits its arch, judged before any job (imagenet_cog.models.checkpoint_fit):
the verdict of the file's shapes on the network built on the meta device is the extraction job's
(a file the check passes loads, one it refuses the job refuses, for the same reason), read without
the tensors' data, kept per content and arch, and told one line per model or series.

The files are the demo network's state dicts (~1 MB) in the layouts the job's mapping takes
(bare, a container with a DataParallel prefix, MoCo's momentum encoder and queue), one with a
tensor of another shape, a ResNet18's (another architecture) and bytes that are no checkpoint.
"""

from __future__ import annotations

import json

import pytest
import torch
import torchvision
from safetensors.torch import save_file

from imagenet_cog.backbones.demo_cnn import demo_cnn
from imagenet_cog.models import checkpoint_fit
from imagenet_cog.models.checkpoint_fit import checkpoint_misfit, judged_misfit, refusal_line
from imagenet_cog.models.checkpoints import read_checkpoint
from imagenet_cog.models.registry import ModelSpec, build_model


def demo_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(5)
    return demo_cnn().state_dict()


def bare(path):
    torch.save(demo_state(), path)


def bare_safetensors(path):
    save_file(demo_state(), path)


def prefixed(path):
    # a training script's DataParallel copy in a container, with its epoch
    torch.save({"state_dict": {f"module.{key}": value for key, value in demo_state().items()}, "epoch": 9}, path)


def moco_layout(path):
    # a published layout of checkpoints.CHECKPOINT_LAYOUTS: query encoder, momentum encoder, queue
    state = {f"module.encoder_q.{key}": value for key, value in demo_state().items() if not key.startswith("head.")}
    state |= {f"module.encoder_k.{key}": value for key, value in demo_state().items()}
    torch.save({"state_dict": state | {"module.queue": torch.zeros(8, 4)}}, path)


def other_shape(path):
    state = demo_state()
    state["features.0.weight"] = torch.zeros(32, 3, 5, 5)
    torch.save(state, path)


def resnet18(path):
    torch.save(torchvision.models.resnet18().state_dict(), path)


def no_checkpoint(path):
    path.write_bytes(b"not a checkpoint")


FITS = {"model.pt": bare, "model.safetensors": bare_safetensors, "prefixed.pth": prefixed, "moco.pth": moco_layout}
MISFITS = {"shape.pt": other_shape, "resnet18.pt": resnet18, "bytes.pt": no_checkpoint}


def job_refusal(spec: ModelSpec) -> str | None:
    """What the extraction job says of the file: None when it builds the model."""
    try:
        build_model(spec)
    except Exception as error:  # the job's own failure, whatever it is
        return str(error)
    return None


@pytest.mark.parametrize("name", sorted(FITS | MISFITS))
def test_the_check_passes_exactly_the_files_the_job_loads(tmp_path, name):
    path = tmp_path / name
    (FITS | MISFITS)[name](path)
    spec = ModelSpec("dino@40", "demo_cnn", str(path))
    verdict, refused = checkpoint_misfit(spec), job_refusal(spec)
    assert (verdict is None) is (refused is None) is (name in FITS), (verdict, refused)
    if name == "bytes.pt":
        assert verdict.startswith("cannot be read as a checkpoint") and refused in verdict
    elif refused is not None:
        # the same words: the job's refusal is the check's verdict with the file named
        assert f"checkpoint {path} {verdict}." in refused


def test_another_architectures_file_names_the_keys_and_their_shapes(tmp_path):
    path = tmp_path / "resnet18.pt"
    resnet18(path)
    verdict = checkpoint_misfit(ModelSpec("dino@40", "resnet50", str(path)))
    assert verdict.startswith("does not fit a ResNet backbone (best key prefix ''): 165 of 265 backbone keys missing: ")
    assert "layer1.0.conv1.weight (64, 64, 3, 3) in the file, (64, 64, 1, 1) in the network" in verdict
    assert job_refusal(ModelSpec("dino@40", "resnet50", str(path))).endswith(
        f"{path} {verdict}. Check the model's 'arch' in config.yaml, or convert the checkpoint to a state dict of that network.")


@pytest.mark.parametrize("name", ["model.pt", "model.safetensors"])
def test_shapes_are_read_without_the_tensors_data(tmp_path, name):
    FITS[name](tmp_path / name)
    payload, _ = read_checkpoint(str(tmp_path / name), shapes_only=True)
    assert {key: tuple(value.shape) for key, value in payload.items()} == {
        key: tuple(value.shape) for key, value in demo_state().items()}
    assert {value.device.type for value in payload.values()} == {"meta"}


def test_a_verdict_is_kept_per_content_and_arch(tmp_path, monkeypatch):
    path, verdicts = tmp_path / "shape.pt", tmp_path / "verdicts"
    other_shape(path)
    spec = ModelSpec("dino@40", "demo_cnn", str(path))
    first = judged_misfit(spec, verdicts)
    (kept,) = verdicts.iterdir()
    assert json.loads(kept.read_text())["misfit"] == first and "features.0.weight (32, 3, 5, 5)" in first

    def judged_again(spec):
        raise AssertionError(f"{spec.weights} judged again")

    monkeypatch.setattr(checkpoint_fit, "checkpoint_misfit", judged_again)
    assert judged_misfit(spec, verdicts) == first
    # another content, or another arch, is another verdict
    bare(path)
    with pytest.raises(AssertionError, match="judged again"):
        judged_misfit(spec, verdicts)
    with pytest.raises(AssertionError, match="judged again"):
        judged_misfit(ModelSpec("dino@40", "resnet50", str(path)), verdicts)


def test_a_series_misfits_are_one_line_naming_each_step_and_file():
    reason = "does not fit a ResNet backbone (...)"
    line = refusal_line("dino", "resnet50", [(10, "runs/a10.pth", reason), (20, "runs/a20.pth", reason)])
    assert line.startswith("config.yaml: model 'dino' (a series of arch resnet50): step 10, checkpoint runs/a10.pth "
                           f"{reason}; step 20 (runs/a20.pth) does not fit in the same way. Fix: set the series' arch")
    many = refusal_line("dino", "resnet50", [(step, f"runs/a{step}.pth", reason + str(step)) for step in range(6)])
    assert "; step 1 (runs/a1.pth), step 2 (runs/a2.pth), step 3 (runs/a3.pth) and 2 more do not fit either." in many
    alone = refusal_line("moco", "resnet50", [(None, "ckpt/moco.pth", reason)])
    assert alone.startswith(f"config.yaml: model 'moco': checkpoint ckpt/moco.pth {reason}. Fix: set the model's arch")
