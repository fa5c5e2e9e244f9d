"""Contract tests every array of items runs (:class:`~chunkstore.array.protocol.ItemArray`).

An implementation proves itself by subclassing :class:`ArrayTests` (examples) and
running :class:`ArrayMachine` (a Hypothesis state machine beside a numpy array)::

    from chunkstore.testing.arrays import ArrayTests, array_machine

    class TestMyArray(ArrayTests):
        def factory(self, capacity, item_shape, dtype, **kw):
            return MyArray(capacity, item_shape, dtype, **kw)

    TestMyArrayMachine = array_machine(MyArray)

``factory(capacity, item_shape, dtype, *, chunk_len, max_open)`` builds an empty
array. Reads are compared on the host: a tensor is copied there (:func:`to_host`).
:class:`~chunkstore.ChunkedArray` runs both on every tier, and
:class:`~chunkstore.device.DeviceArray` on the cpu (``tests/chunkstore/test_array_contract.py``).

Needs pytest, hypothesis and, for device arrays, torch (the ``dev`` extra).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from chunkstore.array.protocol import ItemArray
from chunkstore.casting import zero_fill

__all__ = ["ANY_DTYPES", "DTYPES", "SHAPES", "ArrayMachine", "ArrayTests", "array_machine", "to_host"]

#: dtypes every implementation stores (a device array reads them as torch tensors)
DTYPES = [np.uint8, np.int16, np.float32, np.float64, np.bool_]
#: every kind of numpy dtype a host array stores bit for bit (a device array's ``take`` refuses
#: those torch lacks: read them with ``take_bytes``)
ANY_DTYPES = [*DTYPES, np.float16, np.complex64, np.complex128, np.dtype(">i4"), np.dtype(">f8"),
              np.dtype("V3"), np.dtype("S3"), np.dtype("U2"), np.dtype("M8[ns]"), np.dtype("m8[s]"),
              np.dtype([("a", "<u2"), ("b", "S3"), ("c", ">f4", (2,))])]
SHAPES = [(), (3,), (2, 5), (1, 0)]


def to_host(x: Any) -> np.ndarray:
    """A read's result as a numpy array (a device tensor is copied to the host)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def random_items(rng: np.random.Generator, n: int, item_shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Arbitrary bit patterns (NaN payloads, -0.0, inf), with runs so that codecs have work."""
    dtype = np.dtype(dtype)
    shape = (n, *item_shape)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
    if nbytes and rng.random() < 0.5:
        raw[: nbytes // 2] = raw[0]
    return raw.view(dtype).reshape(shape)


def same_bits(got: Any, want: np.ndarray) -> bool:
    got = to_host(got)
    return got.shape == want.shape and np.array_equal(
        np.ascontiguousarray(got).reshape(-1).view(np.uint8), np.ascontiguousarray(want).reshape(-1).view(np.uint8))


class ArrayMachine(RuleBasedStateMachine):
    """An array beside a numpy array: every write, discard, remap and read compared.

    Subclasses set ``factory`` (see :func:`array_machine`), and may override :meth:`read`
    (how items come back to the host), ``dtypes``, ``shapes``, and add rules.
    """

    factory: Callable[..., ItemArray]
    dtypes: list[Any] = DTYPES
    shapes: list[tuple[int, ...]] = SHAPES
    max_capacity = 40
    chunk_lens: Any = st.integers(1, 6)
    #: the model's largest size: capacity shrinks for large items
    max_bytes = 2_000_000

    @initialize(data=st.data())
    def setup(self, data: Any) -> None:
        dtype = np.dtype(data.draw(st.sampled_from(self.dtypes), label="dtype"))
        shape = data.draw(st.sampled_from(self.shapes), label="item_shape")
        item = max(1, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        capacity = data.draw(st.integers(1, max(1, min(self.max_capacity, self.max_bytes // item))), label="capacity")
        chunk_len = data.draw(self.chunk_lens, label="chunk_len")
        max_open = data.draw(st.integers(1, 3), label="max_open")
        self.rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
        self.arr = self.make(data, capacity, shape, dtype, chunk_len=chunk_len, max_open=max_open)
        self.model = np.zeros((capacity, *shape), dtype)
        self.live: set[int] = set()  # chunks written since their last discard

    def make(self, data: Any, capacity: int, item_shape: tuple[int, ...], dtype: np.dtype,
             **kw: Any) -> ItemArray:
        """The array under test (override to draw more options from ``data``)."""
        return type(self).factory(capacity, item_shape, dtype, **kw)

    def read(self, ids: np.ndarray, padded: bool) -> np.ndarray:
        """``take_padded(ids)`` or ``take(ids)``, on the host."""
        return to_host(self.arr.take_padded(ids) if padded else self.arr.take(ids))

    def _items(self, n: int) -> np.ndarray:
        return random_items(self.rng, n, self.model.shape[1:], self.model.dtype)

    def _touch(self, ids: Any) -> None:
        self.live.update((np.asarray(ids, np.int64).reshape(-1) % len(self.model) // self.arr.chunk_len).tolist())

    # -- writes ------------------------------------------------------------------------------------
    @rule(data=st.data())
    def write_run(self, data: Any) -> None:
        cap = len(self.model)
        start = data.draw(st.integers(0, cap - 1))
        n = data.draw(st.integers(1, cap - start))
        items = self._items(n)
        self.arr.write(start, items)
        self.model[start:start + n] = items
        self._touch(np.arange(start, start + n))

    @rule(data=st.data())
    def set_one(self, data: Any) -> None:
        """The appender's case; negative indices count from the end."""
        i = data.draw(st.integers(-len(self.model), len(self.model) - 1))
        item = self._items(1)[0]
        self.arr[i] = item
        self.model[i] = item
        self._touch([i])

    @rule(n=st.integers(1, 20))
    def ring_write(self, n: int) -> None:
        """Sequential ``arr[i] = item`` that wraps around, as a replay buffer writes."""
        pos = getattr(self, "pos", 0)
        for item in self._items(n):
            pos %= len(self.model)
            self.arr[pos] = item
            self.model[pos] = item
            self._touch([pos])
            pos += 1
        self.pos = pos

    @rule(data=st.data())
    def set_slice(self, data: Any) -> None:
        cap = len(self.model)
        key = slice(data.draw(st.integers(-cap, cap)), data.draw(st.integers(-cap, cap)),
                    data.draw(st.sampled_from([None, 1, 2, -1, 3])))
        ids = np.arange(cap)[key]
        items = self._items(len(ids))
        self.arr[key] = items
        self.model[key] = items
        self._touch(ids)

    @rule(data=st.data())
    def put_many(self, data: Any) -> None:
        """Any order, repeats and negative indices; the last write to an index wins."""
        cap = len(self.model)
        idx = np.array(data.draw(st.lists(st.integers(-cap, cap - 1), min_size=1, max_size=12)), np.int64)
        vals = self._items(len(idx))
        if data.draw(st.booleans()):
            self.arr.put(idx, vals)
        else:
            self.arr[idx] = vals
        for i, v in zip(idx.tolist(), vals, strict=True):
            self.model[i] = v
        self._touch(idx)

    @rule(data=st.data())
    def discard(self, data: Any) -> None:
        cap, L = len(self.model), self.arr.chunk_len
        start = data.draw(st.integers(0, cap))
        stop = data.draw(st.integers(start, cap))
        self.arr.discard(start, stop)
        first, last = -(-start // L), (stop // L if stop < cap else -(-cap // L))
        for c in range(first, last):
            zero_fill(self.model, slice(c * L, (c + 1) * L))
            self.live.discard(c)

    @rule(data=st.data())
    def remap(self, data: Any) -> None:
        """Ring growth (or shrinking): chunks move to new places, the rest is freed."""
        L, cap = self.arr.chunk_len, len(self.model)
        new_cap = data.draw(st.integers(1, 2 * cap + L))
        n_old, n_new = -(-cap // L), -(-new_cap // L)
        rows_old = np.minimum(L, cap - np.arange(n_old) * L)
        rows_new = np.minimum(L, new_cap - np.arange(n_new) * L)
        src, dst = [], []
        free = list(self.rng.permutation(n_new))
        for c in self.rng.permutation(n_old).tolist():
            fits = [d for d in free if rows_new[d] == rows_old[c]]
            if fits and data.draw(st.booleans()):
                src.append(c)
                dst.append(fits[0])
                free.remove(fits[0])
        self.arr.remap(new_cap, np.array(src, np.int64), np.array(dst, np.int64))
        model = np.zeros((new_cap, *self.model.shape[1:]), self.model.dtype)
        live = set()
        for s, d in zip(src, dst, strict=True):
            model[d * L:d * L + rows_old[s]] = self.model[s * L:s * L + rows_old[s]]
            if s in self.live:
                live.add(d)
        self.model, self.live = model, live
        assert self.arr.capacity == len(self.arr) == new_cap

    @rule()
    def flush(self) -> None:
        self.arr.flush()

    @rule()
    def clear(self) -> None:
        self.arr.clear()
        zero_fill(self.model)
        self.live.clear()

    # -- reads -------------------------------------------------------------------------------------
    @rule(data=st.data())
    def take_some(self, data: Any) -> None:
        """``take`` is ``np.take(arr, ids, axis=0)``: negative ids count from the end, the ids' shape is kept."""
        cap = len(self.model)
        ids = np.array(data.draw(st.lists(st.integers(-cap, cap - 1), max_size=12)), np.int64)
        if ids.size % 2 == 0 and data.draw(st.booleans()):
            ids = ids.reshape(2, -1)
        assert same_bits(self.read(ids, padded=False), np.take(self.model, ids, axis=0))

    @rule(data=st.data())
    def take_padded_some(self, data: Any) -> None:
        """``take_padded``: ``-1`` is an all-zero item."""
        ids = np.array(data.draw(st.lists(st.integers(-1, len(self.model) - 1), max_size=12)), np.int64)
        want = np.zeros((len(ids), *self.model.shape[1:]), self.model.dtype)
        want[ids >= 0] = self.model[ids[ids >= 0]]
        assert same_bits(self.read(ids, padded=True), want)

    @invariant()
    def matches_model(self) -> None:
        if not hasattr(self, "arr"):
            return
        assert same_bits(self.read(np.arange(len(self.model)), padded=False), self.model)
        assert self.arr.nbytes_held == sum(self.arr.held_info().values())
        if self.arr.device is None:
            assert self.arr.device_nbytes == 0

    def teardown(self) -> None:
        if hasattr(self, "arr"):
            self.arr.close()


def array_machine(factory: Callable[..., ItemArray], *, base: type[ArrayMachine] = ArrayMachine,
                  max_examples: int = 25, steps: int = 20) -> Any:
    """A unittest TestCase running ``base`` (:class:`ArrayMachine`) on arrays made by
    ``factory(capacity, item_shape, dtype, *, chunk_len, max_open)``."""
    machine: Any = type(f"ArrayMachine_{getattr(factory, '__name__', 'array')}", (base,),
                        {"factory": staticmethod(factory)})
    machine.TestCase.settings = settings(
        max_examples=max_examples, stateful_step_count=steps, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    return machine.TestCase


class ArrayTests:
    """What every array of items promises. Subclasses define ``factory(capacity, item_shape, dtype, **kw)``."""

    def factory(self, capacity: int, item_shape: Any, dtype: Any, **kw: Any) -> ItemArray:
        raise NotImplementedError("an ArrayTests subclass supplies factory(capacity, item_shape, dtype, **kw)")

    @pytest.fixture
    def make(self) -> Any:
        made: list[ItemArray] = []

        def make(capacity: int = 10, item_shape: Any = (2,), dtype: Any = np.int16, **kw: Any) -> ItemArray:
            kw.setdefault("chunk_len", 4)
            made.append(self.factory(capacity, item_shape, dtype, **kw))
            return made[-1]

        yield make
        for arr in made:
            arr.close()

    def test_implements_the_protocol(self, make: Any) -> None:
        arr = make()
        assert isinstance(arr, ItemArray)
        assert arr.shape == (10, 2) and len(arr) == arr.capacity == 10 and arr.nchunks_total == 3
        if arr.supports_native_writes:
            assert all(callable(getattr(arr, m, None))
                       for m in ("open_chunks", "writable_chunk", "open_empty", "seal_full"))

    def test_take_counts_from_the_end_and_keeps_the_shape(self, make: Any) -> None:
        arr = make()
        model = np.arange(20, dtype=np.int16).reshape(10, 2)
        arr.write(0, model)
        ids = np.array([[0, -1], [-10, 9]])
        assert same_bits(arr.take(ids), model[ids])
        assert same_bits(arr.take(np.arange(10) % 3 == 0), model[np.arange(10) % 3 == 0])  # a boolean mask
        assert to_host(arr.take(np.zeros(0, np.int64))).shape == (0, 2)

    def test_take_padded_reads_minus_one_as_zeros(self, make: Any) -> None:
        arr = make()
        arr[:] = 7
        got = to_host(arr.take_padded(np.array([[-1, 3], [9, -1]])))
        assert got.shape == (2, 2, 2) and got.tolist() == [[[0, 0], [7, 7]], [[7, 7], [0, 0]]]
        with pytest.raises(IndexError):
            arr.take_padded(np.array([-2]))

    def test_take_into_fills_a_host_array_in_place(self, make: Any) -> None:
        arr = make()
        arr.write(0, np.arange(20, dtype=np.int16).reshape(10, 2))
        out = np.full((2, 3, 2), 99, np.int16)
        got = arr.take_into(np.array([[-1, 0, 9], [4, -1, 4]]), out)
        assert got is out
        assert out[:, :, 0].tolist() == [[0, 0, 18], [8, 0, 8]]

    def test_the_last_write_to_an_index_wins(self, make: Any) -> None:
        arr = make()
        arr.put([3, 3, -7], [[1, 1], [2, 2], [3, 3]])
        arr[[5, 5]] = [[4, 4], [5, 5]]
        assert to_host(arr.take([3, 5])).tolist() == [[3, 3], [5, 5]]

    def test_discard_frees_whole_chunks_only(self, make: Any) -> None:
        arr = make()
        arr[:] = 1
        arr.discard(2, 10)  # chunk 0 is partly inside: kept; chunks 1 and 2 go
        assert to_host(arr.take(np.arange(10)))[:, 0].tolist() == [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
        arr.clear()
        assert not to_host(arr.take(np.arange(10))).any()

    def test_remap_moves_chunks_and_frees_the_rest(self, make: Any) -> None:
        arr = make(capacity=8)
        arr.write(0, np.arange(16, dtype=np.int16).reshape(8, 2))
        arr.remap(12, [1], [2])
        assert arr.capacity == 12
        got = to_host(arr.take(np.arange(12)))[:, 0].tolist()
        assert got == [0] * 8 + [8, 10, 12, 14]

    def test_bad_arguments_raise_clear_errors(self, make: Any) -> None:
        arr = make()
        for bad in (np.array([10]), np.array([-11]), np.array([0.5])):
            with pytest.raises(IndexError):
                arr.take(bad)
        with pytest.raises(IndexError, match="capacity"):
            arr.write(9, np.zeros((2, 2), np.int16))
        with pytest.raises(IndexError):
            arr[10] = [0, 0]
        with pytest.raises(ValueError, match="without loss"):
            arr[0] = np.array([0.5, 1.0])
        with pytest.raises(ValueError, match="shape"):
            arr[0] = np.zeros(3, np.int16)
        with pytest.raises(ValueError, match="shape"):
            arr.put([1, 2], np.zeros((3, 2), np.int16))
        with pytest.raises(IndexError, match="remap"):
            arr.remap(12, [0], [5])
        with pytest.raises(ValueError, match="row count"):
            arr.remap(12, [2], [2])  # chunk 2 has 2 rows, at capacity 12 it has 4
        with pytest.raises(ValueError, match="equal length"):
            arr.remap(12, [0, 1], [0])
        for kw in ({"chunk_len": 0}, {"max_open": 0}):
            with pytest.raises(ValueError, match=next(iter(kw))):
                self.factory(10, (2,), np.int16, **kw)
        with pytest.raises(ValueError, match="capacity"):
            self.factory(0, (2,), np.int16)
        with pytest.raises(TypeError, match="object"):
            self.factory(10, (2,), object)

    def test_snapshot_holds_the_items(self, make: Any) -> None:
        from chunkstore.array import ChunkedArray

        arr = make()
        model = np.arange(20, dtype=np.int16).reshape(10, 2)
        arr.write(0, model[:9])  # the last chunk stays open
        with arr.snapshot("zstd3") as snap:
            back = ChunkedArray.from_state(snap)
        with back:
            assert same_bits(back.take(np.arange(9)), model[:9])

    def test_sizes_add_up(self, make: Any) -> None:
        arr = make(capacity=100)
        arr.write(0, np.ones((50, 2), np.int16))
        assert arr.nbytes_held == sum(arr.held_info().values()) > 0
        assert set(arr.held_info()) >= {"tier", "open_chunks", "spare_buffers", "chunk_table"}
        assert arr.nbytes_stored > 0
        assert arr.device_nbytes == 0 if arr.device is None else arr.device_nbytes > 0

    def test_a_closed_array_refuses_calls(self, make: Any) -> None:
        arr = make()
        arr.close()
        arr.close()  # twice is fine
        with pytest.raises(ValueError, match="closed"):
            arr.write(0, np.zeros((1, 2), np.int16))
        with pytest.raises(ValueError, match="closed"):
            arr.discard(0, 10)
