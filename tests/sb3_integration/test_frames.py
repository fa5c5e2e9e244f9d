"""FrameStore (frame dedup), ObservationView and the add() dtype policy."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from conftest import frame_stack_stream

from chunkstore import array as chunk_array
from chunkstore.casting import lossless_cast
from sb3_integration.buffers.observations import coerce_obs
from sb3_integration.buffers.views import ObservationView
from sb3_integration.engine.frames import DETECT_MAX_PUTS, FrameStore, StackLayout, detect_layout


def fill_and_check(fs, stream, n_rows, n_envs):
    """Drive ``fs`` like a replay buffer and compare every read with a plain numpy mirror."""
    first = None
    for t, (obs, nxt) in enumerate(stream):
        if first is None:
            first = obs
            mirror = np.zeros((2, n_rows, *obs.shape), obs.dtype)
        row = t % n_rows
        if t >= n_rows:
            fs.release_before((row + 1) % n_rows)
        fs.put(0, row, obs)
        fs.put(1, row, nxt)
        mirror[0, row], mirror[1, row] = obs, nxt
        if t % 5 == 4 or t < 3:
            rows = np.random.default_rng(t).integers(0, n_rows, 40)
            envs = np.random.default_rng(t + 1).integers(0, n_envs, 40)
            got_o, got_n = fs.gather([(0, rows), (1, rows)], envs)
            assert np.array_equal(got_o.view(np.uint8), mirror[0, rows, envs].view(np.uint8))
            assert np.array_equal(got_n.view(np.uint8), mirror[1, rows, envs].view(np.uint8))
    return mirror


@pytest.mark.parametrize("n_envs", [1, 3])
@pytest.mark.parametrize("channels_last", [False, True])
def test_stacked_frames_stored_once(n_envs, channels_last):
    frame = (6, 5, 3) if channels_last else (1, 6, 5)
    fs = FrameStore((4, 6, 5) if not channels_last else (6, 5, 12), np.uint8, 30, n_envs, chunk_len=8)
    T = 200
    fill_and_check(fs, frame_stack_stream(T, n_envs, frame=frame, channels_last=channels_last), 30, n_envs)
    lay = fs.layout
    assert lay is not None and lay.depth == 4
    assert lay.axis == (2 if channels_last else 0) and lay.width == (3 if channels_last else 1)
    # one new frame per transition, +1 per reset (whose padding frames are not stored)
    assert fs.frames_written <= T * n_envs * 1.2 + 8


def test_frames_released_fifo_memory_bounded():
    n_rows = 20
    fs = FrameStore((4, 6, 5), np.uint8, n_rows, 1, chunk_len=4)
    fill_and_check(fs, frame_stack_stream(600, 1), n_rows, 1)
    arr = fs.frames
    live_frames = n_rows * 1.2 + 8
    assert arr.nchunks * arr.chunk_len <= live_frames + 3 * arr.chunk_len
    assert fs.frames_written > 500


def test_many_envs_share_one_array_without_reencoding(monkeypatch):
    from chunkstore.codecs import ZstdCodec

    encodes = []
    real_encode = ZstdCodec.encode
    monkeypatch.setattr(ZstdCodec, "encode", lambda self, a: encodes.append(len(a)) or real_encode(self, a))
    n_envs = chunk_array.MAX_OPEN_CHUNKS + 2
    fs = FrameStore((4, 6, 5), np.uint8, 12, n_envs, chunk_len=4, codec="zstd3")
    fill_and_check(fs, frame_stack_stream(80, n_envs), 12, n_envs)
    arr = fs.frames
    assert arr.max_open > n_envs and arr.nopen <= n_envs
    # every env keeps its chunk open: each chunk is encoded once, when full, never reopened
    assert len(encodes) <= fs.frames_written // arr.chunk_len


def test_float_frames_bit_exact_negative_zero_and_nan():
    fs = FrameStore((4, 3), np.float32, 10, 1, chunk_len=4)
    obs = np.zeros((1, 4, 3), np.float32)
    obs[0, 3] = [1.0, np.nan, -0.0]
    nxt = np.roll(obs, -1, axis=1)
    nxt[0, 3] = [-0.0, 0.0, 2.0]
    fs.put(0, 0, obs)
    fs.put(1, 0, nxt)
    fs.put(0, 1, nxt)  # equal (bitwise, NaN included): shared
    nxt2 = nxt.copy()
    nxt2[0, 3, 0] = 0.0  # +0.0 where the stored frame has -0.0: must not be shared
    fs.put(1, 1, nxt2)
    o, n, o1, n1 = fs.gather([(0, np.array([0])), (1, np.array([0])), (0, np.array([1])), (1, np.array([1]))],
                             np.array([0]))
    for got, want in ((o, obs), (n, nxt), (o1, nxt), (n1, nxt2)):
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_unwritten_rows_read_zeros():
    fs = FrameStore((4, 6, 5), np.uint8, 10, 2, chunk_len=4)
    stream = frame_stack_stream(3, 2)
    for t, (obs, nxt) in enumerate(stream):
        fs.put(0, t, obs)
        fs.put(1, t, nxt)
    out = fs.gather([(0, np.arange(10)), (1, np.arange(10))], np.zeros(10, np.int64))
    assert not out[0][3:].any() and not out[1][3:].any()
    assert out[0][:3].any()


def test_gather_of_two_kinds_repeats_the_kinds_and_refuses_rows_unlike_envs():
    fs = FrameStore((4, 6, 5), np.uint8, 10, 2, chunk_len=4)
    for t, (obs, nxt) in enumerate(frame_stack_stream(6, 2)):
        fs.put(0, t, obs)
        fs.put(1, t, nxt)
    rows, envs = np.array([0, 5, 2, 5]), np.array([1, 0, 1, 1])
    for _ in range(2):  # the second read reuses the kept kinds
        o, n = fs.gather([(0, rows), (1, rows)], envs)
        assert np.array_equal(o, fs.gather([(0, rows)], envs)[0])
        assert np.array_equal(n, fs.gather([(1, rows)], envs)[0])
        assert not np.array_equal(o, n)
    o2, n2 = fs.gather([(0, rows[:2]), (1, rows[:2])], envs[:2])  # another length: the kinds made anew
    assert np.array_equal(o2, o[:2]) and np.array_equal(n2, n[:2])
    with pytest.raises(ValueError, match="4 long like envs"):
        fs.gather([(0, rows), (1, rows[:3])], envs)


def test_non_stacked_data_stored_whole():
    rng = np.random.default_rng(0)
    fs = FrameStore((7,), np.float32, 20, 1, chunk_len=4)
    for t in range(DETECT_MAX_PUTS):
        fs.put(t % 2, t // 2, rng.standard_normal((1, 7)).astype(np.float32))
    assert fs.layout == StackLayout.whole((7,))


def test_constant_first_stacks_do_not_decide():
    # all-zero stacks say nothing about the layout; detection waits for an informative pair
    fs = FrameStore((4, 6, 5), np.uint8, 20, 1, chunk_len=4)
    zeros = np.zeros((1, 4, 6, 5), np.uint8)
    fs.put(0, 0, zeros)
    fs.put(1, 0, zeros)
    assert fs.layout is None
    stream = frame_stack_stream(5, 1)
    for t, (obs, nxt) in enumerate(stream, start=1):
        fs.put(0, t, obs)
        fs.put(1, t, nxt)
    assert fs.layout is not None and fs.layout.depth == 4
    assert not fs.gather([(0, np.array([0]))], np.array([0]))[0].any()


def test_read_before_detection_forces_whole_layout_and_is_exact():
    fs = FrameStore((4, 6, 5), np.uint8, 20, 1, chunk_len=4)
    x = np.random.default_rng(0).integers(0, 255, (1, 4, 6, 5), dtype=np.uint8)
    fs.put(0, 0, x)
    assert fs.layout is None
    assert np.array_equal(fs.gather([(0, np.array([0]))], np.array([0]))[0], x)
    assert fs.layout == StackLayout.whole((4, 6, 5))


def test_detect_layout_rules():
    a = np.zeros((4, 3), np.float32)
    a[3] = [1, 2, 3]
    b = np.roll(a, -1, axis=0)
    b[3] = [4, 5, 6]
    flat_a, flat_b = a.reshape(12), b.reshape(12)
    lay = detect_layout(flat_a, flat_b, (-1, 0))
    assert lay is not None and (lay.axis, lay.width, lay.depth) == (0, 3, 4)
    assert detect_layout(flat_a, flat_a, (-1, 0)) is None  # equal stacks prove nothing
    rnd = np.random.default_rng(0).standard_normal((2, 12))
    assert detect_layout(rnd[0], rnd[1], (-1, 0)) is None


def test_clear_and_pickle_roundtrip():
    fs = FrameStore((4, 6, 5), np.uint8, 16, 2, chunk_len=4)
    mirror = fill_and_check(fs, frame_stack_stream(40, 2), 16, 2)
    clone = pickle.loads(pickle.dumps(fs))
    rows, envs = np.arange(16).repeat(2), np.tile([0, 1], 16)
    for which in (0, 1):
        assert np.array_equal(clone.gather([(which, rows)], envs)[0], mirror[which, rows, envs])
    fs.clear()
    assert not fs.gather([(0, rows)], envs)[0].any()
    assert fs.nbytes_stored <= fs.index_nbytes + 32 * fs.frames.nchunks_total


def test_no_dedup_option_stores_every_stack():
    fs = FrameStore((4, 6, 5), np.uint8, 50, 1, chunk_len=4, dedup=False)
    fill_and_check(fs, frame_stack_stream(30, 1), 50, 1)
    assert fs.layout == StackLayout.whole((4, 6, 5))
    assert fs.frames_written >= 2 * 30 - 2  # only all-zero stacks are skipped


# -- ObservationView -------------------------------------------------------------------------
@pytest.fixture
def view_and_data():
    data = np.random.default_rng(0).integers(0, 255, (7, 3, 4, 2), dtype=np.uint8)
    calls = []

    def reader(rows, envs):
        calls.append(len(rows))
        return data[rows, envs]

    return ObservationView(reader, data.shape, data.dtype), data, calls


INDICES = [
    3, -1, slice(None), slice(1, 6, 2), slice(None, None, -1), (2, 1), (-2, -1, 3),
    (np.array([0, 6, 6]), np.array([2, 0, 1])), (np.array([0, 6, 6]), np.array([2, 0, 1]), slice(None)),
    (np.array([[1, 2], [3, 4]]), 0), (slice(2, 5), np.array([0, 2])), (np.array([4, 1]), slice(None), 2),
    (Ellipsis, 1), (1, Ellipsis), (np.array([True, False, True, False, False, False, True]),),
    (slice(None), np.array([True, False, True])), [0, 1], (0, 1, slice(1, 3), 0), (),
    (np.array([0, 1]), np.array([1, 2]), np.array([0, 3])), (None, 1), (np.zeros((7, 3), bool),),
]


@pytest.mark.parametrize("key", INDICES, ids=range(len(INDICES)))
def test_view_indexing_matches_numpy(view_and_data, key):
    view, data, _ = view_and_data
    got, want = view[key], data[key]
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(got, want)


def test_view_ndarray_protocol(view_and_data):
    view, data, calls = view_and_data
    assert view.shape == data.shape and view.dtype == data.dtype and view.ndim == 4 and len(view) == 7
    assert view.nbytes == data.nbytes and view.size == data.size
    assert np.array_equal(np.asarray(view), data)
    assert np.allclose(view, data)
    assert all(np.array_equal(a, b) for a, b in zip(view, data, strict=True))
    calls.clear()
    view[np.array([1, 2]), np.array([0, 0]), :]
    assert calls == [2]  # served by one reader call, no materialisation
    with pytest.raises(IndexError):
        view[7]
    with pytest.raises(IndexError):
        view[np.array([0]), np.array([3])]
    with pytest.raises(TypeError):
        view[0] = 1


# -- add() dtype policy ------------------------------------------------------------------------
def test_coerce_obs_policy():
    u8 = np.dtype(np.uint8)
    x = np.arange(6, dtype=np.uint8).reshape(2, 3)
    assert coerce_obs(x, (2, 3), u8, "obs") is x  # no copy when it fits
    assert coerce_obs(x.astype(np.int64), (2, 3), u8, "obs").dtype == u8
    assert coerce_obs(np.ones((2, 3), bool), (2, 3), u8, "obs").dtype == u8
    assert coerce_obs(np.arange(2), (2, 1), np.dtype(np.int64), "obs", reshape=True).shape == (2, 1)
    assert coerce_obs(x[0], (1, 3), u8, "obs").shape == (1, 3)  # one env, env axis left out
    f64 = np.random.default_rng(0).standard_normal((2, 3))
    assert np.array_equal(coerce_obs(f64, (2, 3), np.dtype(np.float32), "obs"), f64.astype(np.float32))
    for bad in (np.full((2, 3), 300), np.full((2, 3), 0.5), np.full((2, 3), -1), np.full((2, 3), np.nan)):
        with pytest.raises(ValueError, match="expected dtype uint8"):
            coerce_obs(bad, (2, 3), u8, "obs")
    with pytest.raises(ValueError, match=r"expected shape \(2, 3\).*got shape \(3, 2\)"):
        coerce_obs(x.T, (2, 3), u8, "obs")
    with pytest.raises(ValueError):
        lossless_cast(np.array([2**40 + 1]), np.dtype(np.float32), "obs", round_floats=True)


# -- the frame-store contract shipped in sb3_integration.testing ---------------------------------
from sb3_integration.testing import FrameStoreTests  # noqa: E402


class TestFrameStoreContract(FrameStoreTests):
    def make_store(self, obs_shape, dtype, n_rows, n_envs, **kw):
        return FrameStore(obs_shape, dtype, n_rows, n_envs, chunk_len=4, codec="zstd3", **kw)


class TestFrameStoreContractOnDisk(FrameStoreTests):
    """The same contract with the frames' chunks spilled to a HybridTier made per store."""

    @pytest.fixture(autouse=True)
    def _directory(self, tmp_path):
        self.directory = tmp_path

    def make_store(self, obs_shape, dtype, n_rows, n_envs, **kw):
        from chunkstore import HybridTier

        return FrameStore(obs_shape, dtype, n_rows, n_envs, chunk_len=4, codec="zstd3+dict",
                          tier=lambda: HybridTier(1 << 12, self.directory, segment_bytes=1 << 11), **kw)


class TestFrameStoreContractOnDevice(FrameStoreTests):
    """The same contract with the frames in a DeviceArray on torch's cpu device (the device frame store)."""

    # the first 64 KiB heap segment, the 256 KiB read inbox, ~64 KiB of host staging and scratch
    reserved_nbytes = (64 + 256 + 64) << 10

    def make_store(self, obs_shape, dtype, n_rows, n_envs, **kw):
        return FrameStore(obs_shape, dtype, n_rows, n_envs, chunk_len=4, device="cpu", **kw)
