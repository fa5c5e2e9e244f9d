"""zstd with a trained dictionary compresses through libzstd with the dictionary attached
(chunkstore.codecs._zstd_attach): standard frames any zstd reads, every dtype bit-exact,
the same bytes from every thread, and python-zstandard's path where libzstd will not do it."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from chunkstore import get_codec
from chunkstore.codecs import _zstd_attach
from chunkstore.testing.arrays import ANY_DTYPES


def _frames(n: int = 1200, seed: int = 0) -> np.ndarray:
    """Frames that look like a game's: a fixed background, a few moving blocks."""
    rng = np.random.default_rng(seed)
    bg = np.repeat(rng.integers(0, 200, (21, 1), dtype=np.uint8), 4, axis=0) * np.ones((1, 84), np.uint8)
    out = np.repeat(bg[None], n, axis=0)
    for t in range(n):
        y, x = (3 * t) % 70, (5 * t) % 70
        out[t, y:y + 8, x:x + 8] = 255
    return out


@pytest.fixture(scope="module")
def trained():
    codec = get_codec("zstd3+dict").trained(list(_frames()))
    assert codec.name == "zstd/3+dict"
    return codec


@pytest.fixture(scope="module")
def fallback(trained):
    """The same codec on python-zstandard's path (as when no libzstd loads)."""
    clone = type(trained)(level=trained.level, dictionary=trained.dictionary)
    clone._zdict._attached[clone.level] = None
    return clone


def _raw(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def test_the_attached_path_is_taken_where_libzstd_loads(trained):
    assert trained._zdict.attached(trained.level) is not None


def test_frames_are_standard_zstd_frames_with_the_header_python_zstandard_writes(trained, fallback):
    chunk = _frames(8, seed=1)[:4]
    ours, theirs = trained.encode(chunk), fallback.encode(chunk)
    for frame in (ours, theirs):
        params = zstandard.get_frame_parameters(frame)
        assert params.content_size == chunk.nbytes
        assert params.dict_id == zstandard.ZstdCompressionDict(trained.dictionary).dict_id()
        assert not params.has_checksum
    plain = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(trained.dictionary))
    assert plain.decompress(ours) == chunk.tobytes()  # python-zstandard reads what libzstd wrote
    assert np.array_equal(fallback.decode(ours, out=np.empty_like(chunk)), chunk)
    assert np.array_equal(trained.decode(theirs, out=np.empty_like(chunk)), chunk)


def test_attaching_keeps_the_ratio_on_game_frames(trained, fallback):
    frames = _frames(400, seed=2).reshape(100, 4, 84, 84)
    ours = sum(len(trained.encode(c)) for c in frames)
    theirs = sum(len(fallback.encode(c)) for c in frames)
    assert ours <= 1.05 * theirs, (ours, theirs)


@pytest.mark.parametrize("dtype", ANY_DTYPES, ids=str)
def test_every_dtype_round_trips_bit_exactly(trained, dtype):
    rng = np.random.default_rng(3)
    for shape in [(0,), (1,), (7, 3), (4, 84, 84)]:
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        a = np.repeat(rng.integers(0, 256, n // 4 + 1, dtype=np.uint8), 4)[:n].view(dtype).reshape(shape)
        enc = trained.encode(a)
        assert np.array_equal(_raw(trained.decode(enc, out=np.empty_like(a))), _raw(a))
        assert np.array_equal(trained.decode(enc), _raw(a))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(a=st.sampled_from([np.dtype(d) for d in ("u1", "i2", "f4", "f8", "c8", "?")]).flatmap(
    lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=12))))
def test_hypothesis_round_trip_and_agreement_with_python_zstandard(trained, fallback, a):
    for writer in (trained, fallback):
        enc = writer.encode(a)
        for reader in (trained, fallback):
            assert np.array_equal(reader.decode(enc), _raw(a))


def test_threads_get_the_bytes_one_thread_gets(trained):
    chunks = _frames(96, seed=4).reshape(24, 4, 84, 84)
    want = [trained.encode(c) for c in chunks]
    got: dict[int, list[bytes]] = {}

    def work(k: int) -> None:
        got[k] = [trained.encode(c) for c in chunks[::-1]][::-1]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(got[k] == want for k in range(4))
    data, sizes = trained.encode_many(chunks, threads=2)
    assert b"".join(want) == data.tobytes() and sizes.tolist() == [len(w) for w in want]


def test_without_a_usable_libzstd_the_codec_uses_python_zstandard(monkeypatch, trained):
    monkeypatch.setattr(_zstd_attach, "_load", lambda: None)
    assert _zstd_attach.encoder(trained.dictionary, 3) is None

    def refuse(*args, **kwargs):
        raise OSError("ZSTD_CCtx_setParameter: Unsupported parameter")

    monkeypatch.setattr(_zstd_attach, "_load", lambda: object())
    monkeypatch.setattr(_zstd_attach, "AttachedEncoder", refuse)
    assert _zstd_attach.encoder(trained.dictionary, 3) is None
    codec = type(trained)(level=3, dictionary=trained.dictionary)  # a fresh dictionary object asks again
    chunk = _frames(4, seed=5)
    assert codec._zdict.attached(3) is None
    enc = codec.encode(chunk)
    assert enc == zstandard.ZstdCompressor(level=3, dict_data=codec._zdict.compression_dict(3)).compress(
        chunk.tobytes())
    assert np.array_equal(trained.decode(enc, out=np.empty_like(chunk)), chunk)
