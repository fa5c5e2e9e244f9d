"""Odd calls a user meets, each refused at the call with our one-line error (issue 27).

* ``buffer_device`` naming a device torch knows but cannot use here (``"mps"``, ``"xla"``)
  fails at construction, not with a torch error at the first ``add``; a pickle made with
  its frames on such a device loads into host memory with a warning.
* ``frame_dedup`` must be a bool (``"no"`` is not read as True).
* ``from_state_dict`` refuses a state of another buffer class.
* A buffer whose frames are on the ``meta`` device (shapes only) says it holds no data when
  asked to save, pickle, capture its state or sample to a real device.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch as th
from gymnasium import spaces

from sb3_integration import (
    CompressedDictReplayBuffer,
    CompressedNStepReplayBuffer,
    CompressedReplayBuffer,
    CompressedRolloutBuffer,
)
from sb3_integration.engine.frames import FrameStore

IMG = spaces.Box(0, 255, (4, 6, 5), np.uint8)
ACT = spaces.Discrete(3)


def fill(buf, n: int = 12, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(n):
        o = rng.integers(0, 255, (1, 4, 6, 5), dtype=np.uint8)
        buf.add(o, np.roll(o, -1, axis=1), np.zeros((1, 1)), np.zeros(1, np.float32), np.zeros(1, np.float32), [{}])


def unusable(device: str) -> bool:
    try:
        th.empty(0, device=device)
    except Exception:
        return True
    return False


@pytest.mark.parametrize("device", ["mps", "xla", "hpu"])
def test_a_device_torch_cannot_use_here_is_refused_at_construction(device):
    if not unusable(device):
        pytest.skip(f"torch can use {device} on this machine")
    match = f"buffer_device='{device}': torch cannot use this device here .*use 'cuda', 'cpu' or None"
    with pytest.raises(ValueError, match=match):
        CompressedReplayBuffer(16, IMG, ACT, "cpu", buffer_device=device)
    with pytest.raises(ValueError, match=match):
        CompressedRolloutBuffer(8, IMG, ACT, "cpu", buffer_device=device)
    with pytest.raises(ValueError, match=f"torch cannot use device '{device}' here"):
        FrameStore((4, 6, 5), np.uint8, 10, device=device)


def test_a_pickle_with_its_frames_on_an_unusable_device_loads_into_host_memory():
    if not unusable("mps"):
        pytest.skip("torch can use mps on this machine")
    buf = CompressedReplayBuffer(16, IMG, ACT, "cpu", buffer_device="cpu")
    fill(buf)
    state = buf.__getstate__()
    for fs_state in state["_stores"].values():
        fs_state["config"]["device"] = "mps"  # as a pickle made on a Mac holds it
    moved = CompressedReplayBuffer.__new__(CompressedReplayBuffer)
    with pytest.warns(RuntimeWarning, match="pickled with its frames on mps, which is not available here"):
        moved.__setstate__(state)
    assert moved.buffer_device is None
    np.random.seed(0)  # noqa: NPY002 - SB3 samples with the global RNG
    a = buf.sample(8).observations
    np.random.seed(0)  # noqa: NPY002
    assert th.equal(moved.sample(8).observations, a)


@pytest.mark.parametrize("cls", [CompressedReplayBuffer, CompressedNStepReplayBuffer, CompressedRolloutBuffer])
@pytest.mark.parametrize("value", ["no", "False", 0, 1, None, 2.0])
def test_frame_dedup_must_be_a_bool(cls, value):
    with pytest.raises(TypeError, match=f"frame_dedup must be True or False, got {value!r}"):
        cls(16, IMG, ACT, "cpu", frame_dedup=value)


@pytest.mark.parametrize("value", [False, np.bool_(False), True])
def test_frame_dedup_takes_python_and_numpy_bools(value):
    buf = CompressedReplayBuffer(16, IMG, ACT, "cpu", frame_dedup=value)
    assert buf.frame_dedup is bool(value)
    roll = CompressedRolloutBuffer(8, IMG, ACT, "cpu", frame_dedup=value)
    assert roll.frame_dedup is bool(value)


def test_from_state_dict_checks_the_class_the_state_came_from():
    buf = CompressedReplayBuffer(16, IMG, ACT, "cpu")
    fill(buf)
    with buf.state_dict() as state:
        with pytest.raises(ValueError, match="this state is of a CompressedReplayBuffer, not a "
                                             "CompressedNStepReplayBuffer; rebuild it with "
                                             r"CompressedReplayBuffer.from_state_dict\(\)"):
            CompressedNStepReplayBuffer.from_state_dict(state, device="cpu")
        with pytest.raises(ValueError, match="not a CompressedDictReplayBuffer"):
            CompressedDictReplayBuffer.from_state_dict(state, device="cpu")
        same = CompressedReplayBuffer.from_state_dict(state, device="cpu")
    with pytest.raises(TypeError, match="state must be a ReplayState"):
        CompressedReplayBuffer.from_state_dict({"pos": 0}, device="cpu")
    assert (same.pos, same.full) == (buf.pos, buf.full)


# -- the meta device: shapes, no data ------------------------------------------------------------
META = "a buffer on the meta device holds no data"


@pytest.fixture
def meta_buffer():
    buf = CompressedReplayBuffer(16, IMG, ACT, "cpu", buffer_device="meta")
    fill(buf, 20)
    yield buf
    buf.close()


def test_a_meta_buffer_cannot_be_saved_pickled_or_captured(meta_buffer, tmp_path):
    what = f"observations: {META}: it cannot be saved, pickled or captured"
    with pytest.raises(ValueError, match=what):
        meta_buffer.save(tmp_path / "meta.h5")
    assert not (tmp_path / "meta.h5").exists()
    with pytest.raises(ValueError, match=what):
        pickle.dumps(meta_buffer)
    with pytest.raises(ValueError, match=what):
        meta_buffer.state_dict()
    fill(meta_buffer, 3)  # still usable


def test_a_meta_buffer_samples_on_meta_and_refuses_a_real_device(meta_buffer):
    with pytest.raises(ValueError, match=f"{META}: it cannot return samples on cpu"):
        meta_buffer.sample(4)
    shapes = CompressedReplayBuffer(16, IMG, ACT, "meta", buffer_device="meta")
    fill(shapes, 20)
    s = shapes.sample(4)
    assert s.observations.device.type == "meta" and s.observations.shape == (4, 4, 6, 5)
    shapes.close()


def test_a_meta_rollout_buffer_refuses_a_real_device():
    buf = CompressedRolloutBuffer(4, IMG, ACT, "cpu", buffer_device="meta")
    rng = np.random.default_rng(0)
    for _ in range(4):
        buf.add(rng.integers(0, 255, (1, 4, 6, 5), dtype=np.uint8), np.zeros((1, 1)), np.zeros(1),
                np.zeros(1, bool), th.zeros(1), th.zeros(1))
    buf.compute_returns_and_advantage(th.zeros(1), np.zeros(1, bool))
    with pytest.raises(ValueError, match=f"{META}: it cannot return samples on cpu"):
        next(buf.get(2))


# -- chunk_len has a ceiling: a chunk of frames holds at most MAX_CHUNK_BYTES --------------------
def test_a_chunk_len_beyond_the_chunk_ceiling_is_refused_at_the_call():
    from sb3_integration.engine.options import MAX_CHUNK_BYTES

    atari = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    most = MAX_CHUNK_BYTES // (4 * 84 * 84)
    CompressedReplayBuffer(64, atari, ACT, chunk_len=most).close()
    for chunk_len in (most + 1, 10**6, 10**9):  # 10**9 used to fail at the first add() (6.4 TiB asked)
        with pytest.raises(ValueError, match=rf"chunk_len {chunk_len:,} .* chunk_len <= {most:,}"):
            CompressedReplayBuffer(64, atari, ACT, chunk_len=chunk_len)
    with pytest.raises(ValueError, match="chunk_len"):
        CompressedDictReplayBuffer(64, spaces.Dict({"img": atari}), ACT, chunk_len=10**6)
    huge = spaces.Box(0, 255, (3, 2048, 2048), np.uint8)  # 12 MiB observations: the defaults still build
    CompressedReplayBuffer(4, huge, ACT, preset="compact").close()  # chunk_len 32
    CompressedRolloutBuffer(4, huge, ACT).close()  # chunk_len 16
    with pytest.raises(ValueError, match="chunk_len <= 32 here"):
        CompressedReplayBuffer(4, huge, ACT, chunk_len=33)


def test_a_saved_buffer_whose_chunks_pass_the_ceiling_is_refused_before_its_frames_are_read(tmp_path, monkeypatch):
    from chunkstore.errors import FormatError
    from sb3_integration.persistence import _load_checks

    buf = CompressedReplayBuffer(64, IMG, ACT, chunk_len=8)
    fill(buf, 20)
    buf.save(tmp_path / "b.h5")
    monkeypatch.setattr(_load_checks, "max_chunk_len", lambda item_bytes: 7)  # below these chunks of 8 frames
    for lazy in (True, False):
        with pytest.raises(FormatError, match=r"observations/frames declares chunks of 8 frames"):
            CompressedReplayBuffer.load(tmp_path / "b.h5", lazy=lazy)
