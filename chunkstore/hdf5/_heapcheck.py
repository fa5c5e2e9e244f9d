"""The file object HDF5 reads a loaded file through: global heap collections checked first.

HDF5 keeps variable-length data (every string attribute of a chunkstore file: the header,
codec configs, dtypes) in *global heap collections*. HDF5 2.0's parser of a collection
(``H5HG__cache_heap_deserialize``) steps from object to object by each object's declared
size and never checks that a step moves forward or stays inside the collection: one flipped
bit in an object's size can leave it on a free-space object of size 0, and it loops forever
with the GIL held (reproduced with plain h5py 3.16 / HDF5 2.0.0 reading the attribute); a
size near 2**64 wraps its pointer around. Nothing above it can stop that loop.

So a file is opened by h5py through :class:`HeapCheckedFile` (h5py's ``fileobj`` driver),
which ``pread`` s what HDF5 asks for and, where a read holds a collection (it begins with the
signature ``GCOL``: HDF5 loads each collection from its address, first 4096 bytes, then the
whole collection), walks its objects the way HDF5 will and raises OSError (HDF5's read fails;
the loader reports a damaged file) when a step would not move forward or would leave the
collection, or when the collection declares more bytes than the file holds after it.
"""

from __future__ import annotations

import io
import os
import struct
from typing import Any

__all__ = ["HeapCheckedFile", "check_collection"]

_SIGNATURE = b"GCOL"
_HEADER = 16  # signature, version, 3 reserved bytes, the collection's size (8 bytes)
_OBJECT_HEADER = 16  # index (2), reference count (2), reserved (4), size (8)


def check_collection(buf: memoryview, at: int, file_size: int) -> None:
    """OSError unless the global heap collection at the start of ``buf`` (byte ``at`` of a file
    of ``file_size`` bytes) can be walked: checked once ``buf`` holds all of it."""
    if len(buf) < _HEADER:
        return
    (size,) = struct.unpack_from("<Q", buf, 8)
    if size < _HEADER or size > file_size - at:
        raise OSError(f"damaged HDF5 global heap collection at byte {at}: it declares {size} bytes, "
                      f"the file holds {file_size - at} from there")
    if len(buf) < size:
        return  # the first 4096 bytes of a larger collection: checked when HDF5 reads all of it
    p = _HEADER
    while size - p >= _OBJECT_HEADER:  # HDF5 takes a shorter rest as free space
        (index,) = struct.unpack_from("<H", buf, p)
        (nbytes,) = struct.unpack_from("<Q", buf, p + 8)
        step = _OBJECT_HEADER + ((nbytes + 7) & ~7) if index else nbytes  # object 0: free space, whole
        if step <= 0 or step > size - p:
            raise OSError(f"damaged HDF5 global heap collection at byte {at}: object {index} at byte "
                          f"{at + p} declares {nbytes} bytes, {size - p} are left in the collection")
        p += step


class HeapCheckedFile(io.RawIOBase):
    """A read-only file object over descriptor ``fd`` (not closed here) for ``h5py.File``."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd, self._pos, self._size = fd, 0, os.fstat(fd).st_size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        n = os.preadv(self._fd, [view], self._pos) if len(view) else 0
        if n >= len(_SIGNATURE) and view[:len(_SIGNATURE)] == _SIGNATURE:
            check_collection(view[:n], self._pos, self._size)
        self._pos += n
        return n
