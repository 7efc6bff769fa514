"""The device decode path (features.decode: device) against the host path, run on the CPU
with the same code a GPU runs: same pixels to a grey level, same features within the
shard's mixed-precision tolerance, and the host path taking every file the device cannot
decode, corrupt files still flagged invalid."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from PIL import Image

from imagenet_cog.cli import main
from imagenet_cog.features.decoding import choose_decode, device_decodable, resize_and_crop
from imagenet_cog.features.extract import (
    MIXED_PRECISION_TOLERANCE,
    ExtractionOptions,
    ImageRows,
    SplitImages,
    extract_shard,
)
from imagenet_cog.models.registry import ModelSpec, Preprocessing

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# A JPEG header the device accepts (SOF0, 8 bits, 3 components) and nothing decodable after it.
HEADER_ONLY_JPEG = (b"\xff\xd8" + b"\xff\xc0\x00\x11\x08\x00\x10\x00\x10\x03"
                    + b"\x01\x11\x00\x02\x11\x00\x03\x11\x00" + b"\xff\xd9")


def photo(width: int, height: int, seed: int) -> Image.Image:
    """Smooth random pixels, which compress like a photograph."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (height // 16 + 1, width // 16 + 1, 3), dtype=np.uint8)
    return Image.fromarray(small).resize((width, height), Image.Resampling.BILINEAR)


def encoded(image: Image.Image, fmt: str = "JPEG", **options) -> bytes:
    stream = io.BytesIO()
    image.save(stream, fmt, **options)
    return stream.getvalue()


def test_header_check_sends_only_plain_jpegs_to_the_device():
    image = photo(120, 80, 0)
    assert device_decodable(encoded(image))
    assert device_decodable(encoded(image.convert("L")))
    assert device_decodable(encoded(image, progressive=True))
    assert device_decodable(encoded(image) + b"\x00\x00")
    assert not device_decodable(encoded(image.convert("CMYK")))
    assert not device_decodable(encoded(image, "PNG"))
    whole = encoded(image)
    assert not device_decodable(whole[:len(whole) // 2])
    assert not device_decodable(b"\xff\xd8\xff\xe0 truncated")
    assert not device_decodable(b"")


@pytest.mark.parametrize("interpolation", ["bicubic", "bilinear"])
@pytest.mark.parametrize("width, height", [(300, 200), (180, 240), (224, 224), (100, 90), (641, 479)])
def test_device_resize_and_crop_match_pil_to_one_grey_level(interpolation, width, height, tmp_path):
    from torchcodec.decoders import decode_jpeg

    preprocessing = Preprocessing(size=224, interpolation=interpolation)
    (tmp_path / "a.JPEG").write_bytes(encoded(photo(width, height, width)))
    host, _, error = ImageRows(tmp_path, ["a.JPEG"], preprocessing)[0]
    data = torch.frombuffer(bytearray((tmp_path / "a.JPEG").read_bytes()), dtype=torch.uint8)
    device = resize_and_crop(decode_jpeg(data, mode="RGB"), preprocessing)
    assert error == "" and device.shape == host.shape == (3, 224, 224)
    difference = (device.int() - host.int()).abs()
    assert difference.max() <= 1 and difference.float().mean() < 0.3


def test_auto_decodes_on_the_host_and_device_is_asked_for():
    assert choose_decode("auto", torch.device("cpu")) == "host"
    assert choose_decode("auto", torch.device("cuda")) == "host"  # measured faster on an H100 node (benchmarks/README.md)
    assert choose_decode("device", torch.device("cpu")) == "device"
    with pytest.raises(ValueError, match="features.decode"):
        choose_decode("gpu", torch.device("cpu"))


def test_device_decode_without_torchcodec_falls_back_to_the_host_with_a_warning(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", None)  # what an import finds where it is absent
    assert choose_decode("device", torch.device("cuda")) == "host"
    assert "TorchCodec is not installed" in caplog.text


BAD_FILES = {
    "grey.JPEG": lambda: encoded(photo(260, 200, 3).convert("L")),
    "cmyk.JPEG": lambda: encoded(photo(200, 260, 4).convert("CMYK")),
    "png.JPEG": lambda: encoded(photo(230, 230, 5), "PNG"),
    "cut.JPEG": lambda: encoded(photo(300, 240, 6))[:2000],
    "garbage.JPEG": lambda: b"\xff\xd8\xff\xe0 truncated",
    "header.JPEG": lambda: HEADER_ONLY_JPEG,
}


def world(root: Path) -> Path:
    """Plain JPEGs of several sizes with the awkward files in between, and a split table."""
    (root / "images").mkdir(parents=True)
    names = [f"plain{number}.JPEG" for number in range(5)]
    for number, name in enumerate(names):
        (root / "images" / name).write_bytes(encoded(photo(200 + 37 * number, 150 + 41 * number, number)))
    for name, make in BAD_FILES.items():
        (root / "images" / name).write_bytes(make())
    names = names[:2] + list(BAD_FILES) + names[2:]
    lines = ["path\twnid\tlabel\tsplit"] + [f"{name}\tn00000000\t0\ttrain" for name in names]
    (root / "splits.tsv").write_text("\n".join(lines) + "\n")
    return root / "splits.tsv"


def test_device_path_gives_the_host_features_and_flags(tmp_path, caplog):
    table = world(tmp_path)
    spec = ModelSpec("resnet50", "resnet50", "random")
    shards = {}
    for decode in ("host", "device"):
        shards[decode] = tmp_path / f"{decode}.h5"
        with caplog.at_level("WARNING"):
            extract_shard(spec, SplitImages(table, tmp_path / "images", "l1", "train"), 0, 100, shards[decode],
                          ExtractionOptions(batch_size=4, device="cpu", decode=decode,
                                            max_undecodable_fraction=0.5))
    with h5py.File(shards["host"]) as host, h5py.File(shards["device"]) as device:
        paths = list(host["path"].asstr()[...])
        valid = host["valid"][...]
        np.testing.assert_array_equal(device["valid"][...], valid)
        assert [path for path, ok in zip(paths, valid) if not ok] == ["cut.JPEG", "garbage.JPEG", "header.JPEG"]
        reference = host["features"][...].astype(np.float32)
        features = device["features"][...].astype(np.float32)
        assert device.attrs["decode"] == "device" and host.attrs["decode"] == "host"
        # CMYK, the PNG and the two cut files go to the host before decoding, the header-only
        # file after the device decoder refused it; the grey JPEG stays on the device.
        assert device.attrs["host_decoded"] == 5
    assert not features[~valid].any()
    norms = np.linalg.norm(reference[valid], axis=1)
    relative = np.linalg.norm(features[valid] - reference[valid], axis=1) / norms
    assert relative.max() <= MIXED_PRECISION_TOLERANCE
    # Files decoded on the host in both runs give the host's bytes exactly.
    for name in ("cmyk.JPEG", "png.JPEG"):
        row = paths.index(name)
        assert relative[valid[:row].sum()] == 0.0
    assert f"cannot decode {tmp_path / 'images' / 'header.JPEG'}" in caplog.text


def test_command_line_takes_the_decode_switch(tmp_path):
    table = world(tmp_path)
    output = tmp_path / "shard.h5"
    assert main(["extract", "--split-table", str(table), "--image-root", str(tmp_path / "images"),
                 "--dataset", "l1", "--split", "train", "--shard", "0", "--shard-size", "4",
                 "--model-name", "resnet50", "--arch", "resnet50", "--weights", "random",
                 "--batch-size", "2", "--device", "cpu", "--decode", "device", "--host-resize", "tensor",
                 "--output", str(output)]) == 0
    with h5py.File(output) as handle:
        assert handle.attrs["decode"] == "device" and handle["valid"][...].tolist() == [True] * 4
        assert handle.attrs["host_resize"] == "tensor"
        assert json.loads(handle.attrs["extraction_settings"])["host_resize"] == "tensor"


def test_the_default_host_resize_leaves_the_recorded_settings_as_they_were():
    """Shards made before features.host_resize existed hold settings without it: still current."""
    assert "host_resize" not in json.loads(ExtractionOptions().requested())
    assert json.loads(ExtractionOptions(host_resize="tensor").requested())["host_resize"] == "tensor"
    with pytest.raises(ValueError, match="features.host_resize"):
        ImageRows(Path("."), [], Preprocessing(), host_resize="cv2")


@pytest.mark.parametrize("interpolation", ["bicubic", "bilinear"])
def test_tensor_host_resize_is_within_two_grey_levels_of_pil(interpolation, tmp_path):
    sizes = [(300, 200), (180, 240), (641, 479), (500, 375)]
    names = []
    for number, (width, height) in enumerate(sizes):
        names.append(f"{number}.JPEG")
        (tmp_path / names[-1]).write_bytes(encoded(photo(width, height, number)))
    preprocessing = Preprocessing(size=224, interpolation=interpolation)
    pil = ImageRows(tmp_path, names, preprocessing)
    tensor = ImageRows(tmp_path, names, preprocessing, host_resize="tensor")
    for position in range(len(names)):
        difference = (tensor[position][0].int() - pil[position][0].int()).abs()
        assert tensor[position][0].shape == (3, 224, 224)
        assert difference.max() <= 2 and difference.float().mean() < 0.1
