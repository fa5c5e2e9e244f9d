"""What checking every chunk's CRC32 on every read costs a lazily loaded buffer (issue 27).

    python tools/bench_lazy_verify.py --out results/bench_lazy_verify.json
    python tools/bench_lazy_verify.py --transitions 200000 --out /tmp/lazy.json   # smaller, faster

Fills a ``CompressedReplayBuffer`` (default options) with ``--transitions`` real MsPacman
transitions ((4, 84, 84) uint8 stacks from SB3's Atari pipeline, ``--collect-steps``
collected once and cycled), saves it, loads it lazily (chunks stay in the file and are
``pread`` by the native read path) and times ``sample(256)`` and ``sample(32)`` with the
read checks in four modes, switched on the same loaded buffer and interleaved in
``--rounds`` rounds (the machine is shared: the figure is each mode's best round against
the baseline's in the same round, then the median over rounds):

- ``first read + ctime`` (the default since issue 27): size, mtime and ctime of the file
  (one fstat per batch), and a chunk's CRC32 on its first read after the ctime last
  moved; timed in its steady state (every chunk read once: the buffer's first pass),
  where a batch skips the chunk lookup too;
- ``first read`` (the behaviour before issue 27, the baseline): size + mtime, and a
  chunk's CRC32 only the first time it is read (reproduced here by a replacement of
  ``FileTier.check_reads``, the old code), in the same steady state;
- ``every read`` (``load(..., verify="always")``): size + mtime + ctime, then the CRC32 of
  every file chunk a batch reads, each time;
- ``no CRC`` (``load(..., verify=False)``): size + mtime + ctime only.

The same buffer loaded into RAM (``lazy=False``) is timed beside them for scale. Every
mode returns the same samples for the same seed (checked).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, md_table, robust_ms, save_results

ensure_importable()

GAME = "MsPacman"
MODES = ("first read + ctime", "first read", "every read", "no CRC")


def _first_read_only(self: Any, segments: np.ndarray, offsets: np.ndarray) -> None:
    """The check before issue 27: CRC32 only of the file chunks not checked before."""
    self.file.check_unchanged()
    if not self.verify:
        return
    offs = offsets[segments == 0]
    if not offs.size or not self._offsets.size:
        return
    k = np.searchsorted(self._offsets, offs).clip(max=len(self._offsets) - 1)
    k = k[(self._offsets[k] == offs) & ~self._checked[k]]
    self._check_many(np.unique(k))


def fill(buf: Any, tr: Any, n: int) -> float:
    acts = tr.actions.reshape(len(tr), 1, 1)
    t0 = time.perf_counter()
    for a in range(n):
        t = a % len(tr)
        buf.add(tr.obs[t], tr.next_obs[t], acts[t], tr.rewards[t], tr.dones[t], tr.infos[t])
    return time.perf_counter() - t0


def file_tiers(path: str) -> list[Any]:
    """Every open FileTier reading ``path`` (frames, and small arrays when compressed)."""
    import gc

    from chunkstore.hdf5.filetier import FileTier

    with warnings.catch_warnings():  # gc hands over torch's deprecated module attributes too
        warnings.simplefilter("ignore")
        return [o for o in gc.get_objects()
                if isinstance(o, FileTier) and not o.closed and o.file.path == path]


def time_consistency_check(buf: Any) -> float:
    """Seconds of the frame-store consistency check that every load and unpickle runs (issue 27)."""
    from sb3_integration.frame_state import check_streams

    total = 0.0
    for key, fs in buf.frame_stores.items():
        with fs.state_dict() as state:
            t0 = time.perf_counter()
            check_streams(state, str(key))
            total += time.perf_counter() - t0
    return total


def set_mode(tiers: list[Any], mode: str) -> None:
    from chunkstore.hdf5.filetier import FileTier

    for t in tiers:
        t.verify, t.every_read = mode != "no CRC", mode == "every read"
        if mode.startswith("first read"):  # the steady state: every chunk was read once before
            t._fresh_checked()[:] = True
            t._count_checked(len(t._checked))
        if mode == "first read":
            t.check_reads = _first_read_only.__get__(t, FileTier)
        else:
            t.__dict__.pop("check_reads", None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--transitions", type=int, default=1_000_000)
    p.add_argument("--collect-steps", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=60, help="sample() calls per mode per round")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--tmp-dir", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    from atari_data import collect_stacked
    from gymnasium import spaces

    from sb3_integration import CompressedReplayBuffer

    tr = collect_stacked(GAME, args.collect_steps, 1, args.seed, args.cache_dir)
    obs_space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    buf = CompressedReplayBuffer(args.transitions, obs_space, spaces.Discrete(9), device="cpu")
    fill_s = fill(buf, tr, args.transitions)
    print(f"filled {args.transitions} transitions in {fill_s:.1f} s", file=sys.stderr)
    tmp = tempfile.mkdtemp(dir=args.tmp_dir)
    path = str(Path(tmp) / "buf.h5")
    try:
        buf.save(path)
        buf.close()
        file_mb = Path(path).stat().st_size / 1e6
        t0 = time.perf_counter()
        lazy = CompressedReplayBuffer.load(path, device="cpu", lazy=True)
        load_s = time.perf_counter() - t0
        consistency_s = time_consistency_check(lazy)
        ram = CompressedReplayBuffer.load(path, device="cpu", lazy=False)
        tiers = file_tiers(path)
        if not tiers:
            raise RuntimeError("no FileTier found behind the lazily loaded buffer")
        result = run(lazy, ram, tiers, args)
        lazy.close()
        ram.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for batch in (256, 32):
        r = result[batch]
        for mode in (*MODES, "in RAM"):
            rows.append({"batch": batch, "mode": mode, "ms": r[mode]["ms"],
                         "vs_first": r["ratio"][mode], "vs_ram": r["ratio_ram"][mode]})
    cols = [("batch", "sample(batch)"), ("mode", "lazy-load check"), ("ms", "ms (best round)"),
            ("vs_first", "time / first-read CRC (same round, median)"),
            ("vs_ram", "time / all in RAM (same round, median)")]
    table = md_table(rows, cols)
    head = (f"{args.transitions:,} MsPacman transitions (default options), file {file_mb:.0f} MB, "
            f"{len(tiers)} file-backed arrays, {args.rounds} rounds x {args.calls} calls, "
            f"samples identical in every mode: {result['identical']}; lazy load {load_s:.3f} s; "
            f"the frame-store consistency check that load runs: {consistency_s:.3f} s")
    print(head)
    print(table)
    save_results(args.out, {"transitions": args.transitions, "fill_s": fill_s, "file_mb": file_mb,
                            "lazy_load_s": load_s, "consistency_check_s": consistency_s,
                            "file_arrays": len(tiers), "identical": result["identical"],
                            "rows": rows, "rounds": {str(b): result[b]["rounds"] for b in (256, 32)}},
                 f"# bench_lazy_verify\n\n{head}\n\n{table}\n")
    return 0


def run(lazy: Any, ram: Any, tiers: list[Any], args: argparse.Namespace) -> dict[Any, Any]:
    identical = True
    out: dict[Any, Any] = {}
    for batch in (256, 32):
        for mode in MODES:  # same seed, same samples, whatever the check
            set_mode(tiers, mode)
            np.random.seed(args.seed)  # noqa: NPY002 - SB3 samples with the global RNG
            s = lazy.sample(batch)
            np.random.seed(args.seed)  # noqa: NPY002
            want = ram.sample(batch)
            identical &= bool(np.array_equal(s.observations.numpy(), want.observations.numpy())
                              and np.array_equal(s.next_observations.numpy(),
                                                 want.next_observations.numpy()))
        rounds: list[dict[str, float]] = []
        order = [*MODES, "in RAM"]
        for r in range(args.rounds):
            times = {}
            for mode in order[r % len(order):] + order[:r % len(order)]:  # each mode first in some round
                if mode != "in RAM":
                    set_mode(tiers, mode)
                b = ram if mode == "in RAM" else lazy
                times[mode] = robust_ms(lambda b=b, n=batch: b.sample(n), n=args.calls, groups=5)["ms"]
            rounds.append(times)
        best = {m: {"ms": min(r[m] for r in rounds)} for m in (*MODES, "in RAM")}
        ratio = {m: float(np.median([r[m] / r["first read"] for r in rounds])) for m in best}
        ratio_ram = {m: float(np.median([r[m] / r["in RAM"] for r in rounds])) for m in best}
        out[batch] = {**best, "ratio": ratio, "ratio_ram": ratio_ram, "rounds": rounds}
        print(f"sample({batch}): " + ", ".join(f"{m} {ratio[m]:.3f}" for m in best), file=sys.stderr)
    set_mode(tiers, "first read + ctime")
    out["identical"] = identical
    return out


if __name__ == "__main__":
    raise SystemExit(main())
