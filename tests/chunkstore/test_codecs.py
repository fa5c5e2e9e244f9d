"""Every codec round-trips every dtype bit-exactly, with and without ``out=``."""

from __future__ import annotations

import importlib.util
import pickle
import subprocess
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from chunkstore.codecs import (
    Codec,
    DecodeError,
    RLECodec,
    XorDelta,
    ZstdCodec,
    get_codec,
)

HAVE_ISAL = importlib.util.find_spec("isal") is not None

BASE_NAMES = [
    "none",
    "rle",
    "zstd/1",
    "zstd/3",
    "zstd/-5",
    "zstd/19",
    "lz4-frame/0",
    "lz4-frame/9",
    "lz4-frame/-3",
    "lz4-block/0",
    "lz4-block/9",
    "lz4-block/-3",
    "gzip/0",
    "gzip/6",
    "blosc2-zstd-5",
    "blosc2-lz4-5",
    "blosc2-lz4hc-9",
    "blosc2-blosclz-5",
    "blosc2-lz4-0",
]
if HAVE_ISAL:
    BASE_NAMES += ["igzip/0", "igzip/3"]
XOR_NAMES = [
    "xor+none",
    "xor+rle",
    "xor+zstd/3",
    "xor+zstd/-1",
    "xor+lz4-block/0",
    "xor+lz4-frame/1",
    "xor+gzip/1",
    "xor+blosc2-lz4-5",
]
ALL_NAMES = BASE_NAMES + XOR_NAMES

DTYPES = [
    np.uint8,
    np.int8,
    np.int16,
    np.uint16,
    np.int32,
    np.int64,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.bool_,
    np.complex64,
    np.complex128,
    np.dtype(">f4"),
    np.dtype([("a", "u1"), ("b", "<i2")]),  # itemsize 3
]
SHAPES = [(), (0,), (3,), (2, 0, 5), (1, 7), (8, 21, 16), (4, 3, 21, 16)]


def raw(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def specials(dtype: np.dtype) -> np.ndarray:
    """Bit patterns codecs are known to mangle: NaN payloads, -0.0, inf, extremes."""
    if dtype.kind == "f":
        bits = {2: "u2", 4: "u4", 8: "u8"}[dtype.itemsize]
        nans = {
            2: [0x7E00, 0xFE00, 0x7C01, 0x7D55],
            4: [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA5A5A5],
            8: [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF5A5A5A5A5A5A5],
        }[dtype.itemsize]
        pats = np.array(nans, dtype=bits).view(dtype.newbyteorder("="))
        vals = np.array([-0.0, 0.0, np.inf, -np.inf], dtype=dtype.newbyteorder("="))
        return np.concatenate([pats, vals]).astype(dtype)
    if dtype.kind == "c":
        f = specials(np.dtype(f"f{dtype.itemsize // 2}"))
        return _complex_from(f, dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.array([info.min, info.max, 0, info.max - 1], dtype=dtype)
    return np.zeros(0, dtype)


def _complex_from(f: np.ndarray, dtype: np.dtype) -> np.ndarray:
    # Build complex values from raw float pairs so NaN payloads survive construction.
    pair = np.empty(2 * f.size, f.dtype)
    pair[0::2] = f
    pair[1::2] = f[::-1]
    return pair.view(dtype)


def make(dtype, shape, seed: int = 0) -> np.ndarray:
    """Compressible-ish data: random bytes repeated in runs, plus special values."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    if dtype == np.bool_:
        return (rng.random(shape) < 0.3).astype(np.bool_)
    nbytes = n * dtype.itemsize
    base = rng.integers(0, 256, size=max(1, nbytes // 8 + 1), dtype=np.uint8)
    data = np.repeat(base, 8)[:nbytes].copy()
    a = data.view(dtype).reshape(shape) if n else np.zeros(shape, dtype)
    sp = specials(dtype)
    if n and sp.size:
        flat = a.reshape(-1)
        flat[: min(n, sp.size)] = sp[: min(n, sp.size)]
    return a


@pytest.fixture(scope="module", params=ALL_NAMES)
def codec(request) -> Codec:
    return get_codec(request.param)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_every_dtype_and_shape(codec, dtype):
    for shape in SHAPES:
        a = make(dtype, shape)
        enc = codec.encode(a)
        assert isinstance(enc, (bytes, bytearray, memoryview))

        out = np.empty_like(a)
        got = codec.decode(enc, out=out)
        assert got is out
        assert np.array_equal(raw(out), raw(a)), (codec.name, dtype, shape)

        flat = codec.decode(enc)
        assert flat.dtype == np.uint8 and flat.ndim == 1
        assert flat.flags.writeable
        assert np.array_equal(flat, raw(a)), (codec.name, dtype, shape)


def test_atari_sized_chunk(codec):
    a = make(np.uint8, (64, 84, 84), seed=1)
    out = np.zeros_like(a)
    codec.decode(codec.encode(a), out=out)
    assert np.array_equal(out, a)


def test_decode_accepts_any_buffer_type(codec):
    a = make(np.int16, (5, 7))
    enc = bytes(codec.encode(a))
    for buf in (enc, bytearray(enc), memoryview(enc), np.frombuffer(enc, np.uint8)):
        assert np.array_equal(codec.decode(buf), raw(a))


def test_non_contiguous_input_encodes_c_order(codec):
    base = make(np.float32, (6, 10))
    for a in (base[:, ::2], np.asfortranarray(base), base.T):
        out = np.empty(a.shape, a.dtype)
        codec.decode(codec.encode(a), out=out)
        assert np.array_equal(raw(out), raw(np.ascontiguousarray(a)))


def test_encode_does_not_alias_input(codec):
    a = make(np.uint8, (4, 16))
    expected = a.copy()
    enc = bytes(codec.encode(a))
    a[:] = 0
    assert np.array_equal(codec.decode(enc), raw(expected))


def test_wrong_size_out_raises_value_error(codec):
    a = make(np.uint16, (4, 10))
    enc = codec.encode(a)
    for bad in (np.empty((4, 11), np.uint16), np.empty((3, 10), np.uint16), np.empty(0, np.uint8)):
        with pytest.raises(DecodeError) as info:
            codec.decode(enc, out=bad)
        assert isinstance(info.value, ValueError)
        assert "bytes" in str(info.value)


def test_out_may_have_other_shape_and_dtype_of_same_nbytes(codec):
    a = make(np.float32, (4, 10))
    out = np.empty(160, np.uint8)
    codec.decode(codec.encode(a), out=out)
    assert np.array_equal(out, raw(a))


def test_bad_out_rejected(codec):
    a = make(np.uint8, (4, 10))
    enc = codec.encode(a)
    with pytest.raises(ValueError, match="C-contiguous"):
        codec.decode(enc, out=np.empty((10, 4), np.uint8).T)
    ro = np.empty_like(a)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        codec.decode(enc, out=ro)


def test_truncated_chunk_raises_value_error(codec):
    a = make(np.uint8, (16, 64), seed=3)
    enc = bytes(codec.encode(a))
    for cut in (len(enc) // 2, len(enc) - 1):
        with pytest.raises(ValueError):
            codec.decode(enc[:cut], out=np.empty_like(a))


def test_object_arrays_rejected(codec):
    with pytest.raises(TypeError):
        codec.encode(np.array([object()], dtype=object))


def test_pickle_round_trip(codec):
    clone = pickle.loads(pickle.dumps(codec))
    assert clone == codec
    a = make(np.float64, (3, 5))
    assert np.array_equal(clone.decode(codec.encode(a)), raw(a))


@pytest.mark.skipif(not HAVE_ISAL, reason="python-isal is not installed")
def test_igzip_pickled_by_0_2_loads():
    """0.1 and 0.2 pickled an igzip codec as ``chunkstore.codecs._igzip.IGzipCodec``; it lives in
    ``_gzip`` now, beside the gzip codec it extends."""
    codec = get_codec("igzip/3")
    old = pickle.dumps(codec, protocol=2).replace(b"chunkstore.codecs._gzip\n", b"chunkstore.codecs._igzip\n")
    assert b"chunkstore.codecs._igzip\n" in old
    assert pickle.loads(old) == codec


def test_thread_safety(codec):
    arrays = [make(np.uint8, (16, 21, 16), seed=s) for s in range(24)]

    def work(a: np.ndarray) -> bool:
        ok = True
        for _ in range(4):
            out = np.empty_like(a)
            codec.decode(codec.encode(a), out=out)
            ok &= np.array_equal(out, a)
        return ok

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(work, arrays))


_hyp_dtypes = st.sampled_from([np.dtype(d) for d in DTYPES[:-1]])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(ALL_NAMES),
    a=_hyp_dtypes.flatmap(
        lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=12))
    ),
)
def test_hypothesis_round_trip(name, a):
    codec = get_codec(name)
    enc = codec.encode(a)
    out = np.empty_like(a)
    codec.decode(enc, out=out)
    assert np.array_equal(raw(out), raw(a))
    assert np.array_equal(codec.decode(enc), raw(a))


# --- rle -----------------------------------------------------------------------


@pytest.mark.parametrize("run", [1, 65_535, 65_536, 200_000])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.complex128])
def test_rle_long_runs(run, dtype):
    a = np.concatenate(
        [np.full(run, 1, dtype), np.full(run, 2, dtype), np.zeros(3, dtype), np.full(run, 1, dtype)]
    )
    c = RLECodec()
    enc = c.encode(a)
    assert len(enc) < 16 + 4 * (np.dtype(dtype).itemsize + 8)
    out = np.empty_like(a)
    c.decode(enc, out=out)
    assert np.array_equal(raw(out), raw(a))


@pytest.mark.parametrize(
    "a",
    [
        np.tile(np.array([0, 255], np.uint8), 5000),  # alternating
        np.full(100_000, 7, np.int16),  # all equal
        np.random.default_rng(0).integers(0, 4, 50_000).astype(np.uint8),
        np.random.default_rng(1).standard_normal(10_000),
        np.array([np.nan, -np.nan, 0.0, -0.0, 0.0]),
        np.zeros(10, dtype="V3"),
    ],
    ids=["alternating", "all-equal", "random", "random-float", "nan-signed-zero", "void3"],
)
def test_rle_patterns(a):
    c = RLECodec()
    assert np.array_equal(c.decode(c.encode(a)), raw(a))


def test_rle_compares_whole_items():
    # 0.0 and -0.0 differ only in the top byte; an item-wise RLE keeps them apart.
    a = np.array([0.0] * 5 + [-0.0] * 5)
    enc = RLECodec().encode(a)
    assert len(enc) == 16 + 2 * 8 + 2 * 1
    assert np.array_equal(RLECodec().decode(enc), raw(a))


def test_rle_corrupt_header():
    enc = bytearray(RLECodec().encode(np.zeros(10, np.uint8)))
    enc[1] = 3  # value width 3 is not a width rle writes
    with pytest.raises(DecodeError):
        RLECodec().decode(enc)
    with pytest.raises(DecodeError):
        RLECodec().decode(b"short")


# --- xor delta -------------------------------------------------------------------


def moving_frames(n: int = 32, frame_shape: tuple[int, ...] = (84, 84)) -> np.ndarray:
    rng = np.random.default_rng(0)
    bg = rng.integers(0, 255, frame_shape, dtype=np.uint8)
    frames = np.repeat(bg[None], n, axis=0)
    for t in range(n):
        frames[t, 10 + t : 16 + t, 20:30] = 255
    return frames


def test_xor_delta_shrinks_frames_beyond_the_lz4_window():
    # A 100 KB RGB frame is past lz4's 64 KB window: plain lz4 cannot see the
    # previous frame, the XOR delta turns it into zeros.
    frames = moving_frames(n=8, frame_shape=(210, 160, 3))
    plain = len(get_codec("lz4-block").encode(frames))
    delta = len(get_codec("xor+lz4-block").encode(frames))
    assert delta * 4 < plain


@pytest.mark.parametrize(
    "shape,dtype",
    [
        ((4, 128, 128), np.uint8),  # 16 KB rows: the row-loop path
        ((64, 84, 84), np.uint8),  # 7 KB rows: accumulate over uint64 words
        ((100, 3), np.uint8),  # 3-byte rows: uint8 words
        ((50, 3), np.float16),  # 6-byte rows: uint16 words
        ((1, 10), np.int32),
        ((0, 10), np.int32),
        ((), np.float64),
    ],
)
def test_xor_delta_row_layouts(shape, dtype):
    a = make(dtype, shape, seed=5)
    c = XorDelta(inner="zstd/1")
    enc = c.encode(a)
    out = np.empty_like(a)
    c.decode(enc, out=out)
    assert np.array_equal(raw(out), raw(a))
    # The row count travels in the header, so a flat out works too.
    flat = np.empty(a.nbytes, np.uint8)
    c.decode(enc, out=flat)
    assert np.array_equal(flat, raw(a))


def test_xor_delta_header_holds_row_count():
    a = make(np.uint8, (6, 10))
    enc = XorDelta(inner="none").encode(a)
    assert int.from_bytes(enc[:8], "little") == 6
    bad = bytearray(enc)
    bad[:8] = (7).to_bytes(8, "little")  # 60 bytes do not split into 7 rows
    with pytest.raises(DecodeError):
        XorDelta(inner="none").decode(bad)


# --- zstd / zlib interoperability -------------------------------------------------


@pytest.mark.parametrize("level", [-100, -5, 0, 1, 3, 19, 22])
def test_zstd_writes_standard_frames_with_content_size(level):
    a = make(np.float32, (8, 21, 16))
    enc = ZstdCodec(level=level).encode(a)
    assert zstandard.frame_content_size(enc) == a.nbytes
    assert zstandard.ZstdDecompressor().decompress(enc) == a.tobytes()


def test_zstd_decodes_frames_without_content_size():
    a = make(np.uint8, (8, 100))
    enc = zstandard.ZstdCompressor(write_content_size=False).compress(a.tobytes())
    out = np.empty_like(a)
    ZstdCodec().decode(enc, out=out)
    assert np.array_equal(out, a)
    with pytest.raises(DecodeError):
        ZstdCodec().decode(enc, out=np.empty(5, np.uint8))


def test_zstd_level_zero_is_default():
    assert ZstdCodec(level=0) == ZstdCodec(level=3)


@pytest.mark.parametrize(
    "name", ["gzip/0", "gzip/9"] + (["igzip/0", "igzip/3"] if HAVE_ISAL else [])
)
def test_deflate_codecs_write_zlib_streams(name):
    a = make(np.int64, (10, 10))
    assert zlib.decompress(get_codec(name).encode(a)) == a.tobytes()


def test_zstd_chunks_readable_by_plain_hdf5(tmp_path):
    h5py = pytest.importorskip("h5py")
    hdf5plugin = pytest.importorskip("hdf5plugin")
    frames = moving_frames(n=32)
    codec = ZstdCodec(level=3)
    path = tmp_path / "direct.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset(
            "obs", shape=frames.shape, dtype=np.uint8, chunks=(8, 84, 84), **hdf5plugin.Zstd()
        )
        for i in range(0, 32, 8):
            d.id.write_direct_chunk((i, 0, 0), codec.encode(frames[i : i + 8]))
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["obs"][...], frames)


def test_import_is_quiet_and_lazy():
    code = (
        "import sys, chunkstore.codecs as c; "
        "assert 'isal' not in sys.modules, 'isal imported eagerly'; "
        "c.get_codec('zstd-3')"
    )
    res = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
