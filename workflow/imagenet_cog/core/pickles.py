"""Reading the authors' published data pickles without letting them run code.

The authors publish their levels (``cog_levels_mapping_file.pkl``) and image splits
(``cog_concepts_split_file.pkl``) as Python pickles. Unpickling calls whatever functions a
file names, so a file replaced on a mirror or a shared disk could run any code with the
user's rights on every node that reads it. :func:`read_data_pickle` reads them with an
unpickler that builds only what those files hold: lists, dicts, tuples, strings, bytes,
numbers, and numpy arrays and scalars of strings or numbers, as numpy 1.x and 2.x write
them. Any other object the file asks for is refused before it is built, with
:class:`UnsafePickleError` naming the file, the object and the fix.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import numpy as np

from imagenet_cog.core.failures import ExplainedError


class UnsafePickleError(ExplainedError, pickle.UnpicklingError):
    """A data pickle asks for an object the reader does not build."""


class _Refused(Exception):
    """Raised inside the unpickler; :func:`read_data_pickle` adds the file and the fix."""


class _ArrayType:
    """Stands for ``numpy.ndarray`` inside a pickle: numpy's rebuild function takes the class
    as its first argument, but the class itself must not be callable from the file (an
    ndarray made from a buffer with an object dtype reads raw bytes as object pointers)."""

    def __call__(self, *arguments: Any) -> None:
        raise _Refused("numpy.ndarray called directly (only numpy's array rebuild may use it)")


_ARRAY_TYPE = _ArrayType()
# numpy's own rebuild functions, taken from what this numpy writes (their module moved from
# numpy.core to numpy._core in numpy 2.0; both names are accepted below).
_RECONSTRUCT = np.empty(0).__reduce__()[0]
_SCALAR = np.float64(0).__reduce__()[0]
_FROM_BUFFER = np.empty(0).__reduce_ex__(5)[0]


def _reconstruct_array(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
    """numpy's ``_reconstruct`` for plain ndarrays only (the values arrive in ``__setstate__``,
    which refuses raw bytes for object arrays)."""
    if subtype is not _ARRAY_TYPE:
        raise _Refused(f"numpy's array rebuild asked for a {type(subtype).__name__} instead of numpy.ndarray")
    return _RECONSTRUCT(np.ndarray, shape, dtype)


def _latin1_bytes(text: str, encoding: str) -> bytes:
    """``_codecs.encode`` as pickle protocols 0-2 use it for bytes (numpy's array data)."""
    if encoding not in ("latin1", "latin-1"):
        raise _Refused(f"_codecs.encode with the encoding {encoding!r} (only latin1 carries bytes)")
    return text.encode("latin1")


ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): _ARRAY_TYPE,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_bytes,
    **{(f"numpy.{core}.multiarray", "_reconstruct"): _reconstruct_array for core in ("core", "_core")},
    **{(f"numpy.{core}.multiarray", "scalar"): _SCALAR for core in ("core", "_core")},
    **{(f"numpy.{core}.numeric", "_frombuffer"): _FROM_BUFFER for core in ("core", "_core")},
}


class DataUnpickler(pickle.Unpickler):
    """An unpickler that builds only :data:`ALLOWED_GLOBALS` besides Python's plain values."""

    def find_class(self, module: str, name: str) -> Any:
        allowed = ALLOWED_GLOBALS.get((module, name))
        if allowed is None:
            raise _Refused(f"{module}.{name}")
        return allowed


def read_data_pickle(path: str | os.PathLike) -> Any:
    """The content of a data pickle (the authors' levels or splits); refuses any other object.

    Raises :class:`UnsafePickleError` (a :class:`pickle.UnpicklingError`) naming the file, the
    object it would have built and the fix; nothing the file names is called.
    """
    with open(path, "rb") as stream:
        try:
            return DataUnpickler(stream).load()
        except _Refused as refused:
            raise UnsafePickleError(
                f"{path} asks to build {refused}, which was refused: a data pickle here may hold "
                f"only lists, dicts, strings, numbers and numpy arrays of strings or numbers, and "
                f"building anything else could run code from the file. Nothing from it was run. "
                f"Download the authors' file again from the address in docs/imagenet.md, or write "
                f"your own with only those types."
            ) from None
        except (TypeError, ValueError) as error:  # numpy refusing malformed array data
            raise pickle.UnpicklingError(f"{path}: {error}") from None
