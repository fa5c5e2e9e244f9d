"""An add interrupted after its frames are written and before its row commits, then retried.

The frames of the interrupted try must not stay live in the frame ring: a retry
writes them again, and a few such tries in one lap of the ring used to overflow
it (``RuntimeError: observations[vec]: a stream needs 307 live frames, over its
bound 306`` on every later add). Here the KeyboardInterrupt lands on the row's
commit (``_advance``: every frame of every key written, ``pos`` not moved yet),
many times per lap, on every frame-write path: the native writer, the Python
path (native layer off) and the device store (``buffer_device="cpu"``).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch as th
from conftest import assert_samples_equal
from gymnasium import spaces
from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer

from chunkstore import native
from sb3_integration import CompressedDictReplayBuffer, CompressedReplayBuffer

IMG = spaces.Box(0, 255, (4, 6, 5), np.uint8)
VEC = spaces.Box(-1, 1, (3,), np.float32)
ACT = spaces.Discrete(3)


def stream(T: int, n_envs: int, seed: int = 0):
    """Dict transitions: a stacked image and a float vector, next != obs for both (episodes of 5)."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 255, (n_envs, 4, 6, 5), np.uint8)
    vec = rng.uniform(-1, 1, (n_envs, 3)).astype(np.float32)
    for t in range(T):
        new = rng.integers(0, 255, (n_envs, 1, 6, 5), np.uint8)
        nxt_img = np.concatenate([frames[:, 1:], new], axis=1)
        nxt_vec = rng.uniform(-1, 1, (n_envs, 3)).astype(np.float32)
        done = np.array([(t + e) % 5 == 4 for e in range(n_envs)])
        infos = [{"TimeLimit.truncated": False} for _ in range(n_envs)]
        yield ({"img": frames.copy(), "vec": vec.copy()}, {"img": nxt_img, "vec": nxt_vec},
               rng.integers(0, 3, (n_envs, 1)), rng.standard_normal(n_envs).astype(np.float32), done, infos)
        frames, vec = nxt_img, nxt_vec
        for e in np.flatnonzero(done):  # a new episode: fresh frames and vector
            frames[e] = rng.integers(0, 255, (4, 6, 5), np.uint8)
            vec[e] = rng.uniform(-1, 1, 3).astype(np.float32)


class _CommitInterrupt:
    """The buffer's ``_advance`` (its commit) raises KeyboardInterrupt while ``armed``."""

    def __init__(self, buf) -> None:
        self.armed = False
        self._real = buf._advance

        def advance(*args):
            if self.armed:
                self.armed = False
                raise KeyboardInterrupt("at the commit")
            return self._real(*args)

        buf._advance = advance


PATHS = ["native", "python", "device"]


def _path_ctx(path: str):
    return native.disabled() if path == "python" else contextlib.nullcontext()


@pytest.mark.parametrize("undo", ["at once", "at the retry"])
@pytest.mark.parametrize("n_envs", [1, 2])
@pytest.mark.parametrize("path", PATHS)
def test_retried_adds_never_overflow_the_ring(path, n_envs, undo):
    """Interrupted tries undone as the interrupt passes, or (a second Ctrl-C cut that short) by the retry."""
    rows = 16
    space = spaces.Dict({"img": IMG, "vec": VEC})
    kw = {"buffer_device": "cpu"} if path == "device" else {}
    with _path_ctx(path):
        ref = DictReplayBuffer(rows, space, ACT, "cpu", n_envs=n_envs)
        ours = CompressedDictReplayBuffer(rows, space, ACT, "cpu", n_envs=n_envs, chunk_len=4, **kw)
        hook = _CommitInterrupt(ours)
        if undo == "at the retry":
            for store in ours.frame_stores.values():
                store.abandon = lambda attempt: None
        interrupts = 0
        for t, tr in enumerate(stream(6 * rows, n_envs)):
            if t >= 4 and t % 3 == 0:  # a third of the adds, 5+ per lap: tried and interrupted, then retried
                for _ in range(2 if t % 2 else 1):
                    hook.armed = True
                    with pytest.raises(KeyboardInterrupt):
                        ours.add(*tr)
                    interrupts += 1
            ours.add(*tr)
            ref.add(*tr)
            assert (ours.pos, ours.full) == (ref.pos, ref.full)
        assert interrupts >= 3 * 6
        for key in ("img", "vec"):
            assert np.array_equal(np.asarray(ours.observations[key]), ref.observations[key]), key
            assert np.array_equal(np.asarray(ours.next_observations[key]), ref.next_observations[key]), key
        for seed in range(3):
            assert_samples_equal(ref, ours, 16, seed, where=f"{path} seed={seed}")
        for store in ours.frame_stores.values():  # no frame of an interrupted try stayed live
            live = store.heads - store.released
            assert live.max() <= store.max_ring_frames


@pytest.mark.parametrize("path", PATHS)
def test_an_interrupted_try_leaves_no_live_frame(path):
    """Right after the interrupt the streams are where they were before the try."""
    space = spaces.Dict({"img": IMG, "vec": VEC})
    kw = {"buffer_device": "cpu"} if path == "device" else {}
    with _path_ctx(path):
        ours = CompressedDictReplayBuffer(8, space, ACT, "cpu", chunk_len=4, **kw)
        hook = _CommitInterrupt(ours)
        trs = list(stream(12, 1))
        for tr in trs[:10]:
            ours.add(*tr)
        heads = {k: s.heads.copy() for k, s in ours.frame_stores.items()}
        hook.armed = True
        with pytest.raises(KeyboardInterrupt):
            ours.add(*trs[10])
        for k, s in ours.frame_stores.items():
            assert np.array_equal(s.heads, heads[k]), k
        ours.add(*trs[10])
        assert ours.pos == 11 % 8


def test_an_image_buffer_retried_many_times_in_a_lap():
    """A stacked-image buffer whose every add of a lap is interrupted once at its commit."""
    from conftest import frame_stack_stream

    ref = ReplayBuffer(12, IMG, ACT, "cpu")
    ours = CompressedReplayBuffer(12, IMG, ACT, "cpu", chunk_len=4)
    hook = _CommitInterrupt(ours)
    for t, (obs, nxt) in enumerate(frame_stack_stream(60, 1, ep_len=4)):
        tr = (obs, nxt, np.zeros((1, 1)), np.zeros(1, np.float32), np.array([t % 4 == 3]), [{}])
        hook.armed = True
        with pytest.raises(KeyboardInterrupt):
            ours.add(*tr)
        ours.add(*tr)
        ref.add(*tr)
    assert np.array_equal(np.asarray(ours.observations), ref.observations)
    assert_samples_equal(ref, ours, 12, 0)
    th.testing.assert_close(th.as_tensor(ours.rewards), th.as_tensor(ref.rewards))
