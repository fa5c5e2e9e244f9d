"""Benchmark the replay service on Ray (``sb3_integration.distributed``) on real MsPacman stacks.

Usage::

    .venv/bin/python tools/bench_distributed.py --out results/bench_distributed.json

Everything runs on a local Ray instance on the loopback interface of this machine.
What is measured (real MsPacman (4, 84, 84) uint8 stacks from ``tools/atari_data.py``,
a zstd dictionary trained once on the first transitions and given to every service,
so that every arm runs in the steady state):

* **ingest**: one shard, 1, 2 and 4 writer processes (Ray actors). "pre-compressed":
  each writer first builds all its messages (frame dedup + chunk compression), then
  the clock runs while they send them (rate-limiter permit + one insert call in flight
  per writer); this is the shard's ingest rate. "add()": the clock also covers the
  writers' ``add()`` calls, that is dedup and compression on the writers' cores.
* **bytes**: on the wire per transition (each message pickled as Ray does, protocol
  5), stored on the shard per transition (``ShardStore.nbytes_stored``), raw (SB3's
  obs + next_obs).
* **sampling**: sample(32) and sample(256) through ``DistributedReplayBuffer`` (the
  SB3 class, tensors out) with decoding on the learner and on the shard, and with
  prefetch (called back to back, and after 10 ms of compute standing in for a
  gradient step, timing the sample call alone), against a local
  ``CompressedReplayBuffer`` filled with the same transitions, interleaved in blocks;
  ratios are medians of per-block ratios.
* **TorchRL**: the same transitions through ``torchrl.data.RayReplayBuffer`` (one Ray
  actor, uncompressed ``LazyTensorStorage``): extend in batches of 256 (bytes of each
  pickled TensorDict), sample(256).
* **checkpoint**: the filled shard's checkpoint, the pause writers see and the total.
* **outside client**: ``sample(256)`` as SB3's ``DQN.train`` calls it, each arm in a
  process of its own (``tools/_service_client.py``: a local ``CompressedReplayBuffer``,
  or a ``DistributedReplayBuffer`` connected to the filled service from another Ray
  driver), the arms run one after the other, alternating, ``--client-rounds`` times;
  the ratio is service / local of the per-process medians.
* **wire by envs**: one writer with 1, 2 and 8 envs (MsPacman collected with that many
  envs; ChunkWriter and ShardStore without Ray): pickled message bytes and stored bytes
  per transition, with the MsPacman dictionary; and one MsPacman writer under a
  dictionary trained on Pong (a service shared by games), with and without the writer's
  plain-zstd fallback.

Timings on this shared 2-core machine vary between runs; compare ratios within a run.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import itertools

from _bench_common import ensure_importable, md_table, progress, save_results

ensure_importable()

SERVICE = "bench"


def transitions(steps: int, game: str = "MsPacman") -> dict[str, np.ndarray]:
    from atari_data import collect_stacked

    tr = collect_stacked(game, steps)
    timeouts = np.array([[info.get("TimeLimit.truncated", False) for info in row] for row in tr.infos], np.float32)
    return {"obs": tr.obs, "next_obs": tr.next_obs, "actions": tr.actions, "rewards": tr.rewards,
            "dones": tr.dones, "timeouts": timeouts}


def infos(timeouts: np.ndarray) -> list[dict[str, bool]]:
    return [{"TimeLimit.truncated": bool(t)} for t in timeouts]


def trained_codec(data: dict[str, np.ndarray], n: int = 2000) -> Any:
    """The dictionary a first writer trains (done once here, offered to every service)."""
    from chunkstore import get_codec
    from chunkstore.array import DEFAULT_CODEC
    from sb3_integration.distributed import ChunkWriter

    w = ChunkWriter(0, data["obs"].shape[2:], np.uint8, (1,), np.int64, codec=get_codec(DEFAULT_CODEC),
                    flush_every=256)
    for i in range(n):
        w.add(data["obs"][i], data["next_obs"][i], data["actions"][i], data["rewards"][i], data["dones"][i],
              infos(data["timeouts"][i]))
        if w.ready:
            w.drain()
    w.drain()
    codec = w.train()
    assert codec is not None, "not enough frames to train a dictionary"
    return codec


def make_service(space: tuple[Any, Any], capacity: int, codec: Any, **kw: Any) -> Any:
    from sb3_integration.distributed import ReplayService

    svc = ReplayService.create(SERVICE, *space, capacity=capacity, n_shards=1, **kw)
    svc.offer_codec(codec)
    return svc


class BenchWriter:
    """A writer process (Ray actor) with its slice of the transitions."""

    def __init__(self, name: str, data: dict[str, np.ndarray], lo: int, hi: int) -> None:
        from sb3_integration.distributed import ReplayWriter

        self.w = ReplayWriter(name, flush_every=256)
        self.data, self.lo, self.hi = data, lo, hi
        self.msgs: list[Any] = []

    def _add(self, i: int, into_chunks: bool) -> None:
        d = self.data
        add = self.w.chunks.add if into_chunks else self.w.add
        add(d["obs"][i], d["next_obs"][i], d["actions"][i], d["rewards"][i], d["dones"][i],
            infos(d["timeouts"][i]))

    def prepare(self) -> int:
        """Build every message now (dedup + compression), send nothing."""
        for i in range(self.lo, self.hi):
            self._add(i, True)
            if self.w.chunks.ready:
                self.msgs.append(self.w.chunks.drain())
        last = self.w.chunks.drain()
        if last is not None:
            self.msgs.append(last)
        return sum(len(pickle.dumps(m, protocol=5)) for m in self.msgs)

    def send_all(self) -> float:
        t0 = time.perf_counter()
        for m in self.msgs:
            self.w.send(m)
        self.w.flush(wait=True)
        return time.perf_counter() - t0

    def add_all(self) -> tuple[float, int]:
        t0 = time.perf_counter()
        for i in range(self.lo, self.hi):
            self._add(i, False)
        self.w.flush(wait=True)
        return time.perf_counter() - t0, self.w.wire_bytes


def ingest(data: dict[str, np.ndarray], space: tuple[Any, Any], codec: Any, writers: int, n: int,
           mode: str) -> dict[str, Any]:
    import ray

    svc = make_service(space, n, codec)
    try:
        remote = ray.remote(num_cpus=0)(BenchWriter)
        ref = ray.put(data)
        bounds = np.linspace(0, n, writers + 1).astype(int)
        ws = [remote.remote(SERVICE, ref, int(a), int(b)) for a, b in itertools.pairwise(bounds)]
        if mode == "pre-compressed":
            wire = sum(ray.get([w.prepare.remote() for w in ws]))
            t0 = time.perf_counter()
            ray.get([w.send_all.remote() for w in ws])
        else:
            ray.get([w.__ray_ready__.remote() for w in ws])
            t0 = time.perf_counter()
            res = ray.get([w.add_all.remote() for w in ws])
            wire = sum(b for _, b in res)
        wall = time.perf_counter() - t0
        info = svc.info()[0]
        assert info["size"] == n, info
        for w in ws:
            ray.kill(w)
        return {"writers": writers, "mode": mode, "transitions": n, "seconds": wall, "inserts_per_s": n / wall,
                "wire_bytes_per_transition": wire / n, "stored_bytes_per_transition": info["nbytes_stored"] / n}
    finally:
        svc.close()


def fill_local(data: dict[str, np.ndarray], space: tuple[Any, Any], n: int) -> Any:
    from sb3_integration import CompressedReplayBuffer

    buf = CompressedReplayBuffer(n, *space, device="cpu")
    for i in range(n):
        buf.add(data["obs"][i], data["next_obs"][i], data["actions"][i], data["rewards"][i], data["dones"][i],
                infos(data["timeouts"][i]))
    return buf


def interleaved(arms: dict[str, Any], blocks: int, per_block: int, base: str) -> dict[str, dict[str, float]]:
    """Median ms per call of each arm, and the median of per-block ratios to ``base``.

    An arm that returns a number reports its own seconds (the part of the call to time).
    """
    for fn in arms.values():
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {k: [] for k in arms}
    for _ in progress(range(blocks), desc="sampling blocks"):
        for k, fn in arms.items():
            t0, own = time.perf_counter(), 0.0
            for _ in range(per_block):
                r = fn()
                own += r if isinstance(r, float) else 0.0
            times[k].append((own or time.perf_counter() - t0) / per_block)
    b = np.array(times[base])
    return {k: {"ms": 1e3 * float(np.median(t)), "ratio": float(np.median(np.array(t) / b))}
            for k, t in times.items()}


def learner_work(seconds: float = 0.01) -> None:
    """About ``seconds`` of compute on one core (torch, GIL released), standing in for a gradient
    step of a learner that leaves the other core to the service (as the Ape-X example does)."""
    import torch

    torch.set_num_threads(1)
    a = torch.ones(128, 128)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a = (a @ a) * 1e-3


def sample_after_work(buf: Any, batch: int) -> float:
    """Seconds of ``buf.sample(batch)`` alone, called after some learner compute."""
    learner_work()
    t0 = time.perf_counter()
    buf.sample(batch)
    return time.perf_counter() - t0


def torchrl_arm(data: dict[str, np.ndarray], n: int) -> tuple[dict[str, Any], Any]:
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, RayReplayBuffer

    rb = RayReplayBuffer(storage=lambda: LazyTensorStorage(n), batch_size=256,
                         remote_config={"num_cpus": 0})
    wire, t0 = 0, time.perf_counter()
    for a in range(0, n, 256):
        b = min(n, a + 256)
        td = TensorDict({
            "observation": torch.from_numpy(data["obs"][a:b, 0]),
            "next_observation": torch.from_numpy(data["next_obs"][a:b, 0]),
            "action": torch.from_numpy(data["actions"][a:b]),
            "reward": torch.from_numpy(data["rewards"][a:b]), "done": torch.from_numpy(data["dones"][a:b]),
        }, batch_size=[b - a])
        wire += len(pickle.dumps(td, protocol=5))
        rb.extend(td)
    wall = time.perf_counter() - t0
    return {"inserts_per_s": n / wall, "wire_bytes_per_transition": wire / n}, rb


def checkpoint_arm(data: dict[str, np.ndarray], space: tuple[Any, Any], codec: Any, n: int) -> dict[str, Any]:
    from sb3_integration.distributed import ReplayWriter

    with tempfile.TemporaryDirectory() as tmp:
        svc = make_service(space, n, codec, checkpoint_dir=tmp)
        try:
            with ReplayWriter(svc) as w:
                for i in range(n):
                    w.add(data["obs"][i], data["next_obs"][i], data["actions"][i], data["rewards"][i],
                          data["dones"][i], infos(data["timeouts"][i]))
            ck = svc.checkpoint()[0]
            return {"transitions": n, "pause_ms": 1e3 * ck["pause_s"], "total_s": ck["total_s"],
                    "file_bytes_per_transition": ck["bytes"] / n}
        finally:
            svc.close()


def wire_by_envs(codec: Any, steps: int) -> list[dict[str, Any]]:
    """Wire and stored bytes per transition of one writer with 1, 2, 8 envs (no Ray)."""
    from atari_data import collect_stacked

    from chunkstore import get_codec
    from sb3_integration.distributed import ChunkWriter, ShardStore, StoreSpec

    def one(n_envs: int, dictionary: Any, label: str, fallback: bool = True) -> dict[str, Any]:
        tr = collect_stacked("MsPacman", steps // n_envs, n_envs=n_envs)
        n = tr.obs.shape[0] * n_envs
        w = ChunkWriter(1, tr.obs.shape[2:], np.uint8, (1,), np.int64, n_envs, codec=dictionary, codec_version=1)
        if not fallback:
            w._plain = None  # always the service's codec (the writers before the fallback)
        store = ShardStore(StoreSpec(n, tr.obs.shape[2:], np.uint8, (1,), np.int64), dictionary, 1)
        wire = 0
        for t in range(tr.obs.shape[0]):
            w.add(tr.obs[t], tr.next_obs[t], tr.actions[t], tr.rewards[t], tr.dones[t],
                  [{"TimeLimit.truncated": False}] * n_envs)
            if w.ready or t == tr.obs.shape[0] - 1:
                msg = w.drain()
                wire += len(pickle.dumps(msg, protocol=5))
                store.insert(msg)
        return {"envs": n_envs, "dictionary": label, "transitions": n, "wire_bytes_per_transition": wire / n,
                "stored_bytes_per_transition": store.nbytes_stored / n,
                "wire_vs_stored": wire / store.nbytes_stored, "plain_fallback": w.use_plain}

    rows = [one(e, codec, "MsPacman's") for e in (1, 2, 8)]
    pong = trained_codec(transitions(4000, "Pong"))
    rows.append(one(1, pong, "Pong's, fallback off", fallback=False))
    rows.append(one(1, pong, "Pong's, fallback on"))
    rows.append(one(1, get_codec("zstd3"), "none (plain zstd3)"))
    return rows


def client_arms(address: str, args: argparse.Namespace) -> dict[str, Any]:
    """sample(256) as DQN calls it, local and service, each in its own process, alternating."""
    from _bench_common import run_fresh

    script = Path(__file__).resolve().parent / "_service_client.py"
    got: dict[str, list[float]] = {"local": [], "service": []}
    for _ in range(args.client_rounds):
        for arm in ("local", "service"):
            res = run_fresh(script, {"arm": arm, "steps": args.steps, "batch": 256, "address": address},
                            timeout=900)
            if "error" in res:
                raise RuntimeError(f"client arm {arm}: {res['error']}")
            got[arm].append(res["ms"])
            print(f"outside client, {arm}: {res['ms']:.2f} ms per sample(256)", file=sys.stderr)
    local, service = float(np.median(got["local"])), float(np.median(got["service"]))
    return {"local_ms": local, "service_ms": service, "ratio": service / local, "runs": got}


def run(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    import ray
    from gymnasium import spaces

    from sb3_integration.distributed import DistributedReplayBuffer, start_local_ray

    data = transitions(args.steps)
    n = len(data["obs"])
    space = (spaces.Box(0, 255, data["obs"].shape[2:], np.uint8), spaces.Discrete(9))
    codec = trained_codec(data)
    start_local_ray(num_cpus=4)
    try:
        rows = []
        for mode in ("pre-compressed", "add()"):
            for w in args.writers:
                rows.append(ingest(data, space, codec, w, n, mode))
                print(f"ingest {mode} {w} writers: {rows[-1]['inserts_per_s']:.0f}/s", file=sys.stderr)
        svc = make_service(space, n, codec)
        from sb3_integration.distributed import ReplayWriter

        with ReplayWriter(svc) as w:
            for i in range(n):
                w.add(data["obs"][i], data["next_obs"][i], data["actions"][i], data["rewards"][i],
                      data["dones"][i], infos(data["timeouts"][i]))
        client = None if args.skip_client else client_arms(ray.get_runtime_context().gcs_address, args)
        local = fill_local(data, space, n)
        learner = DistributedReplayBuffer(n, *space, device="cpu", service=svc, decode="learner")
        shard = DistributedReplayBuffer(n, *space, device="cpu", service=svc, decode="shard")
        ahead = DistributedReplayBuffer(n, *space, device="cpu", service=svc, decode="learner", prefetch=True)
        tl, rb = (None, None) if args.skip_torchrl else torchrl_arm(data, n)
        sampling = {}
        for batch in (32, 256):
            arms = {"local": lambda b=batch: local.sample(b),
                    "service, learner decodes": lambda b=batch: learner.sample(b),
                    "service, shard decodes": lambda b=batch: shard.sample(b),
                    "service, learner decodes, prefetch": lambda b=batch: ahead.sample(b),
                    "service, prefetch, 10 ms of compute between samples": lambda b=batch: sample_after_work(ahead, b)}
            if rb is not None:
                arms["TorchRL RayReplayBuffer"] = lambda b=batch: rb.sample(b)
            sampling[batch] = interleaved(arms, args.blocks, args.per_block, "local")
        received = {}
        for name, buf in (("learner", learner), ("shard", shard)):
            before = buf.sampler.bytes_received
            for _ in range(10):
                buf.sample(256)
            received[name] = (buf.sampler.bytes_received - before) / 10
        stored = svc.info()[0]["nbytes_stored"] / n
        svc.close()
        if rb is not None:
            rb.shutdown()
        ckpt = checkpoint_arm(data, space, codec, n)
    finally:
        ray.shutdown()
    by_envs = wire_by_envs(codec, args.steps)
    return summarize(rows, sampling, received, stored, tl, ckpt, data, n, args, client, by_envs)


def summarize(rows: list[dict[str, Any]], sampling: dict[int, Any], received: dict[str, float], stored: float,
              tl: dict[str, Any] | None, ckpt: dict[str, Any], data: dict[str, np.ndarray], n: int,
              args: argparse.Namespace, client: dict[str, Any] | None = None,
              by_envs: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], str]:
    raw = 2 * int(np.prod(data["obs"].shape[2:]))
    pre = [r for r in rows if r["mode"] == "pre-compressed"]
    wire = float(np.median([r["wire_bytes_per_transition"] for r in pre]))
    samp = [{"batch": b, "arm": k, "ms": v["ms"], "ratio": v["ratio"], "samples_per_s": b / v["ms"] * 1e3}
            for b, arms in sampling.items() for k, v in arms.items()]
    payload: dict[str, Any] = {
        "game": "MsPacman", "transitions": n, "raw_bytes_per_transition": raw,
        "wire_bytes_per_transition": wire, "stored_bytes_per_transition": stored,
        "wire_vs_stored": wire / stored, "raw_vs_wire": raw / wire,
        "inserts_per_s": max(r["inserts_per_s"] for r in pre),
        "inserts_per_s_by_writers": {str(r["writers"]): r["inserts_per_s"] for r in pre},
        "sample256_vs_local": sampling[256]["service, learner decodes"]["ratio"],
        "sample256_shard_decode_vs_local": sampling[256]["service, shard decodes"]["ratio"],
        "sample32_vs_local": sampling[32]["service, learner decodes"]["ratio"],
        "sample256_prefetch_vs_local": sampling[256]["service, learner decodes, prefetch"]["ratio"],
        "sample256_prefetch_with_compute_vs_local":
            sampling[256]["service, prefetch, 10 ms of compute between samples"]["ratio"],
        "bytes_received_per_sample256": received, "ingest": rows, "sampling": samp, "checkpoint": ckpt,
        "outside_client": client, "sample256_outside_client_vs_local": None if client is None else client["ratio"],
        "wire_by_envs": by_envs,
        "torchrl": tl, "args": vars(args),
    }
    if tl is not None:
        payload["torchrl_wire_bytes_per_transition"] = tl["wire_bytes_per_transition"]
        payload["traffic_vs_torchrl"] = tl["wire_bytes_per_transition"] / wire
        payload["sample256_torchrl_vs_local"] = sampling[256]["TorchRL RayReplayBuffer"]["ratio"]
    md = render(payload)
    return payload, md


def render(p: dict[str, Any]) -> str:
    lines = [f"## Replay service on Ray: real MsPacman, {p['transitions']:,} transitions, one shard\n",
             "Bytes per transition (observations and everything else a transition carries):\n",
             md_table([{"what": "raw (SB3 obs + next_obs)", "bytes": p["raw_bytes_per_transition"]},
                       {"what": "on the wire, writer -> shard (pickled messages)",
                        "bytes": p["wire_bytes_per_transition"]},
                       {"what": "stored on the shard", "bytes": p["stored_bytes_per_transition"]},
                       {"what": "TorchRL RayReplayBuffer on the wire (pickled TensorDicts)",
                        "bytes": p.get("torchrl_wire_bytes_per_transition")}], ["what", "bytes"]),
             "\nIngest into one shard:\n",
             md_table(p["ingest"], ["mode", "writers", ("inserts_per_s", "transitions/s"),
                                    ("wire_bytes_per_transition", "wire B/transition"),
                                    ("stored_bytes_per_transition", "stored B/transition")]),
             "\nSampling (medians of interleaved blocks; ratio to the local buffer in the same blocks):\n",
             md_table(p["sampling"], ["batch", "arm", "ms", ("ratio", "/ local"), ("samples_per_s", "samples/s")]),
             f"\nBytes a learner receives per sample(256): learner decodes "
             f"{p['bytes_received_per_sample256']['learner']:,.0f}, shard decodes "
             f"{p['bytes_received_per_sample256']['shard']:,.0f}.\n",
             f"Checkpoint of the filled shard: writers paused {p['checkpoint']['pause_ms']:.1f} ms, "
             f"file written in {p['checkpoint']['total_s']:.2f} s, "
             f"{p['checkpoint']['file_bytes_per_transition']:.0f} B/transition.\n"]
    if p.get("outside_client") is not None:
        c = p["outside_client"]
        lines.append(f"Outside client (SB3's DQN calling sample(256), each arm in its own process, "
                     f"{len(c['runs']['local'])} alternating runs each): service {c['service_ms']:.2f} ms, "
                     f"local {c['local_ms']:.2f} ms, ratio {c['ratio']:.2f}.\n")
    if p.get("wire_by_envs"):
        lines += ["Wire and stored bytes per transition by envs per writer (no Ray):\n",
                  md_table(p["wire_by_envs"], ["envs", "dictionary", ("wire_bytes_per_transition", "wire B"),
                                               ("stored_bytes_per_transition", "stored B"),
                                               ("wire_vs_stored", "wire / stored"), "plain_fallback"]), ""]
    if p.get("torchrl") is not None:
        lines.append(f"TorchRL RayReplayBuffer: {p['torchrl']['inserts_per_s']:,.0f} inserts/s (extend of 256); "
                     f"{p['traffic_vs_torchrl']:.0f}x the traffic of the service.\n")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20_000, help="MsPacman transitions")
    p.add_argument("--writers", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--blocks", type=int, default=10)
    p.add_argument("--per-block", type=int, default=10)
    p.add_argument("--skip-torchrl", action="store_true")
    p.add_argument("--skip-client", action="store_true", help="skip the outside-client processes")
    p.add_argument("--client-rounds", type=int, default=2)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    payload, md = run(args)
    print(md)
    save_results(args.out, payload, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
