"""Save and load a store -- named ChunkedArrays, plain arrays, attributes -- as one HDF5 file.

Layout (format version 1)::

    /                        attrs: format="chunkstore", format_version=1, chunkstore_version,
                                    created (UTC, ISO 8601), attrs (user attrs as JSON),
                                    arrays, extras (JSON lists of names)
    /<array>                 one chunked dataset per ChunkedArray: shape (capacity, *item_shape),
                             HDF5 chunk (chunk_len, *item_shape) == our chunk, written verbatim
                             with write_direct_chunk. attrs: kind="chunked_array", codec,
                             codec_config (JSON; see below when large), chunk_len, capacity,
                             item_shape, dtype, hdf5_filter
    /<extra>                 a plain contiguous dataset. attrs: kind="extra", dtype, crc32
    /_chunkstore/arrays/<array>/chunks   int64: indices of the stored chunks
    /_chunkstore/arrays/<array>/crc32    uint32: CRC32 of each stored chunk's bytes in the file
    /_chunkstore/arrays/<array>/tail     uint8: the partial last chunk, verbatim (see below)
    /_chunkstore/arrays/<array>/codec_config  uint8 JSON, instead of the attribute when it
                                         is over 16 KB (a trained zstd dictionary)

Codecs and HDF5 filters. Chunks are never recompressed; what plain HDF5 readers
see depends on whether the codec's bytes are a standard HDF5 filter's format:

* ``zstd`` chunks are Zstd frames with the content size: the dataset declares
  hdf5plugin's Zstd filter (32015), and ``h5py`` + ``hdf5plugin`` read it. So
  does ``zstd3+dict`` before it is trained; once trained, its frames need the
  dictionary and it is a private codec like those below.
* ``gzip`` / ``igzip`` chunks are zlib streams: HDF5's built-in deflate filter.
* ``none`` chunks are the raw bytes: no filter at all.
* Every other codec (lz4, rle, blosc2, ``xor+...``) declares the private filter
  :data:`PRIVATE_FILTER_ID` (in HDF5's 32768-65535 range for unregistered
  application filters) with ``allow_unknown_filter``. Nothing provides that
  filter, so a plain ``dset[a:b]`` over a stored chunk fails with HDF5's
  "can't read data" error instead of returning the encoded bytes as if they
  were data; unwritten chunks still read as zeros. The dataset keeps its true
  shape and dtype, and its ``codec``/``codec_config`` attrs say how to read it.
  The alternative, a flat uint8 dataset of concatenated chunks plus an offset
  table, would hide shape and dtype and still be unreadable without chunkstore.
  (HDF5's Blosc2 filter needs a cframe per chunk and its LZ4 filter has its own
  framing, so neither can take our chunks verbatim.)

The partial last chunk. HDF5 stores every chunk at full size, padding past the
dataset's edge. A filter must therefore decode to ``chunk_len`` rows even for the
last chunk, whose encoded bytes hold fewer. For datasets with a standard filter
(or none), that one chunk is re-encoded zero-padded into the dataset, so plain
readers see the exact shape and data, and its original bytes are kept verbatim
in ``tail`` (with their CRC32 as an attribute), which is what chunkstore loads.
With the private filter HDF5 never decodes, so the bytes go in unpadded.

Crash safety: :func:`save` writes ``<path>.tmp-<pid>`` in the same directory,
fsyncs it, and renames it over ``path`` (then fsyncs the directory): a kill at
any moment leaves the previous file intact (and perhaps a stale temporary).

Examples
--------
>>> import os, tempfile, numpy as np
>>> from chunkstore import ChunkedArray
>>> obs = ChunkedArray(100, (4, 4), np.uint8, chunk_len=16, codec="zstd3", name="obs")
>>> obs[:50] = np.arange(50, dtype=np.uint8)[:, None, None]
>>> path = os.path.join(tempfile.mkdtemp(), "store.h5")
>>> save(path, {"obs": obs}, {"pos": np.array(50)}, {"note": "demo"}, progress=False)
>>> with load(path) as store:
...     int(store.arrays["obs"][49, 0, 0]), int(store.extras["pos"]), store.attrs["note"]
(49, 50, 'demo')
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import h5py
import hdf5plugin
import numpy as np
from tqdm import tqdm

from chunkstore.array import ChunkedArray
from chunkstore.cache import LRUChunkCache
from chunkstore.codecs import Codec, codec_from_config
from chunkstore.errors import CodecConfigError, CorruptChunkError, FormatError
from chunkstore.tiers import MemoryTier, Tier
from chunkstore.tiers.file import FileChunk, FileTier, MappedFile, crc32

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "PRIVATE_FILTER_ID",
    "Problem",
    "Store",
    "load",
    "read_observations",
    "save",
    "verify",
]

FORMAT_NAME = "chunkstore"
FORMAT_VERSION = 1
#: HDF5 filter id declared on datasets whose chunks only chunkstore can decode
PRIVATE_FILTER_ID = 47_301
_META = "_chunkstore"
_NATIVE = {"zstd": "zstd", "gzip": "deflate", "igzip": "deflate", "none": "none"}
#: longer codec configs (a trained zstd dictionary) go to a dataset: attributes over
#: 64 KB need HDF5's newest object-header format, which older readers lack
_MAX_ATTR_CHARS = 16 << 10
#: chunks between progress-bar updates: tqdm per chunk would cost more than the write
_BAR_STEP = 512


# -- saving ----------------------------------------------------------------------------
def save(
    path: str | os.PathLike[str],
    arrays: Mapping[str, ChunkedArray],
    extras: Mapping[str, Any] | None = None,
    attrs: Mapping[str, Any] | None = None,
    *,
    progress: bool = True,
) -> None:
    """Write a store to one HDF5 file, atomically.

    Parameters
    ----------
    path
        The file. An existing file is replaced only once the new one is complete
        and fsynced; it may be the very file the arrays were lazily loaded from.
    arrays
        Named ChunkedArrays. Each is flushed first (open chunks are sealed), then
        its stored chunks are copied verbatim; unwritten chunks are not written.
    extras
        Named plain arrays (positions, flags, rewards, ...), stored uncompressed.
    attrs
        JSON-serializable attributes (numpy scalars and arrays are converted).
    progress
        Show a progress bar over chunks on stderr (tqdm; hidden when not a tty).
    """
    path = os.fspath(path)
    extras = dict(extras or {})
    for name in [*arrays, *extras]:
        _check_name(name)
    if len({*arrays, *extras}) != len(arrays) + len(extras):
        raise ValueError(f"names are shared by arrays and extras: {sorted(set(arrays) & set(extras))}")
    attrs_json = _dump_json(dict(attrs or {}), "attrs")
    for arr in arrays.values():
        arr.flush()
    total = sum(len(arr.stored_chunks()) for arr in arrays.values())
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with h5py.File(tmp, "w") as f, _bar(total, progress, "save") as bar:
            _write_header(f, list(arrays), list(extras), attrs_json)
            for name, arr in arrays.items():
                _write_array(f, name, arr, bar)
            for name, value in extras.items():
                _write_extra(f, name, value)
        _fsync(tmp)
        os.replace(tmp, path)
        _fsync(os.path.dirname(os.path.abspath(path)))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_header(f: h5py.File, arrays: list[str], extras: list[str], attrs_json: str) -> None:
    from chunkstore import __version__

    f.attrs["format"] = FORMAT_NAME
    f.attrs["format_version"] = FORMAT_VERSION
    f.attrs["chunkstore_version"] = __version__
    f.attrs["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    f.attrs["attrs"] = attrs_json
    f.attrs["arrays"] = json.dumps(arrays)
    f.attrs["extras"] = json.dumps(extras)


def _hdf5_filter(codec: Codec) -> tuple[str, dict[str, Any]]:
    """The filter label and the create_dataset arguments for ``codec``'s chunks."""
    label = _NATIVE.get(codec.codec_id, "chunkstore")
    if codec.codec_id == "zstd-dict" and getattr(codec, "dictionary", None) is None:
        label = "zstd"  # not trained yet: it writes plain zstd frames
    if label == "zstd":
        return label, dict(hdf5plugin.Zstd())
    if label == "deflate":
        return label, {"compression": "gzip"}
    if label == "none":
        return label, {}
    opts = {"compression": PRIVATE_FILTER_ID, "compression_opts": (FORMAT_VERSION,)}
    return label, {**opts, "allow_unknown_filter": True}


def _write_array(f: h5py.File, name: str, arr: ChunkedArray, bar: tqdm) -> None:
    L, item_shape = arr.chunk_len, tuple(arr.item_shape)
    if 0 in item_shape:
        raise ValueError(f"{name}: items of shape {item_shape} hold no data; HDF5 cannot chunk them")
    label, filter_args = _hdf5_filter(arr.codec)
    dset = f.create_dataset(
        name, shape=arr.shape, dtype=_h5_dtype(arr.dtype), chunks=(L, *item_shape),
        track_times=False, **filter_args,
    )
    meta = f.require_group(f"{_META}/arrays/{name}")
    config = _dump_json({"id": arr.codec.codec_id, **arr.codec.get_config()}, f"{name} codec")
    dset.attrs.update({
        "kind": "chunked_array", "codec": arr.codec.name,
        "chunk_len": L, "capacity": arr.capacity, "item_shape": json.dumps(item_shape),
        "dtype": _dtype_to_json(arr.dtype), "hdf5_filter": label,
    })
    if len(config) <= _MAX_ATTR_CHARS:
        dset.attrs["codec_config"] = config
    else:  # a trained dictionary: too big for an attribute in the HDF5 1.8 file format
        meta.create_dataset("codec_config", data=np.frombuffer(config.encode(), np.uint8))
    if label == "chunkstore":
        dset.attrs["note"] = (f"chunks are encoded with chunkstore codec {arr.codec.name!r}; "
                              "read this dataset with chunkstore.format.load()")
    stored = arr.stored_chunks()
    last = arr.nchunks_total - 1
    pad_tail = label != "chunkstore" and arr.chunk_rows(last) < L
    crcs = np.empty(len(stored), dtype=np.uint32)
    write, chunk_bytes = dset.id.write_direct_chunk, arr.chunk_bytes
    rest = (0,) * len(item_shape)
    # the hot loop: one tier view, one CRC and one HDF5 call per chunk
    for k, c in enumerate(stored.tolist()):
        data: Any = chunk_bytes(c)
        if pad_tail and c == last:
            _write_tail(f, name, data)
            data = _padded_chunk(arr, c)
        crcs[k] = crc32(data)
        write((c * L, *rest), data)
        if k % _BAR_STEP == _BAR_STEP - 1:
            bar.update(_BAR_STEP)
    bar.update(len(stored) % _BAR_STEP)
    meta.create_dataset("chunks", data=stored.astype(np.int64))
    meta.create_dataset("crc32", data=crcs)


def _padded_chunk(arr: ChunkedArray, c: int) -> bytes:
    """Chunk ``c`` zero-padded to ``chunk_len`` rows and re-encoded (for HDF5 readers)."""
    rows = arr.chunk(c)
    padded = np.zeros((arr.chunk_len, *arr.item_shape), dtype=arr.dtype)
    padded[: len(rows)] = rows
    return bytes(arr.codec.encode(padded))


def _write_tail(f: h5py.File, name: str, data: memoryview) -> None:
    tail = f.create_dataset(f"{_META}/arrays/{name}/tail", data=np.frombuffer(data, np.uint8))
    tail.attrs["crc32"] = np.uint32(crc32(data))


#: extras at least this large are compressed inside the file
_PACK_EXTRAS = 64 << 10


def _write_extra(f: h5py.File, name: str, value: Any) -> None:
    a = np.asarray(value)
    a = a if a.flags.c_contiguous else a.copy(order="C")  # keeps 0-d arrays 0-d
    if a.dtype.hasobject:
        raise TypeError(f"extra {name!r} has dtype {a.dtype}; only plain numpy dtypes can be saved")
    h5dtype = _h5_dtype(a.dtype)
    # large extras (a buffer's actions, rewards, dones: 20 B a transition) are zstd
    # compressed by HDF5 itself, so plain h5py + hdf5plugin still reads them
    packed = {"shuffle": True, **hdf5plugin.Zstd(clevel=1)} if a.ndim and a.nbytes >= _PACK_EXTRAS else {}
    dset = f.create_dataset(name, data=a.view(h5dtype) if h5dtype != a.dtype else a,
                            track_times=False, **packed)
    dset.attrs.update({"kind": "extra", "dtype": _dtype_to_json(a.dtype),
                       "crc32": np.uint32(crc32(_raw(a)))})


# -- loading ---------------------------------------------------------------------------
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
    #: format_version, chunkstore_version, created, arrays, extras, and hdf5_filters (per
    #: array: "zstd", "deflate", "none", or "chunkstore" where plain h5py cannot decode it)
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


@dataclass
class _ArrayMeta:
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
    nbytes: np.ndarray
    tail: tuple[int, int, int] | None  # verbatim last chunk: offset, nbytes, crc32

    def sources(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(chunks, offsets, nbytes, crc32) of the bytes chunkstore loads."""
        offsets, nbytes, crcs = self.offsets.copy(), self.nbytes.copy(), self.crc32.copy()
        if self.tail is not None and len(self.chunks) and self.chunks[-1] == self.nchunks - 1:
            offsets[-1], nbytes[-1], crcs[-1] = self.tail
        return self.chunks, offsets, nbytes, crcs

    @property
    def nchunks(self) -> int:
        return -(-self.capacity // self.chunk_len)

    def rows(self, c: int) -> int:
        return min(self.chunk_len, self.capacity - c * self.chunk_len)


def load(
    path: str | os.PathLike[str],
    *,
    lazy: bool = True,
    tier: Tier | None = None,
    cache: LRUChunkCache | int | None = None,
    verify: bool | None = None,
    progress: bool = False,
) -> Store:
    """Open a file written by :func:`save`.

    Parameters
    ----------
    lazy
        True: chunks stay in the file (memory-mapped, read on demand); chunks
        written after the load go to ``tier`` (default: a MemoryTier per array).
        False: every chunk is copied into ``tier`` (default: a MemoryTier per array).
    tier
        See ``lazy``; one tier may be shared by all arrays.
    cache
        The arrays' decoded-chunk cache, as for :class:`ChunkedArray`.
    verify
        None (default): check each chunk's CRC32 as it is loaded (eager) or on
        its first read (lazy). True: also check every chunk up front when lazy.
        False: no checks.
    progress
        Progress bar over chunks for an eager load.

    Raises
    ------
    FormatError
        Not a chunkstore file (garbage, truncated, another HDF5 file, newer version).
    CorruptChunkError
        A chunk failed its checksum or is missing (names the array and chunk).
    """
    path = os.fspath(path)
    with _open(path) as (f, fd):
        header = _read_header(f, path)
        metas = [_read_array_meta(f, name) for name in header["arrays"]]
        extras = {name: _read_extra(f, name, verify is not False) for name in header["extras"]}
        mapped = MappedFile(path, fd)
    arrays = {}
    try:
        with _bar(sum(len(m.chunks) for m in metas), progress and not lazy, "load") as bar:
            for meta in metas:
                _check_locations(meta, mapped)
                build = _lazy_array if lazy else _eager_array
                arrays[meta.name] = build(meta, mapped, tier, cache, verify, bar)
    finally:
        if not lazy:
            mapped.close()
    header["hdf5_filters"] = {m.name: m.hdf5_filter for m in metas}
    return Store(arrays, extras, header.pop("attrs"), path, header, mapped if lazy else None)


def _check_locations(meta: _ArrayMeta, mapped: MappedFile) -> None:
    chunks, offsets, nbytes, _ = meta.sources()
    for c in chunks[meta.offsets < 0].tolist():
        raise CorruptChunkError(f"{meta.name}: chunk {c} is listed as stored but missing from "
                                f"{mapped.path}", array=meta.name, chunk=c)
    for c in chunks[offsets + nbytes > mapped.size].tolist():
        raise CorruptChunkError(f"{meta.name}: chunk {c} lies beyond the end of {mapped.path}; "
                                "the file is truncated", array=meta.name, chunk=c)


def _new_array(meta: _ArrayMeta, tier: Tier, cache: LRUChunkCache | int | None) -> ChunkedArray:
    try:
        codec = codec_from_config(meta.codec_config)
    except CodecConfigError as e:
        raise FormatError(f"{meta.name}: this chunkstore cannot read its codec: {e}") from e
    return ChunkedArray(meta.capacity, meta.item_shape, meta.dtype, chunk_len=meta.chunk_len,
                        codec=codec, tier=tier, cache=cache, name=meta.name)


def _lazy_array(meta: _ArrayMeta, mapped: MappedFile, tier: Tier | None,
                cache: LRUChunkCache | int | None, verify: bool | None, bar: tqdm) -> ChunkedArray:
    chunks, offsets, nbytes, crcs = meta.sources()
    ftier = FileTier(mapped, chunks, offsets, nbytes, crcs, writable=tier, name=meta.name,
                     verify=verify is not False)
    arr = _new_array(meta, ftier, cache)
    for c, off, n in zip(chunks.tolist(), offsets.tolist(), nbytes.tolist(), strict=True):
        arr.put_chunk_bytes(c, FileChunk(off, n))  # adopts the file bytes, no copy
    if verify:
        ftier.verify_all()
    return arr


def _eager_array(meta: _ArrayMeta, mapped: MappedFile, tier: Tier | None,
                 cache: LRUChunkCache | int | None, verify: bool | None, bar: tqdm) -> ChunkedArray:
    arr = _new_array(meta, tier if tier is not None else MemoryTier(), cache)
    chunks, offsets, nbytes, crcs = meta.sources()
    for k, (c, off, n) in enumerate(zip(chunks.tolist(), offsets.tolist(), nbytes.tolist(),
                                        strict=True)):
        data = mapped.view(off, n)
        if verify is not False and crc32(data) != crcs[k]:
            raise CorruptChunkError(f"{meta.name}: chunk {c} in {mapped.path} is corrupt "
                                    "(CRC32 mismatch)", array=meta.name, chunk=c)
        arr.put_chunk_bytes(c, data)
        if k % _BAR_STEP == _BAR_STEP - 1:
            bar.update(_BAR_STEP)
    bar.update(len(chunks) % _BAR_STEP)
    return arr


@contextlib.contextmanager
def _open(path: str) -> Iterator[tuple[h5py.File, int]]:
    """The file opened twice: by h5py (metadata) and as a descriptor (to map it).

    The descriptor is opened first; if ``path`` was replaced before h5py opened
    it, both no longer name the same file and we retry, so chunk offsets read
    by h5py always match the mapped bytes.
    """
    for _ in range(3):
        fd = os.open(path, os.O_RDONLY)
        try:
            try:
                f = h5py.File(path, "r")
            except OSError as e:
                raise FormatError(f"{path} is not a readable HDF5 file (garbage, truncated or "
                                  f"damaged): {e}") from e
            with f:
                st, fst = os.stat(path), os.fstat(fd)
                if (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino):
                    yield f, fd
                    return
        finally:
            os.close(fd)
    raise OSError(f"{path} keeps being replaced while it is opened")


def _read_header(f: h5py.File, path: str) -> dict[str, Any]:
    fmt = f.attrs.get("format")
    if fmt != FORMAT_NAME:
        raise FormatError(f"{path} is an HDF5 file but not a chunkstore file "
                          f"(format attribute {fmt!r}, expected {FORMAT_NAME!r})")
    version = int(f.attrs.get("format_version", -1))
    if not 1 <= version <= FORMAT_VERSION:
        raise FormatError(f"{path} has chunkstore format version {version}; this chunkstore "
                          f"reads versions 1..{FORMAT_VERSION} (upgrade chunkstore)")
    try:
        return {
            "format_version": version,
            "chunkstore_version": str(f.attrs.get("chunkstore_version", "")),
            "created": str(f.attrs.get("created", "")),
            "attrs": json.loads(f.attrs["attrs"]),
            "arrays": json.loads(f.attrs["arrays"]),
            "extras": json.loads(f.attrs["extras"]),
        }
    except (KeyError, ValueError) as e:
        raise FormatError(f"{path}: damaged chunkstore header: {e!r}") from e


def _read_array_meta(f: h5py.File, name: str) -> _ArrayMeta:
    try:
        dset, meta = f[name], f[f"{_META}/arrays/{name}"]
        a = dset.attrs
        L, capacity = int(a["chunk_len"]), int(a["capacity"])
        chunks, crcs = meta["chunks"][()].astype(np.int64), meta["crc32"][()].astype(np.uint32)
        tail = None
        if "tail" in meta:
            t = meta["tail"]
            tail = (int(t.id.get_offset()), int(t.shape[0]), int(t.attrs["crc32"]))
        out = _ArrayMeta(
            name=name, capacity=capacity, item_shape=tuple(json.loads(a["item_shape"])),
            dtype=_dtype_from_json(a["dtype"]), chunk_len=L,
            codec_config=json.loads(a["codec_config"] if "codec_config" in a
                                    else meta["codec_config"][()].tobytes().decode()),
            hdf5_filter=str(a["hdf5_filter"]),
            chunks=chunks, crc32=crcs, offsets=np.full(len(chunks), -1, np.int64),
            nbytes=np.zeros(len(chunks), np.int64), tail=tail,
        )
    except (KeyError, ValueError, TypeError) as e:
        raise FormatError(f"{f.filename}: array {name!r} has damaged metadata: {e!r}") from e
    located = _chunk_locations(dset, L)
    row = np.searchsorted(located[:, 0], chunks)
    found = row < len(located)
    found[found] = located[row[found], 0] == chunks[found]
    out.offsets[found] = located[row[found], 1]
    out.nbytes[found] = located[row[found], 2]
    return out


def _chunk_locations(dset: h5py.Dataset, chunk_len: int) -> np.ndarray:
    """(chunk index, file offset, nbytes, filter mask) of every chunk in the file, sorted."""
    rows: list[tuple[int, int, int, int]] = []
    try:
        dset.id.chunk_iter(lambda s: rows.append(
            (s.chunk_offset[0] // chunk_len, s.byte_offset, s.size, s.filter_mask)))
    except (AttributeError, NotImplementedError):  # HDF5 < 1.12.3: one call per chunk
        for i in range(dset.id.get_num_chunks()):
            s = dset.id.get_chunk_info(i)
            rows.append((s.chunk_offset[0] // chunk_len, s.byte_offset, s.size, s.filter_mask))
    table = np.array(rows, dtype=np.int64).reshape(-1, 4)
    return table[np.argsort(table[:, 0], kind="stable")]


def _read_extra(f: h5py.File, name: str, check: bool) -> np.ndarray:
    try:
        dset = f[name]
        dtype = _dtype_from_json(dset.attrs["dtype"])
        value = np.array(dset[()], copy=True)  # an ndarray even for scalar datasets
        crc = int(dset.attrs["crc32"])
    except (KeyError, ValueError, TypeError) as e:
        raise FormatError(f"{f.filename}: extra {name!r} is damaged: {e!r}") from e
    if value.dtype != dtype:
        value = value.view(dtype)
    if check and crc32(_raw(value)) != crc:
        raise CorruptChunkError(f"extra {name!r} in {f.filename} is corrupt (CRC32 mismatch)",
                                array=name)
    return value


# -- verification and readers for tools --------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """One thing :func:`verify` found wrong; ``chunk`` is None for whole-array problems."""

    array: str
    chunk: int | None
    message: str

    def __str__(self) -> str:
        return self.message


def verify(path: str | os.PathLike[str], *, progress: bool = False) -> list[Problem]:
    """Check every chunk of a file: present, CRC32, and decodes to the right size.

    Returns the problems found (an empty list: the file is sound). Raises
    :class:`FormatError` when the file cannot be read as a chunkstore file at all.
    """
    path = os.fspath(path)
    problems: list[Problem] = []
    with _open(path) as (f, fd):
        header = _read_header(f, path)
        metas = []
        for name in header["arrays"]:
            try:
                metas.append(_read_array_meta(f, name))
            except FormatError as e:
                problems.append(Problem(name, None, str(e)))
            else:
                problems += _index_problems(metas[-1], _chunk_locations(f[name], metas[-1].chunk_len))
        for name in header["extras"]:
            try:
                _read_extra(f, name, check=True)
            except (FormatError, CorruptChunkError) as e:
                problems.append(Problem(name, None, str(e)))
        mapped = MappedFile(path, fd)
    try:
        with _bar(sum(len(m.chunks) for m in metas), progress, "verify") as bar:
            for meta in metas:
                problems += _chunk_problems(meta, mapped, bar)
    finally:
        mapped.close()
    return problems


def _index_problems(meta: _ArrayMeta, located: np.ndarray) -> list[Problem]:
    out = [Problem(meta.name, c, f"{meta.name}: chunk {c} is listed as stored but missing "
                   "from the file") for c in meta.chunks[meta.offsets < 0].tolist()]
    for c in np.setdiff1d(located[:, 0], meta.chunks).tolist():
        out.append(Problem(meta.name, c, f"{meta.name}: chunk {c} is in the file but not in "
                           "the chunk table"))
    for c in located[located[:, 3] != 0, 0].tolist():
        out.append(Problem(meta.name, c, f"{meta.name}: chunk {c} has a nonzero filter mask"))
    if len(meta.crc32) != len(meta.chunks):
        out.append(Problem(meta.name, None, f"{meta.name}: {len(meta.chunks)} chunks but "
                           f"{len(meta.crc32)} checksums"))
    return out


def _chunk_problems(meta: _ArrayMeta, mapped: MappedFile, bar: tqdm) -> list[Problem]:
    try:
        codec = codec_from_config(meta.codec_config)
    except CodecConfigError as e:
        return [Problem(meta.name, None, f"{meta.name}: unknown codec: {e}")]
    last = meta.nchunks - 1
    checks = [(c, off, n, crc, False) for c, off, n, crc in zip(
        meta.chunks.tolist(), meta.offsets.tolist(), meta.nbytes.tolist(), meta.crc32.tolist(),
        strict=False) if off >= 0]  # missing chunks are reported by _index_problems
    if meta.tail is not None and len(meta.chunks):
        checks.append((int(meta.chunks[-1]), *meta.tail, True))

    local = threading.local()

    def scratch(shape: tuple[int, ...]) -> np.ndarray:
        # one reused buffer per thread: fresh pages cost more than the decode (FACTS.md)
        buf = getattr(local, "buf", None)
        if buf is None or buf.shape != shape:
            buf = local.buf = np.empty(shape, meta.dtype)
        return buf

    def check(job: tuple[int, int, int, int, bool]) -> Problem | None:
        c, off, n, crc, verbatim = job
        what = f"{meta.name}: chunk {c}" + (" (verbatim tail copy)" if verbatim else "")
        data = mapped.view(off, n)
        if data.size != n:
            return Problem(meta.name, c, f"{what} lies beyond the end of the file")
        if crc32(data) != crc:
            return Problem(meta.name, c, f"{what} is corrupt (CRC32 mismatch)")
        padded = meta.tail is not None and c == last and not verbatim
        out = scratch((meta.chunk_len if padded else meta.rows(c), *meta.item_shape))
        try:
            codec.decode(data, out=out)
        except Exception as e:
            return Problem(meta.name, c, f"{what} does not decode to {out.nbytes} bytes "
                           f"with {codec.name}: {e}")
        return None

    # zstd, lz4 and blosc2 release the GIL: decode on every core
    problems = []
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for k, problem in enumerate(pool.map(check, checks)):
            if problem is not None:
                problems.append(problem)
            if k % _BAR_STEP == _BAR_STEP - 1:
                bar.update(_BAR_STEP)
    bar.update(len(checks) % _BAR_STEP)
    return problems


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


# -- helpers ---------------------------------------------------------------------------
def _check_name(name: Any) -> None:
    parts = name.split("/") if isinstance(name, str) else []
    if not parts or any(p in ("", ".", "..") for p in parts) or parts[0] == _META:
        raise ValueError(f"invalid name {name!r}: use a non-empty HDF5 path (parts separated by "
                         f"'/') that does not start with {_META!r}")


def _h5_dtype(dtype: np.dtype) -> np.dtype:
    """``dtype`` if HDF5 has a type for it, else opaque bytes of the same size."""
    try:
        h5py.h5t.py_create(dtype, logical=True)
        return dtype
    except TypeError:  # datetime64, unicode strings: stored opaque, dtype kept in attrs
        return np.dtype(f"V{dtype.itemsize}")


def _dtype_to_json(dtype: np.dtype) -> str:
    return json.dumps(np.lib.format.dtype_to_descr(dtype))


def _dtype_from_json(text: str) -> np.dtype:
    # JSON turned the descr's tuples into lists: (name, sub-descr[, shape]) per field
    def fields(descr: Any) -> Any:
        if not isinstance(descr, list):
            return descr
        out = []
        for name, sub, *shape in descr:
            key = tuple(name) if isinstance(name, list) else name
            out.append((key, fields(sub), tuple(shape[0])) if shape else (key, fields(sub)))
        return out

    return np.lib.format.descr_to_dtype(fields(json.loads(text)))


def _raw(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _dump_json(value: Any, what: str) -> str:
    def default(o: Any) -> Any:
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
        raise TypeError(f"{what}: {type(o).__name__} is not JSON-serializable")

    return json.dumps(value, default=default)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems cannot fsync a directory
        pass
    finally:
        os.close(fd)


def _bar(total: int, progress: bool, desc: str) -> tqdm:
    return tqdm(total=total, unit="chunk", desc=desc, disable=None if progress else True,
                leave=False, unit_scale=True)
