"""One thread adding, one sampling: every sampled row is one transition's (issue 34, item 5).

Each transition's fields all encode its number (observation, next observation, action,
reward), so a row whose observation came from one transition and whose reward came from
another (an add() between the two reads) shows. Each run is bounded in time.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from gymnasium import spaces

from sb3_integration import (
    CompressedDictReplayBuffer,
    CompressedPrioritizedReplayBuffer,
    CompressedReplayBuffer,
)

OBS = spaces.Box(0, 255, (2, 6, 6), np.uint8)
DICT_OBS = spaces.Dict({"image": OBS, "vec": spaces.Box(-1e7, 1e7, (1,), np.float32)})
ACT = spaces.Box(-1e7, 1e7, (1,), np.float32)


def frame(i: int) -> np.ndarray:
    """Transition ``i``'s observation: channel 0 holds ``i % 256``, channel 1 ``i // 256 % 256``."""
    x = np.empty(OBS.shape, np.uint8)
    x[0], x[1] = i % 256, i // 256 % 256
    return x


def number(obs: np.ndarray) -> np.ndarray:
    """The transition numbers of a batch of observations (mod 65536)."""
    return obs[:, 0, 0, 0].astype(np.int64) + 256 * obs[:, 1, 0, 0].astype(np.int64)


def step(i: int, dict_obs: bool) -> tuple:
    obs, nxt = frame(i), frame(i + 1)
    if dict_obs:
        obs = {"image": obs[None], "vec": np.array([[i]], np.float32)}
        nxt = {"image": nxt[None], "vec": np.array([[i + 1]], np.float32)}
    else:
        obs, nxt = obs[None], nxt[None]
    return obs, nxt, np.array([[i]], np.float32), np.array([float(i)], np.float32), np.array([False]), [{}]


def torn_rows(buf, dict_obs: bool, seconds: float) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(rows sampled, rows whose fields are not all one transition's) while a thread adds."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        i = 64
        try:
            while not stop.is_set():
                buf.add(*step(i, dict_obs))
                i += 1
        except BaseException as e:
            errors.append(e)

    for i in range(64):
        buf.add(*step(i, dict_obs))
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    rows = torn = 0
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            s = buf.sample(16)
            reward = s.rewards.numpy().reshape(-1).astype(np.int64)
            action = s.actions.numpy().reshape(-1).astype(np.int64)
            obs = s.observations["image"] if dict_obs else s.observations
            nxt = s.next_observations["image"] if dict_obs else s.next_observations
            ok = (number(obs.numpy()) == reward % 65536) & (action == reward) \
                & (number(nxt.numpy()) == (reward + 1) % 65536)
            if dict_obs:
                ok &= s.observations["vec"].numpy().reshape(-1).astype(np.int64) == reward
            rows += len(ok)
            torn += int((~ok).sum())
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    return rows, torn


@pytest.mark.parametrize("kind", ["uniform", "prioritized", "dict"])
def test_a_sample_is_whole_while_another_thread_adds(kind: str) -> None:
    dict_obs = kind == "dict"
    cls = {"uniform": CompressedReplayBuffer, "prioritized": CompressedPrioritizedReplayBuffer,
           "dict": CompressedDictReplayBuffer}[kind]
    buf = cls(37, DICT_OBS if dict_obs else OBS, ACT, "cpu", chunk_len=4)
    rows, torn = torn_rows(buf, dict_obs, 3.0)
    assert rows > 1000 and torn == 0, f"{torn} of {rows} sampled rows mixed two transitions"
