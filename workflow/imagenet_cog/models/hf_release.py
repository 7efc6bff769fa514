"""Where a Hugging Face ``transformers`` checkpoint's files are, found without torch or
transformers: a Hub repo at a revision, its files in the Hugging Face cache (``HF_HOME``), or a
folder written by ``save_pretrained``.

A Hub repo is asked of the Hub (its commit and its files' LFS sha256, without downloading the
weights; the small JSON files are downloaded into the cache); where the Hub cannot be reached,
or ``HF_HUB_OFFLINE`` is set (nodes without internet), of the cache alone: the snapshot of the
revision's commit, whose weight files are links to blobs named by their sha256. Either way the
release's identity is its repo, its commit and its weight files' sha256, so that a run planned
online and one planned from the cache agree, and a re-download changes nothing. A folder's
identity is its files' content (its path is not in it).

What is refused here, naming the repo or folder: one that does not exist (or that neither the
Hub nor the cache has), and one whose weights are not safetensors (a pickle, ``.bin``, runs code
when loaded). What its config asks (remote code, a family the workflow reads) is
:mod:`imagenet_cog.models.hf_catalogue`'s.

A checkpoint of such a network (``weights:`` of an ``hf/`` model, a series' step) is a folder as
transformers' ``Trainer`` writes each ``checkpoint-<step>``: its safetensors weights are read as
``from_pretrained`` picks them (:func:`checkpoint_weight_files`), its other files (the optimizer's
state, the trainer's, pickles) never; its content is those weights' (:func:`checkpoint_digest`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from huggingface_hub import HfApi, constants, hf_hub_download, try_to_load_from_cache
from huggingface_hub.errors import (
    GatedRepoError,
    HFValidationError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import validate_repo_id

from imagenet_cog.core.failures import ExplainedError

CONFIG = "config.json"
PROCESSOR_CONFIG = "preprocessor_config.json"
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# the files of weights a pickle holds (transformers' pytorch_model.bin, and the like)
PICKLED_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
# remote code: the Python files a repo's auto_map names
CODE_SUFFIX = ".py"
COMMIT = re.compile(r"^[0-9a-f]{40}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
DEFAULT_REVISION = "main"


class HfReleaseUnavailable(ExplainedError, FileNotFoundError):
    """A repo or folder that is not there, or that neither the Hub nor the cache can give."""


class HfReleaseRefused(ExplainedError, ValueError):
    """A release whose files the workflow does not load (weights that are not safetensors)."""


def names_folder(source: str) -> bool:
    """Whether ``hf/<source>`` names a folder (``./models/my-vit``, ``/data/vit``) rather than a repo."""
    return source.startswith((".", "/", "~"))


def fill_command(repo: str, revision: str | None, code: bool = False) -> str:
    """The command that puts a repo's files the workflow reads into the Hugging Face cache."""
    pinned = f" --revision {revision}" if revision else ""
    patterns = ["*.json", "*.safetensors"] + (["*.py"] if code else [])
    return f"hf download {repo}{pinned} " + " ".join(f"--include '{pattern}'" for pattern in patterns)


@dataclass(frozen=True)
class HfRelease:
    """A release the workflow reads: ``source`` as the arch writes it after ``hf/``; ``folder``,
    where its config is (the folder itself, or the cache's snapshot of ``commit``); ``files``,
    every file it has; ``digests``, the sha256 of the files whose content is known without
    reading them (the Hub's LFS files)."""

    source: str
    folder: Path
    commit: str | None
    files: tuple[str, ...]
    digests: tuple[tuple[str, str], ...] = ()

    @property
    def is_folder(self) -> bool:
        return self.commit is None

    @property
    def title(self) -> str:
        return f"folder {self.source}" if self.is_folder else f"repo {self.source}"

    @functools.cached_property
    def config(self) -> dict[str, Any]:
        return read_json(self.folder / CONFIG, self.title)

    @functools.cached_property
    def processor_config(self) -> dict[str, Any] | None:
        path = self.folder / PROCESSOR_CONFIG
        return read_json(path, self.title) if PROCESSOR_CONFIG in self.files and path.is_file() else None

    def code_files(self) -> list[str]:
        return sorted(name for name in self.files if name.endswith(CODE_SUFFIX))

    def weight_files(self) -> list[str]:
        """The safetensors files of the weights (a sharded checkpoint's shards, as its index
        names them); a release without them is refused, saying what it has instead."""
        if SAFETENSORS_INDEX in self.files:
            index = read_json(self.folder / SAFETENSORS_INDEX, self.title)
            return sorted(set(index.get("weight_map", {}).values()))
        if SAFETENSORS in self.files:
            return [SAFETENSORS]
        pickled = [name for name in self.files if name.endswith(PICKLED_SUFFIXES)]
        if pickled:
            raise HfReleaseRefused(
                f"{self.title} holds its weights only as {', '.join(pickled[:3])}, a pickle: loading it can run code "
                f"from the file, so it is not loaded. Use a revision with {SAFETENSORS} (the Hub's safetensors "
                f"conversion, a pull request: revision: refs/pr/<n>), or convert it where you trust it "
                f"(transformers' from_pretrained, then save_pretrained into a folder, named as arch: hf/<folder>)."
            )
        raise HfReleaseRefused(f"{self.title} has no {SAFETENSORS} (nor {SAFETENSORS_INDEX}): it holds no PyTorch "
                               f"weights of transformers; its files are {', '.join(self.files[:8])}.")

    def weights_digest(self, digest: Callable[[str | os.PathLike], str]) -> str:
        """One sha256 of the weight files' names and sha256 (the LFS digests, else ``digest`` of
        the file, a folder's or a cached file the Hub did not list)."""
        known = dict(self.digests)
        return listing_digest((name, known.get(name) or digest(self.folder / name)) for name in self.weight_files())

    def identity(self, digest: Callable[[str | os.PathLike], str], code: bool = False) -> str:
        """``hf:<repo>@<commit>`` or ``hf:folder`` with its config's digest, then the weights'
        digest (and, with ``code``, the Python files' a folder runs)."""
        weights = f"+safetensors:{self.weights_digest(digest)}"
        if not self.is_folder:
            return f"hf:{self.source}@{self.commit}{weights}"
        return f"hf:folder+config:{self.config_digest(digest, code)}{weights}"

    def config_digest(self, digest: Callable[[str | os.PathLike], str], code: bool = False) -> str:
        """The network's description: its config's content (with ``code``, and its Python files')."""
        shown = [CONFIG, *(self.code_files() if code else [])]
        return listing_digest((name, digest(self.folder / name)) for name in shown)[:16]


def listing_digest(files: Iterable[tuple[str, str]]) -> str:
    """One sha256 of files' names and digests, a line each in the order given."""
    return hashlib.sha256("".join(f"{name} {digest}\n" for name, digest in files).encode()).hexdigest()


def checkpoint_weight_files(checkpoint: str | os.PathLike) -> list[Path]:
    """The safetensors files of a checkpoint folder, as ``from_pretrained`` picks them in a
    folder: its ``model.safetensors``, else the shards its index names; a folder without them
    (or with a shard missing) is refused, naming it."""
    folder = Path(checkpoint)
    if not folder.is_dir():
        raise HfReleaseRefused(f"checkpoint {checkpoint} is no folder: an hf/ model's checkpoint is a folder of "
                               f"safetensors weights, as transformers' Trainer writes each checkpoint-<step>.")
    if (folder / SAFETENSORS).is_file():
        return [folder / SAFETENSORS]
    if (folder / SAFETENSORS_INDEX).is_file():
        index = read_json(folder / SAFETENSORS_INDEX, f"checkpoint {checkpoint}")
        shards = [folder / name for name in sorted(set(index.get("weight_map", {}).values()))]
        missing = [shard.name for shard in shards if not shard.is_file()]
        if missing or not shards:
            raise HfReleaseRefused(f"checkpoint {checkpoint}: {SAFETENSORS_INDEX} names shards the folder lacks "
                                   f"({', '.join(missing[:3]) or 'none named'}).")
        return shards
    pickled = sorted(path.name for path in folder.glob("pytorch_model*.bin"))
    held = f"; its weights are {', '.join(pickled[:3])}, a pickle, which is not loaded" if pickled else ""
    raise HfReleaseRefused(f"checkpoint {checkpoint} has no {SAFETENSORS} (nor {SAFETENSORS_INDEX}){held}. Save the "
                           f"weights as safetensors (Trainer's default, save_safetensors; save_pretrained's).")


def checkpoint_digest(checkpoint: str | os.PathLike, digest: Callable[[str | os.PathLike], str]) -> str:
    """A checkpoint folder's content: its one weights file's ``digest``, else one sha256 of its
    shards' names and digests."""
    files = checkpoint_weight_files(checkpoint)
    if len(files) == 1:
        return digest(files[0])
    return listing_digest((path.name, digest(path)) for path in files)


def read_json(path: Path, title: str) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise HfReleaseRefused(f"{title}: {path.name} cannot be read as JSON ({type(error).__name__}: {error}).") from None


# Kept: planning asks for a model's release at each of its jobs' parameters.
@functools.cache
def resolve_release(source: str, revision: str | None, owner: str, *, code: bool = False,
                    fetch_weights: bool = False, weights: bool = True) -> HfRelease:
    """The release ``hf/<source>`` names at ``revision``; ``code``: its Python files are fetched
    too (remote code the entry trusts); ``fetch_weights``: its weights are downloaded into the
    cache if they are not there (the extraction job's); ``weights`` false: its weights are not
    read (the model's are a checkpoint's), and the cache need not hold them. ``owner`` names the
    config entry."""
    if names_folder(source):
        if revision is not None:
            raise HfReleaseRefused(f"{owner}: revision is a setting of Hub repos; {source} is a folder.")
        return folder_release(source, owner)
    try:
        validate_repo_id(source)
    except HFValidationError as error:
        raise HfReleaseRefused(f"{owner}: hf/{source} names neither a Hub repo (org/name) nor a folder (./path, "
                               f"/path): {error}") from None
    listed = None if constants.HF_HUB_OFFLINE else hub_listing(source, revision, owner)
    if listed is None:
        return cached_release(source, revision, owner, code, weights)
    commit, files, digests = listed
    wanted = [name for name in (CONFIG, PROCESSOR_CONFIG, SAFETENSORS_INDEX) if name in files]
    wanted += [name for name in files if code and name.endswith(CODE_SUFFIX)]
    paths = [hf_hub_download(source, name, revision=commit) for name in wanted]
    release = HfRelease(source, Path(paths[0]).parent, commit, files, digests)
    if CONFIG not in files:
        raise HfReleaseRefused(f"{owner}: {release.title} has no {CONFIG}: it is no transformers checkpoint.")
    if fetch_weights and weights:
        for name in release.weight_files():
            hf_hub_download(source, name, revision=commit)
    return release


def folder_release(source: str, owner: str) -> HfRelease:
    folder = Path(source).expanduser()
    if not folder.is_dir():
        raise HfReleaseUnavailable(f"{owner}: folder {source} does not exist (relative to {Path.cwd()}); fix the path "
                                   f"in arch: hf/<folder>, a folder written by save_pretrained.")
    files = tuple(sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()))
    if CONFIG not in files:
        raise HfReleaseRefused(f"{owner}: folder {source} has no {CONFIG}: it is not a folder written by "
                               f"transformers' save_pretrained.")
    return HfRelease(source, folder, None, files)


# Kept: a model's release is resolved with and without its weights (its identity, its plan).
@functools.cache
def hub_listing(repo: str, revision: str | None, owner: str) -> tuple[str, tuple[str, ...], tuple] | None:
    """(commit, files, LFS digests) of the repo at ``revision`` as the Hub says; None where the
    Hub cannot be reached (the cache is asked instead)."""
    try:
        info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    except GatedRepoError:
        raise HfReleaseUnavailable(f"{owner}: the Hub's repo {repo} is gated: accept its terms on "
                                   f"https://huggingface.co/{repo}, then log in (hf auth login).") from None
    except RepositoryNotFoundError:
        raise HfReleaseUnavailable(f"{owner}: the Hub has no model repo {repo} (or it is private: log in with "
                                   f"hf auth login); check the name in arch: hf/{repo}.") from None
    except RevisionNotFoundError:
        raise HfReleaseUnavailable(f"{owner}: the Hub's repo {repo} has no revision '{revision}' (a branch, tag or "
                                   f"commit); fix the entry's revision.") from None
    except Exception:  # the Hub out of reach, whatever the transport says: the cache may hold it
        return None
    digests = tuple(sorted((sibling.rfilename, sibling.lfs.sha256) for sibling in info.siblings or () if sibling.lfs))
    return info.sha, tuple(sorted(sibling.rfilename for sibling in info.siblings or ())), digests


def cached_release(repo: str, revision: str | None, owner: str, code: bool, weights: bool = True) -> HfRelease:
    """The release from the Hugging Face cache alone (HF_HUB_OFFLINE, or the Hub out of reach):
    the snapshot of the revision's commit, its weight files' digests the names of their blobs
    (``weights`` false: its config alone is needed)."""
    found = try_to_load_from_cache(repo, CONFIG, revision=revision or DEFAULT_REVISION)
    why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the Hub cannot be reached"
    fill = fill_command(repo, revision, code)
    if not isinstance(found, str):
        raise HfReleaseUnavailable(
            f"{owner}: {why}, and the Hugging Face cache ({constants.HF_HUB_CACHE}) has no {repo} at revision "
            f"'{revision or DEFAULT_REVISION}'. Fill it once where there is internet, with the same HF_HOME as this "
            f"machine: {fill}")
    folder = Path(found).parent
    files = tuple(sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()))
    digests = tuple(sorted((name, Path(os.path.realpath(folder / name)).name) for name in files
                           if name.endswith(".safetensors") and SHA256.match(Path(os.path.realpath(folder / name)).name)))
    release = HfRelease(repo, folder, folder.name, files, digests)
    if not weights:
        return release
    if not any(name.endswith((".safetensors", *PICKLED_SUFFIXES)) or name == SAFETENSORS_INDEX for name in files):
        raise HfReleaseUnavailable(
            f"{owner}: {why}, and the Hugging Face cache holds {repo}'s config at commit {folder.name} but not its "
            f"weights. Fill it once where there is internet, with the same HF_HOME: {fill}")
    missing = [name for name in release.weight_files() if name not in files]
    if missing:
        raise HfReleaseUnavailable(
            f"{owner}: {why}, and the Hugging Face cache holds {repo} at commit {folder.name} without "
            f"{', '.join(missing[:3])}. Fill it once where there is internet, with the same HF_HOME: {fill}")
    return release
