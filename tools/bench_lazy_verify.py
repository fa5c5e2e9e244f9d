"""What the CRC32 checks of a lazily loaded buffer cost, in time and in RSS (issues 26, 27).

    python tools/bench_lazy_verify.py --out results/bench_lazy_verify.json
    python tools/bench_lazy_verify.py --transitions 200000 --out /tmp/lazy.json   # smaller, faster

Fills a ``CompressedReplayBuffer`` (default options) with ``--transitions`` real MsPacman
transitions ((4, 84, 84) uint8 stacks from SB3's Atari pipeline, ``--collect-steps``
collected once and cycled), saves it, loads it lazily (chunks stay in the file and are
``pread`` by the native read path) and times ``sample(256)`` and ``sample(32)`` with the
read checks in these modes, switched on the same loaded buffer and interleaved in
``--rounds`` rounds (the machine is shared: each mode's time against the same buffer
loaded into RAM, ``lazy=False``, in the same round, median over rounds):

- ``first pass, CRC in the native read`` (the default, while chunks are read for the
  first time): every chunk of each batch unchecked (the check state is reset before each
  call), so each one's CRC32 is computed inside the native read on the bytes ``pread``
  fetched;
- ``first pass, CRC via the mapping (before)``: the same, with the check as it was before
  (``FileTier.check_reads`` computing each chunk's CRC32 through the file's mmap view, in
  a Python loop over chunks; reproduced here by a replacement, the old code);
- ``steady state`` (the default once every chunk was checked): size, mtime and ctime of
  the file (one fstat per batch), no CRC, no chunk lookup;
- ``every read`` (``load(..., verify="always")``): the CRC32 of every file chunk a batch
  reads, each time (in the native read);
- ``no CRC`` (``load(..., verify=False)``): size + mtime + ctime only.

RSS: for each lazy mode, from the same starting point (the file's pages dropped from the
mapping with ``madvise(MADV_DONTNEED)``, every chunk unchecked), ``--rss-samples`` calls of
``sample(256)`` as training makes them (no reset between calls), and the growth of the
process's RSS (psutil) and of the file mapping's resident kB (``/proc/self/smaps``).
Every mode returns the same samples for the same seed (checked).
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
NEW, BEFORE = "first pass, CRC in the native read", "first pass, CRC via the mapping (before)"
STEADY, ALWAYS, NO_CRC, RAM = "steady state (all checked)", "every read", "no CRC", "in RAM"
MODES = (NEW, BEFORE, STEADY, ALWAYS, NO_CRC)
RSS_MODES = (NEW, BEFORE, ALWAYS, NO_CRC)


def _before_check_reads(self: Any, segments: np.ndarray, offsets: np.ndarray) -> None:
    """The check before this change: each unchecked chunk's CRC32 through the mmap view, in Python."""
    import zlib

    self.file.check_unchanged()
    if not self.verify or (self._all_checked and self._generation == self.file.generation):
        return
    offs = offsets[segments == 0]
    if not offs.size or not self._offsets.size:
        return
    k = np.searchsorted(self._offsets, offs).clip(max=len(self._offsets) - 1)
    k = k[self._offsets[k] == offs]
    k = np.unique(k[~self._fresh_checked()[k]])
    buf = self.file.buf
    offs, ends = self._offsets[k], self._offsets[k] + self._nbytes[k]
    for i, (o, e, want) in enumerate(zip(offs.tolist(), ends.tolist(), self._crc[k].tolist(), strict=True)):
        if zlib.crc32(buf[o:e]) != want:
            self._check_at(int(k[i]), buf[o:e])
    new = int(np.count_nonzero(~self._checked[k]))
    self._checked[k] = True
    self._count_checked(new)


def unchecked(tiers: list[Any]) -> None:
    """Forget which chunks were checked (what a fresh load, or a ctime change, gives)."""
    for t in tiers:
        t._checked[:] = False
        t._nchecked, t._all_checked = 0, not len(t._checked)


def drop_pages(tiers: list[Any]) -> None:
    """Drop the file's pages from this process's mapping (what a fresh load starts with)."""
    import mmap

    for f in {id(t.file): t.file for t in tiers}.values():
        if f._mmap is not None:
            f._mmap.madvise(mmap.MADV_DONTNEED)


def mapped_kb(path: str) -> int:
    """Resident kB of this process's mappings of ``path`` (by inode), from /proc/self/smaps."""
    import os

    ino, total, mine = os.stat(path).st_ino, 0, False
    try:
        with open("/proc/self/smaps") as fh:
            for line in fh:
                head = line.split()
                if len(head) >= 5 and "-" in head[0] and ":" in head[3]:
                    mine = head[4].isdigit() and int(head[4]) == ino
                elif mine and line.startswith("Rss:"):
                    total += int(head[1])
    except OSError:
        return -1
    return total


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
    from sb3_integration.engine.frame_state import check_streams

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
        t.verify, t.every_read = mode != NO_CRC, mode == ALWAYS
        if mode == STEADY:  # every chunk was read once before
            t._fresh_checked()[:] = True
            t._count_checked(len(t._checked))
        else:
            unchecked([t])
        if mode == BEFORE:
            t.check_reads = _before_check_reads.__get__(t, FileTier)
        else:
            t.__dict__.pop("check_reads", None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--transitions", type=int, default=1_000_000)
    p.add_argument("--collect-steps", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=60, help="sample() calls per mode per round")
    p.add_argument("--rss-samples", type=int, default=500, help="sample(256) calls per mode for RSS")
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
        rss_rows = rss_growth(lazy, tiers, path, args)
        lazy.close()
        ram.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for batch in (256, 32):
        r = result[batch]
        for mode in (*MODES, RAM):
            rows.append({"batch": batch, "mode": mode, "ms": r[mode]["ms"],
                         "vs_before": r["ratio"][mode], "vs_ram": r["ratio_ram"][mode]})
    cols = [("batch", "sample(batch)"), ("mode", "lazy-load check"), ("ms", "ms (best round)"),
            ("vs_ram", "time / all in RAM (same round, median)"),
            ("vs_before", "time / first pass before (same round, median)")]
    table = md_table(rows, cols)
    rss_cols = [("mode", "lazy-load check"), ("rss0", "RSS before, MB"), ("rss1", "RSS after, MB"),
                ("grow", "RSS growth, MB"), ("map0", "file mapping resident before, MB"),
                ("map1", "after, MB"), ("verified", "chunks checked after")]
    rss_table = md_table(rss_rows, rss_cols)
    head = (f"{args.transitions:,} MsPacman transitions (default options), file {file_mb:.0f} MB, "
            f"{len(tiers)} file-backed arrays, {args.rounds} rounds x {args.calls} calls, "
            f"samples identical in every mode: {result['identical']}; lazy load {load_s:.3f} s; "
            f"the frame-store consistency check that load runs: {consistency_s:.3f} s")
    rss_head = (f"RSS over {args.rss_samples} calls of sample(256) per mode, each from the file's pages "
                "dropped and every chunk unchecked, in this order, in one process:")
    print(head)
    print(table)
    print(rss_head)
    print(rss_table)
    save_results(args.out, {"transitions": args.transitions, "fill_s": fill_s, "file_mb": file_mb,
                            "lazy_load_s": load_s, "consistency_check_s": consistency_s,
                            "file_arrays": len(tiers), "identical": result["identical"],
                            "rows": rows, "rss": rss_rows, "rss_samples": args.rss_samples,
                            "rounds": {str(b): result[b]["rounds"] for b in (256, 32)}},
                 f"# bench_lazy_verify\n\n{head}\n\n{table}\n\n{rss_head}\n\n{rss_table}\n")
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
        order = [*MODES, RAM]
        for r in range(args.rounds):
            times = {}
            for mode in order[r % len(order):] + order[:r % len(order)]:  # each mode first in some round
                if mode != RAM:
                    set_mode(tiers, mode)
                b = ram if mode == RAM else lazy
                first_pass = mode in (NEW, BEFORE)

                def call(b: Any = b, n: int = batch, first_pass: bool = first_pass) -> None:
                    if first_pass:  # every chunk of the batch read for the first time
                        unchecked(tiers)
                    b.sample(n)

                times[mode] = robust_ms(call, n=args.calls, groups=5)["ms"]
            rounds.append(times)
        best = {m: {"ms": min(r[m] for r in rounds)} for m in (*MODES, RAM)}
        ratio = {m: float(np.median([r[m] / r[BEFORE] for r in rounds])) for m in best}
        ratio_ram = {m: float(np.median([r[m] / r[RAM] for r in rounds])) for m in best}
        out[batch] = {**best, "ratio": ratio, "ratio_ram": ratio_ram, "rounds": rounds}
        print(f"sample({batch}): " + ", ".join(f"{m} {ratio[m]:.3f}" for m in best), file=sys.stderr)
    set_mode(tiers, NEW)
    out["identical"] = identical
    return out


def rss_growth(lazy: Any, tiers: list[Any], path: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    from _bench_common import rss

    for mode in RSS_MODES:  # warm up: every mode's buffers allocated before any is measured
        set_mode(tiers, mode)
        for _ in range(3):
            lazy.sample(256)
    rows = []
    for mode in RSS_MODES:
        set_mode(tiers, mode)  # every chunk unchecked
        drop_pages(tiers)
        r0, m0 = rss(), mapped_kb(path)
        for _ in range(args.rss_samples):
            lazy.sample(256)
        r1, m1 = rss(), mapped_kb(path)
        rows.append({"mode": mode, "rss0": r0 / 1e6, "rss1": r1 / 1e6, "grow": (r1 - r0) / 1e6,
                     "map0": m0 / 1e3, "map1": m1 / 1e3,
                     "verified": sum(int(t._checked.sum()) for t in tiers) if mode != NO_CRC else 0})
        print(f"rss {mode}: {rows[-1]}", file=sys.stderr)
    set_mode(tiers, NEW)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
