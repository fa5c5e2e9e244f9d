"""ChunkedArray against a plain numpy array: every codec, every dtype (the contract on every tier:
test_array_contract.py)."""

from __future__ import annotations

import pickle
import warnings

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant, precondition, rule

from chunkstore import ChunkedArray, CorruptChunkError, LRUChunkCache, MemoryTier
from chunkstore.codecs import codec_names, get_codec
from chunkstore.testing.arrays import ANY_DTYPES, ArrayMachine

BASIC_DTYPES = [np.uint8, np.int16, np.int64, np.float16, np.float32, np.float64, np.bool_]
#: and every other kind numpy has (void, strings, structured, datetimes, complex, big-endian)
DTYPES = [*BASIC_DTYPES, *(d for d in ANY_DTYPES if np.dtype(d) not in {np.dtype(b) for b in BASIC_DTYPES})]
SHAPES = [(), (3,), (2, 5), (4, 6, 6), (3, 210, 160)]


def _available_codecs() -> list[str]:
    names = []
    extra = ["zstd-5", "zstd1", "lz4-block/-3", "lz4-block/9", "xor+lz4-block", "xor+zstd1"]
    for name in [*codec_names(), *extra]:
        try:
            get_codec(name)
        except ImportError:
            continue
        names.append(name)
    return names


CODECS = _available_codecs()


def random_items(rng: np.random.Generator, n: int, item_shape, dtype) -> np.ndarray:
    """Arbitrary bit patterns (NaN payloads, -0.0, inf) with runs, so codecs have work."""
    dtype = np.dtype(dtype)
    shape = (n, *item_shape)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
    if nbytes and rng.random() < 0.5:  # long runs of one byte value
        raw[: nbytes // 2] = raw[0]
    return raw.view(dtype).reshape(shape)


def assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8))


class ChunkedArrayMachine(ArrayMachine):
    """The array contract (:class:`chunkstore.testing.arrays.ArrayMachine`: writes, discards,
    remaps and reads beside a numpy array) with every codec, dtype and cache, and what only a
    ChunkedArray has: ``out=``, ``arr[i]``, pickles, the tier's accounting."""

    dtypes = DTYPES
    shapes = SHAPES
    max_capacity = 60
    chunk_lens = st.sampled_from([1, 3, 8, 16])

    def make(self, data, capacity, item_shape, dtype, **kw):
        codec = data.draw(st.sampled_from(CODECS), label="codec")
        cache = data.draw(st.sampled_from([0, 1 << 16, 1 << 22]), label="cache")
        return ChunkedArray(capacity, item_shape, dtype, codec=codec, cache=cache, **kw)

    def _indices(self, n: int) -> np.ndarray:
        return self.rng.integers(-self.model.shape[0], self.model.shape[0], size=n)

    @rule(n=st.integers(1, 20))
    def read_into_out(self, n):
        idx = self._indices(n)
        out = np.empty((n, *self.model.shape[1:]), self.model.dtype)
        got = self.arr.take(idx, out=out)
        assert np.shares_memory(got, out)
        assert_same_bits(out, self.model[idx])

    @rule(i=st.integers(0, 10**6))
    def read_one(self, i):
        i %= self.model.shape[0]
        assert_same_bits(self.arr[i], self.model[i])

    @rule()
    def flush_seals_everything(self):
        self.arr.flush()
        assert not self.arr.nopen

    @precondition(lambda self: self.model.nbytes < 400_000)
    @rule()
    def pickle_round_trip(self):
        clone = pickle.loads(pickle.dumps(self.arr))
        assert_same_bits(np.asarray(clone), self.model)

    @invariant()
    def reads_as_numpy(self):
        if hasattr(self, "arr"):
            assert_same_bits(np.asarray(self.arr), self.model)

    @invariant()
    def accounting_matches_tier(self):
        """The tier holds exactly the sealed chunks' bytes: no hidden copies."""
        if not hasattr(self, "arr"):
            return
        stored = self.arr.stored_chunks()
        assert self.arr.tier.used_nbytes == sum(len(self.arr.chunk_bytes(int(c))) for c in stored)
        assert self.arr.cbytes == self.arr.tier.used_nbytes + self.arr.open_nbytes


TestChunkedArrayMachine = ChunkedArrayMachine.TestCase
TestChunkedArrayMachine.settings = settings(
    max_examples=150,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_codec_every_dtype_round_trips(codec, dtype):
    rng = np.random.default_rng(0)
    arr = ChunkedArray(50, (3, 7), dtype, chunk_len=8, codec=codec)
    want = random_items(rng, 50, (3, 7), dtype)
    if np.dtype(dtype).kind == "f":
        want.reshape(-1)[:4] = np.array([np.nan, -0.0, np.inf, -np.inf], dtype=dtype)
    arr[:] = want
    arr.flush()
    assert arr.nchunks == arr.nchunks_total == 7
    assert_same_bits(np.asarray(arr), want)
    idx = rng.integers(0, 50, size=200)
    assert_same_bits(arr.take(idx), want[idx])


def test_unwritten_items_read_as_zeros():
    arr = ChunkedArray(100, (2,), np.float32, chunk_len=16)
    arr[40] = [1.5, 2.5]
    got = arr[np.array([0, 39, 40, 41, 99])]
    assert got.tolist() == [[0, 0], [0, 0], [1.5, 2.5], [0, 0], [0, 0]]


@pytest.mark.parametrize("dtype", ["V3", "S3", "U2", [("a", "<i4"), ("b", "S2")]], ids=str)
@pytest.mark.parametrize("codec, cache", [("zstd1", 0), ("zstd1", 1 << 16), ("lz4-frame/1", 0)])
def test_unwritten_items_are_zero_bytes_in_every_dtype(dtype, codec, cache):
    """Zeros are all-zero bytes on every read path: ``fill(0)`` / ``out[...] = 0`` raise for void
    dtypes and write ``b"0"`` into strings, so neither may make an unwritten item."""
    dtype = np.dtype(dtype)
    arr = ChunkedArray(20, (2,), dtype, chunk_len=4, codec=codec, cache=cache)
    model = np.zeros((20, 2), dtype)
    items = random_items(np.random.default_rng(1), 20, (2,), dtype)
    arr[0:4] = items[:4]  # seals chunk 0: its buffer becomes a spare
    arr[9] = items[9]  # opens chunk 2 in that spare
    model[:4], model[9] = items[:4], items[9]
    assert_same_bits(np.asarray(arr), model)
    assert_same_bits(arr.take_padded(np.array([-1, 9, 17])), np.stack([np.zeros(2, dtype), model[9], model[17]]))
    arr.discard(0, 4)
    model[:4] = np.zeros((), dtype)
    assert_same_bits(arr[np.array([0, 3, 9, 19])], model[[0, 3, 9, 19]])
    arr.clear()
    arr[6] = items[6]
    assert_same_bits(np.asarray(arr), np.where(np.arange(20)[:, None] == 6, items, np.zeros((), dtype)))


def test_a_subarray_dtype_joins_the_item_shape():
    """As in ``np.zeros(n, ("u1", (3,)))``: the item shape grows, the dtype is the base."""
    arr = ChunkedArray(8, (2,), ("u1", (3,)), chunk_len=4, codec="zstd1")
    assert arr.dtype == np.uint8 and arr.item_shape == (2, 3) and arr.shape == (8, 2, 3)
    want = np.arange(48, dtype=np.uint8).reshape(8, 2, 3)
    arr[:] = want
    assert_same_bits(arr.take(np.array([7, 0])), want[[7, 0]])


def test_sequential_writer_seals_each_chunk_once():
    arr = ChunkedArray(64, (4,), np.uint8, chunk_len=16, codec="zstd1")
    for i in range(64):
        arr[i] = np.full(4, i // 16, np.uint8)
        assert arr.nchunks == (i + 1) // 16
    assert not arr.nopen and arr.cratio > 1



def test_open_empty_opens_only_the_chunks_that_hold_nothing():
    """An appender's ``seal_full(full)`` then ``open_empty(next)``: empty chunks open (reading zeros); a
    stored or open chunk stays as it is; indices out of range are ignored."""
    arr = ChunkedArray(20, (2,), np.uint8, chunk_len=4, codec="zstd1")
    model = np.zeros((20, 2), np.uint8)
    arr.writable_chunk(0)[:] = model[0:4] = 1
    arr.write(8, np.full((4, 2), 3, np.uint8))  # a whole chunk: stored at once
    model[8:12] = 3
    arr.writable_chunk(4)[:2] = model[16:18] = 7  # open, partly written
    arr.seal_full([0])
    arr.open_empty([1, 2, 4, 99, -1])
    chunks, _ = arr.open_chunks()
    assert sorted(chunks.tolist()) == [1, 4]
    assert arr.nchunks == 2  # chunks 0 (sealed now) and 2 (stored before, not reopened)
    assert np.array_equal(arr.take(np.arange(20)), model)
    arr.flush()
    assert np.array_equal(arr.take(np.arange(20)), model)

def test_rewrite_of_sealed_chunk_keeps_other_items():
    arr = ChunkedArray(32, (), np.int64, chunk_len=8)
    arr[:] = np.arange(32)
    arr[10] = -1
    arr.flush()
    want = np.arange(32)
    want[10] = -1
    assert np.array_equal(np.asarray(arr), want)


def test_ndarray_behaviour():
    arr = ChunkedArray(20, (2, 3), np.int16, chunk_len=4)
    model = np.arange(120, dtype=np.int16).reshape(20, 2, 3)
    arr[:] = model
    assert arr.shape == model.shape and arr.dtype == model.dtype and len(arr) == 20
    assert np.array_equal(arr[-1], model[-1])
    assert np.array_equal(arr[2:11:3], model[2:11:3])
    assert np.array_equal(arr[[1, 5], 1], model[[1, 5], 1])
    assert np.array_equal(arr[3, :, 2], model[3, :, 2])
    assert np.array_equal(arr[..., 0], model[..., 0])
    assert np.array_equal(arr[np.array([[0, 1], [2, 19]])], model[np.array([[0, 1], [2, 19]])])
    mask = np.zeros(20, bool)
    mask[[2, 7]] = True
    assert np.array_equal(arr[mask], model[mask])
    assert np.array_equal(np.stack(list(arr)), model)
    assert np.allclose(arr, model)
    arr[4, 1, 2] = 999
    model[4, 1, 2] = 999
    assert np.array_equal(np.asarray(arr), model)


def test_bad_input_gives_clear_errors():
    arr = ChunkedArray(10, (3,), np.uint8, chunk_len=4)
    with pytest.raises(ValueError, match="shape"):
        arr[0] = np.zeros(4)
    with pytest.raises(ValueError, match="without loss"):
        arr[0] = np.array([0.5, 1, 2])
    with pytest.raises(ValueError, match="without loss"):
        arr[0] = np.array([256, 0, 0])
    arr[0] = np.array([1.0, 2.0, 255.0])  # exact values cast fine
    assert arr[0].tolist() == [1, 2, 255]
    with pytest.raises(IndexError, match="out of bounds"):
        arr[10]
    with pytest.raises(IndexError, match="out of bounds"):
        arr.take([0, -11])
    with pytest.raises(IndexError, match="integers"):
        arr.take(np.array([0.0]))
    with pytest.raises(ValueError, match="out has"):
        arr.take([0, 1], out=np.empty((3, 3), np.uint8))
    with pytest.raises(ValueError, match="capacity"):
        ChunkedArray(0)
    with pytest.raises(ValueError, match="chunk_len"):
        ChunkedArray(10, chunk_len=0)
    with pytest.raises(ValueError):
        ChunkedArray(10, codec="nosuchcodec")


@pytest.mark.parametrize("kw, exc, match", [
    ({"capacity": 2.5}, ValueError, "capacity must be a whole number"),
    ({"capacity": "10"}, TypeError, "capacity must be an int"),
    ({"capacity": None}, TypeError, "capacity must be an int"),
    ({"capacity": -3}, ValueError, "capacity must be >= 1"),
    ({"chunk_len": 2.5}, ValueError, "chunk_len must be a whole number"),
    ({"chunk_len": True}, TypeError, "chunk_len must be an int"),
    ({"max_open": 0}, ValueError, "max_open must be >= 1"),
    ({"item_shape": (2.5,)}, ValueError, "item_shape"),
    ({"item_shape": (-1, 2)}, ValueError, "item_shape"),
    ({"item_shape": "ab"}, TypeError, "item_shape"),
    ({"dtype": object}, TypeError, "object dtypes"),
    ({"tier": "memory"}, TypeError, "tier must be a chunkstore Tier"),
    ({"tier": 3}, TypeError, "tier must be a chunkstore Tier"),
    ({"threads": 0}, ValueError, "threads must be >= 1"),
    ({"threads": -1}, ValueError, "threads must be >= 1"),
    ({"threads": "2"}, TypeError, "threads must be an int"),
    ({"cache": -1}, ValueError, "cache must be >= 0"),
    ({"cache": "big"}, TypeError, "cache must be an int"),
])
def test_bad_constructor_arguments_are_one_line_errors_naming_them(kw, exc, match):
    args = {"capacity": 10, "item_shape": (2,), "dtype": np.uint8, **kw}
    with pytest.raises(exc, match=match) as info:
        ChunkedArray(args.pop("capacity"), args.pop("item_shape"), args.pop("dtype"), **args)
    assert "\n" not in str(info.value)


def test_whole_floats_and_numpy_ints_are_counts():
    arr = ChunkedArray(np.int64(10), (np.int32(2), 3.0), chunk_len=4.0, threads=np.uint8(1))
    assert arr.shape == (10, 2, 3) and arr.chunk_len == 4 and arr.threads == 1


@pytest.mark.parametrize("value", [np.array(["a", "b"]), np.array([None, 1], dtype=object),
                                   np.array([1 + 1j, 2]), np.array([1.5, 2.0]), np.array([300, 1])])
def test_values_that_do_not_fit_the_dtype_are_a_value_error(value):
    arr = ChunkedArray(4, (2,), np.uint8, chunk_len=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning on the way
        with pytest.raises(ValueError, match="array: expected dtype uint8, got dtype"):
            arr[1] = value
    assert not np.asarray(arr).any()


def test_writes_copy_never_alias():
    arr = ChunkedArray(8, (3,), np.float64, chunk_len=8)
    src = np.ones(3)
    arr[0] = src
    src[:] = 7
    assert arr[0].tolist() == [1, 1, 1]


def test_corrupt_chunk_names_array_and_chunk():
    tier = MemoryTier()
    arr = ChunkedArray(64, (8,), np.uint8, chunk_len=16, codec="zstd1", tier=tier, name="obs")
    arr[:] = np.random.default_rng(0).integers(0, 4, size=(64, 8), dtype=np.uint8)
    data = bytearray(arr.chunk_bytes(2))
    data[len(data) // 2 :] = b"\xff" * (len(data) - len(data) // 2)
    arr.put_chunk_bytes(2, bytes(data))
    with pytest.raises(CorruptChunkError, match="obs: chunk 2") as info:
        arr.take([33])
    assert info.value.array == "obs" and info.value.chunk == 2


def test_cache_hits_and_shared_cache():
    cache = LRUChunkCache(1 << 20, name="shared")
    a = ChunkedArray(64, (4,), np.uint8, chunk_len=8, cache=cache)
    b = ChunkedArray(64, (4,), np.uint8, chunk_len=8, cache=cache)
    a[:] = 1
    b[:] = 2
    assert a[3].tolist() == [1] * 4 and b[3].tolist() == [2] * 4
    assert cache.misses == 2 and len(cache) == 2
    assert a[5].tolist() == [1] * 4
    assert cache.hits == 1
    a[3] = 9  # a rewrite must never serve the stale decoded chunk
    a.flush()
    assert a[3].tolist() == [9] * 4


def test_cache_budget_is_respected():
    cache = LRUChunkCache(3 * 8 * 4)
    arr = ChunkedArray(64, (4,), np.uint8, chunk_len=8, cache=cache)
    arr[:] = 3
    for i in range(0, 64, 8):
        arr[i]
    assert cache.nbytes <= cache.max_bytes and len(cache) == 3


def test_parallel_decode_matches_serial(monkeypatch):
    from chunkstore.array import _read

    monkeypatch.setattr(_read, "_PARALLEL_MIN_CHUNK_BYTES", 0)  # these chunks are small
    rng = np.random.default_rng(1)
    data = random_items(rng, 4096, (16, 16), np.uint8)
    serial = ChunkedArray(4096, (16, 16), np.uint8, chunk_len=16, cache=0, threads=1)
    parallel = ChunkedArray(4096, (16, 16), np.uint8, chunk_len=16, cache=0, threads=4)
    serial[:] = data
    parallel[:] = data
    idx = rng.integers(0, 4096, size=1000)
    assert_same_bits(parallel.take(idx), data[idx])
    assert_same_bits(serial.take(idx), data[idx])


def test_put_chunk_bytes_installs_verbatim():
    src = ChunkedArray(40, (5,), np.float32, chunk_len=8, codec="zstd1")
    src[:] = np.arange(200, dtype=np.float32).reshape(40, 5)
    dst = ChunkedArray(40, (5,), np.float32, chunk_len=8, codec="zstd1")
    for c in src.stored_chunks():
        dst.put_chunk_bytes(int(c), src.chunk_bytes(int(c)))
    assert np.array_equal(np.asarray(dst), np.asarray(src))
    assert dst.cbytes == src.cbytes


def test_adopt_chunks_equals_put_chunk_bytes_and_refuses_misuse():
    """Bulk installation of chunks the tier already holds (the lazy load path)."""
    src = ChunkedArray(37, (5,), np.float32, chunk_len=8, codec="zstd1")  # a short last chunk
    src[:] = np.arange(185, dtype=np.float32).reshape(37, 5)
    tier = MemoryTier()
    chunks = src.stored_chunks()
    refs = np.array([tier.put(bytes(src.chunk_bytes(int(c)))) for c in chunks], np.int64).T
    dst = ChunkedArray(37, (5,), np.float32, chunk_len=8, codec="zstd1", tier=tier)
    dst.adopt_chunks(chunks, refs)
    assert np.array_equal(np.asarray(dst), np.asarray(src))
    assert (dst.cbytes, dst.cratio, dst.nchunks) == (src.cbytes, src.cratio, src.nchunks)
    with pytest.raises(ValueError, match="not stored or open"):
        dst.adopt_chunks(chunks[:1], refs[:, :1])
    with pytest.raises(IndexError, match="increase"):
        dst.adopt_chunks(chunks[::-1], refs[:, ::-1])
    fresh = ChunkedArray(37, (5,), np.float32, chunk_len=8, codec="zstd1", tier=tier)
    fresh[1] = np.ones(5, np.float32)  # chunk 0 is open
    with pytest.raises(ValueError, match="not stored or open"):
        fresh.adopt_chunks(chunks, refs)


def _frames(n: int, seed: int = 0) -> np.ndarray:
    """Image-like frames: a fixed background with a few moving sprites."""
    rng = np.random.default_rng(seed)
    background = rng.integers(0, 8, size=(48, 48), dtype=np.uint8) * 16
    frames = np.repeat(background[None], n, axis=0)
    for t in range(n):
        for k in range(3):
            y, x = (7 * t + 13 * k) % 40, (5 * t + 29 * k) % 40
            frames[t, y : y + 6, x : x + 6] = 200 + k
    return frames


def test_dictionary_codec_trains_once_and_keeps_data(monkeypatch):
    from chunkstore.array import _training

    monkeypatch.setattr(_training, "TRAIN_AFTER_BYTES", 1000 * 48 * 48)
    frames = _frames(1200)
    trained = ChunkedArray(1200, (48, 48), np.uint8, chunk_len=4, codec="zstd3+dict")
    plain = ChunkedArray(1200, (48, 48), np.uint8, chunk_len=4, codec="zstd3")
    for t in range(1200):  # item by item, as a replay buffer writes
        trained[t] = frames[t]
        plain[t] = frames[t]
    assert trained.codec.name == "zstd/3+dict" and not trained.codec.wants_training
    assert_same_bits(np.asarray(trained), frames)
    assert trained.cbytes < plain.cbytes  # the dictionary pays for itself
    assert trained.tier.used_nbytes == trained.cbytes
    clone = pickle.loads(pickle.dumps(trained))
    assert clone.codec == trained.codec
    assert_same_bits(np.asarray(clone), frames)
    clone[5] = frames[900]
    assert_same_bits(clone[5], frames[900])


def test_dictionary_codec_untrainable_data_falls_back_to_plain_zstd():
    arr = ChunkedArray(16, (2,), np.uint8, chunk_len=4, codec="zstd3+dict")
    arr[:] = np.arange(32, dtype=np.uint8).reshape(16, 2)
    arr.train_codec()  # 32 bytes of samples: zstd cannot train on that
    assert arr.codec.name == "zstd/3"
    assert np.array_equal(np.asarray(arr), np.arange(32, dtype=np.uint8).reshape(16, 2))


def test_dictionary_kept_only_when_it_beats_plain_zstd_on_held_out_chunks(monkeypatch):
    """Noise gains nothing from a dictionary: the array settles on plain zstd, data intact."""
    from chunkstore.array import _training

    monkeypatch.setattr(_training, "TRAIN_AFTER_BYTES", 2 << 20)
    rng = np.random.default_rng(3)
    noise = rng.integers(0, 256, size=(1200, 48, 48), dtype=np.uint8)
    arr = ChunkedArray(1200, (48, 48), np.uint8, chunk_len=8, codec="zstd3+dict")
    arr[:] = noise
    assert arr.codec.name == "zstd/3"
    assert_same_bits(np.asarray(arr), noise)
