"""Images a decoder refuses, and how many of them a job may leave out
(``data.max_undecodable_fraction``), the one rule of extraction, fine-tuning and captioning.

Only a decoder's own errors mark an image: a file PIL cannot identify, one truncated or
unreadable (``OSError``, which a tar member cut short also raises), a broken chunk
(``SyntaxError``, ``EOFError``), a decompression bomb. Any other exception is a fault of the
job (a wrong setting, a missing codec, a bug) and fails it with its traceback. Every image of
ImageNet's releases decodes with PIL, so by default no image may fail: a job past the limit
stops, naming the first few, and writes no result.

The limit reaches the jobs through the environment (:data:`LIMIT_VARIABLE`, set by the
workflow from the config), not their command lines: a limit changed after a failure re-runs
the failed jobs only, never the finished ones (docs/architecture.md, "Staleness-only params").
"""

from __future__ import annotations

import logging
import os

from PIL import Image

from imagenet_cog.core.failures import ExplainedError

log = logging.getLogger("imagenet_cog.core.undecodable")

DECODER_ERRORS = (OSError, SyntaxError, EOFError, Image.DecompressionBombError)
LIMIT_SETTING = "data.max_undecodable_fraction"
LIMIT_VARIABLE = "IMAGENET_COG_MAX_UNDECODABLE_FRACTION"
NAMED = 5


class UndecodableImagesError(ExplainedError, RuntimeError):
    """More images failed to decode than the limit allows; the message names them and the fix."""


def default_limit() -> float:
    """The limit the workflow passed on (its jobs' environment), else none allowed."""
    value = os.environ.get(LIMIT_VARIABLE, "0")
    try:
        limit = float(value)
    except ValueError:
        raise ValueError(f"{LIMIT_VARIABLE}={value!r} is not a number; set {LIMIT_SETTING} in config.yaml.") from None
    if not 0 <= limit <= 1:
        raise ValueError(f"{LIMIT_VARIABLE}={value!r}: {LIMIT_SETTING} is a fraction between 0 and 1.")
    return limit


def error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


class UndecodableImages:
    """The images of one pass over ``total`` images (a shard, an epoch, a test split) that
    failed to decode. Past ``max_fraction`` of ``total``, :meth:`check` (at the pass's end)
    raises; :meth:`add` raises sooner, once :data:`NAMED` images are past it, so that a pass
    whose every image fails stops early and the message still names several."""

    def __init__(self, total: int, what: str, max_fraction: float | None = None, consequence: str = "recorded as invalid"):
        self.total = total
        self.what = what
        self.max_fraction = default_limit() if max_fraction is None else max_fraction
        self.consequence = consequence
        self.failed: list[tuple[str, str]] = []

    def __len__(self) -> int:
        return len(self.failed)

    def add(self, where: str, error: str) -> None:
        """One image (``where``: its file, or archive and member) failed with ``error``."""
        self.failed.append((where, error))
        log.warning("cannot decode %s: %s; %s", where, error, self.consequence)
        if len(self.failed) - self.allowed() >= NAMED:
            raise UndecodableImagesError(self.message(stopped_early=True))

    def allowed(self) -> int:
        return int(self.max_fraction * self.total)

    def check(self) -> None:
        if len(self.failed) > self.allowed():
            raise UndecodableImagesError(self.message(stopped_early=False))

    def message(self, stopped_early: bool) -> str:
        named = "\n".join(f"  {where}: {error}" for where, error in self.failed[:NAMED])
        more = f"\n  ... and {len(self.failed) - NAMED} more (the job's log)" if len(self.failed) > NAMED else ""
        return (
            f"{len(self.failed)}{' or more' if stopped_early else ''} of the {self.total} images of {self.what} failed to decode, more than "
            f"{LIMIT_SETTING} ({self.max_fraction:g}) allows:\n{named}{more}\n"
            f"Replace or remove those images (then delete the split tables and re-run), or raise "
            f"{LIMIT_SETTING} to leave them out."
        )
