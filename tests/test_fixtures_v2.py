"""Files written by chunkstore format v2 load with identical contents (pinned fixtures).

``tests/fixtures/v2`` holds files written once by the format-v2 code (one HDF5 chunk per
chunkstore chunk) and the SHA-256 of their decoded contents (``expected.json``; see
``make_fixtures.py`` there). Every later chunkstore must read them back bit-identically,
lazily and into RAM, and saving them again must keep the contents.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from chunkstore import hdf5

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "v2"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
NAMES = sorted(EXPECTED)


def _maker():
    spec = importlib.util.spec_from_file_location("chunkstore_v2_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_fixture_is_a_format_2_file():
    assert NAMES == ["dict_replay.h5", "replay_columns.h5", "replay_default.h5", "replay_zstd3.h5",
                     "store_rollout.h5"]
    for name in NAMES:
        with h5py.File(FIXTURES / name, "r") as f:
            assert f.attrs["format_version"] == 2, name


@pytest.mark.parametrize("name", NAMES)
def test_fixture_file_is_the_one_pinned(name):
    data = (FIXTURES / name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == EXPECTED[name]["file_sha256"]


@pytest.mark.parametrize("name", NAMES)
def test_v2_fixture_loads_with_identical_contents(name):
    want = EXPECTED[name]
    got = _maker().contents_digests(FIXTURES / name, want["kind"])
    assert got == want["digests"]


@pytest.mark.parametrize("name", NAMES)
def test_v2_fixture_verifies_clean(name):
    report = hdf5.verify_report(FIXTURES / name)
    assert report.ok and report.format_version == 2 and report.chunks > 0
    assert "header" in report.checksums


@pytest.mark.parametrize("name", NAMES)
def test_v2_fixture_arrays_load_the_same_lazily_and_into_ram(name):
    with hdf5.load(FIXTURES / name, lazy=True) as lazy, hdf5.load(FIXTURES / name, lazy=False) as ram:
        assert lazy.header["format_version"] == 2 and lazy.header["checksums"] == "verified"
        assert set(lazy.arrays) == set(ram.arrays) and lazy.arrays
        for key, arr in lazy.arrays.items():
            other = ram.arrays[key]
            assert np.array_equal(arr.stored_chunks(), other.stored_chunks())
            assert np.asarray(arr).tobytes() == np.asarray(other).tobytes(), key
            for c in arr.stored_chunks().tolist():
                assert bytes(arr.chunk_bytes(c)) == bytes(other.chunk_bytes(c))


def test_the_store_fixture_holds_padded_tails_and_every_filter_kind():
    """What the v2 reader path must still parse: verbatim tails beside padded chunks."""
    with h5py.File(FIXTURES / "store_rollout.h5", "r") as f:
        arrays = json.loads(f.attrs["arrays"])
        filters = {f[n].attrs["hdf5_filter"] for n in arrays}
        tails = [n for n in arrays if "tail" in f[f"_chunkstore/arrays/{n}"]]
    assert filters == {"chunkstore", "zstd", "deflate", "none"}
    assert sorted(tails) == ["rollout/gzip_6", "rollout/none", "rollout/zstd_-5"]


def test_default_fixture_holds_a_trained_dictionary():
    with hdf5.load(FIXTURES / "replay_default.h5") as store:
        codec = store.arrays["observations/frames"].codec
        assert codec.codec_id == "zstd-dict" and codec.dictionary


@pytest.mark.parametrize("name", NAMES)
def test_a_v2_fixture_saved_again_keeps_its_contents(name, tmp_path):
    """Load (lazily) and save with today's format: the same decoded contents and chunk bytes."""
    kind = EXPECTED[name]["kind"]
    path = tmp_path / name
    if kind == "store":
        with hdf5.load(FIXTURES / name) as store:
            hdf5.save(path, store.arrays, store.extras, store.attrs, progress=False)
    else:
        import sb3_integration

        buf = getattr(sb3_integration, kind).load(FIXTURES / name, device="cpu")
        buf.save(path)
        buf.close()
    assert hdf5.verify(path) == []
    assert _maker().contents_digests(path, kind) == EXPECTED[name]["digests"]
