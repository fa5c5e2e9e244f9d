"""The Codec protocol: what every codec in chunkstore implements.

A codec turns one C-contiguous ndarray (a chunk of items) into bytes and back,
bit-exactly, for every numpy dtype. Codecs are stateless from the caller's point
of view and safe to call from several threads at once.

A codec owns its facts: its ``codec_id`` (also in :meth:`Codec.get_config`), the
HDF5 filter that can decode its chunks (:attr:`Codec.hdf5_filter`), and whether
it learns from the data (:class:`TrainableCodec`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from chunkstore.codecs._util import check_level
from chunkstore.errors import CodecConfigError
from chunkstore.validate import is_int

__all__ = ["Codec", "LevelledCodec", "TrainableCodec", "check_many", "resolve_codec"]

#: turns a codec name into a Codec; set by ``_registry`` when the package is imported,
#: so that codecs wrapping another (``xor+``) need not import the registry
_resolver: Callable[[str], Codec] | None = None


def resolve_codec(name_or_codec: str | Codec) -> Codec:
    """A Codec for a name (through the registry's parser); a Codec is returned as is."""
    if isinstance(name_or_codec, Codec):
        return name_or_codec
    if _resolver is None:  # pragma: no cover - chunkstore.codecs always installs it
        raise CodecConfigError("codec names cannot be parsed before chunkstore.codecs is imported")
    return _resolver(name_or_codec)


class Codec(ABC):
    """Lossless codec for ndarray chunks (numcodecs style).

    Subclasses set ``codec_id`` and take only keyword arguments that
    ``get_config`` returns (besides ``"id"``), so ``type(c).from_config(c.get_config())``
    rebuilds ``c``.

    Decoding is bounded: with ``out``, a chunk decodes into at most ``out.nbytes``
    bytes, and encoded bytes that would produce more (or less) raise
    :class:`~chunkstore.codecs.DecodeError` at once, without decompressing the rest.
    """

    codec_id: ClassVar[str]
    #: the HDF5 filter whose decoder reads this codec's chunks verbatim: "zstd"
    #: (hdf5plugin's Zstd), "deflate" (HDF5's gzip), "none" (no filter), or None when
    #: only chunkstore can decode them
    hdf5_filter: str | None = None

    @abstractmethod
    def encode(self, arr: np.ndarray) -> bytes | bytearray | memoryview:
        """Compress the raw bytes of a C-contiguous array (any dtype)."""

    def encode_many(self, chunks: np.ndarray, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Encode ``chunks[i]`` for every ``i`` (a bulk write's whole chunks) in one call.

        Returns ``(data, sizes)``: the encodings one after another as one flat uint8
        array and each one's length (int64). Each piece is byte for byte what
        :meth:`encode` gives for that chunk. ``threads`` is how many threads may share
        the work; this default encodes one chunk after another in the calling thread
        (``igzip``'s encodes from two threads at once gave other bytes now and then, so
        sharing the work is for a codec that knows it is safe, as zstd's override does).
        """
        chunks = check_many(chunks, threads)
        parts = self._encode_each(chunks)
        sizes = np.fromiter((memoryview(p).nbytes for p in parts), np.int64, len(parts))
        return np.frombuffer(b"".join(parts), np.uint8), sizes

    def _encode_each(self, chunks: np.ndarray) -> list[Any]:
        return [self.encode(np.ascontiguousarray(c)) for c in chunks]

    @abstractmethod
    def decode(self, buf: Any, out: np.ndarray | None = None) -> np.ndarray:
        """Decompress ``buf`` (bytes-like).

        With ``out`` (a C-contiguous array of the original nbytes), fill it and
        return it. Without, return a 1-D uint8 array of the raw bytes; the caller
        views it with the dtype and shape it knows.
        """

    @property
    def name(self) -> str:
        """The canonical name that :func:`chunkstore.codecs.get_codec` parses back."""
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        """``{"id": codec_id, **constructor arguments}``; ``from_config`` rebuilds the codec."""
        return {"id": self.codec_id}

    def native_spec(self) -> Any:
        """How the native read path decodes these chunks (a :class:`chunkstore.native.NativeSpec`).

        None keeps this codec on the Python read path. A codec that has a spec decodes
        identically through both paths. Called per read: the spec (which may hold a
        digested dictionary) is built once per codec object by :meth:`_make_native_spec`.
        """
        try:
            return self.__dict__["_native"]
        except KeyError:
            spec = self.__dict__["_native"] = self._make_native_spec()
            return spec

    def _make_native_spec(self) -> Any:
        """The native spec, built once (None by default: Python path only)."""
        return None

    def __getstate__(self) -> dict[str, Any]:
        # a native spec holds process-local addresses: never pickled
        return {k: v for k, v in self.__dict__.items() if k != "_native"}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Codec:
        """The codec ``config`` (from :meth:`get_config`, with or without its ``"id"``) describes."""
        params = dict(config)
        codec_id = params.pop("id", cls.codec_id)
        if codec_id != cls.codec_id:
            raise CodecConfigError(f"config of codec {codec_id!r} given to {cls.__name__}")
        return cls(**params)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.get_config() == other.get_config()

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self.get_config().items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items() if k != "id")
        return f"{type(self).__name__}({args})"


class TrainableCodec(Codec):
    """A codec that learns from the data it will store (``zstd3+dict``).

    Untrained, it encodes like :meth:`untrained_equivalent` does. The chunk store
    calls :meth:`trained` with sample items once it has stored enough, keeps the
    result if it beats :meth:`untrained_equivalent` on held-out chunks, and then
    re-encodes what it stored.
    """

    @property
    @abstractmethod
    def wants_training(self) -> bool:
        """True until the codec has learned from data."""

    @abstractmethod
    def trained(self, samples: Sequence[np.ndarray]) -> Codec:
        """A codec trained on ``samples`` (items); it may be a plain codec when training fails."""

    @abstractmethod
    def untrained_equivalent(self) -> Codec:
        """The plain codec that decodes (and writes) exactly what this codec writes untrained."""


class LevelledCodec(Codec):
    """A codec with one integer ``level`` in ``LEVELS``: name ``<codec_id>/<level>``.

    Subclasses set ``LEVELS`` and ``DEFAULT_LEVEL``; the bounds check, the name
    and the config all derive from them.
    """

    LEVELS: ClassVar[range]
    DEFAULT_LEVEL: ClassVar[int]
    #: the family name used in names and error messages (a subclass may share it)
    family: ClassVar[str] = ""

    def __init__(self, *, level: int | None = None):
        level = self.DEFAULT_LEVEL if level is None else level
        family = self.family or self.codec_id
        self.level = check_level(family, level, self.LEVELS.start, self.LEVELS.stop - 1)

    @property
    def name(self) -> str:
        return f"{self.family or self.codec_id}/{self.level}"

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "level": self.level}


def check_many(chunks: Any, threads: Any) -> np.ndarray:
    """:meth:`Codec.encode_many`'s arguments: ``chunks`` an array of at least 2 dimensions (one chunk
    per row), ``threads`` an int >= 1; TypeError / ValueError naming the argument otherwise."""
    if not isinstance(chunks, np.ndarray) or chunks.ndim < 2:
        shape = getattr(chunks, "shape", None)
        raise TypeError(f"encode_many: chunks must be a numpy array of shape (n_chunks, chunk_len, ...), "
                        f"got {type(chunks).__name__}{'' if shape is None else f' of shape {shape}'}")
    if not is_int(threads, minimum=1):
        raise ValueError(f"encode_many: threads must be an int >= 1, got {threads!r}")
    return chunks
