"""The Codec protocol: what every codec in chunkstore implements.

A codec turns one C-contiguous ndarray (a chunk of items) into bytes and back,
bit-exactly, for every numpy dtype. Codecs are stateless from the caller's point
of view and safe to call from several threads at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from chunkstore.codecs._util import check_level

__all__ = ["Codec", "LevelledCodec"]


class Codec(ABC):
    """Lossless codec for ndarray chunks (numcodecs style).

    Subclasses set ``codec_id`` and take only keyword arguments that
    ``get_config`` returns, so ``type(c)(**c.get_config())`` rebuilds ``c``.
    """

    codec_id: ClassVar[str]

    @abstractmethod
    def encode(self, arr: np.ndarray) -> bytes | bytearray | memoryview:
        """Compress the raw bytes of a C-contiguous array (any dtype)."""

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
        """Constructor arguments; ``from_config(get_config())`` rebuilds the codec."""
        return {}

    def native_spec(self) -> Any:
        """How the native read path decodes these chunks (a :class:`chunkstore.native.NativeSpec`).

        None (the default) keeps this codec on the Python read path. A codec that
        returns a spec decodes identically through both paths.
        """
        return None

    def _cached_native_spec(self, make: Any) -> Any:
        # the spec may hold a digested dictionary: build it once per codec object
        try:
            return self.__dict__["_native"]
        except KeyError:
            spec = self.__dict__["_native"] = make()
            return spec

    def __getstate__(self) -> dict[str, Any]:
        # a native spec holds process-local addresses: never pickled
        return {k: v for k, v in self.__dict__.items() if k != "_native"}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Codec:
        return cls(**config)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.get_config() == other.get_config()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self.get_config().items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


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
        return {"level": self.level}
