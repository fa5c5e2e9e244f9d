"""Contract tests every codec runs (numcodecs' ``check_encode_decode`` idea, as a class): subclass
and supply ``factory``.

A new :class:`~chunkstore.abc.Codec` proves itself by subclassing :class:`CodecTests` in a test
module::

    from chunkstore.testing.codecs import CodecTests

    class TestMyCodec(CodecTests):
        def factory(self):
            return MyCodec(level=3)

(or by overriding the ``codec`` fixture, parametrized over several codecs, as
``tests/chunkstore/test_codec_contract.py`` does for every registered one). The tests: every
dtype round-trips bit-exactly (NaN payloads, ``-0.0``, extremes, big-endian, structured, bool,
complex), with and without ``decode(out=)``; empty and non-contiguous input; the config and the
name rebuild an equal codec (through the registry, once registered); damaged chunks raise
:class:`~chunkstore.codecs.DecodeError` (a :class:`~chunkstore.errors.CorruptChunkError`) when
decoded into ``out``, as the chunk store decodes; pickling; ``encode_many``.

Needs pytest (the ``dev`` extra).
"""

from __future__ import annotations

import contextlib
import pickle
from typing import Any

import numpy as np
import pytest

from chunkstore.codecs import Codec, DecodeError, codec_from_config, get_codec

__all__ = ["DTYPES", "SHAPES", "CodecTests", "sample_array"]

#: the dtypes a codec must carry bit-exactly (itemsizes 1 to 16, a byte-swapped one, one of 3 bytes)
DTYPES = [np.dtype(t) for t in (np.uint8, np.int8, np.int16, np.uint16, np.int32, np.int64, np.uint64,
                                np.float16, np.float32, np.float64, np.bool_, np.complex64, np.complex128,
                                ">f4", [("a", "u1"), ("b", "<i2")])]
#: shapes, empty ones included
SHAPES = [(), (0,), (3,), (2, 0, 5), (1, 7), (8, 21, 16)]

#: float bit patterns a codec that goes through floats would change: NaNs with payloads, -0.0, inf
_FLOAT_BITS = {2: [0x7E00, 0xFE00, 0x7C01, 0x7D55, 0x8000, 0x7C00],
               4: [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA5A5A5, 0x80000000, 0x7F800000],
               8: [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF5A5A5A5A5A5A5,
                   0x8000000000000000, 0x7FF0000000000000]}


def sample_array(dtype: Any, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Somewhat compressible data (random bytes in runs of 8), with the dtype's awkward values first."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.3)
    n = int(np.prod(shape))
    raw = np.repeat(rng.integers(0, 256, n * dtype.itemsize // 8 + 1, dtype=np.uint8), 8)
    a = raw[: n * dtype.itemsize].copy().view(dtype).reshape(shape)
    flat = a.reshape(-1)
    if dtype.kind in "fc":  # the patterns as raw bits: building them as floats could quieten a NaN
        part = np.dtype(f"f{dtype.itemsize // 2 if dtype.kind == 'c' else dtype.itemsize}")
        special = np.array(_FLOAT_BITS[part.itemsize], f"u{part.itemsize}").view(part)
        if dtype.kind == "c":
            special = special.view(f"c{2 * part.itemsize}")
        special = special.astype(dtype)  # a byte swap for ">f4": the bits stay
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        special = np.array([info.min, info.max, 0, -1 if info.min else 1], dtype)
    else:
        special = flat[:0]
    k = min(flat.size, special.size)
    flat[:k] = special[:k]
    return a


def raw_bytes(a: np.ndarray) -> np.ndarray:
    """The bytes of ``a`` in C order, as a flat uint8 array (what a codec must give back)."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


class CodecTests:
    """What every codec promises. Subclasses define ``factory() -> Codec`` or override ``codec``."""

    def factory(self) -> Codec:
        raise NotImplementedError("a CodecTests subclass supplies factory() or a codec fixture")

    @pytest.fixture
    def codec(self) -> Codec:
        return self.factory()

    def test_is_a_codec_with_an_id(self, codec):
        assert isinstance(codec, Codec)
        assert codec.get_config()["id"] == codec.codec_id == type(codec).codec_id

    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    def test_every_dtype_round_trips_bit_exactly(self, codec, dtype):
        for shape in SHAPES:
            a = sample_array(dtype, shape)
            enc = codec.encode(a)
            assert isinstance(enc, (bytes, bytearray, memoryview)), type(enc)
            out = np.empty_like(a)
            assert codec.decode(enc, out=out) is out
            np.testing.assert_array_equal(raw_bytes(out), raw_bytes(a), err_msg=f"{dtype} {shape}")
            flat = codec.decode(enc)  # without out: the raw bytes, writable, 1-D uint8
            assert flat.dtype == np.uint8 and flat.ndim == 1 and flat.flags.writeable
            np.testing.assert_array_equal(flat, raw_bytes(a), err_msg=f"{dtype} {shape}")

    def test_empty_input_round_trips(self, codec):
        for a in (np.zeros(0, np.uint8), np.zeros((0, 84, 84), np.float32)):
            assert codec.decode(codec.encode(a), out=np.empty_like(a)).size == 0
            assert codec.decode(codec.encode(a)).size == 0

    def test_non_contiguous_input_encodes_its_c_order(self, codec):
        base = sample_array(np.float32, (6, 10))
        for a in (base[:, ::2], np.asfortranarray(base), base.T, base[::-1]):
            out = np.empty(a.shape, a.dtype)
            codec.decode(codec.encode(a), out=out)
            np.testing.assert_array_equal(raw_bytes(out), raw_bytes(a))

    def test_decode_into_any_out_of_the_same_nbytes(self, codec):
        a = sample_array(np.float32, (4, 10))
        out = np.empty(160, np.uint8)
        codec.decode(codec.encode(a), out=out)
        np.testing.assert_array_equal(out, raw_bytes(a))

    def test_an_out_of_another_size_raises_decode_error(self, codec):
        enc = codec.encode(sample_array(np.uint16, (4, 10)))
        for bad in (np.empty((4, 11), np.uint16), np.empty((3, 10), np.uint16), np.empty(0, np.uint8)):
            with pytest.raises(DecodeError, match="bytes"):
                codec.decode(enc, out=bad)

    def test_a_damaged_chunk_raises_decode_error(self, codec):
        """Truncated, empty or foreign bytes, decoded into ``out`` as the chunk store does."""
        a = sample_array(np.uint8, (16, 64), seed=3)
        enc = bytes(codec.encode(a))
        garbage = np.random.default_rng(7).integers(0, 256, 57, dtype=np.uint8).tobytes()
        for bad in (enc[: len(enc) // 2], enc[:-1], b"", garbage):
            with pytest.raises(DecodeError):
                codec.decode(bad, out=np.empty_like(a))
            with contextlib.suppress(DecodeError):  # without out: that, or bytes where the format
                assert codec.decode(bad).dtype == np.uint8  # cannot tell (none has no framing)

    def test_object_arrays_are_refused(self, codec):
        with pytest.raises(TypeError):
            codec.encode(np.array([object()], dtype=object))

    def test_the_config_rebuilds_an_equal_codec(self, codec):
        config = codec.get_config()
        assert type(codec).from_config(config) == codec
        assert type(codec).from_config({k: v for k, v in config.items() if k != "id"}) == codec
        again = codec_from_config(config)  # through the registry: what a saved file does
        assert again == codec and hash(again) == hash(codec)
        a = sample_array(np.int32, (5, 3))
        np.testing.assert_array_equal(again.decode(codec.encode(a)), raw_bytes(a))

    def test_the_name_parses_back(self, codec):
        assert type(get_codec(codec.name)) is type(codec)
        assert get_codec(codec.name).name == codec.name

    def test_pickles(self, codec):
        clone = pickle.loads(pickle.dumps(codec))
        assert clone == codec
        a = sample_array(np.float64, (3, 5))
        np.testing.assert_array_equal(clone.decode(codec.encode(a)), raw_bytes(a))

    def test_encode_many_is_encode_of_each(self, codec):
        chunks = np.stack([sample_array(np.uint8, (8, 12), seed=s) for s in range(5)])
        data, sizes = codec.encode_many(chunks)
        assert sizes.dtype == np.int64 and sizes.shape == (5,) and int(sizes.sum()) == data.size
        pieces = np.split(data, np.cumsum(sizes)[:-1])
        for chunk, piece in zip(chunks, pieces, strict=True):
            assert piece.tobytes() == bytes(codec.encode(chunk))
