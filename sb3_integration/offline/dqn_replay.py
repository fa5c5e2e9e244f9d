"""A whole DQN Replay Dataset run as one compressed buffer: :class:`DQNReplayBuffer`.

The file (written by :func:`~sb3_integration.offline.import_dqn_replay`) is a chunkstore
HDF5 file: the frames of every checkpoint, each stored once in compressed chunks
(array ``frames``), checkpoint after checkpoint in dopamine's own position order
(each checkpoint padded to whole chunks); ``actions``, ``rewards``, ``terminals`` one
row per position; ``valid`` one bit per position (would dopamine sample it); the
``checkpoints`` table. Loaded lazily, only the chunks a batch needs are read.

Transitions come out exactly as dopamine's ``OutOfGraphReplayBuffer`` of that checkpoint
forms them (:mod:`~sb3_integration.offline.dopamine`): :meth:`DQNReplayBuffer.transitions`
for given indices, :meth:`~DQNReplayBuffer.sample_dopamine` uniformly over the valid
ones, and :meth:`~DQNReplayBuffer.sample` in Stable-Baselines3's ``ReplayBufferSamples``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from stable_baselines3.common.utils import get_device

from chunkstore.hdf5 import load as load_store
from chunkstore.validate import is_int
from sb3_integration.offline.dopamine import n_step_returns

__all__ = ["FILE_KIND", "DQNReplayBuffer"]

FILE_KIND = "dqn_replay"
FILE_VERSION = 1
#: columns of the ``checkpoints`` table
CKPT_COLUMNS = ("suffix", "base", "rows", "capacity", "add_count", "padded_rows")


class DQNReplayBuffer:
    """dopamine checkpoints imported into one compressed store; read lazily or from RAM.

    Use :meth:`load`. Global index ``g`` is position ``g - base`` of the checkpoint whose
    ``base`` it lies after (``checkpoints``); :meth:`locate` maps indices.

    Parameters (of :meth:`load`)
    ----------------------------
    path
        A file written by :func:`~sb3_integration.offline.import_dqn_replay`.
    lazy
        True: chunks stay in the file (read on demand, ``pread``: RSS does not grow with
        what is read). False: every chunk is read into RAM.
    device
        Where :meth:`sample` puts its tensors (SB3's ``"auto"`` rule).
    gamma
        The discount of the n-step rewards (default: the one given at import).
    """

    def __init__(self, store: Any, *, device: th.device | str = "auto", gamma: float | None = None):
        attrs = store.attrs
        if attrs.get("kind") != FILE_KIND:
            store.close()
            raise ValueError(f"path: {store.path} is a chunkstore file but not an imported DQN "
                             f"replay (kind {attrs.get('kind')!r})")
        self._store = store
        self.path = store.path
        self.frames = store.arrays["frames"]
        self.actions = store.extras["actions"]
        self.rewards = store.extras["rewards"]
        self.terminals = store.extras["terminals"]
        table = store.extras["checkpoints"]
        self.checkpoints = {name: table[:, i].copy() for i, name in enumerate(CKPT_COLUMNS)}
        total = len(self.actions)
        self._valid_bits = store.extras["valid"]
        self.valid = np.unpackbits(self._valid_bits, count=total).astype(bool)
        self.stack_size = int(attrs["stack_size"])
        self.update_horizon = int(attrs["update_horizon"])
        self.gamma = float(attrs["gamma"] if gamma is None else gamma)
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be within [0, 1], got {gamma}")
        self.n_valid = int(self.valid.sum())
        index_dtype = np.int32 if total < 2**31 else np.int64  # 200 MB instead of 400 at 50M
        self._valid_index = _flatnonzero(self.valid, index_dtype)
        self.device = get_device(device)
        obs_shape = tuple(self.frames.item_shape)
        self.observation_space = spaces.Box(0, 255, (self.stack_size, *obs_shape), self.frames.dtype)
        self.action_space = spaces.Discrete(int(attrs["n_actions"]))

    # -- opening ---------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str], *, lazy: bool = True, device: th.device | str = "auto",
             gamma: float | None = None, cache: Any = None, verify: bool | None = None) -> DQNReplayBuffer:
        """Open an imported file (see the class text); ``cache`` and ``verify`` as for
        :func:`chunkstore.hdf5.load` (``verify=None``, the default: each chunk's CRC32 checked
        on its first read, inside the native read on the bytes it ``pread``: no file mapping, and
        RSS stays flat under random reads as with ``False``, measured in the manual's Offline data
        page; ``False``: no chunk checks, which saves only the first reads' CRC32)."""
        return cls(load_store(path, lazy=lazy, cache=cache, verify=verify), device=device, gamma=gamma)

    def close(self) -> None:
        self.frames.close()
        self._store.close()

    def __enter__(self) -> DQNReplayBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sizes -----------------------------------------------------------------------
    def size(self) -> int:
        """Transitions that can be sampled (dopamine's valid indices, all checkpoints)."""
        return self.n_valid

    def __len__(self) -> int:
        return self.n_valid

    @property
    def n_positions(self) -> int:
        """Positions stored, valid or not (with each checkpoint's padding to whole chunks)."""
        return len(self.actions)

    def nbytes_info(self) -> dict[str, int]:
        """Bytes held: compressed frames and the per-position columns."""
        small = sum(a.nbytes for a in (self.actions, self.rewards, self.terminals, self.valid,
                                       self._valid_index))
        return {"frames_compressed": int(self.frames.cbytes), "columns": int(small)}

    # -- indices ---------------------------------------------------------------------
    def locate(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        """Global indices -> (checkpoint row in ``checkpoints``, dopamine's position)."""
        g = self._global(indices)
        k = np.searchsorted(self.checkpoints["base"], g, side="right") - 1
        return k, g - self.checkpoints["base"][k]

    def _global(self, indices: Any) -> np.ndarray:
        """Global indices as int64, each checked to lie within ``0 .. n_positions - 1`` before the
        cast (IndexError naming the value: 2**63 is not read as -2**63, nor an OverflowError)."""
        g = np.asarray(indices).reshape(-1)
        if g.dtype == object and all(is_int(v) for v in g.tolist()):
            values = g.tolist()  # Python ints beyond 64 bits: none can be a position
            bad = min(values) if min(values) < 0 else max(values)
            raise IndexError(f"indices must lie within 0..{self.n_positions - 1}, got {bad}")
        if g.size and g.dtype.kind not in "iu":
            raise IndexError(f"indices must be integers, got dtype {g.dtype}")
        if g.size and (g.min() < 0 or g.max() >= self.n_positions):
            bad = int(g.min()) if g.min() < 0 else int(g.max())
            raise IndexError(f"indices must lie within 0..{self.n_positions - 1}, got {bad}")
        return g.astype(np.int64, copy=False)

    def _stack_ids(self, k: np.ndarray, p: np.ndarray) -> np.ndarray:
        cap = self.checkpoints["capacity"][k][:, None]
        offs = np.arange(1 - self.stack_size, 1, dtype=np.int64)[None, :]
        return self.checkpoints["base"][k][:, None] + (p[:, None] + offs) % cap

    # -- reading ---------------------------------------------------------------------
    def transitions(self, indices: Any, *, check_valid: bool = True) -> dict[str, np.ndarray]:
        """What dopamine's ``sample_transition_batch(indices=...)`` returns for these indices.

        Keys in dopamine's order: ``state`` and ``next_state`` ``(B, H, W, stack)``,
        ``action``, ``reward`` (the discounted n-step sum), ``next_action``,
        ``next_reward``, ``terminal``, ``indices`` (dopamine's position in its checkpoint,
        int32), plus ``checkpoint`` (the checkpoint's suffix) and ``length`` (the n-step
        window's length). Indices dopamine would not sample raise ``ValueError``
        (``check_valid=False`` skips the check, for indices known valid: the samplers').
        """
        g = self._global(indices)
        k, p = self.locate(g)
        if check_valid and g.size and not self.valid[g].all():
            bad = g[~self.valid[g]][:5].tolist()
            raise ValueError(f"indices: {bad} are not transitions dopamine samples (see .valid)")
        n = self.update_horizon
        cap = self.checkpoints["capacity"][k]
        base = self.checkpoints["base"][k]
        window = base[:, None] + (p[:, None] + np.arange(n)[None, :]) % cap[:, None]
        length, is_terminal, reward = n_step_returns(self.terminals[window], self.rewards[window],
                                                     self.gamma)
        reward = reward.astype(self.rewards.dtype, copy=False)
        next_p = (p + length) % cap
        ids = np.concatenate([self._stack_ids(k, p), self._stack_ids(k, next_p)]).reshape(-1)
        frames = self.frames.take(ids).reshape(2, len(g), self.stack_size, *self.frames.item_shape)
        return {
            "state": np.moveaxis(frames[0], 1, -1),
            "action": self.actions[g],
            "reward": reward,
            "next_state": np.moveaxis(frames[1], 1, -1),
            "next_action": self.actions[base + next_p],
            "next_reward": self.rewards[base + next_p],
            "terminal": is_terminal.astype(self.terminals.dtype),
            "indices": p.astype(np.int32),
            "checkpoint": self.checkpoints["suffix"][k],
            "length": length,
        }

    def sample_indices(self, batch_size: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """``batch_size`` global indices, uniform over the valid ones (numpy's global RNG as SB3's
        buffers use it, or ``rng``)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if self.n_valid == 0:
            raise ValueError("the buffer holds no transition dopamine would sample")
        draw = (rng.integers(0, self.n_valid, size=batch_size) if rng is not None
                else np.random.randint(0, self.n_valid, size=batch_size))  # noqa: NPY002
        return self._valid_index[draw].astype(np.int64)

    def sample_dopamine(self, batch_size: int, rng: np.random.Generator | None = None
                        ) -> dict[str, np.ndarray]:
        """:meth:`transitions` of a uniform draw over every checkpoint's valid indices."""
        return self.transitions(self.sample_indices(batch_size, rng), check_valid=False)

    def sample(self, batch_size: int, env: Any = None) -> ReplayBufferSamples:
        """SB3's ``ReplayBuffer.sample``: channel-first ``(B, stack, H, W)`` stacks as SB3's
        ``VecFrameStack`` + ``VecTransposeImage`` give a ``CnnPolicy``; ``dones`` is dopamine's
        terminal; with ``update_horizon > 1`` ``rewards`` is the n-step sum and ``discounts``
        ``gamma ** length`` (as SB3's ``NStepReplayBuffer``), else ``discounts`` is None."""
        g = self.sample_indices(batch_size)
        t = self.transitions(g, check_valid=False)
        obs = np.moveaxis(t["state"], -1, 1)
        next_obs = np.moveaxis(t["next_state"], -1, 1)
        rewards = t["reward"].reshape(-1, 1).astype(np.float32)
        if env is not None:  # SB3's BaseBuffer: a VecNormalize env normalizes what is sampled
            obs, next_obs = env.normalize_obs(obs), env.normalize_obs(next_obs)
            rewards = env.normalize_reward(rewards).astype(np.float32)
        discounts = None
        if self.update_horizon > 1:
            discounts = self._tensor(np.power(self.gamma, t["length"]).astype(np.float32).reshape(-1, 1))
        return ReplayBufferSamples(
            self._tensor(obs), self._tensor(t["action"].astype(np.int64).reshape(-1, 1)),
            self._tensor(next_obs), self._tensor(t["terminal"].astype(np.float32).reshape(-1, 1)),
            self._tensor(rewards), discounts)

    def _tensor(self, a: np.ndarray) -> th.Tensor:
        return th.as_tensor(np.ascontiguousarray(a), device=self.device)


def _flatnonzero(mask: np.ndarray, dtype: Any, block: int = 1 << 22) -> np.ndarray:
    """``np.flatnonzero(mask).astype(dtype)`` without its full-size int64 temporary (400 MB at 50M)."""
    out = np.empty(int(np.count_nonzero(mask)), dtype)
    n = 0
    for lo in range(0, len(mask), block):
        part = np.flatnonzero(mask[lo:lo + block])
        out[n:n + len(part)] = part + lo
        n += len(part)
    return out
