"""Disk space for a save, allocated before HDF5 writes a byte of it.

HDF5 cannot recover from a failed write. Once one of its writes fails (a full disk: ENOSPC, a
file size limit: EFBIG), closing the file fails too, and releasing the dataset handles that
remain makes HDF5 flush into a file structure it already freed: the process segfaults later,
wherever those handles are garbage-collected (measured with h5py 3 / HDF5 1.14: a save of a
buffer past RLIMIT_FSIZE raised OSError, then the process died with SIGSEGV at exit). So a save
reserves the file's size first: the temporary is allocated (``fallocate``) to an estimate of the
file, a failure there is a clean ``OSError`` before HDF5 has written anything, and HDF5's writes
then land in blocks that exist. HDF5 truncates the file to its real end when it closes it.

Where ``fallocate`` is missing (not Linux, or a filesystem without it), the free space
(``fstatvfs``) and the file size limit are checked against the estimate instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["estimate_nbytes", "reserve"]

#: metadata per file (superblock, groups, attributes, checksums) and per dataset, generously
FILE_OVERHEAD = 1 << 20
DATASET_OVERHEAD = 16 << 10
#: per chunk: its entries in the chunk tables (index 8 B, CRC32 4 B, size 4 B) and in HDF5's chunk index
CHUNK_OVERHEAD = 48
#: a compressed extra beyond its raw bytes: zstd's frame and block headers, HDF5's chunk index
PACKED_OVERHEAD = 4 << 10

_UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}


def estimate_nbytes(sources: Iterable[Any], extras: Mapping[str, Any], pack_threshold: int) -> int:
    """At least the bytes of a saved file: every chunk, the chunk tables, the extras, HDF5's metadata.

    ``sources`` are the arrays' :class:`~chunkstore.hdf5.source.ChunkSource` objects. Extras
    of ``pack_threshold`` bytes or more are compressed by HDF5, and are still counted whole
    (plus zstd's framing): random actions or rewards do not compress, and a file larger than
    its reservation would meet a full disk inside HDF5 (a SAC buffer's 256-float random actions
    made a file 1.62x an estimate that counted them at half).
    """
    total = FILE_OVERHEAD
    for src in sources:
        total += int(np.sum(src.nbytes, dtype=np.int64)) + CHUNK_OVERHEAD * len(src.chunks) + DATASET_OVERHEAD
        total += src.chunk_len * src.item_nbytes  # a zero-padded last chunk, re-encoded
        total += len(src.codec.get_config().get("dictionary", "") or "")  # a trained dictionary
    for value in extras.values():
        n = int(np.asarray(value).nbytes)
        total += n + (n // 256 + PACKED_OVERHEAD if n >= pack_threshold else 0) + DATASET_OVERHEAD
    return total


def _fallocate() -> Any:
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int
    return fn


_FALLOCATE = _fallocate()


def reserve(fd: int, nbytes: int, path: str) -> None:
    """Allocate ``nbytes`` of disk to the file behind ``fd`` (the temporary of a save of ``path``).

    Raises OSError (ENOSPC, EFBIG, EDQUOT, ...) naming ``path`` and the sizes when they cannot
    be had; nothing is written into the file.
    """
    if _FALLOCATE is not None:
        if _FALLOCATE(fd, 0, 0, nbytes) == 0:
            return
        err = ctypes.get_errno()
        if err not in _UNSUPPORTED and err != errno.EINTR:
            raise _refused(err, fd, nbytes, path)
    st = os.fstatvfs(fd)  # no fallocate: check what can be checked
    if st.f_bavail * st.f_frsize < nbytes:
        raise _refused(errno.ENOSPC, fd, nbytes, path)
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return
    if limit != resource.RLIM_INFINITY and limit < nbytes:
        raise _refused(errno.EFBIG, fd, nbytes, path)


def _refused(err: int, fd: int, nbytes: int, path: str) -> OSError:
    """The OSError of a refused reservation, in words that fit its errno: free space is named
    only for a full disk (an EFBIG says nothing about free space)."""
    why = ""
    if err == errno.ENOSPC:
        try:
            st = os.fstatvfs(fd)
            why = f"; {st.f_bavail * st.f_frsize / 1e6:,.1f} MB are free there"
        except OSError:
            pass
    elif err == errno.EFBIG:
        why = f", more than {_file_size_limit()}"
    elif err == getattr(errno, "EDQUOT", None):
        why = ", more than this user's disk quota leaves"
    elif err == errno.EROFS:
        why = ", and the filesystem is mounted read-only"
    return OSError(err, f"{os.strerror(err)}: saving {path} needs about {nbytes / 1e6:,.1f} MB{why}. "
                        f"Nothing was written: {path} is unchanged and no temporary was left.")


def _file_size_limit() -> str:
    """The file size limits that apply, as words (RLIMIT_FSIZE when one is set)."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        limit = None
    if limit is not None and limit != resource.RLIM_INFINITY:
        return f"this process's file size limit (RLIMIT_FSIZE, {limit / 1e6:,.1f} MB) allows"
    return "this filesystem allows in one file"
