"""FileTier: chunks read in place from a saved file, new chunks in a writable tier.

A lazily loaded store (:func:`chunkstore.hdf5.load` with ``lazy=True``) keeps
its chunks where they are: in the saved HDF5 file, shared by every array of the
store. Chunks are read with ``pread`` into memory the reader owns: by the native
read path into a per-thread buffer it reuses, by :meth:`FileTier.get` into a fresh
buffer per chunk. Nothing of the file is mapped on the read path, so random reads
leave no page of the file in this process's resident set, and a truncated file is a
short read, not a SIGBUS. (The file is also mapped read-only, for the eager load and
``verify`` that read it whole; :meth:`MappedFile.view` reads the mapping.) The buffer
keeps training after a load, so chunks written after it go to a writable tier (a
:class:`~chunkstore.tiers.MemoryTier` by default); releasing a chunk of the file only
forgets it, the file is never written.

Refs: segment 0 is the file (offset = byte offset in the file); segment ``s`` of
the writable tier is segment ``s + 1`` here. ChunkedArray treats negative
segments as "not stored", so the file cannot use a negative id.

Each file chunk's CRC32 is checked (``verify=True``) on its first read, and again on
its first read after any change of the file's inode change time (``st_ctime``), which
every read already looks at: a damaged chunk raises
:class:`~chunkstore.errors.CorruptChunkError` naming the array, the chunk and the file
instead of decoding into wrong data. The CRC32 is computed over the very bytes that
are then decoded (the buffer ``pread`` filled): by the native read path inside its
one GIL-free call (:meth:`FileTier.check_reads` only says which chunks and which
CRCs), by :meth:`FileTier.get` on the bytes it returns. The ctime is what catches
bytes rewritten in place after they were read once with the file's size and mtime put
back (``cp -p``, ``rsync --inplace``, ``touch -d``): no call sets it back, a write and
the ``utime`` that restores the mtime both move it. Anything else that moves it
(``chmod``, a hard link, the rename of a new file over this one) only costs each chunk
one more check. ``verify="always"`` checks a chunk's CRC32 on every read instead: no
reliance on the filesystem's timestamps, at a measured cost
(``tools/bench_lazy_verify.py``).

Files must be replaced by rename (``save`` does). Every read first compares the
file's size and modification time with those at load time and raises
:class:`~chunkstore.errors.FileChangedError` when they differ, then checks the
CRC32s.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import weakref
import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from chunkstore.errors import CorruptChunkError, FileChangedError, UnknownRefError
from chunkstore.hdf5.checksum import check_crc
from chunkstore.tiers import AddressTable, ChunkRef, MemoryTier, ReadChecks, Tier

__all__ = ["FileChunk", "FileTier", "MappedFile"]

FILE_SEGMENT = 0


class FileChunk(NamedTuple):
    """A chunk already in the mapped file; ``FileTier.put`` adopts it without a copy."""

    offset: int
    nbytes: int


class MappedFile:
    """A whole file mapped read-only, shared by the tiers of one loaded store.

    Parameters
    ----------
    path
        The file (only used in messages when ``fd`` is given).
    fd
        An open descriptor of that file; mapped, not closed (the map keeps its own).
    """

    def __init__(self, path: str | os.PathLike[str], fd: int | None = None) -> None:
        self.path = os.fspath(path)
        # our own descriptor: every read compares the file's size and mtime with these
        self._fd = os.open(self.path, os.O_RDONLY) if fd is None else os.dup(fd)
        self._closer = weakref.finalize(self, os.close, self._fd)
        st = os.fstat(self._fd)
        self._mtime_ns = st.st_mtime_ns
        self._ctime_ns = st.st_ctime_ns
        #: bumped whenever the file's ctime moves: chunks checked before must be checked again
        self.generation = 0
        self._changed: str | None = None
        self.size = st.st_size
        self._mmap = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ) if self.size else None
        self.buf: np.ndarray | None = (
            np.frombuffer(self._mmap, dtype=np.uint8) if self._mmap is not None
            else np.empty(0, np.uint8)
        )

    def view(self, offset: int, nbytes: int) -> np.ndarray:
        """``nbytes`` bytes at ``offset`` (fewer past the end), zero-copy, after :meth:`check_unchanged`."""
        buf = self.buf
        if buf is None:
            raise ValueError(f"{self.path} was closed; its chunks can no longer be read")
        # inlined check_unchanged(): this runs once per chunk read (one fstat, ~2 us)
        try:
            st = os.fstat(self._fd)
        except OSError as e:  # closed meanwhile
            raise ValueError(f"{self.path} was closed; its chunks can no longer be read") from e
        if st.st_mtime_ns != self._mtime_ns or st.st_size != self.size or self._changed:
            self._raise_changed(st)
        if st.st_ctime_ns != self._ctime_ns:
            self._ctime_moved(st)
        return buf[offset:offset + nbytes]

    def read(self, offset: int, nbytes: int) -> np.ndarray:
        """``nbytes`` bytes at ``offset`` (fewer past the end), ``pread`` into a new buffer,
        after :meth:`check_unchanged`: no page of the file stays resident in this process."""
        if self.buf is None:
            raise ValueError(f"{self.path} was closed; its chunks can no longer be read")
        self.check_unchanged()
        try:
            data = os.pread(self._fd, nbytes, offset)
        except OSError as e:  # closed meanwhile
            raise ValueError(f"{self.path} was closed; its chunks can no longer be read") from e
        return np.frombuffer(data, np.uint8)

    def check_unchanged(self) -> None:
        """Raise :class:`FileChangedError` if the file was written into since it was mapped.

        A batched read path that reads the mapping directly calls this once per batch.
        """
        try:
            st = os.fstat(self._fd)
        except OSError as e:  # closed meanwhile
            raise ValueError(f"{self.path} was closed; its chunks can no longer be read") from e
        if st.st_mtime_ns != self._mtime_ns or st.st_size != self.size or self._changed:
            self._raise_changed(st)
        if st.st_ctime_ns != self._ctime_ns:
            self._ctime_moved(st)

    def _ctime_moved(self, st: os.stat_result) -> None:
        """Something changed the inode (a write whose mtime was put back, chmod, a link): check again."""
        self.generation += 1  # first: a reader that sees the new ctime also sees the new generation
        self._ctime_ns = st.st_ctime_ns

    def _raise_changed(self, st: os.stat_result) -> None:
        if self._changed is None:  # the first sight of the change is what the error says
            how = (f"now {st.st_size} bytes, was {self.size}" if st.st_size != self.size
                   else "rewritten, same size")
            self._changed = (
                f"{self.path} was changed in place after it was loaded ({how}): its chunks can "
                "no longer be trusted. Replace saved files by rename (save() does), never by "
                "writing into them; load it again.")
        raise FileChangedError(self._changed)

    def close(self) -> None:
        """Forget the mapping; it is unmapped once no chunk view is alive."""
        self.buf = None
        mm, self._mmap = self._mmap, None
        if mm is not None:
            with contextlib.suppress(BufferError):  # a view handed out is still alive
                mm.close()
        self._closer()

    @property
    def closed(self) -> bool:
        return self.buf is None

    def fileno(self) -> int:
        """The file's descriptor, for reads that bypass the mapping (-1 once closed)."""
        return -1 if self.buf is None else self._fd


class FileTier(Tier):
    """Chunks of one array in a :class:`MappedFile`, plus a writable tier for new ones.

    Parameters
    ----------
    file
        The mapped file.
    chunk_ids, offsets, nbytes, crc32
        One entry per chunk of this array in the file: its chunk index (for
        messages), byte offset, length, and the CRC32 its reads are checked against.
    writable
        Where new chunks go (default: a new :class:`MemoryTier`, closed with this tier).
    own_writable
        Whether :meth:`close` closes ``writable`` (default: only the one made here).
    name
        The array's name, for error messages.
    verify
        True: check a file chunk's CRC32 on its first read, and on its first read after the
        file's ctime moved (see the module docstring); ``"always"``: on every read; False: never.

    Examples
    --------
    >>> import tempfile, zlib
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"xxhello"); f.flush()
    ...     tier = FileTier(MappedFile(f.name), [0], [2], [5], [zlib.crc32(b"hello")])
    ...     ref = tier.put(FileChunk(2, 5))
    ...     bytes(tier.get(ref))
    b'hello'
    """

    kind = "file"

    def __init__(
        self,
        file: MappedFile,
        chunk_ids: Any = (),
        offsets: Any = (),
        nbytes: Any = (),
        crc32: Any = (),
        *,
        writable: Tier | None = None,
        name: str = "array",
        verify: bool | str = True,
        own_writable: bool | None = None,
    ) -> None:
        self.file = file
        self.name = name
        if verify not in (True, False, "always"):
            raise ValueError(f"verify must be True, False or 'always', got {verify!r}")
        self.verify = bool(verify)
        #: check a chunk's CRC32 on every read, not once per change of the file's ctime
        self.every_read = verify == "always"
        self._generation = file.generation
        self._own_writable = writable is None if own_writable is None else bool(own_writable)
        self._closed = False
        self.writable: Tier = writable if writable is not None else MemoryTier()
        # One entry per file chunk (a 50M-transition file has 12.5M): 23 bytes each here, kept in
        # offset order. Chunk indices in int32 where they fit (messages only), sizes in uint32
        # (a chunk is at most MAX_CHUNK_BYTES). A file saved by chunkstore lists its chunks in
        # offset order already: no sort, no reordered copies (~0.5 GB less at load, measured).
        offsets = np.asarray(offsets, dtype=np.int64)
        ids = np.asarray(chunk_ids, dtype=np.int64)
        id_dtype = np.int32 if not ids.size or int(ids.max()) < 2**31 else np.int64
        if offsets.size < 2 or bool(np.all(offsets[1:] >= offsets[:-1])):
            self._offsets = np.array(offsets, dtype=np.int64)
            self._chunk_ids = np.array(ids, dtype=id_dtype)
            self._nbytes = np.array(nbytes, dtype=np.uint32)
            self._crc = np.array(crc32, dtype=np.uint32)
        else:
            order = np.argsort(offsets, kind="stable")
            self._offsets = offsets[order]
            self._chunk_ids = ids[order].astype(id_dtype)
            self._nbytes = np.asarray(nbytes, dtype=np.uint32)[order]
            self._crc = np.asarray(crc32, dtype=np.uint32)[order]
        self._checked = np.zeros(len(self._offsets), dtype=bool)
        self._nchecked = 0  # how many _checked holds, about (readers may race: recounted at the end)
        self._all_checked = not len(self._offsets)  # exact: then a batch needs no lookup at all
        self._live = np.zeros(len(self._offsets), dtype=bool)  # adopted and not released yet
        self._file_live_nbytes = 0
        self._file_live_chunks = 0

    # -- Tier API ---------------------------------------------------------------------
    def put(self, data: Any) -> ChunkRef:
        if self._closed:
            raise ValueError(f"put on a closed file tier ({self.file.path})")
        if isinstance(data, FileChunk):
            seg, off, n = self.adopt([data.offset], [data.nbytes])[:, 0].tolist()
            return ChunkRef(seg, off, n)
        seg, off, n = self.writable.put(data)
        return ChunkRef(seg + 1, off, n)

    def adopt(self, offsets: Any, nbytes: Any) -> np.ndarray:
        """:meth:`put` of ``FileChunk(offsets[i], nbytes[i])`` for every ``i`` at once.

        Returns the ``(3, n)`` int64 table of their references (segment, offset, nbytes).
        """
        offsets, nbytes = np.asarray(offsets, np.int64), np.asarray(nbytes, np.int64)
        bad = np.flatnonzero((offsets < 0) | (nbytes < 0) | (offsets + nbytes > self.file.size))
        if bad.size:
            o, n = int(offsets[bad[0]]), int(nbytes[bad[0]])
            raise CorruptChunkError(
                f"{self.name}: a chunk at bytes {o}..{o + n} lies beyond the end "
                f"of {self.file.path} ({self.file.size} bytes); the file is truncated",
                array=self.name,
            )
        k = self._table_index(offsets, nbytes)
        if (k < 0).any() or self._live[k].any():
            o = int(offsets[np.flatnonzero((k < 0) | self._live[np.maximum(k, 0)])[0]])
            raise CorruptChunkError(f"{self.name}: the chunk at byte {o} of {self.file.path} is not in its "
                                    "chunk table, or is installed twice", array=self.name)
        self._live[k] = True
        self._file_live_nbytes += int(nbytes.sum())
        self._file_live_chunks += len(offsets)
        return np.stack([np.full(len(offsets), FILE_SEGMENT, np.int64), offsets, nbytes])

    def _table_index(self, offsets: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        """Where each (offset, nbytes) is in the file's chunk table, or -1."""
        if not len(self._offsets):
            return np.full(len(offsets), -1, np.int64)
        k = np.searchsorted(self._offsets, offsets).clip(max=len(self._offsets) - 1)
        return np.where((self._offsets[k] == offsets) & (self._nbytes[k] == nbytes), k, -1)

    def _file_chunk(self, ref: ChunkRef, *, live: bool = True) -> int:
        """The table index of a file chunk ``ref`` (live, unless ``live=False``); else UnknownRefError."""
        k = int(np.searchsorted(self._offsets, ref.offset))  # a scalar lookup: this runs per read
        if (k >= len(self._offsets) or self._offsets[k] != ref.offset or self._nbytes[k] != ref.nbytes
                or (live and not self._live[k])):
            raise UnknownRefError(f"{ref!r} is not a live chunk of {self.file.path} (released already, "
                                  "or not one of its chunks)")
        return k

    def get(self, ref: ChunkRef) -> np.ndarray | memoryview:
        seg, off, n = ref
        if seg != FILE_SEGMENT:
            return self.writable.get(ChunkRef(seg - 1, off, n))
        k = self._file_chunk(ref)
        data = self.file.read(off, n)  # pread: the bytes checked are the bytes decoded
        if self.verify and (self.every_read or not self._fresh_checked()[k]):
            self._check_at(k, data)
        return data

    def release(self, ref: ChunkRef) -> None:
        seg, off, n = ref
        if seg != FILE_SEGMENT:
            self.writable.release(ChunkRef(seg - 1, off, n))
            return
        # The file is read-only: releasing a file chunk only forgets it.
        self._live[self._file_chunk(ref)] = False  # the truth first: then the tallies
        self._file_live_nbytes -= n
        self._file_live_chunks -= 1

    @property
    def nbytes(self) -> int:
        return self.writable.nbytes + self._file_live_nbytes

    @property
    def used_nbytes(self) -> int:
        return self.writable.used_nbytes + self._file_live_nbytes

    @property
    def held_nbytes(self) -> int:
        """Chunks still in the file are not memory: the writable tier's, and the file chunks' tables."""
        return self.writable.held_nbytes + sum(a.nbytes for a in (
            self._offsets, self._chunk_ids, self._nbytes, self._crc, self._checked, self._live))

    def close(self) -> None:
        """Stop reading the file; close the writable tier if this tier owns it."""
        self._closed = True
        self._live[:] = False
        self._file_live_chunks = self._file_live_nbytes = 0
        self.file.close()
        if self._own_writable:
            self.writable.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def trim(self) -> int:
        """Give back the writable tier's free storage (the file's bytes are not ours to free)."""
        trim = getattr(self.writable, "trim", None)
        return int(trim()) if trim is not None else 0

    def info(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "nbytes": self.nbytes,
            "used_nbytes": self.used_nbytes,
            "path": self.file.path,
            "nchunks": self._file_live_chunks + int(self.writable.info().get("nchunks", 0)),
            "file_chunks": self._file_live_chunks,
            "file_nbytes": self._file_live_nbytes,
            "verified_chunks": int(self._checked.sum()),
            "writable": self.writable.info(),
        }

    # -- the native read path ---------------------------------------------------------
    def read_lock(self) -> tuple[Any, Callable[[], np.ndarray | None]]:
        # the file is segment 0, pread by the native path (nothing mapped: no RSS, and a
        # truncated file is a short read, not a SIGBUS); new chunks are segments 1..
        lock, segments = self.writable.read_lock()

        def with_file() -> np.ndarray | None:
            new, fd = segments(), self.file.fileno()
            if new is None or fd < 0:
                return None
            table = np.concatenate((np.array([[0], [fd]], np.int64), new), axis=1).view(AddressTable)
            table.owners = (new, self.file)  # kept alive by a read that outlives its caller
            return table

        return lock, with_file

    # -- snapshots: the file is never rewritten; new chunks pin in the writable tier ----
    def pin(self) -> Callable[[], None] | None:
        return self.writable.pin()

    def peek(self, ref: ChunkRef) -> np.ndarray | memoryview:
        seg, off, n = ref
        if seg != FILE_SEGMENT:
            return self.writable.peek(ChunkRef(seg - 1, off, n))
        k = self._file_chunk(ref, live=False)  # the file is never rewritten: released chunks read too
        data = self.file.read(off, n)
        # a save copies these bytes under a new CRC: never launder a rewritten chunk
        if self.verify and (self.every_read or not self._fresh_checked()[k]):
            self._check_at(k, data)
        return data

    def live_refs(self) -> np.ndarray | None:
        new = self.writable.live_refs()
        if new is None:
            return None
        new = new.copy()
        new[0] += 1
        k = np.flatnonzero(self._live)
        self._file_live_chunks, self._file_live_nbytes = len(k), int(self._nbytes[k].sum())  # recount
        file = np.stack([np.full(len(k), FILE_SEGMENT, np.int64), self._offsets[k], self._nbytes[k]])
        return np.concatenate([file, new], axis=1)

    #: a native read must first see that the file was not changed in place, and the CRCs
    checks_reads = True

    def check_reads(self, segments: np.ndarray, offsets: np.ndarray) -> ReadChecks | None:
        """The file unchanged since it was loaded and, with ``verify``, the CRC32 each file
        chunk of the batch not checked since the file's ctime last moved must have (every
        one with ``verify="always"``): the native read checks them on the bytes it reads."""
        self.file.check_unchanged()
        if not self.verify or (self._all_checked and not self.every_read
                               and self._generation == self.file.generation):
            return None
        if not self._offsets.size:
            return None
        # sorted needles: the search walks the table in order (4x faster on a 2.5M-chunk table,
        # where random needles each miss the cache ~20 times)
        order = np.argsort(offsets)
        offs = offsets[order]
        k = np.searchsorted(self._offsets, offs).clip(max=len(self._offsets) - 1)
        need = (segments[order] == FILE_SEGMENT) & (self._offsets[k] == offs)
        checked = self._fresh_checked()
        if not self.every_read:
            need &= ~checked[k]
        if not need.any():
            return None
        todo = k[need]
        crc = np.full(len(offsets), -1, np.int64)
        crc[order[need]] = self._crc[todo]

        def passed() -> None:
            if self._checked is checked:  # else the ctime moved meanwhile: these count for nothing
                new = int(np.count_nonzero(~checked[todo]))
                checked[todo] = True
                self._count_checked(new)

        def failed(i: int, found: int) -> Exception:
            ki = int(k[np.flatnonzero(order == i)[0]])
            chunk = int(self._chunk_ids[ki])
            return CorruptChunkError(
                f"{self.name}: chunk {chunk} in {self.file.path} is corrupt (CRC32 {found:#010x}, "
                f"expected {int(self._crc[ki]):#010x})", array=self.name, chunk=chunk)

        return ReadChecks(crc, passed, failed)

    # -- checksums ---------------------------------------------------------------------
    def verify_all(self) -> None:
        """Check every file chunk's CRC32 now (raises on the first bad one)."""
        self.file.check_unchanged()
        self._check_many(np.arange(len(self._offsets)))

    def _fresh_checked(self) -> np.ndarray:
        """Which chunks were checked since the file's ctime last moved (forgets the rest first)."""
        gen = self.file.generation
        if gen != self._generation:
            self._all_checked = False
            self._checked, self._nchecked = np.zeros(len(self._offsets), dtype=bool), 0  # new arrays
            self._generation = gen
        return self._checked

    def _count_checked(self, new: int) -> None:
        self._nchecked += new
        if self._nchecked >= len(self._offsets) and not self._all_checked:
            self._nchecked = int(np.count_nonzero(self._checked))  # exact, once (or after a race)
            self._all_checked = self._nchecked == len(self._offsets)

    def _check_many(self, k: np.ndarray) -> None:
        """CRC32 of the file chunks at table indices ``k``, each ``pread`` (the file was just
        seen unchanged): nothing of the file stays resident."""
        fd = self.file.fileno()
        if fd < 0:
            raise ValueError(f"{self.file.path} was closed; its chunks can no longer be read")
        crc: Callable[[Any], int] = zlib.crc32
        for i, o, n, want in zip(k.tolist(), self._offsets[k].tolist(), self._nbytes[k].tolist(),
                                 self._crc[k].tolist(), strict=True):
            data = os.pread(fd, n, o)
            if len(data) != n or crc(data) != want:
                self._check_at(i, np.frombuffer(data, np.uint8))  # raises: names the array, chunk and file
        new = int(np.count_nonzero(~self._checked[k]))
        self._checked[k] = True
        self._count_checked(new)

    def _check_at(self, k: int, view: np.ndarray) -> None:
        """CRC32 of file chunk ``k`` (in offset order), read as ``view``."""
        chunk = int(self._chunk_ids[k])
        what = f"{self.name}: chunk {chunk} in {self.file.path}"
        if view.size != self._nbytes[k]:
            raise CorruptChunkError(f"{what} lies beyond the end of the file", array=self.name,
                                    chunk=chunk)
        check_crc(view, self._crc[k], what, array=self.name, chunk=chunk)
        if not self._checked[k]:  # a benign race between readers: at worst checked twice
            self._checked[k] = True
            self._count_checked(1)
