"""Files written by chunkstore format v1 load with identical contents (pinned fixtures).

``tests/fixtures/v1`` holds files written once by the format-v1 code and the SHA-256 of
their decoded contents (``expected.json``; see ``make_fixtures.py`` there). Every later
chunkstore must read them back bit-identically, as numcodecs pins its encoded fixtures.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

from chunkstore import hdf5 as fmt

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "v1"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


def _maker():
    spec = importlib.util.spec_from_file_location("chunkstore_v1_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_file_is_the_one_pinned(name):
    data = (FIXTURES / name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == EXPECTED[name]["file_sha256"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_v1_fixture_loads_with_identical_contents(name):
    want = EXPECTED[name]
    got = _maker().contents_digests(FIXTURES / name, want["kind"])
    assert got == want["digests"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_v1_fixture_verifies_clean(name):
    assert fmt.verify(FIXTURES / name) == []


def test_default_fixture_holds_a_trained_dictionary():
    with fmt.load(FIXTURES / "replay_default.h5") as store:
        codec = store.arrays["observations/frames"].codec
        assert codec.codec_id == "zstd-dict" and codec.dictionary
