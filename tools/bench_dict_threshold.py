"""How much a trained zstd dictionary saves, by how many bytes of frames it was trained on.

chunkstore trains a learning codec (``zstd3+dict``) once ``TRAIN_AFTER_BYTES`` of raw
frames are stored (an array) or drained (a Ray writer); both use
:func:`chunkstore.array.trained_codec`. This script asks what that threshold buys on
real Atari frames (``tools/atari_data.py``'s cached SB3 ``AtariWrapper`` frames): for
each threshold it trains with the rule on the first ``threshold`` bytes of a game's
distinct frames (chunks of ``chunk_len`` consecutive frames), then encodes the frames
after the largest threshold (the same held-out frames for every threshold) with the
result and with plain ``zstd3``. Reported: bytes per frame, the dictionary's saving
against plain zstd on the held-out frames (plain / with-dictionary), and the training
time. One process, one run; sizes are deterministic, times are not.

Examples
--------
    PYTHONPATH=. python tools/bench_dict_threshold.py --out results/bench_dict_threshold.json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from _bench_common import ensure_importable, md_table, save_results

ensure_importable()

from chunkstore import get_codec  # noqa: E402
from chunkstore.array import TRAIN_AFTER_BYTES, trained_codec  # noqa: E402

MIB = 1 << 20


def frames_of(game: str, n_steps: int) -> np.ndarray:
    """The distinct frames of a cached SB3 Atari run: each step's newest frame, in order."""
    from atari_data import collect_stacked

    tr = collect_stacked(game, n_steps)
    return np.ascontiguousarray(tr.next_obs[:, 0, -1])  # (n_steps, 84, 84) uint8


def measure(frames: np.ndarray, thresholds: list[int], chunk_len: int) -> list[dict[str, Any]]:
    per = frames[0].nbytes
    start = -(-max(thresholds) // (per * chunk_len)) * chunk_len  # held out: after the largest window
    held = frames[start:start + (len(frames) - start) // chunk_len * chunk_len]
    held = held.reshape(-1, chunk_len, *frames.shape[1:])
    plain = get_codec("zstd3")
    plain_bytes = sum(len(plain.encode(c)) for c in held)
    rows = [{"threshold_mib": 0, "trained": "plain zstd3", "bytes_per_frame": plain_bytes / len(held) / chunk_len,
             "saving": 1.0, "train_s": 0.0}]
    for t in thresholds:
        n = -(-t // (per * chunk_len))
        window = frames[:n * chunk_len].reshape(n, chunk_len, *frames.shape[1:])
        t0 = time.perf_counter()
        codec = trained_codec(get_codec("zstd3+dict"), dict(enumerate(window)))
        took = time.perf_counter() - t0
        dict_bytes = sum(len(codec.encode(c)) for c in held)
        kept = "dictionary" if getattr(codec, "dictionary", None) else "plain (no dictionary kept)"
        rows.append({"threshold_mib": t / MIB, "trained": kept, "bytes_per_frame": dict_bytes / len(held) / chunk_len,
                     "saving": plain_bytes / dict_bytes, "train_s": took})
    for r in rows:
        r["held_out_frames"] = len(held) * chunk_len
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", nargs="+", default=["Pong:20000", "MsPacman:3000"],
                   help="game:steps of cached runs (tools/atari_data.py)")
    p.add_argument("--thresholds-mib", nargs="+", type=float, default=[1, 2, 4, 8, 16])
    p.add_argument("--chunk-len", type=int, default=4)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    out: dict[str, Any] = {"train_after_bytes": TRAIN_AFTER_BYTES, "chunk_len": args.chunk_len, "games": {}}
    md = []
    for spec in args.games:
        game, steps = spec.split(":")
        frames = frames_of(game, int(steps))
        # at least 1000 held-out frames: larger thresholds than the run allows are left out
        limit = (len(frames) - 1000) * frames[0].nbytes
        thresholds = [int(t * MIB) for t in args.thresholds_mib if t * MIB <= limit]
        rows = measure(frames, thresholds, args.chunk_len)
        out["games"][game] = rows
        table = md_table(rows, [("threshold_mib", "trained on (MiB)"), ("trained", "result"),
                                ("bytes_per_frame", "B/frame held out"), ("saving", "plain / dict"),
                                ("train_s", "train s"), ("held_out_frames", "held-out frames")])
        md.append(f"### {game} ({len(frames)} frames)\n\n{table}\n")
        print(md[-1])
    save_results(args.out, out, "\n".join(md))


if __name__ == "__main__":
    main()
