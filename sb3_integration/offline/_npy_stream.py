"""Reading dopamine's checkpoint files: a gzip'd ``np.save`` read in pieces, a pickled set.

An observation file of the DQN Replay Dataset holds 1M frames of 84x84 (7 GB once
decompressed): :class:`NpyStream` reads its header, then hands out blocks of rows, so
an import never holds more than one block. Every failure of the file (not gzip, a
truncated stream, a failed CRC, a bad ``.npy`` header, fewer rows than declared) is a
:class:`CheckpointError` whose message starts with the file's path.

Crafted files are bounded before anything is allocated: a header longer than 64 KiB, a
dtype other than a bool, integer or float of at most 8 bytes, or a shape declaring more
bytes than the gzip file can decode to (deflate expands at most 1032-fold) is refused
from the header alone; a stream is read only as far as its header says (the bytes past
it are refused, not read), and a pickle or a small array only up to the size its caller
allows (:func:`read_small_npy`, :func:`read_pickled_int_set`).

The gzip stream is read with python-isal's ``igzip`` when it is installed (several times
faster than the standard library's zlib on these files), else with :mod:`gzip`.
"""

from __future__ import annotations

import gzip
import io
import math
import os
import pickle
import queue
import struct
import threading
import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np

from chunkstore.validate import is_int

try:  # python-isal: the same gzip format, decoded several times faster
    from isal import igzip as _gzip_impl
except ImportError:  # pragma: no cover - the dev extra installs isal
    _gzip_impl = gzip  # type: ignore[misc]

__all__ = ["CheckpointError", "NpyStream", "read_pickled_int_set", "read_small_npy"]

#: what a damaged or truncated gzip stream raises, whichever implementation reads it
_STREAM_ERRORS: tuple[type[BaseException], ...] = (EOFError, OSError, zlib.error, gzip.BadGzipFile)
#: deflate's largest expansion (258 bytes from one 2-bit code at best): a gzip file of ``n``
#: bytes decodes to less than ``MAX_GZIP_RATIO * n`` bytes, whatever it holds
MAX_GZIP_RATIO = 1032
#: longest ``.npy`` header read (numpy's own loader refuses more than 10,000 characters)
MAX_HEADER_BYTES = 1 << 16
#: the dtype kinds a checkpoint array may hold (bool, ints, floats), each of at most 8 bytes
_KINDS = "biuf"
#: pieces in which bytes past what a caller needs are read (and dropped)
_SKIP_BYTES = 1 << 22


class CheckpointError(ValueError):
    """A dopamine checkpoint file is missing, damaged, truncated or not what it should be.

    ``path`` names the file.
    """

    def __init__(self, path: str, what: str):
        super().__init__(f"{path}: {what}")
        self.path = path


def _open(path: str) -> BinaryIO:
    try:
        return _gzip_impl.open(path, "rb")
    except FileNotFoundError:
        raise CheckpointError(path, "missing checkpoint file") from None
    except OSError as e:
        raise CheckpointError(path, f"cannot be opened ({e})") from None


class NpyStream:
    """One gzip'd ``.npy`` file, read block by block.

    >>> # with NpyStream(path) as s: s.shape, s.dtype; for block in s.blocks(4096): ...
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        self._f = _open(self.path)
        try:
            self.shape, self.dtype = self._header()
            self._check_size()
        except BaseException:
            self._f.close()
            raise
        self.row_shape = self.shape[1:]
        self.row_nbytes = math.prod(self.row_shape) * self.dtype.itemsize
        #: bytes of the array not read yet (the stream must end right after them)
        self._left = math.prod(self.shape) * self.dtype.itemsize

    def _header(self) -> tuple[tuple[int, ...], np.dtype]:
        try:
            version = np.lib.format.read_magic(self._f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"unsupported .npy version {version}")
            size_format = "<H" if version == (1, 0) else "<I"
            size_bytes = self._f.read(struct.calcsize(size_format))
            if len(size_bytes) != struct.calcsize(size_format):
                raise ValueError("the header ends early")
            (length,) = struct.unpack(size_format, size_bytes)
            if length > MAX_HEADER_BYTES:  # numpy would read all of it before its own check
                raise ValueError(f"its header claims {length:,} bytes; a .npy header is at most "
                                 f"{MAX_HEADER_BYTES:,}")
            text = self._f.read(length)
            if len(text) != length:
                raise ValueError("the header ends early")
            head = io.BytesIO(size_bytes + text)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read(head)
        except _STREAM_ERRORS as e:
            raise CheckpointError(self.path, f"damaged or truncated gzip stream ({e})") from None
        except (ValueError, SyntaxError, TypeError) as e:
            raise CheckpointError(self.path, f"not a gzip'd .npy file ({e})") from None
        if fortran:
            raise CheckpointError(self.path, "Fortran-ordered arrays are not dopamine's layout")
        if dtype.hasobject:
            raise CheckpointError(self.path, "object arrays are refused (they would be pickles)")
        if dtype.kind not in _KINDS or dtype.itemsize > 8 or dtype.fields is not None or dtype.subdtype:
            raise CheckpointError(self.path, f"dtype: {dtype} is not a checkpoint array's (bool, integer "
                                             "or float of at most 8 bytes)")
        if any(int(d) < 0 for d in shape):
            raise CheckpointError(self.path, f"shape: {tuple(shape)} has a negative dimension")
        return tuple(int(d) for d in shape), np.dtype(dtype)

    def _check_size(self) -> None:
        """The declared array must fit in what this file can decode to (before any allocation)."""
        nbytes = math.prod(self.shape) * self.dtype.itemsize
        try:
            size = os.path.getsize(self.path)
        except OSError as e:
            raise CheckpointError(self.path, f"cannot be read ({e})") from None
        if nbytes > MAX_GZIP_RATIO * size:
            raise CheckpointError(self.path, f"shape: the header declares {self.shape} of {self.dtype} "
                                             f"({nbytes:,} bytes), more than a gzip file of {size:,} bytes "
                                             "can hold")

    def _read_exact(self, out: np.ndarray) -> None:
        view = memoryview(out).cast("B")  # type: ignore[arg-type]
        got = 0
        try:
            while got < len(view):
                n = self._f.readinto(view[got:])  # type: ignore[attr-defined]
                if not n:
                    raise CheckpointError(
                        self.path, f"truncated: the header declares shape {self.shape}, the data "
                        "ends early")
                got += n
        except _STREAM_ERRORS as e:
            raise CheckpointError(self.path, f"damaged or truncated gzip stream ({e})") from None
        self._left -= got

    def blocks(self, rows: int, stop: int | None = None) -> Any:
        """Yield ``(start, block)`` for rows ``0 .. stop`` (all), ``rows`` at a time (the block is reused)."""
        total = self.shape[0] if self.shape else 1
        stop = total if stop is None else min(int(stop), total)
        buf = np.empty((max(1, min(rows, stop)), *self.row_shape), self.dtype)
        start = 0
        while start < stop:
            n = min(len(buf), stop - start)
            part = buf[:n]
            self._read_exact(part)
            yield start, part
            start += n

    def prefetched_blocks(self, rows: int, stop: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """:meth:`blocks`, each read by a helper thread while the caller works on the one before.

        The gzip stream is decoded without the GIL, so reading overlaps the caller's
        encoding. Three buffers rotate (one the caller holds, one waiting, one being
        filled): a block stays valid until the next one is asked for. A read error is
        raised here, in the caller; leaving the loop early stops the thread.
        """
        total = self.shape[0] if self.shape else 1
        stop = total if stop is None else min(int(stop), total)
        bufs = [np.empty((max(1, min(rows, stop)), *self.row_shape), self.dtype) for _ in range(3)]
        ready: queue.Queue[tuple[int, np.ndarray] | BaseException | None] = queue.Queue(maxsize=1)
        halt = threading.Event()

        def offer(item: tuple[int, np.ndarray] | BaseException | None) -> bool:
            while not halt.is_set():
                try:
                    ready.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def read() -> None:
            start, k = 0, 0
            try:
                while start < stop and not halt.is_set():
                    part = bufs[k % 3][:min(rows, stop - start)]
                    self._read_exact(part)
                    if not offer((start, part)):
                        return
                    start, k = start + len(part), k + 1
            except BaseException as e:  # handed to the caller, who raises it
                offer(e)
                return
            offer(None)

        reader = threading.Thread(target=read, name="npy-prefetch", daemon=True)
        reader.start()
        try:
            while True:
                item = ready.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            halt.set()
            reader.join()

    def finish(self) -> None:
        """Read what is left (rows past ``stop``, in pieces, dropped) and the gzip trailer: the
        stream must end where the header says (CheckpointError for fewer or more bytes), its CRC
        and size are checked. No more than one byte past the array is ever decoded."""
        try:
            while self._left > 0:
                n = len(self._f.read(min(self._left, _SKIP_BYTES)))
                if not n:
                    raise CheckpointError(self.path, f"truncated: the header declares shape {self.shape}, "
                                                     "the data ends early")
                self._left -= n
            if self._f.read(1):
                raise CheckpointError(self.path, f"the stream holds more than the shape {self.shape} "
                                                 "its header declares")
        except _STREAM_ERRORS as e:
            raise CheckpointError(self.path, f"damaged or truncated gzip stream ({e})") from None

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> NpyStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_small_npy(path: str, field: str, *, ndim: int, max_items: int, kinds: str = _KINDS,
                   rows: int | None = None) -> np.ndarray:
    """A small gzip'd ``.npy`` (add_count, invalid_range, a column), checked to the gzip trailer.

    The header is checked before anything is allocated: ``ndim`` dimensions, at most
    ``max_items`` items, a dtype of one of ``kinds``; ``rows`` reads only the first rows
    (the rest of the stream is read in pieces and dropped, its CRC still checked).
    Every failure is a :class:`CheckpointError` naming the file and ``field``.
    """
    with NpyStream(path) as s:
        if len(s.shape) != ndim:
            raise CheckpointError(path, f"{field}: the header declares shape {s.shape}; "
                                        f"{ndim} dimension{'s' * (ndim != 1)} expected")
        items = math.prod(s.shape)
        if items > max_items:
            raise CheckpointError(path, f"{field}: the header declares shape {s.shape} ({items:,} items); "
                                        f"at most {max_items:,} expected")
        if s.dtype.kind not in kinds:
            raise CheckpointError(path, f"{field}: dtype {s.dtype} is not one of the expected kinds "
                                        f"({', '.join(_KIND_NAMES[k] for k in kinds)})")
        shape = s.shape if rows is None else (min(int(rows), s.shape[0]), *s.shape[1:])
        out = np.empty(shape, s.dtype)
        s._read_exact(out.reshape(-1))
        s.finish()
        return out


_KIND_NAMES = {"b": "bool", "i": "signed integer", "u": "unsigned integer", "f": "float"}


class _IntSetUnpickler(pickle.Unpickler):
    """Unpickles a set of ints and nothing else: no class may be looked up but ``set`` and
    numpy's scalar and dtype (dopamine's cursor is a numpy integer)."""

    _ALLOWED = {("builtins", "set"): set, ("__builtin__", "set"): set, ("numpy", "dtype"): np.dtype,
                ("numpy.core.multiarray", "scalar"): None, ("numpy._core.multiarray", "scalar"): None}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            found = self._ALLOWED[(module, name)]
            return found if found is not None else super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a set of indices")


#: pickled bytes allowed per index of a set (a numpy int64 scalar takes about 30 once its
#: class and dtype are memoized, a Python int at most 11) and for the set's own framing
PICKLE_BYTES_PER_INDEX = 64
PICKLE_BYTES_FIXED = 4096


def read_pickled_int_set(path: str, capacity: int) -> np.ndarray:
    """dopamine's pickled ``episode_end_indices`` (a set of positions) as a sorted int64 array.

    Unpickled with only ``set`` allowed: a file that holds anything else is refused
    instead of run. At most the bytes a set of ``capacity`` positions takes are
    decompressed, and every entry must be a position, ``0 .. capacity - 1``
    (CheckpointError otherwise).
    """
    budget = PICKLE_BYTES_FIXED + PICKLE_BYTES_PER_INDEX * int(capacity)
    f = _open(path)
    try:
        raw = b""
        while len(raw) <= budget:  # a read may return less than asked before the end
            piece = f.read(budget + 1 - len(raw))
            if not piece:
                break
            raw += piece
    except _STREAM_ERRORS as e:
        raise CheckpointError(path, f"damaged or truncated gzip stream ({e})") from None
    finally:
        f.close()
    if len(raw) > budget:
        raise CheckpointError(path, f"episode_end_indices: more than the {budget:,} bytes a pickled set of "
                                    f"at most {capacity:,} positions takes")
    try:
        value = _IntSetUnpickler(io.BytesIO(raw)).load()
    except Exception as e:
        raise CheckpointError(path, f"not a pickled set of indices ({type(e).__name__}: {e})") from None
    if not isinstance(value, (set, frozenset)) or not all(is_int(v) for v in value):
        raise CheckpointError(path, "not a pickled set of indices")
    ends = sorted(int(v) for v in value)
    if ends and (ends[0] < 0 or ends[-1] >= capacity):  # checked as Python ints: 2**80 is no OverflowError
        bad = ends[0] if ends[0] < 0 else ends[-1]
        raise CheckpointError(path, f"episode_end_indices: {bad} is outside the positions 0..{capacity - 1}")
    return np.array(ends, np.int64)
