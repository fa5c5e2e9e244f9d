"""Prioritized against uniform sampling through the replay service, in one run, on real MsPacman stacks.

Usage::

    .venv/bin/python tools/bench_distributed_priority.py --out results/bench_distributed_priority.json

Two services on one local Ray instance (loopback), each with ``--shards`` shards holding
the same ``--steps`` transitions (real MsPacman (4, 84, 84) stacks from ``tools/atari_data.py``,
one writer per shard): one uniform, one created with ``alpha=0.6`` (its writers send
initial priorities). Arms, interleaved in blocks in this process (the learner):

* ``uniform``: ``DistributedReplayBuffer.sample(256)`` (the baseline);
* ``prioritized``: ``PrioritizedDistributedReplayBuffer.sample(256)`` (weights, indices);
* ``prioritized + update``: the same and ``update_priorities(256)`` (sent without waiting).

Reported: median ms per call and the median of per-block ratios to ``uniform``; the
updates the shards applied and dropped; each shard's priority mass. Timings on this shared
2-core machine vary between runs; compare the ratios.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, md_table, save_results
from bench_distributed import infos, interleaved, transitions

ensure_importable()


def fill(name: str, space: tuple[Any, Any], data: dict[str, np.ndarray], shards: int, alpha: float | None) -> Any:
    from sb3_integration.distributed import ReplayService, ReplayWriter

    n = len(data["obs"])
    svc = ReplayService.create(name, *space, capacity=n, n_shards=shards, alpha=alpha)
    writers = [ReplayWriter(svc, flush_every=256) for _ in range(shards)]  # one per shard
    rng = np.random.default_rng(0)
    for i in range(n):
        w = writers[i % shards]
        pri = [rng.exponential()] if alpha is not None else None
        w.add(data["obs"][i], data["next_obs"][i], data["actions"][i], data["rewards"][i], data["dones"][i],
              infos(data["timeouts"][i]), priorities=pri)
    for w in writers:
        w.close()
    assert sum(svc.sizes()) == n
    return svc


def run(args: argparse.Namespace) -> dict[str, Any]:
    import ray
    from gymnasium import spaces

    from sb3_integration.distributed import (
        DistributedReplayBuffer,
        PrioritizedDistributedReplayBuffer,
        start_local_ray,
    )

    data = transitions(args.steps)
    space = (spaces.Box(0, 255, data["obs"].shape[2:], np.uint8), spaces.Discrete(9))
    data = {k: v[:, :1] if v.ndim > 1 else v for k, v in data.items()}
    start_local_ray(num_cpus=2)
    try:
        uni = fill("bench_u", space, data, args.shards, None)
        pri = fill("bench_p", space, data, args.shards, 0.6)
        ub = DistributedReplayBuffer(args.steps, *space, device="cpu", service="bench_u")
        pb = PrioritizedDistributedReplayBuffer(args.steps, *space, device="cpu", service="bench_p")
        rng = np.random.default_rng(1)

        def sample_update() -> None:
            s = pb.sample(args.batch)
            pb.update_priorities(s.indices, rng.exponential(size=args.batch))

        res = interleaved({"uniform": lambda: ub.sample(args.batch), "prioritized": lambda: pb.sample(args.batch),
                           "prioritized + update": sample_update}, args.blocks, args.per_block, "uniform")
        pb.flush_priorities(timeout=60)
        shard_info = ray.get([pri.shard(s).info.remote() for s in range(args.shards)])
        rows = [{"arm": k, "ms": v["ms"], "ratio": v["ratio"]} for k, v in res.items()]
        out = {"steps": args.steps, "shards": args.shards, "batch": args.batch, "rows": rows,
               "updates_applied": pb.updates.applied, "updates_dropped": pb.updates.dropped,
               "shard_weights": [i["weight"] for i in shard_info]}
        uni.close()
        pri.close()
        return out
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--blocks", type=int, default=30)
    p.add_argument("--per-block", type=int, default=20)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    out = run(args)
    md = (f"sample({args.batch}) through the service, {args.shards} shards, {args.steps:,} MsPacman transitions\n\n"
          + md_table(out["rows"], [("arm", "arm"), ("ms", "ms per call"), ("ratio", "/ uniform")]))
    print(md)
    save_results(args.out, out, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
