"""The one dictionary-training rule (chunkstore.array.should_train / trained_codec), for arrays and Ray writers."""

from __future__ import annotations

import numpy as np
import pytest

from chunkstore import ChunkedArray, get_codec
from chunkstore.array import TRAIN_AFTER_BYTES, _training, should_train, trained_codec

SIDE = 64


def textured_frames(n: int, seed: int = 0) -> np.ndarray:
    """A noisy playfield shared by every frame and a moving sprite: what a dictionary captures."""
    field = np.random.default_rng(seed).integers(0, 256, (SIDE, SIDE)).astype(np.uint8)
    out = np.repeat(field[None], n, axis=0)
    for t in range(n):
        out[t, (t * 3) % 56:(t * 3) % 56 + 8, (t * 5) % 60:(t * 5) % 60 + 4] = 200
    return out


def test_should_train_once_the_threshold_is_reached_for_an_untrained_learning_codec():
    dict_codec = get_codec("zstd3+dict")
    assert not should_train(dict_codec, TRAIN_AFTER_BYTES - 1)
    assert should_train(dict_codec, TRAIN_AFTER_BYTES)
    assert not should_train(get_codec("zstd3"), 10 * TRAIN_AFTER_BYTES)
    trained = trained_codec(dict_codec, dict(enumerate(textured_frames(640).reshape(160, 4, SIDE, SIDE))))
    assert trained.dictionary and not should_train(trained, 10 * TRAIN_AFTER_BYTES)


def test_the_rule_is_deterministic_and_the_array_applies_it():
    frames = textured_frames(640)
    chunks = dict(enumerate(frames.reshape(160, 4, SIDE, SIDE)))
    first = trained_codec(get_codec("zstd3+dict"), chunks)
    again = trained_codec(get_codec("zstd3+dict"), chunks)
    assert first.dictionary and first.dictionary == again.dictionary
    arr = ChunkedArray(len(frames), (SIDE, SIDE), np.uint8, chunk_len=4, codec="zstd3+dict")
    arr[:] = frames
    arr.train_codec()
    assert arr.codec.dictionary == first.dictionary
    assert np.array_equal(np.asarray(arr), frames)


def test_a_dictionary_that_does_not_beat_plain_zstd_is_not_kept():
    noise = np.random.default_rng(3).integers(0, 256, (640, SIDE, SIDE)).astype(np.uint8)
    codec = trained_codec(get_codec("zstd3+dict"), dict(enumerate(noise.reshape(160, 4, SIDE, SIDE))))
    assert codec == get_codec("zstd3")


def test_too_little_data_gives_the_plain_codec_and_no_chunks_change_nothing():
    codec = get_codec("zstd3+dict")
    assert trained_codec(codec, dict(enumerate(textured_frames(8).reshape(2, 4, SIDE, SIDE)))) == get_codec("zstd3")
    assert trained_codec(codec, {}) is codec
    plain = get_codec("lz4-block")
    assert trained_codec(plain, {0: textured_frames(4)}) is plain


def test_a_ray_writer_trains_by_the_same_threshold(monkeypatch):
    from sb3_integration.distributed import ChunkWriter

    frames = textured_frames(700)
    w = ChunkWriter(1, (1, SIDE, SIDE), np.uint8, (1,), np.int64, 1, codec=get_codec("zstd3+dict"), flush_every=8)
    for t in range(len(frames) - 1):
        w.add(frames[t][None, None], frames[t + 1][None, None], np.zeros((1, 1)), np.zeros(1), np.zeros(1))
        if w.ready:
            w.drain()
    w.drain()
    drained = sum(s.nbytes for s in w.train_samples)
    monkeypatch.setattr(_training, "TRAIN_AFTER_BYTES", drained + 1)
    assert w.train() is None and w.train_samples is not None
    monkeypatch.setattr(_training, "TRAIN_AFTER_BYTES", drained)
    samples = list(w.train_samples)
    got = w.train()
    assert got.dictionary == trained_codec(get_codec("zstd3+dict"), dict(enumerate(samples))).dictionary
    assert w.train_samples is None


# -- loading: every chunk installed first, then one bounded decision (_training.settle_loaded) --------
def _saved_untrained(path, raw_bytes: int, chunk_len: int) -> np.ndarray:
    """A file of a zstd3+dict array never trained, holding ``raw_bytes`` of textured frames."""
    from chunkstore import hdf5 as fmt

    n = -(-raw_bytes // (SIDE * SIDE)) // chunk_len * chunk_len
    data = textured_frames(n)
    arr = ChunkedArray(n, (SIDE, SIDE), np.uint8, chunk_len=chunk_len, codec="zstd3+dict", name="obs")
    plain = arr.codec.untrained_equivalent()
    for c in range(n // chunk_len):  # as a save before training would have written them
        arr.put_chunk_bytes(c, plain.encode(data[c * chunk_len:(c + 1) * chunk_len]), train=False)
    assert _training.wants_training(arr.codec)
    fmt.save(path, {"obs": arr}, progress=False)
    return data


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
def test_a_loaded_array_due_for_training_is_trained_once_loaded(tmp_path, lazy):
    from chunkstore import hdf5 as fmt

    data = _saved_untrained(tmp_path / "a.h5", TRAIN_AFTER_BYTES + (1 << 20), chunk_len=32)
    with fmt.load(tmp_path / "a.h5", lazy=lazy) as store:
        got = store.arrays["obs"]
        assert not _training.wants_training(got.codec) and got.codec.codec_id == "zstd-dict"  # trained
        assert np.array_equal(np.asarray(got), data)


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
def test_a_loaded_array_holding_more_than_training_may_decode_keeps_the_plain_codec(tmp_path, lazy, monkeypatch):
    from chunkstore import hdf5 as fmt

    data = _saved_untrained(tmp_path / "a.h5", 3 << 20, chunk_len=256)  # 768 KiB chunks
    monkeypatch.setattr(_training, "TRAIN_AFTER_BYTES", 1 << 20)  # (the sizes scaled down by 8)
    monkeypatch.setattr(_training, "TRAIN_LOADED_MAX_BYTES", 2 << 20)
    decoded = []
    monkeypatch.setattr(_training, "train", lambda arr: decoded.append(arr))  # must not be reached
    with fmt.load(tmp_path / "a.h5", lazy=lazy) as store:
        got = store.arrays["obs"]
        assert not decoded
        assert got.codec == get_codec("zstd3+dict").untrained_equivalent()  # plain: it reads what it holds
        assert not _training.wants_training(got.codec)
        assert np.array_equal(np.asarray(got), data)
