"""The concept of each ILSVRC2012 validation image, read from the files that record it.

``ILSVRC2012_img_val.tar`` holds 50,000 flat files ``ILSVRC2012_val_NNNNNNNN.JPEG``; their
concepts are recorded elsewhere, in one of these (the first found is used):

* the devkit (``ILSVRC2012_devkit_t12.tar.gz`` as downloaded, or its extracted folder):
  ``data/ILSVRC2012_validation_ground_truth.txt`` holds one ILSVRC2012_ID (1-1000) per image
  in file order, and ``data/meta.mat`` maps IDs to wnids (its ``synsets`` struct). The IDs
  follow the devkit's own class order, not the sorted wnids (ID 1 is n02119789), so they are
  always mapped through ``meta.mat``, or through ``map_clsloc.txt`` (``wnid id name`` per
  line) where a devkit has that instead;
* ``LOC_val_solution.csv`` (``ImageId,PredictionString``; the first word of the prediction
  string is the wnid);
* a text file with one wnid per line in image order (e.g.
  ``imagenet_2012_validation_synset_labels.txt``), or one ``<file name> <wnid>`` pair per line
  (spaces, tabs or a comma).

Labels are keyed by the image's name without extension (``ILSVRC2012_val_00000001``), so
``.JPEG`` and ``.jpg`` copies match.
"""

from __future__ import annotations

import csv
import io
import os
import re
import tarfile
from pathlib import Path

from imagenet_cog.core.failures import ExplainedError

WNID = re.compile(r"^n[0-9]{8}$")
VAL_STEM = re.compile(r"^ILSVRC2012_val_([0-9]{8})$")
DEVKIT_NAMES = ("ILSVRC2012_devkit_t12.tar.gz", "ILSVRC2012_devkit_t12.tgz", "ILSVRC2012_devkit_t12")
OTHER_LABEL_FILES = ("LOC_val_solution.csv", "imagenet_2012_validation_synset_labels.txt")
GROUND_TRUTH = "data/ILSVRC2012_validation_ground_truth.txt"
META = "data/meta.mat"
CLASS_MAP = "data/map_clsloc.txt"


class LabelError(ExplainedError, ValueError):
    """Validation labels that cannot be read; the message names the file and the fix."""


def val_stem(name: str) -> str:
    return os.path.splitext(name.rsplit("/", 1)[-1])[0]


def val_name(number: int) -> str:
    """The stem of validation image ``number`` (1-based)."""
    return f"ILSVRC2012_val_{number:08d}"


def find_labels(root: str | os.PathLike, configured: str | os.PathLike | None = None) -> Path | None:
    """The labels file to read: the configured one, else a devkit or a known labels file in
    ``root``; None when there is none."""
    if configured:
        return Path(configured)
    for name in (*DEVKIT_NAMES, *OTHER_LABEL_FILES):
        if (Path(root) / name).exists():
            return Path(root) / name
    return None


def _devkit_files(path: Path) -> dict[str, bytes]:
    """``data/...`` files of a devkit, from its tar(.gz) or its extracted folder."""
    wanted = (GROUND_TRUTH, META, CLASS_MAP)
    if path.is_dir():
        return {name: (path / name).read_bytes() for name in wanted if (path / name).is_file()}
    files = {}
    with tarfile.open(path) as archive:
        for member in archive:
            for name in wanted:
                if member.isfile() and (member.name == name or member.name.endswith("/" + name)):
                    files[name] = archive.extractfile(member).read()
    return files


def _meta_wnids(data: bytes, path: Path) -> dict[int, str]:
    """ILSVRC2012_ID -> wnid from the devkit's meta.mat (leaf synsets only)."""
    # scipy.io (~0.7 s to import) only for the devkit's .mat: core is imported by light commands
    from scipy.io import loadmat

    synsets = loadmat(io.BytesIO(data), squeeze_me=True)["synsets"]
    ids = {}
    for record in synsets:
        number, wnid, children = int(record["ILSVRC2012_ID"]), str(record["WNID"]), int(record["num_children"])
        if children == 0:
            ids[number] = wnid
    if not ids:
        raise LabelError(f"{path}: {META} lists no leaf synset; it is not the ILSVRC2012 devkit.")
    return ids


def _class_map_wnids(text: str, path: Path) -> dict[int, str]:
    ids = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and WNID.match(fields[0]) and fields[1].isdigit():
            ids[int(fields[1])] = fields[0]
    if not ids:
        raise LabelError(f"{path}: {CLASS_MAP} holds no 'wnid id name' line.")
    return ids


def devkit_labels(path: Path) -> dict[str, str]:
    files = _devkit_files(path)
    if GROUND_TRUTH not in files or not ({META, CLASS_MAP} & set(files)):
        raise LabelError(
            f"{path} has no {GROUND_TRUTH} with {META} (or {CLASS_MAP}); use the ILSVRC2012 devkit "
            f"(ILSVRC2012_devkit_t12.tar.gz) or set data.in1k_val_labels to a labels file."
        )
    ids = _meta_wnids(files[META], path) if META in files else _class_map_wnids(files[CLASS_MAP].decode(), path)
    labels = {}
    for number, line in enumerate(files[GROUND_TRUTH].decode().split(), start=1):
        if not line.isdigit() or int(line) not in ids:
            raise LabelError(f"{path}: line {number} of {GROUND_TRUTH} is {line!r}, not a class ID of the devkit.")
        labels[val_name(number)] = ids[int(line)]
    return labels


def text_labels(path: Path) -> dict[str, str]:
    text = path.read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines and lines[0].replace(" ", "").lower().startswith("imageid,predictionstring"):
        labels = {}
        for number, row in enumerate(csv.reader(lines[1:]), start=2):
            if len(row) < 2 or not row[1].split() or not WNID.match(row[1].split()[0]):
                raise LabelError(f"{path}, line {number}: expected 'ImageId,<wnid> ...', got {','.join(row)!r}.")
            labels[val_stem(row[0])] = row[1].split()[0]
        return labels
    if all(WNID.match(line) for line in lines):
        return {val_name(number): wnid for number, wnid in enumerate(lines, start=1)}
    labels = {}
    for number, line in enumerate(lines, start=1):
        fields = re.split(r"[\s,]+", line)
        if len(fields) != 2 or not WNID.match(fields[1]):
            raise LabelError(
                f"{path}, line {number}: {line!r} is not '<file name> <wnid>'; the labels file should hold "
                f"one wnid per line in image order, '<file name> <wnid>' pairs, or be LOC_val_solution.csv "
                f"(an integer class index is not accepted: its class order is not recorded)."
            )
        labels[val_stem(fields[0])] = fields[1]
    return labels


def read_val_labels(path: str | os.PathLike, setting: str = "data.in1k_val_labels") -> dict[str, str]:
    """Validation image stem -> wnid, from a devkit or a labels file (module docstring)."""
    path = Path(path)
    if not path.exists():
        raise LabelError(f"{setting}: {path} does not exist; point it at the ILSVRC2012 devkit or a labels file.")
    try:
        if path.is_dir() or path.name.endswith((".tar.gz", ".tgz", ".tar")):
            labels = devkit_labels(path)
        else:
            labels = text_labels(path)
    except (OSError, tarfile.TarError, UnicodeDecodeError, KeyError, ValueError) as error:
        if isinstance(error, LabelError):
            raise
        raise LabelError(f"{setting}: {path} cannot be read as validation labels ({error}).") from None
    if not labels:
        raise LabelError(f"{setting}: {path} holds no validation label.")
    return labels
