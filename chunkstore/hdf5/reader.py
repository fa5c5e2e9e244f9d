"""Open a saved store: its arrays lazily (memory-mapped) or eagerly, its extras and attrs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkstore.array import ChunkedArray, settle_loaded
from chunkstore.cache import LRUChunkCache
from chunkstore.codecs import codec_from_config
from chunkstore.errors import CodecConfigError, CorruptChunkError, FormatError
from chunkstore.hdf5._meta import (
    ArrayMeta,
    Header,
    damaged,
    open_file,
    read_array_meta,
    read_extra,
    read_header,
)
from chunkstore.hdf5._progress import ChunkBar
from chunkstore.hdf5.checksum import check_crc
from chunkstore.hdf5.filetier import FileTier, MappedFile
from chunkstore.tiers import MemoryTier, Tier, check_tier
from chunkstore.validate import check_count

__all__ = ["Store", "check_load_arguments", "chunk_spans", "load"]


@dataclass
class Store:
    """What :func:`load` returns: arrays, extras and attrs of one saved file.

    Lazily loaded arrays read their chunks from the file until :meth:`close`;
    use the store as a context manager, or keep it open while training.
    """

    arrays: dict[str, ChunkedArray]
    extras: dict[str, np.ndarray]
    attrs: dict[str, Any]
    path: str
    #: format_version, chunkstore_version, created, arrays, extras, checksums ("verified",
    #: or "none (format 1)"), hdf5_filters (per array: "zstd", "deflate", "none", or
    #: "chunkstore" where plain h5py cannot decode it) and chunks_per_hdf5_chunk (per array)
    header: dict[str, Any] = field(default_factory=dict)
    _file: MappedFile | None = field(default=None, repr=False)

    def close(self) -> None:
        """Stop reading the file (lazy arrays can no longer read their file chunks)."""
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load(
    path: str | os.PathLike[str],
    *,
    lazy: bool = True,
    tier: Tier | None = None,
    cache: LRUChunkCache | int | None = None,
    verify: bool | str | None = None,
    progress: bool = False,
) -> Store:
    """Open a file written by :func:`~chunkstore.hdf5.save`.

    Parameters
    ----------
    lazy
        True: chunks stay in the file (memory-mapped, read on demand); chunks
        written after the load go to ``tier`` (default: a MemoryTier per array).
        False: every chunk is copied into ``tier`` (default: a MemoryTier per array).
        Replace a lazily loaded file only by rename (see :mod:`~chunkstore.hdf5.filetier`).
    tier
        See ``lazy``; one tier may be shared by all arrays.
    cache
        The arrays' decoded-chunk cache, as for :class:`ChunkedArray`.
    verify
        None (default): check each chunk's CRC32 as it is loaded (eager), or (lazy)
        on its first read and again on its first read after the file's ctime moved,
        which catches a chunk rewritten in place after it was read even with the
        file's size and mtime put back (see :mod:`~chunkstore.hdf5.filetier`). True:
        also check every chunk up front when lazy. ``"always"``: (lazy) check a chunk
        on every read, whatever the timestamps say (costs sample time:
        ``tools/bench_lazy_verify.py``).
        False: no chunk checks. The metadata checksums (header, codec config and
        dictionary, chunk tables, extras) are always checked: they cost nothing.
    progress
        Progress bar over chunks for an eager load.

    Raises
    ------
    FormatError
        Not a regular file, not a chunkstore file (garbage, truncated, another HDF5
        file), a newer version, or sizes declared beyond what this machine can hold.
    CorruptFileError
        (a FormatError) Metadata that fails its checksum or cannot be parsed.
    CorruptChunkError
        A chunk or extra failed its checksum or is missing (names the array and chunk).
    """
    path = os.fspath(path)
    check_load_arguments(lazy=lazy, tier=tier, cache=cache, verify=verify)
    with open_file(path) as (f, fd):
        header = read_header(f, path)
        metas = [read_array_meta(f, name, header) for name in header.arrays]
        extras = {name: read_extra(f, name, header, verify is not False) for name in header.extras}
        mapped = MappedFile(path, fd)
    arrays = {}
    try:
        with ChunkBar(sum(len(m.chunks) for m in metas), "load", progress and not lazy) as bar:
            for meta in metas:
                check_locations(meta, mapped)
                build = _lazy_array if lazy else _eager_array
                arrays[meta.name] = build(meta, mapped, tier, cache, verify, bar)
    except BaseException:
        mapped.close()
        raise
    if not lazy:
        mapped.close()
    return Store(arrays, extras, header.attrs, path, _header_info(header, metas),
                 mapped if lazy else None)


def check_load_arguments(*, lazy: Any, tier: Any, cache: Any, verify: Any) -> None:
    """:func:`load`'s options, checked before the file is opened: a bad one is the caller's
    TypeError / ValueError naming it, never a FormatError about the file."""
    if not isinstance(lazy, (bool, np.bool_)):
        raise TypeError(f"lazy must be True or False, got {type(lazy).__name__} {lazy!r}")
    check_tier(tier)
    if cache is not None and not isinstance(cache, LRUChunkCache):
        check_count("cache", cache, 0)
    if verify not in (None, True, False, "always"):
        raise ValueError(f"verify must be None, True, False or 'always', got {verify!r}")


def chunk_spans(path: str | os.PathLike[str], name: str) -> np.ndarray:
    """Where the bytes of array ``name``'s stored chunks lie in the file, without reading them.

    Returns an ``(n, 3)`` int64 table: chunk index, byte offset in the file, nbytes, of
    the bytes chunkstore loads (the verbatim tail copy for a zero-padded last chunk);
    offset -1 for a listed chunk the file does not hold. Every format version: in
    format 3 one HDF5 chunk may hold several of these spans.

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> from chunkstore import ChunkedArray
    >>> from chunkstore.hdf5 import save
    >>> a = ChunkedArray(64, (), np.uint8, chunk_len=8, codec="lz4-block", name="a")
    >>> a[:20] = 1
    >>> path = tempfile.mkdtemp() + "/s.h5"
    >>> save(path, {"a": a}, progress=False)
    >>> chunk_spans(path, "a")[:, 0].tolist()
    [0, 1, 2]
    """
    path = os.fspath(path)
    with open_file(path) as (f, _):
        header = read_header(f, path)
        if name not in header.arrays:
            raise KeyError(f"{path} has no chunked array {name!r}; it has {header.arrays}")
        chunks, offsets, nbytes, _ = read_array_meta(f, name, header).sources()
    return np.stack([chunks, offsets, nbytes], axis=1).astype(np.int64)


def _header_info(header: Header, metas: list[ArrayMeta]) -> dict[str, Any]:
    return {
        "format_version": header.format_version,
        "chunkstore_version": header.chunkstore_version,
        "created": header.created,
        "arrays": header.arrays,
        "extras": header.extras,
        "checksums": "verified" if header.checksums is not None else "none (format 1)",
        "hdf5_filters": {m.name: m.hdf5_filter for m in metas},
        "chunks_per_hdf5_chunk": {m.name: m.group for m in metas},
    }


def check_locations(meta: ArrayMeta, mapped: MappedFile) -> None:
    """Every listed chunk is in the file, within its bytes."""
    chunks, offsets, nbytes, _ = meta.sources()
    for c in chunks[meta.offsets < 0].tolist():
        raise CorruptChunkError(f"{meta.name}: chunk {c} is listed as stored but missing from "
                                f"{mapped.path}", array=meta.name, chunk=c)
    for c in chunks[(offsets < 0) | (offsets + nbytes > mapped.size)].tolist():
        raise CorruptChunkError(f"{meta.name}: chunk {c} lies beyond the end of {mapped.path}; "
                                "the file is truncated", array=meta.name, chunk=c)


def new_array(meta: ArrayMeta, tier: Tier, cache: LRUChunkCache | int | None,
              path: str, own_tier: bool = True) -> ChunkedArray:
    """An empty ChunkedArray with the file's geometry and codec (owning ``tier`` unless told not to)."""
    try:
        codec = codec_from_config(meta.codec_config)
    except CodecConfigError as e:
        raise FormatError(f"{path}: array {meta.name!r}: this chunkstore cannot read its codec: "
                          f"{e}") from e
    with damaged(path, f"array {meta.name!r}"):
        return ChunkedArray(meta.capacity, meta.item_shape, meta.dtype, chunk_len=meta.chunk_len,
                            codec=codec, tier=tier, cache=cache, name=meta.name, own_tier=own_tier)


#: chunks adopted per call by a lazy load (its temporaries: ~60 bytes a chunk)
ADOPT_BLOCK = 1 << 20


def _lazy_array(meta: ArrayMeta, mapped: MappedFile, tier: Tier | None,
                cache: LRUChunkCache | int | None, verify: bool | str | None, bar: ChunkBar) -> ChunkedArray:
    chunks, offsets, nbytes, crcs = meta.sources()
    ftier = FileTier(mapped, chunks, offsets, nbytes, crcs, writable=tier, name=meta.name,
                     verify="always" if verify == "always" else verify is not False)
    arr = new_array(meta, ftier, cache, mapped.path)
    for lo in range(0, len(chunks), ADOPT_BLOCK):  # the file bytes stay where they are; in blocks,
        hi = lo + ADOPT_BLOCK  # so the reference tables of 12.5M chunks are never all built at once
        arr.adopt_chunks(chunks[lo:hi], ftier.adopt(offsets[lo:hi], nbytes[lo:hi]), train=False)
    if verify is True:
        ftier.verify_all()
    settle_loaded(arr)
    return arr


def _eager_array(meta: ArrayMeta, mapped: MappedFile, tier: Tier | None,
                 cache: LRUChunkCache | int | None, verify: bool | str | None, bar: ChunkBar) -> ChunkedArray:
    arr = new_array(meta, tier if tier is not None else MemoryTier(), cache, mapped.path,
                    own_tier=tier is None)  # a tier the caller gave stays the caller's
    chunks, offsets, nbytes, crcs = meta.sources()
    for k, (c, off, n) in enumerate(zip(chunks.tolist(), offsets.tolist(), nbytes.tolist(),
                                        strict=True)):
        data = mapped.view(off, n)
        if verify is not False:
            check_crc(data, crcs[k], f"{meta.name}: chunk {c} in {mapped.path}",
                      array=meta.name, chunk=c)
        arr.put_chunk_bytes(c, data, train=False)
        bar.step()
    settle_loaded(arr)
    return arr
