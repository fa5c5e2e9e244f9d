"""Ape-X DQN on real Pong: env runners in other processes feed a compressed, prioritized replay service.

    .venv/bin/python examples/apex_dqn_pong.py                 # about 2-3 minutes on 2 cores
    .venv/bin/python examples/apex_dqn_pong.py --runners 4 --steps 40000

What runs (a local Ray instance on the loopback interface):

* a prioritized replay service (``ReplayService.create(..., alpha=--alpha)``): ``--shards``
  shard actors holding compressed chunks and each transition's priority, a coordinator
  with a sample-to-insert rate limiter (the learner may sample ``--samples-per-insert``
  transitions per inserted one, within an error band, and waits for
  ``--learning-starts`` transitions first);
* ``--runners`` env-runner actors, each with its own Pong env, a copy of the policy
  (weights pulled from a small weight-store actor every ``--sync-every`` steps) and
  Ape-X's per-runner exploration (epsilon_i = 0.4 ** (1 + 7 i / (N - 1))). Each runner
  deduplicates frames and compresses chunks itself (``ReplayWriter``) and ships sealed
  chunks to its shard, with each transition's initial priority: the ``|TD error|`` its
  own policy copy gives (Ape-X's actor-side priorities: one more forward pass per step);
* a ``PrioritizedDQN`` learner in this process, with ``PrioritizedDistributedReplayBuffer``
  as its ``replay_buffer_class``: every gradient step samples a batch over all shards in
  proportion to the priorities, weights its loss by the importance weights and sends
  ``|TD error|`` back to the shards (asynchronously). The target network is copied every
  ``--target-every`` updates, and the weights are published every ``--publish-every``
  updates.

At the end it prints what went through the service (transitions, bytes on the wire and
stored per transition against SB3's raw bytes, samples drawn, the runners' episode
returns) and shuts everything down. Short runs do not learn to win Pong; they show the
machinery at work.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np


def make_env(seed: int) -> Any:
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack, VecTransposeImage

    gym.register_envs(ale_py)  # the Atari ids (ROMs ship in the ale-py wheel)
    # channel-first stacks, as SB3's CnnPolicy sees them (it would wrap the env the same way)
    return VecTransposeImage(VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=1, seed=seed), 4))


def make_model(env: Any, args: argparse.Namespace, **kw: Any) -> Any:
    from sb3_integration import PrioritizedDQN

    return PrioritizedDQN("CnnPolicy", env, learning_rate=args.lr, batch_size=args.batch_size, gamma=0.99,
               policy_kwargs={"normalize_images": True}, device="cpu", seed=0, verbose=0, **kw)


class Weights:
    """The latest policy weights, for runners to pull (a Ray actor)."""

    def __init__(self) -> None:
        self.version, self.state = 0, None

    def set(self, version: int, state: dict[str, Any]) -> None:
        self.version, self.state = version, state

    def get(self, have: int) -> tuple[int, Any]:
        return (self.version, self.state) if self.version > have else (have, None)


class EnvRunner:
    """One Ape-X actor: an env, a policy copy, an epsilon, and a writer into the service."""

    def __init__(self, index: int, n_runners: int, service: str, weights: Any, args: argparse.Namespace) -> None:
        import torch as th

        from sb3_integration.distributed import ReplayWriter

        th.set_num_threads(1)
        self.env = make_env(seed=1000 + index)
        self.model = make_model(self.env, args, buffer_size=1)  # only its policy network is used
        self.eps = 0.4 ** (1 + 7 * index / max(1, n_runners - 1))
        self.writer = ReplayWriter(service, flush_every=args.flush_every)
        self.weights, self.version, self.args = weights, 0, args
        self.rng = np.random.default_rng(index)

    def _sync(self) -> None:
        import ray

        version, state = ray.get(self.weights.get.remote(self.version))
        if state is not None:
            self.model.policy.load_state_dict(state)
            self.version = version

    def _q(self, obs: np.ndarray) -> np.ndarray:
        import torch as th

        with th.no_grad():
            return self.model.q_net(self.model.policy.obs_to_tensor(obs)[0]).numpy()[0]

    def run(self, steps: int) -> dict[str, Any]:
        t0, returns, ret = time.perf_counter(), [], 0.0
        obs = self.env.reset()
        q = self._q(obs)
        for t in range(steps):
            if t % self.args.sync_every == 0:
                self._sync()
                q = self._q(obs)
            if self.rng.random() < self.eps:
                action = np.array([self.env.action_space.sample()])
            else:
                action = np.array([int(q.argmax())])  # the greedy action (predict(deterministic=True))
            new_obs, reward, done, infos = self.env.step(action)
            next_obs = new_obs.copy()
            if done[0]:  # SB3's off-policy semantics: the terminal observation, not the reset one
                next_obs[0] = infos[0]["terminal_observation"]
            q_next = self._q(next_obs)
            td = float(reward[0]) + 0.99 * (1.0 - float(done[0])) * float(q_next.max()) - float(q[action[0]])
            self.writer.add(obs, next_obs, action.reshape(1, 1), reward, done, infos, priorities=[abs(td)])
            q = self._q(new_obs) if done[0] else q_next
            obs, ret = new_obs, ret + float(reward[0])
            if done[0]:
                returns.append(ret)
                ret = 0.0
        self.writer.close()
        return {"steps": steps, "seconds": time.perf_counter() - t0, "returns": returns, "eps": self.eps,
                "wire_bytes": self.writer.wire_bytes, "weights_version": self.version}


def train(model: Any, runs: list[Any], weights: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Gradient steps until every runner is done; the rate limiter paces them against the data."""
    import ray
    from stable_baselines3.common.utils import polyak_update

    from sb3_integration.distributed import RateLimiterTimeout

    updates, t0, pending = 0, time.perf_counter(), list(runs)
    while pending:
        _, pending = ray.wait(pending, timeout=0)
        try:  # samples through the service: the rate limiter holds it until min_size, then paces it
            model.train(gradient_steps=1, batch_size=args.batch_size)
        except RateLimiterTimeout:  # no permit within the buffer's timeout: are the runners done?
            continue
        updates += 1
        if updates % args.target_every == 0:
            polyak_update(model.q_net.parameters(), model.q_net_target.parameters(), 1.0)
        if updates % args.publish_every == 0:
            weights.set.remote(updates, {k: v.clone() for k, v in model.policy.state_dict().items()})
        if updates >= args.max_updates:
            break
    buf = model.replay_buffer
    buf.flush_priorities(timeout=30)
    return {"updates": updates, "seconds": time.perf_counter() - t0, "applied": buf.updates.applied,
            "dropped": buf.updates.dropped}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runners", type=int, default=2)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--steps", type=int, default=12_000, help="env steps in all (split over the runners)")
    p.add_argument("--capacity", type=int, default=100_000)
    p.add_argument("--learning-starts", type=int, default=2_000)
    p.add_argument("--samples-per-insert", type=float, default=4.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--target-every", type=int, default=250)
    p.add_argument("--publish-every", type=int, default=50)
    p.add_argument("--sync-every", type=int, default=200)
    p.add_argument("--flush-every", type=int, default=64)
    p.add_argument("--max-updates", type=int, default=10**9)
    p.add_argument("--alpha", type=float, default=0.6, help="prioritization exponent (0: uniform)")
    p.add_argument("--beta", type=float, default=0.4, help="initial importance-sampling exponent")
    args = p.parse_args()

    import ray
    import torch as th
    from stable_baselines3.common.logger import configure

    from sb3_integration.distributed import (
        PrioritizedDistributedReplayBuffer,
        ReplayService,
        start_local_ray,
    )

    th.set_num_threads(1)
    start_local_ray(num_cpus=args.runners + 1)
    env = make_env(seed=0)
    # the band holds a whole writer message of inserts and a batch of samples, with slack
    error = max(2 * args.flush_every * args.samples_per_insert, 4 * args.batch_size) * 4
    service = ReplayService.create(
        "apex", env.observation_space, env.action_space, capacity=args.capacity, n_shards=args.shards,
        min_size=args.learning_starts, samples_per_insert=args.samples_per_insert, error_buffer=error,
        max_insert_batch=args.flush_every, max_sample_batch=args.batch_size, alpha=args.alpha)
    try:
        model = make_model(env, args, buffer_size=args.capacity,
                           replay_buffer_class=PrioritizedDistributedReplayBuffer,
                           replay_buffer_kwargs={"service": "apex", "prefetch": True, "timeout": 5,
                                                 "beta": args.beta})
        model.set_logger(configure(None, [""]))
        weights = ray.remote(num_cpus=0)(Weights).remote()
        weights.set.remote(0, model.policy.state_dict())
        runner = ray.remote(num_cpus=1)(EnvRunner)
        runners = [runner.remote(i, args.runners, "apex", weights, args) for i in range(args.runners)]
        print(f"{args.runners} env runners, {args.shards} shards, DQN learner here; "
              f"{args.steps:,} env steps, learning from {args.learning_starts:,}")
        runs = [r.run.remote(args.steps // args.runners) for r in runners]
        learned = train(model, runs, weights, args)
        stats = ray.get(runs)
        report(service, model, learned, stats, env)
    finally:
        service.close()
        ray.shutdown()


def report(service: Any, model: Any, learned: dict[str, Any], stats: list[dict[str, Any]], env: Any) -> None:
    info = service.info()
    stored = sum(i["nbytes_stored"] for i in info)
    inserted = sum(i["inserted"] for i in info)
    wire = sum(s["wire_bytes"] for s in stats)
    raw = 2 * int(np.prod(env.observation_space.shape))
    steps = sum(s["steps"] for s in stats)
    returns = [r for s in stats for r in s["returns"]]
    lim = service.limiter_state()
    print(f"transitions inserted: {inserted:,} of {steps:,} env steps; in the shards: {[i['size'] for i in info]}")
    chunks = sum(i["chunk_bytes"] for i in info)
    print(f"bytes per transition: raw (SB3 obs + next_obs) {raw:,}, on the wire {wire / max(inserted, 1):,.0f}, "
          f"compressed frames stored {chunks / max(inserted, 1):,.0f} (the shards allocate "
          f"{stored / 1e6:,.1f} MB in all for a capacity of {service.config.spec.capacity:,})")
    print(f"learner: {learned['updates']:,} updates in {learned['seconds']:.0f} s; samples drawn "
          f"{int(lim['samples']):,} (samples per insert {lim['samples'] / max(lim['inserts'], 1):.2f}, "
          f"target {lim['samples_per_insert']})")
    for s in stats:
        print(f"runner eps={s['eps']:.3f}: {s['steps']:,} steps in {s['seconds']:.0f} s, "
              f"{len(s['returns'])} episodes, weights version {s['weights_version']}")
    mean = f"{np.mean(returns):.1f}" if returns else "n/a"
    print(f"episodes finished: {len(returns)}, mean return {mean}")
    mass = [i["weight"] for i in info]
    print(f"priority mass per shard: {[round(m, 1) for m in mass]} (sizes {[i['size'] for i in info]}); "
          f"priority updates applied {learned['applied']:,}, dropped as stale {learned['dropped']:,}")
    print(f"every transition stored: {inserted == steps}")


if __name__ == "__main__":
    main()
