"""DQN Replay Dataset import: checkpoints written exactly as dopamine writes them, from real ALE
frames, imported into one file and sampled; every transition compared bit for bit with a plain
numpy port of dopamine's own ``OutOfGraphReplayBuffer`` sampling code run on the same files."""

from __future__ import annotations

import gzip
import math
import os
import pickle
import shutil

import numpy as np
import pytest
import torch as th
from dopamine_ckpt import collect_run, write_checkpoints
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from sb3_integration.offline import CheckpointError, DQNReplayBuffer, dqn_import, import_dqn_replay


# -- dopamine's sampling code, ported line by line to plain numpy (one index at a time) ----------
class DopamineReference:
    """``OutOfGraphReplayBuffer.load`` + ``is_valid_transition`` + ``sample_transition_batch``."""

    def __init__(self, directory, suffix, stack_size, update_horizon, gamma):
        def load(name):
            with gzip.open(os.path.join(directory, f"{name}_ckpt.{suffix}.gz"), "rb") as f:
                return np.load(f, allow_pickle=False)

        self.store = {n: load(f"$store$_{n}") for n in ("observation", "action", "reward", "terminal")}
        self.add_count = load("add_count")
        self.invalid_range = load("invalid_range")
        ends = os.path.join(directory, f"episode_end_indices_ckpt.{suffix}.gz")
        self.episode_end_indices = set()
        if os.path.exists(ends):
            with gzip.open(ends, "rb") as f:
                self.episode_end_indices = pickle.load(f)
        self.cap = len(self.store["observation"])
        self.k, self.n = stack_size, update_horizon
        self.disc = np.array([math.pow(gamma, k) for k in range(update_horizon)], dtype=np.float32)

    def is_full(self):
        return self.add_count >= self.cap

    def cursor(self):
        return self.add_count % self.cap

    def get_range(self, array, start, end):
        assert end > start
        if not self.is_full():
            assert end <= self.cursor()
        if start % self.cap < end % self.cap:
            return array[start:end, ...]
        return array[[(start + i) % self.cap for i in range(end - start)], ...]

    def stack(self, index):
        return np.moveaxis(self.get_range(self.store["observation"], index - self.k + 1, index + 1), 0, -1)

    def is_valid(self, index):
        if index < 0 or index >= self.cap:
            return False
        if not self.is_full():
            if index >= self.cursor() - self.n:
                return False
            if index < self.k - 1:
                return False
        if index in set(self.invalid_range):
            return False
        if self.get_range(self.store["terminal"], index - self.k + 1, index + 1)[:-1].any():
            return False
        for i in range(index, index + self.n):
            i %= self.cap
            if i in self.episode_end_indices and not self.store["terminal"][i]:
                return False
        return True

    def drawable(self):
        """Every index ``sample_index_batch`` can draw (its randint range, modulo the capacity)."""
        if self.is_full():
            lo = self.cursor() - self.cap + self.k - 1
            hi = self.cursor() - self.n
        else:
            lo, hi = self.k - 1, self.cursor() - self.n
        return {i % self.cap for i in range(lo, hi)}

    def transition(self, index):
        traj = [(index + j) % self.cap for j in range(self.n)]
        tt = self.store["terminal"][traj]
        is_term = tt.any()
        length = self.n if not is_term else np.argmax(tt.astype(bool), 0) + 1
        nxt = index + length
        rewards = self.get_range(self.store["reward"], index, nxt)
        out = {
            "state": self.stack(index),
            "action": self.store["action"][index],
            "reward": np.float32(np.sum(self.disc[:length] * rewards, axis=0)),
            "next_state": self.stack(nxt % self.cap),
            "next_action": self.store["action"][nxt % self.cap],
            "next_reward": self.store["reward"][nxt % self.cap],
            "terminal": np.uint8(is_term),
            "indices": np.int32(index),
        }
        return out


@pytest.fixture(scope="module")
def breakout_run():
    # Breakout with a random policy ends a game every ~200 steps (terminals); a 150-step time
    # limit adds episode ends without a terminal
    return collect_run("Breakout", 2400, seed=3, max_episode_steps=150)


def _write(run, directory, **kw):
    kw = {"capacity": 700, "every": 500, **kw}
    return write_checkpoints(run, directory, **kw)


def _compare_all(path, directory, suffixes, stack, n, gamma):
    with DQNReplayBuffer.load(path) as buf:
        table = buf.checkpoints
        assert table["suffix"].tolist() == list(suffixes)
        total_valid = 0
        for k, suffix in enumerate(suffixes):
            ref = DopamineReference(directory, suffix, stack, n, gamma)
            base, rows = int(table["base"][k]), int(table["rows"][k])
            expect = np.array([ref.is_valid(p) and p in ref.drawable() for p in range(rows)])
            assert np.array_equal(buf.valid[base:base + rows], expect), suffix
            assert not buf.valid[base + rows: base + int(table["padded_rows"][k])].any()
            positions = np.flatnonzero(expect)
            assert len(positions) > 100
            total_valid += len(positions)
            ours = buf.transitions(base + positions)
            for i, p in enumerate(positions):
                want = ref.transition(int(p))
                for key, value in want.items():
                    got = ours[key][i]
                    assert got.dtype == value.dtype, (key, got.dtype, value.dtype)
                    assert np.atleast_1d(got).tobytes() == np.atleast_1d(value).tobytes(), (suffix, p, key)
        assert buf.size() == total_valid
        return buf.n_positions


# (sampling n, the n the checkpoints were recorded with: it shaped their saved invalid_range)
@pytest.mark.parametrize("n, written_n, episode_ends", [(1, 1, False), (3, 3, True), (3, 1, False), (1, 3, True)])
def test_import_matches_dopamine_bit_for_bit(tmp_path, breakout_run, n, written_n, episode_ends):
    src = tmp_path / "replay_logs"
    suffixes = _write(breakout_run, src, update_horizon=written_n, save_episode_ends=episode_ends)
    assert len(suffixes) == 5  # 2400 steps + padding, a checkpoint every 500: the last one wrapped too
    out = import_dqn_replay(tmp_path, tmp_path / "run.h5", update_horizon=n, gamma=0.9, progress=False)
    assert not os.path.exists(str(out) + ".parts")
    _compare_all(out, src, suffixes, 4, n, 0.9)


@pytest.mark.parametrize("codec", ["zstd3", "none"])  # "none": raw chunks, no compression
def test_not_full_checkpoint_and_other_stack(tmp_path, breakout_run, codec):
    # capacity above the steps: one checkpoint never full (rows past add_count are garbage)
    src = tmp_path / "logs"
    suffixes = _write(breakout_run, src, capacity=3000, every=1000, stack_size=3, save_episode_ends=True)
    # chunk_len 7 divides neither the rows nor the read block: every checkpoint ends padded
    out = import_dqn_replay(src, tmp_path / "b.h5", stack_size=3, chunk_len=7, codec=codec, progress=False)
    positions = _compare_all(out, src, suffixes, 3, 1, 0.99)
    assert positions < 3 * 3000  # only the written rows are stored
    with DQNReplayBuffer.load(out) as buf:
        assert buf.frames.chunk_len == 7 and buf.frames.codec.name.startswith(codec[:4])
        assert np.all(buf.checkpoints["padded_rows"] % 7 == 0)


def test_other_chunkstore_file_refused(tmp_path):
    from chunkstore import ChunkedArray
    from chunkstore.hdf5 import save

    a = ChunkedArray(8, (), np.uint8, name="a")
    a[:] = 1
    save(tmp_path / "x.h5", {"a": a}, progress=False)
    with pytest.raises(ValueError, match="not an imported DQN replay"):
        DQNReplayBuffer.load(tmp_path / "x.h5")


def test_sample_sb3_and_dopamine(tmp_path, breakout_run):
    src = tmp_path / "logs"
    suffixes = _write(breakout_run, src, update_horizon=3)
    out = import_dqn_replay(src, tmp_path / "c.h5", update_horizon=3, gamma=0.99, progress=False)
    with DQNReplayBuffer.load(out, lazy=True, device="cpu") as buf:
        np.random.seed(0)  # noqa: NPY002
        s = buf.sample(64)
        assert isinstance(s, ReplayBufferSamples)
        assert s.observations.shape == (64, 4, 84, 84) and s.observations.dtype == th.uint8
        assert s.actions.shape == (64, 1) and s.actions.dtype == th.int64
        assert s.rewards.dtype == th.float32 and s.dones.shape == (64, 1)
        np.random.seed(0)  # noqa: NPY002
        g = buf.sample_indices(64)
        t = buf.transitions(g)
        assert np.array_equal(s.observations.numpy(), np.moveaxis(t["state"], -1, 1))
        assert np.array_equal(s.next_observations.numpy(), np.moveaxis(t["next_state"], -1, 1))
        assert np.allclose(s.discounts.numpy().ravel(), 0.99 ** t["length"])
        d = buf.sample_dopamine(32, np.random.default_rng(1))
        assert d["state"].shape == (32, 84, 84, 4)
        # uniform over every checkpoint's valid positions
        draws = buf.sample_indices(20000, np.random.default_rng(2))
        assert buf.valid[draws].all()
        counts = np.bincount(np.searchsorted(buf.checkpoints["base"], draws, side="right") - 1)
        valid_per = [buf.valid[b:b + r].sum() for b, r in zip(buf.checkpoints["base"],
                                                              buf.checkpoints["padded_rows"], strict=True)]
        expected = 20000 * np.array(valid_per) / sum(valid_per)
        assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))
        assert len(suffixes) == len(counts)
    with DQNReplayBuffer.load(out, lazy=False) as eager, DQNReplayBuffer.load(out) as lazy:
        g = lazy.sample_indices(256, np.random.default_rng(5))
        for key, value in lazy.transitions(g).items():
            assert np.array_equal(value, eager.transitions(g)[key])


def test_invalid_index_refused(tmp_path, breakout_run):
    src = tmp_path / "logs"
    _write(breakout_run, src)
    out = import_dqn_replay(src, tmp_path / "d.h5", progress=False)
    with DQNReplayBuffer.load(out) as buf:
        bad = int(np.flatnonzero(~buf.valid)[0])
        with pytest.raises(ValueError, match="not transitions dopamine samples"):
            buf.transitions([bad])
        with pytest.raises(IndexError):
            buf.transitions([buf.n_positions])


# -- damaged files, resume ---------------------------------------------------------------------
def _ckpt_dir(tmp_path, run):
    src = tmp_path / "logs"
    suffixes = _write(run, src)
    return src, suffixes


def test_truncated_observation_file_named(tmp_path, breakout_run):
    src, suffixes = _ckpt_dir(tmp_path, breakout_run)
    victim = src / f"$store$_observation_ckpt.{suffixes[2]}.gz"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"observation_ckpt\.2\.gz: .*(truncated|damaged)") as e:
        import_dqn_replay(src, tmp_path / "x.h5", progress=False)
    assert e.value.path == str(victim)
    assert not os.path.exists(tmp_path / "x.h5")


@pytest.mark.parametrize("damage", ["flip", "missing", "not_gzip", "bad_header", "pickle", "empty"])
def test_damaged_files_named(tmp_path, breakout_run, damage):
    src, suffixes = _ckpt_dir(tmp_path, breakout_run)
    s = suffixes[1]
    if damage == "flip":  # a flipped byte in the compressed stream: zlib or the CRC objects
        victim = src / f"$store$_terminal_ckpt.{s}.gz"
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
    elif damage == "missing":
        victim = src / f"invalid_range_ckpt.{s}.gz"
        victim.unlink()
    elif damage == "not_gzip":
        victim = src / f"$store$_action_ckpt.{s}.gz"
        victim.write_bytes(b"not a gzip file at all")
    elif damage == "bad_header":
        victim = src / f"$store$_reward_ckpt.{s}.gz"
        with gzip.open(victim, "wb") as f:
            f.write(b"\x93NUMPY garbage")
    elif damage == "empty":  # add_count 0: nothing was ever added
        victim = src / f"add_count_ckpt.{s}.gz"
        with gzip.open(victim, "wb") as f:
            np.save(f, np.array(0))
    else:  # an episode_end_indices file that would run code if unpickled freely
        victim = src / f"episode_end_indices_ckpt.{s}.gz"
        with gzip.open(victim, "wb") as f:
            pickle.dump(os.system, f)
    with pytest.raises(CheckpointError) as e:
        import_dqn_replay(src, tmp_path / "x.h5", progress=False)
    assert e.value.path == str(victim)
    assert str(e.value).startswith(str(victim) + ": ")


def test_resume_continues_at_next_checkpoint(tmp_path, breakout_run, monkeypatch):
    src, suffixes = _ckpt_dir(tmp_path, breakout_run)
    out = tmp_path / "r.h5"
    done = []
    real = dqn_import._import_one

    def interrupted_after_two(c, *args, **kw):
        if len(done) == 2:
            raise KeyboardInterrupt
        done.append(c.suffix)
        return real(c, *args, **kw)

    monkeypatch.setattr(dqn_import, "_import_one", interrupted_after_two)
    with pytest.raises(KeyboardInterrupt):
        import_dqn_replay(src, out, progress=False)
    assert not out.exists()
    parts = sorted(os.listdir(str(out) + ".parts"))
    assert parts == sorted([f"ckpt_{s}.h5" for s in suffixes[:2]] + ["manifest.json"])
    resumed = []

    def counting(c, *args, **kw):
        resumed.append(c.suffix)
        return real(c, *args, **kw)

    monkeypatch.setattr(dqn_import, "_import_one", counting)
    import_dqn_replay(src, out, progress=False)
    assert resumed == suffixes[2:]  # the first two were not read again
    fresh = import_dqn_replay(src, tmp_path / "fresh.h5", progress=False)
    with DQNReplayBuffer.load(out) as a, DQNReplayBuffer.load(fresh) as b:
        g = np.flatnonzero(a.valid)
        assert np.array_equal(g, np.flatnonzero(b.valid))
        ta, tb = a.transitions(g), b.transitions(g)
        for key in ta:
            assert np.array_equal(ta[key], tb[key]), key


def test_resume_with_other_arguments_refused(tmp_path, breakout_run):
    src, _ = _ckpt_dir(tmp_path, breakout_run)
    out = tmp_path / "o.h5"
    import_dqn_replay(src, out, progress=False, keep_parts=True)
    with pytest.raises(ValueError, match="other arguments"):
        import_dqn_replay(src, out, update_horizon=3, progress=False)
    shutil.rmtree(str(out) + ".parts")
    import_dqn_replay(src, out, update_horizon=3, progress=False)


def test_resume_takes_the_finishing_runs_gamma(tmp_path, breakout_run):
    """gamma decides only the join, not the parts: a resumed import with another gamma is not
    refused, and the joined file holds the finishing run's gamma (docs/guide/offline.md)."""
    src, _ = _ckpt_dir(tmp_path, breakout_run)
    out = tmp_path / "o.h5"
    import_dqn_replay(src, out, gamma=0.99, progress=False, keep_parts=True)
    import_dqn_replay(src, out, gamma=0.5, progress=False)
    assert not os.path.exists(str(out) + ".parts")
    with DQNReplayBuffer.load(out) as buf:
        assert buf.gamma == 0.5


def test_bad_arguments(tmp_path, breakout_run):
    src, _ = _ckpt_dir(tmp_path, breakout_run)
    with pytest.raises(ValueError, match="stack_size"):
        import_dqn_replay(src, tmp_path / "a.h5", stack_size=0)
    with pytest.raises(ValueError, match="gamma"):
        import_dqn_replay(src, tmp_path / "a.h5", gamma=1.5)
    with pytest.raises(ValueError, match="no dopamine checkpoint"):
        import_dqn_replay(_empty(tmp_path), tmp_path / "a.h5")
    with pytest.raises(ValueError, match="not a directory"):
        import_dqn_replay(tmp_path / "nope", tmp_path / "a.h5")


def _empty(tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    return d


def test_sb3_dqn_trains_offline_from_it(tmp_path, breakout_run, one_torch_thread):
    import gymnasium as gym
    from gymnasium import spaces
    from stable_baselines3 import DQN
    from stable_baselines3.common.logger import configure

    src = tmp_path / "logs"
    _write(breakout_run, src, update_horizon=3)
    out = import_dqn_replay(src, tmp_path / "t.h5", update_horizon=3, progress=False)
    buf = DQNReplayBuffer.load(out, device="cpu")

    class Spaces(gym.Env):  # only the spaces: nothing is collected
        observation_space = buf.observation_space
        action_space = spaces.Discrete(buf.action_space.n)

    model = DQN("CnnPolicy", Spaces(), buffer_size=1, learning_starts=0, batch_size=32, seed=0, device="cpu")
    model.set_logger(configure(None, []))
    model.replay_buffer = buf
    before = [p.detach().clone() for p in model.q_net.parameters()]
    model.train(gradient_steps=3, batch_size=32)
    assert any(not th.equal(a, b) for a, b in zip(before, model.q_net.parameters(), strict=True))
    buf.close()


def test_damaged_part_from_earlier_run_refused(tmp_path, breakout_run):
    from chunkstore.hdf5 import chunk_spans

    src, suffixes = _ckpt_dir(tmp_path, breakout_run)
    out = tmp_path / "p.h5"
    import_dqn_replay(src, out, progress=False, keep_parts=True)
    part = os.path.join(str(out) + ".parts", f"ckpt_{suffixes[1]}.h5")
    offset = int(chunk_spans(part, "frames")[3, 1])
    with open(part, "r+b") as f:  # one byte of one chunk
        f.seek(offset + 5)
        b = f.read(1)
        f.seek(offset + 5)
        f.write(bytes([b[0] ^ 0x40]))
    with pytest.raises(ValueError, match=r"ckpt_1\.h5 is damaged"):
        import_dqn_replay(src, out, progress=False)


def test_tool_exit_codes(tmp_path, breakout_run, capsys):
    import import_dqn_replay as tool

    src, suffixes = _ckpt_dir(tmp_path, breakout_run)
    assert tool.main([str(src), str(tmp_path / "ok.h5")]) == 0
    assert "transitions dopamine samples" in capsys.readouterr().out
    assert tool.main([str(src), str(tmp_path / "bad.h5"), "--stack-size", "0"]) == 2
    victim = src / f"$store$_reward_ckpt.{suffixes[0]}.gz"
    victim.write_bytes(victim.read_bytes()[:40])
    assert tool.main([str(src), str(tmp_path / "bad.h5")]) == 1
    assert str(victim) in capsys.readouterr().err
