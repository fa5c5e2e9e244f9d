"""The file object HDF5 reads a loaded file through: global heap collections checked first.

HDF5 keeps variable-length data (every string attribute of a chunkstore file: the header,
codec configs, dtypes) in *global heap collections*. HDF5 2.0's parser of a collection
(``H5HG__cache_heap_deserialize``) steps from object to object by each object's declared
size and never checks that a step moves forward or stays inside the collection: one flipped
bit in an object's size can leave it on a free-space object of size 0, and it loops forever
with the GIL held (reproduced with plain h5py 3.16 / HDF5 2.0.0 reading the attribute); a
size near 2**64 wraps its pointer around. Nothing above it can stop that loop.

So a file is opened by h5py through :class:`HeapCheckedFile` (h5py's ``fileobj`` driver),
which ``pread`` s what HDF5 asks for and, where a read begins with a collection (the signature
``GCOL``, version 1 and three zero bytes, as HDF5 requires; HDF5 loads each collection from its
address: 4096 bytes first, then, for a larger one, the rest from where those end, which is read
here too), walks its objects the way HDF5 will and raises OSError (HDF5's read fails; the loader
reports a damaged file) when a step would not move forward or would leave the collection, or
when the collection declares more bytes than the file holds after it. A read of array data that
begins with those 8 bytes is checked the same way: a false alarm needs data that begins with them.
"""

from __future__ import annotations

import io
import os
import struct
from typing import Any

__all__ = ["HeapCheckedFile", "check_collection"]

_SIGNATURE = b"GCOL\x01\x00\x00\x00"  # the signature, version 1, 3 reserved zero bytes: what HDF5 parses
_HEADER = 16  # signature, version, 3 reserved bytes, the collection's size (8 bytes)
_OBJECT_HEADER = 16  # index (2), reference count (2), reserved (4), size (8)
_WINDOW = 1 << 20  # bytes of a collection read at a time beyond what HDF5 read


def check_collection(buf: memoryview, at: int, file_size: int, fd: int | None = None) -> None:
    """OSError unless the global heap collection at the start of ``buf`` (byte ``at`` of a file
    of ``file_size`` bytes) can be walked. Where ``buf`` holds only its start (HDF5 reads 4096
    bytes first, and the rest of a larger collection from where those end), the rest is read
    from ``fd`` here, a window at a time; without ``fd`` only what ``buf`` holds is walked."""
    if len(buf) < _HEADER:
        return
    (size,) = struct.unpack_from("<Q", buf, 8)
    if size < _HEADER or size > file_size - at:
        raise OSError(f"damaged HDF5 global heap collection at byte {at}: it declares {size} bytes, "
                      f"the file holds {file_size - at} from there")
    start, held = 0, bytes(buf)  # the window: offset in the collection, the bytes held from there

    def header(p: int) -> tuple[int, int] | None:
        """The object header at ``p`` in the collection, None where it is not at hand."""
        nonlocal start, held
        if p + _OBJECT_HEADER > start + len(held):
            if fd is None:
                return None
            start, held = p, os.pread(fd, min(_WINDOW, size - p), at + p)
            if len(held) < _OBJECT_HEADER:
                raise OSError(f"damaged HDF5 global heap collection at byte {at}: the file ends inside it")
        q = p - start
        return struct.unpack_from("<H", held, q)[0], struct.unpack_from("<Q", held, q + 8)[0]

    p = _HEADER
    while size - p >= _OBJECT_HEADER:  # HDF5 takes a shorter rest as free space
        got = header(p)
        if got is None:
            return
        index, nbytes = got
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
            check_collection(view[:n], self._pos, self._size, self._fd)
        self._pos += n
        return n
