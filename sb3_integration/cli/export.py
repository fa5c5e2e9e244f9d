"""``chunkstore-export``: stored observations as images: a range to PNG files, or a range/episode to a GIF.

    chunkstore-export buffer.h5                                # the first stored frame
    chunkstore-export buffer.h5 --start 1000 --stop 1010 --out frames/
    chunkstore-export buffer.h5 --obs --start 500 --stop 504   # rebuilt observation stacks
    chunkstore-export buffer.h5 --obs --episode 3 --gif episode3.gif --scale 3

Without ``--array`` the tool takes ``observations`` or, in a saved replay buffer, its
observation frames (``observations/frames``: each distinct frame once, env after env).
``--obs`` exports whole observations of a replay buffer instead, rebuilt from its frames
and saved frame index by the buffer class itself (rows are transitions of env ``--env``;
``--next`` for next observations, ``--key`` for a Dict space). A range beyond the items
written is refused.

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
from tqdm import tqdm

from chunkstore import hdf5
from sb3_integration.cli._store_io import (
    CORRUPT,
    OK,
    UNREADABLE,
    buffer_arguments,
    buffer_keys,
    guarded,
    is_buffer,
    open_buffer,
    written_items,
)

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
    small = store.arrays.get("transitions")  # a buffer's small arrays in chunks (small_arrays="compressed")
    if "dones" in extras:
        dones = np.asarray(extras["dones"])
    elif small is not None and small.dtype.names and "dones" in small.dtype.names:
        dones = np.asarray(small)["dones"]
    else:
        raise ExportError("--episode needs an 'episode' or 'dones' extra in the file; "
                          f"it has {sorted(extras) or 'none'}")
    dones = dones[:, env or 0] if dones.ndim == 2 else dones.reshape(len(dones), -1)[:, 0]
    ends = np.flatnonzero(dones) + 1
    state = {**store.attrs, **{k: extras[k] for k in ("pos", "full") if k in extras}}
    full = bool(state["full"]) if "full" in state else True
    last = int(state["pos"]) if "pos" in state and not full else len(dones)
    bounds = np.r_[0, ends[ends < last], last]
    bounds = bounds[np.r_[True, np.diff(bounds) > 0]]
    if not 0 <= episode < len(bounds) - 1:
        raise ExportError(f"episode {episode} does not exist: {len(bounds) - 1} episode(s) "
                          "in the 'dones' extra")
    return int(bounds[episode]), int(bounds[episode + 1])


def _image(frame: np.ndarray, scale: int) -> Any:
    from PIL import Image

    # Pillow infers L from (H, W) uint8 and RGB from (H, W, 3): no deprecated mode argument
    img = Image.fromarray(np.ascontiguousarray(frame))
    if scale > 1:
        img = img.resize((img.width * scale, img.height * scale), Image.Resampling.NEAREST)
    return img


def pick_array(store: Any, wanted: str | None) -> str:
    """The array to export: ``wanted``, else ``observations``, else a buffer's frames."""
    names = sorted(store.arrays)
    if wanted is not None:
        if wanted not in store.arrays:
            raise ExportError(f"no chunked array {wanted!r}; the file has {names}")
        return wanted
    if "observations" in store.arrays:
        return "observations"
    frames = [n for n in names if n.startswith("observations") and n.endswith("/frames")]
    if frames or len(names) == 1:
        return (frames or names)[0]
    raise ExportError(f"which array? pass --array, one of {names}" if names
                      else "the file holds no chunked arrays to export")


def _range(args: argparse.Namespace, store: Any, length: int) -> tuple[int, int]:
    if args.episode is not None:
        if is_buffer(store) and not args.obs:
            raise ExportError("--episode counts transitions of a replay buffer: add --obs")
        return episode_range(store, args.episode, args.env)
    start = args.start
    stop = args.stop if args.stop is not None else start + (100 if args.gif else 1)
    if not 0 <= start < stop <= length:
        raise ExportError(f"range [{start}, {stop}) is outside the {length} items there are")
    return start, stop


def _item_range(args: argparse.Namespace, store: Any, name: str) -> np.ndarray:
    """Items [start, stop) of array ``name``, refusing items never written (not black images)."""
    arr = store.arrays[name]
    start, stop = _range(args, store, len(arr))
    written = written_items(arr)
    missing = np.flatnonzero(~written[start:stop])
    if len(missing):
        held = np.flatnonzero(written)
        span = f"items {held[0]}..{held[-1]} are in stored chunks" if len(held) else "no item is"
        raise ExportError(f"{name}: item {start + int(missing[0])} was never written ({span}); "
                          "pick a range of written items")
    args.first = start
    return arr[start:stop]


def _observation_range(args: argparse.Namespace, store: Any) -> np.ndarray:
    """Observations (or next observations) of a saved buffer, rebuilt by the buffer itself."""
    if not is_buffer(store):
        raise ExportError("--obs needs a saved replay buffer (CompressedReplayBuffer.save)")
    keys = {k.key: k for k in buffer_keys(store)}
    key = args.key if args.key is not None else next(iter(keys), None)
    if key not in keys:
        raise ExportError(f"no observation key {key!r}; the buffer has {sorted(map(str, keys))}")
    a = buffer_arguments(store)
    size, n_envs = int(a["buffer_size"]), int(a["n_envs"])
    live = size if store.attrs["full"] else int(store.attrs["pos"])
    env = args.env or 0
    if not 0 <= env < n_envs:
        raise ExportError(f"--env {env}: the buffer has {n_envs} env(s)")
    start, stop = _range(args, store, size)
    if stop > live:
        raise ExportError(f"transition {live if start < live else start} was never written: "
                          f"the buffer holds transitions 0..{live - 1}" if live else
                          "the buffer holds no transitions")
    args.first, args.env = start, None  # the env axis is already chosen
    bk = keys[key]
    if bk.axis is not None and bk.width == 1:  # stacks of gray frames
        args.layout_hint = "stack-first" if bk.axis == 0 else "stack-last"
    buf = open_buffer(args.file, store)
    try:
        view = buf.next_observations if args.next else buf.observations
        view = view if key is None else view[key]
        return np.asarray(view[np.arange(start, stop), env])
    finally:
        buf.close()


def _frame_layout(axis: int | None, width: int) -> str | None:
    """How one frame of a buffer's stacks is drawn: a gray or RGB slice along the stack axis."""
    if axis is None or width not in (1, 3):
        return None  # whole observations, or an unusual width: guess from the shape
    if width == 1:
        return "stack-first" if axis == 0 else "gray"
    return "rgb-first" if axis == 0 else "rgb"


def export(args: argparse.Namespace) -> list[str]:
    """Write the images; return the paths written."""
    with hdf5.load(args.file, lazy=True) as store:
        if args.obs:
            data = _observation_range(args, store)
            name = "next_observations" if args.next else "observations"
            name += "" if args.key is None else f"_{args.key}"
        else:
            name = pick_array(store, args.array)
            data = _item_range(args, store, name)
            keys = [k for k in buffer_keys(store) if k.frames == name] if is_buffer(store) else []
            if keys:  # one frame of a stack: (width, H, W) or (H, W, width)
                args.layout_hint = _frame_layout(keys[0].axis, keys[0].width)
    start = args.first
    if args.env is not None:
        if data.ndim < 3 or not 0 <= args.env < data.shape[1]:
            raise ExportError(f"--env {args.env}: items of shape {data.shape[1:]} have no such "
                              "leading env axis")
        data = data[:, args.env]
    layout = args.layout
    if layout == "auto":
        layout = getattr(args, "layout_hint", None) or guess_layout(data.shape[1:])
    pixels, note = to_uint8(data)
    if note:
        print(f"note: {note}", file=sys.stderr)
    stack = args.stack or ("last" if args.gif else "side")
    if args.gif and stack == "split":
        raise ExportError("--stack split makes several images per item; a GIF needs one")
    name = name.replace("/", "_")
    written: list[str] = []
    gif_frames: list[Any] = []
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


def main(argv: list[str] | None = None, prog: str = "chunkstore-export") -> int:
    """Run ``chunkstore-export`` on ``argv`` (default: the command line); return the exit status."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("file", help="a file written by chunkstore.hdf5.save (or a buffer's save)")
    p.add_argument("--array", help="chunked array (default: observations, or a buffer's frames)")
    p.add_argument("--obs", action="store_true", help="a replay buffer's observations, rebuilt "
                   "from its frames: items are transitions")
    p.add_argument("--next", action="store_true", help="with --obs: the next observations")
    p.add_argument("--key", help="with --obs: the key of a Dict observation space")
    p.add_argument("--start", type=int, default=0, help="first item (default: 0)")
    p.add_argument("--stop", type=int, help="end of the range (default: start+1, GIF: start+100)")
    p.add_argument("--episode", type=int, help="export the Nth episode (0-based) instead")
    p.add_argument("--env", type=int, help="items are (n_envs, ...): export env E (it also "
                   "picks the column of 2-D dones/episode extras, and the env of --obs)")
    p.add_argument("--out", default=".", help="directory for PNG files (default: .)")
    p.add_argument("--gif", help="write one animated GIF here instead of PNGs")
    p.add_argument("--fps", type=float, default=15.0, help="GIF frame rate (default: 15)")
    p.add_argument("--layout", choices=LAYOUTS, default="auto", help="how items are laid out")
    p.add_argument("--stack", choices=("side", "split", "last"),
                   help="draw a stack side by side, one image per frame, or its newest frame")
    p.add_argument("--scale", type=int, default=1, help="integer upscaling (nearest)")
    args = p.parse_args(argv)
    try:
        import PIL  # noqa: F401
    except ImportError:
        print("export: writing images needs Pillow: pip install pillow (or pip install "
              "'chunkstore-rl[tools]')", file=sys.stderr)
        return UNREADABLE
    return guarded("export", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    if not args.gif:
        os.makedirs(args.out, exist_ok=True)
    try:
        written = export(args)
    except ExportError as e:
        print(f"export: {e}", file=sys.stderr)
        return CORRUPT  # 1: the request cannot be satisfied
    print(f"wrote {len(written)} file(s)" + (f": {written[0]}" if len(written) == 1 else
                                             f" to {args.gif or args.out}"))
    return OK


if __name__ == "__main__":
    sys.exit(main())
