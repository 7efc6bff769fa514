"""Small ImageNet copies in the shapes the releases are distributed in, for the tests.

One set of generated JPEGs is written as extracted folders and as the releases' tars, so the
same bytes can be read both ways: ImageNet-21K as a folder of per-synset tars (what
``tar xzf winter21_whole.tar.gz`` leaves) and as one outer tar of them (``gunzip`` of it);
ILSVRC2012 as a training tar of per-class tars, a flat validation tar and a devkit whose
ground truth lists ILSVRC2012 ids in the devkit's own (not sorted) class order.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

Images = Mapping[str, Mapping[str, bytes]]  # wnid -> file name -> JPEG bytes


def jpeg(rng: np.random.Generator, size: int) -> bytes:
    """A JPEG whose shorter side is ``size``: smooth colours with grain, which compresses
    like a photograph (about 90 KB at ImageNet's ~400 px, as the release's images)."""
    from PIL import Image

    height, width = size, int(rng.integers(size, size * 3 // 2 + 1))
    small = rng.integers(0, 256, (height // 16 + 1, width // 16 + 1, 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC), dtype=np.float32)
    pixels = np.clip(smooth + rng.normal(0, 16, smooth.shape), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def synset_images(wnids: Sequence[str], per_wnid: int | Mapping[str, int], seed: int = 0, size: int = 20) -> dict:
    """``per_wnid`` JPEGs per wnid named as ImageNet's (``<wnid>_<n>.JPEG``), the same bytes
    for the same arguments."""
    rng = np.random.default_rng(seed)
    counts = per_wnid if isinstance(per_wnid, Mapping) else {wnid: per_wnid for wnid in wnids}
    return {wnid: {f"{wnid}_{number}.JPEG": jpeg(rng, size) for number in range(1, counts[wnid] + 1)} for wnid in wnids}


def tar_bytes(files: Mapping[str, bytes], tar_format: int = tarfile.GNU_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tar_format) as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_300_000_000
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def write_tar(path: Path, files: Mapping[str, bytes], tar_format: int = tarfile.GNU_FORMAT) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(tar_bytes(files, tar_format))
    return path


def write_folders(root: Path, images: Images) -> Path:
    for wnid, files in images.items():
        (root / wnid).mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (root / wnid / name).write_bytes(data)
    return root


def write_synset_tars(folder: Path, images: Images) -> Path:
    """One ``<wnid>.tar`` per synset in ``folder`` (the Winter 2021 release after ``tar xzf``)."""
    for wnid, files in images.items():
        write_tar(folder / f"{wnid}.tar", files)
    return folder


def write_outer_tar(path: Path, images: Images, prefix: str = "winter21_whole") -> Path:
    """One uncompressed tar of per-synset tars, each named ``<prefix>/<wnid>.tar``."""
    return write_tar(path, {"/".join(filter(None, (prefix, f"{wnid}.tar"))): tar_bytes(files)
                            for wnid, files in images.items()})


def val_name(number: int) -> str:
    return f"ILSVRC2012_val_{number:08d}.JPEG"


def devkit_order(wnids: Sequence[str]) -> list[str]:
    """The wnids in the order of their ILSVRC2012 ids: deliberately not sorted (the devkit's
    ids follow WordNet's tree, not the wnids)."""
    return sorted(wnids, key=lambda wnid: wnid[::-1])


def val_set(val: Images) -> tuple[dict[str, str], dict[str, bytes]]:
    """The validation images renamed ``ILSVRC2012_val_NNNNNNNN.JPEG`` in a shuffled order, as
    the release numbers them: (name -> wnid, name -> bytes)."""
    pairs = [(wnid, data) for wnid, files in val.items() for data in files.values()]
    order = np.random.default_rng(1).permutation(len(pairs))
    labels = {val_name(number): pairs[index][0] for number, index in enumerate(order, start=1)}
    files = {val_name(number): pairs[index][1] for number, index in enumerate(order, start=1)}
    return labels, files


def write_ilsvrc2012(root: Path, train: Images, val: Images, *, devkit: str = "tar.gz") -> dict[str, str]:
    """``ILSVRC2012_img_train.tar`` (a tar of per-class tars), ``ILSVRC2012_img_val.tar``
    (flat, see :func:`val_set`) and a devkit (``tar.gz`` as distributed, ``folder``
    extracted, or ``none``). Returns val name -> wnid."""
    root.mkdir(parents=True, exist_ok=True)
    write_tar(root / "ILSVRC2012_img_train.tar", {f"{wnid}.tar": tar_bytes(files) for wnid, files in train.items()})
    labels, files = val_set(val)
    write_tar(root / "ILSVRC2012_img_val.tar", files)
    if devkit != "none":
        write_devkit(root, sorted(set(train) | set(val)), [labels[name] for name in sorted(labels)], devkit)
    return labels


def devkit_files(wnids: Sequence[str], val_wnids: Sequence[str]) -> dict[str, bytes]:
    """``data/meta.mat`` (the synsets struct: ILSVRC2012_ID, WNID, words, num_children, with
    one inner node after the leaves as in the real file) and
    ``data/ILSVRC2012_validation_ground_truth.txt`` (one id per val image in file order)."""
    from scipy.io import savemat

    ordered = devkit_order(wnids)
    ids = {wnid: number for number, wnid in enumerate(ordered, start=1)}
    records = [(number, wnid, f"class {wnid}", 0) for wnid, number in ids.items()]
    records.append((len(records) + 1, "n00001740", "entity", len(records)))
    synsets = np.zeros(len(records), dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("num_children", "O")])
    for row, record in enumerate(records):
        synsets[row] = record
    buffer = io.BytesIO()
    savemat(buffer, {"synsets": synsets})
    truth = "".join(f"{ids[wnid]}\n" for wnid in val_wnids).encode()
    return {"data/meta.mat": buffer.getvalue(), "data/ILSVRC2012_validation_ground_truth.txt": truth}


def write_devkit(root: Path, wnids: Sequence[str], val_wnids: Sequence[str], shape: str = "tar.gz") -> Path:
    files = {f"ILSVRC2012_devkit_t12/{name}": data for name, data in devkit_files(wnids, val_wnids).items()}
    if shape == "folder":
        for name, data in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        return root / "ILSVRC2012_devkit_t12"
    path = root / "ILSVRC2012_devkit_t12.tar.gz"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    path.write_bytes(buffer.getvalue())
    return path


def write_in1k_folders(root: Path, train: Images, val: Images) -> Path:
    """The same images extracted as after valprep: train/<wnid>/, val/<wnid>/ (val renamed
    as in the release)."""
    write_folders(root / "train", train)
    labels, files = val_set(val)
    for name, wnid in labels.items():
        (root / "val" / wnid).mkdir(parents=True, exist_ok=True)
        (root / "val" / wnid / name).write_bytes(files[name])
    return root


# The Hugging Face Hub's copies ----------------------------------------------------------------

def webp(data: bytes) -> bytes:
    """The image re-encoded as WEBP (as ``timm/imagenet-w21-webp-wds`` holds them)."""
    from PIL import Image

    buffer = io.BytesIO()
    with Image.open(io.BytesIO(data)) as image:
        image.save(buffer, format="WEBP", quality=90)
    return buffer.getvalue()


def wds_meta(style: str, wnid: str, name: str, label: int) -> dict:
    """A sample's json as each copy writes it: ``22k`` (``class_name``), ``1k`` (``filename``)
    or ``bare`` (sizes only, as the w21 copies' json may be)."""
    if style == "22k":
        return {"label": label, "label_12k": -1, "class_name": wnid, "width": 40, "height": 40}
    if style == "1k":
        return {"filename": f"{wnid}/{name}", "label": label, "width": 40, "height": 40}
    return {"width": 40, "height": 40}


def write_wds_shards(root: Path, copy: str, split: str, images: Images, shards: int, *, style: str = "22k",
                     extension: str = "jpg", digits: int = 4, classes: Sequence[str] = (), seed: int = 0) -> dict[str, int]:
    """``<copy>-<split>-NNNN.tar`` webdataset shards of ``images``, samples shuffled across the
    shards; a sample is ``<key>.cls``, ``<key>.<extension>``, ``<key>.json`` (the key: the
    original stem), the class index counting in ``classes`` (-1 when absent). Returns each
    shard's name -> its number of samples (for ``_info.json``)."""

    samples = [(wnid, name, data) for wnid, files in images.items() for name, data in files.items()]
    order = np.random.default_rng(seed).permutation(len(samples))
    lengths = {}
    for shard in range(shards):
        files = {}
        for index in order[shard::shards]:
            wnid, name, data = samples[index]
            key, label = name.rsplit(".", 1)[0], classes.index(wnid) if wnid in classes else -1
            files[f"{key}.cls"] = str(label).encode()
            files[f"{key}.{extension}"] = webp(data) if extension == "webp" else data
            files[f"{key}.json"] = json.dumps(wds_meta(style, wnid, name, label)).encode()
        name = f"{copy}-{split}-{shard:0{digits}d}.tar"
        write_tar(root / name, files)
        lengths[name] = len(files) // 3
    return lengths


def write_info(root: Path, splits: Mapping[str, Mapping[str, int]]) -> Path:
    """The copy's ``_info.json`` (timm's reader's format): each split's shards and lengths."""

    info = {"name": root.name, "splits": {split: {"name": split, "num_samples": sum(lengths.values()),
                                                  "filenames": list(lengths), "shard_lengths": list(lengths.values())}
                                          for split, lengths in splits.items()}}
    path = root / "_info.json"
    path.write_text(json.dumps(info))
    return path


def write_parquet_files(root: Path, split: str, images: Images, files: int, classes: Sequence[str],
                        row_group_size: int = 4, seed: int = 0) -> list[Path]:
    """``data/<split>-NNNNN-of-NNNNN.parquet`` as ``ILSVRC/imagenet-1k``: ``image`` = {bytes,
    path ``<stem>_<wnid>.JPEG``}, ``label`` (the index among ``classes``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [(wnid, name, data) for wnid, files_ in images.items() for name, data in files_.items()]
    order = np.random.default_rng(seed).permutation(len(rows))
    paths = []
    for number in range(files):
        chosen = [rows[index] for index in order[number::files]]
        table = pa.table({
            "image": [{"bytes": data, "path": f"{name.rsplit('.', 1)[0]}_{wnid}.JPEG"} for wnid, name, data in chosen],
            "label": [classes.index(wnid) for wnid, _, _ in chosen],
        })
        path = root / "data" / f"{split}-{number:05d}-of-{files:05d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, row_group_size=row_group_size)
        paths.append(path)
    return paths
