"""Every registered codec runs the codec contract (:class:`chunkstore.testing.codecs.CodecTests`).

The codecs come from the registry (:func:`chunkstore.codecs.codec_names`, one per family at its
default level), plus what it lists no name for: a ``zstd+dict`` codec untrained and trained, and
the ``xor+`` wrapper. A codec registered later is covered without an edit here, or
:func:`test_every_registered_codec_class_is_covered` says which one is not.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from chunkstore.codecs import Codec, TrainableCodec, _registry, codec_names, get_codec
from chunkstore.errors import CodecConfigError, MissingBackendError
from chunkstore.testing.codecs import CodecTests, sample_array

UNLISTED = ["zstd3+dict", "zstd3+dict trained", "xor+zstd/3", "xor+rle"]


@functools.cache
def build(name: str) -> Codec:
    if name.endswith(" trained"):  # 1.8 MB of moving frames with noise: zstd wants >= 1 MB
        rng = np.random.default_rng(0)
        base = sample_array(np.uint8, (84, 84), seed=1)
        frames = [np.roll(base, s, axis=1) ^ (rng.random(base.shape) < 0.02) for s in range(256)]
        untrained = get_codec(name.removesuffix(" trained"))
        assert isinstance(untrained, TrainableCodec)
        codec = untrained.trained(frames)
        assert isinstance(codec, TrainableCodec) and not codec.wants_training, "zstd trained no dictionary"
        return codec
    return get_codec(name)


class TestEveryRegisteredCodec(CodecTests):
    @pytest.fixture(params=[*codec_names(), *UNLISTED])
    def codec(self, request) -> Codec:
        try:
            return build(request.param)
        except MissingBackendError as e:  # igzip without python-isal
            pytest.skip(str(e))


def test_every_registered_codec_class_is_covered():
    covered = set()
    for name in [*codec_names(), *UNLISTED]:
        try:
            codec = build(name)
        except MissingBackendError:
            codec = None
        covered |= {type(codec)} | ({type(codec.inner)} if hasattr(codec, "inner") else set())
        covered.add(_registry._BY_PREFIX.get(name.partition("/")[0]))  # igzip, when isal is absent
    assert set(_registry._BY_ID.values()) <= covered


class _FortranCodec(Codec):
    """Encodes the bytes in memory order, not C order: what the contract must catch."""

    codec_id = "fortran-example"

    def encode(self, arr):
        return np.asarray(arr).tobytes(order="A")

    def decode(self, buf, out=None):
        return get_codec("none").decode(buf, out)


def test_the_contract_is_not_blind():
    with pytest.raises(AssertionError):
        CodecTests().test_non_contiguous_input_encodes_its_c_order(_FortranCodec())
    with pytest.raises(CodecConfigError, match="unknown codec id"):  # not registered: no config round trip
        CodecTests().test_the_config_rebuilds_an_equal_codec(_FortranCodec())
