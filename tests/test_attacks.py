"""Damaged and crafted files: every outcome is the same data or a documented error.

The attacks of the reliability review, kept as tests:

* byte flips anywhere in a saved store and in a saved replay buffer (short here, long
  with ``-m slow``): loading lazily and eagerly gives the same data or raises
  FormatError / CorruptChunkError (or their subclasses), and when ``verify`` finds
  nothing the data is the same;
* one-character edits of a trained dictionary and of the header (``pos``);
* crafted files whose checksums were recomputed (``reseal``): declared sizes far beyond
  the data, buffer state out of range, decompression bombs as chunks;
* a lazily loaded buffer's file rewritten in place after its chunks were read, with the
  file's size and mtime restored (``cp -p``, ``rsync --inplace``).

Nothing else may escape: no OSError, RuntimeError, IndexError, MemoryError, ...
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkstore import (
    ChunkedArray,
    CorruptChunkError,
    CorruptFileError,
    FormatError,
    get_codec,
    hdf5,
)
from sb3_integration import CompressedReplayBuffer

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "v1"
DOCUMENTED = (FormatError, CorruptChunkError)


# -- the files attacked ---------------------------------------------------------------------------
def make_store(path: Path) -> None:
    """Every codec family, a trained dictionary, a partial last chunk, extras, attrs."""
    rng = np.random.default_rng(0)
    frames = np.repeat(rng.integers(0, 4, (35, 64, 64), dtype=np.uint8) * 50, 8, axis=0)
    frames[:, 0, :4] = np.arange(len(frames))[:, None] % 251  # 280 distinct frames, 1.1 MB
    arrays = {"obs/dict": ChunkedArray(280, (64, 64), np.uint8, chunk_len=8, name="obs/dict",
                                       codec=get_codec("zstd3+dict").trained(list(frames)))}
    arrays["obs/dict"][:] = frames
    for name in ("zstd3", "lz4-block", "rle", "gzip", "none", "blosc2-lz4-5", "xor+zstd1", "lz4-frame"):
        arr = ChunkedArray(50, (3, 5), np.int16, chunk_len=8, codec=name, name=name)
        arr[:45] = rng.integers(0, 9, (45, 3, 5))
        arrays[f"a/{name}"] = arr
    extras = {"pos": np.array(40), "full": np.array(False),
              "rewards": rng.normal(size=(100, 2)).astype(np.float32),
              "big": np.arange(20_000, dtype=np.int64)}  # >= 64 KB: Zstd-compressed by HDF5
    hdf5.save(path, arrays, extras, {"pos": 40, "buffer_size": 100}, progress=False)


def store_digest(path: Path, lazy: bool = True) -> str:
    h = hashlib.sha256()
    with hdf5.load(path, lazy=lazy) as store:
        for name, arr in sorted(store.arrays.items()):
            h.update(f"{name}{arr.codec.get_config()}{arr.shape}{arr.dtype}".encode())
            h.update(np.asarray(arr).tobytes())
        for name, value in sorted(store.extras.items()):
            h.update(f"{name}{value.shape}{value.dtype}".encode() + value.tobytes())
        h.update(json.dumps(store.attrs, sort_keys=True).encode())
    return h.hexdigest()


def buffer_digest(path: Path, lazy: bool = True) -> str:
    buf = CompressedReplayBuffer.load(path, device="cpu", lazy=lazy)
    try:
        h = hashlib.sha256(np.asarray(buf.observations).tobytes())
        h.update(np.asarray(buf.next_observations).tobytes())
        for name in ("actions", "rewards", "dones", "timeouts"):
            h.update(getattr(buf, name).tobytes())
        h.update(f"{buf.pos} {buf.full} {buf.buffer_size}".encode())
        return h.hexdigest()
    finally:
        buf.close()


@pytest.fixture(scope="module")
def store_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("attacks") / "store.h5"
    make_store(path)
    return path


@pytest.fixture(scope="module")
def buffer_file(tmp_path_factory) -> Path:
    """A format-2 buffer with a trained dictionary: the v1 fixture, loaded and saved again."""
    path = tmp_path_factory.mktemp("attacks") / "buffer.h5"
    buf = CompressedReplayBuffer.load(FIXTURES / "replay_default.h5", device="cpu")
    buf.save(path)
    buf.close()
    return path


# -- classifying one damaged file -------------------------------------------------------------------
def outcome(path: Path, want: str, digest, *, eager: bool) -> str:
    """"harmless", "error", or what went wrong: "SILENT" (different data) or "VERIFY MISSED"."""
    results = []
    for lazy in (True, False) if eager else (True,):
        try:
            results.append("same" if digest(path, lazy) == want else "SILENT")
        except DOCUMENTED:
            results.append("error")
    try:
        clean = hdf5.verify(path) == []
    except FormatError:
        clean = False
    if "SILENT" in results:
        return "SILENT"
    if clean and "error" in results:
        return "VERIFY MISSED"
    return "error" if "error" in results else "harmless"


def flip(original: bytes, offset: int, bit: int, dest: Path) -> Path:
    data = bytearray(original)
    data[offset] ^= 1 << bit
    dest.write_bytes(bytes(data))
    return dest


def fuzz(path: Path, digest, n: int, seed: int, tmp_path: Path, *, eager: bool) -> Counter:
    original, want = path.read_bytes(), digest(path)
    rng = random.Random(seed)
    counts: Counter = Counter()
    for k in range(n):
        offset, bit = rng.randrange(len(original)), rng.randrange(8)
        result = outcome(flip(original, offset, bit, tmp_path / f"f{k % 2}.h5"), want, digest,
                         eager=eager)
        counts[result] += 1
        assert result in ("harmless", "error"), f"flip of bit {bit} at byte {offset}: {result}"
    return counts


def report(what: str, counts: Counter) -> None:
    print(f"\n{what}: {sum(counts.values())} flips, {counts['error']} clear errors, "
          f"{counts['harmless']} harmless, 0 silent corruptions, 0 crashes")


def test_byte_flips_in_a_store_are_harmless_or_clear_errors(store_file, tmp_path):
    report("store", fuzz(store_file, store_digest, 40, seed=1, tmp_path=tmp_path, eager=False))


def test_byte_flips_in_a_buffer_are_harmless_or_clear_errors(buffer_file, tmp_path):
    report("buffer", fuzz(buffer_file, buffer_digest, 15, seed=2, tmp_path=tmp_path, eager=False))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_many_byte_flips_in_a_store(store_file, tmp_path, seed):
    report(f"store seed {seed}", fuzz(store_file, store_digest, 500, seed=100 + seed,
                                      tmp_path=tmp_path, eager=True))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2))
def test_many_byte_flips_in_a_buffer(buffer_file, tmp_path, seed):
    report(f"buffer seed {seed}", fuzz(buffer_file, buffer_digest, 250, seed=200 + seed,
                                       tmp_path=tmp_path, eager=True))


@pytest.mark.slow
def test_every_flip_of_the_metadata_region(store_file, tmp_path):
    """Bytes outside the chunk data (superblock, object headers, attributes, tables, configs)."""
    chunk_bytes = np.zeros(store_file.stat().st_size, bool)
    with h5py.File(store_file, "r") as f:  # the chunk bytes are covered by CRCs anyway
        for name in json.loads(f.attrs["arrays"]):
            dset = f[name]
            for i in range(dset.id.get_num_chunks()):
                info = dset.id.get_chunk_info(i)
                chunk_bytes[info.byte_offset:info.byte_offset + info.size] = True
    original, want = store_file.read_bytes(), store_digest(store_file)
    counts: Counter = Counter()
    metadata = np.flatnonzero(~chunk_bytes)
    for offset in metadata[:: max(1, len(metadata) // 1000)].tolist():  # ~1000 evenly spread
        result = outcome(flip(original, offset, offset % 8, tmp_path / "f.h5"), want,
                         store_digest, eager=False)
        counts[result] += 1
        assert result in ("harmless", "error"), f"flip at byte {offset}: {result}"
    report("store metadata (all but chunk bytes), evenly spread", counts)


# -- edits a person makes -------------------------------------------------------------------------
def codec_config_text(f: h5py.File, name: str) -> str:
    """The codec config: an attribute, or a dataset when large (a big dictionary)."""
    if "codec_config" in f[name].attrs:
        return f[name].attrs["codec_config"]
    return f[f"_chunkstore/arrays/{name}/codec_config"][()].tobytes().decode()


def set_codec_config_text(f: h5py.File, name: str, text: str) -> None:
    if "codec_config" in f[name].attrs:
        f[name].attrs["codec_config"] = text
        return
    del f[f"_chunkstore/arrays/{name}/codec_config"]
    f[f"_chunkstore/arrays/{name}/codec_config"] = np.frombuffer(text.encode(), np.uint8)


def test_the_attacked_store_holds_a_trained_dictionary(store_file):
    with hdf5.load(store_file) as store:
        assert store.arrays["obs/dict"].codec.dictionary

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.floats(0, 1, exclude_max=True), char=st.sampled_from("AQgw+/09"))
def test_one_character_of_the_dictionary_changed_is_an_error(store_file, tmp_path, where, char):
    path = tmp_path / "edit.h5"
    path.write_bytes(store_file.read_bytes())
    with h5py.File(path, "r+") as f:
        text = codec_config_text(f, "obs/dict")
        start = text.index('"dictionary": "') + len('"dictionary": "')
        k = start + int(where * (text.index('"', start) - start))
        if text[k] == char:
            return
        set_codec_config_text(f, "obs/dict", text[:k] + char + text[k + 1:])
    with pytest.raises(CorruptFileError, match=r"codec config of array 'obs/dict'.*dictionary"):
        hdf5.load(path)
    problems = hdf5.verify(path)
    assert [p.array for p in problems] == ["obs/dict"] and "checksum" in problems[0].message


@pytest.mark.parametrize("edit", ['"pos": 41', '"pos": 4', '"buffer_size": 1000'])
def test_an_edited_header_is_an_error(store_file, tmp_path, edit):
    path = tmp_path / "edit.h5"
    path.write_bytes(store_file.read_bytes())
    with h5py.File(path, "r+") as f:
        attrs = f.attrs["attrs"]
        key = edit.split(":")[0]
        f.attrs["attrs"] = attrs.replace(attrs[attrs.index(key):].split(",")[0].split("}")[0], edit)
        assert f.attrs["attrs"] != attrs
    with pytest.raises(CorruptFileError, match="the header failed its checksum"):
        hdf5.load(path)
    assert [p.array for p in hdf5.verify(path)] == ["header"]


def test_an_edited_buffer_pos_is_an_error(buffer_file, tmp_path):
    path = tmp_path / "edit.h5"
    path.write_bytes(buffer_file.read_bytes())
    with h5py.File(path, "r+") as f:
        attrs = json.loads(f.attrs["attrs"])
        attrs["pos"] += 1
        f.attrs["attrs"] = json.dumps(attrs)
    with pytest.raises(CorruptFileError, match="header"):
        CompressedReplayBuffer.load(path, device="cpu")


# -- crafted files (checksums recomputed) ---------------------------------------------------------
_ARGUMENTS = {"buffer_size", "n_envs", "chunk_len", "cache_bytes"}


def edit_attrs(path: Path, reseal, **changes) -> None:
    """Edit a saved buffer's attributes (constructor arguments where layout 2 keeps them)."""
    with h5py.File(path, "r+") as f:
        attrs = json.loads(f.attrs["attrs"])
        args = attrs.get("arguments", attrs)
        for key, value in changes.items():
            if key in _ARGUMENTS:
                args[key] = value
            elif key == "nstep" and args is not attrs:
                args.update(value)
            else:
                attrs[key] = value
        f.attrs["attrs"] = json.dumps(attrs)
    reseal(path)


@pytest.mark.parametrize("changes, match", [
    ({"pos": 10**9}, "'pos' is 1000000000, outside 0..1299"),
    ({"pos": -5}, "'pos' is -5, outside"),
    ({"pos": True}, "'pos' is True"),
    ({"pos": "3"}, "'pos' is '3'"),
    ({"full": 1}, "'full' is 1"),
    ({"buffer_size": 10**12}, "'actions' has shape .* buffer_size 1000000000000"),
    ({"n_envs": 8}, "'actions' has shape"),
    ({"buffer_size": 0}, "'buffer_size' is 0"),
    ({"chunk_len": 0}, "'chunk_len' is 0"),
    ({"nstep": {"n_steps": 0, "gamma": 0.9}}, "'n_steps' is 0"),
])
def test_buffer_state_out_of_range_is_refused_before_anything_is_built(buffer_file, tmp_path,
                                                                       reseal, changes, match):
    path = tmp_path / "crafted.h5"
    path.write_bytes(buffer_file.read_bytes())
    edit_attrs(path, reseal, **changes)
    with pytest.raises(FormatError, match=match):
        CompressedReplayBuffer.load(path, device="cpu")


@pytest.mark.parametrize("field, value, match", [
    ("slots", 10**6, "slots point at frames outside the stored stream"),
    ("pads", 9, "pads holds padding 9 for stacks of 4 frames"),
])
def test_frame_indices_out_of_range_are_refused(buffer_file, tmp_path, reseal, field, value, match):
    path = tmp_path / "crafted.h5"
    path.write_bytes(buffer_file.read_bytes())
    with h5py.File(path, "r+") as f:
        dset = f[f"observations/{field}"]
        data = dset[()]
        data.reshape(-1)[0] = value
        dset[...] = data
        dset.attrs["crc32"] = np.uint32(hdf5.checksum.crc32(data.tobytes()))
    reseal(path)
    with pytest.raises(FormatError, match=match):
        CompressedReplayBuffer.load(path, device="cpu")


def test_declared_capacity_far_beyond_the_data_is_refused_before_allocating(tmp_path, reseal):
    arr = ChunkedArray(64, (4,), np.uint8, chunk_len=1, codec="zstd3", name="a")
    arr[:] = 1
    path = tmp_path / "s.h5"
    hdf5.save(path, {"a": arr}, progress=False)
    huge = 2**50  # 2**50 chunks: a chunk table of 20 PiB
    with h5py.File(path, "r+") as f:  # a consistent lie: the dataset declares it too
        f.move("a", "old")
        dset = f.create_dataset("a", shape=(huge, 4), maxshape=(None, 4), chunks=(1, 4),
                                dtype=np.uint8, **dict(hdf5.writer.hdf5plugin.Zstd()))
        for k, v in f["old"].attrs.items():
            dset.attrs[k] = v
        dset.attrs["capacity"] = huge
        del f["old"]
    reseal(path)
    with pytest.raises(FormatError, match=r"chunk table .* more than the .* GiB of memory available"):
        hdf5.load(path)
    assert [p.array for p in hdf5.verify(path)] == ["a"]


def test_declared_extra_sizes_far_beyond_the_data_are_refused(tmp_path, reseal):
    path = tmp_path / "s.h5"
    hdf5.save(path, {}, {"rewards": np.arange(10, dtype=np.float32)}, progress=False)
    with h5py.File(path, "r+") as f:  # 2**40 floats declared, none stored (late allocation)
        attrs = dict(f["rewards"].attrs)
        del f["rewards"]
        dset = f.create_dataset("rewards", shape=(2**40,), dtype=np.float32)
        dset.attrs.update(attrs)
    reseal(path)
    with pytest.raises(CorruptFileError, match=r"extra 'rewards' is damaged .*4398046511104 bytes declared"):
        hdf5.load(path)


def test_a_bomb_chunk_with_a_valid_crc_is_a_corrupt_chunk(tmp_path):
    import struct

    import zstandard

    arr = ChunkedArray(64, (64,), np.uint8, chunk_len=16, codec="zstd3", name="a")
    arr[:] = 3
    block = 128 << 10  # a zstd frame of RLE blocks without a content size: 2 GiB
    bomb = bytes([0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x38]) + b"".join(
        ((block << 3) | 2 | (k == 16383)).to_bytes(3, "little") + b"\x00" for k in range(16384))
    assert zstandard.frame_content_size(bomb) == -1 and len(struct.pack("<I", 0)) == 4
    arr.put_chunk_bytes(1, bomb)  # the writer computes its CRC: the file is "valid"
    path = tmp_path / "s.h5"
    hdf5.save(path, {"a": arr}, progress=False)
    with hdf5.load(path) as store:
        with pytest.raises(CorruptChunkError, match="chunk 1") as e:
            store.arrays["a"][20]
        assert (e.value.array, e.value.chunk) == ("a", 1)
        assert np.all(store.arrays["a"][:16] == 3)
    problems = hdf5.verify(path)
    assert [(p.array, p.chunk) for p in problems] == [("a", 1)]
    assert "does not decode to 1024 bytes" in problems[0].message


def test_layout_2_buffer_state_is_checked_too():
    """Layout 2 (arguments nested, slots as global frame numbers): the same sizes and ranges."""
    from types import SimpleNamespace

    from sb3_integration.persistence._load_checks import check_saved_buffer

    size, n_envs = 50, 2
    extras = {"observations/slots": np.full((size, n_envs), 10**6, np.uint32),
              "observations/deltas": np.ones((1, size, n_envs), np.uint8),
              "observations/pads": np.zeros((2, size, n_envs), np.uint8),
              "actions": np.zeros((size, n_envs, 1))}
    store = SimpleNamespace(path="buf.h5", extras=extras, arrays={})
    meta = {"obs_shape": [4, 8, 8], "dtype": "|u1", "n_rows": size, "n_envs": n_envs,
            "stacks_per_row": 2, "dedup": True, "ring_frames": 128, "used": [True, True],
            "pending": 0, "layout": {"axis": 0, "width": 1, "depth": 4}}
    attrs = {"buffer_format_version": 2, "pos": 7, "full": False, "arrays": ["actions"],
             "stores": [[None, meta]],
             "arguments": {"buffer_size": size, "n_envs": n_envs, "chunk_len": 16,
                           "cache_bytes": 0, "n_steps": 3, "gamma": 0.99}}
    check_saved_buffer(attrs, store)  # global frame numbers beyond the ring are fine here
    for changes, match in [({"pos": 50}, "'pos' is 50"), ({"full": None}, "'full'"),
                           ({"arguments": {**attrs["arguments"], "buffer_size": 10**9}},
                            "'actions' has shape"),
                           ({"arguments": {**attrs["arguments"], "gamma": 7}}, "gamma 7"),
                           ({"stores": [[None, {**meta, "n_rows": 10**9}]]}, "n_rows")]:
        with pytest.raises(FormatError, match=match):
            check_saved_buffer({**attrs, **changes}, store)
    extras["observations/pads"][1, 3, 0] = 7
    with pytest.raises(FormatError, match="padding 7 for stacks of 4 frames"):
        check_saved_buffer(attrs, store)


# -- a lazily loaded buffer's file rewritten in place, mtime restored -----------------------------
def test_a_lazy_buffer_whose_file_is_rewritten_in_place_with_mtime_restored_raises(buffer_file,
                                                                                   tmp_path):
    path = tmp_path / "buf.h5"
    path.write_bytes(buffer_file.read_bytes())
    spans = hdf5.chunk_spans(path, "observations/frames")
    buf = CompressedReplayBuffer.load(path, device="cpu", lazy=True)
    try:
        frames = np.asarray(buf.observations)  # every frame chunk read (and checked) once
        np.random.seed(0)  # noqa: NPY002 - SB3 samples with the global RNG
        before = buf.sample(64).observations.numpy()
        st_before = os.stat(path)
        raw = bytearray(path.read_bytes())
        for _c, off, n in spans[::7].tolist():  # flip a byte in every 7th chunk, in place
            raw[off + n // 2] ^= 0x20
        with open(path, "r+b") as fh:
            fh.write(raw)
        os.utime(path, ns=(st_before.st_atime_ns, st_before.st_mtime_ns))
        assert os.stat(path).st_size == st_before.st_size
        with pytest.raises(CorruptChunkError, match=r"observations/frames: chunk \d+ in .*buf.h5 is corrupt"):
            np.asarray(buf.observations)
        np.random.seed(0)  # noqa: NPY002 - the batch of `before`: it reads damaged chunks
        with pytest.raises(CorruptChunkError) as e:
            buf.sample(64)
        assert e.value.array == "observations/frames" and e.value.chunk in set(spans[::7, 0].tolist())
        assert before.shape == (64, 4, 84, 84) and frames.shape[0] == buf.buffer_size
    finally:
        buf.close()


# -- crafted files: a buffer state that is in range but not consistent in itself ---------------------
def edit_extra(f: h5py.File, name: str, edit) -> None:
    """Change an extra in place and recompute its CRC32 (the file's checksums: ``reseal``)."""
    dset = f[name]
    data = dset[()]
    edit(data)
    dset[...] = data
    dset.attrs["crc32"] = np.uint32(hdf5.checksum.crc32(data.tobytes()))


def _orphans(f: h5py.File) -> None:  # 40 frames appended that no row uses, as retried adds leave
    edit_extra(f, "observations/heads", lambda a: a.__setitem__(0, a[0] + 40))
    edit_extra(f, "observations/has_last", lambda a: a.__setitem__(0, False))


def _last_off_head(f: h5py.File) -> None:
    edit_extra(f, "observations/last_slot", lambda a: a.__setitem__(0, a[0] - 1))


def _released_past_rows(f: h5py.File) -> None:  # the oldest rows' frames released under them
    heads = int(f["observations/heads"][0])
    edit_extra(f, "observations/released", lambda a: a.__setitem__(0, (heads - 8) // 16 * 16))


@pytest.mark.parametrize("edit, match", [
    (_orphans, "holds 40 live frames that no stack uses"),
    (_last_off_head, "last stack ends at frame"),
    (_released_past_rows, "slots point at frames outside the stored stream"),
])
def test_an_inconsistent_frame_stream_in_a_resealed_file_is_refused(buffer_file, tmp_path, reseal, edit, match):
    path = tmp_path / "crafted.h5"
    path.write_bytes(buffer_file.read_bytes())
    with h5py.File(path, "r+") as f:
        edit(f)
    reseal(path)
    with pytest.raises(FormatError, match=f"damaged replay buffer state: observations: .*{match}"):
        CompressedReplayBuffer.load(path, device="cpu")
    problems = hdf5.verify(path)
    assert [p.array for p in problems] == ["buffer state"] and match in problems[0].message
