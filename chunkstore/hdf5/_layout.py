"""Names, dtypes and metadata records shared by the writer, the reader and verify.

The ``*_record`` functions read what the file says about the header, an array
or an extra, as a small JSON-able value. The writer computes the checksums of
these records from the file it has just written, with the same functions the
reader uses, so writer and reader cannot disagree on what is covered.
"""

from __future__ import annotations

import json
from typing import Any

import h5py
import numpy as np

from chunkstore.hdf5.checksum import crc32

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "GROUP_ATTR",
    "META",
    "PRIVATE_FILTER_ID",
    "WRITABLE_VERSIONS",
    "array_record",
    "attr_value",
    "check_name",
    "dtype_from_json",
    "dtype_to_json",
    "dump_json",
    "extra_record",
    "h5_dtype",
    "header_record",
    "index_record",
    "raw_bytes",
]

FORMAT_NAME = "chunkstore"
#: 1: chunks and extras carry CRC32s. 2: the header, each array's description, codec
#: config (with a trained dictionary), chunk table and each extra's description too.
#: 3: one HDF5 chunk may hold several consecutive chunks (``chunks_per_hdf5_chunk``);
#: the chunk table lists each chunk's size in its HDF5 chunk.
FORMAT_VERSION = 3
#: the versions :func:`~chunkstore.hdf5.save` can write (2: for older chunkstore readers)
WRITABLE_VERSIONS = (2, 3)
#: HDF5 filter id declared on datasets whose chunks only chunkstore can decode
PRIVATE_FILTER_ID = 47_301
#: the group holding chunk tables, CRCs and large codec configs
META = "_chunkstore"
#: root attributes covered by the header checksum, in record order
HEADER_ATTRS = ("format", "format_version", "chunkstore_version", "created", "attrs",
                "arrays", "extras")
#: dataset attributes of a chunked array covered by its checksum (format 2)
ARRAY_ATTRS = ("kind", "codec", "chunk_len", "capacity", "item_shape", "dtype", "hdf5_filter")
#: the attribute format 3 adds: how many consecutive chunks one HDF5 chunk holds
GROUP_ATTR = "chunks_per_hdf5_chunk"


def attr_value(obj: h5py.HLObject, key: str) -> Any:
    """Attribute ``key`` of ``obj`` as plain Python (str, int, float, list), None if absent."""
    if key not in obj.attrs:
        return None
    value = obj.attrs[key]
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def header_record(f: h5py.File) -> list[Any]:
    return [attr_value(f, k) for k in HEADER_ATTRS]


def array_record(dset: h5py.Dataset, version: int = FORMAT_VERSION) -> dict[str, Any]:
    """What the HDF5 dataset of a chunked array says about its geometry and codec.

    ``version`` is the file's format version: format 3 covers :data:`GROUP_ATTR` too.
    """
    keys = ARRAY_ATTRS + ((GROUP_ATTR,) if version >= 3 else ())
    record = {k: attr_value(dset, k) for k in keys}
    record.update(shape=list(dset.shape), chunks=list(dset.chunks or ()), h5dtype=dset.dtype.str)
    return record


def index_record(chunks: np.ndarray, crcs: np.ndarray, tail: tuple[int, int] | None,
                 nbytes: np.ndarray | None = None) -> list[Any]:
    """The chunk table: stored chunk indices, their CRC32s, the verbatim tail (length, CRC32),
    and (format 3) each chunk's size in its HDF5 chunk."""
    record = [len(chunks), crc32(np.ascontiguousarray(chunks, "<i8")),
              crc32(np.ascontiguousarray(crcs, "<u4")), list(tail) if tail else None]
    if nbytes is not None:  # as int64: a crafted value cannot wrap around onto a valid one
        record.append(crc32(np.ascontiguousarray(nbytes, "<i8")))
    return record


def extra_record(dset: h5py.Dataset) -> dict[str, Any]:
    """What the file says about an extra besides its bytes: shape, dtypes, data CRC32."""
    return {"shape": list(dset.shape), "h5dtype": dset.dtype.str, "kind": attr_value(dset, "kind"),
            "dtype": attr_value(dset, "dtype"), "crc32": attr_value(dset, "crc32")}


# -- names and dtypes -------------------------------------------------------------------------
def check_name(name: Any) -> None:
    parts = name.split("/") if isinstance(name, str) else []
    if not parts or any(p in ("", ".", "..") for p in parts) or parts[0] == META:
        raise ValueError(f"invalid name {name!r}: use a non-empty HDF5 path (parts separated by "
                         f"'/') that does not start with {META!r}")


def h5_dtype(dtype: np.dtype) -> np.dtype:
    """``dtype`` if HDF5 has a type for it, else opaque bytes of the same size."""
    try:
        h5py.h5t.py_create(dtype, logical=True)
        return dtype
    except TypeError:  # datetime64, unicode strings: stored opaque, dtype kept in attrs
        return np.dtype(f"V{dtype.itemsize}")


def dtype_to_json(dtype: np.dtype) -> str:
    return json.dumps(np.lib.format.dtype_to_descr(dtype))


def dtype_from_json(text: str) -> np.dtype:
    # JSON turned the descr's tuples into lists: (name, sub-descr[, shape]) per field
    def fields(descr: Any) -> Any:
        if not isinstance(descr, list):
            return descr
        out = []
        for name, sub, *shape in descr:
            key = tuple(name) if isinstance(name, list) else name
            out.append((key, fields(sub), tuple(shape[0])) if shape else (key, fields(sub)))
        return out

    dtype = np.lib.format.descr_to_dtype(fields(json.loads(text)))
    if dtype.hasobject:
        raise ValueError(f"dtype {dtype} holds Python objects")
    return dtype


def raw_bytes(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def dump_json(value: Any, what: str) -> str:
    def default(o: Any) -> Any:
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
        raise TypeError(f"{what}: {type(o).__name__} is not JSON-serializable")

    return json.dumps(value, default=default)
