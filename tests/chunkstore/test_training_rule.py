"""The one dictionary-training rule (chunkstore.array.should_train / trained_codec), for arrays and Ray writers."""

from __future__ import annotations

import numpy as np

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
