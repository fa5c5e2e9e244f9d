"""A short PER-DQN run on real Pong against uniform DQN: cost and mechanics (issue 25, item 6).

Two arms, each in a fresh process of its own (``run_fresh``), the same seed, env and network:

* ``uniform``: SB3's ``DQN`` with this project's ``CompressedReplayBuffer``;
* ``prioritized``: :class:`sb3_integration.PrioritizedDQN` with
  ``CompressedPrioritizedReplayBuffer`` (``alpha``, ``beta`` as given; ``beta`` annealed to 1.0
  over the run), the same compression options.

Env: SB3's ``make_atari_env`` (AtariWrapper: 84x84 grayscale, frame skip 4) +
``VecFrameStack(4)``, one env. Policy: ``CnnPolicy`` (Nature CNN) by default. Every
``--log-every`` env steps each arm logs the mean training loss since the last point, and the
prioritized arm also the mean stored priority ``p_i`` and the smallest / largest importance
weight of the batches since the last point; both log the wall time and the process's CPU
time (every thread), so the steps/s of the training phase (after ``learning_starts``) are
measured per wall second and per CPU second. The arms run ``--rounds`` times, taking turns
(uniform, prioritized; then prioritized, uniform; ...), and each rate is the best over the
rounds: other processes on a shared machine only ever slow an arm down, and on a loaded machine
the CPU-time rate is the steadier one. The ratio of the arms is the number to read, not the
absolute rates.

The run is far too short to say anything about learning (Pong takes millions of steps): it
shows what prioritized replay costs per step and that its mechanics (priorities fed back,
weights, beta annealed) run on real frames.

Examples
--------
    .venv/bin/python tools/bench_per_dqn.py --out results/bench_per_dqn.json   # JSON, .md and .png
    .venv/bin/python tools/bench_per_dqn.py --steps 3000 --learning-starts 1000   # quicker
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, md_table, run_fresh, save_results, try_import

ensure_importable()

ARMS = ("uniform", "prioritized")
RATES = ("steps_per_s", "train_steps_per_s", "train_steps_per_cpu_s")


def _arm(cfg: dict[str, Any]) -> dict[str, Any]:
    import torch as th
    from atari_data import make_env_id
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    from sb3_integration import (
        CompressedPrioritizedReplayBuffer,
        CompressedReplayBuffer,
        PrioritizedDQN,
    )

    th.set_num_threads(cfg["threads"])
    env_id, env_kwargs = make_env_id(cfg["game"])
    env = VecFrameStack(make_atari_env(env_id, n_envs=1, seed=cfg["seed"], env_kwargs=env_kwargs), 4)
    store = {"compression_method": cfg["compression"]}
    weights_seen: list[np.ndarray] = []

    class Watched(CompressedPrioritizedReplayBuffer):
        def sample(self, batch_size: int, env: Any = None) -> Any:
            s = super().sample(batch_size, env)
            weights_seen.append(s.weights.detach().cpu().numpy())
            return s

    common = dict(buffer_size=cfg["buffer_size"], learning_starts=cfg["learning_starts"], batch_size=32,
                  train_freq=4, gradient_steps=1, target_update_interval=1000, learning_rate=1e-4,
                  exploration_fraction=0.1, exploration_final_eps=0.01, seed=cfg["seed"], device="cpu", verbose=0)
    if cfg["arm"] == "uniform":
        model: Any = DQN(cfg["policy"], env, replay_buffer_class=CompressedReplayBuffer,
                         replay_buffer_kwargs=store, **common)
    else:
        model = PrioritizedDQN(cfg["policy"], env, replay_buffer_class=Watched,
                               replay_buffer_kwargs={**store, "alpha": cfg["alpha"], "beta": cfg["beta"]}, **common)
    points: list[dict[str, Any]] = []

    class Log(BaseCallback):
        def _on_training_start(self) -> None:
            self.t0 = time.perf_counter()
            self.c0 = time.process_time()
            self.losses: list[float] = []
            self.last_updates = 0

        def _on_step(self) -> bool:
            m = self.model
            if m._n_updates != self.last_updates:  # a train() ran since the last step: its mean loss
                self.last_updates = m._n_updates
                self.losses.append(float(m.logger.name_to_value["train/loss"]))
            if self.num_timesteps % cfg["log_every"] == 0:
                point: dict[str, Any] = {"step": self.num_timesteps, "wall_s": time.perf_counter() - self.t0,
                                         "cpu_s": time.process_time() - self.c0,
                                         "n_updates": m._n_updates,
                                         "loss": float(np.mean(self.losses)) if self.losses else None}
                self.losses = []
                buf = m.replay_buffer
                if hasattr(buf, "update_priorities"):
                    n = buf.size() * buf.n_envs
                    point["mean_priority"] = float(buf.priorities()[:n].mean())
                    point["beta"] = float(buf.beta)
                    if weights_seen:
                        w = np.concatenate(weights_seen)
                        point["weight_min"], point["weight_max"] = float(w.min()), float(w.max())
                        weights_seen.clear()
                points.append(point)
            return True

    t0 = time.perf_counter()
    model.learn(cfg["steps"], callback=Log(), log_interval=10**9)
    total_s = time.perf_counter() - t0
    start = next((p for p in points if p["step"] >= cfg["learning_starts"]), None)
    end = points[-1]
    rates: dict[str, float | None] = {"train_steps_per_s": None, "train_steps_per_cpu_s": None}
    if start is not None and end["step"] > start["step"]:
        rates["train_steps_per_s"] = (end["step"] - start["step"]) / (end["wall_s"] - start["wall_s"])
        rates["train_steps_per_cpu_s"] = (end["step"] - start["step"]) / (end["cpu_s"] - start["cpu_s"])
    env.close()
    return {"arm": cfg["arm"], "steps": cfg["steps"], "total_s": total_s, "steps_per_s": cfg["steps"] / total_s,
            **rates, "n_updates": model._n_updates, "points": points}


def plot(results: dict[str, dict[str, Any]], path: Path, title: str) -> str | None:
    mpl, err = try_import("matplotlib")
    if mpl is None:
        return f"matplotlib not installed ({err}): no plot"
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for arm, res in results.items():
        pts = [p for p in res.get("points", []) if p["loss"] is not None]
        axes[0].plot([p["step"] for p in pts], [p["loss"] for p in pts], label=f"{arm} DQN")
    axes[0].set_title("training loss (mean over each interval)")
    axes[0].set_ylabel("Huber loss (prioritized: weighted)")
    pri = [p for p in results.get("prioritized", {}).get("points", []) if "weight_min" in p]
    if pri:
        steps = [p["step"] for p in pri]
        axes[1].plot(steps, [p["mean_priority"] for p in pri], color="tab:orange")
        axes[1].set_title("prioritized: mean stored priority p_i")
        axes[2].plot(steps, [p["weight_min"] for p in pri], label="smallest weight in interval", color="tab:orange")
        axes[2].plot(steps, [p["weight_max"] for p in pri], label="largest weight in interval", color="tab:red")
        axes[2].plot(steps, [p["beta"] for p in pri], label="beta", color="tab:gray", linestyle="--")
        axes[2].set_title("prioritized: importance weights, beta")
        axes[2].legend(fontsize=7)
    axes[0].legend(fontsize=7)
    axes[0].set_yscale("log")
    axes[2].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("env steps")
        ax.grid(True, alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="Pong")
    p.add_argument("--steps", type=int, default=6000, help="env steps per arm")
    p.add_argument("--learning-starts", type=int, default=2000)
    p.add_argument("--buffer-size", type=int, default=20_000)
    p.add_argument("--policy", default="CnnPolicy")
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--beta", type=float, default=0.4)
    p.add_argument("--compression", default="zstd3+dict")
    p.add_argument("--log-every", type=int, default=250)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads per arm")
    p.add_argument("--rounds", type=int, default=2, help="runs of each arm, arms taking turns (best rate kept)")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--out", default=None, help="JSON path (a .md and a .png are written beside it)")
    p.add_argument("--config", default=None, help=argparse.SUPPRESS)  # child mode
    args = p.parse_args(argv)
    if args.config:
        print(json.dumps(_arm(json.loads(args.config))))
        return 0
    cfg = {k: getattr(args, k) for k in ("game", "steps", "learning_starts", "buffer_size", "policy", "alpha",
                                         "beta", "compression", "log_every", "seed", "threads")}
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for r in range(args.rounds):
        for arm in ARMS if r % 2 == 0 else ARMS[::-1]:  # one at a time; which goes first alternates
            res = run_fresh(__file__, {**cfg, "arm": arm}, timeout=args.timeout)
            print(f"{arm}: " + json.dumps({k: v for k, v in res.items() if k != "points"}), file=sys.stderr)
            runs[arm].append(res)
    results = {}
    for arm, rs in runs.items():  # rates: the best round; curves and the rest: the first good round
        good = [r for r in rs if "error" not in r]
        best = dict(good[0]) if good else dict(rs[0])
        for key in RATES:
            values = [r[key] for r in good if r.get(key)]
            best[key] = max(values) if values else None
        best["rounds"] = len(good)
        best["all_rounds"] = [{k: v for k, v in r.items() if k != "points"} for r in rs]
        results[arm] = best
    uni, pri = results["uniform"], results["prioritized"]
    ratios = {}
    for key in RATES:
        if uni.get(key) and pri.get(key):
            ratios[f"prioritized_vs_uniform_{key}"] = pri[key] / uni[key]
    rows = [{"arm": arm, **{k: res.get(k) for k in ("steps", "n_updates", "rounds", *RATES)}}
            for arm, res in results.items()]
    md = md_table(rows, [("arm", "arm"), ("steps", "env steps"), ("n_updates", "gradient steps"),
                         ("rounds", "rounds"), ("steps_per_s", "steps/s (whole run)"),
                         ("train_steps_per_s", "steps/s (training phase)"),
                         ("train_steps_per_cpu_s", "steps per CPU s (training phase)")])
    md += "\n\n" + "\n".join(f"- {k}: {v:.3f}" for k, v in ratios.items())
    print(md)
    if args.out:
        save_results(args.out, {"config": cfg, "ratios": ratios, "results": results}, md)
        title = (f"{args.game}, {args.policy}, {args.steps} env steps (learning starts {args.learning_starts}), "
                 f"seed {args.seed}: a cost/mechanics check, not a learning comparison")
        note = plot(results, Path(args.out).with_suffix(".png"), title)
        if note:
            print(note, file=sys.stderr)
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
