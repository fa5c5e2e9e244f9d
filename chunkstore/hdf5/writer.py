"""Write a store (named ChunkedArrays, plain arrays, attributes) to one HDF5 file, atomically."""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Mapping
from typing import Any

import h5py
import hdf5plugin
import numpy as np
from tqdm import tqdm

from chunkstore.array import ChunkedArray
from chunkstore.codecs import Codec, TrainableCodec
from chunkstore.hdf5 import _tempfile
from chunkstore.hdf5._layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    META,
    PRIVATE_FILTER_ID,
    array_record,
    check_name,
    dtype_to_json,
    dump_json,
    extra_record,
    h5_dtype,
    header_record,
    index_record,
    raw_bytes,
)
from chunkstore.hdf5.checksum import crc32, record_crc

__all__ = ["save"]

#: longer codec configs (a trained zstd dictionary) go to a dataset: attributes over
#: 64 KB need HDF5's newest object-header format, which older readers lack
MAX_ATTR_CHARS = 16 << 10
#: chunks between progress-bar updates: tqdm per chunk would cost more than the write
BAR_STEP = 512
#: extras at least this large are compressed inside the file
PACK_EXTRAS = 64 << 10
#: HDF5 file format: 1.10 (2017) gives every metadata block a checksum of its own, so a
#: damaged object header or chunk index is an HDF5 error instead of garbage parsed
LIBVER = ("v110", "v110")


def save(
    path: str | os.PathLike[str],
    arrays: Mapping[str, ChunkedArray],
    extras: Mapping[str, Any] | None = None,
    attrs: Mapping[str, Any] | None = None,
    *,
    progress: bool = True,
    reader_note: str | None = None,
) -> None:
    """Write a store to one HDF5 file, atomically.

    Parameters
    ----------
    path
        The file. An existing file is replaced only once the new one is complete
        and fsynced; it may be the very file the arrays were lazily loaded from.
        Temporaries of earlier saves to ``path`` that were killed are removed.
    arrays
        Named ChunkedArrays. Each is flushed first (open chunks are sealed), then
        its stored chunks are copied verbatim; unwritten chunks are not written.
    extras
        Named plain arrays (positions, flags, rewards, ...).
    attrs
        JSON-serializable attributes (numpy scalars and arrays are converted).
    progress
        Show a progress bar over chunks on stderr (tqdm; hidden when not a tty).
    reader_note
        Text appended to the root ``reader_note`` attribute (how a plain HDF5 reader
        makes sense of the datasets, e.g. how a buffer's observations are rebuilt).
    """
    path = os.fspath(path)
    extras = dict(extras or {})
    for name in [*arrays, *extras]:
        check_name(name)
    if len({*arrays, *extras}) != len(arrays) + len(extras):
        raise ValueError(f"names are shared by arrays and extras: {sorted(set(arrays) & set(extras))}")
    attrs_json = dump_json(dict(attrs or {}), "attrs")
    for arr in arrays.values():
        arr.flush()
    total = sum(len(arr.stored_chunks()) for arr in arrays.values())
    _tempfile.remove_stale_temporaries(path)
    with _tempfile.temporary(path) as (tmp, fd):
        with h5py.File(_tempfile.writable_name(tmp, fd), "w", libver=LIBVER) as f, \
                _bar(total, progress) as bar:
            checksums: dict[str, Any] = {"arrays": {}, "extras": {}}
            _write_header(f, list(arrays), list(extras), attrs_json)
            for name, arr in arrays.items():
                checksums["arrays"][name] = _write_array(f, name, arr, bar)
            for name, value in extras.items():
                checksums["extras"][name] = _write_extra(f, name, value)
            checksums["header"] = record_crc(header_record(f))
            f.attrs["checksums"] = json.dumps(checksums)
            f.attrs["reader_note"] = _reader_note(arrays) + (f"\n\n{reader_note}" if reader_note else "")
        os.fsync(fd)
        if not _tempfile.still_ours(tmp, fd):
            raise OSError(f"the temporary {tmp} was replaced while it was written; {path} is unchanged")
        os.replace(tmp, path)
        _fsync_dir(os.path.dirname(os.path.abspath(path)))


def _write_header(f: h5py.File, arrays: list[str], extras: list[str], attrs_json: str) -> None:
    from chunkstore import __version__

    f.attrs["format"] = FORMAT_NAME
    f.attrs["format_version"] = FORMAT_VERSION
    f.attrs["chunkstore_version"] = __version__
    f.attrs["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    f.attrs["attrs"] = attrs_json
    f.attrs["arrays"] = json.dumps(arrays)
    f.attrs["extras"] = json.dumps(extras)


def _filter_args(label: str) -> dict[str, Any]:
    """create_dataset arguments declaring the HDF5 filter that reads a codec's chunks."""
    if label == "zstd":
        return dict(hdf5plugin.Zstd())
    if label == "deflate":
        return {"compression": "gzip"}
    if label == "none":
        return {}
    opts = {"compression": PRIVATE_FILTER_ID, "compression_opts": (FORMAT_VERSION,)}
    return {**opts, "allow_unknown_filter": True}


def _write_array(f: h5py.File, name: str, arr: ChunkedArray, bar: tqdm) -> dict[str, int]:
    """One chunked array; returns the CRC32s of its description, codec config and chunk table."""
    L, item_shape = arr.chunk_len, tuple(arr.item_shape)
    if 0 in item_shape:
        raise ValueError(f"{name}: items of shape {item_shape} hold no data; HDF5 cannot chunk them")
    label = arr.codec.hdf5_filter or "chunkstore"
    dset = f.create_dataset(
        name, shape=arr.shape, dtype=h5_dtype(arr.dtype), chunks=(L, *item_shape),
        track_times=False, **_filter_args(label),
    )
    meta = f.require_group(f"{META}/arrays/{name}")
    config = dump_json(arr.codec.get_config(), f"{name} codec")
    dset.attrs.update({
        "kind": "chunked_array", "codec": arr.codec.name,
        "chunk_len": L, "capacity": arr.capacity, "item_shape": json.dumps(item_shape),
        "dtype": dtype_to_json(arr.dtype), "hdf5_filter": label, "note": _array_note(name, arr.codec),
    })
    if len(config) <= MAX_ATTR_CHARS:
        dset.attrs["codec_config"] = config
    else:  # a trained dictionary: too big for an attribute in the HDF5 1.8 file format
        meta.create_dataset("codec_config", data=np.frombuffer(config.encode(), np.uint8))
    stored = arr.stored_chunks()
    crcs, tail = _write_chunks(f, name, arr, dset, stored, pad_tail=label != "chunkstore", bar=bar)
    meta.create_dataset("chunks", data=stored.astype(np.int64))
    meta.create_dataset("crc32", data=crcs)
    return {"meta": record_crc(array_record(dset)), "codec": crc32(config.encode()),
            "index": record_crc(index_record(stored, crcs, tail))}


def _write_chunks(f: h5py.File, name: str, arr: ChunkedArray, dset: h5py.Dataset, stored: np.ndarray,
                  *, pad_tail: bool, bar: tqdm) -> tuple[np.ndarray, tuple[int, int] | None]:
    """Every stored chunk, verbatim; returns their CRC32s and the verbatim tail's (nbytes, CRC32).

    HDF5 decodes every chunk to full size, so a standard filter needs the partial last
    chunk zero-padded and re-encoded; its original bytes are kept in ``tail``.
    """
    L, last = arr.chunk_len, arr.nchunks_total - 1
    pad_tail = pad_tail and arr.chunk_rows(last) < L
    crcs = np.empty(len(stored), dtype=np.uint32)
    write = dset.id.write_direct_chunk
    rest = (0,) * (arr.ndim - 1)
    tail = None
    # the hot loop: one tier view, one CRC and one HDF5 call per chunk
    for k, (c, view) in enumerate(zip(stored.tolist(), arr.iter_chunk_bytes(stored), strict=True)):
        data: Any = view
        if pad_tail and c == last:
            tail = _write_tail(f, name, data)
            data = _padded_chunk(arr, c)
        crcs[k] = crc32(data)
        write((c * L, *rest), data)
        if k % BAR_STEP == BAR_STEP - 1:
            bar.update(BAR_STEP)
    bar.update(len(stored) % BAR_STEP)
    return crcs, tail


def _padded_chunk(arr: ChunkedArray, c: int) -> bytes:
    """Chunk ``c`` zero-padded to ``chunk_len`` rows and re-encoded (for HDF5 readers)."""
    rows = arr.chunk(c)
    padded = np.zeros((arr.chunk_len, *arr.item_shape), dtype=arr.dtype)
    padded[: len(rows)] = rows
    return bytes(arr.codec.encode(padded))


def _write_tail(f: h5py.File, name: str, data: memoryview) -> tuple[int, int]:
    tail = f.create_dataset(f"{META}/arrays/{name}/tail", data=np.frombuffer(data, np.uint8))
    crc = crc32(data)
    tail.attrs["crc32"] = np.uint32(crc)
    return len(data), crc


def _write_extra(f: h5py.File, name: str, value: Any) -> int:
    """One extra; returns the CRC32 of its description."""
    a = np.asarray(value)
    a = a if a.flags.c_contiguous else a.copy(order="C")  # keeps 0-d arrays 0-d
    if a.dtype.hasobject:
        raise TypeError(f"extra {name!r} has dtype {a.dtype}; only plain numpy dtypes can be saved")
    h5dtype = h5_dtype(a.dtype)
    # large extras (a buffer's actions, rewards, dones: 20 B a transition) are zstd
    # compressed by HDF5 itself, so plain h5py + hdf5plugin still reads them
    packed = {"shuffle": True, **hdf5plugin.Zstd(clevel=1)} if a.ndim and a.nbytes >= PACK_EXTRAS else {}
    dset = f.create_dataset(name, data=a.view(h5dtype) if h5dtype != a.dtype else a,
                            track_times=False, **packed)
    dset.attrs.update({"kind": "extra", "dtype": dtype_to_json(a.dtype),
                       "crc32": np.uint32(crc32(raw_bytes(a)))})
    return record_crc(extra_record(dset))


# -- notes for plain HDF5 readers -----------------------------------------------------------
def _array_note(name: str, codec: Codec) -> str:
    label = codec.hdf5_filter
    if label == "zstd":
        return "Zstd chunks: plain h5py reads this dataset after `import hdf5plugin`."
    if label in ("deflate", "none"):
        return "Plain h5py reads this dataset."
    why = ("it was trained on this data (its config, e.g. a zstd dictionary, is the "
           f"'codec_config' attribute or /{META}/arrays/{name}/codec_config)"
           if isinstance(codec, TrainableCodec) else "HDF5 has no filter for it")
    return (f"Chunks are encoded with chunkstore codec {codec.name!r}: {why}. HDF5 cannot "
            f"decode them (filter id {PRIVATE_FILTER_ID}): h5py fails to read them with an "
            "HDF5 filter or plugin-path error. Read this dataset with chunkstore: "
            f"chunkstore.hdf5.load(path).arrays[{name!r}].")


def _reader_note(arrays: Mapping[str, ChunkedArray]) -> str:
    private = [f"{n} ({a.codec.name})" for n, a in arrays.items() if a.codec.hdf5_filter is None]
    text = (f"Written by chunkstore (file format {FORMAT_VERSION}); read it with "
            "`chunkstore.hdf5.load(path)`. Every dataset's 'note' attribute says how to read it. "
            "Chunks of datasets with hdf5_filter 'zstd' (and large extras) are Zstd: "
            "`import hdf5plugin` before reading them with h5py.")
    if private:
        text += (" These datasets need chunkstore to decode (plain h5py fails with an HDF5 "
                 f"filter or plugin-path error, filter id {PRIVATE_FILTER_ID}): "
                 + ", ".join(private) + ".")
    return text


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems cannot fsync a directory
        pass
    finally:
        os.close(fd)


def _bar(total: int, progress: bool) -> tqdm:
    return tqdm(total=total, unit="chunk", desc="save", disable=None if progress else True,
                leave=False, unit_scale=True)
