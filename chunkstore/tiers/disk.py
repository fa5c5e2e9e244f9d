"""DiskTier: chunk bytes in segment files, written with pwrite, read through mmap or pread.

The native batch read path (:mod:`chunkstore.native`) reads segment files with
``pread`` into a small buffer: nothing is mapped, so RSS does not grow with
reads (random reads through a mapping fault in whole page-cache folios, up to
2 MiB each, which one sample(256) turned into hundreds of MB of RSS). ``get``,
the Python path, hands out zero-copy views of a mapping, bounded as follows.

Keeping RSS low while the tier holds many GB:

* Writes use ``os.pwrite``: the bytes go to the page cache without ever being
  mapped into this process, so they never count in its RSS.
* Reads are zero-copy views of a read-only ``MAP_SHARED`` mapping of the segment
  file. Pages the caller touches become resident (file-backed RSS), and not just
  4 KiB at a time: with large page-cache folios one touched byte maps up to
  2 MiB (measured: 1 MiB per touch on this box's 6.18 kernel). So the tier
  counts, per segment file, the 2 MiB windows its ``get`` views cover, capped at
  the file size: an upper bound of what can be resident. Once that count passes
  ``max_mapped_bytes`` it calls ``madvise(MADV_DONTNEED)`` on every mapping
  touched since. On a shared file mapping that only drops page-table entries:
  the mapping stays valid and the next access refaults the bytes from the page
  cache, so views already handed out keep reading correct data (tested). Where
  ``madvise`` is missing the mapping is dropped instead and re-created on the
  next read; old views keep the old mapping alive until they die.

Files never outlive their owner by accident: the private directory is removed by
``close()``, and otherwise when the tier is garbage-collected or at interpreter
exit, also after an exception (``weakref.finalize``), unless ``keep_files=True``.
A segment file's descriptor is closed when the file object dies, so a collected
tier gives its disk space back. Only a killed process (SIGKILL) leaves them.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from chunkstore.tiers._base import ChunkRef
from chunkstore.tiers._segments import DEFAULT_SEGMENT_BYTES, SegmentedTier, _Segment

__all__ = ["DEFAULT_MAX_MAPPED_BYTES", "DiskTier"]

DEFAULT_MAX_MAPPED_BYTES = 64 << 20
_MAX_FOLIO = 2 << 20  # one read fault maps at most one page-cache folio (<= PMD size)
_MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class SegmentFile:
    """One preallocated (sparse) segment file with a lazily created read mapping."""

    __slots__ = ("__weakref__", "_array", "_closer", "_mmap", "capacity", "fd", "path")

    def __init__(self, path: Path, capacity: int) -> None:
        self.path = path
        self.capacity = capacity
        self._mmap: mmap.mmap | None = None
        self._array: np.ndarray | None = None
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o644)
        try:
            # an unlinked file keeps its disk space while a descriptor is open: close it
            # when this object dies even if close() is never called
            self.fd = fd
            self._closer = weakref.finalize(self, os.close, fd)
            try:
                os.ftruncate(fd, capacity)
            except OSError as e:  # a file size limit, a quota: say which file, keep the errno
                raise OSError(e.errno, f"{e.strerror or e}: could not size the {capacity}-byte segment "
                                       f"file {path}") from e
        except BaseException:  # e.g. Ctrl-C or a full disk: no descriptor or file is left
            if getattr(self, "_closer", None) is not None:
                self._closer.detach()
            os.close(fd)
            path.unlink(missing_ok=True)
            raise

    def write(self, src: np.ndarray, offset: int) -> None:
        view = src.data  # a flat uint8 memoryview (src is 1-D contiguous)
        while view.nbytes:
            try:
                written = os.pwrite(self.fd, view, offset)
            except OSError as e:  # a full disk, a file size limit: say which file, keep the errno
                raise OSError(e.errno, f"{e.strerror or e}: could not write {src.nbytes} bytes of a chunk "
                                       f"into {self.path}") from e
            view = view[written:]
            offset += written

    def view(self, offset: int, nbytes: int) -> np.ndarray:
        """A read-only zero-copy view; the caller serialises calls (tier lock)."""
        return self._mapped()[offset:offset + nbytes]

    def _mapped(self) -> np.ndarray:
        if self._array is None:
            self._mmap = mmap.mmap(self.fd, self.capacity, access=mmap.ACCESS_READ)
            self._array = np.frombuffer(self._mmap, dtype=np.uint8)
        return self._array

    def drop_pages(self) -> None:
        """Make the mapped pages non-resident; existing views stay valid."""
        mm = self._mmap
        if mm is None:
            return
        if _MADV_DONTNEED is not None:
            mm.madvise(_MADV_DONTNEED)
        # else (no madvise): keep the mapping. Unmapping it would invalidate the views that
        # get() handed out; the kernel reclaims clean file pages under pressure.

    def close(self, unlink: bool = True) -> None:
        self._array = None
        if self._mmap is not None:
            # a caller still holding a view keeps the mapping alive until it drops it
            with contextlib.suppress(BufferError):
                self._mmap.close()
            self._mmap = None
        if self.fd >= 0:
            self._closer()  # closes the descriptor once
            self.fd = -1
        if unlink:
            self.path.unlink(missing_ok=True)


class _Removal:
    """What the finalizer of a SegmentDirectory needs (never the directory object itself)."""

    __slots__ = ("keep", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.keep = False


def _remove_unless_kept(removal: _Removal) -> None:
    if not removal.keep:
        shutil.rmtree(removal.path, ignore_errors=True)


class SegmentDirectory:
    """A private subdirectory of the user's directory, so tiers can share it.

    It is removed by :meth:`remove`, or when this object is garbage-collected or
    the interpreter exits, unless :attr:`keep` is set.
    """

    def __init__(self, directory: str | os.PathLike[str], prefix: str) -> None:
        parent = Path(directory)
        parent.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        self._removal = _Removal(self.path)
        self._finalizer = weakref.finalize(self, _remove_unless_kept, self._removal)

    @property
    def keep(self) -> bool:
        """Leave the files on disk when this object dies or the interpreter exits."""
        return self._removal.keep

    @keep.setter
    def keep(self, value: bool) -> None:
        self._removal.keep = bool(value)

    def create(self, name: str, capacity: int) -> SegmentFile:
        return SegmentFile(self.path / name, capacity)

    def remove(self) -> None:
        """Delete the directory and its files now."""
        self._finalizer.detach()
        shutil.rmtree(self.path, ignore_errors=True)


class PageBudget:
    """Bounds the mapped bytes ``get`` can have made resident; past it, drops them."""

    def __init__(self, max_mapped_bytes: int) -> None:
        if max_mapped_bytes < 0:
            raise ValueError(f"max_mapped_bytes must be non-negative, got {max_mapped_bytes}")
        self.max_mapped_bytes = int(max_mapped_bytes)
        self.mapped_nbytes = 0  # upper bound of resident mapped bytes since the last drop
        self.ndrops = 0
        self._touched: dict[SegmentFile, int] = {}  # file -> its share of mapped_nbytes
        self._lock = threading.Lock()

    def note(self, file: SegmentFile, offset: int, nbytes: int) -> None:
        lo = offset // _MAX_FOLIO * _MAX_FOLIO
        hi = -(-(offset + nbytes) // _MAX_FOLIO) * _MAX_FOLIO
        with self._lock:
            before = self._touched.get(file, 0)
            after = min(before + hi - lo, file.capacity)
            self._touched[file] = after
            self.mapped_nbytes += after - before

    def maybe_drop(self) -> None:
        if self.mapped_nbytes > self.max_mapped_bytes:
            self.drop()

    def drop(self) -> int:
        """Drop every touched mapping now; return the bytes that were counted."""
        with self._lock:
            touched, self._touched = self._touched, {}
            counted, self.mapped_nbytes = self.mapped_nbytes, 0
            if touched:
                self.ndrops += 1
        for file in touched:
            file.drop_pages()
        return counted

    def forget(self, file: SegmentFile) -> None:
        with self._lock:
            self.mapped_nbytes -= self._touched.pop(file, 0)


class DiskTier(SegmentedTier):
    """Encoded chunks in segment files under ``directory``, read zero-copy via mmap.

    Files live in a private subdirectory (``self.path``) of ``directory``, so
    several tiers may share one directory. ``close()`` deletes them unless
    ``keep_files=True``. Resident mapped pages are bounded by
    ``max_mapped_bytes`` (see the module docstring), so RSS stays small however
    many GB the tier holds.

    Parameters
    ----------
    directory : path-like
        Where segment files go; created if missing.
    segment_bytes : int
        Size of one segment file (default 4 MiB).
    max_bytes : int, optional
        Hard limit on reserved bytes; beyond it ``put`` raises ``TierFullError``.
    max_mapped_bytes : int
        Mapped bytes handed out by ``get`` before the touched pages are dropped.
    keep_files : bool
        Leave the segment files on disk at ``close()``, garbage collection and
        interpreter exit (by default they are removed at all three).

    Examples
    --------
    >>> import tempfile
    >>> with DiskTier(tempfile.mkdtemp(), segment_bytes=1 << 16) as tier:
    ...     ref = tier.put(b"hello")
    ...     bytes(tier.get(ref))
    b'hello'
    """

    kind = "disk"

    def __init__(self, directory: str | os.PathLike[str], *,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES, max_bytes: int | None = None,
                 max_mapped_bytes: int = DEFAULT_MAX_MAPPED_BYTES,
                 keep_files: bool = False) -> None:
        super().__init__(segment_bytes=segment_bytes, max_bytes=max_bytes)
        self._pages = PageBudget(max_mapped_bytes)
        self._dir = SegmentDirectory(directory, prefix="chunkstore-disk-")
        self.keep_files = keep_files

    def _settings(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        _, kwargs = super()._settings()
        return (self._dir.path.parent,), {**kwargs, "max_mapped_bytes": self._pages.max_mapped_bytes,
                                          "keep_files": self.keep_files}

    @property
    def keep_files(self) -> bool:
        """Leave the segment files on disk (see the class docstring)."""
        return self._dir.keep

    @keep_files.setter
    def keep_files(self, value: bool) -> None:
        self._dir.keep = value

    @property
    def path(self) -> Path:
        """The private directory holding this tier's segment files."""
        return self._dir.path

    @property
    def supports_persistence(self) -> bool:
        return True

    def get(self, ref: ChunkRef) -> np.ndarray:
        view = super().get(ref)
        self._pages.maybe_drop()  # outside the tier lock: madvise is a syscall
        return view

    def drop_mapped_pages(self) -> int:
        """Make every page mapped by ``get`` non-resident now; views stay valid."""
        return self._pages.drop()


    def flush(self) -> None:
        """fsync every segment file."""
        with self._lock:
            files = [seg.data for seg in self._segments.values()]
        for file in files:
            os.fsync(file.fd)

    def close(self) -> None:
        if self._closed:
            return
        super().close()
        if not self.keep_files:
            self._dir.remove()

    @property
    def ram_nbytes(self) -> int:
        """Segments are files: only the pages mapped for Python-path reads are memory."""
        return int(self._pages.mapped_nbytes)

    def info(self) -> dict[str, Any]:
        out = super().info()
        out.update(path=str(self.path), mapped_nbytes=self._pages.mapped_nbytes,
                   max_mapped_bytes=self._pages.max_mapped_bytes,
                   page_drops=self._pages.ndrops)
        return out

    def _allocate(self, seg: _Segment) -> None:
        seg.data = self._dir.create(f"seg-{seg.id:06d}.bin", seg.capacity)

    def _free_storage(self, seg: _Segment) -> None:
        self._pages.forget(seg.data)
        # trim() deletes dead segments; close() keeps them all when asked to
        seg.data.close(unlink=not (self.keep_files and self._closed))
        seg.data = None

    def _recycle(self, seg: _Segment) -> None:
        self._pages.forget(seg.data)
        seg.data.drop_pages()  # its bytes are dead: no reason to keep them resident

    def _write(self, seg: _Segment, offset: int, src: np.ndarray) -> None:
        seg.data.write(src, offset)

    def _view(self, seg: _Segment, offset: int, nbytes: int) -> np.ndarray:
        self._pages.note(seg.data, offset, nbytes)
        return seg.data.view(offset, nbytes)

    def _address(self, seg: _Segment) -> tuple[int, int]:
        # the native path preads segment files: nothing is mapped, RSS does not grow
        return 0, (-1 if seg.data is None else seg.data.fd)
