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

Adding a codec is one call, :func:`register_codec` (the built-ins at the end of this
module register through it): its config id, the names that build it, the line the
error message lists, and the names :func:`codec_names` shows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from chunkstore.codecs import _base
from chunkstore.codecs._base import Codec
from chunkstore.codecs._blosc2 import CNAMES, Blosc2Codec
from chunkstore.codecs._delta import XorDelta
from chunkstore.codecs._gzip import GzipCodec, IGzipCodec
from chunkstore.codecs._lz4 import LZ4BlockCodec, LZ4FrameCodec
from chunkstore.codecs._none import NoneCodec
from chunkstore.codecs._rle import RLECodec
from chunkstore.codecs._zstd import ZstdCodec, ZstdDictCodec
from chunkstore.errors import CodecConfigError

__all__ = ["codec_from_config", "codec_names", "get_codec", "register_codec"]


@dataclass(frozen=True)
class _Entry:
    cls: type[Codec]
    names: tuple[str, ...]  # exact names that build cls()
    levelled: str | None  # a prefix taking a level: <prefix>/<L> (and <prefix><L>, <prefix>-<N>)
    parse: Callable[[str], Codec | None] | None  # a grammar of its own
    forms: str | None  # the line of the error message's list of valid names
    listed: tuple[str, ...]  # what codec_names() shows


_ENTRIES: list[_Entry] = []
_BY_ID: dict[str, type[Codec]] = {}
_BY_NAME: dict[str, type[Codec]] = {}
_BY_PREFIX: dict[str, type[Codec]] = {}


def register_codec(cls: type[Codec], *, names: Iterable[str] = (), levelled: str | None = None,
                   parse: Callable[[str], Codec | None] | None = None, forms: str | None = None,
                   listed: Iterable[str] | None = None) -> type[Codec]:
    """Make a codec known: its config id, the names that build it, what errors and listings show.

    Parameters
    ----------
    cls
        A :class:`Codec` subclass; its ``codec_id`` rebuilds it from a config
        (:func:`codec_from_config`, saved files).
    names
        Exact names (lower case) that build ``cls()``: ``"none"``.
    levelled
        A name prefix taking a level (``cls(level=L)``; ``cls`` a ``LevelledCodec``):
        ``<prefix>`` and ``<prefix>/<L>``, and, for a prefix without ``-``, sb3-extra-buffers'
        ``<prefix><L>`` and ``<prefix>-<N>`` (level ``-N``).
    parse
        A parser for a grammar of its own: called with the lower-case name, it returns a
        codec or None (not its name).
    forms
        The line listing this codec's names in the error message of an unknown name.
    listed
        The canonical names :func:`codec_names` shows (default: the first of ``names``, or
        ``<levelled>/<DEFAULT_LEVEL>``).

    Raises
    ------
    TypeError
        ``cls`` is not a Codec subclass.
    ValueError
        Its id, a name or the prefix is taken by another codec class.

    Registering a class again replaces what its earlier call said.

    Examples
    --------
    >>> from chunkstore.codecs import NoneCodec
    >>> class Stored(NoneCodec):
    ...     codec_id = "stored-example"
    >>> _ = register_codec(Stored, names=["stored-example"], forms="  stored-example")
    >>> type(get_codec("stored-example")).__name__, codec_from_config({"id": "stored-example"}).codec_id
    ('Stored', 'stored-example')
    """
    if not (isinstance(cls, type) and issubclass(cls, Codec)):
        raise TypeError(f"register_codec() takes a Codec subclass, got {cls!r}")
    codec_id = getattr(cls, "codec_id", None)
    if not isinstance(codec_id, str) or not codec_id:
        raise ValueError(f"{cls.__name__} needs a codec_id (a non-empty str) to be registered")
    names = tuple(n.strip().lower() for n in names)
    prefix = levelled.strip().lower() if levelled else None
    for table, keys, what in ((_BY_ID, (codec_id,), "codec id"), (_BY_NAME, names, "codec name"),
                              (_BY_PREFIX, (prefix,) if prefix else (), "codec name prefix")):
        for key in keys:
            if table.get(key, cls) is not cls:
                raise ValueError(f"{what} {key!r} is taken by {table[key].__name__}")
    if listed is None:
        default = getattr(cls, "DEFAULT_LEVEL", None)
        listed = names[:1] if names else ((f"{prefix}/{default}",) if prefix and default is not None else ())
    entry = _Entry(cls, names, prefix, parse, forms, tuple(listed))
    old = next((i for i, e in enumerate(_ENTRIES) if e.cls is cls), None)
    if old is None:
        _ENTRIES.append(entry)
    else:  # registered again: this call's names replace the earlier ones, in the same place
        for name in _ENTRIES[old].names:
            _BY_NAME.pop(name, None)
        _BY_PREFIX.pop(_ENTRIES[old].levelled or "", None)
        _ENTRIES[old] = entry
    _BY_ID[codec_id] = cls
    _BY_NAME.update(dict.fromkeys(names, cls))
    if prefix:
        _BY_PREFIX[prefix] = cls
    return cls


_INT = re.compile(r"-?\d+", re.ASCII)


def _levelled(name: str) -> Codec | None:
    """``<prefix>``, ``<prefix>/<L>``, or (a prefix without ``-``) ``<prefix><L>`` / ``<prefix>-<N>``."""
    cls = _BY_PREFIX.get(name)
    if cls is not None:
        return cls()
    head, slash, tail = name.rpartition("/")
    if slash and head in _BY_PREFIX and _INT.fullmatch(tail):
        return _BY_PREFIX[head](level=int(tail))  # type: ignore[call-arg]
    for prefix, cls in _BY_PREFIX.items():
        if "-" not in prefix and name.startswith(prefix) and _INT.fullmatch(name[len(prefix):]):
            return cls(level=int(name[len(prefix):]))  # type: ignore[call-arg]
    return None


def _parse(name: str) -> Codec:
    cls = _BY_NAME.get(name)
    codec = cls() if cls is not None else _levelled(name)
    for entry in _ENTRIES:
        if codec is not None:
            return codec
        if entry.parse is not None:
            codec = entry.parse(name)
    if codec is not None:
        return codec
    raise CodecConfigError(f"unknown codec name {name!r}")


def _forms() -> str:
    return "\n".join(["valid codec names (case-insensitive):", *(e.forms for e in _ENTRIES if e.forms)])


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
    cls = _BY_ID.get(codec_id) if isinstance(codec_id, str) else None
    if cls is None:
        known = ", ".join(sorted(_BY_ID))
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
    return [name for entry in _ENTRIES for name in entry.listed]


# -- the built-in codecs ---------------------------------------------------------------------------
def _span(cls: type[Codec]) -> str:
    levels = cls.LEVELS  # type: ignore[attr-defined]
    return f"levels {levels.start}..{levels.stop - 1}, default {cls.DEFAULT_LEVEL}"  # type: ignore[attr-defined]


_BLOSC2 = re.compile(r"blosc2[-/]([a-z0-9]+)(?:[-/](\d+))?", re.ASCII)


def _parse_blosc2(name: str) -> Codec | None:
    m = _BLOSC2.fullmatch(name)
    if m is None:
        return None
    if m.group(2) is None:
        return Blosc2Codec(cname=m.group(1))
    return Blosc2Codec(cname=m.group(1), level=int(m.group(2)))


def _parse_dict(name: str) -> Codec | None:
    if not name.endswith("+dict"):
        return None
    zstd = _levelled(name[: -len("+dict")])
    return ZstdDictCodec(level=zstd.level) if type(zstd) is ZstdCodec else None


def _parse_xor(name: str) -> Codec | None:
    if not name.startswith("xor+"):
        return None
    inner = name[len("xor+"):]
    if not inner:
        raise CodecConfigError("'xor+' needs a codec after the '+'")
    return XorDelta(inner=_parse(inner))


register_codec(NoneCodec, names=["none"], forms="  none | rle")
register_codec(RLECodec, names=["rle", "rle-jit", "rle-old"])  # sb3eb's rle-jit and rle-old: one format
register_codec(ZstdCodec, levelled="zstd",
               forms=f"  zstd | zstd<L> | zstd/<L> | zstd-<N> | zstd/-<N>  (zstd-5 is level -5; "
                     f"{_span(ZstdCodec)}; 0 = 3)")
register_codec(GzipCodec, levelled="gzip", forms=f"  gzip | gzip<L> | gzip/<L>  ({_span(GzipCodec)})")
register_codec(IGzipCodec, levelled="igzip",
               forms=f"  igzip | igzip<L> | igzip/<L>  ({_span(IGzipCodec)}; pip install 'chunkstore-rl[isal]')")
register_codec(LZ4FrameCodec, levelled="lz4-frame", forms=f"  lz4-frame | lz4-frame/<L>  ({_span(LZ4FrameCodec)})")
register_codec(LZ4BlockCodec, levelled="lz4-block",
               forms=f"  lz4-block | lz4-block/<L>  (1..16 high compression, 0 default mode, "
                     f"<0 fast with acceleration -L; {_span(LZ4BlockCodec)})")
register_codec(Blosc2Codec, parse=_parse_blosc2,
               forms=f"  blosc2-<C>[-<L>] | blosc2/<C>[/<L>]  (C: {', '.join(CNAMES)}; {_span(Blosc2Codec)})",
               listed=[f"blosc2-{cname}-{Blosc2Codec.DEFAULT_LEVEL}" for cname in CNAMES])
register_codec(ZstdDictCodec, parse=_parse_dict,
               forms="  <any zstd form>+dict  (zstd with a dictionary trained on the data, e.g. zstd3+dict)",
               listed=())
register_codec(XorDelta, parse=_parse_xor, forms="  xor+<any of the above>  (XOR against the previous row first)")
