"""The misuse audit as data: every row runs on SB3's buffer and ours, side by side.

Each :class:`Row` is one misuse (buffer kind x method x what goes wrong) and
records what SB3 2.9 does with it (``sb3``: the exception type's name, or
``"accepts"``) and what ours does (``ours``: ``"same"``, or a documented
refusal). :func:`run_row` performs the row on a fresh SB3 buffer and a fresh one
of ours, built from the same arguments and filled with the same transitions, and
returns an :class:`Outcome` per side; :func:`check_row` holds ours to the row:

* SB3 raises: ours raises an instance of SB3's exception type whose message
  contains SB3's, and (for ``add``-like rows) our buffer is unchanged;
* SB3 accepts and ``ours == "same"``: ours accepts, returns the same result and
  ends in the same state (every array of SB3's buffer, bit for bit);
* SB3 accepts and ours refuses: ours raises the named exception, unchanged.

``tests/sb3_integration/test_sb3_errors.py`` runs the table; ``tools/errors_doc.py`` writes it
to ``docs/errors.md`` with the messages of a live run.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import HerReplayBuffer
from stable_baselines3.common.buffers import (
    BaseBuffer,
    DictReplayBuffer,
    DictRolloutBuffer,
    NStepReplayBuffer,
    ReplayBuffer,
    RolloutBuffer,
)
from stable_baselines3.common.envs import BitFlippingEnv
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_integration import (
    CompressedDictReplayBuffer,
    CompressedDictRolloutBuffer,
    CompressedHerReplayBuffer,
    CompressedNStepReplayBuffer,
    CompressedReplayBuffer,
    CompressedRolloutBuffer,
    GpuReplayBuffer,
    GpuRolloutBuffer,
)

REPLAY_KINDS = ("replay", "dict_replay", "nstep", "her")
ROLLOUT_KINDS = ("rollout", "dict_rollout")
#: kind -> (SB3's class, our classes)
CLASSES: dict[str, tuple[type, tuple[type, ...]]] = {
    "replay": (ReplayBuffer, (CompressedReplayBuffer, GpuReplayBuffer)),
    "dict_replay": (DictReplayBuffer, (CompressedDictReplayBuffer,)),
    "nstep": (NStepReplayBuffer, (CompressedNStepReplayBuffer,)),
    "her": (HerReplayBuffer, (CompressedHerReplayBuffer,)),
    "rollout": (RolloutBuffer, (CompressedRolloutBuffer, GpuRolloutBuffer)),
    "dict_rollout": (DictRolloutBuffer, (CompressedDictRolloutBuffer,)),
}

# -- spaces and good data -----------------------------------------------------------------------
IMG = spaces.Box(0, 255, (2, 3), np.uint8)
VEC = spaces.Box(-1, 1, (3,), np.float32)
DISC = spaces.Discrete(4)
DICT = spaces.Dict({"img": IMG, "vec": VEC, "d": DISC})
HER_SPACE = BitFlippingEnv(n_bits=4).observation_space
OBS_SPACES = {"img": IMG, "vec": VEC, "disc": DISC, "dict": DICT, "her": HER_SPACE}
ACT_SPACES = {"box": spaces.Box(-1, 1, (2,), np.float32), "disc": spaces.Discrete(3)}
DEFAULT_OBS = {"replay": "img", "nstep": "img", "rollout": "img", "dict_replay": "dict", "dict_rollout": "dict",
               "her": "her"}


def _obs_sample(space: spaces.Space, rng: np.random.Generator, n: int) -> Any:
    if isinstance(space, spaces.Dict):
        return {k: _obs_sample(sub, rng, n) for k, sub in space.spaces.items()}
    if isinstance(space, spaces.Discrete):
        return rng.integers(0, space.n, n)
    if isinstance(space, spaces.MultiBinary):
        return rng.integers(0, 2, (n, *space.shape)).astype(space.dtype)
    if space.dtype == np.uint8:
        return rng.integers(0, 256, (n, *space.shape), dtype=np.uint8)
    return rng.uniform(-1, 1, (n, *space.shape)).astype(space.dtype)


def _act_sample(space: spaces.Space, rng: np.random.Generator, n: int) -> np.ndarray:
    if isinstance(space, spaces.Discrete):
        return rng.integers(0, space.n, n)
    return rng.uniform(-1, 1, (n, *space.shape)).astype(space.dtype)


@dataclass
class Ctx:
    """One side of a row: a buffer class, its arguments, and deterministic good transitions."""

    cls: type
    kind: str
    obs_space: spaces.Space
    act_space: spaces.Space
    n_envs: int = 2
    buffer_size: int = 8
    kwargs: dict[str, Any] = field(default_factory=dict)
    fill: int = 3
    _buf: Any = None

    def make(self, *args: Any, **kw: Any) -> Any:
        """A buffer of this side's class; ``kw`` replaces the row's arguments (``args``: positional extras)."""
        obs_space = kw.pop("observation_space", self.obs_space)
        act_space = kw.pop("action_space", self.act_space)
        size = kw.pop("buffer_size", self.buffer_size)
        kw = {"device": "cpu", "n_envs": self.n_envs, **self.kwargs, **kw}
        if self.kind == "her":
            kw.setdefault("env", DummyVecEnv([lambda: BitFlippingEnv(n_bits=4)] * max(int(kw["n_envs"]), 1)))
        return self.cls(size, obs_space, act_space, *args, **kw)

    @property
    def buf(self) -> Any:
        """The row's buffer, with ``fill`` good transitions added."""
        if self._buf is None:
            self._buf = self.make()
            for t in range(self.fill):
                self._buf.add(*self.step(t))
        return self._buf

    def step(self, t: int) -> list[Any]:
        """Good ``add()`` arguments for step ``t`` (the same on both sides)."""
        rng = np.random.default_rng(t)
        n = self.n_envs
        obs = _obs_sample(self.obs_space, rng, n)
        action = _act_sample(self.act_space, rng, n)
        reward = rng.standard_normal(n).astype(np.float32)
        if self.kind in ROLLOUT_KINDS:
            starts = (t + np.arange(n)) % 3 == 0
            return [obs, action, reward, starts, th.tensor(rng.standard_normal(n), dtype=th.float32),
                    th.tensor(rng.standard_normal(n), dtype=th.float32)]
        done = (t + np.arange(n)) % 3 == 2
        infos = [{"TimeLimit.truncated": bool(x)} for x in rng.random(n) < 0.3]
        return [obs, _obs_sample(self.obs_space, np.random.default_rng(t + 1000), n), action, reward, done, infos]

    def add(self, **replace: Any) -> Any:
        """``buf.add`` with the next good step's arguments, some replaced (a callable gets the good value)."""
        args = self.step(self.fill)
        names = (["obs", "action", "reward", "episode_start", "value", "log_prob"] if self.kind in ROLLOUT_KINDS
                 else ["obs", "next_obs", "action", "reward", "done", "infos"])
        for name, value in replace.items():
            i = names.index(name)
            args[i] = value(args[i]) if callable(value) else value
        return self.buf.add(*args)

    def extend(self, count: int, cut: dict[str, int] | None = None) -> Any:
        """``buf.extend`` with ``count`` good steps stacked (``cut``: an argument with fewer items)."""
        steps = [self.step(self.fill + t) for t in range(count)]
        columns = []
        for i, _ in enumerate(steps[0]):
            items = [s[i] for s in steps]
            if isinstance(items[0], dict):
                columns.append(items)  # SB3's extend zips per item: a list of dicts
            elif isinstance(items[0], list):
                columns.append(items)
            elif isinstance(items[0], th.Tensor):
                columns.append(th.stack(items))
            else:
                columns.append(np.stack(items))
        for i, n in (cut or {}).items():
            columns[int(i)] = columns[int(i)][:n]
        return self.buf.extend(*columns)


@dataclass(frozen=True)
class Row:
    """One misuse: see the module docstring."""

    kind: str
    method: str
    misuse: str
    act: Callable[[Ctx], Any]
    sb3: str  # SB3's exception type name, or "accepts"
    ours: str = "same"  # "same", or the exception type ours raises where SB3 accepts
    why: str = ""  # what the docs say about a difference
    obs: str | None = None
    action: str = "box"
    n_envs: int = 2
    buffer_size: int = 8
    fill: int = 3
    kwargs: tuple[tuple[str, Any], ...] = ()
    state: str = "unchanged"  # on error: "unchanged" (ours before vs after), or "sb3" (ours vs SB3's)
    ignore: tuple[str, ...] = ()  # state SB3 and ours may hold differently where both accept (see why)

    @property
    def id(self) -> str:
        words = "".join(c if c.isalnum() else "-" for c in self.misuse.lower())
        return f"{self.kind}-{self.method.strip('_')}-{'-'.join(w for w in words.split('-') if w)}"

    def ctx(self, cls: type) -> Ctx:
        return Ctx(cls, self.kind, OBS_SPACES[self.obs or DEFAULT_OBS[self.kind]], ACT_SPACES[self.action],
                   n_envs=self.n_envs, buffer_size=self.buffer_size, kwargs=dict(self.kwargs), fill=self.fill)


# -- the rows ---------------------------------------------------------------------------------------
ALL = (*REPLAY_KINDS, *ROLLOUT_KINDS)
LOSSY = "SB3 stores other values than given; ours refuses (never silent data loss)"
BROADCAST = "SB3 stores env 0's observation for every env; ours refuses (one observation per env)"
RESET = "SB3's reset() keeps old observations in rows sample() cannot reach; ours frees them (they read as zeros)"
OPT = (("optimize_memory_usage", True), ("handle_timeout_termination", False))


def init(**kw: Any) -> Callable[[Ctx], Any]:
    return lambda c: c.make(**kw)


def twice(c: Ctx) -> Any:
    """A keyword given twice (SB3's own test does this through A2C's rollout_buffer_kwargs)."""
    return c.cls(c.buffer_size, c.obs_space, c.act_space, gamma=0.5, **{"gamma": 0.5})


def key_dropped(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda g: {k: v for k, v in g.items() if k != key}


def one_env(g: Any) -> Any:
    """The first env's item (of a Dict observation: the image key's, which SB3 broadcasts)."""
    if isinstance(g, dict):
        return {**g, "img": g["img"][:1]} if "img" in g else {k: v[:1] for k, v in g.items()}
    return g[:1]


def batches(n: int, size: int | None) -> Callable[[Ctx], Any]:
    return lambda c: list(itertools.islice(c.buf.get(size), n))


def reset_add_sample(c: Ctx) -> Any:
    c.buf.reset()
    for t in range(2):
        c.buf.add(*c.step(10 + t))
    return c.buf.sample(6)


def quiet_truncate(c: Ctx) -> Any:
    with warnings.catch_warnings(record=True) as caught:  # SB3 warns that it truncates: both must
        warnings.simplefilter("always")
        c.buf.truncate_last_trajectory()
    return [str(w.message) for w in caught]


def no_grad_value(c: Ctx) -> Any:
    return c.add(value=lambda g: g.clone().requires_grad_(True))


ROWS: list[Row] = [
    # -- constructors -----------------------------------------------------------------------------
    *[Row(k, "__init__", "optimize_memory_usage with handle_timeout_termination",
          init(optimize_memory_usage=True), "ValueError") for k in ("replay", "nstep")],
    Row("nstep", "__init__", "optimize_memory_usage", init(**dict(OPT)), "NotImplementedError"),
    *[Row(k, "__init__", "optimize_memory_usage", init(**dict(OPT)), "AssertionError")
      for k in ("dict_replay", "her")],
    *[Row(k, "__init__", "optimize_memory_usage with handle_timeout_termination",
          init(optimize_memory_usage=True), "AssertionError") for k in ("dict_replay", "her")],
    *[Row(k, "__init__", "a Box observation space", init(observation_space=IMG), "AssertionError")
      for k in ("dict_replay", "her", "dict_rollout")],
    *[Row(k, "__init__", "a Dict observation space", init(observation_space=DICT), "TypeError")
      for k in ("replay", "nstep", "rollout")],
    *[Row(k, "__init__", "an unexpected keyword argument", init(wrong_keyword=1), "TypeError") for k in ALL],
    *[Row(k, "__init__", "a keyword argument given twice", twice, "TypeError",
          why="Python's message names the class called: compared with SB3's class name replaced by ours")
      for k in ROLLOUT_KINDS],
    *[Row(k, "__init__", "n_envs=0", init(n_envs=0), "ZeroDivisionError") for k in REPLAY_KINDS],
    *[Row(k, "__init__", "n_envs=0", init(n_envs=0), "accepts", ours="ValueError",
          why="a rollout of no envs holds nothing; ours refuses it when built") for k in ROLLOUT_KINDS],
    *[Row(k, "__init__", "a negative n_envs", init(n_envs=-1), "ValueError") for k in ALL],
    *[Row(k, "__init__", "a negative buffer_size", init(buffer_size=-1), "ValueError") for k in ROLLOUT_KINDS],
    *[Row(k, "__init__", "buffer_size=0", init(buffer_size=0), "accepts") for k in ALL],
    *[Row(k, "__init__", "a float buffer_size", init(buffer_size=8.0), "TypeError") for k in ALL],
    *[Row(k, "__init__", "an unsupported observation space", init(observation_space=spaces.Text(4)),
          "NotImplementedError") for k in ALL],
    *[Row(k, "__init__", "an unsupported action space", init(action_space=spaces.Text(4)),
          "NotImplementedError") for k in ALL],
    *[Row(k, "__init__", "an unknown device", init(device="bogus"), "RuntimeError") for k in ALL],
    Row("her", "__init__", "an unknown goal_selection_strategy name", init(goal_selection_strategy="bogus"),
        "KeyError"),
    Row("her", "__init__", "a goal_selection_strategy of the wrong type", init(goal_selection_strategy=3),
        "AssertionError"),
    # -- add(): observations ---------------------------------------------------------------------
    *[Row(k, "add", "an observation of the wrong shape", lambda c: c.add(obs=lambda g: g[..., :2]), "ValueError")
      for k in ("replay", "nstep", "rollout")],
    Row("replay", "add", "a next observation of the wrong shape",
        lambda c: c.add(next_obs=lambda g: g[..., :2]), "ValueError"),
    Row("replay", "add", "a next observation of the wrong shape, optimize_memory_usage",
        lambda c: c.add(next_obs=lambda g: g[..., :2]), "ValueError", kwargs=OPT),
    Row("replay", "add", "a good transition, optimize_memory_usage", lambda c: c.add(), "accepts", kwargs=OPT),
    *[Row(k, "add", "one env's observation in a buffer of two envs", lambda c: c.add(obs=one_env), "accepts",
          ours="DataLossError", why=BROADCAST) for k in ("replay", "dict_replay", "rollout", "dict_rollout")],
    *[Row(k, "add", "every argument for one env in a buffer of two envs",
          lambda c: c.add(**{n: one_env for n in ("obs", "next_obs", "action", "reward", "done", "infos")}),
          "ValueError") for k in ("replay", "dict_replay", "her")],
    Row("rollout", "add", "every argument for one env in a buffer of two envs",
        lambda c: c.add(**{n: one_env for n in ("obs", "action", "reward", "episode_start", "value", "log_prob")}),
        "ValueError"),
    *[Row(k, "add", "float observations with fractions in a uint8 space",
          lambda c: c.add(obs=lambda g: g.astype(np.float32) + 0.5), "accepts", ours="DataLossError", why=LOSSY)
      for k in ("replay", "rollout")],
    Row("replay", "add", "next observations with fractions in a uint8 space",
        lambda c: c.add(next_obs=lambda g: g.astype(np.float64) + 0.25), "accepts", ours="DataLossError", why=LOSSY),
    *[Row(k, "add", "observations outside the uint8 range", lambda c: c.add(obs=lambda g: g.astype(np.int64) + 256),
          "accepts", ours="DataLossError", why=LOSSY) for k in ("replay", "rollout")],
    Row("replay", "add", "numeric strings as observations", lambda c: c.add(obs=lambda g: g.astype(str)),
        "accepts", ours="DataLossError", why="SB3 parses the strings; ours takes numbers only"),
    *[Row(k, "add", "int64 observations within the uint8 range", lambda c: c.add(obs=lambda g: g.astype(np.int64)),
          "accepts") for k in ("replay", "rollout")],
    *[Row(k, "add", "float64 observations in a float32 space", lambda c: c.add(obs=lambda g: g.astype(np.float64)),
          "accepts", obs="vec") for k in ("replay", "rollout")],
    *[Row(k, "add", "observations as nested lists", lambda c: c.add(obs=lambda g: g.tolist()), "accepts")
      for k in ("replay", "rollout")],
    Row("replay", "add", "observations with an extra leading axis of length 1", lambda c: c.add(obs=lambda g: g[None]),
        "accepts"),
    *[Row(k, "add", "None as the observation", lambda c: c.add(obs=None), "TypeError") for k in ("replay", "rollout")],
    Row("replay", "add", "a string as the observation", lambda c: c.add(obs="abc"), "ValueError"),
    Row("replay", "add", "a dict observation in a non-Dict buffer", lambda c: c.add(obs=lambda g: {"img": g}),
        "TypeError"),
    Row("replay", "add", "a ragged list as the observation", lambda c: c.add(obs=[[1, 2], [3]]), "ValueError"),
    *[Row(k, "add", "a Discrete observation of the wrong size", lambda c: c.add(obs=lambda g: g[:1]), "ValueError",
          obs="disc") for k in ("replay", "rollout")],
    *[Row(k, "add", "a Discrete observation as a list", lambda c: c.add(obs=lambda g: g.tolist()), "AttributeError",
          obs="disc") for k in ("replay", "rollout")],
    # -- add(): Dict observations ----------------------------------------------------------------
    *[Row(k, "add", "an observation dict without one key", lambda c: c.add(obs=key_dropped("vec")), "KeyError")
      for k in ("dict_replay", "dict_rollout")],
    Row("her", "add", "an observation dict without one key", lambda c: c.add(obs=key_dropped("desired_goal")),
        "KeyError"),
    Row("dict_replay", "add", "a next observation dict without one key",
        lambda c: c.add(next_obs=key_dropped("img")), "KeyError"),
    *[Row(k, "add", "an array instead of an observation dict", lambda c: c.add(obs=lambda g: g["img"]),
          "IndexError") for k in ("dict_replay", "dict_rollout")],
    Row("her", "add", "an array instead of an observation dict", lambda c: c.add(obs=lambda g: g["observation"]),
        "IndexError"),
    Row("dict_replay", "add", "a list instead of an observation dict", lambda c: c.add(obs=lambda g: list(g.values())),
        "TypeError"),
    *[Row(k, "add", "one key of the wrong shape", lambda c: c.add(obs=lambda g: {**g, "img": g["img"][..., :2]}),
          "ValueError") for k in ("dict_replay", "dict_rollout")],
    *[Row(k, "add", "an extra key", lambda c: c.add(obs=lambda g: {**g, "extra": g["img"]}), "accepts")
      for k in ("dict_replay", "dict_rollout")],
    Row("dict_replay", "add", "a Discrete key as a list", lambda c: c.add(obs=lambda g: {**g, "d": g["d"].tolist()}),
        "AttributeError"),
    Row("dict_rollout", "add", "a Discrete key as a list", lambda c: c.add(obs=lambda g: {**g, "d": g["d"].tolist()}),
        "accepts"),
    Row("dict_replay", "add", "one key with fractions in a uint8 space",
        lambda c: c.add(obs=lambda g: {**g, "img": g["img"] + 0.5}), "accepts", ours="DataLossError", why=LOSSY),
    Row("her", "add", "one key with fractions in an int8 space",
        lambda c: c.add(obs=lambda g: {**g, "observation": g["observation"] + 0.5}), "accepts",
        ours="DataLossError", why=LOSSY),
    # -- add(): actions, rewards, dones, infos, values --------------------------------------------
    *[Row(k, "add", "an action of the wrong size", lambda c: c.add(action=lambda g: g[..., :1]), "ValueError")
      for k in ("replay", "dict_replay", "nstep", "her", "rollout")],
    *[Row(k, "add", "an action as a list", lambda c: c.add(action=lambda g: g.tolist()), "AttributeError")
      for k in ("replay", "rollout")],
    Row("replay", "add", "None as the action", lambda c: c.add(action=None), "AttributeError"),
    Row("replay", "add", "strings as the action", lambda c: c.add(action=lambda g: np.full(g.shape, "a")),
        "ValueError"),
    *[Row(k, "add", "float actions in a Discrete action space", lambda c: c.add(action=lambda g: g + 0.7),
          "accepts", action="disc", why="both store the truncated integers (SB3's assignment)")
      for k in ("replay", "rollout")],
    *[Row(k, "add", "a reward of the wrong length", lambda c: c.add(reward=np.zeros(3)), "ValueError")
      for k in ("replay", "her", "rollout")],
    *[Row(k, "add", "None as the reward", lambda c: c.add(reward=None), "accepts",
          why="both store NaN (numpy converts None to NaN in a float array)") for k in ("replay", "rollout")],
    Row("replay", "add", "a string as the reward", lambda c: c.add(reward="abc"), "ValueError"),
    Row("replay", "add", "one reward for two envs", lambda c: c.add(reward=1.5), "accepts"),
    Row("replay", "add", "rewards of shape (1, n_envs)", lambda c: c.add(reward=lambda g: g[None]), "accepts"),
    Row("replay", "add", "integer rewards and dones", lambda c: c.add(reward=np.array([3, -2]), done=np.array([0, 1])),
        "accepts"),
    Row("replay", "add", "float64 rewards", lambda c: c.add(reward=lambda g: g.astype(np.float64) / 3), "accepts"),
    Row("replay", "add", "a done of the wrong length", lambda c: c.add(done=np.zeros(3)), "ValueError"),
    Row("replay", "add", "None as done", lambda c: c.add(done=None), "accepts",
        why="both store NaN (numpy converts None to NaN in a float array)"),
    Row("replay", "add", "None as infos", lambda c: c.add(infos=None), "TypeError"),
    Row("replay", "add", "no infos", lambda c: c.add(infos=[]), "ValueError"),
    Row("replay", "add", "None in infos", lambda c: c.add(infos=[None, None]), "AttributeError"),
    Row("replay", "add", "one info dict for two envs", lambda c: c.add(infos=lambda g: g[:1]), "accepts"),
    Row("replay", "add", "None as infos without handle_timeout_termination", lambda c: c.add(infos=None),
        "accepts", kwargs=(("handle_timeout_termination", False),)),
    Row("her", "add", "a scalar done", lambda c: c.add(done=True), "TypeError",
        why="SB3 stores the transition, then fails reading done[env]; ours fails first and stores nothing"),
    Row("her", "add", "a 0-d array as done", lambda c: c.add(done=np.array(False)), "IndexError",
        why="SB3 stores the transition, then fails reading done[env]; ours fails first and stores nothing"),
    Row("her", "add", "three infos for two envs, copy_info_dict",
        lambda c: c.add(infos=lambda g: [*g, {}]), "ValueError", kwargs=(("copy_info_dict", True),)),
    Row("her", "add", "dones as a list", lambda c: c.add(done=lambda g: g.tolist()), "accepts"),
    Row("rollout", "add", "an episode_start of the wrong length", lambda c: c.add(episode_start=np.zeros(3)),
        "ValueError"),
    Row("rollout", "add", "a numpy value", lambda c: c.add(value=lambda g: g.numpy()), "AttributeError"),
    Row("rollout", "add", "a value that requires grad", no_grad_value, "RuntimeError"),
    Row("rollout", "add", "a value of the wrong size", lambda c: c.add(value=lambda g: th.zeros(3)), "ValueError"),
    Row("rollout", "add", "a float log_prob", lambda c: c.add(log_prob=0.5), "AttributeError"),
    Row("rollout", "add", "a log_prob of the wrong size", lambda c: c.add(log_prob=th.zeros(3)), "ValueError"),
    Row("rollout", "add", "float64 values and log_probs",
        lambda c: c.add(value=lambda g: g.double() / 3, log_prob=lambda g: g.double() / 7), "accepts"),
    Row("rollout", "add", "None as episode_start", lambda c: c.add(episode_start=None), "accepts",
        why="both store NaN (numpy converts None to NaN in a float array)"),
    Row("rollout", "add", "a 0-d log_prob tensor", lambda c: c.add(log_prob=th.tensor(0.25)), "accepts"),
    *[Row(k, "add", "a step past the end of a full rollout", lambda c: c.add(), "IndexError", buffer_size=4, fill=4)
      for k in ROLLOUT_KINDS],
    Row("dict_rollout", "add", "a dict without its first key past the end of a full rollout",
        lambda c: c.add(obs=key_dropped("d")), "KeyError", buffer_size=4, fill=4),
    Row("dict_rollout", "add", "a dict without its second key past the end of a full rollout",
        lambda c: c.add(obs=key_dropped("img")), "IndexError", buffer_size=4, fill=4,
        why="SB3 reads and stores key by key: the first key's store fails first"),
    Row("rollout", "add", "a step into a rollout of buffer_size 0", lambda c: c.add(), "IndexError",
        buffer_size=0, fill=0),
    # -- extend() -----------------------------------------------------------------------------------
    *[Row(k, "extend", "arguments of different lengths", lambda c: c.extend(3, cut={"3": 2}), "ValueError",
          state="sb3") for k in ("replay", "rollout")],
    *[Row(k, "extend", "three good steps", lambda c: c.extend(3), "accepts") for k in ("replay", "rollout")],
    # -- sample() -----------------------------------------------------------------------------------
    *[Row(k, "sample", "from an empty buffer", lambda c: c.buf.sample(4), "ValueError", fill=0)
      for k in ("replay", "dict_replay", "nstep")],
    Row("replay", "sample", "after reset()", lambda c: (c.buf.reset(), c.buf.sample(4)), "ValueError", state="sb3",
        ignore=("observations", "next_observations"), why=RESET),
    Row("her", "sample", "before the first episode ends", lambda c: c.buf.sample(4), "RuntimeError", fill=1),
    Row("her", "sample", "without an env", lambda c: c.buf.sample(8), "AssertionError", fill=4,
        kwargs=(("env", None),)),
    *[Row(k, "sample", "a negative batch size", lambda c: c.buf.sample(-1), "ValueError")
      for k in ("replay", "nstep")],
    Row("replay", "sample", "a float batch size", lambda c: c.buf.sample(2.5), "TypeError"),
    *[Row(k, "sample", "batch size 0", lambda c: c.buf.sample(0), "accepts") for k in ("replay", "dict_replay")],
    Row("replay", "sample", "batch size 0 from an empty buffer", lambda c: c.buf.sample(0), "accepts", fill=0),
    Row("replay", "sample", "a full buffer of one row, optimize_memory_usage", lambda c: c.buf.sample(4),
        "ValueError", buffer_size=2, fill=1, kwargs=OPT),
    *[Row(k, "sample", "a good batch", lambda c: c.buf.sample(5), "accepts", fill=6) for k in REPLAY_KINDS],
    Row("nstep", "sample", "n_steps=0", lambda c: c.buf.sample(4), "ValueError", kwargs=(("n_steps", 0),),
        state="sb3", why="SB3's n-step sampling fails after marking timeouts[pos - 1] and leaves it marked; "
                         "ours runs SB3's code and does the same"),
    Row("nstep", "sample", "n_steps longer than the buffer", lambda c: c.buf.sample(4), "accepts", fill=6,
        kwargs=(("n_steps", 9),)),
    # -- get() -----------------------------------------------------------------------------------------
    *[Row(k, "get", "before the rollout is full", batches(1, 4), "AssertionError", buffer_size=4, fill=2)
      for k in ROLLOUT_KINDS],
    Row("rollout", "get", "a float batch size", batches(1, 1.5), "TypeError", buffer_size=4, fill=4, state="sb3"),
    Row("rollout", "get", "batch size 0 (SB3 yields empty batches forever; two compared)", batches(2, 0),
        "accepts", buffer_size=4, fill=4),
    *[Row(k, "get", "a full rollout in batches of 3", batches(9, 3), "accepts", buffer_size=4, fill=4)
      for k in ROLLOUT_KINDS],
    Row("rollout", "get", "a batch size larger than the rollout", batches(2, 100), "accepts", buffer_size=4, fill=4),
    # -- reset(), compute_returns_and_advantage(), to_torch(), size() ---------------------------------
    Row("rollout", "reset", "reset() after get()", lambda c: (batches(1, 4)(c), c.buf.reset()), "accepts",
        buffer_size=4, fill=4),
    Row("replay", "reset", "reset() of a full buffer, two adds, a sample", reset_add_sample, "accepts", fill=6,
        ignore=("observations", "next_observations"), why=RESET),
    Row("rollout", "compute_returns_and_advantage", "numpy last_values",
        lambda c: c.buf.compute_returns_and_advantage(np.zeros(2), np.zeros(2)), "AttributeError",
        buffer_size=4, fill=4),
    Row("rollout", "compute_returns_and_advantage", "dones as a list",
        lambda c: c.buf.compute_returns_and_advantage(th.zeros(2), [0, 0]), "AttributeError", buffer_size=4, fill=4),
    Row("rollout", "compute_returns_and_advantage", "dones of the wrong length",
        lambda c: c.buf.compute_returns_and_advantage(th.zeros(2), np.zeros(3)), "ValueError", buffer_size=4, fill=4),
    Row("rollout", "compute_returns_and_advantage", "before the rollout is full",
        lambda c: c.buf.compute_returns_and_advantage(th.ones(2), np.zeros(2)), "accepts", buffer_size=4, fill=2),
    *[Row(k, "to_torch", "an object array", lambda c: c.buf.to_torch(np.array([None, 1])), "TypeError")
      for k in ("replay", "rollout")],
    Row("replay", "size", "a buffer filled past its capacity", lambda c: c.buf.size(), "accepts", fill=6),
    # -- HER's own methods -------------------------------------------------------------------------
    Row("her", "set_env", "a second env", lambda c: c.buf.set_env(c.buf.env), "ValueError"),
    Row("her", "truncate_last_trajectory", "in the middle of an episode", quiet_truncate, "accepts", fill=4),
    Row("her", "truncate_last_trajectory", "on an empty buffer", lambda c: c.buf.truncate_last_trajectory(),
        "accepts", fill=0),
]


# -- running a row -------------------------------------------------------------------------------------
STATE = ("pos", "full", "buffer_size", "n_envs", "generator_ready", "observations", "next_observations", "actions",
         "rewards", "dones", "timeouts", "episode_starts", "values", "log_probs", "returns", "advantages",
         "ep_start", "ep_length", "_current_ep_start", "infos")


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (bool, int, float, str, np.bool_, np.integer)) or value is None:
        return value
    arr = np.array(value)  # an ObservationView or column view reads its contents
    return arr.tolist() if arr.dtype == object else arr


def snapshot(buf: Any) -> dict[str, Any] | None:
    """Everything SB3's buffer holds, as plain values (``None`` for no buffer)."""
    if not isinstance(buf, BaseBuffer):
        return None
    return {name: _plain(getattr(buf, name)) for name in STATE if hasattr(buf, name)}


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Bit-identical values (arrays: dtype, shape, bytes; tensors likewise; containers element-wise)."""
    if isinstance(a, BaseBuffer) or isinstance(b, BaseBuffer):
        assert_state_equal(snapshot(a), snapshot(b), where)
    elif isinstance(a, th.Tensor):
        assert isinstance(b, th.Tensor) and a.dtype == b.dtype and a.device == b.device, where
        assert_same(a.numpy(), b.numpy(), where)
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, \
            f"{where}: {getattr(b, 'dtype', type(b))} {getattr(b, 'shape', '')} != {a.dtype} {a.shape}"
        assert a.tobytes() == b.tobytes(), f"{where}: values differ"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: keys {list(b)} != {list(a)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{where}: {type(b).__name__} != {type(a).__name__}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b and type(a) is type(b), f"{where}: {b!r} != {a!r}"


def assert_state_equal(ref: dict[str, Any] | None, ours: dict[str, Any] | None, where: str = "") -> None:
    """Every attribute SB3's buffer has, equal in ours (ours may hold more, e.g. next_observations)."""
    assert (ref is None) == (ours is None), where
    for name, value in (ref or {}).items():
        assert ours is not None and name in ours, f"{where}: ours lacks {name}"
        assert_same(value, ours[name], f"{where}.{name}")


@dataclass
class Outcome:
    """What one side did: the error (or None), the act's result, the buffer state before and after."""

    error: BaseException | None
    result: Any
    before: dict[str, Any] | None
    after: dict[str, Any] | None


def run_side(row: Row, cls: type) -> Outcome:
    ctx = row.ctx(cls)
    before = snapshot(ctx.buf) if row.method != "__init__" else None
    np.random.seed(0)  # noqa: NPY002 -- SB3 samples from numpy's global RNG
    try:
        result, error = row.act(ctx), None
    except Exception as e:
        result, error = None, e
    after = snapshot(ctx._buf) if ctx._buf is not None else snapshot(result)
    return Outcome(error, result, before, after)


def full_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def expected_message(row: Row, ref: BaseException, cls: type) -> str:
    """SB3's message as ours must contain it (a message naming SB3's class by module names ours)."""
    return str(ref).replace(full_name(CLASSES[row.kind][0]), full_name(cls))


def _kept(row: Row, *states: dict[str, Any] | None) -> list[dict[str, Any] | None]:
    return [None if s is None else {k: v for k, v in s.items() if k not in row.ignore} for s in states]


def check_row(row: Row, cls: type) -> tuple[Outcome, Outcome]:
    """Run ``row`` on SB3's class and ``cls``; assert ours behaves as the row says. Returns both outcomes."""
    ref, ours = run_side(row, CLASSES[row.kind][0]), run_side(row, cls)
    got = "accepts" if ref.error is None else type(ref.error).__name__
    assert got == row.sb3, f"SB3 {got} ({ref.error!r}); the table says {row.sb3} -- did SB3 change?"
    if ref.error is not None:
        assert ours.error is not None, f"SB3 raises {ref.error!r}; ours accepts"
        assert isinstance(ours.error, type(ref.error)), \
            f"ours raises {type(ours.error).__mro__}, not an instance of SB3's {type(ref.error).__name__}"
        assert expected_message(row, ref.error, cls) in str(ours.error), \
            f"SB3's message {str(ref.error)!r} is not in ours: {str(ours.error)!r}"
    elif row.ours == "same":
        assert ours.error is None, f"SB3 accepts; ours raises {ours.error!r}"
        assert_same(ref.result, ours.result, "result")
        assert_state_equal(*_kept(row, ref.after, ours.after), "state")
        return ref, ours
    else:
        assert ours.error is not None and type(ours.error).__name__ == row.ours, \
            f"SB3 accepts; ours should raise {row.ours}, got {ours.error!r}"
    if row.state == "sb3":  # what SB3 did before failing (extend adds item by item), ours did too
        assert_state_equal(*_kept(row, ref.after, ours.after), "state after the error")
    else:  # a failed call changes nothing in ours
        assert_state_equal(ours.before, ours.after, "state after the error")
    return ref, ours


def cases() -> list[tuple[Row, type]]:
    """Every (row, our class) pair, once."""
    return [(row, cls) for row in ROWS for cls in CLASSES[row.kind][1]]
