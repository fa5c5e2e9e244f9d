"""Helpers for the replay service's Ray tests (synthetic stacked steps, process checks)."""

from __future__ import annotations

import time

import numpy as np


def stacked_steps(seed, n_steps, n_envs=1, depth=4, frame=(1, 8, 8), p_done=0.05, marker=0):
    """SB3-shaped steps of channel-first frame stacks; frame pixels carry ``marker`` so writers differ."""
    rng = np.random.default_rng(seed)

    def new_frame():
        f = rng.integers(0, 6, frame).astype(np.uint8)
        f[0, 0, 0] = marker
        return f

    zeros = [np.zeros(frame, np.uint8)] * (depth - 1)
    stacks = [np.concatenate([*zeros, new_frame()]) for _ in range(n_envs)]
    out = []
    for _ in range(n_steps):
        obs = np.stack(stacks)
        nxt = np.stack([np.concatenate([s[frame[0]:], new_frame()]) for s in stacks])
        dones = rng.random(n_envs) < p_done
        stacks = [np.concatenate([*zeros, new_frame()]) if d else n for d, n in zip(dones, nxt, strict=True)]
        infos = [{"TimeLimit.truncated": bool(d and rng.random() < 0.5)} for d in dones]
        out.append((obs, nxt, rng.integers(0, 4, (n_envs, 1)), rng.standard_normal(n_envs).astype(np.float32),
                    dones.astype(np.float32), infos))
    return out


def flat(steps):
    """One record per transition, as bytes: (obs, next_obs, action, reward, done, timeout)."""
    out = []
    for obs, nxt, a, r, d, infos in steps:
        for e in range(len(obs)):
            out.append(key(obs[e], nxt[e], a[e], r[e], d[e], float(infos[e].get("TimeLimit.truncated", False))))
    return out


def key(obs, nxt, action, reward, done, timeout):
    return (np.asarray(obs).tobytes(), np.asarray(nxt).tobytes(), int(np.asarray(action).reshape(-1)[0]),
            np.float32(reward).tobytes(), float(done), float(timeout))


def our_ray_processes() -> list:
    """Ray server processes this test process started (raylet, gcs_server), as psutil processes."""
    import psutil

    return [p for p in psutil.Process().children(recursive=True)
            if p.is_running() and any(n in " ".join(_cmdline(p)) for n in ("raylet", "gcs_server"))]


def _cmdline(p) -> list[str]:
    try:
        return p.cmdline()
    except Exception:
        return []


def still_running(procs: list, timeout: float = 20.0) -> list:
    """Those of ``procs`` still alive after up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in procs if p.is_running() and p.status() != "zombie"]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def local_ray_session(module, num_cpus: int = 3):
    """The body of a module's Ray fixture: a local Ray for ``module``'s tests (its functions and
    these helpers pickled by value), then every Ray process it started stopped (checked)."""
    import sys

    import ray

    from sb3_integration.distributed import start_local_ray

    ray.cloudpickle.register_pickle_by_value(module)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    start_local_ray(num_cpus=num_cpus)
    procs = our_ray_processes()
    assert procs, "ray.init started no raylet/gcs_server under this process"
    yield
    ray.shutdown()
    assert not still_running(procs), "Ray processes outlived the tests"
