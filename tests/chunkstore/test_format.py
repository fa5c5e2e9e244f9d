"""chunkstore.hdf5 (formerly chunkstore.format): save/load round trips, plain-HDF5 readability, corruption,
crash safety."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from chunkstore import (
    ChunkedArray,
    CorruptChunkError,
    CorruptFileError,
    FormatError,
    LRUChunkCache,
    MemoryTier,
)
from chunkstore import hdf5 as fmt
from chunkstore.codecs import codec_names, get_codec

REPO = Path(__file__).resolve().parents[2]
DTYPES = [np.uint8, np.int16, np.int64, np.float16, np.float32, np.float64, np.bool_]
CAPACITY, CHUNK_LEN, ITEM = 203, 16, (3, 5)  # 13 chunks, the last one holds 11 rows


def _available_codecs() -> list[str]:
    names = []
    for name in [*codec_names(), "zstd/-5", "zstd3+dict", "xor+zstd/1", "xor+lz4-block/0"]:
        try:
            get_codec(name)
        except ImportError:
            continue
        names.append(name)
    return names


CODECS = _available_codecs()


def items(n: int, item_shape: tuple[int, ...], dtype, seed: int = 0) -> np.ndarray:
    """Arbitrary bit patterns (NaN payloads, -0.0, inf) with runs of equal items."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    shape = (n, *item_shape)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    out = raw.view(dtype).reshape(shape).copy()
    out[n // 3 : n // 2] = out[n // 3]
    return out


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def make_array(codec="zstd3", dtype=np.uint8, capacity=CAPACITY, item_shape=ITEM,
               chunk_len=CHUNK_LEN, name="observations") -> ChunkedArray:
    """Chunks 0-8 written, chunk 9 half written (then sealed by flush), chunk 10 never
    written, chunks 11-12 written (12 is the partial last chunk)."""
    arr = ChunkedArray(capacity, item_shape, dtype, chunk_len=chunk_len, codec=codec, name=name)
    data = items(capacity, item_shape, dtype)
    arr[:152] = data[:152]
    arr[176:] = data[176:]
    return arr


def chunk_location(path, name: str, chunk: int, chunk_len: int) -> tuple[int, int]:
    with h5py.File(path, "r") as f:
        dset = f[name]
        info = dset.id.get_chunk_info_by_coord((chunk * chunk_len,) + (0,) * (dset.ndim - 1))
        return info.byte_offset, info.size


def flip_byte(path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0xFF]))


# -- round trips --------------------------------------------------------------------------
@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec_and_dtype(tmp_path, codec, dtype, lazy):
    arr = make_array(codec, dtype)
    want = np.asarray(arr)
    arr.flush()  # a save encodes open chunks without sealing them: seal them, to compare chunk by chunk
    path = tmp_path / "s.h5"
    fmt.save(path, {"observations": arr}, progress=False)
    with fmt.load(path, lazy=lazy) as store:
        got = store.arrays["observations"]
        assert got.shape == arr.shape and got.dtype == arr.dtype
        assert got.chunk_len == arr.chunk_len and got.codec == arr.codec
        assert same_bits(np.asarray(got), want)
        assert np.array_equal(got.stored_chunks(), arr.stored_chunks())
        assert 10 not in got.stored_chunks().tolist()
        for c in arr.stored_chunks().tolist():  # verbatim: nothing was recompressed
            assert bytes(got.chunk_bytes(c)) == bytes(arr.chunk_bytes(c))
        assert got.cbytes == arr.cbytes


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
def test_scalar_items_single_chunk_and_empty_arrays(tmp_path, lazy):
    scalars = ChunkedArray(10, (), np.float32, chunk_len=64, codec="zstd3", name="rewards")
    scalars[:7] = np.arange(7, dtype=np.float32)  # capacity < chunk_len: one partial chunk
    empty = ChunkedArray(100, (2,), np.int16, chunk_len=8, codec="lz4-block", name="empty")
    path = tmp_path / "s.h5"
    fmt.save(path, {"rewards": scalars, "empty": empty}, progress=False)
    with fmt.load(path, lazy=lazy) as store:
        assert same_bits(np.asarray(store.arrays["rewards"]), np.asarray(scalars))
        assert store.arrays["empty"].nchunks == 0
        assert not np.asarray(store.arrays["empty"]).any()
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["rewards"][:], np.asarray(scalars))


def test_open_chunks_are_saved(tmp_path):
    arr = ChunkedArray(100, (4,), np.uint8, chunk_len=32, codec="zstd3")
    arr[:10] = 7  # chunk 0 is still open (unsealed)
    fmt.save(tmp_path / "s.h5", {"a": arr}, progress=False)
    with fmt.load(tmp_path / "s.h5") as store:
        assert np.array_equal(store.arrays["a"][:10], np.full((10, 4), 7, np.uint8))


def test_extras_and_attrs_round_trip(tmp_path):
    extras = {
        "pos": np.array(17),
        "full": np.array(True),
        "actions": np.arange(12, dtype=np.int64).reshape(6, 2),
        "dones": np.array([0, 1, 0, 1], dtype=np.float32),
        "empty": np.zeros((0, 3), np.uint8),
        "names": np.array(["a", "bcd"]),  # unicode: no HDF5 type, stored opaque
        "when": np.array(["2024-01-01"], dtype="M8[D]"),
        "rec": np.array([(1, 2.5)], dtype=[("a", "<i4"), ("b", "<f8")]),
        "f16": np.array([np.nan, -0.0, np.inf], dtype=np.float16),
    }
    attrs = {"pos": np.int64(17), "spaces": {"obs": {"shape": (4, 84, 84)}}, "lr": 1e-4,
             "nested": [1, "x", None], "arr": np.arange(3)}
    fmt.save(tmp_path / "s.h5", {}, extras, attrs, progress=False)
    with fmt.load(tmp_path / "s.h5") as store:
        assert set(store.extras) == set(extras)
        for k, v in extras.items():
            assert same_bits(store.extras[k], v), k
        assert store.attrs == {"pos": 17, "spaces": {"obs": {"shape": [4, 84, 84]}}, "lr": 1e-4,
                               "nested": [1, "x", None], "arr": [0, 1, 2]}
        assert store.header["format_version"] == fmt.FORMAT_VERSION
        assert store.header["created"].endswith("+00:00")
    with h5py.File(tmp_path / "s.h5", "r") as f:  # plain readers see extras as datasets
        assert np.array_equal(f["actions"][:], extras["actions"])
        assert f.attrs["format"] == "chunkstore"


def test_bad_names_and_attrs_are_refused_before_writing(tmp_path):
    arr = make_array()
    path = tmp_path / "s.h5"
    for bad in ["", "/abs", "a//b", "_chunkstore", "_chunkstore/x", "a/../b"]:
        with pytest.raises(ValueError, match="invalid name"):
            fmt.save(path, {bad: arr}, progress=False)
    with pytest.raises(ValueError, match="shared"):
        fmt.save(path, {"x": arr}, {"x": np.zeros(2)}, progress=False)
    with pytest.raises(TypeError, match="JSON"):
        fmt.save(path, {"x": arr}, attrs={"f": object()}, progress=False)
    assert not path.exists() and not list(tmp_path.iterdir())


def test_nested_names(tmp_path):
    a, b = make_array(name="obs/image"), make_array("rle", np.int16, name="obs/vec")
    fmt.save(tmp_path / "s.h5", {"obs/image": a, "obs/vec": b}, progress=False)
    with fmt.load(tmp_path / "s.h5") as store:
        assert same_bits(np.asarray(store.arrays["obs/vec"]), np.asarray(b))
    assert fmt.verify(tmp_path / "s.h5") == []


def test_shared_tier_and_cache(tmp_path):
    path = tmp_path / "s.h5"
    fmt.save(path, {"a": make_array(), "b": make_array("lz4-block/0")}, progress=False)
    tier, cache = MemoryTier(), LRUChunkCache(1 << 20)
    with fmt.load(path, lazy=False, tier=tier, cache=cache) as store:
        assert store.arrays["a"].tier is tier and store.arrays["b"].tier is tier
        assert tier.used_nbytes == store.arrays["a"].cbytes + store.arrays["b"].cbytes
        store.arrays["a"][:20]
        assert cache.misses > 0


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
def test_trained_zstd_dictionary_round_trip(tmp_path, lazy):
    data = np.repeat(items(50, (64, 64), np.uint8), 8, axis=0)
    codec = get_codec("zstd3+dict").trained(list(data))  # 1.6 MB of samples
    arr = ChunkedArray(400, (64, 64), np.uint8, chunk_len=8, codec=codec, name="obs")
    arr[:] = data
    assert arr.codec.codec_id == "zstd-dict" and arr.codec.dictionary  # trained
    path = tmp_path / "s.h5"
    fmt.save(path, {"obs": arr}, progress=False)
    with fmt.load(path, lazy=lazy) as store:
        got = store.arrays["obs"]
        assert got.codec == arr.codec and same_bits(np.asarray(got), data)
        assert store.header["hdf5_filters"] == {"obs": "chunkstore"}  # frames need the dict
    with h5py.File(path, "r") as f:  # 87 KB of config: a dataset, not an attribute
        assert "codec_config" not in f["obs"].attrs
        assert "codec_config" in f["_chunkstore/arrays/obs"]


def test_untrained_zstd_dictionary_is_plain_zstd_for_h5py(tmp_path):
    arr = make_array("zstd3+dict")
    fmt.save(tmp_path / "s.h5", {"observations": arr}, progress=False)
    with h5py.File(tmp_path / "s.h5", "r") as f:
        assert np.array_equal(f["observations"][:], np.asarray(arr))


# -- plain h5py + hdf5plugin readers --------------------------------------------------------
@pytest.mark.parametrize("codec", ["zstd3", "zstd/-5", "gzip/1", "none"])
def test_plain_h5py_reads_native_codecs(tmp_path, codec):
    arr = make_array(codec, np.float32)
    path = tmp_path / "s.h5"
    fmt.save(path, {"observations": arr}, progress=False)
    np.save(tmp_path / "want.npy", np.asarray(arr))
    # a fresh interpreter with only h5py + hdf5plugin: chunkstore plays no part in the read
    script = textwrap.dedent(f"""
        import sys, h5py, hdf5plugin, numpy as np
        assert "chunkstore" not in sys.modules
        want = np.load({str(tmp_path / "want.npy")!r})
        with h5py.File({str(path)!r}, "r") as f:
            d = f["observations"]
            assert d.shape == want.shape and d.dtype == want.dtype, (d.shape, d.dtype)
            assert d.chunks == (16, 3, 5)
            assert np.array_equal(d[100:120], want[100:120], equal_nan=True)
            full = d[...]
        assert full.tobytes() == want.tobytes()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_plain_h5py_reads_a_range_of_real_size_chunks(tmp_path):
    frames = items(2000, (84, 84), np.uint8)
    arr = ChunkedArray(2000, (84, 84), np.uint8, chunk_len=64, codec="zstd3")
    arr[:] = frames
    fmt.save(tmp_path / "s.h5", {"observations": arr}, progress=False)
    with h5py.File(tmp_path / "s.h5", "r") as f:
        assert np.array_equal(f["observations"][1000:1064], frames[1000:1064])
        assert np.array_equal(f["observations"][1950:], frames[1950:])  # partial last chunk


@pytest.mark.parametrize("codec", ["lz4-block/0", "rle", "xor+zstd/1", "blosc2-lz4-5"])
def test_private_codecs_fail_loudly_in_plain_h5py(tmp_path, codec):
    try:
        get_codec(codec)
    except ImportError:
        pytest.skip(f"{codec} backend missing")
    arr = make_array(codec)
    fmt.save(tmp_path / "s.h5", {"observations": arr}, progress=False)
    with h5py.File(tmp_path / "s.h5", "r") as f:
        d = f["observations"]
        assert d.shape == arr.shape and d.dtype == arr.dtype
        assert d.attrs["codec"] == get_codec(codec).name and "chunkstore" in d.attrs["note"]
        with pytest.raises(OSError):  # never the encoded bytes dressed up as data
            d[0:16]
        # format 3 groups chunks 0..11 into one HDF5 chunk: the unwritten chunk 10 lies in a
        # written HDF5 chunk, so it fails loudly as its neighbours do (never garbage)
        assert d.chunks[0] > CHUNK_LEN
        with pytest.raises(OSError):
            d[160:176]
    fmt.save(tmp_path / "v2.h5", {"observations": arr}, progress=False, format_version=2)
    with h5py.File(tmp_path / "v2.h5", "r") as f:  # format 2: one HDF5 chunk per chunk
        assert not f["observations"][160:176].any()  # an unwritten chunk is the fill value, no filter needed


def test_plain_h5py_users_are_told_why_chunkstore_is_needed(tmp_path):
    """What an h5py user looks at first (root and dataset attributes) says how to read the file."""
    data = np.repeat(items(50, (64, 64), np.uint8), 8, axis=0)
    arr = ChunkedArray(400, (64, 64), np.uint8, chunk_len=8, name="observations/frames",
                       codec=get_codec("zstd3+dict").trained(list(data)))
    arr[:] = data
    plain = make_array("zstd3", name="rewards")
    path = tmp_path / "s.h5"
    fmt.save(path, {"observations/frames": arr, "rewards": plain}, progress=False)
    script = textwrap.dedent(f"""
        import sys, h5py
        with h5py.File({str(path)!r}, "r") as f:
            print(f.attrs["reader_note"])
            print(f["observations/frames"].attrs["note"])
            print(f["rewards"].attrs["note"])
            try:
                f["observations/frames"][0:8]
            except OSError as e:
                print("OSError")
        assert "chunkstore" not in sys.modules
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    root, frames, rewards, error = out.stdout.strip().splitlines()
    assert "chunkstore.hdf5.load(path)" in root and "observations/frames (zstd/3+dict)" in root
    assert "rewards" not in root.split("chunkstore to decode")[1]
    assert "trained on this data" in frames and "codec_config" in frames
    assert "h5py fails to read them" in frames and "chunkstore.hdf5.load(path).arrays" in frames
    assert "import hdf5plugin" in rewards and error == "OSError"


# -- lazy arrays keep training ---------------------------------------------------------------
def test_writing_into_a_lazy_array_then_saving_over_its_own_file(tmp_path):
    arr = make_array("zstd3", np.int16)
    want = np.asarray(arr).copy()
    arr.flush()  # a save encodes open chunks without sealing them: seal them, to count file chunks
    path = tmp_path / "s.h5"
    fmt.save(path, {"observations": arr}, {"pos": np.array(3)}, progress=False)
    store = fmt.load(path)
    lazy = store.arrays["observations"]
    new = items(40, ITEM, np.int16, seed=5)
    lazy[160:176] = new[:16]  # the unwritten chunk: new chunk goes to RAM
    lazy[20:30] = new[16:26]  # rewrite inside a file chunk: decoded, patched, resealed
    lazy[200] = new[26]  # the partial last chunk
    want[160:176], want[20:30], want[200] = new[:16], new[16:26], new[26]
    assert same_bits(np.asarray(lazy), want)
    assert lazy.tier.info()["file_chunks"] == len(arr.stored_chunks()) - 2
    fmt.save(path, {"observations": lazy}, {"pos": np.array(4)}, progress=False)
    assert same_bits(np.asarray(lazy), want)  # still reads the old file's bytes
    store.close()
    assert fmt.verify(path) == []
    for lazy_flag in (True, False):
        with fmt.load(path, lazy=lazy_flag) as again:
            assert same_bits(np.asarray(again.arrays["observations"]), want)
            assert int(again.extras["pos"]) == 4
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["observations"][:], want)


def test_closed_store_refuses_file_reads(tmp_path):
    fmt.save(tmp_path / "s.h5", {"a": make_array()}, progress=False)
    store = fmt.load(tmp_path / "s.h5", cache=0)
    store.close()
    with pytest.raises((ValueError, CorruptChunkError), match="closed"):
        store.arrays["a"][0]


def test_lazy_load_reads_nothing_up_front(tmp_path):
    fmt.save(tmp_path / "s.h5", {"a": make_array()}, progress=False)
    with fmt.load(tmp_path / "s.h5") as store:
        info = store.arrays["a"].tier.info()
        assert info["kind"] == "file" and info["verified_chunks"] == 0
        assert info["writable"]["used_nbytes"] == 0
        store.arrays["a"][0]
        assert store.arrays["a"].tier.info()["verified_chunks"] == 1


# -- corruption --------------------------------------------------------------------------------
@pytest.fixture
def corrupt_file(tmp_path):
    """A file whose chunk 3 of 'observations' has one flipped byte; returns (path, want)."""
    arr = make_array("zstd3", np.float32)
    other = make_array("lz4-block/0", np.uint8, name="other")
    path = tmp_path / "s.h5"
    fmt.save(path, {"observations": arr, "other": other}, progress=False)
    offset, size = chunk_location(path, "observations", 3, CHUNK_LEN)
    flip_byte(path, offset + size // 2)
    return path, np.asarray(arr)


def test_eager_load_names_the_corrupt_chunk(corrupt_file):
    path, _ = corrupt_file
    with pytest.raises(CorruptChunkError, match="observations: chunk 3") as e:
        fmt.load(path, lazy=False)
    assert (e.value.array, e.value.chunk) == ("observations", 3)


def test_lazy_load_raises_on_reading_the_corrupt_chunk(corrupt_file):
    path, want = corrupt_file
    with fmt.load(path) as store:
        arr = store.arrays["observations"]
        assert same_bits(arr[:48], want[:48])  # chunks 0-2 are fine
        with pytest.raises(CorruptChunkError) as e:
            arr[50]
        assert (e.value.array, e.value.chunk) == ("observations", 3)
        with pytest.raises(CorruptChunkError):
            arr.chunk_bytes(3)  # saving it elsewhere would fail too, never copy bad bytes
    with pytest.raises(CorruptChunkError, match="chunk 3"):
        fmt.load(path, verify=True)
    with fmt.load(path, verify=False) as store:  # unchecked: the codec may or may not notice
        store.arrays["observations"][:48]


def test_verify_reports_the_corrupt_chunk(corrupt_file):
    path, _ = corrupt_file
    problems = fmt.verify(path)
    assert [(p.array, p.chunk) for p in problems] == [("observations", 3)]
    assert "observations: chunk 3" in str(problems[0])


def test_corrupt_padded_tail_is_seen_by_verify(tmp_path):
    """The zero-padded copy of the last chunk is what plain h5py reads: verify checks it
    even though chunkstore loads the verbatim copy."""
    arr = make_array("zstd3")
    path = tmp_path / "s.h5"
    fmt.save(path, {"observations": arr}, progress=False)
    offset, size = chunk_location(path, "observations", 12, CHUNK_LEN)
    flip_byte(path, offset + size // 2)
    with fmt.load(path, lazy=False) as store:
        assert same_bits(np.asarray(store.arrays["observations"]), np.asarray(arr))
    assert [(p.array, p.chunk) for p in fmt.verify(path)] == [("observations", 12)]


def test_corrupt_extra_is_detected(tmp_path):
    path = tmp_path / "s.h5"
    fmt.save(path, {}, {"rewards": np.arange(1000, dtype=np.float64)}, progress=False)
    with h5py.File(path, "r") as f:
        offset = f["rewards"].id.get_offset()
    flip_byte(path, offset + 100)
    with pytest.raises(CorruptChunkError, match="rewards"):
        fmt.load(path)
    assert [p.array for p in fmt.verify(path)] == ["rewards"]


def test_chunk_table_and_file_index_must_agree(tmp_path, reseal):
    path = tmp_path / "s.h5"
    fmt.save(path, {"observations": make_array()}, progress=False)
    with h5py.File(path, "r+") as f:  # claim chunk 10 (never written) is stored
        table = f["_chunkstore/arrays/observations"]
        chunks, crcs = list(table["chunks"][()]), list(table["crc32"][()])
        del table["chunks"], table["crc32"]
        table["chunks"] = np.array(sorted([*chunks, 10]), np.int64)
        table["crc32"] = np.array([*crcs[:10], 0, *crcs[10:]], np.uint32)
        sizes = list(table["nbytes"][()])  # format 3 lists each chunk's size too
        del table["nbytes"]
        table["nbytes"] = np.array([*sizes[:10], 0, *sizes[10:]], np.uint32)
    with pytest.raises(CorruptFileError, match="chunk table of array 'observations' failed its checksum"):
        fmt.load(path)
    reseal(path)  # as a crafted file would be
    with pytest.raises(CorruptChunkError, match="chunk 10 is listed as stored but missing") as e:
        fmt.load(path)
    assert (e.value.array, e.value.chunk) == ("observations", 10)
    assert [(p.array, p.chunk) for p in fmt.verify(path)] == [("observations", 10)]


# -- not a chunkstore file ----------------------------------------------------------------------
def test_format_errors(tmp_path):
    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(os.urandom(5000))
    with pytest.raises(FormatError, match="not a readable HDF5 file"):
        fmt.load(garbage)
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["observations"] = np.zeros((10, 4), np.uint8)
    with pytest.raises(FormatError, match="not a chunkstore file"):
        fmt.load(other)
    with pytest.raises(FormatError):
        fmt.verify(other)
    newer = tmp_path / "newer.h5"
    fmt.save(newer, {"a": make_array()}, progress=False)
    with h5py.File(newer, "r+") as f:
        f.attrs["format_version"] = fmt.FORMAT_VERSION + 1
    with pytest.raises(FormatError, match="upgrade chunkstore"):
        fmt.load(newer)
    assert issubclass(FormatError, ValueError)


def test_truncated_file_is_a_format_error(tmp_path):
    path = tmp_path / "s.h5"
    arr = ChunkedArray(5000, (84,), np.uint8, chunk_len=64, codec="none")
    arr[:] = items(5000, (84,), np.uint8)
    fmt.save(path, {"a": arr}, progress=False)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match=r"truncated|not a readable"):
        fmt.load(path)


# -- crash safety ---------------------------------------------------------------------------------
def test_failed_save_leaves_previous_file_and_no_temporary(tmp_path):
    path = tmp_path / "s.h5"
    arr = make_array()
    fmt.save(path, {"a": arr}, progress=False)
    before = path.read_bytes()
    bad = ChunkedArray(10, (0,), np.uint8, chunk_len=4)
    with pytest.raises(ValueError, match="hold no data"):
        fmt.save(path, {"a": arr, "bad": bad}, progress=False)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.h5"]


_SELF_KILLING_SAVER = """
import os, signal, sys, numpy as np
from chunkstore import ChunkedArray, format as fmt
from chunkstore.hdf5 import _progress

class KillAtFirstUpdate:  # stands in for tqdm: the first progress update is mid-write
    def __init__(self, *a, **k): pass
    def __enter__(self): return self
    def __exit__(self, *exc): pass
    def close(self): pass
    def update(self, n):
        if n:
            os.kill(os.getpid(), signal.SIGKILL)

_progress.tqdm = KillAtFirstUpdate
arr = ChunkedArray(4096, (8,), np.uint32, chunk_len=1, codec="zstd1", cache=0)
arr[:] = np.arange(4096 * 8, dtype=np.uint32).reshape(4096, 8)
fmt.save(sys.argv[1], {"a": arr}, progress=True)
"""

_EXTERNALLY_KILLED_SAVER = """
import sys, numpy as np
from chunkstore import ChunkedArray, format as fmt
n = 600_000  # one-item chunks: seconds of write_direct_chunk calls
arr = ChunkedArray(n, (), np.uint32, chunk_len=1, codec="none", cache=0)
arr[:] = np.arange(n, dtype=np.uint32) + 1
print("saving", flush=True)
fmt.save(sys.argv[1], {"a": arr}, progress=False)
"""


@pytest.fixture
def saved_before(tmp_path):
    path = tmp_path / "s.h5"
    arr = make_array("zstd3", np.int64)
    fmt.save(path, {"a": arr}, {"pos": np.array(1)}, progress=False)
    return path, path.read_bytes(), np.asarray(arr)


def assert_intact(path: Path, before: bytes, want: np.ndarray) -> None:
    assert path.read_bytes() == before
    assert fmt.verify(path) == []
    with fmt.load(path, lazy=False) as store:
        assert same_bits(np.asarray(store.arrays["a"]), want)


def test_save_killed_mid_write_leaves_previous_file_intact(saved_before):
    path, before, want = saved_before
    proc = subprocess.run([sys.executable, "-c", _SELF_KILLING_SAVER, str(path)], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    leftovers = list(path.parent.glob(".s.h5.*.chunkstore-tmp"))
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0  # killed mid-write
    assert_intact(path, before, want)
    fmt.save(path, {"a": make_array()}, progress=False)  # a stale temporary is no obstacle


@pytest.mark.slow
def test_save_sigkilled_from_outside_leaves_previous_file_intact(saved_before):
    path, before, want = saved_before
    proc = subprocess.Popen([sys.executable, "-c", _EXTERNALLY_KILLED_SAVER, str(path)],
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    def temporary() -> Path | None:
        found = list(path.parent.glob(f".s.h5.{proc.pid}.*.chunkstore-tmp"))
        return found[0] if found else None

    try:
        assert proc.stdout.readline().strip() == "saving"
        deadline = time.monotonic() + 60
        while not ((tmp := temporary()) and tmp.stat().st_size > 1 << 20):  # well into the chunks
            assert proc.poll() is None and time.monotonic() < deadline, "save ended too soon"
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert tmp is not None and tmp.exists()
    assert_intact(path, before, want)


def test_the_progress_bar_hears_of_every_chunk_in_steps(monkeypatch):
    """save, load and verify share one bar: tqdm is updated every STEP chunks, and the rest at the end."""
    from chunkstore.hdf5 import _progress

    updates = []

    class Recorder:
        def __init__(self, **kw):
            assert kw["total"] == 1300 and kw["unit"] == "chunk"

        def update(self, n):
            updates.append(n)

        def close(self):
            updates.append("closed")

    monkeypatch.setattr(_progress, "tqdm", Recorder)
    with _progress.ChunkBar(1300, "load", True) as bar:
        for _ in range(1000):
            bar.step()
        bar.step(300)  # a group of chunks at once (save's grouped layout)
    assert updates == [_progress.STEP, 1300 - _progress.STEP, 0, "closed"]


# -- readers for tools -------------------------------------------------------------------------
def test_read_observations(tmp_path):
    arr = make_array()
    arr.flush()  # a save encodes open chunks without sealing them: seal them, to list stored chunks
    path = tmp_path / "s.h5"
    fmt.save(path, {"observations": arr}, progress=False)
    got = fmt.read_observations(path)
    stored = np.concatenate([arr.chunk(c) for c in arr.stored_chunks().tolist()])
    assert same_bits(got, stored) and len(got) == CAPACITY - CHUNK_LEN  # chunk 10 skipped
    assert same_bits(fmt.read_observations(path, limit=20), stored[:20])
    with pytest.raises(KeyError, match="observations"):
        fmt.read_observations(path, name="nope")
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["frames"] = np.arange(60, dtype=np.uint8).reshape(10, 6)
    assert np.array_equal(fmt.read_observations(plain, "frames", limit=3),
                          np.arange(18, dtype=np.uint8).reshape(3, 6))


# -- spaces as data ---------------------------------------------------------------------------
def test_spaces_round_trip_as_json():
    spaces = pytest.importorskip("gymnasium.spaces")
    from sb3_integration.persistence.spaces import space_from_dict, space_to_dict

    low = np.array([[-np.inf, 0.0], [-1.5, 2.0**-20]], np.float32)
    cases = [
        spaces.Box(0, 255, (4, 84, 84), np.uint8),
        spaces.Box(low, np.full((2, 2), np.inf, np.float32)),
        spaces.Box(-1.0, 1.0, (3,), np.float64),
        spaces.Discrete(7, start=-2),
        spaces.MultiDiscrete([3, 4, 5]),
        spaces.MultiDiscrete(np.array([[2, 3], [4, 5]]), start=np.array([[1, 0], [0, -1]])),
        spaces.MultiBinary(6),
        spaces.MultiBinary([2, 3]),
        spaces.Dict([("z", spaces.Discrete(3)), ("a", spaces.Box(0, 1, (2,)))]),
        spaces.Tuple([spaces.Discrete(2), spaces.MultiBinary(3)]),
    ]
    for space in cases:
        d = json.loads(json.dumps(space_to_dict(space), allow_nan=False))  # strict JSON
        back = space_from_dict(d)
        assert back == space and type(back) is type(space)
        if isinstance(space, spaces.Box):
            assert same_bits(back.low, space.low) and same_bits(back.high, space.high)
        if isinstance(space, spaces.Dict):
            assert list(back.spaces) == ["z", "a"]  # order kept, not re-sorted
    with pytest.raises(TypeError, match="Text"):
        space_to_dict(spaces.Text(5))


def test_the_former_module_name_is_deprecated_and_still_works():
    """chunkstore.format (a module named after a builtin) warns once imported, and is chunkstore.hdf5."""
    import importlib
    import sys

    from chunkstore import hdf5

    sys.modules.pop("chunkstore.format", None)
    with pytest.warns(DeprecationWarning, match=r"chunkstore\.format is deprecated: import chunkstore\.hdf5"):
        old = importlib.import_module("chunkstore.format")
    assert old.save is hdf5.save and old.load is hdf5.load and old.read_observations is hdf5.read_observations
    assert set(old.__all__) <= set(hdf5.__all__)


def test_save_through_a_symbolic_link_replaces_the_file_it_names_and_keeps_the_link(tmp_path):
    target, link = tmp_path / "data" / "real.h5", tmp_path / "latest.h5"
    target.parent.mkdir()
    first, second = make_array("zstd3"), make_array("zstd3")
    second[:8] = 255 - np.asarray(second[:8])  # a different content
    fmt.save(target, {"obs": first}, progress=False)
    link.symlink_to(target)
    fmt.save(link, {"obs": second}, progress=False)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "latest.h5"]  # no temporary left beside the link
    with fmt.load(target, lazy=False) as store:
        assert np.array_equal(np.asarray(store.arrays["obs"]), np.asarray(second))
