"""Codec names and configs: the one parser, and the id -> class registry.

Names follow sb3-extra-buffers 0.5.0 exactly (its ``compression_method``
strings), plus blosc2 names and an ``xor+`` prefix:

* ``zstd5``, ``zstd/5`` -> level 5; ``zstd-5``, ``zstd/-5`` -> level -5. The same
  shorthands work for ``gzip`` and ``igzip``.
* ``lz4-frame/5``, ``lz4-block/-3``: lz4 names need the ``/`` (as in sb3eb).
* ``rle``, ``none``; sb3eb's ``rle-jit`` and ``rle-old`` are the same format.
* ``blosc2-zstd-5`` or ``blosc2/zstd/5`` (blosc2 levels are never negative).
* ``xor+<name>``: XOR delta against the previous row, then ``<name>``.
* ``zstd<L>+dict`` (any zstd form plus ``+dict``): zstd with a dictionary the
  chunk store trains on the first data it stores.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from chunkstore.codecs import _base
from chunkstore.codecs._base import Codec
from chunkstore.codecs._blosc2 import CNAMES, Blosc2Codec
from chunkstore.codecs._delta import XorDelta
from chunkstore.codecs._gzip import GzipCodec
from chunkstore.codecs._igzip import IGzipCodec
from chunkstore.codecs._lz4 import LZ4BlockCodec, LZ4FrameCodec
from chunkstore.codecs._none import NoneCodec
from chunkstore.codecs._rle import RLECodec
from chunkstore.codecs._zstd import ZstdCodec, ZstdDictCodec
from chunkstore.errors import CodecConfigError

__all__ = ["codec_from_config", "codec_names", "get_codec"]

_REGISTRY: dict[str, type[Codec]] = {
    cls.codec_id: cls
    for cls in (
        NoneCodec,
        RLECodec,
        ZstdCodec,
        ZstdDictCodec,
        LZ4FrameCodec,
        LZ4BlockCodec,
        GzipCodec,
        IGzipCodec,
        Blosc2Codec,
        XorDelta,
    )
}

_PLAIN: dict[str, type[Any]] = {
    "none": NoneCodec,
    "rle": RLECodec,
    "rle-jit": RLECodec,
    "rle-old": RLECodec,
}
# sb3eb: `[A-Za-z]+` then `-?digits` (zstd5, zstd-5), or `name/` then `-?digits`.
_SHORT = re.compile(r"(zstd|gzip|igzip)(?:(-?\d+)|/(-?\d+))?", re.ASCII)
_LZ4 = re.compile(r"(lz4-frame|lz4-block)(?:/(-?\d+))?", re.ASCII)
_BLOSC2 = re.compile(r"blosc2[-/]([a-z0-9]+)(?:[-/](\d+))?", re.ASCII)
_LEVELLED: dict[str, type[Any]] = {
    "zstd": ZstdCodec,
    "gzip": GzipCodec,
    "igzip": IGzipCodec,
    "lz4-frame": LZ4FrameCodec,
    "lz4-block": LZ4BlockCodec,
}


def _forms() -> str:
    def span(cls: type[Codec]) -> str:
        levels = cls.LEVELS  # type: ignore[attr-defined]
        return f"levels {levels.start}..{levels.stop - 1}, default {cls.DEFAULT_LEVEL}"  # type: ignore[attr-defined]

    return "\n".join(
        (
            "valid codec names (case-insensitive):",
            "  none | rle",
            f"  zstd | zstd<L> | zstd/<L> | zstd-<N> | zstd/-<N>  (zstd-5 is level -5; {span(ZstdCodec)}; 0 = 3)",
            f"  lz4-frame | lz4-frame/<L>  ({span(LZ4FrameCodec)})",
            f"  lz4-block | lz4-block/<L>  (1..16 high compression, 0 default mode, "
            f"<0 fast with acceleration -L; {span(LZ4BlockCodec)})",
            f"  gzip | gzip<L> | gzip/<L>  ({span(GzipCodec)})",
            f"  igzip | igzip<L> | igzip/<L>  ({span(IGzipCodec)}; pip install 'chunkstore[isal]')",
            f"  blosc2-<C>[-<L>] | blosc2/<C>[/<L>]  (C: {', '.join(CNAMES)}; {span(Blosc2Codec)})",
            "  xor+<any of the above>  (XOR against the previous row first)",
            "  <any zstd form>+dict  (zstd with a dictionary trained on the data, e.g. zstd3+dict)",
        )
    )


def _parse(name: str) -> Codec:
    if name in _PLAIN:
        return _PLAIN[name]()
    if m := _SHORT.fullmatch(name):
        level = m.group(2) or m.group(3)
        cls = _LEVELLED[m.group(1)]
        return cls() if level is None else cls(level=int(level))
    if m := _LZ4.fullmatch(name):
        cls = _LEVELLED[m.group(1)]
        return cls() if m.group(2) is None else cls(level=int(m.group(2)))
    if m := _BLOSC2.fullmatch(name):
        if m.group(2) is None:
            return Blosc2Codec(cname=m.group(1))
        return Blosc2Codec(cname=m.group(1), level=int(m.group(2)))
    if name.endswith("+dict") and _SHORT.fullmatch(name[: -len("+dict")]):
        plain = _parse(name[: -len("+dict")])
        if isinstance(plain, ZstdCodec):
            return ZstdDictCodec(level=plain.level)
    if name.startswith("xor+"):
        inner = name[len("xor+") :]
        if not inner:
            raise CodecConfigError("'xor+' needs a codec after the '+'")
        return XorDelta(inner=_parse(inner))
    raise CodecConfigError(f"unknown codec name {name!r}")


def get_codec(name_or_codec: str | Codec) -> Codec:
    """The codec a name stands for; a :class:`Codec` is returned unchanged.

    Parameters
    ----------
    name_or_codec
        A name such as ``"zstd-3"``, ``"lz4-block/-3"``, ``"blosc2-lz4-5"`` or
        ``"xor+zstd/1"`` (see the module docstring), or a Codec.

    Raises
    ------
    CodecConfigError
        Unknown name or level out of range; the message lists the valid forms.
    MissingBackendError
        ``igzip`` without python-isal.

    Examples
    --------
    >>> get_codec("zstd-5").level, get_codec("zstd5").level
    (-5, 5)
    >>> get_codec("XOR+lz4-block/-3").name
    'xor+lz4-block/-3'
    """
    if isinstance(name_or_codec, Codec):
        return name_or_codec
    if not isinstance(name_or_codec, str):
        raise TypeError(f"expected a codec name or Codec, got {type(name_or_codec).__name__}")
    name = name_or_codec.strip().lower()
    try:
        return _parse(name)
    except CodecConfigError as e:
        raise CodecConfigError(f"{name_or_codec!r}: {e}\n{_forms()}") from None


def codec_from_config(config: Mapping[str, Any]) -> Codec:
    """Rebuild a codec from its ``get_config()`` (which carries the codec's ``"id"``).

    Raises
    ------
    CodecConfigError
        Not a mapping, an unknown id, or parameters the codec refuses.

    Examples
    --------
    >>> c = get_codec("blosc2-zstd-5")
    >>> c.get_config()
    {'id': 'blosc2', 'cname': 'zstd', 'level': 5}
    >>> codec_from_config(c.get_config()) == c
    True
    """
    if not isinstance(config, Mapping):
        raise CodecConfigError(f"a codec config is a mapping, got {type(config).__name__}")
    codec_id = config.get("id")
    cls = _REGISTRY.get(codec_id) if isinstance(codec_id, str) else None
    if cls is None:
        known = ", ".join(sorted(_REGISTRY))
        raise CodecConfigError(f"unknown codec id {_short(codec_id)} in a codec config; known: {known}")
    try:
        return cls.from_config(dict(config))
    except CodecConfigError:
        raise
    except (TypeError, ValueError, OverflowError) as e:  # a damaged or crafted config
        raise CodecConfigError(f"bad config for codec {codec_id!r}: {_short(e)}") from e


def _short(value: Any) -> str:
    """``repr(value)`` cut to a line: configs may hold a 64 KB dictionary."""
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


_base._resolver = get_codec  # codecs that wrap another (xor+) resolve names through this


def codec_names() -> list[str]:
    """The canonical name of every codec family at its default level.

    Any of them also works with an ``xor+`` prefix, and the levelled ones with
    another level (``zstd/-5``, ``blosc2-lz4-9``).
    """
    names = ["none", "rle"]
    for prefix, cls in _LEVELLED.items():
        names.append(f"{prefix}/{cls.DEFAULT_LEVEL}")  # type: ignore[attr-defined]
    names += [f"blosc2-{cname}-{Blosc2Codec.DEFAULT_LEVEL}" for cname in CNAMES]
    return names
