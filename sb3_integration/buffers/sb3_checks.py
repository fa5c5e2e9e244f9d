"""SB3's buffer operations and constructor checks, replayed on scratch arrays before anything is written.

SB3's buffers convert their arguments with numpy operations on their own arrays
(``action.reshape(...)``, ``self.rewards[self.pos] = np.array(reward)``,
``np.zeros((buffer_size, n_envs, *obs_shape))``) and fail with whatever those
raise, part-way through a write. The compressed buffers run the same operations,
in SB3's order, on scratch rows of the same shape and dtype first: a misuse
raises SB3's exception type with numpy's own message plus ours
(:mod:`sb3_integration.errors`), and nothing has been written yet.

Observations go through :func:`~sb3_integration.buffers.observations.lossless_obs` once all of
SB3's operations succeeded (so SB3's errors come first): where SB3 would store
them changed (a lossy cast, one value broadcast to several), it refuses with
:class:`~sb3_integration.errors.DataLossError`.
The other fields (actions, rewards, dones, timeouts, episode starts, values, log
probabilities) are stored exactly as SB3's assignments store them.

Examples
--------
>>> try:
...     sb3_row(np.zeros(3), (2,), np.float32, "reward")
... except ValueError as e:
...     print(type(e).__name__, e)
ArgumentError could not broadcast input array from shape (3,) into shape (2,) [reward: expected shape (2,), got ...]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from gymnasium import spaces
from stable_baselines3 import HerReplayBuffer
from stable_baselines3.common.buffers import (
    DictReplayBuffer,
    DictRolloutBuffer,
    NStepReplayBuffer,
    ReplayBuffer,
)

from sb3_integration.buffers.observations import lossless_obs, sb3_obs, subspaces
from sb3_integration.errors import (
    RolloutFullError,
    SpaceMismatchError,
    UsageAssertionError,
    UsageValueError,
    usage_error,
)

__all__ = [
    "check_allocation",
    "check_her_add",
    "check_replay_add",
    "check_rollout_add",
    "check_rollout_allocation",
    "check_rollout_space",
    "like_sb3",
    "replay_constructor_checks",
    "sb3_reshape",
    "sb3_row",
]

T = TypeVar("T")


def like_sb3(op: Callable[[], T], hint: Callable[[], str] | str, *, argument: bool = True) -> T:
    """``op()`` (an operation SB3 performs), its failure re-raised as SB3's type with ``hint`` added."""
    try:
        return op()
    except Exception as e:
        raise usage_error(e, hint() if callable(hint) else hint, argument=argument) from None


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{type(value).__name__} of shape {tuple(shape)}"
    text = repr(value)
    return text if len(text) <= 60 else f"{type(value).__name__} {text[:57]}..."


def sb3_reshape(value: Any, shape: tuple[int, ...], name: str) -> Any:
    """SB3's ``value.reshape(shape)`` on the caller's object (a list has no ``reshape`` in SB3 either)."""
    try:  # inline rather than like_sb3: once per argument of every add()
        return value.reshape(shape)
    except Exception as e:
        if not hasattr(value, "reshape"):
            hint = f"{name}: SB3 calls {name}.reshape({shape}): pass a numpy array, got {_describe(value)}"
        else:
            hint = (f"{name}: expected {math.prod(shape)} values (shape {shape}, n_envs={shape[0]}), "
                    f"got {_describe(value)}")
        raise usage_error(e, hint, argument=True) from None


def _row_hint(name: str, value: Any, shape: tuple[int, ...], dtype: Any) -> str:
    try:
        got = np.shape(value)
    except Exception:
        got = None
    if got is not None and got != shape and np.asarray(value).dtype.kind in "biufc":
        return f"{name}: expected shape {shape}, got shape {got}"
    return f"{name}: cannot store {_describe(value)} as {np.dtype(dtype)}"


def sb3_row(value: Any, shape: tuple[int, ...], dtype: Any, name: str, *, wrap: bool = True,
            hint: Callable[[], str] | None = None) -> np.ndarray:
    """What SB3's ``array[pos] = np.array(value)`` stores in a row of ``shape``/``dtype``, or its error.

    The assignment runs on a scratch row, so numpy's broadcasting, casting and
    messages are SB3's own; ``wrap=False`` assigns ``value`` as it is (SB3's
    ``values[pos] = value.clone()...numpy()`` has no ``np.array``). A numeric
    array of ``shape`` is cast directly (the same unsafe cast the assignment makes):
    the common case, without the scratch row.
    """
    if type(value) is np.ndarray and value.shape == shape and value.dtype.kind in "biuf":
        return value.astype(dtype, copy=False)
    try:
        scratch = np.empty((1, *shape), dtype)
        scratch[0] = np.array(value) if wrap else value
        return scratch[0]
    except Exception as e:
        raise usage_error(e, hint() if hint else _row_hint(name, value, shape, dtype), argument=True) from None


def check_allocation(shape: tuple[Any, ...], dtype: Any, hint: str) -> None:
    """SB3's ``np.zeros(shape, dtype)`` for one of its arrays, checked without allocating it.

    A leading zero keeps it empty; the argument errors (a float size, a negative
    one, a Dict space's keys unpacked into a shape) are numpy's own.
    """
    like_sb3(lambda: np.zeros((0, *shape), dtype), hint, argument=False)


def check_rollout_space(buf: Any) -> None:
    """``DictRolloutBuffer.__init__``'s assertion, with ours (raised under ``python -O`` too)."""
    if isinstance(buf, DictRolloutBuffer) and not isinstance(buf.obs_shape, dict):
        raise SpaceMismatchError("DictRolloutBuffer must be used with Dict obs space only",
                                 f"{type(buf).__name__} got a {type(buf.observation_space).__name__} space; "
                                 "use CompressedRolloutBuffer")


def check_rollout_allocation(buf: Any) -> None:
    """The arrays ``RolloutBuffer.reset`` / ``DictRolloutBuffer.reset`` allocate, checked in SB3's order."""
    rows, n, name = buf.buffer_size, buf.n_envs, type(buf).__name__
    if isinstance(buf, DictRolloutBuffer):
        for key, shape in buf.obs_shape.items():
            check_allocation((rows, n, *shape), buf.observation_space[key].dtype,
                             f"{name}: SB3 allocates observations[{key!r}] of shape ({rows!r}, {n!r}, *{shape})")
    else:
        hint = (f"{name} got a Dict observation space; use CompressedDictRolloutBuffer (SB3's DictRolloutBuffer)"
                if isinstance(buf.obs_shape, dict)
                else f"{name}: SB3 allocates observations of shape ({rows!r}, {n!r}, *{buf.obs_shape})")
        check_allocation((rows, n, *buf.obs_shape), buf.observation_space.dtype, hint)
    check_allocation((rows, n, buf.action_dim), buf.action_space.dtype,
                     f"{name}: SB3 allocates actions of shape ({rows!r}, {n!r}, {buf.action_dim})")


# -- observations ----------------------------------------------------------------------------------
def _store_of(buf: Any, key: Any) -> tuple[tuple[int, ...], np.dtype]:
    fs = buf._stores[key]
    return (buf.n_envs, *fs.obs_shape), fs.dtype


def _dict_value(obs: Any, key: Any, keys: list[Any], name: str) -> Any:
    """SB3's ``obs[key]`` on a Dict buffer's argument."""
    def hint() -> str:
        if isinstance(obs, dict):
            return f"{name}: observation dict lacks key {key!r} (the space's keys: {keys})"
        return f"{name}: expected a dict with keys {keys}, got {_describe(obs)}"

    return like_sb3(lambda: obs[key], hint)


def _replay_obs(buf: Any, obs: Any, name: str) -> dict[Any, np.ndarray]:
    """One observation argument of ``ReplayBuffer.add`` / ``DictReplayBuffer.add``, as SB3 accepts it."""
    if None in buf._stores:  # SB3 reshaped it (Discrete) before reshaping the action, and assigns it after
        return {None: sb3_obs(obs, *_store_of(buf, None), name)}
    subs = subspaces(buf.observation_space)
    out = {}
    for key, sub in subs.items():
        shape, dtype = _store_of(buf, key)
        value = _dict_value(obs, key, list(subs), name)
        if isinstance(sub, spaces.Discrete):
            value = sb3_reshape(value, shape, f"{name}[{key!r}]")
        out[key] = sb3_obs(value, shape, dtype, f"{name}[{key!r}]")
    return out


def _lossless(buf: Any, obs: dict[Any, np.ndarray], name: str) -> dict[Any, np.ndarray]:
    """Our policy after all of SB3's checks passed: SB3's errors come first, DataLossError last."""
    return {key: lossless_obs(arr, *_store_of(buf, key), name if key is None else f"{name}[{key!r}]")
            for key, arr in obs.items()}


def check_replay_add(buf: Any, obs: Any, next_obs: Any, action: Any, reward: Any, done: Any,
                     infos: Any) -> tuple[dict[Any, np.ndarray], dict[Any, np.ndarray], list[np.ndarray]]:
    """``ReplayBuffer.add``'s (or ``DictReplayBuffer.add``'s) operations in SB3's order, nothing written.

    Returns the observations and next observations per key, and the rows of
    actions, rewards, dones and (with ``handle_timeout_termination``) timeouts.
    """
    fast = _replay_common(buf, obs, next_obs, action, reward, done, infos)
    if fast is not None:
        return fast
    obs_in, next_in, rows = _replay_checks(buf, obs, next_obs, action, reward, done, infos)
    return _lossless(buf, obs_in, "obs"), _lossless(buf, next_in, "next_obs"), rows


def _replay_signature(buf: Any) -> tuple[Any, ...] | None:
    """What :func:`_replay_common` compares a call with, remembered per frame store; None: no fast path."""
    fs = buf._stores.get(None)
    if fs is None or isinstance(buf.observation_space, spaces.Discrete):
        return None
    sig = buf.__dict__.get("_add_signature")
    if sig is None or sig[0] is not fs:
        n = buf.n_envs
        sig = (fs, (n, *fs.obs_shape), fs.dtype, n, (n, buf.action_dim), np.dtype(buf.actions.dtype),
               buf.handle_timeout_termination)
        buf.__dict__["_add_signature"] = sig
    return sig


def _replay_common(buf: Any, obs: Any, next_obs: Any, action: Any, reward: Any, done: Any,
                   infos: Any) -> tuple[dict[Any, np.ndarray], dict[Any, np.ndarray], list[np.ndarray]] | None:
    """:func:`check_replay_add`'s result for the common call (a Box space; numpy arrays of the stored
    shapes and dtypes, numeric small arrays, a list of dicts whose truncation flags are bools), the
    same arrays its general path returns, without building them step by step; None otherwise."""
    sig = _replay_signature(buf)
    if sig is None:
        return None
    _, shape, dtype, n, action_shape, action_dtype, timeouts = sig
    nd = np.ndarray
    if not (type(obs) is nd and type(next_obs) is nd and obs.shape == shape and next_obs.shape == shape
            and obs.dtype == dtype and next_obs.dtype == dtype):
        return None
    if not (type(action) is nd and action.size == n * action_shape[1] and action.dtype.kind in "biuf"
            and type(reward) is nd and reward.shape == (n,) and reward.dtype.kind in "biuf"
            and type(done) is nd and done.shape == (n,) and done.dtype.kind in "biuf"):
        return None
    rows = [action.reshape(action_shape).astype(action_dtype, copy=False), reward.astype(np.float32, copy=False),
            done.astype(np.float32, copy=False)]
    if timeouts:
        if type(infos) is not list or len(infos) != n:
            return None
        flags = []
        for info in infos:
            flag = info.get("TimeLimit.truncated", False) if type(info) is dict else None
            if type(flag) is not bool:
                return None
            flags.append(flag)
        rows.append(np.array(flags, np.float32))
    return {None: obs}, {None: next_obs}, rows


def _replay_checks(buf: Any, obs: Any, next_obs: Any, action: Any, reward: Any, done: Any,
                   infos: Any) -> tuple[dict[Any, np.ndarray], dict[Any, np.ndarray], list[np.ndarray]]:
    n = buf.n_envs
    if None in buf._stores:
        if isinstance(buf.observation_space, spaces.Discrete):
            shape = _store_of(buf, None)[0]
            obs, next_obs = sb3_reshape(obs, shape, "obs"), sb3_reshape(next_obs, shape, "next_obs")
        action = sb3_reshape(action, (n, buf.action_dim), "action")
        obs_in, next_in = _replay_obs(buf, obs, "obs"), _replay_obs(buf, next_obs, "next_obs")
    else:
        obs_in, next_in = _replay_obs(buf, obs, "obs"), _replay_obs(buf, next_obs, "next_obs")
        action = sb3_reshape(action, (n, buf.action_dim), "action")
    rows = [sb3_row(action, (n, buf.action_dim), buf.actions.dtype, "action"),
            sb3_row(reward, (n,), np.float32, "reward"), sb3_row(done, (n,), np.float32, "done")]
    if buf.handle_timeout_termination:
        def hint() -> str:
            got = f"{len(infos)} items: {_describe(infos)}" if hasattr(infos, "__len__") else _describe(infos)
            return f"infos: expected {n} dicts (one per env), got {got}"

        flags = like_sb3(lambda: np.array([info.get("TimeLimit.truncated", False) for info in infos]), hint)
        rows.append(sb3_row(flags, (n,), np.float32, "infos", wrap=False, hint=hint))
    return obs_in, next_in, rows


def check_her_add(buf: Any, obs: Any, next_obs: Any, action: Any, reward: Any, done: Any, infos: Any) -> None:
    """``HerReplayBuffer.add``'s operations on its arguments, in its order, before any is written.

    SB3's HER stores ``infos`` (``copy_info_dict``), then the transition, and only
    then reads ``done[env]`` for every env: ours checks all of it first.
    """
    n = buf.n_envs
    if buf.copy_info_dict:  # SB3: self.infos[self.pos] = infos
        sb3_row(infos, (n,), object, "infos", wrap=False,
                hint=lambda: f"infos: copy_info_dict stores one info dict per env ({n}), got {_describe(infos)}")
    obs_in, next_in, _ = _replay_checks(buf, obs, next_obs, action, reward, done, infos)
    like_sb3(lambda: [bool(done[i]) for i in range(n)],
             lambda: f"done: HER reads done[env] for each of the {n} envs, got {_describe(done)}")
    _lossless(buf, obs_in, "obs")
    _lossless(buf, next_in, "next_obs")


# -- rollouts ---------------------------------------------------------------------------------------
def _check_room(buf: Any) -> None:
    """SB3's ``observations[pos]`` past the end of a full rollout (IndexError, numpy's message)."""
    if buf.pos < buf.buffer_size:
        return
    try:
        np.empty((buf.buffer_size, 0), np.uint8)[buf.pos]
    except IndexError as e:
        raise RolloutFullError(str(e), f"the rollout buffer holds {buf.buffer_size} steps and is full; "
                                       "call reset()") from None


def _as_array(value: Any, name: str) -> np.ndarray:
    """SB3's ``np.array(value)`` (``asarray``: the same errors, no copy of an array)."""
    return like_sb3(lambda: np.asarray(value), lambda: f"{name}: cannot store {_describe(value)}")


def _rollout_obs(buf: Any, obs: Any) -> dict[Any, np.ndarray]:
    subs = subspaces(buf.observation_space)
    out = {}
    for i, (key, sub) in enumerate(subs.items()):
        name = "observations" if key is None else key
        shape, dtype = _store_of(buf, key)
        if key is None:  # reshaped (Discrete) by the caller, before the action
            value = _as_array(obs, name)
        else:  # DictRolloutBuffer: np.array(obs[key]), then reshape (Discrete)
            value = _as_array(_dict_value(obs, key, list(subs), "obs"), name)
            if isinstance(sub, spaces.Discrete):
                value = sb3_reshape(value, shape, name)
        if i == 0:
            _check_room(buf)
        out[key] = sb3_obs(value, shape, dtype, name)
    return out


def check_rollout_add(buf: Any, obs: Any, action: Any, reward: Any, episode_start: Any, value: Any,
                      log_prob: Any) -> tuple[dict[Any, np.ndarray], list[np.ndarray]]:
    """``RolloutBuffer.add``'s (or ``DictRolloutBuffer.add``'s) operations in SB3's order, nothing written.

    Returns the observations per key and the rows of actions, rewards, episode
    starts, values and log probabilities.
    """
    n = buf.n_envs
    zero_d = like_sb3(lambda: len(log_prob.shape) == 0,
                      lambda: f"log_prob: expected a torch tensor, got {_describe(log_prob)}")
    if zero_d:
        log_prob = like_sb3(lambda: log_prob.reshape(-1, 1), "log_prob: cannot reshape it to (-1, 1)")
    if None in buf._stores:
        if isinstance(buf.observation_space, spaces.Discrete):
            obs = sb3_reshape(obs, _store_of(buf, None)[0], "observations")
        action = sb3_reshape(action, (n, buf.action_dim), "action")
        obs_in = _rollout_obs(buf, obs)
    else:
        obs_in = _rollout_obs(buf, obs)
        action = sb3_reshape(action, (n, buf.action_dim), "action")
    rows = [
        sb3_row(action, (n, buf.action_dim), buf.actions.dtype, "actions"),
        sb3_row(reward, (n,), np.float32, "rewards"),
        sb3_row(episode_start, (n,), np.float32, "episode_starts"),
    ]
    values = like_sb3(lambda: value.clone().cpu().numpy().flatten(),
                      lambda: f"value: SB3 stores value.clone().cpu().numpy().flatten() (a torch tensor without "
                              f"grad), got {_describe(value)}")
    rows.append(sb3_row(values, (n,), np.float32, "values", wrap=False))
    log_probs = like_sb3(lambda: log_prob.clone().cpu().numpy(),
                         lambda: f"log_prob: SB3 stores log_prob.clone().cpu().numpy() (a torch tensor without "
                                 f"grad), got {_describe(log_prob)}")
    rows.append(sb3_row(log_probs, (n,), np.float32, "log_probs", wrap=False))
    return {key: lossless_obs(arr, *_store_of(buf, key), "observations" if key is None else key)
            for key, arr in obs_in.items()}, rows


# -- SB3's constructor checks, written once -------------------------------------------------
def _rows(buf: Any) -> int:
    """SB3's ``max(buffer_size // n_envs, 1)``, with its error (n_envs=0: ZeroDivisionError)."""
    return like_sb3(lambda: max(buf.buffer_size // buf.n_envs, 1), f"n_envs must be >= 1, got {buf.n_envs!r}",
                    argument=False)


def _check_arrays(buf: Any, rows: int) -> None:
    """SB3's allocations of observations and actions (their argument errors), without allocating."""
    name, n = type(buf).__name__, buf.n_envs
    keys = buf.obs_shape.items() if isinstance(buf, DictReplayBuffer) else [(None, buf.obs_shape)]
    for key, shape in keys:
        if isinstance(shape, dict):  # a Dict space given to a non-Dict buffer: SB3's np.zeros unpacks its keys
            hint = (f"{name} got a Dict observation space; use CompressedDictReplayBuffer (SB3's "
                    "DictReplayBuffer), or CompressedHerReplayBuffer for goal-conditioned envs")
        else:
            hint = f"{name}: SB3 allocates observations{'' if key is None else f'[{key!r}]'} of shape " \
                   f"({rows!r}, {n!r}, *{shape})"
        space = buf.observation_space if key is None else buf.observation_space[key]
        check_allocation((rows, n, *shape), space.dtype, hint)
    check_allocation((rows, n, buf.action_dim), ReplayBuffer._maybe_cast_dtype(buf.action_space.dtype),
                     f"{name}: SB3 allocates actions of shape ({rows!r}, {n!r}, {buf.action_dim})")


def _check_replay(buf: Any, optimize_memory_usage: bool, handle_timeout_termination: bool) -> None:
    """``ReplayBuffer.__init__``'s checks, in its order (a Dict space fails its allocation)."""
    rows = _rows(buf)
    if optimize_memory_usage and handle_timeout_termination:
        raise UsageValueError(
            "ReplayBuffer does not support optimize_memory_usage = True "
            "and handle_timeout_termination = True simultaneously.",
            "pass handle_timeout_termination=False, or leave optimize_memory_usage off: it saves nothing "
            "here (frame dedup stores next_obs[t] == obs[t+1] once already)")
    _check_arrays(buf, rows)


def _check_dict(buf: Any, optimize_memory_usage: bool, handle_timeout_termination: bool) -> None:
    """``DictReplayBuffer.__init__``'s assertions and allocations, in its order (raised under -O too)."""
    name, space = type(buf).__name__, type(buf.observation_space).__name__
    if not isinstance(buf.obs_shape, dict):
        hint = (f"{name} needs a goal-conditioned Dict observation space: observation, achieved_goal, "
                f"desired_goal; got {space}") if isinstance(buf, HerReplayBuffer) else \
            f"{name} got a {space} space; use CompressedReplayBuffer"
        raise SpaceMismatchError("DictReplayBuffer must be used with Dict obs space only", hint)
    rows = _rows(buf)
    if optimize_memory_usage:
        raise UsageAssertionError("DictReplayBuffer does not support optimize_memory_usage",
                                  "leave it off: frame dedup stores next_obs[t] == obs[t+1] once already")
    _check_arrays(buf, rows)


def _check_nstep(buf: Any, optimize_memory_usage: bool, handle_timeout_termination: bool) -> None:
    if optimize_memory_usage:
        raise NotImplementedError("NStepReplayBuffer doesn't support optimize_memory_usage=True")


#: per SB3 replay class, the checks its constructor makes (NStepReplayBuffer runs ReplayBuffer's first)
_SB3_CHECKS: dict[type, tuple[Callable[[Any, bool, bool], None], ...]] = {
    NStepReplayBuffer: (_check_replay, _check_nstep),
    DictReplayBuffer: (_check_dict,),
    ReplayBuffer: (_check_replay,),
}


def replay_constructor_checks(cls: type) -> tuple[Callable[[Any, bool, bool], None], ...]:
    """The checks of the most derived SB3 replay class ``cls`` extends."""
    return next(_SB3_CHECKS[c] for c in cls.__mro__ if c in _SB3_CHECKS)
