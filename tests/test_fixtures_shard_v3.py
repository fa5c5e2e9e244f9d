"""Shard checkpoints written before the shards' state protocol restore with identical contents.

``tests/fixtures/shard_v3`` holds checkpoint files (``SHARD_FORMAT`` versions 3 and 2) written
once by the code of commit 044e5a7 and the digests of what a shard restored from them holds
(``expected.json``; see ``make_fixtures.py`` there): every live row read back, the counters,
the per-writer message numbers, the codec version (a trained dictionary among the chunks)
and a prioritized shard's masses.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "shard_v3"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
NAMES = sorted(EXPECTED)


def _maker():
    spec = importlib.util.spec_from_file_location("chunkstore_shard_v3_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fixtures_are_the_ones_pinned():
    assert NAMES == ["prioritized.h5", "uniform.h5", "uniform_v2.h5"]
    for name in NAMES:
        assert hashlib.sha256((FIXTURES / name).read_bytes()).hexdigest() == EXPECTED[name]["file_sha256"]


@pytest.mark.parametrize("name", NAMES)
def test_a_pinned_shard_checkpoint_restores_with_identical_contents(name):
    want = EXPECTED[name]
    assert _maker().contents_digests(FIXTURES / name, want["alpha"]) == want["digests"]


def test_the_uniform_fixture_mixes_plain_and_dictionary_chunks():
    """Codec version 0's chunks (plain zstd) and version 1's (the dictionary) both decode."""
    zstandard = pytest.importorskip("zstandard")
    from chunkstore import hdf5

    with hdf5.load(FIXTURES / "uniform.h5", lazy=False) as saved:
        frames = saved.arrays["frames"]
        ids = [zstandard.get_frame_parameters(bytes(frames.chunk_bytes(c))).dict_id
               for c in frames.stored_chunks().tolist()]
    assert 0 in ids and any(ids)
    assert EXPECTED["uniform.h5"]["digests"]["codec_version"] == 1


def test_a_version_2_checkpoint_gives_a_prioritized_shard_mass_1():
    maker = _maker()
    from chunkstore import get_codec
    from sb3_integration.distributed import ShardStore

    store = ShardStore(maker.spec(0.6), get_codec("zstd3"), 0)
    store.restore(str(FIXTURES / "uniform_v2.h5"))
    assert store.size() == EXPECTED["uniform_v2.h5"]["digests"]["size"]
    assert np.array_equal(store.priority_masses(), np.ones(store.size()))
