"""Would decoding only a chunk's needed prefix make small reads of image stacks cheaper? (issue 38)

A ``sample()`` of frame stacks needs a few consecutive frames of each chunk it touches, and
the native read decodes whole chunks (``ZSTD_decompress_usingDDict``, one call a chunk). zstd
can stop early: a frame written with one block per item (``ZSTD_compressStream2`` with
``ZSTD_e_flush`` after each item) decodes block by block with the buffer-less API
(``ZSTD_decompressBegin`` / ``ZSTD_nextSrcSizeToDecompress`` / ``ZSTD_decompressContinue``)
straight into the output, and a read that needs items ``0..k-1`` stops after block ``k``.

This script measures, on real frames (dm_control renders and Pong stacks, the benchmarks'
caches), with the libzstd the native layer loads, through ctypes, one core:

* the bytes: whole-chunk frames against one block per item (level 3, no dictionary);
* per chunk, the best of ``--repeats`` passes over all chunks: one-shot decode of each layout,
  and the prefix decode of the first ``k`` items for every ``k``;
* what a stack read would cost: a stack of ``depth`` frames and the next frame (``depth + 1``
  consecutive frames, the obs and next obs of a transition) starting at each position of a chunk
  with equal odds: whole chunks one-shot against the needed prefixes (a stack that crosses into
  the next chunk needs all of this one and a prefix of the next).

The ctypes call per block (~1 µs) is counted against the prefix decode: a native kernel would
not pay it, so the prefix figures are an upper bound by about ``k`` µs.

    .venv/bin/python tools/bench_partial_decode.py --out results/bench_partial_decode.json
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, md_table, save_results

ensure_importable()

_VP, _SZ = ctypes.c_void_p, ctypes.c_size_t
_FLUSH, _END = 1, 2  # ZSTD_e_flush, ZSTD_e_end
_LEVEL = 100  # ZSTD_c_compressionLevel


class _Buf(ctypes.Structure):
    _fields_ = [("dst", _VP), ("size", _SZ), ("pos", _SZ)]


class Zstd:
    """The few libzstd calls this measurement makes (one compression and one decompression context)."""

    def __init__(self, level: int) -> None:
        from chunkstore.native import _lib

        lib = ctypes.CDLL(_lib.candidates()[0])
        for name, res, args in [
            ("ZSTD_createCCtx", _VP, []), ("ZSTD_createDCtx", _VP, []),
            ("ZSTD_CCtx_setParameter", _SZ, [_VP, ctypes.c_int, ctypes.c_int]),
            ("ZSTD_CCtx_reset", _SZ, [_VP, ctypes.c_int]),
            ("ZSTD_CCtx_setPledgedSrcSize", _SZ, [_VP, ctypes.c_ulonglong]),
            ("ZSTD_compress2", _SZ, [_VP, _VP, _SZ, _VP, _SZ]),
            ("ZSTD_compressStream2", _SZ, [_VP, ctypes.POINTER(_Buf), ctypes.POINTER(_Buf), ctypes.c_int]),
            ("ZSTD_decompressDCtx", _SZ, [_VP, _VP, _SZ, _VP, _SZ]),
            ("ZSTD_decompressBegin", _SZ, [_VP]), ("ZSTD_nextSrcSizeToDecompress", _SZ, [_VP]),
            ("ZSTD_decompressContinue", _SZ, [_VP, _VP, _SZ, _VP, _SZ]), ("ZSTD_isError", ctypes.c_uint, [_SZ]),
        ]:
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        self.lib, self.cctx, self.dctx = lib, lib.ZSTD_createCCtx(), lib.ZSTD_createDCtx()
        self._ok(lib.ZSTD_CCtx_setParameter(self.cctx, _LEVEL, level))
        self.out = ctypes.create_string_buffer(1 << 23)
        self.dst = np.empty(1 << 23, np.uint8)

    def _ok(self, ret: int) -> int:
        if self.lib.ZSTD_isError(ret):
            raise RuntimeError(f"libzstd error {ret}")
        return ret

    def whole(self, raw: np.ndarray) -> bytes:
        """One zstd frame of the chunk, as the store writes it."""
        self._ok(self.lib.ZSTD_CCtx_reset(self.cctx, 1))
        n = self._ok(self.lib.ZSTD_compress2(self.cctx, self.out, len(self.out), raw.ctypes.data, raw.nbytes))
        return ctypes.string_at(self.out, n)

    def blocks(self, raw: np.ndarray, items: int) -> bytes:
        """One zstd frame of the chunk with a block boundary after every item."""
        lib = self.lib
        self._ok(lib.ZSTD_CCtx_reset(self.cctx, 1))
        self._ok(lib.ZSTD_CCtx_setPledgedSrcSize(self.cctx, raw.nbytes))
        ob = _Buf(ctypes.cast(self.out, _VP), len(self.out), 0)
        step = raw.nbytes // items
        for i in range(items):
            ib = _Buf(raw.ctypes.data + i * step, step, 0)
            left = self._ok(lib.ZSTD_compressStream2(self.cctx, ctypes.byref(ob), ctypes.byref(ib),
                                                     _END if i == items - 1 else _FLUSH))
            if left or ib.pos != step:
                raise RuntimeError("the output buffer is too small")
        return ctypes.string_at(self.out, ob.pos)

    def decode(self, blob: bytes) -> int:
        return self._ok(self.lib.ZSTD_decompressDCtx(self.dctx, self.dst.ctypes.data, self.dst.size, blob, len(blob)))

    def decode_prefix(self, blob: bytes, need: int) -> int:
        """Decode block by block until ``need`` bytes are out; the bytes decoded."""
        lib, dctx = self.lib, self.dctx
        self._ok(lib.ZSTD_decompressBegin(dctx))
        src = ctypes.cast(ctypes.c_char_p(blob), _VP).value or 0
        used = made = 0
        while made < need:
            n = lib.ZSTD_nextSrcSizeToDecompress(dctx)
            if n == 0:
                break
            made += self._ok(lib.ZSTD_decompressContinue(dctx, self.dst.ctypes.data + made, self.dst.size - made,
                                                         src + used, n))
            used += n
        return made


def _best_us(fn: Any, chunks: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best / chunks * 1e6


def measure(z: Zstd, name: str, frames: np.ndarray, chunk_len: int, depth: int, repeats: int) -> dict[str, Any]:
    n = len(frames) // chunk_len
    raws = [np.ascontiguousarray(frames[i * chunk_len:(i + 1) * chunk_len]).reshape(-1) for i in range(n)]
    one = [z.whole(r) for r in raws]
    per = [z.blocks(r, chunk_len) for r in raws]
    item = raws[0].nbytes // chunk_len
    for r, b in zip(raws[:4], per[:4], strict=True):  # the block layout decodes to the same bytes
        assert z.decode(b) == r.nbytes and np.array_equal(z.dst[:r.nbytes], r)
        assert z.decode_prefix(b, item) >= item and np.array_equal(z.dst[:item], r[:item])
    whole_us = _best_us(lambda: [z.decode(b) for b in one], n, repeats)
    blocks_us = _best_us(lambda: [z.decode(b) for b in per], n, repeats)
    prefix_us = [_best_us(lambda k=k: [z.decode_prefix(b, k * item) for b in per], n, repeats)
                 for k in range(1, chunk_len + 1)]
    span = depth + 1  # obs stack and next obs: consecutive frames
    now, partial = [], []
    for p in range(chunk_len):  # the stack's first frame at position p of a chunk
        end = p + span  # frames p..end-1, possibly into the following chunks
        full, rest = divmod(end, chunk_len)
        now.append(whole_us * (full + (rest > 0)))
        partial.append(whole_us * full + (prefix_us[rest - 1] if rest else 0.0))
    raw_bytes, one_bytes, per_bytes = sum(r.nbytes for r in raws), sum(map(len, one)), sum(map(len, per))
    return {"frames": name, "chunk_len": chunk_len, "item_bytes": item, "ratio_whole": raw_bytes / one_bytes,
            "ratio_blocks": raw_bytes / per_bytes, "bytes_blocks_vs_whole": per_bytes / one_bytes,
            "whole_us": whole_us, "blocks_whole_us": blocks_us, "prefix_us": prefix_us,
            "stack_now_us": float(np.mean(now)), "stack_prefix_us": float(np.mean(partial)),
            "stack_prefix_vs_now": float(np.mean(partial) / np.mean(now))}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=25, help="passes over the chunks (least time kept)")
    parser.add_argument("--level", type=int, default=3)
    parser.add_argument("--out", default=None, help="JSON file (a .md table is written beside it)")
    args = parser.parse_args(argv)

    import dmc_data
    from atari_data import collect_stacked

    z = Zstd(args.level)
    rows = []
    for domain, task in (("cheetah", "run"), ("walker", "walk")):
        fr = dmc_data.collect(domain, task).frames  # (n, 84, 84, 3) uint8, rendered
        rows.append(measure(z, f"dm_control {domain}-{task} RGB (3, 84, 84)", fr.transpose(0, 3, 1, 2), 8, 3,
                            args.repeats))
    pong = collect_stacked("Pong", 1500, seed=0).obs[:, 0, -1]  # the newest frame of each stack
    rows.append(measure(z, "Pong (84, 84)", pong, 4, 4, args.repeats))
    for r in rows:
        r["prefix"] = " / ".join(f"{v:.0f}" for v in r["prefix_us"])
    md = ["## Decoding a chunk's needed prefix against the whole chunk (libzstd through ctypes, one core)", "",
          f"zstd level {args.level}, no dictionary; best of {args.repeats} passes; µs per chunk. `prefix`: the first "
          "1, 2, ... items of a chunk written one block per item, decoded block by block. `stack read`: the "
          "expected decode cost of a transition's obs + next obs (depth + 1 consecutive frames) starting "
          "anywhere in a chunk.", "",
          md_table(rows, [("frames", "frames"), ("chunk_len", "chunk"), ("ratio_whole", "ratio (whole)"),
                          ("ratio_blocks", "ratio (a block per item)"), ("whole_us", "one-shot µs"),
                          ("blocks_whole_us", "one-shot, block layout µs"), ("prefix", "prefix 1..n µs"),
                          ("stack_now_us", "stack read now µs"), ("stack_prefix_us", "stack read, prefixes µs"),
                          ("stack_prefix_vs_now", "prefixes / now")])]
    print("\n".join(md))
    payload = {"config": vars(args), "rows": rows}
    save_results(args.out, payload, "\n".join(md))
    return payload


if __name__ == "__main__":
    main()
