"""Reading a file's metadata, checked before anything is trusted or allocated.

Used by :mod:`~chunkstore.hdf5.reader` and :mod:`~chunkstore.hdf5.verify`. Every
failure is a :class:`~chunkstore.errors.FormatError` (not a chunkstore file,
a newer version, sizes refused), a :class:`~chunkstore.errors.CorruptFileError`
(damaged or checksum-failing metadata) or a
:class:`~chunkstore.errors.CorruptChunkError` (an extra's bytes), naming the file
and what is wrong; HDF5's and numpy's own exceptions never escape.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np
import psutil
import zstandard

from chunkstore.errors import ChunkstoreError, CorruptFileError, FormatError
from chunkstore.hdf5._groups import (
    MAX_HDF5_CHUNK_BYTES,
    group_bounds,
    group_nbytes,
    offsets_in_groups,
)
from chunkstore.hdf5._heapcheck import HeapCheckedFile
from chunkstore.hdf5._layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    GROUP_ATTR,
    META,
    array_record,
    attr_value,
    check_name,
    dtype_from_json,
    extra_record,
    header_record,
    index_record,
    raw_bytes,
)
from chunkstore.hdf5.checksum import check_crc, crc32, record_crc
from chunkstore.validate import is_int

__all__ = ["ArrayMeta", "Header", "chunk_locations", "open_file", "read_array_meta",
           "read_extra", "read_header"]

#: bytes of ChunkedArray's chunk table per chunk (segment, offset, length, version)
TABLE_BYTES_PER_CHUNK = 20
#: HDF5 refuses chunks of 4 GiB or more; so does this reader
MAX_CHUNK_BYTES = MAX_HDF5_CHUNK_BYTES
#: a codec config dataset larger than this is not a codec config
MAX_CONFIG_BYTES = 16 << 20
#: the filters chunkstore puts on large extras: HDF5's shuffle, hdf5plugin's Zstd
_HDF5_SHUFFLE, _HDF5_ZSTD = 2, 32015


@dataclass
class Header:
    """The root attributes of a chunkstore file, parsed and (format 2) checksummed."""

    path: str
    format_version: int
    chunkstore_version: str
    created: str
    attrs: dict[str, Any]
    arrays: list[str]
    extras: list[str]
    checksums: dict[str, Any] | None  # None: format 1 files have none


@dataclass
class ArrayMeta:
    """One array's geometry, codec and chunk table, as read from the file."""

    name: str
    capacity: int
    item_shape: tuple[int, ...]
    dtype: np.dtype
    chunk_len: int
    codec_config: dict[str, Any]
    hdf5_filter: str
    chunks: np.ndarray  # stored chunk indices
    crc32: np.ndarray  # CRC32 of each stored chunk's HDF5 bytes
    offsets: np.ndarray  # file offset of each stored chunk (-1: missing from the file)
    nbytes: np.ndarray  # size of each stored chunk's bytes in its HDF5 chunk
    tail: tuple[int, int, int] | None  # verbatim last chunk: offset, nbytes, crc32
    #: (HDF5 chunk, offset, nbytes, filter mask) of every HDF5 chunk the file holds; HDF5
    #: chunk g holds chunks g*group .. g*group+group-1 (format 3; 1 before)
    located: np.ndarray
    group: int = 1
    listed_nbytes: np.ndarray | None = None  # format 3: the chunk table's sizes

    def sources(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(chunks, offsets, nbytes, crc32) of the bytes chunkstore loads."""
        offsets, nbytes, crcs = self.offsets, self.nbytes, self.crc32  # views: callers only read them
        if self.tail is not None and len(self.chunks) and self.chunks[-1] == self.nchunks - 1:
            offsets, nbytes, crcs = offsets.copy(), nbytes.copy(), crcs.copy()
            offsets[-1], nbytes[-1], crcs[-1] = self.tail
        return self.chunks, offsets, nbytes, crcs

    @property
    def nchunks(self) -> int:
        return -(-self.capacity // self.chunk_len)

    def rows(self, c: int) -> int:
        return min(self.chunk_len, self.capacity - c * self.chunk_len)


# -- opening -------------------------------------------------------------------------------
@contextlib.contextmanager
def open_file(path: str) -> Iterator[tuple[h5py.File, int]]:
    """The regular file ``path``, opened as a descriptor and by h5py, both the same file.

    Anything but a regular file (a FIFO, a device, a directory) is refused before it is
    opened, so loading never blocks. h5py reads through the descriptor
    (:class:`~chunkstore.hdf5._heapcheck.HeapCheckedFile`, which checks each global heap
    collection before HDF5 parses it), so a file replaced meanwhile cannot be mixed up with ours.
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise FormatError(f"{path} is {_kind(st.st_mode)}, not a regular file")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode):
            raise FormatError(f"{path} is {_kind(fst.st_mode)}, not a regular file")
        try:  # h5py reads through the descriptor: the file opened is the file checked
            f = h5py.File(HeapCheckedFile(fd), "r")
        except Exception as e:
            raise FormatError(f"{path} is not a readable HDF5 file (garbage, truncated or "
                              f"damaged): {e}") from e
        with f:
            yield f, fd
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


@contextlib.contextmanager
def damaged(path: str, what: str) -> Iterator[None]:
    """Turn HDF5's, JSON's and numpy's exceptions while reading ``what`` into CorruptFileError."""
    try:
        yield
    except ChunkstoreError:
        raise
    except Exception as e:  # OSError, KeyError, TypeError, RecursionError, MemoryError, ...
        raise CorruptFileError(f"{path}: {what} is damaged ({type(e).__name__}: "
                               f"{_short(str(e))})") from e


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:197] + "..."


def check_memory(path: str, what: str, nbytes: int) -> None:
    """Refuse to allocate what a file declares when this machine cannot hold it."""
    available = psutil.virtual_memory().available
    if nbytes > available:
        raise FormatError(f"{path}: {what} would take {nbytes / 2**30:,.1f} GiB, more than the "
                          f"{available / 2**30:,.1f} GiB of memory available; refusing to load it")


# -- the header ----------------------------------------------------------------------------
def read_header(f: h5py.File, path: str) -> Header:
    with damaged(path, "the header"):
        fmt = attr_value(f, "format")
        if fmt != FORMAT_NAME:
            raise FormatError(f"{path} is an HDF5 file but not a chunkstore file "
                              f"(format attribute {_short(repr(fmt))}, expected {FORMAT_NAME!r})")
        version = attr_value(f, "format_version")
        if not is_int(version, 1, FORMAT_VERSION):
            raise FormatError(f"{path} has chunkstore format version {_short(repr(version))}; this "
                              f"chunkstore reads versions 1..{FORMAT_VERSION} (upgrade chunkstore)")
        checksums = _read_checksums(f, path) if version >= 2 else None
        if checksums is not None:
            _expect(record_crc(header_record(f)), checksums["header"], path, "the header")
        header = Header(path, int(version), str(attr_value(f, "chunkstore_version") or ""),
                        str(attr_value(f, "created") or ""), _json(f, "attrs", dict),
                        _json(f, "arrays", list), _json(f, "extras", list), checksums)
    _check_names(header)
    return header


def _read_checksums(f: h5py.File, path: str) -> dict[str, Any]:
    sums = json.loads(f.attrs["checksums"])
    if not (isinstance(sums, dict) and isinstance(sums.get("header"), int)
            and isinstance(sums.get("arrays"), dict) and isinstance(sums.get("extras"), dict)):
        raise CorruptFileError(f"{path}: the 'checksums' attribute is damaged")
    return sums


def _json(f: h5py.File, key: str, kind: type) -> Any:
    value = json.loads(f.attrs[key])
    if not isinstance(value, kind):
        raise TypeError(f"attribute {key!r} holds {type(value).__name__}, expected {kind.__name__}")
    return value


def _check_names(h: Header) -> None:
    names = [*h.arrays, *h.extras]
    try:
        for name in names:
            check_name(name)
    except ValueError as e:
        raise CorruptFileError(f"{h.path}: the header lists {e}") from None
    if len(set(names)) != len(names):
        raise CorruptFileError(f"{h.path}: the header lists a name twice")
    if h.checksums is not None and (set(h.checksums["arrays"]) != set(h.arrays)
                                    or set(h.checksums["extras"]) != set(h.extras)):
        raise CorruptFileError(f"{h.path}: the checksums do not cover the arrays and extras listed")


def _expect(got: int, want: Any, path: str, what: str) -> None:
    if got != want:
        raise CorruptFileError(f"{path}: {what} failed its checksum (CRC32 {got:#010x}, expected "
                               f"{want if not isinstance(want, int) else f'{want:#010x}'}): "
                               "the file was changed after it was written")


# -- arrays --------------------------------------------------------------------------------
def read_array_meta(f: h5py.File, name: str, header: Header) -> ArrayMeta:
    """Array ``name``'s metadata, checksummed (format 2) and checked against its dataset."""
    path = header.path
    sums = None if header.checksums is None else header.checksums["arrays"][name]
    with damaged(path, f"array {name!r}"):
        dset, group = f[name], f[f"{META}/arrays/{name}"]
        if not isinstance(dset, h5py.Dataset) or not isinstance(group, h5py.Group):
            raise TypeError(f"{name!r} is not a dataset with a chunk table")
        version = header.format_version
        if sums is not None:
            _expect(record_crc(array_record(dset, version)), sums.get("meta"), path,
                    f"the description of array {name!r}")
        meta = _geometry(dset, name, path, version)
        config = _codec_config(dset, group, meta, sums, path)
        chunks, crcs, tail, listed = _chunk_table(group, meta, sums, path, version)
        meta.codec_config, meta.chunks, meta.crc32, meta.tail = config, chunks, crcs, tail
        meta.listed_nbytes = listed
        meta.located = chunk_locations(dset, meta.group * meta.chunk_len)
        _place_chunks(meta)
    return meta


def _geometry(dset: h5py.Dataset, name: str, path: str, version: int) -> ArrayMeta:
    a = dset.attrs
    if attr_value(dset, "kind") != "chunked_array":
        raise TypeError("its 'kind' attribute is not 'chunked_array'")
    L, capacity = _positive(a["chunk_len"], "chunk_len"), _positive(a["capacity"], "capacity")
    G = _positive(a[GROUP_ATTR], GROUP_ATTR) if version >= 3 else 1
    item_shape = tuple(json.loads(a["item_shape"]))
    if not all(is_int(d, 1) for d in item_shape):
        raise ValueError(f"item_shape {item_shape} is not a tuple of positive ints")
    dtype = dtype_from_json(attr_value(dset, "dtype"))
    if dset.shape != (capacity, *item_shape) or dset.chunks != (G * L, *item_shape) or capacity < G * L:
        raise ValueError(f"dataset shape {dset.shape} and chunks {dset.chunks} disagree with "
                         f"capacity {capacity}, chunk_len {L}, {G} chunks per HDF5 chunk and "
                         f"item_shape {item_shape}")
    if dset.dtype.itemsize != dtype.itemsize:
        raise ValueError(f"dataset dtype {dset.dtype} does not hold items of dtype {dtype}")
    chunk_bytes = L * math.prod(item_shape) * dtype.itemsize
    if G * chunk_bytes > MAX_CHUNK_BYTES:
        raise FormatError(f"{path}: array {name!r} declares HDF5 chunks of {G * chunk_bytes:,} bytes "
                          "(HDF5's limit is 4 GiB); refusing to load it")
    nchunks = -(-capacity // L)
    check_memory(path, f"array {name!r}'s chunk table ({nchunks:,} chunks)",
                 nchunks * TABLE_BYTES_PER_CHUNK + chunk_bytes)
    empty = np.empty(0, np.int64)
    return ArrayMeta(name, capacity, item_shape, dtype, L, {}, str(attr_value(dset, "hdf5_filter")),
                     empty, empty.astype(np.uint32), empty, empty, None, empty.reshape(0, 4), G)


def _positive(value: Any, what: str) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)) or value < 1:
        raise ValueError(f"{what} {value!r} is not a positive integer")
    return int(value)


def _codec_config(dset: h5py.Dataset, group: h5py.Group, meta: ArrayMeta,
                  sums: dict[str, Any] | None, path: str) -> dict[str, Any]:
    if "codec_config" in dset.attrs:
        text = attr_value(dset, "codec_config")
    else:
        stored = group["codec_config"]
        if stored.ndim != 1 or stored.dtype != np.uint8 or stored.shape[0] > MAX_CONFIG_BYTES:
            raise ValueError(f"codec_config dataset of shape {stored.shape} and dtype {stored.dtype}")
        text = stored[()].tobytes().decode("utf-8", "surrogateescape")
    if sums is not None:
        what = f"the codec config of array {meta.name!r} (with its trained dictionary, if any)"
        _expect(crc32(text.encode("utf-8", "surrogateescape")), sums.get("codec"), path, what)
    config = json.loads(text)
    if not isinstance(config, dict):
        raise TypeError(f"codec config is {type(config).__name__}, not an object")
    return config


def _chunk_table(group: h5py.Group, meta: ArrayMeta, sums: dict[str, Any] | None, path: str,
                 version: int) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int] | None,
                                        np.ndarray | None]:
    keys = ("chunks", "crc32", "nbytes") if version >= 3 else ("chunks", "crc32")
    tables = []
    for key in keys:
        d = group[key]
        if d.ndim != 1 or d.dtype.kind not in "iu" or d.shape[0] > meta.nchunks:
            raise ValueError(f"chunk table {key!r} of shape {d.shape} and dtype {d.dtype}")
        tables.append(d[()])
    chunks, crcs = tables[0].astype(np.int64), tables[1].astype(np.uint32)
    listed = tables[2].astype(np.int64) if version >= 3 else None
    tail = None
    if "tail" in group:
        t = group["tail"]
        if t.ndim != 1 or t.dtype != np.uint8:
            raise ValueError(f"tail of shape {t.shape} and dtype {t.dtype}")
        tail = (int(t.id.get_offset()), int(t.shape[0]), int(t.attrs["crc32"]))
    if sums is not None:
        record = index_record(chunks, crcs, tail[1:] if tail else None,
                              None if listed is None else tables[2])
        _expect(record_crc(record), sums.get("index"), path, f"the chunk table of array {meta.name!r}")
    if len(chunks) != len(crcs) or (listed is not None and len(listed) != len(chunks)):
        raise ValueError(f"{len(chunks)} chunks but {len(crcs)} checksums"
                         + ("" if listed is None else f" and {len(listed)} sizes"))
    if len(chunks) and (chunks[0] < 0 or chunks[-1] >= meta.nchunks or np.any(np.diff(chunks) <= 0)):
        raise ValueError(f"chunk indices are not increasing within 0..{meta.nchunks - 1}")
    if listed is not None and len(listed) and (listed.min() < 0 or listed.max() > MAX_CHUNK_BYTES):
        raise ValueError(f"chunk sizes outside 0..{MAX_CHUNK_BYTES}")
    return chunks, crcs, tail, listed


def chunk_locations(dset: h5py.Dataset, rows: int) -> np.ndarray:
    """(HDF5 chunk index, file offset, nbytes, filter mask) of every HDF5 chunk in the file,
    sorted; ``rows`` is the HDF5 chunk's length along the first axis."""
    found: list[tuple[int, int, int, int]] = []
    try:
        dset.id.chunk_iter(lambda s: found.append(
            (s.chunk_offset[0] // rows, s.byte_offset, s.size, s.filter_mask)))
    except (AttributeError, NotImplementedError):  # HDF5 < 1.12.3: one call per chunk
        for i in range(dset.id.get_num_chunks()):
            s = dset.id.get_chunk_info(i)
            found.append((s.chunk_offset[0] // rows, s.byte_offset, s.size, s.filter_mask))
    table = np.array(found, dtype=np.int64).reshape(-1, 4)
    return table[np.argsort(table[:, 0], kind="stable")]


def _place_chunks(meta: ArrayMeta) -> None:
    """File offset and length of each listed chunk (offset -1 where HDF5 does not hold it).

    Format 3: a chunk lies in HDF5 chunk ``chunk // group``, after the listed chunks of
    the same group before it; every HDF5 chunk must hold exactly its chunks' bytes.
    Before: one chunk per HDF5 chunk, of the size HDF5 records.
    """
    located, chunks, G = meta.located, meta.chunks, meta.group
    row = np.searchsorted(located[:, 0], chunks // G)
    found = row < len(located)
    found[found] = located[row[found], 0] == chunks[found] // G
    meta.offsets = np.full(len(chunks), -1, np.int64)
    if meta.listed_nbytes is None:
        meta.nbytes = np.zeros(len(chunks), np.int64)
        meta.nbytes[found] = located[row[found], 2]
        meta.offsets[found] = located[row[found], 1]
        return
    meta.nbytes = meta.listed_nbytes
    inside = offsets_in_groups(chunks, meta.nbytes, G)
    meta.offsets[found] = located[row[found], 1] + inside[found]
    starts = group_bounds(chunks, G)[:-1]
    held = located[row[starts[found[starts]]], 2]
    listed = group_nbytes(chunks, meta.nbytes, G)[found[starts]]
    if np.any(held != listed):
        k = int(np.flatnonzero(held != listed)[0])
        g = int(chunks[starts[found[starts]][k]] // G)
        raise ValueError(f"HDF5 chunk {g} holds {int(held[k])} bytes, its chunks in the chunk "
                         f"table {int(listed[k])}")


# -- extras --------------------------------------------------------------------------------
def read_extra(f: h5py.File, name: str, header: Header, check: bool) -> np.ndarray:
    """Extra ``name``, its declared size checked against what the file holds before reading."""
    path = header.path
    with damaged(path, f"extra {name!r}"):
        dset = f[name]
        if not isinstance(dset, h5py.Dataset):
            raise TypeError(f"{name!r} is not a dataset")
        if header.checksums is not None:
            _expect(record_crc(extra_record(dset)), header.checksums["extras"][name], path,
                    f"the description of extra {name!r}")
        if attr_value(dset, "kind") != "extra":
            raise TypeError("its 'kind' attribute is not 'extra'")
        dtype = dtype_from_json(attr_value(dset, "dtype"))
        crc = attr_value(dset, "crc32")
        if dset.dtype.itemsize != dtype.itemsize or not isinstance(crc, int):
            raise ValueError(f"dataset dtype {dset.dtype} does not hold dtype {dtype}")
        nbytes = math.prod(dset.shape) * dtype.itemsize
        _check_extra_storage(dset, nbytes)
        check_memory(path, f"extra {name!r}", nbytes)
        value = np.asarray(dset[()])  # a new array (an ndarray even for scalar datasets): no second copy
        if value.dtype != dtype:
            value = value.view(dtype)
    if check:
        check_crc(raw_bytes(value), crc, f"extra {name!r} in {path}", array=name)
    return value


def _check_extra_storage(dset: h5py.Dataset, nbytes: int) -> None:
    """The dataset holds its declared bytes: contiguous and complete, or complete Zstd chunks.

    Each chunk's Zstd frame must declare exactly one chunk's bytes, so HDF5's Zstd filter
    (which allocates what the frame declares) never expands a chunk beyond it.
    """
    if dset.chunks is None:
        if nbytes and dset.id.get_storage_size() != nbytes:
            raise ValueError(f"{nbytes} bytes declared, {dset.id.get_storage_size()} stored")
        return
    plist = dset.id.get_create_plist()
    filters = {plist.get_filter(i)[0] for i in range(plist.get_nfilters())}
    if not filters <= {_HDF5_SHUFFLE, _HDF5_ZSTD}:
        raise ValueError(f"filters {sorted(filters)} are not ones chunkstore writes")
    grid = [-(-n // c) for n, c in zip(dset.shape, dset.chunks, strict=True)]
    if dset.id.get_num_chunks() != math.prod(grid):
        raise ValueError(f"{dset.id.get_num_chunks()} chunks stored, {math.prod(grid)} declared")
    chunk_nbytes = math.prod(dset.chunks) * dset.dtype.itemsize
    for i in range(dset.id.get_num_chunks()):
        info = dset.id.get_chunk_info(i)
        _, data = dset.id.read_direct_chunk(info.chunk_offset)
        size = zstandard.frame_content_size(data) if _HDF5_ZSTD in filters else len(data)
        if size != chunk_nbytes:
            raise ValueError(f"chunk {i} holds {size} bytes, not {chunk_nbytes}")
