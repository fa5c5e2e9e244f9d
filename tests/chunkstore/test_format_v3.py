"""Format 3: several chunks per HDF5 chunk, verbatim, each chunk still read and checked alone.

Property tests drive random arrays (codecs, dtypes, shapes, sparse chunk sets, group
sizes) through save and load against a plain numpy model; the others pin what format 3
promises beside format 2: per-chunk CRC32s and reads, clear errors for crafted files,
plain HDF5 readers failing loudly on grouped datasets, snapshots saved as they were,
format 2 still written faithfully on request.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from unittest import mock

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from chunkstore import ChunkedArray, CorruptChunkError, CorruptFileError, hdf5
from chunkstore.codecs import get_codec
from chunkstore.hdf5 import ChunkSource, _groups
from chunkstore.testing.arrays import ANY_DTYPES

REPO = Path(__file__).resolve().parents[2]
DTYPES = [np.uint8, np.int16, np.float32, np.float64, np.bool_, np.int64]
CODECS = ["lz4-block/0", "rle", "zstd/3", "gzip/1", "none", "xor+zstd/1"]


def bits(a) -> bytes:
    return np.ascontiguousarray(np.asarray(a)).tobytes()


def random_items(rng: np.random.Generator, n: int, item_shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, (n, *item_shape)).astype(bool)
    raw = rng.integers(0, 4, n * int(np.prod(item_shape, dtype=np.int64)) * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(n, *item_shape).copy()  # small byte values: compressible, any bit pattern


def build(capacity, chunk_len, item_shape, dtype, codec, written, seed) -> tuple[ChunkedArray, np.ndarray]:
    """An array whose chunks in ``written`` hold data, and the numpy model of it (zeros elsewhere)."""
    rng = np.random.default_rng(seed)
    arr = ChunkedArray(capacity, item_shape, dtype, chunk_len=chunk_len, codec=codec, name="a")
    model = np.zeros((capacity, *item_shape), dtype)
    for c in sorted(written):
        lo, hi = c * arr.chunk_len, min(capacity, (c + 1) * arr.chunk_len)
        model[lo:hi] = random_items(rng, hi - lo, item_shape, dtype)
        arr[lo:hi] = model[lo:hi]
    return arr, model


@st.composite
def arrays(draw):
    chunk_len = draw(st.integers(1, 9))
    capacity = draw(st.integers(chunk_len, 90))
    nchunks = -(-capacity // chunk_len)
    written = draw(st.sets(st.integers(0, nchunks - 1), max_size=nchunks))
    item_shape = draw(st.sampled_from([(), (3,), (2, 5)]))
    return dict(capacity=capacity, chunk_len=chunk_len, item_shape=item_shape,
                dtype=draw(st.sampled_from(DTYPES)), codec=draw(st.sampled_from(CODECS)),
                written=written, seed=draw(st.integers(0, 2**16)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=arrays(), target=st.sampled_from([1, 40, 300, 1 << 20]), plain=st.booleans(),
       version=st.sampled_from([2, 3]))
def test_every_layout_round_trips_against_numpy(tmp_path, spec, target, plain, version):
    arr, model = build(**spec)
    path = tmp_path / "s.h5"
    with mock.patch.object(_groups, "TARGET_GROUP_BYTES", target):  # G from 1 to the whole array
        hdf5.save(path, {"a": arr}, progress=False, format_version=version, plain_readable=plain)
    assert hdf5.verify(path) == []
    for lazy in (True, False):
        with hdf5.load(path, lazy=lazy) as store:
            got = store.arrays["a"]
            assert store.header["format_version"] == version
            assert bits(np.asarray(got)) == bits(model) and got.dtype == model.dtype
            assert got.stored_chunks().tolist() == sorted(spec["written"])
            for c in got.stored_chunks().tolist():  # verbatim
                assert bytes(got.chunk_bytes(c)) == bytes(arr.chunk_bytes(c))
    raw = path.read_bytes()
    for c, offset, n in hdf5.chunk_spans(path, "a").tolist():  # each chunk's bytes, where listed
        assert raw[offset:offset + n] == bytes(arr.chunk_bytes(c))


def test_the_default_buffer_codec_is_grouped_and_plain_zstd_is_not(tmp_path):
    frames = np.repeat(random_items(np.random.default_rng(0), 50, (64, 64), np.uint8), 8, axis=0)
    trained = ChunkedArray(400, (64, 64), np.uint8, chunk_len=4, name="t",
                           codec=get_codec("zstd3+dict").trained(list(frames)))
    plain = ChunkedArray(400, (64, 64), np.uint8, chunk_len=4, codec="zstd3", name="p")
    trained[:], plain[:] = frames, frames
    assert trained.codec.dictionary
    hdf5.save(tmp_path / "s.h5", {"t": trained, "p": plain}, progress=False)
    with hdf5.load(tmp_path / "s.h5") as store:
        assert store.header["format_version"] == 3
        assert store.header["chunks_per_hdf5_chunk"] == {"t": 100, "p": 1}  # capacity // chunk_len caps G
        assert store.header["hdf5_filters"] == {"t": "chunkstore", "p": "zstd"}
    with h5py.File(tmp_path / "s.h5", "r") as f:
        assert f["t"].chunks == (400, 64, 64) and f["p"].chunks == (4, 64, 64)
        assert f["t"].id.get_num_chunks() == 1 and f["p"].id.get_num_chunks() == 100
        assert np.array_equal(f["p"][...], frames)


# -- the group arithmetic ------------------------------------------------------------------------
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 50)), max_size=40, unique_by=lambda t: t[0]),
       st.integers(1, 12))
def test_group_offsets_match_a_plain_model(pairs, group):
    pairs.sort()
    chunks = np.array([c for c, _ in pairs], np.int64)
    nbytes = np.array([n for _, n in pairs], np.int64)
    offsets, totals, seen = [], {}, {}
    for c, n in pairs:
        offsets.append(seen.get(c // group, 0))
        seen[c // group] = offsets[-1] + n
        totals[c // group] = seen[c // group]
    assert _groups.offsets_in_groups(chunks, nbytes, group).tolist() == offsets
    assert _groups.group_nbytes(chunks, nbytes, group).tolist() == list(totals.values())
    bounds = _groups.group_bounds(chunks, group)
    assert [sorted({int(c) // group for c in chunks[a:b]}) for a, b in itertools.pairwise(bounds)] == \
        [[g] for g in totals]


def test_group_size_respects_hdf5_limits():
    sizes = np.full(10, 1000)
    assert _groups.choose_group(10**6, 4, 7056, sizes, target=256_000) == 256
    assert _groups.choose_group(40, 4, 7056, sizes, target=256_000) == 10  # no longer than the dataset
    assert _groups.choose_group(10**6, 4, 7056, np.zeros(0), target=256_000) == 1
    assert _groups.choose_group(10**6, 4, 7056, sizes, target=10) == 1
    big = _groups.choose_group(10**9, 1, 100 << 20, np.full(3, 1), target=1 << 40)
    assert big * (100 << 20) <= _groups.MAX_DECODED_GROUP_BYTES
    huge = _groups.choose_group(10**9, 1, 1, np.full(3, 1 << 31), target=1 << 40)
    assert huge == 1  # two 2 GiB chunks would pass HDF5's 4 GiB per chunk


# -- reads stay per chunk ------------------------------------------------------------------------
@pytest.fixture
def grouped(tmp_path):
    arr, model = build(400, 8, (6,), np.int16, "lz4-block/0", set(range(50)) - {7}, seed=3)
    path = tmp_path / "g.h5"
    hdf5.save(path, {"a": arr}, progress=False)
    with hdf5.load(path) as store:
        assert store.header["chunks_per_hdf5_chunk"]["a"] == 50  # one HDF5 chunk for all
    return path, model


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0xA5]))


def test_a_lazy_read_reads_and_checks_only_the_chunks_it_needs(grouped):
    path, model = grouped
    with hdf5.load(path, cache=0) as store:
        arr = store.arrays["a"]
        assert bits(arr[17]) == bits(model[17])
        assert arr.tier.info()["verified_chunks"] == 1  # chunk 2 alone, not its HDF5 chunk
        assert bits(arr.take(np.array([3, 300, 301]))) == bits(model[[3, 300, 301]])
        assert arr.tier.info()["verified_chunks"] == 3  # chunks 0 and 37 more


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
def test_a_damaged_chunk_inside_a_group_is_named_and_its_neighbours_still_read(grouped, lazy):
    path, model = grouped
    spans = hdf5.chunk_spans(path, "a")
    _, offset, n = spans[spans[:, 0] == 20][0]
    flip(path, int(offset + n // 2))
    if not lazy:
        with pytest.raises(CorruptChunkError, match="a: chunk 20") as e:
            hdf5.load(path, lazy=False)
        assert (e.value.array, e.value.chunk) == ("a", 20)
    else:
        with hdf5.load(path, cache=0) as store:
            arr = store.arrays["a"]
            assert bits(arr[152:160]) == bits(model[152:160])  # chunk 19, same HDF5 chunk
            assert bits(arr[168:176]) == bits(model[168:176])  # chunk 21
            with pytest.raises(CorruptChunkError) as e:
                arr[160]
            assert (e.value.array, e.value.chunk) == ("a", 20)
    assert [(p.array, p.chunk) for p in hdf5.verify(path)] == [("a", 20)]


def test_writing_into_a_lazy_grouped_array_then_saving_over_its_own_file(grouped):
    path, model = grouped
    store = hdf5.load(path)
    arr = store.arrays["a"]
    new = random_items(np.random.default_rng(9), 20, (6,), np.int16)
    arr[56:64] = new[:8]  # chunk 7, never written: a new chunk in RAM, inside the file's group
    arr[100:104] = new[8:12]  # rewrite part of a file chunk
    model[56:64], model[100:104] = new[:8], new[8:12]
    hdf5.save(path, {"a": arr}, progress=False)
    assert bits(np.asarray(arr)) == bits(model)  # still reads the old file's bytes
    store.close()
    assert hdf5.verify(path) == []
    with hdf5.load(path) as again:
        assert bits(np.asarray(again.arrays["a"])) == bits(model)
        assert again.arrays["a"].stored_chunks().tolist() == list(range(50))


# -- crafted and damaged format-3 metadata: clear errors ------------------------------------------
def edit_table(path: Path, key: str, change) -> None:
    with h5py.File(path, "r+") as f:
        table = f["_chunkstore/arrays/a"]
        data = change(table[key][()])
        del table[key]
        table[key] = data


@pytest.mark.parametrize("what, change, match", [
    ("one size one byte more", lambda n: n + np.eye(1, len(n), 10, dtype=n.dtype)[0],
     r"array 'a' is damaged .*HDF5 chunk 0 holds \d+ bytes, its chunks in the chunk table \d+"),
    ("a size missing", lambda n: n[:-1], "49 chunks but 49 checksums and 48 sizes"),
    ("a size past 4 GiB", lambda n: n.astype(np.int64) + (1 << 33), "chunk sizes outside"),
    ("a negative size", lambda n: n.astype(np.int64) - (1 << 33), "chunk sizes outside"),
])
def test_a_crafted_size_table_is_a_clear_error(grouped, reseal, what, change, match):
    path, _ = grouped
    edit_table(path, "nbytes", change)
    with pytest.raises(CorruptFileError, match="chunk table of array 'a' failed its checksum"):
        hdf5.load(path)
    reseal(path)  # as a crafted file would be
    for lazy in (True, False):
        with pytest.raises(CorruptFileError, match=match):
            hdf5.load(path, lazy=lazy)
    assert [p.array for p in hdf5.verify(path)] == ["a"]


def test_crafted_sizes_that_add_up_still_cannot_change_data(grouped, reseal):
    """Sizes moved between two chunks of a group (same total): their CRC32s catch it."""
    path, _ = grouped
    edit_table(path, "nbytes", lambda n: (n + np.r_[3, -3, np.zeros(len(n) - 2, np.int64)]).astype(n.dtype))
    reseal(path)
    with pytest.raises(CorruptChunkError) as e:
        hdf5.load(path, lazy=False)
    assert (e.value.array, e.value.chunk) == ("a", 0)
    with hdf5.load(path, cache=0) as store, pytest.raises(CorruptChunkError):
        store.arrays["a"][0]
    assert [(p.array, p.chunk) for p in hdf5.verify(path)] == [("a", 0), ("a", 1)]


@pytest.mark.parametrize("group", [0, 7, 10**6, "5", True])
def test_a_crafted_group_attribute_is_a_clear_error(grouped, reseal, group):
    path, _ = grouped
    with h5py.File(path, "r+") as f:
        f["a"].attrs["chunks_per_hdf5_chunk"] = group
    with pytest.raises(CorruptFileError, match="description of array 'a' failed its checksum"):
        hdf5.load(path)
    reseal(path)
    with pytest.raises(CorruptFileError, match="array 'a' is damaged"):
        hdf5.load(path)
    problems = hdf5.verify(path)
    assert [p.array for p in problems] == ["a"]


def test_an_hdf5_chunk_outside_the_chunk_table_is_reported(tmp_path):
    arr, _ = build(64, 4, (), np.uint8, "lz4-block/0", set(range(8)), seed=1)
    path = tmp_path / "s.h5"
    with mock.patch.object(_groups, "TARGET_GROUP_BYTES", 60):
        hdf5.save(path, {"a": arr}, progress=False)
    with h5py.File(path, "r+") as f:
        G = int(f["a"].attrs["chunks_per_hdf5_chunk"])
        g = 15 // G  # the last HDF5 chunk: chunks 8..15 were never written
        assert G > 1 and g * G >= 8
        f["a"].id.write_direct_chunk((g * G * 4,), b"stray bytes")
    problems = hdf5.verify(path)
    assert [(p.array, p.chunk) for p in problems] == [("a", g * G)]
    assert f"HDF5 chunk {g} (chunks {g * G}..{g * G + G - 1}) is in the file but not in the chunk table" \
        in problems[0].message
    with hdf5.load(path) as store:  # nothing listed there: nothing read from it
        assert not np.asarray(store.arrays["a"])[48:].any()


# -- plain HDF5 readers ----------------------------------------------------------------------------
def test_plain_h5py_fails_loudly_on_grouped_datasets_never_returns_garbage(tmp_path):
    """Grouped zstd chunks under the Zstd filter would read as the first chunk + junk: declared private."""
    frames = random_items(np.random.default_rng(2), 200, (16, 16), np.uint8)
    arr = ChunkedArray(240, (16, 16), np.uint8, chunk_len=4, codec="zstd3", name="obs")
    arr[:200] = frames
    path = tmp_path / "s.h5"
    hdf5.save(path, {"obs": arr}, progress=False, plain_readable=False)
    np.save(tmp_path / "want.npy", frames)
    script = textwrap.dedent(f"""
        import sys, h5py, hdf5plugin, numpy as np
        assert "chunkstore" not in sys.modules
        with h5py.File({str(path)!r}, "r") as f:
            d = f["obs"]
            print(d.attrs["hdf5_filter"], d.chunks[0])
            print("grouped" in d.attrs["note"] or "HDF5 chunk holds" in d.attrs["note"])
            try:
                d[0:4]
                print("READ")
            except OSError:
                print("OSError")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    declared, noted, result = out.stdout.split("\n")[:3]
    assert declared == "chunkstore 240" and noted == "True" and result == "OSError"
    with hdf5.load(path) as store:  # chunkstore reads it
        assert bits(store.arrays["obs"][:200]) == bits(frames)


# -- snapshots and the chunk source ------------------------------------------------------------------
def test_a_snapshot_is_saved_as_it_was_whatever_the_array_does_after(tmp_path):
    arr, model = build(120, 6, (4,), np.float32, "lz4-block/0", set(range(20)), seed=4)
    snapshot = [(int(c), bytes(arr.chunk_bytes(c))) for c in arr.stored_chunks()]  # frozen copies
    source = ChunkSource.from_chunks(snapshot[::-1], capacity=arr.capacity, item_shape=arr.item_shape,
                                     dtype=arr.dtype, chunk_len=arr.chunk_len, codec=arr.codec)
    arr[:] = np.full((120, 4), -1, np.float32)  # the array moves on before and during the save
    arr.discard(60, 120)
    hdf5.save(tmp_path / "s.h5", {"a": source}, progress=False)
    with hdf5.load(tmp_path / "s.h5") as store:
        assert bits(np.asarray(store.arrays["a"])) == bits(model)


def test_a_source_whose_bytes_change_stops_the_save_and_keeps_the_old_file(tmp_path):
    arr, _ = build(64, 4, (), np.uint8, "lz4-block/0", set(range(16)), seed=5)
    path = tmp_path / "s.h5"
    hdf5.save(path, {"a": arr}, progress=False)
    before = path.read_bytes()
    views = [bytes(arr.chunk_bytes(c)) for c in arr.stored_chunks()]
    for blobs, match in [(views[:-1], "15 chunks' bytes for 16 listed"),
                         ([*views, b"x"], "more chunks than listed"),
                         ([*views[:3], views[3] + b"\0", *views[4:]], "chunk 3 holds")]:
        source = ChunkSource(64, (), np.uint8, 4, arr.codec, arr.stored_chunks(),
                             [len(v) for v in views], lambda b=blobs: iter(b))
        for version in (2, 3):
            with pytest.raises(RuntimeError, match=match):
                hdf5.save(path, {"a": source}, progress=False, format_version=version)
            assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.h5"]


@pytest.mark.parametrize("kwargs, error", [
    (dict(pairs=[(0, b"x"), (0, b"y")]), "increase"),
    (dict(pairs=[(16, b"x")]), "increase within 0..15"),
    (dict(pairs=[], chunk_len=65), "chunk_len 65"),
])
def test_bad_snapshots_are_refused_at_the_call(kwargs, error):
    args = dict(capacity=64, item_shape=(), dtype=np.uint8, chunk_len=4, codec="lz4-block")
    args.update({k: v for k, v in kwargs.items() if k != "pairs"})
    with pytest.raises(ValueError, match=error):
        ChunkSource.from_chunks(kwargs["pairs"], **args)


def test_save_refuses_other_objects_and_unknown_versions(tmp_path, monkeypatch):
    with pytest.raises(TypeError, match="ChunkedArray or ChunkSource"):
        hdf5.save(tmp_path / "s.h5", {"a": np.zeros(3)}, progress=False)
    for bad in (1, 4, True):
        with pytest.raises(ValueError, match=r"writes versions \(2, 3\)"):
            hdf5.save(tmp_path / "s.h5", {}, progress=False, format_version=bad)
    monkeypatch.setenv("CHUNKSTORE_SAVE_FORMAT", "two")
    with pytest.raises(ValueError, match="CHUNKSTORE_SAVE_FORMAT='two'"):
        hdf5.save(tmp_path / "s.h5", {}, progress=False)
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv("CHUNKSTORE_SAVE_FORMAT", "2")
    hdf5.save(tmp_path / "s.h5", {}, progress=False)
    with hdf5.load(tmp_path / "s.h5") as store:
        assert store.header["format_version"] == 2


# -- format 2 is still written as format 2 wrote it --------------------------------------------------
def _walk(path: Path) -> dict:
    """Every object of an HDF5 file: attributes (but the time, version and the checksums
    that cover them), dataset values, chunk shapes and stored chunk bytes."""
    skip = {"created", "chunkstore_version", "checksums", "reader_note"}
    out = {}
    with h5py.File(path, "r") as f:
        out["/"] = {k: str(v) for k, v in f.attrs.items() if k not in skip}

        def visit(name, obj):
            entry = {"attrs": {k: str(v) for k, v in obj.attrs.items()}}
            if isinstance(obj, h5py.Dataset):
                entry.update(shape=obj.shape, chunks=obj.chunks, dtype=str(obj.dtype))
                if obj.chunks is None:
                    entry["data"] = obj[()].tobytes()
                else:
                    entry["stored"] = {tuple(obj.id.get_chunk_info(i).chunk_offset):
                                       obj.id.read_direct_chunk(obj.id.get_chunk_info(i).chunk_offset)[1]
                                       for i in range(obj.id.get_num_chunks())}
            out[name] = entry

        f.visititems(visit)
    return out


def test_format_2_written_today_is_the_pinned_format_2_file(tmp_path, monkeypatch):
    """The v2 fixture store, made again by today's writer asked for format 2: the same file
    (every attribute, dataset and stored chunk byte), but the time and version stamps."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("v2_maker", REPO / "tests/fixtures/v2/make_fixtures.py")
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    monkeypatch.setenv("CHUNKSTORE_SAVE_FORMAT", "2")
    maker.fixtures()["store_rollout.h5"][0](tmp_path / "store_rollout.h5")
    got, want = _walk(tmp_path / "store_rollout.h5"), _walk(REPO / "tests/fixtures/v2/store_rollout.h5")
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == want[name], name


def test_format_3_and_format_2_files_of_one_store_load_the_same(tmp_path):
    arrays = {}
    for k, codec in enumerate(CODECS):
        arrays[f"x/{k}"] = build(75, 8, (3, 4), DTYPES[k % len(DTYPES)], codec, {0, 1, 2, 4, 9}, seed=k)[0]
    extras, attrs = {"pos": np.array(3)}, {"note": "both"}
    for version in (2, 3):
        hdf5.save(tmp_path / f"v{version}.h5", arrays, extras, attrs, progress=False, format_version=version)
    with hdf5.load(tmp_path / "v2.h5") as two, hdf5.load(tmp_path / "v3.h5") as three:
        assert (two.header["format_version"], three.header["format_version"]) == (2, 3)
        for name, arr in arrays.items():
            assert bits(np.asarray(two.arrays[name])) == bits(np.asarray(three.arrays[name])) == bits(np.asarray(arr))
        assert two.attrs == three.attrs and json.dumps(two.extras["pos"].tolist()) == "3"


# -- a store that keeps training between saves, against numpy --------------------------------------
class SaveLoadMachine(RuleBasedStateMachine):
    """Writes, discards, and saves over the very file the array was lazily loaded from, in every
    layout; after each step the array (fresh, lazily loaded or loaded into RAM) equals numpy."""

    @initialize(codec=st.sampled_from(["lz4-block/0", "zstd/3", "rle", "none"]),
                dtype=st.sampled_from([np.uint8, np.float32, np.int64]), chunk_len=st.integers(1, 6))
    def start(self, codec, dtype, chunk_len):
        self.dir = Path(tempfile.mkdtemp(prefix="chunkstore-v3-machine-"))
        self.path = self.dir / "s.h5"
        self.arr = ChunkedArray(61, (2,), dtype, chunk_len=chunk_len, codec=codec, name="a")
        self.model = np.zeros((61, 2), dtype)
        self.store = None
        self.rng = np.random.default_rng(0)

    @rule(start=st.integers(0, 60), n=st.integers(1, 20))
    def write(self, start, n):
        stop = min(61, start + n)
        values = random_items(self.rng, stop - start, (2,), self.model.dtype)
        self.arr[start:stop] = values
        self.model[start:stop] = values

    @rule(start=st.integers(0, 60), n=st.integers(1, 30))
    def discard(self, start, n):
        stop = min(61, start + n)
        self.arr.discard(start, stop)
        L = self.arr.chunk_len
        first, last = -(-start // L), (stop // L if stop < 61 else -(-61 // L))
        self.model[first * L:min(61, last * L)] = 0  # whole chunks inside the range read as zeros

    @rule(version=st.sampled_from([2, 3]), plain=st.booleans(), lazy=st.booleans(),
          group_bytes=st.sampled_from([1, 30, 1 << 20]))
    def save_and_reload(self, version, plain, lazy, group_bytes):
        with mock.patch.object(_groups, "TARGET_GROUP_BYTES", group_bytes):
            hdf5.save(self.path, {"a": self.arr}, progress=False, format_version=version,
                      plain_readable=plain)
        assert bits(np.asarray(self.arr)) == bits(self.model)  # the save changed nothing it reads
        if self.store is not None:
            self.store.close()
        assert hdf5.verify(self.path) == []
        self.store = hdf5.load(self.path, lazy=lazy)
        self.arr = self.store.arrays["a"]

    @invariant()
    def equals_numpy(self):
        if hasattr(self, "arr"):
            assert bits(np.asarray(self.arr)) == bits(self.model)

    def teardown(self):
        if getattr(self, "store", None) is not None:
            self.store.close()
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)


SaveLoadMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=12, deadline=None)
TestSaveLoadMachine = SaveLoadMachine.TestCase


@pytest.mark.parametrize("dtype", ANY_DTYPES, ids=str)
@pytest.mark.parametrize("codec", ["zstd1", "lz4-frame/1", "none"])
def test_every_kind_of_dtype_saves_and_loads_bit_for_bit(tmp_path, dtype, codec):
    """Void, strings, structured, datetimes, big-endian: the same dtype and bytes back, lazily or not,
    unwritten items all-zero bytes (a partly written array, its last chunk open)."""
    dtype = np.dtype(dtype)
    raw = np.random.default_rng(3).integers(0, 256, 30 * 2 * dtype.itemsize, dtype=np.uint8)
    items = raw.view(dtype).reshape(30, 2) if dtype != np.bool_ else (raw[:60] & 1).astype(bool).reshape(30, 2)
    arr = ChunkedArray(30, (2,), dtype, chunk_len=4, codec=codec)
    arr[0:13] = items[:13]
    want = np.zeros((30, 2), dtype)
    want[:13] = items[:13]
    hdf5.save(tmp_path / "a.h5", {"a": arr}, progress=False)
    for lazy in (True, False):
        with hdf5.load(tmp_path / "a.h5", lazy=lazy) as store:
            back = store.arrays["a"]
            assert back.dtype == dtype and back.shape == (30, 2)
            assert np.asarray(back).tobytes() == want.tobytes()


@pytest.mark.parametrize("codec", ["zstd1", "lz4-frame/1"])
def test_a_file_holds_only_the_chunks_written(tmp_path, codec):
    """HDF5's chunk index grows with the chunks written: a fixed-shape dataset had HDF5 allocate
    16 B for every chunk of the capacity (5 MB for a 1M-frame ring holding a few hundred frames)."""
    arr = ChunkedArray(1_000_000, (8,), np.uint8, chunk_len=4, codec=codec)
    items = np.random.default_rng(0).integers(0, 255, (40, 8), dtype=np.uint8)
    arr[0:40] = items
    hdf5.save(tmp_path / "a.h5", {"a": arr}, progress=False)
    assert (tmp_path / "a.h5").stat().st_size < 200_000  # 250,000 chunks of the capacity: 4 MB of index before
    with hdf5.load(tmp_path / "a.h5") as store:
        back = store.arrays["a"]
        assert back.shape == (1_000_000, 8)
        assert np.array_equal(back.take(np.arange(40)), items) and not back.take(np.arange(40, 80)).any()
    if codec == "zstd1":  # one HDF5 chunk per chunk: plain h5py reads it, at the declared shape
        import hdf5plugin  # noqa: F401
        with h5py.File(tmp_path / "a.h5") as f:
            assert f["a"].shape == (1_000_000, 8) and np.array_equal(f["a"][:40], items)
