"""DeviceArray against a plain numpy array, and the device read path's structural guarantees.

Everything runs on the cpu (and on the ``meta`` device, which has no data: any op that
needs device data on the host fails there). CUDA-only tests are skipped without CUDA.
"""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis.stateful import invariant

from chunkstore import ChunkedArray, native
from chunkstore.device import DeviceArray, RunFormat, torch_dtype
from chunkstore.device.checks import HostReadError, NoHostReads, OpCounter
from chunkstore.device.decode import decode
from chunkstore.device.runs import cost_matrix, encode_items
from chunkstore.testing.arrays import ArrayMachine

DTYPES = [np.uint8, np.int16, np.float32, np.float64, np.bool_, np.complex64, np.uint64,
          np.dtype(">f4"), np.dtype([("a", "<u2"), ("b", "<f4")]), np.dtype("V3"), np.dtype("S3"),
          np.dtype("M8[ns]")]
SHAPES = [(), (3,), (2, 5), (7, 13), (1, 0)]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def items_like(rng: np.random.Generator, n: int, shape: tuple[int, ...], dtype, base=None) -> np.ndarray:
    """Arbitrary bit patterns (NaN payloads, -0.0, inf): fresh random ones, or a base with a few bytes changed."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if dtype == np.bool_:
        return rng.integers(0, 2, size=(n, *shape)).astype(bool)
    if base is None or rng.random() < 0.3:
        raw = rng.integers(0, 256, size=(n, nbytes), dtype=np.uint8)
    else:
        raw = np.repeat(np.ascontiguousarray(base).reshape(1, -1).view(np.uint8), n, axis=0)
        for row in raw:
            k = int(rng.integers(0, 4))
            if nbytes and k:
                row[rng.integers(0, nbytes, k)] = rng.integers(0, 256, k)
    if nbytes and dtype.kind == "f" and rng.random() < 0.3:  # -0.0 exactly
        raw.view(dtype).reshape(n, -1)[:, 0] = np.array(-0.0, dtype)
    return raw.view(dtype).reshape(n, *shape)


def _item_nbytes(shape, dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def host_bytes(arr: DeviceArray, ids: np.ndarray) -> np.ndarray:
    return arr.take_bytes(ids, padded=True).cpu().numpy().reshape(len(ids), _item_nbytes(arr.item_shape, arr.dtype))


def want_bytes(model: np.ndarray, ids: np.ndarray) -> np.ndarray:
    out = np.zeros((len(ids), *model.shape[1:]), model.dtype)
    out[ids >= 0] = model[ids[ids >= 0]]
    return out.view(np.uint8).reshape(len(ids), _item_nbytes(model.shape[1:], model.dtype))


def assert_reads(arr: DeviceArray, model: np.ndarray, ids: np.ndarray) -> None:
    want = want_bytes(model, ids)
    assert np.array_equal(host_bytes(arr, ids), want)
    if torch_dtype(arr.dtype) is not None:
        got = arr.take_padded(ids)
        assert got.dtype == torch_dtype(arr.dtype) and tuple(got.shape) == (len(ids), *arr.item_shape)
        got = np.ascontiguousarray(got.cpu().numpy()).view(np.uint8)
        assert np.array_equal(got.reshape(want.shape), want)


# -- the state machine ----------------------------------------------------------------------------


class DeviceArrayMachine(ArrayMachine):
    """The array contract (:class:`chunkstore.testing.arrays.ArrayMachine`) with every dtype (those
    torch lacks read as bytes), device budgets that spill segments, and the live chunks."""

    dtypes = DTYPES
    shapes = SHAPES

    def make(self, data, capacity, item_shape, dtype, **kw):
        budget = data.draw(st.sampled_from([None, 0, 1, 3]), label="budget")  # in segments
        fmt = RunFormat.for_item(max(1, _item_nbytes(item_shape, dtype)))
        seg = -(-max(64, 4 * fmt.record_bound) // 8) * 8
        return DeviceArray(capacity, item_shape, dtype, segment_bytes=seg,
                           budget_bytes=None if budget is None else budget * seg, **kw)

    def read(self, ids, padded):
        """The bytes (any dtype); typed reads compared with them where torch has the dtype."""
        arr = self.arr
        raw = np.ascontiguousarray(arr.take_bytes(ids, padded=padded).cpu().numpy())
        got = raw.view(arr.dtype).reshape(*ids.shape, *arr.item_shape)
        if torch_dtype(arr.dtype) is not None:
            typed = arr.take_padded(ids) if padded else arr.take(ids)
            assert typed.dtype == torch_dtype(arr.dtype)
            assert tuple(typed.shape) == (*ids.shape, *arr.item_shape)
            assert np.array_equal(np.ascontiguousarray(typed.cpu().numpy()).view(np.uint8).reshape(-1),
                                  raw.reshape(-1))
        return got

    @invariant()
    def live_chunks_are_the_written_ones(self):
        if hasattr(self, "arr"):
            assert_reads(self.arr, self.model, np.arange(-1, self.arr.capacity))
            assert self.arr.live_chunks().tolist() == sorted(self.live)


_MACHINE_HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much]
TestDeviceArrayMachine = DeviceArrayMachine.TestCase
TestDeviceArrayMachine.settings = settings(
    max_examples=25, stateful_step_count=20, deadline=None, suppress_health_check=_MACHINE_HEALTH)


class TestDeviceArrayMachineLong(DeviceArrayMachine.TestCase):
    """The same machine, ten times longer (``-m slow``)."""

    settings = settings(max_examples=250, stateful_step_count=40, deadline=None,
                        suppress_health_check=_MACHINE_HEALTH)


TestDeviceArrayMachineLong = pytest.mark.slow(TestDeviceArrayMachineLong)


# -- the encoding ----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(nbytes=st.sampled_from([1, 5, 64, 7056, 9000]), seed=st.integers(0, 2**32 - 1),
       density=st.sampled_from([0.0, 0.01, 0.2, 1.0]))
def test_encoder_decoder_round_trip(nbytes, seed, density):
    """Records decode bit-exactly on the device path, fit the bound, and numba == numpy."""
    rng = np.random.default_rng(seed)
    fmt = RunFormat.for_item(nbytes)
    pool = rng.integers(0, 256, (3, nbytes), dtype=np.uint8)
    pool[0] = 0
    m = 6
    sel = rng.integers(0, 3, m)
    items = pool[sel].copy()
    items[rng.random(items.shape) < density] ^= rng.integers(1, 256, dtype=np.uint8)
    out = np.zeros(m * fmt.record_bound, np.uint8)
    meta = encode_items(items, pool[sel], fmt, out)
    assert (meta[:, 2] <= fmt.record_bound).all() and (meta[:, 2] % fmt.word_bytes == 0).all()
    with native.disabled():  # the numpy encoder writes the same bytes
        out2 = np.zeros_like(out)
        meta2 = encode_items(items, pool[sel], fmt, out2)
        costs_numpy = cost_matrix(items, pool, fmt)
    assert np.array_equal(meta, meta2) and np.array_equal(out, out2)
    costs = cost_matrix(items, pool, fmt)
    assert np.array_equal(costs, costs_numpy) and np.array_equal(costs[np.arange(m), sel], meta[:, 2])
    bounded = cost_matrix(items, pool, fmt, bounded=True)  # exact where it matters: each row's best
    assert np.array_equal(bounded.min(1), costs.min(1)) and np.array_equal(bounded.argmin(1), costs.argmin(1))
    heap = torch.from_numpy(np.concatenate([out[:int(meta[:, 2].sum())], np.zeros(8, np.uint8)]))
    addr = np.cumsum(meta[:, 2]) - meta[:, 2]
    nw, nv = meta[:, 0], meta[:, 1]
    run0, val0 = np.cumsum(nw) - nw, np.cumsum(nv) - nv
    header = np.stack([sel, nw, addr // fmt.word_bytes - run0, np.arange(m) * nbytes - val0,
                       addr + fmt.word_bytes * nw - val0]).astype(np.int64)
    words = heap[:heap.numel() // fmt.word_bytes * fmt.word_bytes].view(
        torch.int16 if fmt.word_bytes == 2 else torch.int32)
    got = decode(torch, fmt, torch.from_numpy(pool), words, heap, torch.from_numpy(header),
                 int(nw.sum()), int(nv.sum()))
    assert np.array_equal(got.numpy(), items)


def test_run_format_choices():
    assert (RunFormat.for_item(84 * 84).word_bytes, RunFormat.for_item(84 * 84).max_len) == (2, 8)
    assert RunFormat.for_item(4 * 84 * 84).word_bytes == 4
    with pytest.raises(ValueError, match="too large"):
        RunFormat.for_item(1 << 29)


# -- structural guarantees of take -------------------------------------------------------------------


def _frames_array(device="cpu", budget=None, n=600, seed=0, **kw) -> DeviceArray:
    """Frame-like items: a background with moving blocks, as a ring writer stores them."""
    rng = np.random.default_rng(seed)
    arr = DeviceArray(n, (84, 84), np.uint8, chunk_len=4, device=device, budget_bytes=budget, **kw)
    back = rng.integers(0, 256, (84, 84), dtype=np.uint8)
    for i in range(n - 2):  # the last chunk stays open
        f = back.copy()
        y, x = (i * 3) % 70, (i * 7) % 70
        f[y:y + 8, x:x + 8] = rng.integers(0, 256, (8, 8))
        arr[i] = f
    return arr


def _ops(arr: DeviceArray, ids: np.ndarray) -> int:
    arr.take_padded(ids)  # warm: both staging buffers (used in turn) sized for this batch
    arr.take_padded(ids)
    with OpCounter() as c:
        arr.take_padded(ids)
    return c.total


@pytest.mark.parametrize("budget", [None, 0, 1 << 15])
def test_take_op_count_does_not_depend_on_batch_size(budget):
    arr = _frames_array(budget=budget, segment_bytes=1 << 15)
    rng = np.random.default_rng(1)
    small = _ops(arr, rng.integers(-1, arr.capacity, 8))
    large = _ops(arr, rng.integers(-1, arr.capacity, 2048))
    stacks = _ops(arr, rng.integers(-1, arr.capacity, (256, 4)))  # (n, depth) ids: one reshape more
    assert small == large <= 30
    assert stacks == small + 1
    if budget is not None:
        assert arr.info()["heap"]["segments_in_host_ram"] > 0  # reads did ship records from host RAM


def test_take_reads_nothing_on_the_host_cpu():
    arr = _frames_array()
    ids = np.random.default_rng(2).integers(-1, arr.capacity, 300)
    arr.take_padded(ids)
    with NoHostReads("cpu") as mode:
        arr.take_padded(ids)
    assert mode.seen["aten.index_select"] > 0  # the mode did see the decoder's ops


def test_take_runs_on_meta_without_host_reads():
    """On ``meta`` there is no data: any op that needs device data on the host raises."""
    arr = _frames_array(device="meta", n=200)
    for n in (1, 64, 1000):
        ids = np.random.default_rng(n).integers(-1, arr.capacity, n)
        with NoHostReads("meta"):
            out = arr.take_padded(ids)
        assert out.device.type == "meta" and tuple(out.shape) == (n, 84, 84)


@pytest.mark.parametrize("bad", [
    lambda t: t.sum().item(),
    lambda t: torch.nonzero(t),
    lambda t: t[t > 0],
    lambda t: torch.repeat_interleave(t.long()),
    lambda t: t.cpu(),
    lambda t: torch.empty(3).copy_(t),
])
def test_the_host_read_check_catches_host_reads(bad):
    with pytest.raises(HostReadError), NoHostReads("meta"):
        bad(torch.ones(3, device="meta"))


# -- memory: budget and spill ---------------------------------------------------------------------------


def test_tiny_budget_spills_oldest_segments_and_still_reads():
    rng = np.random.default_rng(3)
    seg = 1 << 12
    arr = DeviceArray(400, (16, 16), np.float32, chunk_len=4, segment_bytes=seg, budget_bytes=2 * seg)
    model = rng.standard_normal((400, 16, 16)).astype(np.float32)
    for i in range(400):
        arr[i] = model[i]
    info = arr.info()["heap"]
    assert info["spills"] > 0 and info["segments_in_host_ram"] > 0 and info["slots"] == 2
    assert arr._heap.nbytes <= 2 * seg + info["inbox_nbytes"]
    assert_reads(arr, model, rng.integers(-1, 400, 500))
    arr.flush()
    assert_reads(arr, model, np.arange(400))
    before = info["segments_on_device"] + info["segments_in_host_ram"]
    # overwriting frees host segments as well as device ones: the heap does not grow
    for i in range(400):
        arr[i] = model[i] * 2
    assert_reads(arr, model * 2, np.arange(400))
    info = arr.info()["heap"]
    assert info["segments_on_device"] + info["segments_in_host_ram"] <= before + 1


def test_zero_budget_keeps_every_segment_in_host_ram():
    arr = _frames_array(budget=0, n=100, segment_bytes=1 << 14)
    assert arr.info()["heap"]["slots"] == 0 and arr.info()["heap"]["segments_on_device"] == 0
    out = arr.take(np.arange(100))
    ref = _frames_array(n=100).take(np.arange(100))
    assert torch.equal(out, ref)


def test_sizes_are_reported():
    arr = _frames_array(n=800)
    info = arr.info()
    assert info["references"] >= 1
    assert 0 < arr.record_nbytes < 800 * 84 * 84 / 4  # frames differ from their reference in a block
    assert arr.nbytes >= arr.record_nbytes + arr.reference_nbytes
    assert arr.index_nbytes == 800 * (4 + 8 + 2 + 2) + arr.nchunks_total
    assert arr.host_nbytes > arr.index_nbytes


def test_references_follow_the_content():
    """Random bytes never earn a reference; a new scene does, at once."""
    rng = np.random.default_rng(4)
    noise = DeviceArray(400, (32, 32), np.uint8)
    noise.write(0, rng.integers(0, 256, (400, 32, 32), dtype=np.uint8))
    assert noise.info()["references_created"] == 0
    scenes = DeviceArray(400, (32, 32), np.uint8)
    a, b = rng.integers(1, 256, (2, 32, 32), dtype=np.uint8)
    for i in range(400):
        f = (a if i < 200 else b).copy()
        f[i % 32, :4] = i % 256
        scenes[i] = f
    assert scenes.info()["references_created"] == 2
    assert scenes.record_nbytes < 400 * 20  # a handful of changed bytes per item


# -- persistence hooks ------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["zstd3", "none"])
def test_export_import_round_trip(codec):
    rng = np.random.default_rng(5)
    arr = DeviceArray(50, (3, 4), np.float64, chunk_len=4, max_open=2)
    model = np.zeros((50, 3, 4))
    for start, n in [(0, 8), (12, 3), (30, 9), (46, 4)]:
        vals = rng.standard_normal((n, 3, 4))
        arr.write(start, vals)
        model[start:start + n] = vals
    arr[21] = model[21] = np.full((3, 4), -0.0)  # an open chunk
    host = arr.to_chunked(codec)
    assert isinstance(host, ChunkedArray) and host.capacity == 50 and host.chunk_len == 4
    assert host.stored_chunks().tolist() == arr.live_chunks().tolist() == [0, 1, 3, 5, 7, 8, 9, 11, 12]
    assert np.array_equal(host.take(np.arange(50)).view(np.uint8), model.view(np.uint8))
    back = DeviceArray.from_chunked(host, device="cpu")
    assert back.live_chunks().tolist() == host.stored_chunks().tolist()
    assert np.array_equal(back.take(np.arange(50)).numpy().view(np.uint8), model.view(np.uint8))


def test_export_of_a_dtype_torch_lacks():
    dt = np.dtype([("a", "<u2"), ("b", "<f4")])
    arr = DeviceArray(8, (2,), dt, chunk_len=2)
    vals = np.zeros((8, 2), dt)
    vals["a"], vals["b"] = np.arange(16).reshape(8, 2), -np.arange(16).reshape(8, 2)
    arr.write(0, vals)
    with pytest.raises(TypeError, match="take_bytes"):
        arr.take(np.arange(8))
    assert np.array_equal(arr.to_chunked("none").take(np.arange(8)), vals)


# -- bad input and lifetime ---------------------------------------------------------------------------------


def test_bad_input_is_refused():
    arr = DeviceArray(10, (2,), np.int16, chunk_len=4)
    with pytest.raises(IndexError):
        arr.take(np.array([10]))
    with pytest.raises(IndexError):
        arr.take(np.array([-11]))
    with pytest.raises(IndexError):
        arr.take_padded(np.array([-2]))
    with pytest.raises(IndexError):
        arr.take(np.array([0.5]))
    with pytest.raises(IndexError):
        arr.take_padded(np.array([0.5]))
    with pytest.raises(IndexError):
        arr.write(9, np.zeros((2, 2), np.int16))
    with pytest.raises(ValueError, match="without loss"):  # a lossy cast: float into int16
        arr[0] = np.array([0.5, 1.0])
    with pytest.raises(ValueError, match="shape"):
        arr[0] = np.zeros(3, np.int16)
    with pytest.raises(IndexError, match="remap"):
        arr.remap(12, [0], [5])
    with pytest.raises(ValueError, match="row count"):
        arr.remap(12, [2], [2])  # chunk 2 has 2 rows, at capacity 12 it has 4
    with pytest.raises(ValueError, match="budget"):
        DeviceArray(10, device="cpu", budget_bytes=-1)
    arr.close()
    with pytest.raises(ValueError, match="closed"):
        arr.take(np.array([0]))


def test_take_into_a_tensor_copies_on_the_device():
    arr = DeviceArray(10, (2,), np.int16, chunk_len=4)
    arr.write(0, np.arange(20, dtype=np.int16).reshape(10, 2))
    out = torch.full((3, 2), 99, dtype=torch.int16)
    with NoHostReads("cpu"):
        got = arr.take_into(np.array([3, -1, 9]), out)
    assert got is out and out.tolist() == [[6, 7], [0, 0], [18, 19]]


def test_context_manager_releases_device_memory():
    with DeviceArray(10, (4,), np.uint8) as arr:
        arr[0] = np.arange(4, dtype=np.uint8)
        assert arr.nbytes > 0
    assert arr._heap.arena is None and arr._pool.rows is None


# -- CUDA (skipped without it) ------------------------------------------------------------------------------


@cuda
def test_cuda_round_trip_and_no_syncs():
    model = np.random.default_rng(6).integers(0, 256, (300, 84, 84), dtype=np.uint8)
    arr = DeviceArray(300, (84, 84), np.uint8, device="cuda", segment_bytes=1 << 16, budget_bytes=1 << 17)
    for i in range(300):
        arr[i] = model[i]
    ids = np.random.default_rng(7).integers(-1, 300, 512)  # -1: an all-zero item (take_padded)
    arr.take_padded(ids)
    torch.cuda.set_sync_debug_mode("error")  # any synchronising call in the read raises
    try:
        out = arr.take_padded(ids)
        last = arr.take(np.array([-1, 0]))  # take: -1 counts from the end, as numpy's
    finally:
        torch.cuda.set_sync_debug_mode("default")
    want = np.where((ids >= 0)[:, None, None], model[ids], 0)
    assert out.device.type == "cuda" and np.array_equal(out.cpu().numpy(), want)
    assert arr._heap.spills > 0, "the budget spills segments: reads take records from host RAM too"
    assert np.array_equal(last.cpu().numpy(), model[[299, 0]])


# -- the benchmark scripts (real Atari frames) ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("tool, header", [("bench_device_encodings", "Bytes per frame"),
                                          ("bench_device", "Torch ops per sample")])
def test_device_benchmarks_run(tool, header, tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / f"{tool}.json"
    env = {**os.environ, "PYTHONPATH": str(repo)}
    res = subprocess.run([sys.executable, str(repo / "tools" / f"{tool}.py"), "--quick", "--games", "Pong",
                          "--out", str(out)], capture_output=True, text=True, cwd=repo, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert header in res.stdout and json.loads(out.read_text())["config"]["quick"]
