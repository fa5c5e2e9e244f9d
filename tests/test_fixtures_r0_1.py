"""Buffer files and pickles written by chunkstore 0.1.0 load with identical contents and samples.

``tests/fixtures/r0_1`` holds ``buffer.save()`` files and ``pickle`` dumps (what SB3's
``model.save_replay_buffer`` writes) of every buffer kind, made once by the 0.1.0 code,
with the SHA-256 of what a user reads back from them (``expected.json``; see
``make_fixtures.py`` there): observations, SB3's arrays, ``pos``/``full`` and a sample
drawn with a seeded ``np.random``. Every later release must reproduce them bit for bit.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "r0_1"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


def _maker():
    spec = importlib.util.spec_from_file_location("chunkstore_r0_1_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_file_is_the_one_pinned(name):
    assert hashlib.sha256((FIXTURES / name).read_bytes()).hexdigest() == EXPECTED[name]["file_sha256"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_release_0_1_artifact_loads_with_identical_contents_and_samples(name):
    maker, want = _maker(), EXPECTED[name]
    buf = maker.load_fixture(FIXTURES / name, want["kind"])
    if want["kind"] == "pickle":
        assert type(buf).__name__ == want["class"]
    assert maker.contents_digests(buf) == want["digests"]
