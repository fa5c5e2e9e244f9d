"""Training as users run it: SB3's replay buffer against ours, with and without ``prefetch`` (issue 38, item 5).

Each arm runs in a fresh process of its own (``run_fresh``), one at a time, the arms taking
turns (their order alternates every round), ``--rounds`` rounds; a rate is the best over the
rounds (other processes on a shared machine only ever slow an arm down) and each round's ratio
to SB3's arm of the same round is kept too. Arms:

* ``sb3``: SB3's own ``ReplayBuffer``;
* ``ours``: :class:`~sb3_integration.CompressedReplayBuffer` (prefetch off: SB3's samples, so
  training ends with SB3's parameters, bit for bit; the table says whether it did);
* ``ours-prefetch``: the same with ``prefetch=--prefetch`` (batches drawn from the buffer's own
  generator: not SB3's indices, so other parameters).

Scenarios (``--scenarios``):

* ``sac-vec``, ``td3-vec``: SB3's SAC / TD3, ``MlpPolicy``, SB3's default ``buffer_size``
  (1M) and batch size, on gymnasium's ``HalfCheetah-v5`` when ``import mujoco`` works, else an
  env with its shapes ((17,) float32 observations, (6,) actions, cheap made-up dynamics);
* ``sac-pendulum``: SAC on ``Pendulum-v1`` ((3,) observations);
* ``dqn-atari-32``, ``dqn-atari-256``: SB3's DQN, ``CnnPolicy``, on real Pong frames
  (``make_atari_env`` + ``VecFrameStack(4)``), ``batch_size`` 32 / 256, ``buffer_size``
  ``--atari-buffer``;
* ``learner-atari-32``, ``learner-vec-256``: no network: a loop of one ``add()``, one
  ``sample()`` and a learner step that holds no GIL for ``--step-ms`` (``time.sleep``, a
  stand-in for a GPU step), on real MsPacman stacks (``tools/atari_data.py``) or HalfCheetah-shaped
  vectors. It shows what sampling ahead hides: the time the learner waits in ``sample()``.

Rates are env steps per second of the training phase (after ``learning_starts``; the loop
scenarios: iterations per second). Torch runs one thread per arm.

Examples
--------
    .venv/bin/python tools/bench_training.py --out results/bench_training.json
    .venv/bin/python tools/bench_training.py --steps 300 --rounds 3 --scenarios sac-vec,learner-atari-32
    .venv/bin/python tools/bench_training.py --glibc both   # also with SB3 spared its page faults
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _bench_common import GLIBC, ensure_importable, md_table, run_fresh, save_results

ensure_importable()

ARMS = ("sb3", "ours", "ours-prefetch")
SCENARIOS = ("sac-vec", "td3-vec", "sac-pendulum", "dqn-atari-32", "dqn-atari-256", "learner-atari-32",
             "learner-vec-256", "drq-rgb", "ppo-atari")
#: PPO's rollout buffer has no prefetch: two arms
ROLLOUT_ARMS = ("sb3", "ours")
SPARED = GLIBC["spared"]  # glibc keeps and reuses freed blocks: SB3's per-sample arrays fault in no pages


# -- envs -----------------------------------------------------------------------------------
def _shapes_env(obs_dim: int = 17, act_dim: int = 6, horizon: int = 1000) -> Any:
    """An env with HalfCheetah's shapes: fixed random linear dynamics squashed by tanh."""
    import gymnasium as gym

    class Shapes(gym.Env):  # type: ignore[type-arg]
        observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (act_dim,), np.float32)

        def __init__(self) -> None:
            g = np.random.default_rng(1234)
            self._w = g.standard_normal((obs_dim, obs_dim)) / np.sqrt(obs_dim)
            self._u = g.standard_normal((obs_dim, act_dim))
            self._t, self._x = 0, np.zeros(obs_dim)

        def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
            super().reset(seed=seed)
            self._t, self._x = 0, self.np_random.standard_normal(obs_dim) * 0.1
            return self._x.astype(np.float32), {}

        def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
            self._x = 3 * np.tanh(self._w @ self._x + self._u @ action) + 0.01 * self.np_random.standard_normal(obs_dim)
            self._t += 1
            return self._x.astype(np.float32), float(self._x[0] - 0.1 * np.square(action).sum()), False, \
                self._t >= horizon, {}

    return Shapes()


def _vector_env() -> tuple[Any, str]:
    import gymnasium as gym

    try:
        import mujoco  # noqa: F401

        return gym.make("HalfCheetah-v5"), "HalfCheetah-v5"
    except Exception:  # mujoco missing or broken: its shapes
        return _shapes_env(), "HalfCheetah shapes (no mujoco)"


# -- the child: one arm -----------------------------------------------------------------------
def _buffer_args(cfg: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    if cfg["arm"] == "sb3":
        return None, {}
    from sb3_integration import CompressedReplayBuffer

    kwargs: dict[str, Any] = {}
    if cfg["arm"] == "ours-prefetch":
        kwargs.update(prefetch=cfg["prefetch"], prefetch_seed=cfg["seed"])
    return CompressedReplayBuffer, kwargs


def _params_sha(model: Any) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.policy.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def _algorithm(cfg: dict[str, Any]) -> dict[str, Any]:
    import torch as th
    from stable_baselines3 import DQN, SAC, TD3

    scenario, seed = cfg["scenario"], cfg["seed"]
    buffer_class, buffer_kwargs = _buffer_args(cfg)
    common = dict(seed=seed, device="cpu", learning_starts=cfg["learning_starts"], verbose=0,
                  replay_buffer_class=buffer_class, replay_buffer_kwargs=buffer_kwargs or None)
    if scenario.startswith("dqn"):
        from atari_data import _make_vec_env

        env, env_name = _make_vec_env("Pong", 1, seed, 4), "Pong (NoFrameskip, AtariWrapper, 4 stacked)"
        model = DQN("CnnPolicy", env, buffer_size=cfg["atari_buffer"], batch_size=int(scenario.rsplit("-", 1)[1]),
                    train_freq=4, **common)
    else:
        import gymnasium as gym

        env, env_name = (gym.make("Pendulum-v1"), "Pendulum-v1") if scenario == "sac-pendulum" else _vector_env()
        model = (TD3 if scenario.startswith("td3") else SAC)("MlpPolicy", env, **common)
    th.set_num_threads(1)
    model.learn(cfg["learning_starts"])  # collection only: no gradient step yet
    in_buffer = _time_calls(model.replay_buffer, ("add", "sample"))
    c0, t0 = time.process_time(), time.perf_counter()
    model.learn(cfg["steps"], reset_num_timesteps=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"env": env_name, "steps_per_s": cfg["steps"] / wall, "steps_per_cpu_s": cfg["steps"] / cpu,
            "wall_s": wall, "buffer_ms_per_step": 1000 * in_buffer[0] / cfg["steps"],
            "params_sha": _params_sha(model), "n_updates": int(model._n_updates)}


def _time_calls(obj: Any, methods: tuple[str, ...]) -> list[float]:
    """Add the seconds spent in ``obj``'s ``methods`` to the returned one-element list, from now on.

    The buffer's own share of a training step: the machine's drift moves the whole step, of which
    the buffer is a small part, so the steps/s of two processes can differ by more than the buffer costs.
    """
    total = [0.0]
    for name in methods:
        method = getattr(obj, name)

        def timed(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                total[0] += time.perf_counter() - t0

        setattr(obj, name, timed)  # the instance's attribute: SB3 calls self.replay_buffer.add / .sample
    return total


def _loop(cfg: dict[str, Any]) -> dict[str, Any]:
    """add, sample, a learner step off the GIL: what the learner waits for in sample()."""
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    fill, steps, batch = cfg["learning_starts"], cfg["steps"], int(cfg["scenario"].rsplit("-", 1)[1])
    if "atari" in cfg["scenario"]:
        from atari_data import collect_stacked

        tr = collect_stacked("MsPacman", fill + steps, 1, seed=cfg["seed"])
        obs_space, act_space, env_name = spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(9), \
            "MsPacman stacks (4, 84, 84)"
        size = cfg["atari_buffer"]
        data = list(tr.steps())
    else:
        env = _shapes_env()
        obs_space, act_space, env_name = env.observation_space, env.action_space, "HalfCheetah shapes (17,)"
        size = 1_000_000
        rng, data = np.random.default_rng(cfg["seed"]), []
        obs, _ = env.reset(seed=cfg["seed"])
        for _ in range(fill + steps):
            a = rng.uniform(-1, 1, (1, 6)).astype(np.float32)
            nxt, r, term, trunc, _ = env.step(a[0])
            data.append((obs[None], nxt[None], a, np.array([r], np.float32), np.array([term]),
                         [{"TimeLimit.truncated": trunc}]))
            obs = env.reset()[0] if term or trunc else nxt
    np.random.seed(cfg["seed"])  # noqa: NPY002 (SB3's sample() draws from it)
    buffer_class, kwargs = _buffer_args(cfg)
    buf = (buffer_class or ReplayBuffer)(size, obs_space, act_space, "cpu", **kwargs)
    for tr_ in data[:fill]:
        buf.add(*tr_)
    step_s, waits = cfg["step_ms"] / 1000, []
    t0 = time.perf_counter()
    for tr_ in data[fill:]:
        buf.add(*tr_)
        w0 = time.perf_counter()
        buf.sample(batch)
        waits.append(time.perf_counter() - w0)
        time.sleep(step_s)  # the learner's step: no GIL held
    wall = time.perf_counter() - t0
    if hasattr(buf, "close"):
        buf.close()
    return {"env": env_name, "steps_per_s": steps / wall, "sample_wait_ms": 1000 * statistics.median(waits),
            "sample_wait_mean_ms": 1000 * statistics.fmean(waits), "wall_s": wall}


def _drq(cfg: dict[str, Any]) -> dict[str, Any]:
    """DrQ's update pattern on CPU: an add per env step, every 2 steps a sample(256) through a conv encoder."""
    import _bench_rgb as rgb
    import torch as th

    th.manual_seed(cfg["seed"])
    th.set_num_threads(1)  # as in the other scenarios: the learner's step on one core (it took both before)
    data = rgb.Data(cfg["rgb_frames"], cfg["rgb_source"], seed=cfg["seed"])
    buffer_class, kwargs = _buffer_args(cfg)
    buf = rgb.make("sb3" if buffer_class is None else "ours", "box", cfg["rgb_buffer"], **kwargs)
    c = cfg["drq_channels"]
    enc = th.nn.Sequential(  # SB3's NatureCNN, narrower (a small encoder that a 1-thread CPU runs)
        th.nn.Conv2d(9, c, 8, 4), th.nn.ReLU(), th.nn.Conv2d(c, 2 * c, 4, 2), th.nn.ReLU(),
        th.nn.Conv2d(2 * c, 2 * c, 3, 1), th.nn.ReLU(), th.nn.Flatten(), th.nn.Linear(2 * c * 49, 50))
    head = th.nn.Linear(50 + rgb.ACT_DIM, 1)
    opt = th.optim.Adam([*enc.parameters(), *head.parameters()], lr=1e-4)
    np.random.seed(cfg["seed"])  # noqa: NPY002 (SB3's sample() draws from it)
    for t in range(cfg["learning_starts"]):
        buf.add(*data.row(t, 1, "box"))
    waits: list[float] = []
    c0, t0 = time.process_time(), time.perf_counter()
    for t in range(cfg["learning_starts"], cfg["learning_starts"] + cfg["steps"]):
        buf.add(*data.row(t, 1, "box"))
        if t % 2:
            continue
        w0 = time.perf_counter()
        b = buf.sample(256)
        waits.append(time.perf_counter() - w0)
        with th.no_grad():
            target = b.rewards + 0.99 * (1 - b.dones) * head(th.cat([enc(b.next_observations.float() / 255),
                                                                         b.actions], 1))
        q = head(th.cat([enc(b.observations.float() / 255), b.actions], 1))
        loss = th.nn.functional.mse_loss(q, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    getattr(buf, "close", lambda: None)()
    return {"env": f"{cfg['rgb_source']} RGB (9, 84, 84): {', '.join(data.tasks)}", "steps_per_s": cfg["steps"] / wall,
            "steps_per_cpu_s": cfg["steps"] / cpu,
            "sample_wait_ms": 1000 * statistics.median(waits), "wall_s": wall,
            "params_sha": _params_sha(type("M", (), {"policy": enc})())}


def _ppo(cfg: dict[str, Any]) -> dict[str, Any]:
    """SB3's PPO, CnnPolicy, on MsPacman (make_atari_env, 4 stacked): SB3's RolloutBuffer or ours."""
    import torch as th
    from atari_data import _make_vec_env
    from stable_baselines3 import PPO

    from sb3_integration import CompressedRolloutBuffer

    env = _make_vec_env("MsPacman", cfg["ppo_envs"], cfg["seed"], 4)
    kwargs = {} if cfg["arm"] == "sb3" else {"rollout_buffer_class": CompressedRolloutBuffer}
    model = PPO("CnnPolicy", env, n_steps=cfg["ppo_n_steps"], batch_size=256, n_epochs=4, seed=cfg["seed"],
                device="cpu", verbose=0, **kwargs)
    th.set_num_threads(1)
    per_rollout = cfg["ppo_n_steps"] * cfg["ppo_envs"]
    model.learn(per_rollout)  # one rollout and update first: what a process does once
    steps = max(1, cfg["steps"] // per_rollout) * per_rollout
    c0, t0 = time.process_time(), time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"env": f"MsPacman x{cfg['ppo_envs']} (AtariWrapper, 4 stacked), n_steps {cfg['ppo_n_steps']}",
            "steps_per_s": steps / wall, "steps_per_cpu_s": steps / cpu, "wall_s": wall,
            "params_sha": _params_sha(model), "n_updates": int(model._n_updates)}


def _arm(cfg: dict[str, Any]) -> dict[str, Any]:
    scenario = cfg["scenario"]
    if scenario == "drq-rgb":
        return _drq(cfg)
    if scenario == "ppo-atari":
        return _ppo(cfg)
    return _loop(cfg) if scenario.startswith("learner") else _algorithm(cfg)


# -- the parent ---------------------------------------------------------------------------------
def _run(cfg: dict[str, Any], glibc: str, timeout: float) -> dict[str, Any]:
    return run_fresh(__file__, cfg, timeout=timeout, glibc=glibc)


def _summary(scenario: str, glibc: str, runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    sb3 = runs["sb3"]
    best_sb3 = max((r["steps_per_s"] for r in sb3 if "error" not in r), default=None)
    for arm, rs in runs.items():
        good = [r for r in rs if "error" not in r]
        best = max((r["steps_per_s"] for r in good), default=None)
        ratios = [r["steps_per_s"] / s["steps_per_s"] for r, s in zip(rs, sb3, strict=True)
                  if "error" not in r and "error" not in s]
        shas = {r.get("params_sha") for r in good}
        sb3_shas = {r.get("params_sha") for r in sb3 if "error" not in r}
        same = None
        if arm != "sb3" and good and "params_sha" in good[0]:
            same = shas <= sb3_shas  # every round of this arm ends where a round of SB3's does
        rows.append({
            "scenario": scenario, "glibc": glibc, "arm": arm, "env": good[0]["env"] if good else None,
            "rounds": len(good), "steps_per_s": best,
            "ratio": best / best_sb3 if best and best_sb3 else None,
            "round_ratios": " / ".join(f"{x:.2f}" for x in ratios) if arm != "sb3" else "",
            "sample_wait_ms": min((r["sample_wait_ms"] for r in good if "sample_wait_ms" in r), default=None),
            "buffer_ms_per_step": statistics.median(r["buffer_ms_per_step"] for r in good)
            if good and all("buffer_ms_per_step" in r for r in good) else None,
            "buffer_share": statistics.median(r["buffer_ms_per_step"] * r["steps_per_s"] / 1000 for r in good)
            if good and all("buffer_ms_per_step" in r for r in good) else None,
            "params_equal_sb3": "" if same is None else "no" if not same else "yes" if len(sb3_shas) == 1
            else f"yes (SB3's own {len(sb3)} rounds end with {len(sb3_shas)} different parameters)",
            "errors": [r["error"] for r in rs if "error" in r],
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, of {', '.join(SCENARIOS)}")
    p.add_argument("--steps", type=int, default=1000, help="timed env steps (loop iterations) per arm")
    p.add_argument("--learning-starts", type=int, default=500, help="env steps collected before training "
                   "(the loop scenarios: transitions added first)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each arm, arms taking turns")
    p.add_argument("--prefetch", type=int, default=2, help="the ours-prefetch arm's prefetch")
    p.add_argument("--step-ms", type=float, default=2.0, help="the loop scenarios' learner step (GIL released)")
    p.add_argument("--atari-buffer", type=int, default=100_000, help="buffer_size of the Atari scenarios")
    p.add_argument("--rgb-frames", type=int, default=700, help="drq-rgb: rendered frames per dm_control task")
    p.add_argument("--rgb-frames-source", default="dmc", choices=("dmc", "synthetic"),
                   help="drq-rgb: dm_control frames (tools/dmc_data.py), or made-up ones (smoke tests)")
    p.add_argument("--rgb-buffer", type=int, default=100_000, help="drq-rgb: buffer_size (DrQ's)")
    p.add_argument("--drq-channels", type=int, default=8, help="drq-rgb: the encoder's first conv's channels")
    p.add_argument("--ppo-envs", type=int, default=4, help="ppo-atari: n_envs")
    p.add_argument("--ppo-n-steps", type=int, default=128, help="ppo-atari: n_steps (a rollout: x n_envs)")
    p.add_argument("--glibc", choices=("default", "spared", "both"), default="default",
                   help=f"malloc settings of the arms' processes (spared: {SPARED})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1200, help="seconds per arm process")
    p.add_argument("--out", default=None, help="JSON path (a .md is written beside it)")
    p.add_argument("--resummarize", default=None, metavar="JSON",
                   help="rebuild the rows and the .md of a saved run from its per-round results, run nothing")
    p.add_argument("--config", default=None, help=argparse.SUPPRESS)  # child mode
    args = p.parse_args(argv)
    if args.config:
        print(json.dumps(_arm(json.loads(args.config))))
        return 0
    if args.resummarize:
        resummarize(args.resummarize)
        return 0
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        p.error(f"unknown scenarios {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    if args.rounds < 1 or args.steps < 1 or args.learning_starts < 1:
        p.error("--rounds, --steps and --learning-starts must be >= 1")
    if "drq-rgb" in scenarios and args.rgb_frames_source == "dmc":
        import dmc_data

        why = dmc_data.available()
        if why is not None:
            print(f"drq-rgb: synthetic frames: {dmc_data.INSTALL_HINT} ({why})", file=sys.stderr)
            args.rgb_frames_source = "synthetic"
    base = {k: getattr(args, k) for k in ("steps", "learning_starts", "prefetch", "step_ms", "atari_buffer", "seed",
                                          "rgb_frames", "rgb_buffer", "drq_channels", "ppo_envs", "ppo_n_steps")}
    base["rgb_source"] = args.rgb_frames_source
    rows, raw = [], {}
    for glibc in (("default", "spared") if args.glibc == "both" else (args.glibc,)):
        for scenario in scenarios:
            arms = ROLLOUT_ARMS if scenario == "ppo-atari" else ARMS
            runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
            for r in range(args.rounds):
                for arm in arms if r % 2 == 0 else arms[::-1]:
                    res = _run({**base, "scenario": scenario, "arm": arm}, glibc, args.timeout)
                    print(f"{glibc} {scenario} {arm} round {r}: {json.dumps(res)}", file=sys.stderr)
                    runs[arm].append(res)
            raw[f"{glibc}/{scenario}"] = runs
            rows += _summary(scenario, glibc, runs)
    md = _markdown(rows, args.rounds, args.steps, args.learning_starts, args.prefetch, args.step_ms)
    print(md)
    save_results(args.out, {"config": {**base, "rounds": args.rounds, "glibc": args.glibc}, "rows": rows,
                            "runs": raw}, md)
    return 0 if not any(r["errors"] for r in rows) else 1


def _markdown(rows: list[dict[str, Any]], rounds: int, steps: int, learning_starts: int, prefetch: int,
              step_ms: float) -> str:
    md = (f"Training steps/s, SB3's buffer against ours: {rounds} rounds, arms alternating, each arm a "
          f"fresh process, torch 1 thread; {steps} timed steps after {learning_starts}; prefetch "
          f"{prefetch}; loop learner step {step_ms} ms off the GIL. steps/s: best round; ratio: best "
          f"over SB3's best; round ratios: each round against SB3's of the same round; in add() + sample(): the "
          f"time an algorithm's step spends inside the buffer (SAC / TD3 / DQN), median over rounds.\n\n")
    md += md_table(rows, [("scenario", "scenario"), ("glibc", "glibc"), ("arm", "arm"), ("env", "env"),
                          ("steps_per_s", "steps/s"), ("ratio", "x SB3"), ("round_ratios", "rounds x SB3"),
                          ("sample_wait_ms", "sample() wait ms (median)"),
                          ("buffer_ms_per_step", "in add() + sample() ms/step (median)"),
                          ("buffer_share", "share of a step"), ("params_equal_sb3", "params = SB3")])
    return md


def resummarize(path: str) -> None:
    """Rebuild a saved run's rows and tables from the per-round results it keeps (``--resummarize``)."""
    out = Path(path)
    data = json.loads(out.read_text())
    cfg = data["config"]
    rows = []
    for key, runs in data["runs"].items():
        glibc, scenario = key.split("/", 1)
        rows += _summary(scenario, glibc, runs)
    data["rows"] = rows
    md = _markdown(rows, cfg["rounds"], cfg["steps"], cfg["learning_starts"], cfg["prefetch"], cfg["step_ms"])
    out.write_text(json.dumps(data, indent=1))
    out.with_suffix(".md").write_text(md.rstrip() + "\n")
    print(md)


if __name__ == "__main__":
    sys.exit(main())
