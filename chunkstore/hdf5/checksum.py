"""The one checksum helper of the file format: CRC32 of bytes and of metadata records.

Chunk bytes, extras and the verbatim tail are checked with :func:`check_crc`.
Metadata (the header, each array's description, codec config with its trained
dictionary, chunk table, each extra's description) is checked as *records*: a
record is a small JSON-able value built from what the file holds, by the same
function when writing and when reading (``_records.py``), and
:func:`record_crc` is the CRC32 of its canonical JSON. The writer stores the
CRCs in the root attribute ``checksums``; readers recompute and compare.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from chunkstore.errors import CorruptChunkError

__all__ = ["check_crc", "crc32", "record_crc"]


def crc32(data: Any) -> int:
    """zlib's CRC32 of any C-contiguous buffer (bytes, memoryview, uint8 ndarray)."""
    return zlib.crc32(data)


def record_crc(record: Any) -> int:
    """CRC32 of a metadata record's canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return zlib.crc32(text.encode("ascii"))


def check_crc(data: Any, expected: int, what: str, *,
              error: type[Exception] = CorruptChunkError, **fields: Any) -> None:
    """Raise ``error`` naming ``what`` unless ``crc32(data) == expected``.

    ``fields`` go to the error's constructor (``array=``, ``chunk=`` for
    :class:`~chunkstore.errors.CorruptChunkError`).
    """
    got = crc32(data)
    if got != int(expected):
        raise error(f"{what} is corrupt (CRC32 {got:#010x}, expected {int(expected):#010x})",
                    **fields)
