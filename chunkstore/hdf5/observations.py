"""read_observations: the stored items of one array of a file, for tools (the codec benchmark)."""

from __future__ import annotations

import os

import numpy as np

from chunkstore.errors import FormatError
from chunkstore.hdf5._meta import open_file
from chunkstore.hdf5.reader import load

__all__ = ["read_observations"]


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
        with open_file(path) as (f, _):  # global heaps checked (chunkstore.hdf5._heapcheck)
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
