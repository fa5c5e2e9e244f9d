"""The replay service's store without Ray: writers' messages into a shard, read back bit-exactly.

A plain numpy model (the list of every transition, in the order the shard applied
them) is compared with what the shard holds after every step, for several writers,
envs, dtypes, chunk lengths, codecs and ring sizes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkstore import get_codec
from sb3_integration.distributed import ChunkWriter, ShardStore, StoreSpec
from sb3_integration.distributed import writer as writer_mod


def stacked_steps(rng, n_steps, n_envs, depth, frame_shape, dtype, channel_last, p_done=0.1):
    """SB3-shaped steps of frame-stacked observations (VecFrameStack semantics: zeros after a reset)."""
    def frame():
        if np.dtype(dtype).kind == "f":
            f = rng.integers(0, 4, frame_shape).astype(dtype)
            f[rng.random(frame_shape) < 0.05] = -0.0
            f[rng.random(frame_shape) < 0.05] = np.nan
            return f
        return rng.integers(0, 5, frame_shape).astype(dtype)

    axis = -1 if channel_last else 0
    stacks = [np.concatenate([np.zeros(frame_shape, dtype)] * (depth - 1) + [frame()], axis=axis)
              for _ in range(n_envs)]
    w = frame_shape[axis]
    out = []
    for _ in range(n_steps):
        obs = np.stack(stacks)
        nxt = []
        dones = rng.random(n_envs) < p_done
        for e in range(n_envs):
            rolled = np.roll(stacks[e], -w, axis=axis)
            idx = [slice(None)] * rolled.ndim
            idx[axis] = slice(rolled.shape[axis] - w, None)
            rolled[tuple(idx)] = frame()
            nxt.append(rolled)
            stacks[e] = (np.concatenate([np.zeros(frame_shape, dtype)] * (depth - 1) + [frame()], axis=axis)
                         if dones[e] else rolled)
        actions = rng.integers(0, 6, (n_envs, 1))
        rewards = rng.standard_normal(n_envs).astype(np.float32)
        infos = [{"TimeLimit.truncated": bool(rng.random() < 0.3)} if d else {} for d in dones]
        out.append((obs, np.stack(nxt), actions, rewards, dones.astype(np.float32), infos))
    return out


def make(capacity, obs_shape, dtype, chunk_len, codec="zstd3"):
    spec = StoreSpec(capacity, obs_shape, dtype, (1,), np.int64, chunk_len=chunk_len)
    c = get_codec(codec)
    dec = c.untrained_equivalent() if getattr(c, "wants_training", False) else c
    return spec, ShardStore(spec, dec, 0)


def check_store(store, model):
    """The store's ring holds the model's last ``capacity`` transitions, bit for bit."""
    cap = store.capacity
    assert store.size() == min(cap, len(model))
    if not model:
        return
    rows = store.live_rows()  # ring positions, oldest first
    first = len(model) - store.size()
    index = list(range(first, len(model)))
    for decode in (True, False):
        reply = store.read(rows, decode=decode)
        if decode:
            obs, nxt = reply.obs, reply.next_obs
        else:
            obs, nxt = decode_reply(store, reply)
        want_obs = np.stack([model[i][0] for i in index])
        want_next = np.stack([model[i][1] for i in index])
        assert obs.tobytes() == want_obs.tobytes()
        assert nxt.tobytes() == want_next.tobytes()
    assert np.array_equal(reply.actions[:, 0], [model[i][2] for i in index])
    assert reply.rewards.tobytes() == np.array([model[i][3] for i in index], np.float32).tobytes()
    assert np.array_equal(reply.dones, [model[i][4] for i in index])
    assert np.array_equal(reply.timeouts, [model[i][5] for i in index])


def decode_reply(store, reply):
    """A learner's decode of a compressed reply, without Ray (the sampler's own code)."""
    from sb3_integration.distributed.sampler import GlobalSampler

    g = GlobalSampler.__new__(GlobalSampler)
    g.spec, g.threads, g._layout, g._codec = store.spec, None, store.layout, (store.codec_version, store.codec)
    return g._decode_all([reply])


def feed(store, writers, steps_per_writer, model, rng):
    """Interleave the writers' adds and drains; the model records what each applied message held."""
    staged = {id(w): [] for w in writers}
    order = [i for i, steps in enumerate(steps_per_writer) for _ in steps]
    rng.shuffle(order)
    pos = [0] * len(writers)
    for i in order:
        w = writers[i]
        obs, nxt, a, r, d, infos = steps_per_writer[i][pos[i]]
        pos[i] += 1
        w.add(obs, nxt, a, r, d, infos)
        for e in range(w.n_envs):
            staged[id(w)].append((obs[e], nxt[e], int(a[e, 0]), float(r[e]), float(d[e]),
                                  float(infos[e].get("TimeLimit.truncated", False))))
        if w.ready or rng.random() < 0.1:
            flush(store, w, staged, model)
    for w in writers:
        flush(store, w, staged, model)


def flush(store, w, staged, model):
    if w.seq == 0 and w.pending:  # what ReplayWriter does with the service: the first layout wins
        agreed = store.layout or w.fs.ensure_layout()
        if agreed != w.fs.layout:
            w.relayout(agreed)
    msg = w.drain()
    if msg is not None:
        store.insert(msg)
        model.extend(staged[id(w)])
        staged[id(w)].clear()


@settings(max_examples=50, deadline=None)
@given(dtype=st.sampled_from(["uint8", "float32", "int16"]), n_envs=st.integers(1, 3),
       n_writers=st.integers(1, 3), capacity=st.integers(3, 50), steps=st.integers(0, 60),
       chunk_len=st.integers(1, 5), flush_every=st.integers(1, 12), channel_last=st.booleans(),
       depth=st.integers(1, 4), codec=st.sampled_from(["zstd3", "lz4-block", "none", "zstd3+dict"]),
       seed=st.integers(0, 2**16))
def test_writers_into_a_shard_match_a_numpy_model(dtype, n_envs, n_writers, capacity, steps, chunk_len,
                                                  flush_every, channel_last, depth, codec, seed):
    rng = np.random.default_rng(seed)
    frame_shape = (3, 2, 1) if channel_last else (1, 3, 2)
    axis = -1 if channel_last else 0
    obs_shape = tuple(d * depth if i == (axis % 3) else d for i, d in enumerate(frame_shape))
    _spec, store = make(capacity, obs_shape, dtype, chunk_len, codec)
    writers = [ChunkWriter(i + 1, obs_shape, dtype, (1,), np.int64, n_envs, chunk_len=chunk_len,
                           codec=get_codec(codec), axis_order=(axis, 0), flush_every=flush_every)
               for i in range(n_writers)]
    data = [stacked_steps(rng, steps, n_envs, depth, frame_shape, dtype, channel_last) for _ in writers]
    model: list = []
    feed(store, writers, data, model, rng)
    check_store(store, model)


def test_a_trained_dictionary_arriving_midway_reads_back_exactly(monkeypatch):
    monkeypatch.setattr(writer_mod, "TRAIN_BYTES", 64 << 10)
    rng = np.random.default_rng(1)
    obs_shape = (4, 32, 32)
    _spec, store = make(400, obs_shape, "uint8", 4, "zstd3+dict")
    w = ChunkWriter(1, obs_shape, "uint8", (1,), np.int64, 1, codec=get_codec("zstd3+dict"), flush_every=32)
    data = stacked_steps(rng, 300, 1, 4, (1, 32, 32), "uint8", False, p_done=0.02)
    model: list = []
    staged = {id(w): []}
    trained = False
    for obs, nxt, a, r, d, infos in data:
        w.add(obs, nxt, a, r, d, infos)
        staged[id(w)].append((obs[0], nxt[0], int(a[0, 0]), float(r[0]), float(d[0]),
                              float(infos[0].get("TimeLimit.truncated", False))))
        if w.ready:
            flush(store, w, staged, model)
            new = w.train()
            if new is not None:
                trained = True
                w.set_codec(new, 1)
                store.set_codec(new, 1)
    flush(store, w, staged, model)
    assert trained and store.codec_version == 1
    check_store(store, model)


def test_the_chunk_pool_stays_bounded_over_many_laps():
    rng = np.random.default_rng(2)
    obs_shape = (4, 6, 6)
    _spec, store = make(40, obs_shape, "uint8", 4)
    ws = [ChunkWriter(i + 1, obs_shape, "uint8", (1,), np.int64, 2, codec=get_codec("zstd3"), flush_every=8)
          for i in range(2)]
    model: list = []
    for _ in range(20):
        feed(store, ws, [stacked_steps(rng, 30, 2, 4, (1, 6, 6), "uint8", False) for _ in ws], model, rng)
    check_store(store, model)
    live = len(store.slot_stream) - len(store._free)
    # 40 rows of stacks of 4 frames, chunks of 4: at most ~2 chunks a row, plus each stream's tail
    assert live <= 2 * 40 + 4 * 4
    assert len(store.slot_stream) <= 3 * (40 * 2 + 64)


def test_messages_apply_once_in_order_and_bad_ones_change_nothing():
    rng = np.random.default_rng(3)
    obs_shape = (4, 5, 5)
    _spec, store = make(100, obs_shape, "uint8", 4)
    w = ChunkWriter(7, obs_shape, "uint8", (1,), np.int64, 1, codec=get_codec("zstd3"), flush_every=5)
    msgs = []
    for obs, nxt, a, r, d, infos in stacked_steps(rng, 15, 1, 4, (1, 5, 5), "uint8", False):
        w.add(obs, nxt, a, r, d, infos)
        if w.ready:
            msgs.append(w.drain())
    assert store.insert(msgs[0]) == 1
    assert store.insert(msgs[0]) == 1 and store.size() == 5  # a re-sent message is skipped
    with pytest.raises(ValueError, match="missing"):
        store.insert(msgs[2])
    bad = msgs[1]
    bad.layout = (0, 2, 2)
    with pytest.raises(ValueError, match="stacks frames"):
        store.insert(bad)
    assert store.size() == 5 and store.applied == {7: 1}


def test_a_snapshot_restores_an_identical_store(tmp_path):
    rng = np.random.default_rng(4)
    obs_shape = (4, 6, 6)
    _spec, store = make(30, obs_shape, "uint8", 4, "zstd3")
    ws = [ChunkWriter(i + 1, obs_shape, "uint8", (1,), np.int64, 1, codec=get_codec("zstd3"), flush_every=4)
          for i in range(2)]
    model: list = []
    feed(store, ws, [stacked_steps(rng, 50, 1, 4, (1, 6, 6), "uint8", False) for _ in ws], model, rng)
    path = str(tmp_path / "shard.h5")
    store.write_snapshot(path, store.snapshot())
    _, back = make(30, obs_shape, "uint8", 4, "zstd3")
    back.restore(path)
    check_store(back, model)
    assert back.applied == store.applied
    more = [stacked_steps(rng, 20, 1, 4, (1, 6, 6), "uint8", False) for _ in ws]
    model2 = list(model)
    feed(store, ws, more, model, np.random.default_rng(9))
    ws2 = ws  # the same writers continue into the restored copy
    del ws2
    _, other = make(31, obs_shape, "uint8", 4, "zstd3")
    from chunkstore.errors import FormatError

    with pytest.raises(FormatError, match="shard of"):
        other.restore(path)
    assert model2 == model[:len(model2)]


def test_a_closed_writer_frees_its_chunks_with_its_last_rows():
    rng = np.random.default_rng(5)
    obs_shape = (4, 6, 6)
    _spec, store = make(20, obs_shape, "uint8", 4)
    a = ChunkWriter(1, obs_shape, "uint8", (1,), np.int64, 1, codec=get_codec("zstd3"), flush_every=4)
    b = ChunkWriter(2, obs_shape, "uint8", (1,), np.int64, 1, codec=get_codec("zstd3"), flush_every=4)
    model: list = []
    feed(store, [a], [stacked_steps(rng, 20, 1, 4, (1, 6, 6), "uint8", False)], model, rng)
    store.end_writer(1)
    feed(store, [b], [stacked_steps(rng, 40, 1, 4, (1, 6, 6), "uint8", False)], model, rng)
    check_store(store, model)
    assert store.streams[0].lo == store.streams[0].hi  # writer 1's chunks are all free
