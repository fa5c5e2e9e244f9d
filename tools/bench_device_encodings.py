"""The device encoding study (issue 15): bytes per frame, decode ops and decode time on real Atari frames.

Frames: ``--frames`` (20,000) consecutive 84x84 observations per game from SB3's
``AtariWrapper`` under a random policy (``tools/atari_data.py``). Every frame of a
run is distinct, so bytes per frame are bytes per distinct frame.

Part 1, bytes per frame of each candidate encoding (host-side cost, exact sizes):

- ``raw``; zstd level 3 per 4-frame chunk (the CPU reference, not decodable by torch ops);
- "keyframe every K": every K-th frame raw, the others against it as changed pixels
  (2-byte position + value) or changed 2x2 tiles (2-byte index + 4 values);
- one reference (the first frame) for all frames, as changed pixels, 2x2 tiles, or
  runs of changed bytes (:mod:`chunkstore.device.runs`) with 2-, 3- and 4-byte run
  words (3- and 4-byte words: 16-bit start, 8- or 16-bit length);
- reference policies with 2-byte runs: keyframes every 256 / 1024 frames, and
  :class:`chunkstore.device.policy.ReferencePolicy` (trial window 128 / 256 / 512),
  on each game, on a stream that switches games (MsPacman, Pong, Breakout, MsPacman
  again) and on four streams written interleaved into four regions (a vectorised env);
- :class:`~chunkstore.device.DeviceArray` end to end: live record bytes, reference
  bytes, host index bytes and every device byte it holds (segments, inbox, reference
  rows), per frame.

Part 2, reads on the cpu (``--batches``): torch ops per read (counted with a dispatch
mode) and median time of a read of B random frames, for DeviceArray.take (runs), and
for throwaway decoders of changed pixels and of 2x2 tiles against one reference
(same structure: one header upload, ``repeat_interleave`` with ``output_size``, one
``put_``), next to ``index_select`` on raw frames (the baseline, ratio 1) in the same run.

Examples
--------
    .venv/bin/python tools/bench_device_encodings.py --out results/bench_device_encodings.json
    .venv/bin/python tools/bench_device_encodings.py --quick
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, md_table, save_results

ensure_importable()

import torch  # noqa: E402

from chunkstore.device import DeviceArray, RunFormat  # noqa: E402
from chunkstore.device.checks import OpCounter  # noqa: E402
from chunkstore.device.policy import ReferencePolicy  # noqa: E402
from chunkstore.device.refs import ReferencePool  # noqa: E402
from chunkstore.device.runs import cost_matrix  # noqa: E402

GAMES = ["MsPacman", "Pong", "Breakout"]
SIDE = 84
NB = SIDE * SIDE


# -- per-frame costs of one frame against one reference ---------------------------------------


def pixel_cost(frames: np.ndarray, refs: np.ndarray) -> np.ndarray:
    return 3 * np.count_nonzero(frames != refs, axis=1)


def tile_cost(frames: np.ndarray, refs: np.ndarray) -> np.ndarray:
    diff = (frames != refs).reshape(-1, SIDE // 2, 2, SIDE // 2, 2).any(axis=(2, 4))
    return 6 * diff.reshape(len(frames), -1).sum(1)


def run_cost(frames: np.ndarray, ref: np.ndarray, fmt: RunFormat) -> np.ndarray:
    return cost_matrix(frames, ref[None], fmt)[:, 0]


RUN_WORDS = {2: RunFormat.for_item(NB), 3: RunFormat(NB, 3, 16), 4: RunFormat(NB, 4, 16)}


def keyframe_bytes(frames: np.ndarray, k: int, cost: Any) -> float:
    keys = frames[np.arange(len(frames)) // k * k]
    return float((np.sum(cost(frames, keys)) + NB * -(-len(frames) // k)) / len(frames))


def encoding_rows(game: str, frames: np.ndarray) -> list[dict[str, Any]]:
    import zstandard

    zc = zstandard.ZstdCompressor(level=3)
    n = len(frames)
    zstd = sum(len(zc.compress(frames[i:i + 4].tobytes())) for i in range(0, n, 4)) / n
    ref = frames[0]
    rows = [{"encoding": "raw", "bytes": NB}, {"encoding": "zstd3 per 4-frame chunk (CPU)", "bytes": zstd}]
    for k in (4, 8, 16, 32):
        rows.append({"encoding": f"keyframe every {k} + changed pixels",
                     "bytes": keyframe_bytes(frames, k, pixel_cost)})
    rows.append({"encoding": "keyframe every 32 + 2x2 tiles", "bytes": keyframe_bytes(frames, 32, tile_cost)})
    one = (NB + 0.0) / n
    rows.append({"encoding": "one reference + changed pixels",
                 "bytes": one + float(pixel_cost(frames, ref[None]).mean())})
    rows.append({"encoding": "one reference + 2x2 tiles", "bytes": one + float(tile_cost(frames, ref[None]).mean())})
    for h, fmt in RUN_WORDS.items():
        rows.append({"encoding": f"one reference + runs, {h}-byte words (max run {fmt.max_len})",
                     "bytes": one + float(run_cost(frames, ref, fmt).mean())})
    for r in rows:
        r["game"] = game
    return rows


# -- reference policies ---------------------------------------------------------------------


def scenarios(data: dict[str, np.ndarray], n: int) -> dict[str, list[np.ndarray]]:
    """Each game alone; one stream switching games; four streams interleaved."""
    out = {g: [data[g]] for g in data}
    if len(data) == 3:
        q = n // 3
        m, p, b = data["MsPacman"], data["Pong"], data["Breakout"]
        out["switch (MsPacman, Pong, Breakout, MsPacman)"] = [
            np.concatenate([m[:q], p[:q], b[:q], m[q:q + n // 10]])]
        out["4 streams interleaved"] = [m[:n // 4], p[:n // 4], b[:n // 4], m[n // 2:n // 2 + n // 4]]
    return out


def chunk_order(streams: list[np.ndarray], L: int = 4) -> list[tuple[int, int, np.ndarray]]:
    """(stream, chunk index in the ring, frames) in the order a vectorised env seals them."""
    per = len(streams[0]) // L
    return [(s, s * per + c, streams[s][c * L:(c + 1) * L]) for c in range(per) for s in range(len(streams))]


def keyframe_policy_bytes(streams: list[np.ndarray], period: int) -> float:
    fmt, total, n = RUN_WORDS[2], 0, 0
    for st in streams:
        keys = st[np.arange(len(st)) // period * period]
        total += int(cost_matrix(st[:0], st[:0], fmt).sum())  # keeps the kernels warm
        total += sum(int(cost_matrix(st[i:i + 1], keys[i:i + 1], fmt)[0, 0]) for i in range(len(st)))
        total += NB * -(-len(st) // period)
        n += len(st)
    return total / n


def trial_policy_bytes(streams: list[np.ndarray], window: int) -> tuple[float, int]:
    """Record + reference bytes per frame under ReferencePolicy (the real class), and references made."""
    fmt = RUN_WORDS[2]
    pool = ReferencePool(torch, torch.device("cpu"), NB)
    policy = ReferencePolicy(fmt, pool, window=window)
    last = {}  # stream -> reference of its last frame
    total = n = 0
    for s, c, frames in chunk_order(streams):
        rows = policy.choose(c, last.get(s, 0), frames)
        pool.incref(rows)  # every frame stays: references are never freed here
        total += int(cost_matrix(frames, pool.host[rows], fmt).diagonal().sum())
        last[s] = int(rows[-1])
        n += len(frames)
    return (total + pool.live_rows * NB) / n, policy.created


def device_array_row(streams: list[np.ndarray]) -> dict[str, Any]:
    """DeviceArray end to end: the streams written as a ring writer with one region each writes them."""
    per = len(streams[0])
    arr = DeviceArray(per * len(streams), (SIDE, SIDE), np.uint8, chunk_len=4, max_open=len(streams) + 1)
    t0 = time.perf_counter()
    for t in range(per):
        for s, st in enumerate(streams):
            arr[s * per + t] = st[t]
    arr.flush()
    write_us = (time.perf_counter() - t0) / (per * len(streams)) * 1e6
    n = per * len(streams)
    info = arr.info()
    ids = np.arange(n)
    got = torch.cat([arr.take(ids[i:i + 4096]) for i in range(0, n, 4096)]).numpy()
    exact = bool(np.array_equal(got, np.concatenate([st[:per] for st in streams]).reshape(n, SIDE, SIDE)))
    arr.close()
    return {"records": info["record_nbytes"] / n, "references": info["reference_nbytes"] / n,
            "index (host)": info["index_nbytes"] / n, "device total": info["nbytes"] / n,
            "refs made": info["references_created"], "write us/frame": write_us, "bit-exact": exact}


def policy_rows(data: dict[str, np.ndarray], n: int, quick: bool) -> list[dict[str, Any]]:
    rows = []
    for name, streams in scenarios(data, n).items():
        streams = [s.reshape(len(s), NB) for s in streams]
        row: dict[str, Any] = {"frames": name}
        row["one reference"] = sum(NB + int(run_cost(s, s[0], RUN_WORDS[2]).sum()) for s in streams) / sum(
            len(s) for s in streams)
        for period in (256, 1024):
            row[f"keyframe /{period}"] = keyframe_policy_bytes(streams, period)
        for w in (128, 256, 512) if not quick else (256,):
            row[f"trial W={w}"], row[f"refs W={w}"] = trial_policy_bytes(streams, w)
        row.update(device_array_row([s.reshape(len(s), SIDE, SIDE) for s in streams]))
        rows.append(row)
        print(f"  policies on {name}: done", file=sys.stderr)
    return rows


# -- reads: op counts and time on the cpu ------------------------------------------------------


class FixedDecoder:
    """Throwaway device decoder of fixed-size groups against one reference: pixels (g=1) or 2x2 tiles (g=4).

    A record is its group indices (int16) then its values; the read mirrors DeviceArray's
    (one header upload, repeat_interleave with output_size, one put_).
    """

    def __init__(self, frames: np.ndarray, tiles: bool) -> None:
        self.tiles = tiles
        ref = frames[0].reshape(NB)
        flat = frames.reshape(len(frames), NB)
        recs, self.count, self.addr = [], np.zeros(len(frames), np.int64), np.zeros(len(frames), np.int64)
        pos = 0
        for i, f in enumerate(flat):
            if tiles:
                grid = (f != ref).reshape(SIDE // 2, 2, SIDE // 2, 2).any(axis=(1, 3)).reshape(-1)
                idx = np.flatnonzero(grid)
                ty, tx = np.divmod(idx, SIDE // 2)
                at = (2 * ty * SIDE + 2 * tx)[:, None] + np.array([0, 1, SIDE, SIDE + 1])
                vals = f[at.reshape(-1)]
            else:
                idx = np.flatnonzero(f != ref)
                vals = f[idx]
            rec = np.concatenate([idx.astype("<u2").view(np.uint8), vals])
            rec = np.concatenate([rec, np.zeros(len(rec) % 2, np.uint8)])
            recs.append(rec)
            self.count[i], self.addr[i] = idx.size, pos
            pos += rec.size
        self.heap = torch.from_numpy(np.concatenate([*recs, np.zeros(8, np.uint8)]))
        self.words = self.heap[: self.heap.numel() // 2 * 2].view(torch.int16)
        self.refs = torch.from_numpy(np.stack([np.zeros(NB, np.uint8), ref]))
        self.nbytes = pos / len(frames)

    def take(self, ids: np.ndarray) -> Any:
        n, g = ids.size, (4 if self.tiles else 1)
        cnt, addr = self.count[ids], self.addr[ids]
        first = np.cumsum(cnt) - cnt
        hdr = np.stack([np.ones(n, np.int64), cnt, addr // 2 - first, addr + 2 * cnt - g * first,
                        np.arange(n) * NB])
        header = torch.from_numpy(hdr).clone()  # the upload
        total = int(cnt.sum())
        out = self.refs.index_select(0, header[0])
        item = torch.repeat_interleave(header[1], output_size=total)
        k = torch.arange(total)
        per = header[2:].index_select(1, item)  # (3, total): index address, value base, row base
        idx = self.words.index_select(0, per[0].add_(k)).long().bitwise_and_(0xFFFF)
        if self.tiles:
            at = (idx // (SIDE // 2) * (2 * SIDE) + idx % (SIDE // 2) * 2 + per[2])[:, None]
            dest = (at + torch.tensor([0, 1, SIDE, SIDE + 1])).reshape(-1)
            src = ((per[1] + 4 * k)[:, None] + torch.arange(4)).reshape(-1)
        else:
            dest, src = idx.add_(per[2]), per[1].add_(k)
        out.put_(dest, self.heap.index_select(0, src))
        return out.view(n, SIDE, SIDE)


def median_ms(fn: Any, reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def ops_of(fn: Any) -> int:
    fn()
    fn()
    with OpCounter() as c:
        fn()
    return c.total


def read_rows(game: str, frames: np.ndarray, batches: list[int], reps: int) -> list[dict[str, Any]]:
    raw = torch.from_numpy(frames)
    arr = DeviceArray(len(frames), (SIDE, SIDE), np.uint8, chunk_len=4)
    arr.write(0, frames)
    arr.flush()
    pix, tiles = FixedDecoder(frames, False), FixedDecoder(frames, True)
    rng = np.random.default_rng(0)
    rows = []
    for b in batches:
        ids = rng.integers(0, len(frames), b)
        t_ids = torch.from_numpy(ids)
        want = frames[ids]
        arms = {
            "raw index_select (baseline)": lambda t=t_ids: raw.index_select(0, t),
            "runs: DeviceArray.take": lambda i=ids: arr.take(i),
            "changed pixels (throwaway)": lambda i=ids: pix.take(i),
            "2x2 tiles (throwaway)": lambda i=ids: tiles.take(i),
        }
        base = None
        for name, fn in arms.items():
            assert np.array_equal(fn().numpy(), want), name  # every decoder is bit-exact
            ms = median_ms(fn, reps)
            base = base or ms
            rows.append({"game": game, "batch": b, "decoder": name, "ops": ops_of(fn), "ms": ms,
                         "x baseline": ms / base})
    arr.close()
    return rows


# -- main ----------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from atari_data import collect_frames

    data = {g: collect_frames(g, max(args.frames, 20000))[:args.frames] for g in args.games}
    enc = [r for g in args.games for r in encoding_rows(g, data[g].reshape(-1, NB))]
    print("encodings: done", file=sys.stderr)
    pol = policy_rows(data, args.frames, args.quick)
    reads = [r for g in args.games for r in read_rows(g, data[g], args.batches, args.repeats)]
    table = {}
    for r in enc:
        table.setdefault(r["encoding"], {"encoding": r["encoding"]})[r["game"]] = r["bytes"]
    md = [f"## Bytes per frame ({args.frames} real frames per game)", "",
          md_table(list(table.values()), ["encoding", *args.games]), "",
          "## Reference policies, 2-byte runs: bytes per frame (records + references)", "",
          md_table(pol, ["frames", "one reference", "keyframe /256", "keyframe /1024",
                         *[c for c in pol[0] if c.startswith(("trial", "refs W"))]]), "",
          "## DeviceArray end to end, bytes per frame", "",
          md_table(pol, ["frames", "records", "references", "index (host)", "device total",
                         "refs made", "write us/frame", "bit-exact"]), "",
          "## Reads on the cpu: torch ops per read and median time (ratio to raw index_select)", "",
          md_table(reads, ["game", "batch", "decoder", "ops", "ms", "x baseline"])]
    return {"config": vars(args), "encodings": enc, "policies": pol, "reads": reads}, "\n".join(md)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", nargs="+", default=GAMES)
    p.add_argument("--frames", type=int, default=20000, help="frames per game")
    p.add_argument("--batches", nargs="+", type=int, default=[256, 2048], help="frames per read")
    p.add_argument("--repeats", type=int, default=15, help="timed reads per arm (the median counts)")
    p.add_argument("--quick", action="store_true", help="2,000 frames, one trial window, 5 repeats")
    p.add_argument("--out", default=None, help="JSON path (a .md goes beside it)")
    args = p.parse_args(argv)
    if args.quick:
        args.frames, args.repeats = min(args.frames, 2000), 5
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)  # one thread for every arm: the machine is shared
    payload, md = run(args)
    print(md)
    save_results(args.out, payload, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
