"""Reading dopamine's checkpoint files: a gzip'd ``np.save`` read in pieces, a pickled set.

An observation file of the DQN Replay Dataset holds 1M frames of 84x84 (7 GB once
decompressed): :class:`NpyStream` reads its header, then hands out blocks of rows, so
an import never holds more than one block. Every failure of the file (not gzip, a
truncated stream, a failed CRC, a bad ``.npy`` header, fewer rows than declared) is a
:class:`CheckpointError` whose message starts with the file's path.

The gzip stream is read with python-isal's ``igzip`` when it is installed (several times
faster than the standard library's zlib on these files), else with :mod:`gzip`.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import queue
import threading
import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np

try:  # python-isal: the same gzip format, decoded several times faster
    from isal import igzip as _gzip_impl
except ImportError:  # pragma: no cover - the dev extra installs isal
    _gzip_impl = gzip  # type: ignore[misc]

__all__ = ["CheckpointError", "NpyStream", "read_pickled_int_set", "read_small_npy"]

#: what a damaged or truncated gzip stream raises, whichever implementation reads it
_STREAM_ERRORS: tuple[type[BaseException], ...] = (EOFError, OSError, zlib.error, gzip.BadGzipFile)


class CheckpointError(ValueError):
    """A dopamine checkpoint file is missing, damaged, truncated or not what it should be.

    ``path`` names the file.
    """

    def __init__(self, path: str, what: str):
        super().__init__(f"{path}: {what}")
        self.path = path


def _open(path: str) -> BinaryIO:
    try:
        return _gzip_impl.open(path, "rb")  # type: ignore[return-value]
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
        except BaseException:
            self._f.close()
            raise
        self.row_shape = self.shape[1:]
        self.row_nbytes = int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize

    def _header(self) -> tuple[tuple[int, ...], np.dtype]:
        try:
            version = np.lib.format.read_magic(self._f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(self._f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(self._f)
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except _STREAM_ERRORS as e:
            raise CheckpointError(self.path, f"damaged or truncated gzip stream ({e})") from None
        except ValueError as e:
            raise CheckpointError(self.path, f"not a gzip'd .npy file ({e})") from None
        if fortran:
            raise CheckpointError(self.path, "Fortran-ordered arrays are not dopamine's layout")
        if dtype.hasobject:
            raise CheckpointError(self.path, "object arrays are refused (they would be pickles)")
        return tuple(int(d) for d in shape), np.dtype(dtype)

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
        """Read what is left (rows past ``stop``) and the gzip trailer: its CRC and size are checked."""
        try:
            while self._f.read(1 << 22):
                pass
        except _STREAM_ERRORS as e:
            raise CheckpointError(self.path, f"damaged or truncated gzip stream ({e})") from None

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> NpyStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_small_npy(path: str) -> np.ndarray:
    """A whole small gzip'd ``.npy`` (add_count, invalid_range), checked to the gzip trailer."""
    with NpyStream(path) as s:
        out = np.empty(s.shape, s.dtype)
        s._read_exact(out.reshape(-1))
        s.finish()
        return out


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


def read_pickled_int_set(path: str) -> np.ndarray:
    """dopamine's pickled ``episode_end_indices`` (a set of ints) as a sorted int64 array.

    Unpickled with only ``set`` allowed: a file that holds anything else is refused
    instead of run.
    """
    f = _open(path)
    try:
        raw = f.read()
    except _STREAM_ERRORS as e:
        raise CheckpointError(path, f"damaged or truncated gzip stream ({e})") from None
    finally:
        f.close()
    try:
        value = _IntSetUnpickler(io.BytesIO(raw)).load()
    except Exception as e:
        raise CheckpointError(path, f"not a pickled set of indices ({type(e).__name__}: {e})") from None
    if not isinstance(value, (set, frozenset)) or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
        raise CheckpointError(path, "not a pickled set of indices")
    return np.array(sorted(int(v) for v in value), np.int64)
