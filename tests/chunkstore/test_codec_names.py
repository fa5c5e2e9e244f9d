"""The codec name parser: sb3-extra-buffers' grammar, blosc2 names, ``xor+``, configs."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from chunkstore.codecs import (
    Blosc2Codec,
    Codec,
    GzipCodec,
    IGzipCodec,
    LZ4BlockCodec,
    LZ4FrameCodec,
    NoneCodec,
    RLECodec,
    XorDelta,
    ZstdCodec,
    codec_from_config,
    codec_names,
    get_codec,
)
from chunkstore.errors import CodecConfigError, MissingBackendError

HAVE_ISAL = importlib.util.find_spec("isal") is not None
needs_isal = pytest.mark.skipif(not HAVE_ISAL, reason="python-isal not installed")

# name -> (class, level); sb3-extra-buffers 0.5.0 meanings (its regex
# `^((?:[A-Za-z]+)|(?:[\w\-]+/))(\-?[0-9]+)$`): a `-` straight after a bare
# word is a minus sign, so zstd-5 is level -5 while zstd5 and zstd/5 are +5.
SB3_FORMS = {
    "zstd-5": (ZstdCodec, -5),
    "zstd5": (ZstdCodec, 5),
    "zstd/5": (ZstdCodec, 5),
    "zstd/-5": (ZstdCodec, -5),
    "zstd-3": (ZstdCodec, -3),
    "zstd3": (ZstdCodec, 3),
    "zstd1": (ZstdCodec, 1),
    "zstd-100": (ZstdCodec, -100),
    "zstd22": (ZstdCodec, 22),
    "zstd0": (ZstdCodec, 3),  # zstd's 0 means its default, 3
    "zstd": (ZstdCodec, 3),
    "lz4-frame/5": (LZ4FrameCodec, 5),
    "lz4-frame/-5": (LZ4FrameCodec, -5),
    "lz4-frame/16": (LZ4FrameCodec, 16),
    "lz4-frame": (LZ4FrameCodec, 0),
    "lz4-block/-3": (LZ4BlockCodec, -3),
    "lz4-block/1": (LZ4BlockCodec, 1),
    "lz4-block/12": (LZ4BlockCodec, 12),
    "lz4-block/16": (LZ4BlockCodec, 16),  # sb3eb's benchmark lists use it; lz4 compresses it as 12
    "lz4-block/0": (LZ4BlockCodec, 0),
    "lz4-block": (LZ4BlockCodec, 0),
    "gzip1": (GzipCodec, 1),
    "gzip/1": (GzipCodec, 1),
    "gzip0": (GzipCodec, 0),
    "gzip9": (GzipCodec, 9),
    "gzip-1": (GzipCodec, 6),  # zlib's -1 = its default, 6
    "gzip": (GzipCodec, 6),
}
ISAL_FORMS = {
    "igzip3": (IGzipCodec, 3),
    "igzip/3": (IGzipCodec, 3),
    "igzip0": (IGzipCodec, 0),
    "igzip": (IGzipCodec, 2),
}
BLOSC2_FORMS = {
    "blosc2-zstd-5": ("zstd", 5),
    "blosc2/zstd/5": ("zstd", 5),
    "blosc2-lz4-5": ("lz4", 5),
    "blosc2-blosclz-5": ("blosclz", 5),
    "blosc2-lz4hc-9": ("lz4hc", 9),
    "blosc2-lz4-0": ("lz4", 0),
    "blosc2/lz4/1": ("lz4", 1),
    "blosc2-zstd": ("zstd", 5),
}

INVALID = [
    "",
    "   ",
    "zstd/23",
    "zstd23",
    "zstd-101",
    "zstd/",
    "zstd/+5",
    "zstd 5",
    "gzip10",
    "gzip-2",
    "igzip4",
    "igzip-1",
    "lz4-block/17",
    "lz4-block5",  # sb3eb: lz4 names need the '/'
    "lz4-frame/17",
    "lz4",
    "lz4/5",
    "blosc2-foo-5",
    "blosc2-zstd-10",
    "blosc2-zstd--1",
    "blosc2",
    "xor+",
    "xor+xor+zstd",
    "xor+foo",
    "rle/5",
    "none3",
    "snappy",
    "zstd\u0663",  # a non-ASCII digit
]


@pytest.mark.parametrize("name,expected", list(SB3_FORMS.items()))
def test_sb3_extra_buffers_forms(name, expected):
    cls, level = expected
    codec = get_codec(name)
    assert type(codec) is cls
    assert codec.level == level


@needs_isal
@pytest.mark.parametrize("name,expected", list(ISAL_FORMS.items()))
def test_igzip_forms(name, expected):
    cls, level = expected
    codec = get_codec(name)
    assert type(codec) is cls
    assert codec.level == level


@pytest.mark.parametrize("name,expected", list(BLOSC2_FORMS.items()))
def test_blosc2_forms(name, expected):
    codec = get_codec(name)
    assert isinstance(codec, Blosc2Codec)
    assert (codec.cname, codec.level) == expected


@pytest.mark.parametrize("name", ["rle", "rle-jit", "rle-old"])
def test_rle_aliases(name):
    assert get_codec(name) == RLECodec()


def test_none():
    assert get_codec("none") == NoneCodec()


@pytest.mark.parametrize(
    "name,inner",
    [
        ("xor+lz4-block", LZ4BlockCodec(level=0)),
        ("xor+zstd-3", ZstdCodec(level=-3)),
        ("xor+zstd/3", ZstdCodec(level=3)),
        ("xor+blosc2-lz4-5", Blosc2Codec(cname="lz4", level=5)),
        ("xor+rle", RLECodec()),
        ("xor+none", NoneCodec()),
        ("xor+gzip1", GzipCodec(level=1)),
    ],
)
def test_xor_prefix(name, inner):
    codec = get_codec(name)
    assert isinstance(codec, XorDelta)
    assert codec.inner == inner


@pytest.mark.parametrize("name", ["ZSTD-5", "  zstd-5 ", "\tZstd/-5\n", "Xor+Zstd-5"])
def test_case_and_whitespace(name):
    codec = get_codec(name)
    assert getattr(codec, "inner", codec) == ZstdCodec(level=-5)


@pytest.mark.parametrize("name", INVALID)
def test_invalid_names_list_the_valid_forms(name):
    with pytest.raises(CodecConfigError) as info:
        get_codec(name)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert repr(name) in message
    for form in ("zstd/<L>", "lz4-block/<L>", "gzip<L>", "blosc2-<C>", "xor+", "none | rle"):
        assert form in message


def test_out_of_range_message_names_the_range():
    with pytest.raises(ValueError, match=r"zstd level 23 is outside -100\.\.22"):
        get_codec("zstd/23")
    with pytest.raises(ValueError, match=r"blosc2 inner codec 'foo'"):
        get_codec("blosc2-foo-5")


@pytest.mark.parametrize(
    "make",
    [
        lambda: ZstdCodec(level=23),
        lambda: ZstdCodec(level=1.5),
        lambda: ZstdCodec(level=True),
        lambda: GzipCodec(level=10),
        lambda: LZ4BlockCodec(level=17),
        lambda: LZ4FrameCodec(level=17),
        lambda: Blosc2Codec(cname="zlib-ng", level=5),
        lambda: Blosc2Codec(cname="lz4", level=-1),
        lambda: XorDelta(inner="nope"),
        lambda: XorDelta(inner=XorDelta(inner="none")),
    ],
)
def test_constructors_validate(make):
    with pytest.raises(CodecConfigError):
        make()


def test_non_string_rejected():
    with pytest.raises(TypeError):
        get_codec(3)  # type: ignore[arg-type]


def test_codec_instance_passes_through():
    codec = ZstdCodec(level=7)
    assert get_codec(codec) is codec


def test_missing_isal_raises_missing_backend_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "isal", None)
    monkeypatch.setitem(sys.modules, "isal.isal_zlib", None)
    for make in (
        lambda: get_codec("igzip3"),
        lambda: IGzipCodec(level=1),
        lambda: get_codec("xor+igzip"),
    ):
        with pytest.raises(MissingBackendError, match=r"pip install 'chunkstore-rl\[isal\]'") as info:
            make()
        assert isinstance(info.value, ImportError)
    # The other codecs do not care.
    assert get_codec("gzip3") == GzipCodec(level=3)


def every_codec() -> list[Codec]:
    names = [*SB3_FORMS, *BLOSC2_FORMS, "rle", "none"]
    if HAVE_ISAL:
        names += list(ISAL_FORMS)
    names += ["xor+" + n for n in names]
    return [get_codec(n) for n in names]


@pytest.mark.parametrize("codec", every_codec(), ids=repr)
def test_canonical_name_parses_back(codec):
    assert get_codec(codec.name) == codec
    assert get_codec(codec.name).name == codec.name


@pytest.mark.parametrize("codec", every_codec(), ids=repr)
def test_config_round_trip(codec):
    config = {"id": codec.codec_id, **codec.get_config()}
    clone = codec_from_config(config)
    assert clone == codec
    assert hash(clone) == hash(codec)
    assert type(codec).from_config(codec.get_config()) == codec


def test_config_round_trip_is_json_safe():
    import json

    codec = get_codec("xor+blosc2-zstd-5")
    config = json.loads(json.dumps({"id": codec.codec_id, **codec.get_config()}))
    assert codec_from_config(config) == codec


@pytest.mark.parametrize(
    "config",
    [{}, {"id": "snappy"}, {"id": "zstd", "level": 99}, {"id": "zstd", "lvl": 3}, {"id": 3}],
)
def test_bad_configs(config):
    with pytest.raises(CodecConfigError):
        codec_from_config(config)


def test_equality_distinguishes_levels_and_classes():
    assert ZstdCodec(level=1) != ZstdCodec(level=2)
    assert ZstdCodec(level=1) != LZ4BlockCodec(level=1)
    assert XorDelta(inner="zstd/1") != ZstdCodec(level=1)
    assert len({ZstdCodec(level=1), ZstdCodec(level=1), ZstdCodec(level=2)}) == 2


def test_codec_names_are_canonical_and_parse():
    names = codec_names()
    assert names[:2] == ["none", "rle"]
    assert {"zstd/3", "lz4-frame/0", "lz4-block/0", "gzip/6", "igzip/2"} <= set(names)
    assert {"blosc2-zstd-5", "blosc2-lz4-5", "blosc2-blosclz-5"} <= set(names)
    for name in names:
        if name.startswith("igzip") and not HAVE_ISAL:
            continue
        assert get_codec(name).name == name
        assert get_codec("xor+" + name).name == "xor+" + name


# -- register_codec: a new codec is one call -------------------------------------------------------


@pytest.fixture
def registry(monkeypatch):
    """The codec registry as it is, restored after the test (registrations are process-wide)."""
    from chunkstore.codecs import _registry

    for name in ("_ENTRIES", "_BY_ID", "_BY_NAME", "_BY_PREFIX"):
        monkeypatch.setattr(_registry, name, type(getattr(_registry, name))(getattr(_registry, name)))
    return _registry


def test_register_codec_makes_a_codec_known_everywhere(registry, tmp_path):
    import numpy as np

    from chunkstore import ChunkedArray, register_codec
    from chunkstore.codecs._base import LevelledCodec
    from chunkstore.hdf5 import load, save

    class Reversed(LevelledCodec):  # bytes reversed: enough to prove the round trips
        codec_id = "reversed-test"
        LEVELS = range(0, 4)
        DEFAULT_LEVEL = 1

        def encode(self, arr):
            return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)[::-1].tobytes()

        def decode(self, buf, out=None):
            raw = np.frombuffer(bytes(buf), np.uint8)[::-1]
            if out is None:
                return raw.copy()
            out.reshape(-1).view(np.uint8)[:] = raw
            return out

    assert register_codec(Reversed, levelled="rev", forms="  rev | rev/<L>  (a test codec)") is Reversed
    assert get_codec("REV/3").level == 3 and get_codec("rev2").level == 2 and get_codec("rev").level == 1
    assert isinstance(get_codec("xor+rev/2").inner, Reversed)  # wrappers see it too
    assert "rev/1" in codec_names()
    assert codec_from_config({"id": "reversed-test", "level": 2}) == Reversed(level=2)
    with pytest.raises(CodecConfigError, match="a test codec"):  # the list of valid names shows it
        get_codec("rev/x")
    arr = ChunkedArray(10, (3,), np.int32, chunk_len=4, codec="rev/2")
    arr.write(0, np.arange(30, dtype=np.int32).reshape(10, 3))
    save(tmp_path / "f.h5", {"a": arr})
    with load(tmp_path / "f.h5") as store:
        assert store.arrays["a"].codec == Reversed(level=2)
        assert np.array_equal(store.arrays["a"][:], arr[:])


def test_register_codec_refuses_clashes_and_non_codecs(registry):
    from chunkstore import register_codec

    class Other(NoneCodec):
        codec_id = "zstd"

    with pytest.raises(ValueError, match="codec id 'zstd' is taken by ZstdCodec"):
        register_codec(Other)
    Other.codec_id = "other-test"
    with pytest.raises(ValueError, match="codec name 'rle' is taken"):
        register_codec(Other, names=["RLE"])
    with pytest.raises(ValueError, match="prefix 'lz4-block' is taken"):
        register_codec(Other, levelled="lz4-block")
    with pytest.raises(TypeError, match="Codec subclass"):
        register_codec(dict)
    before = codec_names()
    assert register_codec(NoneCodec, names=["none"], forms="  none | rle") is NoneCodec  # again: replaces
    assert codec_names() == before
