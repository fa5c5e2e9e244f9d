"""Real Atari observations for the benchmarks: frames and SB3-shaped transitions.

Frames come from ale-py (ROMs ship in the wheel) through Stable-Baselines3's
``AtariWrapper`` (84x84 grayscale, frame skip 4, no-op starts, life loss as
episode end), with a uniformly random policy. Collection is deterministic for a
given ``(game, n_steps, seed)``, so results are cached on disk (``./data/`` by
default, git-ignored) and repeated benchmark runs do not recollect.

Examples
--------
>>> frames = collect_frames("Pong", n_steps=2000)          # (2000, 84, 84) uint8
>>> rgb = collect_frames("MsPacman", 500, raw_rgb=True)     # (500, 210, 160, 3) uint8
>>> tr = collect_stacked("MsPacman", 1000)                  # what ReplayBuffer.add() receives
>>> tr.obs.shape, tr.next_obs.shape                         # (1000, 1, 4, 84, 84) each

Run ``python tools/atari_data.py --help`` to pre-fill the cache from a shell.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "Transitions",
    "collect_frames",
    "collect_stacked",
    "default_cache_dir",
    "load_observations",
    "make_env_id",
]

log = logging.getLogger("chunkstore.tools.atari_data")

#: bump when collection semantics change, so stale cache files are not reused
_CACHE_VERSION = 1


@dataclass
class Transitions:
    """Transitions as an SB3 replay buffer's ``add()`` receives them, step by step.

    Arrays have a leading ``(n_steps, n_envs)``; ``obs`` and ``next_obs`` are
    channel-first ``(4, 84, 84)`` uint8 stacks with ``VecFrameStack`` semantics
    (zero padding after a reset). At an episode end ``next_obs`` holds the
    ``terminal_observation`` (as SB3's off-policy ``_store_transition`` does),
    not the first observation of the next episode. ``infos[t][e]`` holds
    ``"TimeLimit.truncated"`` only; the terminal observation is already in
    ``next_obs``.
    """

    obs: np.ndarray
    next_obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    infos: list[list[dict[str, Any]]]
    game: str
    seed: int
    collect_s: float

    def __len__(self) -> int:
        return len(self.obs)

    @property
    def n_envs(self) -> int:
        return int(self.obs.shape[1])

    @property
    def truncations(self) -> int:
        """How many time-limit truncations the transitions hold."""
        return int(self.truncated.sum())

    def steps(self) -> Any:
        """The arguments of each ``add()``: ``(obs, next_obs, actions, rewards, dones, infos)``."""
        for t in range(len(self.obs)):
            yield self.obs[t], self.next_obs[t], self.actions[t], self.rewards[t], self.dones[t], self.infos[t]

    @property
    def truncated(self) -> np.ndarray:
        return np.array(
            [[bool(i.get("TimeLimit.truncated", False)) for i in step] for step in self.infos],
            dtype=bool,
        ).reshape(self.dones.shape)


def default_cache_dir() -> Path:
    """``$CHUNKSTORE_DATA`` if set, else ``./data`` (git-ignored)."""
    return Path(os.environ.get("CHUNKSTORE_DATA", "data"))


def make_env_id(game: str) -> tuple[str, dict[str, Any]]:
    """The env id and kwargs SB3 uses for an Atari game, as registered by ale-py.

    ``<game>NoFrameskip-v4`` when registered (the SB3 / rl-zoo convention);
    otherwise ``ALE/<game>-v5`` with its own frame skip and sticky actions turned
    off, so that ``AtariWrapper`` is the only frame skipper either way.
    """
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    v4 = f"{game}NoFrameskip-v4"
    if v4 in gym.registry:
        return v4, {}
    v5 = f"ALE/{game}-v5"
    if v5 in gym.registry:
        return v5, {"frameskip": 1, "repeat_action_probability": 0.0}
    raise ValueError(f"unknown Atari game {game!r}: neither {v4} nor {v5} is registered by ale-py")


def _cache_path(cache_dir: str | Path | None, kind: str, game: str, n: int, seed: int, **kw: Any) -> Path:
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    extra = "".join(f"_{k}{v}" for k, v in sorted(kw.items()))
    return base / f"atari_v{_CACHE_VERSION}_{kind}_{game}_{n}_s{seed}{extra}.npz"


# -- single frames -------------------------------------------------------------


def collect_frames(
    game: str = "Pong",
    n_steps: int = 20000,
    seed: int = 0,
    raw_rgb: bool = False,
    cache_dir: str | Path | None = None,
    *,
    use_cache: bool = True,
    progress: bool = False,
) -> np.ndarray:
    """Consecutive observations of one random-policy Atari run.

    Parameters
    ----------
    game : ALE game name ("Pong", "MsPacman", "Breakout", ...).
    n_steps : number of agent steps (each is 4 emulator frames).
    seed : seeds the env and the random policy.
    raw_rgb : False: the ``AtariWrapper`` output, ``(n, 84, 84)`` uint8 grayscale.
        True: the raw screen of the same steps, ``(n, 210, 160, 3)`` uint8 RGB.
        The same seed gives the same trajectory either way.
    cache_dir : where the ``.npz`` cache lives (default ``./data``).
    use_cache : read/write the cache (False forces a fresh collection).
    """
    kind = "rgb" if raw_rgb else "gray"
    path = _cache_path(cache_dir, kind, game, n_steps, seed)
    if use_cache and path.exists():
        with _Npz(path) as z:
            return z[kind]
    t0 = time.perf_counter()
    frames = _run_frames(game, n_steps, seed, raw_rgb, progress)
    log.info("collected %d %s %s frames in %.1f s", n_steps, game, kind, time.perf_counter() - t0)
    if use_cache:
        _save_npz(path, **{kind: frames})
    return frames


def _run_frames(game: str, n_steps: int, seed: int, raw_rgb: bool, progress: bool) -> np.ndarray:
    import gymnasium as gym
    from stable_baselines3.common.atari_wrappers import AtariWrapper

    env_id, kwargs = make_env_id(game)
    env = AtariWrapper(gym.make(env_id, **kwargs))
    ale = env.unwrapped.ale
    env.action_space.seed(seed)
    frames = np.empty((n_steps, 210, 160, 3) if raw_rgb else (n_steps, 84, 84), np.uint8)
    obs, _ = env.reset(seed=seed)
    for t in _progress(range(n_steps), progress, f"{game} frames"):
        # the raw screen of the step's last emulator frame; gray is AtariWrapper's (max-pooled) output
        frames[t] = ale.getScreenRGB() if raw_rgb else obs[..., 0]
        obs, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            obs, _ = env.reset()
    env.close()
    return frames


# -- stacked transitions -------------------------------------------------------


def collect_stacked(
    game: str = "MsPacman",
    n_steps: int = 20000,
    n_envs: int = 1,
    seed: int = 0,
    cache_dir: str | Path | None = None,
    *,
    n_stack: int = 4,
    channels_last: bool = False,
    max_episode_steps: int | None = None,
    use_cache: bool = True,
    progress: bool = False,
) -> Transitions:
    """Collect ``n_steps`` vectorised steps exactly as an SB3 off-policy algorithm stores them.

    The env is SB3's own pipeline: ``make_atari_env`` (DummyVecEnv, Monitor,
    AtariWrapper) -> ``VecFrameStack(n_stack)`` -> ``VecTransposeImage``, so
    observations are channel-first ``(n_stack, 84, 84)`` (``(84, 84, n_stack)``
    with ``channels_last``), zero-padded after each reset. ``max_episode_steps``
    (emulator frames, 4 a step) adds a time limit, so that truncations happen.
    Actions are uniform random, seeded by ``seed``.
    """
    extra = {"e": n_envs, "k": n_stack}
    if channels_last:
        extra["cl"] = 1
    if max_episode_steps is not None:
        extra["t"] = int(max_episode_steps)
    path = _cache_path(cache_dir, "stacked", game, n_steps, seed, **extra)
    if use_cache and path.exists():
        return _load_transitions(path, game, seed)
    t0 = time.perf_counter()
    tr = _run_stacked(game, n_steps, n_envs, seed, n_stack, progress, channels_last, max_episode_steps)
    tr.collect_s = time.perf_counter() - t0
    log.info("collected %d x %d stacked %s steps in %.1f s", n_steps, n_envs, game, tr.collect_s)
    if use_cache:
        _save_transitions(path, tr)
    return tr


def _make_vec_env(game: str, n_envs: int, seed: int, n_stack: int, channels_last: bool = False,
                  max_episode_steps: int | None = None) -> Any:
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack, VecTransposeImage

    env_id, kwargs = make_env_id(game)
    if max_episode_steps is not None:
        kwargs = {**kwargs, "max_episode_steps": max_episode_steps}
    venv = VecFrameStack(make_atari_env(env_id, n_envs=n_envs, seed=seed, env_kwargs=kwargs), n_stack=n_stack)
    return venv if channels_last else VecTransposeImage(venv)


def _run_stacked(game: str, n_steps: int, n_envs: int, seed: int, n_stack: int, progress: bool,
                 channels_last: bool = False, max_episode_steps: int | None = None) -> Transitions:
    venv = _make_vec_env(game, n_envs, seed, n_stack, channels_last, max_episode_steps)
    rng = np.random.default_rng(seed)
    n_actions = int(venv.action_space.n)
    shape = (n_steps, n_envs, *venv.observation_space.shape)
    obs_all = np.empty(shape, np.uint8)
    next_all = np.empty(shape, np.uint8)
    actions = rng.integers(0, n_actions, size=(n_steps, n_envs)).astype(np.int64)
    rewards = np.empty((n_steps, n_envs), np.float32)
    dones = np.empty((n_steps, n_envs), bool)
    infos: list[list[dict[str, Any]]] = []
    obs = venv.reset()
    for t in _progress(range(n_steps), progress, f"{game} x{n_envs}"):
        obs_all[t] = obs
        new_obs, rew, done, info = venv.step(actions[t])
        next_all[t] = new_obs
        for e in np.flatnonzero(done):
            term = info[e].get("terminal_observation")
            if term is not None:
                next_all[t, e] = term
        rewards[t], dones[t] = rew, done
        infos.append([{"TimeLimit.truncated": bool(i.get("TimeLimit.truncated", False))} for i in info])
        obs = new_obs
    venv.close()
    return Transitions(obs_all, next_all, actions, rewards, dones, infos, game, seed, 0.0)


# -- cache files ---------------------------------------------------------------
# Stacked observations are ~565 MB per 20k steps raw; np.savez_compressed (zlib)
# would take longer than recollecting, so big arrays are stored as multithreaded
# zstd-1 blobs (a second or two, ~50x smaller on Atari).


def _pack(a: np.ndarray) -> dict[str, np.ndarray]:
    import zstandard

    blob = zstandard.ZstdCompressor(level=1, threads=-1).compress(np.ascontiguousarray(a).tobytes())
    return {
        "blob": np.frombuffer(blob, np.uint8),
        "shape": np.asarray(a.shape, np.int64),
        "dtype": np.asarray(str(a.dtype)),
    }


def _unpack(z: Any, name: str) -> np.ndarray:
    import zstandard

    shape = tuple(int(s) for s in z[f"{name}__shape"])
    dtype = np.dtype(str(z[f"{name}__dtype"]))
    out = np.empty(shape, dtype)
    raw = zstandard.ZstdDecompressor().decompress(z[f"{name}__blob"].tobytes(), max_output_size=out.nbytes)
    out.reshape(-1).view(np.uint8)[:] = np.frombuffer(raw, np.uint8)
    return out


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    flat: dict[str, np.ndarray] = {}
    for name, a in arrays.items():
        if a.nbytes > (1 << 20):
            flat.update({f"{name}__{k}": v for k, v in _pack(a).items()})
        else:
            flat[name] = a
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **flat)
    os.replace(tmp, path)


class _Npz:
    """Read view over a cache file that unpacks zstd blobs transparently."""

    def __init__(self, path: Path):
        self._z = np.load(path)

    def __contains__(self, name: str) -> bool:
        return name in self._z.files or f"{name}__blob" in self._z.files

    def __getitem__(self, name: str) -> np.ndarray:
        return self._z[name] if name in self._z.files else _unpack(self._z, name)

    def __enter__(self) -> _Npz:
        return self

    def __exit__(self, *exc: object) -> None:
        self._z.close()


def _save_transitions(path: Path, tr: Transitions) -> None:
    _save_npz(
        path, obs=tr.obs, next_obs=tr.next_obs, actions=tr.actions, rewards=tr.rewards,
        dones=tr.dones, truncated=tr.truncated, collect_s=np.asarray(tr.collect_s),
    )


def _load_transitions(path: Path, game: str, seed: int) -> Transitions:
    with _Npz(path) as z:
        trunc = z["truncated"]
        infos = [[{"TimeLimit.truncated": bool(x)} for x in row] for row in trunc]
        return Transitions(
            z["obs"], z["next_obs"], z["actions"], z["rewards"], z["dones"], infos,
            game, seed, float(z["collect_s"]),
        )


# -- user data -----------------------------------------------------------------


def load_observations(path: str | Path, *, key: str | None = None, mmap: bool = True) -> np.ndarray:
    """Load a user's observations: ``.npy`` (memory-mapped), or one array of an ``.npz``.

    The first axis is the item axis (one observation per row). For an ``.npz``,
    ``key`` names the array (default: the only one, or ``"observations"``).
    """
    path = Path(path)
    if path.suffix == ".npz":
        with np.load(path) as z:
            names = z.files
            if key is None:
                key = names[0] if len(names) == 1 else "observations"
            if key not in names:
                raise KeyError(f"{path}: no array {key!r}; it holds {names}")
            arr = z[key]
    else:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    if arr.ndim < 1 or len(arr) == 0:
        raise ValueError(f"{path}: expected an array of observations with a leading item axis, got shape {arr.shape}")
    return arr


def _progress(it: Any, enabled: bool, desc: str) -> Any:
    if not enabled:
        return it
    import sys

    from tqdm.auto import tqdm

    return tqdm(it, desc=desc, unit="step", leave=False, mininterval=0.5, file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Collect (and cache) real Atari frames / transitions.")
    p.add_argument("--games", nargs="+", default=["Pong", "MsPacman", "Breakout"])
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stacked", action="store_true", help="collect SB3 transitions instead of frames")
    p.add_argument("--n-envs", type=int, default=1)
    p.add_argument("--cache-dir", default=None, help="default ./data or $CHUNKSTORE_DATA")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for game in args.games:
        t0 = time.perf_counter()
        if args.stacked:
            tr = collect_stacked(game, args.steps, args.n_envs, args.seed, args.cache_dir, progress=True)
            print(f"{game}: obs {tr.obs.shape}, {int(tr.dones.sum())} episode ends, "
                  f"collected in {tr.collect_s:.1f} s, this call {time.perf_counter() - t0:.1f} s")
        else:
            f = collect_frames(game, args.steps, args.seed, cache_dir=args.cache_dir, progress=True)
            print(f"{game}: frames {f.shape}, this call {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
