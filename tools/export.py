"""Export stored observations as images: a range to PNG files, or a range/episode to a GIF.

    python tools/export.py buffer.h5 --start 1000 --stop 1010 --out frames/
    python tools/export.py buffer.h5 --episode 3 --gif episode3.gif --scale 3

Items may be grayscale (H, W) or (H, W, 1), RGB (H, W, 3) or (3, H, W), or
stacks of frames: channel-first (k, H, W), channel-last (H, W, k), or
(k, H, W, 3). A stack becomes k frames side by side (``--stack side``), one PNG
per frame (``split``), or only its newest frame (``last``, the GIF default).
``--layout`` overrides the guess. Float and non-uint8 integer observations are
scaled to 0..255 (a note says how). Episodes come from an ``episode`` extra
(an episode id per item) or a ``dones`` extra (``--env`` picks a column).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np
from PIL import Image
from tqdm import tqdm

from chunkstore import format as fmt
from chunkstore.errors import FormatError

LAYOUTS = ("auto", "gray", "rgb", "rgb-first", "stack-first", "stack-last")


class ExportError(Exception):
    """A request this tool cannot satisfy; the message says why."""


def guess_layout(item_shape: tuple[int, ...]) -> str:
    """How to draw an item of this shape (see the module docstring)."""
    s = item_shape
    if len(s) == 2:
        return "gray"
    if len(s) == 3:
        if s[2] in (1, 3):
            return "gray" if s[2] == 1 else "rgb"
        if s[0] == 3 and s[2] > 4:
            return "rgb-first"
        if s[0] <= 16 and min(s[1:]) > 16:
            return "stack-first"
        if s[2] <= 16 and min(s[:2]) > 16:
            return "stack-last"
    if len(s) == 4 and s[3] in (1, 3):
        return "stack-first"
    raise ExportError(f"cannot tell how to draw items of shape {s}; pass --layout")


def frames_of(item: np.ndarray, layout: str) -> list[np.ndarray]:
    """The frames (H, W) or (H, W, 3) of one uint8 item."""
    if layout == "gray":
        return [item.reshape(item.shape[:2])]
    if layout == "rgb":
        return [item]
    if layout == "rgb-first":
        return [np.moveaxis(item, 0, -1)]
    if layout == "stack-first":
        return [f[..., 0] if f.ndim == 3 and f.shape[-1] == 1 else f for f in item]
    if layout == "stack-last":
        return [item[..., k] for k in range(item.shape[-1])]
    raise ExportError(f"unknown layout {layout!r}")


def to_uint8(x: np.ndarray) -> tuple[np.ndarray, str | None]:
    """``x`` as uint8 pixels, and a note when values had to be scaled."""
    if x.dtype == np.uint8:
        return x, None
    if x.dtype == np.bool_:
        return x.astype(np.uint8) * 255, "boolean observations drawn as 0/255"
    v = np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    lo, hi = (float(v.min()), float(v.max())) if v.size else (0.0, 0.0)
    if x.dtype.kind == "f" and lo >= 0.0 and hi <= 1.0:
        return np.round(v * 255).astype(np.uint8), f"{x.dtype} observations in [0, 1] scaled by 255"
    if x.dtype.kind in "iu" and lo >= 0 and hi <= 255:
        return v.astype(np.uint8), None
    scaled = (v - lo) / (hi - lo) * 255 if hi > lo else np.zeros_like(v)
    return (np.round(scaled).astype(np.uint8),
            f"{x.dtype} observations scaled from [{lo:g}, {hi:g}] to 0..255 (this range only)")


def compose(frames: list[np.ndarray], stack: str) -> list[np.ndarray]:
    """The images of one item: frames side by side, each alone, or the newest one."""
    if stack == "side":
        return [np.concatenate(frames, axis=1)]
    if stack == "last":
        return [frames[-1]]
    return frames


def episode_range(store: Any, episode: int, env: int | None) -> tuple[int, int]:
    """[start, stop) of the ``episode``-th episode (0-based), from the extras."""
    extras = store.extras
    if "episode" in extras:
        ids = np.asarray(extras["episode"])
        ids = ids[:, env or 0] if ids.ndim == 2 else ids
        where = np.flatnonzero(ids == episode)
        if not len(where):
            raise ExportError(f"no item has episode id {episode}")
        if np.any(np.diff(where) != 1):
            raise ExportError(f"episode {episode} is not one contiguous range of items")
        return int(where[0]), int(where[-1]) + 1
    if "dones" not in extras:
        raise ExportError("--episode needs an 'episode' or 'dones' extra in the file; "
                          f"it has {sorted(extras) or 'none'}")
    dones = np.asarray(extras["dones"])
    dones = dones[:, env or 0] if dones.ndim == 2 else dones.reshape(len(dones), -1)[:, 0]
    ends = np.flatnonzero(dones) + 1
    full = bool(extras["full"]) if "full" in extras else True
    last = int(extras["pos"]) if "pos" in extras and not full else len(dones)
    bounds = np.r_[0, ends[ends < last], last]
    bounds = bounds[np.r_[True, np.diff(bounds) > 0]]
    if not 0 <= episode < len(bounds) - 1:
        raise ExportError(f"episode {episode} does not exist: {len(bounds) - 1} episode(s) "
                          "in the 'dones' extra")
    return int(bounds[episode]), int(bounds[episode + 1])


def _image(frame: np.ndarray, scale: int) -> Image.Image:
    img = Image.fromarray(np.ascontiguousarray(frame), "RGB" if frame.ndim == 3 else "L")
    return img.resize((img.width * scale, img.height * scale), Image.NEAREST) if scale > 1 else img


def export(args: argparse.Namespace) -> list[str]:
    """Write the images; return the paths written."""
    with fmt.load(args.file, lazy=True) as store:
        if args.array not in store.arrays:
            raise ExportError(f"no chunked array {args.array!r}; the file has "
                              f"{sorted(store.arrays)}")
        arr = store.arrays[args.array]
        if args.episode is not None:
            start, stop = episode_range(store, args.episode, args.env)
        else:
            start = args.start
            stop = args.stop if args.stop is not None else start + (100 if args.gif else 1)
        stop = min(stop, len(arr))
        if not 0 <= start < stop:
            raise ExportError(f"empty range [{start}, {stop}) for {args.array} of {len(arr)} items")
        data = arr[start:stop]
    if args.env is not None:
        if data.ndim < 3 or not 0 <= args.env < data.shape[1]:
            raise ExportError(f"--env {args.env}: items of shape {data.shape[1:]} have no such "
                              "leading env axis")
        data = data[:, args.env]
    layout = guess_layout(data.shape[1:]) if args.layout == "auto" else args.layout
    pixels, note = to_uint8(data)
    if note:
        print(f"note: {note}", file=sys.stderr)
    stack = args.stack or ("last" if args.gif else "side")
    if args.gif and stack == "split":
        raise ExportError("--stack split makes several images per item; a GIF needs one")
    name = args.array.replace("/", "_")
    written: list[str] = []
    gif_frames: list[Image.Image] = []
    for k, item in enumerate(tqdm(pixels, desc="export", unit="item", disable=None, leave=False)):
        images = compose(frames_of(item, layout), stack)
        if args.gif:
            gif_frames.append(_image(images[0], args.scale))
            continue
        for j, img in enumerate(images):
            suffix = f"_{j}" if len(images) > 1 else ""
            path = os.path.join(args.out, f"{name}_{start + k:07d}{suffix}.png")
            _image(img, args.scale).save(path)
            written.append(path)
    if args.gif:
        gif_frames[0].save(args.gif, save_all=True, append_images=gif_frames[1:],
                           duration=max(1, round(1000 / args.fps)), loop=0)
        written.append(args.gif)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="export.py", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("file", help="a file written by chunkstore.format.save")
    p.add_argument("--array", default="observations", help="chunked array (default: %(default)s)")
    p.add_argument("--start", type=int, default=0, help="first item (default: 0)")
    p.add_argument("--stop", type=int, help="end of the range (default: start+1, GIF: start+100)")
    p.add_argument("--episode", type=int, help="export the Nth episode (0-based) instead")
    p.add_argument("--env", type=int, help="items are (n_envs, ...): export env E (it also "
                   "picks the column of 2-D dones/episode extras)")
    p.add_argument("--out", default=".", help="directory for PNG files (default: .)")
    p.add_argument("--gif", help="write one animated GIF here instead of PNGs")
    p.add_argument("--fps", type=float, default=15.0, help="GIF frame rate (default: 15)")
    p.add_argument("--layout", choices=LAYOUTS, default="auto", help="how items are laid out")
    p.add_argument("--stack", choices=("side", "split", "last"),
                   help="draw a stack side by side, one image per frame, or its newest frame")
    p.add_argument("--scale", type=int, default=1, help="integer upscaling (nearest)")
    args = p.parse_args(argv)
    if not args.gif:
        os.makedirs(args.out, exist_ok=True)
    try:
        written = export(args)
    except (FormatError, OSError) as e:
        print(f"export: cannot read {args.file}: {e}", file=sys.stderr)
        return 2
    except ExportError as e:
        print(f"export: {e}", file=sys.stderr)
        return 1
    print(f"wrote {len(written)} file(s)" + (f": {written[0]}" if len(written) == 1 else
                                             f" to {args.gif or args.out}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
