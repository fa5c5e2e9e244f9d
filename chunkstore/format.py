"""The former name of :mod:`chunkstore.hdf5`, kept so that existing imports keep working.

``from chunkstore import format as fmt; fmt.save(...)`` / ``fmt.load`` / ``fmt.verify``
are :mod:`chunkstore.hdf5`'s functions. New code imports :mod:`chunkstore.hdf5`.
:func:`read_observations`, a helper of the codec benchmark, stays here for the scripts
that import it from this module.
"""

from __future__ import annotations

import os

import h5py
import numpy as np

from chunkstore.errors import FormatError
from chunkstore.hdf5 import (
    FORMAT_NAME,
    FORMAT_VERSION,
    PRIVATE_FILTER_ID,
    Problem,
    Store,
    VerifyReport,
    load,
    save,
    verify,
    verify_report,
)

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "PRIVATE_FILTER_ID",
    "Problem",
    "Store",
    "VerifyReport",
    "load",
    "read_observations",
    "save",
    "verify",
    "verify_report",
]


def read_observations(path: str | os.PathLike[str], name: str = "observations",
                      limit: int | None = None) -> np.ndarray:
    """The stored items of one array, in index order, for tools such as the codec advisor.

    For a chunkstore file, only chunks that were written are returned (never the
    zeros of unwritten ones), up to ``limit`` items. Any other HDF5 file is read
    with plain h5py: ``f[name][:limit]``.
    """
    path = os.fspath(path)
    try:
        store = load(path, lazy=True, cache=0)
    except FormatError:
        with h5py.File(path, "r") as f:
            if name not in f:
                raise KeyError(f"{path} has no dataset {name!r}; it has {sorted(f)}") from None
            return np.asarray(f[name][:limit])
    with store:
        if name not in store.arrays:
            raise KeyError(f"{path} has no chunked array {name!r}; it has {sorted(store.arrays)}")
        arr = store.arrays[name]
        L = arr.chunk_len
        chunks = arr.stored_chunks()
        idx = (chunks[:, None] * L + np.arange(L)).reshape(-1)
        idx = idx[idx < arr.capacity]
        return arr.take(idx[:limit])
