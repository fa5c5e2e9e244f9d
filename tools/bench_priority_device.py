"""The priority index on a GPU: the host index (numba) against the device index (torch ops) there.

    python tools/bench_priority_device.py [--capacities 1000000 10000000] [--reps 200] \\
        [--out results/bench_priority_device.json]

The prioritized buffers keep the host index (``chunkstore.priority.PriorityIndex``); a device
index (``chunkstore.priority.torch_index.TorchPriorityIndex``) runs the same steps in torch ops.
On the cpu the torch ops are much slower (``tools/bench_prioritized.py``); this measures the
one step a prioritized ``sample()`` + ``update_priorities()`` makes, ``sample(k)`` then
``update(k)`` with new priorities, at each capacity (every slot given a priority) on every
device torch has here: the host index, and the device index on ``cpu`` and on ``cuda`` (there
with the drawn slots copied to the host, which a sample needs to plan its frame reads, and with
the TD errors coming from the device, as ``update_priorities`` gets them from a loss). Times:
the minimum over 10 groups of the group medians (``robust_ms``), one process.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, md_table, robust_ms

ensure_importable()

BATCHES = (32, 256)


def host_index(cap: int, reps: int) -> dict[str, float]:
    from chunkstore.priority import PriorityIndex

    rng = np.random.default_rng(0)
    ix = PriorityIndex(cap)
    for lo in range(0, cap, 1 << 20):
        hi = min(cap, lo + (1 << 20))
        ix.set(np.arange(lo, hi), rng.random(hi - lo) * 10)
    out = {}
    for k in BATCHES:
        new = rng.random(k) * 10

        def step(k: int = k, new: np.ndarray = new) -> None:
            slots, _, gens = ix.sample(k)
            ix.update(slots, new, gens)

        out[f"ms_{k}"] = robust_ms(step, n=reps)["ms"]
    return out


def device_index(cap: int, reps: int, device: str) -> dict[str, float]:
    import torch

    from chunkstore.priority.torch_index import TorchPriorityIndex

    ix = TorchPriorityIndex(cap, device)
    for lo in range(0, cap, 1 << 20):
        hi = min(cap, lo + (1 << 20))
        ix.set(torch.arange(lo, hi, device=device), torch.rand(hi - lo, dtype=torch.float64, device=device) * 10)
    out = {}
    for k in BATCHES:
        new = torch.rand(k, dtype=torch.float64, device=device) * 10

        def step(k: int = k, new: Any = new) -> None:
            slots, _, gens = ix.sample(k)
            slots.cpu()  # the host plans the frame reads from the drawn rows (waits for the draw)
            ix.update(slots, new, gens)
            if device != "cpu":
                torch.cuda.synchronize()  # the update done before the next step is timed

        out[f"ms_{k}"] = robust_ms(step, n=reps)["ms"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--capacities", nargs="+", type=int, default=[1_000_000, 10_000_000])
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    import torch

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rows = []
    for cap in args.capacities:
        row: dict[str, Any] = {"capacity": cap, **{f"host_{k}": v for k, v in host_index(cap, args.reps).items()}}
        for dev in devices:
            row.update({f"torch_{dev}_{k}": v for k, v in device_index(cap, args.reps, dev).items()})
        rows.append(row)
        print(f"capacity {cap:,}: done", flush=True)
    cols = ["capacity"] + [c for c in rows[0] if c != "capacity"]
    table = md_table(rows, cols)
    gpu = torch.cuda.get_device_name(0) if "cuda" in devices else "none"
    text = (f"sample(k) + update(k) ms (host: numba PriorityIndex; torch_<device>: TorchPriorityIndex), "
            f"GPU: {gpu}, torch {torch.__version__}\n\n{table}")
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps({"gpu": gpu, "torch": torch.__version__, "reps": args.reps,
                                              "rows": rows}, indent=1))
        Path(args.out).with_suffix(".md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
