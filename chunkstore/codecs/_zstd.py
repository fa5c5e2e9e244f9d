"""``zstd``: Zstandard frames through python-zstandard."""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import numpy as np
import zstandard

from chunkstore import _threads
from chunkstore.codecs._base import Codec, LevelledCodec, TrainableCodec, check_many
from chunkstore.codecs._util import (
    DecodeError,
    as_bytes,
    buffer_view,
    deliver,
    out_bytes,
    size_error,
)
from chunkstore.codecs._zstd_attach import AttachedEncoder, encoder

__all__ = ["ZstdCodec", "ZstdDictCodec"]

# ZstdCompressor/ZstdDecompressor objects must not be shared between threads;
# building one per call costs more than compressing a small chunk. One per
# thread (and per level), kept at module level so codec instances stay picklable.
_local = threading.local()


def _compressor(level: int, zdict: _Dict | None = None) -> zstandard.ZstdCompressor:
    try:
        cache = _local.compressors
    except AttributeError:
        cache = _local.compressors = {}
    key = (level, zdict.key if zdict is not None else None)
    cctx = cache.get(key)
    if cctx is None:
        # write_content_size (the default) puts the size in the frame header:
        # decode checks it against out=, and HDF5's Zstd filter (32015) reads it.
        dict_data = None if zdict is None else zdict.compression_dict(level)
        cctx = cache[key] = zstandard.ZstdCompressor(
            level=level, write_content_size=True, dict_data=dict_data
        )
    return cctx


def _decompressor(zdict: _Dict | None = None) -> zstandard.ZstdDecompressor:
    try:
        cache = _local.decompressors
    except AttributeError:
        cache = _local.decompressors = {}
    key = zdict.key if zdict is not None else None
    dctx = cache.get(key)
    if dctx is None:
        dict_data = None if zdict is None else zdict.compression_dict()
        dctx = cache[key] = zstandard.ZstdDecompressor(dict_data=dict_data)
    return dctx


class _Dict:
    """A zstd dictionary: its bytes, a key for the per-thread contexts, digested forms."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.key = hashlib.blake2b(data, digest_size=16).digest()
        self._digested: dict[int | None, zstandard.ZstdCompressionDict] = {}
        self._attached: dict[int, AttachedEncoder | None] = {}
        self._lock = threading.Lock()

    def attached(self, level: int) -> AttachedEncoder | None:
        """This dictionary's encoder at ``level`` through libzstd (None: python-zstandard's path)."""
        try:
            return self._attached[level]
        except KeyError:
            with self._lock:
                return self._attached.setdefault(level, encoder(self.data, level))

    def compression_dict(self, level: int | None = None) -> zstandard.ZstdCompressionDict:
        with self._lock:
            d = self._digested.get(level)
            if d is None:
                d = zstandard.ZstdCompressionDict(self.data)
                if level is not None:
                    d.precompute_compress(level=level)
                self._digested[level] = d
            return d


class ZstdCodec(LevelledCodec):
    """Zstandard, one standard frame per chunk, content size in the header.

    Levels -100..-1 (fast) and 1..22; 0 means zstd's default and is stored as 3.
    The frame is what HDF5's Zstd filter (32015) expects, so these chunks can be
    written with ``write_direct_chunk`` and read back by plain h5py + hdf5plugin.
    Decoding with ``out=`` streams straight into ``out`` (no intermediate bytes).

    Examples
    --------
    >>> import numpy as np
    >>> c = ZstdCodec(level=-5)
    >>> c.name
    'zstd/-5'
    >>> a = np.arange(1000, dtype=np.float32)
    >>> np.array_equal(c.decode(c.encode(a), out=np.empty_like(a)), a)
    True
    """

    codec_id = "zstd"
    hdf5_filter: str | None = "zstd"
    LEVELS: ClassVar[range] = range(-100, 23)
    DEFAULT_LEVEL: ClassVar[int] = 3

    _zdict: _Dict | None = None

    family = "zstd"

    def __init__(self, *, level: int = DEFAULT_LEVEL):
        super().__init__(level=level)
        self.level = self.level or self.DEFAULT_LEVEL  # 0 is zstd's "default"

    def encode(self, arr: np.ndarray) -> bytes:
        attached = None if self._zdict is None else self._zdict.attached(self.level)
        if attached is not None:  # with a dictionary: attached, through libzstd (codecs._zstd_attach)
            return attached.compress(as_bytes(arr))
        return _compressor(self.level, self._zdict).compress(as_bytes(arr).data)

    def encode_many(self, chunks: np.ndarray, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Every chunk in one call of python-zstandard's ``multi_compress_to_buffer``: the
        chunks are encoded without the GIL, on ``threads`` threads, each frame byte for byte
        what :meth:`encode` writes (same compressor parameters and dictionary)."""
        chunks = check_many(chunks, threads)
        n = len(chunks)
        if self._zdict is not None and self._zdict.attached(self.level) is not None:
            return self._encode_attached(chunks, threads)
        cctx = _compressor(self.level, self._zdict)
        raw = as_bytes(chunks)
        each = raw.size // n if n else 0
        if n < 2 or each == 0 or not hasattr(cctx, "multi_compress_to_buffer"):  # (the cffi backend lacks it)
            return super().encode_many(chunks, threads)
        segments = np.empty((n, 2), np.uint64)  # (offset, length) of each chunk in raw: no copy
        segments[:, 0] = np.arange(n, dtype=np.uint64) * np.uint64(each)
        segments[:, 1] = each
        frames = cctx.multi_compress_to_buffer(zstandard.BufferWithSegments(raw.data, segments.tobytes()),
                                               threads=max(1, int(threads)))
        views = [memoryview(cast(Any, frames[i])) for i in range(n)]  # (BufferSegment: the buffer protocol)
        sizes = np.fromiter(map(len, views), np.int64, n)
        return np.frombuffer(b"".join(views), np.uint8), sizes

    def _encode_attached(self, chunks: np.ndarray, threads: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`encode_many` with the dictionary attached: the chunks split among ``threads``
        threads (the caller's and the process's pool; ctypes calls run without the GIL)."""
        parts: list[bytes] = [b""] * len(chunks)

        def run(lo: int, hi: int) -> None:
            for i in range(lo, hi):
                parts[i] = self.encode(chunks[i])

        n, k = len(chunks), max(1, min(int(threads), len(chunks)))
        bounds = [n * j // k for j in range(k + 1)]
        tasks: list[_threads.Task] = []
        try:
            if k > 1:
                workers = _threads.pool("chunkstore-encode", k - 1)
                for j in range(1, k):
                    _threads.submit(workers, tasks, run, bounds[j], bounds[j + 1])
            run(bounds[0], bounds[1])
        finally:
            _threads.wait_all(tasks)
        for t in tasks:
            t.result()
        sizes = np.fromiter(map(len, parts), np.int64, n)
        return np.frombuffer(b"".join(parts), np.uint8), sizes

    def decode(self, buf: Any, out: np.ndarray | None = None) -> np.ndarray:
        src = buffer_view(buf)
        try:
            size = zstandard.frame_content_size(src)
        except zstandard.ZstdError as e:
            raise DecodeError(f"{self.name}: not a zstd frame ({e})") from e
        if size < 0:  # a frame from another writer, without its size
            return self._decode_unsized(src, out)
        dst = np.empty(size, np.uint8) if out is None else out_bytes(out)
        if out is not None and dst.size != size:
            raise size_error(self.name, size, out)
        self._stream_into(src, dst, "frame header says")
        return dst if out is None else out

    def _stream_into(self, src: memoryview, dst: np.ndarray, claim: str) -> None:
        """Decode the frame into ``dst``, reading at most one byte past its end."""
        # stream_reader.readinto fills dst in place: measured 1.3x faster than
        # decompress() + copy for a 450 KB chunk. It never writes past dst.
        size = dst.size
        try:
            reader = _decompressor(self._zdict).stream_reader(src)
            filled = 0
            while filled < size:
                n = reader.readinto(dst[filled:])
                if n == 0:
                    break
                filled += n
            # Reading past the end makes zstd finish the frame and check its size.
            trailing = reader.read(1)
        except zstandard.ZstdError as e:
            raise DecodeError(f"{self.name}: {e}") from e
        if filled != size or trailing:
            raise DecodeError(f"{self.name}: {claim} {size} bytes, the frame holds "
                              f"{'more' if trailing else filled}")

    def _make_native_spec(self) -> Any:
        from chunkstore import native

        return native.zstd_spec(None if self._zdict is None else self._zdict.data)

    def _decode_unsized(self, src: memoryview, out: np.ndarray | None) -> np.ndarray:
        if out is not None:  # bounded by out: a crafted frame may expand to gigabytes
            self._stream_into(src, out_bytes(out), "the chunk should hold")
            return out
        try:
            raw = _decompressor(self._zdict).decompressobj().decompress(src)
        except zstandard.ZstdError as e:
            raise DecodeError(f"{self.name}: {e}") from e
        return deliver(self.name, raw, out)


class ZstdDictCodec(ZstdCodec, TrainableCodec):
    """Zstandard with a dictionary trained on the data itself (``zstd3+dict``).

    Consecutive Atari frames share most of their pixels; a chunk of a few frames
    compresses poorly on its own because zstd has nothing to match against. A
    64 KB dictionary trained on the first frames gives small chunks almost the
    ratio of large ones (measured by tools/bench_codecs.py: results/bench_codecs.md),
    while a random read decodes far less. Small chunks are what makes uniform replay
    sampling fast.

    Built from a name it is *untrained*: it writes plain zstd frames and
    ``wants_training`` is true. The chunk store calls :meth:`trained` with sample
    items once it has seen enough data, then re-encodes what it stored so far.
    The dictionary is part of the config (base64), so a saved file carries it.
    Plain HDF5 zstd readers cannot decode these frames (they lack the dictionary).

    Examples
    --------
    >>> import numpy as np
    >>> frames = np.random.default_rng(0).integers(0, 4, (1100, 32, 32), dtype=np.uint8)
    >>> c = ZstdDictCodec(level=3).trained(list(frames))
    >>> c.name, c.wants_training
    ('zstd/3+dict', False)
    >>> np.array_equal(c.decode(c.encode(frames[:4]), out=np.empty_like(frames[:4])), frames[:4])
    True
    """

    codec_id = "zstd-dict"
    #: bytes of trained dictionary; 64 KB measured best on Atari frames (256 KB was worse)
    DICT_SIZE: ClassVar[int] = 64 << 10
    #: zstd trains a "dictionary" from any few bytes; below this it is noise
    MIN_SAMPLE_BYTES: ClassVar[int] = 16 * DICT_SIZE

    def __init__(self, *, level: int = ZstdCodec.DEFAULT_LEVEL, dictionary: str | bytes | None = None):
        super().__init__(level=level)
        if isinstance(dictionary, str):
            dictionary = base64.b64decode(dictionary)
        self._zdict = _Dict(bytes(dictionary)) if dictionary else None

    @property
    def name(self) -> str:
        return f"zstd/{self.level}+dict"

    @property
    def wants_training(self) -> bool:
        return self._zdict is None

    @property
    def hdf5_filter(self) -> str | None:  # type: ignore[override]
        # untrained it writes plain zstd frames; trained, HDF5's filter lacks the dictionary
        return "zstd" if self._zdict is None else None

    def untrained_equivalent(self) -> Codec:
        return ZstdCodec(level=self.level)

    @property
    def dictionary(self) -> bytes | None:
        return self._zdict.data if self._zdict is not None else None

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        if self._zdict is not None:
            config["dictionary"] = base64.b64encode(self._zdict.data).decode("ascii")
        return config

    def trained(self, samples: Sequence[np.ndarray]) -> Codec:
        """A codec with a dictionary trained on ``samples`` (items, any dtype).

        When zstd cannot train one (too few or too small samples) the result is a
        plain :class:`ZstdCodec`, which decodes what this untrained codec wrote.
        """
        data: list[bytes | bytearray | memoryview] = [as_bytes(s).tobytes() for s in samples]
        if sum(map(len, data)) < self.MIN_SAMPLE_BYTES:
            return ZstdCodec(level=self.level)
        try:
            zdict = zstandard.train_dictionary(self.DICT_SIZE, data, level=self.level)
        except zstandard.ZstdError:
            return ZstdCodec(level=self.level)
        return ZstdDictCodec(level=self.level, dictionary=zdict.as_bytes())

    def __getstate__(self) -> dict[str, Any]:
        return self.get_config()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**{k: v for k, v in state.items() if k != "id"})  # type: ignore[misc]
