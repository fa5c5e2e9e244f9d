"""A bad option of a load is the caller's error naming it, raised before the file is read.

Before, ``hdf5.load(path, cache=-1)`` raised ``CorruptFileError: ... array 'a' is damaged
(ValueError: cache must be >= 0)``, a buffer's ``load(path, tier=object())`` or
``load(path, buffer_device="bogus")`` raised ``FormatError: ... damaged replay buffer state``:
blaming a sound file; ``lazy="no"`` loaded lazily (a truthy string).
"""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from chunkstore import ChunkedArray, FormatError, hdf5
from sb3_integration import CompressedNStepReplayBuffer, CompressedReplayBuffer


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    a = ChunkedArray(32, (2,), np.uint8, chunk_len=4, codec="zstd3", name="a")
    a[:10] = 3
    path = tmp_path_factory.mktemp("args") / "s.h5"
    hdf5.save(path, {"a": a}, progress=False)
    return path


@pytest.fixture(scope="module")
def buffer_path(tmp_path_factory):
    buf = CompressedReplayBuffer(16, spaces.Box(0, 255, (2, 3), np.uint8), spaces.Discrete(3), device="cpu")
    for t in range(6):
        o = np.full((1, 2, 3), t, np.uint8)
        buf.add(o, o, np.zeros((1, 1)), np.ones(1, np.float32), np.zeros(1), [{}])
    path = tmp_path_factory.mktemp("args") / "b.h5"
    buf.save(path)
    return path


BAD_STORE_OPTIONS = [
    ({"cache": -1}, ValueError, "cache must be >= 0, got -1"),
    ({"cache": 2.5}, ValueError, "cache must be a whole number, got 2.5"),
    ({"cache": "big"}, TypeError, "cache must be an int"),
    ({"tier": object()}, TypeError, "tier must be a chunkstore Tier"),
    ({"lazy": "no"}, TypeError, "lazy must be True or False, got str 'no'"),
    ({"lazy": None}, TypeError, "lazy must be True or False"),
    ({"lazy": 0}, TypeError, "lazy must be True or False"),
    ({"verify": "ALWAYS"}, ValueError, "verify must be None, True, False or 'always'"),
]


@pytest.mark.parametrize(("options", "error", "match"), BAD_STORE_OPTIONS)
def test_a_bad_store_load_option_is_the_callers_error(store_path, options, error, match):
    with pytest.raises(error, match=match) as e:
        hdf5.load(store_path, **options)
    assert not isinstance(e.value, FormatError)


@pytest.mark.parametrize(("options", "error", "match"), [
    *[b for b in BAD_STORE_OPTIONS if "cache" not in b[0]],
    ({"buffer_device": "bogus"}, ValueError, "buffer_device must name a torch device"),
    ({"buffer_device": "cpu", "tier": None, "heap_bytes": -1}, ValueError, "heap_bytes"),
    ({"heap_bytes": 1 << 20}, ValueError, "heap_bytes is the device budget of buffer_device"),
])
def test_a_bad_buffer_load_option_is_the_callers_error(buffer_path, options, error, match):
    with pytest.raises(error, match=match) as e:
        CompressedReplayBuffer.load(buffer_path, device="cpu", **options)
    assert not isinstance(e.value, FormatError)


def test_a_bad_option_is_refused_before_the_file_is_opened(tmp_path):
    """The option is wrong whatever the file: a missing path still gives the option's error."""
    with pytest.raises(TypeError, match="lazy must be True or False"):
        hdf5.load(tmp_path / "missing.h5", lazy="yes")
    with pytest.raises(ValueError, match="buffer_device must name"):
        CompressedNStepReplayBuffer.load(tmp_path / "missing.h5", buffer_device="bogus")


@pytest.mark.parametrize("lazy", [True, False, np.bool_(True), np.bool_(False)])
def test_good_options_still_load(store_path, buffer_path, lazy):
    with hdf5.load(store_path, lazy=lazy, cache=1 << 16) as store:
        np.testing.assert_array_equal(store.arrays["a"][:10], np.full((10, 2), 3, np.uint8))
    buf = CompressedReplayBuffer.load(buffer_path, device="cpu", lazy=lazy)
    assert buf.pos == 6 and int(np.asarray(buf.observations)[5, 0, 0, 0]) == 5
    buf.close()
