"""Bulk writes: ``ChunkedArray.write`` of many whole chunks (``Codec.encode_many``, ``Tier.put_many``).

The bulk path must be invisible: every item, and the encoded bytes of every chunk, equal what
writing the same rows one at a time gives (codec training included), on every tier; a Ctrl-C at
any point of a bulk write leaves each chunk readable with its contents from before or after.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from conftest import count_events, interrupted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkstore import ChunkedArray
from chunkstore.array import _training
from chunkstore.codecs import codec_names, get_codec
from chunkstore.tiers import DiskTier, HybridTier, MemoryTier

CODECS = ["zstd3", "zstd/-5", "zstd/19", "zstd3+dict", "xor+zstd3", "lz4-block", "xor+lz4-block", "lz4-frame/0",
          "none", "rle", "gzip/6", "blosc2-lz4-5"]
DTYPES = ["u1", "<i2", ">u2", "<f4", "<f8", "?", "<c8"]


def _items(rng: np.random.Generator, n: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    raw = rng.integers(0, 3, (n, *shape, dtype.itemsize), dtype=np.uint8)  # compressible, every dtype
    if dtype.kind == "b":
        raw &= 1
    return np.ascontiguousarray(raw).view(dtype).reshape(n, *shape)


def _chunk_bytes(arr: ChunkedArray) -> dict[int, bytes]:
    table = arr._table
    return {c: bytes(arr.tier.get(table.ref(c))) for c in table.stored().tolist()}


def _twins(capacity, shape, dtype, chunk_len, codec, rng, tier=None):
    """Two arrays with the same history: some rows written, some chunks open, some sealed."""
    arrs = [ChunkedArray(capacity, shape, dtype, chunk_len=chunk_len, codec=codec, max_open=2,
                         tier=None if tier is None else tier()) for _ in range(2)]
    before = _items(rng, capacity, shape, np.dtype(dtype))
    idx = rng.integers(0, capacity, rng.integers(0, capacity + 1))
    for a in arrs:
        a.put(idx, before[idx])
    return arrs


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


# -- the codecs' encode_many -------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(set(CODECS) | set(codec_names())))
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_encode_many_gives_each_chunk_exactly_what_encode_gives(name, threads):
    codec = get_codec(name)
    rng = np.random.default_rng(0)
    for n, shape in ((0, (4, 8)), (1, (4, 8)), (7, (4, 8)), (5, (4, 0)), (9, (3, 33)), (70, (2, 50))):
        chunks = _items(rng, n * int(np.prod(shape[:1])), shape[1:], np.dtype("<u2")).reshape(n, *shape)
        data, sizes = codec.encode_many(chunks, threads=threads)
        assert sizes.dtype == np.int64 and sizes.shape == (n,) and data.dtype == np.uint8
        assert data.size == sizes.sum()
        ends = np.cumsum(sizes)
        for i in range(n):
            assert bytes(data[ends[i] - sizes[i]:ends[i]]) == bytes(codec.encode(chunks[i])), (name, n, i)


def test_encode_many_with_a_trained_dictionary_matches_encode():
    rng = np.random.default_rng(1)
    frames = _items(rng, 2000, (32, 32), np.dtype("u1"))
    codec = get_codec("zstd3+dict").trained(list(frames[:1600]))
    assert codec.name == "zstd/3+dict" and not getattr(codec, "wants_training", False)
    chunks = frames.reshape(500, 4, 32, 32)
    data, sizes = codec.encode_many(chunks, threads=2)
    ends = np.cumsum(sizes)
    assert all(bytes(data[e - s:e]) == bytes(codec.encode(c)) for c, s, e in zip(chunks, sizes, ends, strict=True))


# -- tiers' put_many ------------------------------------------------------------------------------
TIERS = {
    "memory-fixed": lambda d: MemoryTier(segment_bytes=4096),
    "memory-adaptive": lambda d: MemoryTier(segment_bytes=None),
    "disk": lambda d: DiskTier(d, segment_bytes=4096),
    "hybrid": lambda d: HybridTier(8192, d, segment_bytes=4096),
}


@pytest.mark.parametrize("kind", sorted(TIERS))
def test_put_many_puts_every_chunk_where_put_would(kind, tmp_path):
    rng = np.random.default_rng(2)
    sizes = rng.integers(1, 1500, 60)
    sizes[[7, 30]] = 9000  # larger than a segment: a segment of its own
    data = rng.integers(0, 255, int(sizes.sum()), dtype=np.uint8)
    one, many = TIERS[kind](tmp_path / "one"), TIERS[kind](tmp_path / "many")
    for t in (one, many):  # some history: a partly filled append target, a released chunk
        first = t.put(np.arange(100, dtype=np.uint8))
        t.put(np.arange(700, dtype=np.uint8))
        t.release(first)
    ends = np.cumsum(sizes)
    expected = np.array([list(one.put(data[e - s:e])) for s, e in zip(sizes, ends, strict=True)]).T
    refs = many.put_many(data, sizes)
    assert refs.dtype == np.int64 and refs.shape == (3, len(sizes))
    np.testing.assert_array_equal(refs, expected)
    for i, (s, e) in enumerate(zip(sizes, ends, strict=True)):
        assert bytes(np.asarray(many.get(tuple(refs[:, i].tolist())))) == bytes(data[e - s:e])
    assert many.nchunks == one.nchunks and many.used_nbytes == one.used_nbytes
    np.testing.assert_array_equal(many.live_refs(), one.live_refs())
    for i in range(len(sizes)):  # every chunk released: segments recycle as after single puts
        many.release(tuple(refs[:, i].tolist()))
    assert many.nchunks == 1 and many.used_nbytes == 700  # the history's live chunk
    one.close()
    many.close()


def test_put_many_edge_cases():
    tier = MemoryTier(segment_bytes=4096)
    assert tier.put_many(b"", []).shape == (3, 0)
    refs = tier.put_many(b"abcd", [2, 0, 2])  # a zero-byte chunk: put one by one, as put does
    assert [bytes(tier.get(tuple(r))) for r in refs.T.tolist()] == [b"ab", b"", b"cd"]
    with pytest.raises(ValueError, match="sizes sum to 5"):
        tier.put_many(b"abcd", [2, 3])
    with pytest.raises(ValueError, match="sizes must be >= 0"):
        tier.put_many(b"abcd", [6, -2])
    with pytest.raises(TypeError, match="1-D sequence of integers"):
        tier.put_many(b"abcd", [2.5, 1.5])  # not truncated to 2 and 1
    with pytest.raises(TypeError, match="1-D sequence of integers"):
        tier.put_many(b"abcd", [[2], [2]])
    with pytest.raises(ValueError, match="sizes sum to 0"):
        tier.put_many(b"abcd", [])
    tier.close()
    with pytest.raises(ValueError, match="closed"):
        tier.put_many(b"ab", [2])


@pytest.mark.parametrize("name", ["zstd3", "lz4-block", "none"])
def test_encode_many_refuses_what_is_not_chunks_or_a_thread_count(name):
    codec = get_codec(name)
    chunks = np.arange(24, dtype=np.uint8).reshape(3, 8)
    with pytest.raises(TypeError, match="chunks must be a numpy array of shape"):
        codec.encode_many(np.arange(8, dtype=np.uint8))  # 1-D: scalars are no chunks
    with pytest.raises(TypeError, match="chunks must be a numpy array of shape"):
        codec.encode_many([b"ab", b"cd"])
    for threads in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="threads must be an int >= 1"):
            codec.encode_many(chunks, threads=threads)
    data, sizes = codec.encode_many(chunks, threads=2)
    assert data.tobytes() == b"".join(bytes(codec.encode(c)) for c in chunks)
    assert sizes.tolist() == [len(codec.encode(c)) for c in chunks]


# -- bulk writes equal writes one row at a time ------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(codec=st.sampled_from(CODECS), dtype=st.sampled_from(DTYPES),
       shape=st.sampled_from([(), (3,), (4, 5), (0,)]), chunk_len=st.integers(1, 6),
       capacity=st.integers(1, 80), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_a_bulk_write_equals_the_rows_written_one_by_one(codec, dtype, shape, chunk_len, capacity, seed, data):
    rng = np.random.default_rng(seed)
    start = data.draw(st.integers(0, capacity - 1))
    n = data.draw(st.integers(1, capacity - start))
    bulk, single = _twins(capacity, shape, dtype, chunk_len, codec, rng)
    model = np.asarray(bulk[:]).copy()
    rows = _items(rng, n, shape, np.dtype(dtype))
    bulk.write(start, rows)
    for k in range(n):
        single[start + k] = rows[k]
    model[start:start + n] = rows
    assert _same(bulk[:], model) and _same(single[:], model)
    assert _same(bulk.take(np.arange(capacity)), model)  # the native read path too
    for a in (bulk, single):
        a.flush()
    assert _chunk_bytes(bulk) == _chunk_bytes(single)
    assert (bulk.cbytes, bulk.cratio, bulk.codec) == (single.cbytes, single.cratio, single.codec)
    encoded, items = bulk._table.sealed_nbytes()  # the running counts agree with a recount
    assert (encoded, items * bulk._item_nbytes) == (bulk._cbytes_sealed, bulk._raw_sealed)
    assert _same(ChunkedArray.from_state(bulk.state_dict())[:], model)


@pytest.mark.parametrize("value", ["broadcast", "strided", "rows"])
def test_a_long_run_is_written_in_bounded_steps(value):
    from chunkstore.array import _write

    rng = np.random.default_rng(6)
    rows = _items(rng, 200, (10, 6), np.dtype("<i2"))
    src = {"broadcast": np.broadcast_to(rows[7], rows.shape), "strided": np.repeat(rows, 2, axis=0)[::2],
           "rows": rows}[value]
    bulk, single = (ChunkedArray(203, (10, 6), "<i2", chunk_len=3, codec="zstd3") for _ in range(2))
    steps = []
    install = bulk._install_many
    with mock.patch.object(_write, "BULK_MAX_BYTES", 5 * 3 * 120), \
         mock.patch.object(bulk, "_install_many", lambda c, r: (steps.append(len(c)), install(c, r))):
        bulk[1:201] = src
    for k in range(200):
        single[1 + k] = src[k]
    assert steps == [5] * 13  # 66 whole chunks, 5 chunks' bytes a step (the 66th alone: a single seal)
    assert _same(bulk[:], single[:])
    bulk.flush()
    single.flush()
    assert _chunk_bytes(bulk) == _chunk_bytes(single)


@pytest.mark.parametrize("tier", ["memory", "disk", "hybrid"])
def test_bulk_writes_equal_single_writes_on_every_tier(tier, tmp_path):
    make = {"memory": lambda: MemoryTier(segment_bytes=4096),
            "disk": lambda: DiskTier(tmp_path / f"d{len(list(tmp_path.iterdir()))}", segment_bytes=4096),
            "hybrid": lambda: HybridTier(8192, tmp_path / f"h{len(list(tmp_path.iterdir()))}",
                                         segment_bytes=4096)}[tier]
    rng = np.random.default_rng(3)
    bulk, single = _twins(300, (40,), "u1", 4, "zstd3", rng, tier=make)
    for start, n in ((0, 120), (37, 200), (5, 295), (290, 10)):
        rows = _items(rng, n, (40,), np.dtype("u1"))
        bulk.write(start, rows)
        for k in range(n):
            single[start + k] = rows[k]
        np.testing.assert_array_equal(bulk[:], single[:])
    bulk.flush()
    single.flush()
    assert _chunk_bytes(bulk) == _chunk_bytes(single)
    np.testing.assert_array_equal(bulk.tier.live_refs()[2].sum(), bulk.cbytes)
    bulk.close()
    single.close()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunk_len=st.integers(2, 5), start=st.integers(0, 9), seed=st.integers(0, 2**32 - 1))
def test_a_codec_trains_after_the_same_chunk_in_bulk_as_one_by_one(chunk_len, start, seed):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 4, (64, 64), dtype=np.uint8)
    frames = np.stack([np.roll(base, i % 7, axis=1) ^ (rng.integers(0, 8, (64, 64)) == 0)
                       for i in range(700)]).astype(np.uint8)
    # trained after ~540 frames of 4 KB (half of them, the even chunks, are the >= 1 MB it trains on)
    with mock.patch.object(_training, "TRAIN_AFTER_BYTES", 2_200_000):
        bulk, single = (ChunkedArray(720, (64, 64), np.uint8, chunk_len=chunk_len, codec="zstd3+dict")
                        for _ in range(2))
        bulk.write(start, frames[:400])  # (the codec cannot train yet: too few bytes)
        bulk.write(start + 400, frames[400:])  # training falls inside this bulk write
        for k, f in enumerate(frames):
            single[start + k] = f
    assert single.codec.name == "zstd/3+dict" and not single.codec.wants_training  # it did train
    assert bulk.codec == single.codec  # the same dictionary: trained on the same chunks
    bulk.flush()
    single.flush()
    assert _chunk_bytes(bulk) == _chunk_bytes(single)
    np.testing.assert_array_equal(bulk[start:start + 700], frames)


# -- a Ctrl-C anywhere in a bulk write ---------------------------------------------------------------
ROWS, ROW, L = 64, 500, 4


def _interrupt_array(kind, directory, old):
    tier = {"memory": lambda: MemoryTier(segment_bytes=4096),
            "disk": lambda: DiskTier(directory, segment_bytes=4096),
            "hybrid": lambda: HybridTier(8192, directory, segment_bytes=4096)}[kind]()
    arr = ChunkedArray(ROWS, (ROW,), np.uint8, chunk_len=L, codec="zstd3", tier=tier, own_tier=True)
    arr[:40] = old[:40]  # stored chunks the bulk write replaces (their bytes are released)
    arr[45] = old[45]  # an open chunk inside the bulk write's whole chunks
    arr.take(np.arange(ROWS))  # a native read: the address table is current
    return arr


@pytest.mark.parametrize("kind", ["memory", "disk", "hybrid"])
def test_an_interrupted_bulk_write_leaves_every_chunk_before_or_after(kind, tmp_path):
    rng = np.random.default_rng(4)
    old = rng.integers(0, 255, (ROWS, ROW), dtype=np.uint8)
    new = rng.integers(0, 255, (ROWS, ROW), dtype=np.uint8)
    before = np.asarray(_interrupt_array(kind, tmp_path / "ref", old)[:])
    after = before.copy()
    after[2:62] = new[2:62]

    def bulk(arr):
        arr.write(2, new[2:62])  # a head, 14 whole chunks (one of them open), a tail

    probe = _interrupt_array(kind, tmp_path / "probe", old)
    n = count_events(lambda: bulk(probe))
    probe.close()
    assert n > 100, n
    points, failures = 0, []
    for k in range(1, n + 1, 1 if kind == "memory" else 3):
        arr = _interrupt_array(kind, tmp_path / f"k{k}", old)
        points += interrupted(lambda arr=arr: bulk(arr), k)
        try:
            got = np.asarray(arr.take(np.arange(ROWS)))  # native read
            with_python = np.asarray(arr[:])
            for c in range(ROWS // L):
                rows = slice(c * L, (c + 1) * L)
                assert (np.array_equal(got[rows], before[rows]) or np.array_equal(got[rows], after[rows])), c
            np.testing.assert_array_equal(got, with_python)
            bulk(arr)  # the retry finishes the write
            np.testing.assert_array_equal(arr.take(np.arange(ROWS)), after)
            arr.flush()
            live = arr.tier.live_refs()  # nothing leaked: the repair released orphaned chunks
            assert live.shape[1] == arr.nchunks and live[2].sum() == arr.cbytes
        except Exception as e:  # any error after an interrupt is the failure
            failures.append((k, f"{type(e).__name__}: {e}"))
        arr.close()
    assert points > 30, points
    assert not failures, failures[:5]
