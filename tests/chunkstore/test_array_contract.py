"""The array contract (chunkstore.testing.arrays) run by ChunkedArray on every tier and by DeviceArray.

The ChunkedArray's own machine (every codec, dtype and cache; pickles, ``out=``, tier
accounting) is in test_array.py and DeviceArray's (exotic dtypes, budgets, live chunks)
in test_device_array.py: both are subclasses of the same :class:`ArrayMachine`.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

from chunkstore import ChunkedArray, DeviceTier, DiskTier, HybridTier, ItemArray, MemoryTier
from chunkstore.device import DeviceArray
from chunkstore.hdf5.filetier import FileTier, MappedFile
from chunkstore.testing.arrays import ANY_DTYPES, ArrayMachine, ArrayTests, array_machine

_ROOT = tempfile.TemporaryDirectory(prefix="array-contract-")  # removed when the test process ends
SEG = 64 << 10


def _dir() -> str:
    return tempfile.mkdtemp(dir=_ROOT.name)


def _file_tier() -> FileTier:
    """A lazily loaded (here empty) file's tier: new chunks go to its writable MemoryTier."""
    path = os.path.join(_dir(), "empty.bin")
    with open(path, "wb"):
        pass
    return FileTier(MappedFile(path), writable=MemoryTier(segment_bytes=SEG), own_writable=True)


TIERS = {
    "memory": lambda: MemoryTier(segment_bytes=SEG),
    "disk": lambda: DiskTier(_dir(), segment_bytes=SEG, max_mapped_bytes=256 << 10),
    "hybrid": lambda: HybridTier(2 * SEG, _dir(), segment_bytes=SEG, max_mapped_bytes=256 << 10),
    "device-cpu": lambda: DeviceTier("cpu", segment_bytes=SEG),
    "file": _file_tier,
}


def _chunked(tier_name: str):
    def make(capacity, item_shape, dtype, **kw):
        # the tier is built after the arguments are checked: a refused array leaves no tier open
        probe = ChunkedArray(capacity, item_shape, dtype, codec="none", **kw)
        probe.close()
        return ChunkedArray(capacity, item_shape, dtype, codec="zstd1", tier=TIERS[tier_name](), own_tier=True, **kw)

    make.__name__ = f"chunked_{tier_name.replace('-', '_')}"
    return make


def _device(capacity, item_shape, dtype, **kw):
    return DeviceArray(capacity, item_shape, dtype, device="cpu", **kw)


class TestChunkedArrayMemoryContract(ArrayTests):
    factory = staticmethod(_chunked("memory"))


class TestChunkedArrayDiskContract(ArrayTests):
    factory = staticmethod(_chunked("disk"))


class TestChunkedArrayHybridContract(ArrayTests):
    factory = staticmethod(_chunked("hybrid"))


class TestChunkedArrayDeviceTierContract(ArrayTests):
    factory = staticmethod(_chunked("device-cpu"))


class TestChunkedArrayFileTierContract(ArrayTests):
    factory = staticmethod(_chunked("file"))


class TestDeviceArrayContract(ArrayTests):
    factory = staticmethod(_device)


class AnyDtypeMachine(ArrayMachine):
    """A ChunkedArray stores every kind of numpy dtype (void, strings, structured, datetimes,
    big-endian) on every tier; the model's zeros are all-zero bytes (``b"0"`` is not a zero)."""

    dtypes = ANY_DTYPES


TestChunkedArrayMemoryMachine = array_machine(_chunked("memory"), base=AnyDtypeMachine)
TestChunkedArrayDiskMachine = array_machine(_chunked("disk"), base=AnyDtypeMachine)
TestChunkedArrayHybridMachine = array_machine(_chunked("hybrid"), base=AnyDtypeMachine)
TestChunkedArrayDeviceTierMachine = array_machine(_chunked("device-cpu"), base=AnyDtypeMachine)
TestChunkedArrayFileTierMachine = array_machine(_chunked("file"), base=AnyDtypeMachine)
TestDeviceArrayContractMachine = array_machine(_device)


@pytest.mark.parametrize("cls", [ChunkedArray, DeviceArray])
def test_capabilities_are_asked_through_the_protocol(cls):
    """Callers never test the class: the flags say what an array offers, and they are true."""
    arr = cls(8, (2,), np.uint8, chunk_len=4)
    try:
        assert isinstance(arr, ItemArray)
        assert arr.supports_native_writes == all(
            hasattr(arr, m) for m in ("open_chunks", "writable_chunk", "open_empty", "seal_full"))
        assert (arr.device is None) == (cls is ChunkedArray)
        if arr.supports_native_writes:
            buf = arr.writable_chunk(1)
            buf[:] = 9
            chunks, _ = arr.open_chunks()
            assert chunks.tolist() == [1]
            arr.seal_full(chunks)
            assert arr.take([4, 7]).tolist() == [[9, 9], [9, 9]]
    finally:
        arr.close()
