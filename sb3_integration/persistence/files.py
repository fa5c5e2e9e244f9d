"""Save a compressed replay buffer to one HDF5 file and load it back, bit-exactly.

``buffer.save(path)`` and ``CompressedReplayBuffer.load(path, device=...)`` (the
same on :class:`~sb3_integration.CompressedDictReplayBuffer` and
:class:`~sb3_integration.CompressedNStepReplayBuffer`) live on the buffers. A
buffer says what it is as a :class:`ReplayState` (its arguments, position, SB3's
small arrays, and a :class:`~sb3_integration.engine.frames.FrameStoreState` per
observation key); this module only writes and reads such states. The file is a
:mod:`chunkstore.hdf5` file; nothing in it is pickled:

``observations/frames``
    The frame ChunkedArray, chunks copied verbatim (Dict spaces: ``observations/<key>/frames``).
``observations/slots``, ``pads``
    Stack descriptors ``[which, row, env]``: the global number (mod 2**32) of each
    stack's newest frame, and its count of leading zero frames (layout version 2;
    version 1 files held ring positions and are converted when loaded).
``observations/last``, ``has_last``
    Each env's last stack (what dedup compares the next one with).
``observations/heads``, ``released``, ``last_slot``, ``last_pad``
    Each env's frame stream (int64).
``observations/pending_which``, ``pending_rows``, ``pending_obs``
    Stacks still waiting for layout detection.
``observations/raw`` (Dict spaces: ``observations/<key>/raw``)
    A raw key's SB3 arrays (:mod:`sb3_integration.persistence._raw_keys`); files with one are version 3.
``actions``, ``rewards``, ``dones``, ``timeouts``
    SB3's own arrays, as they are.
``extra/<name>``
    A subclass's own arrays (HER: ``ep_start``, ``ep_length``, ...), named in the
    ``arrays`` attribute beside SB3's; its constructor arguments are among ``arguments``.
attrs (JSON)
    ``buffer_format`` and its version, the class name, the constructor arguments
    (spaces as ``space_to_dict``, codec name, chunk_len, cache bytes), ``pos``,
    ``full``, and each frame store's scalars (layout, ring size).

With plain zstd chunks (``zstd3``; also the default ``zstd3+dict`` until it has
trained its dictionary, after 8 MiB of frames) plain ``h5py`` + ``hdf5plugin``
read ``f["observations/frames"][a:b]``: the distinct frames, each env's ring in
turn (see :mod:`sb3_integration.engine.frames`). Chunks that need chunkstore (a trained
dictionary, lz4, rle, blosc2) make plain h5py raise an error, never return garbage.

Saving flushes the open chunks (the partial chunk each env is writing is
sealed; the next ``add()`` reopens it, reads are unchanged). Loading with
``lazy=True`` maps the file and decodes chunks from it on demand, checking
each chunk's CRC32 on its first read and after any change of the file's
ctime (``verify="always"``: every read); chunks written afterwards go to RAM (or
``tier``). ``lazy=False`` copies every chunk into RAM, checking it. Saving to
the file a buffer was lazily loaded from is safe (temporary file + rename).

Resuming training bit-identically
---------------------------------
The buffer file restores the buffer exactly: the same samples for the same ``np.random`` state,
before and after further ``add()`` calls. SB3's ``model.save`` does not restore the random-number
generators nor the environment; the manual's "Saving and files" page has the recipe that does (a
resumed run equal to an uninterrupted one), run by the tests.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkstore import ChunkedArray, ChunkstoreError, FormatError, Tier
from chunkstore import hdf5 as fmt
from chunkstore.array import ArraySnapshot
from chunkstore.validate import is_int
from sb3_integration.engine.frame_state import FAR, UNWRITTEN, FrameStoreState, check_own_state
from sb3_integration.engine.raw import RAW, RawStoreState
from sb3_integration.engine.stacking import StackLayout
from sb3_integration.persistence._load_checks import check_saved_buffer
from sb3_integration.persistence._raw_keys import raw_note, raw_state
from sb3_integration.persistence.priorities import saved_priorities

__all__ = ["BUFFER_FORMAT", "BUFFER_FORMAT_VERSION", "ReplayState", "read_replay",
           "saved_state_problems", "write_replay"]

#: the ``buffer_format`` attribute of a saved replay buffer
BUFFER_FORMAT = "sb3_integration.replay_buffer"
#: version of the layout above (the chunkstore file format has its own). 3: as 2, and some keys
#: are raw (``observations[/<key>]/raw``, see below; a file without raw keys is written as 2);
#: 2: slots hold global frame numbers; 1: ring positions in a ring of the worst-case size
BUFFER_FORMAT_VERSION = 3
#: per-env stream state of a FrameStore, saved as int64 extras
_STREAMS = ("heads", "released", "last_slot", "last_pad")


@dataclass
class ReplayState:
    """What a compressed replay buffer is, as data: written and read by this module.

    ``arguments`` are JSON-able constructor arguments (spaces as dicts);
    ``arrays`` are SB3's small arrays by name (and any a subclass adds);
    ``stores`` the frame store state of each observation key (None for a
    non-Dict space); ``extra`` JSON-able values a subclass adds; ``chunked``
    arrays kept in compressed chunks (SB3's small arrays of a large buffer).
    """

    buffer_class: str
    arguments: dict[str, Any]
    pos: int
    full: bool
    arrays: dict[str, np.ndarray]
    stores: dict[Any, FrameStoreState | RawStoreState]
    extra: dict[str, Any] = field(default_factory=dict)
    #: small arrays kept compressed (ChunkedArray or ArraySnapshot)
    chunked: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        """Release the snapshots' hold on the buffer's tiers (a state from a file holds none)."""
        for fs in self.stores.values():
            fs.close()
        for arr in self.chunked.values():
            if isinstance(arr, ArraySnapshot):
                arr.close()

    def __enter__(self) -> ReplayState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- saving ----------------------------------------------------------------------------
def write_replay(path: str | os.PathLike[str], state: ReplayState, *, progress: bool = False) -> None:
    """Write ``state`` to ``path`` atomically (see the module docstring)."""
    arrays: dict[str, Any] = dict(state.chunked)  # ChunkedArray or ArraySnapshot by name
    extras: dict[str, np.ndarray] = dict(state.arrays)
    stores = []
    for key, fs in state.stores.items():
        prefix = _prefix(key)
        if isinstance(fs, RawStoreState):  # SB3's arrays, as they are: one extra (kinds of stack first)
            extras[f"{prefix}/raw"] = np.stack(fs.arrays) if len(fs.arrays) > 1 else fs.arrays[0][None]
            stores.append([key, fs.scalars()])
            continue
        if fs.frames is not None:
            arrays[f"{prefix}/frames"] = fs.frames
            assert fs.last is not None
            extras[f"{prefix}/last"] = fs.last
        for name in ("slots", "deltas", "far", "pads", "has_last", *_STREAMS):
            extras[f"{prefix}/{name}"] = getattr(fs, name)
        if fs.pending:
            extras[f"{prefix}/pending_which"] = np.array([w for w, _, _ in fs.pending], np.int64)
            extras[f"{prefix}/pending_rows"] = np.array([r for _, r, _ in fs.pending], np.int64)
            extras[f"{prefix}/pending_obs"] = np.stack([x for _, _, x in fs.pending])
        stores.append([key, fs.scalars()])
    attrs = {
        "buffer_format": BUFFER_FORMAT,
        # a file with raw keys is version 3 (older readers refuse it by its version); one without stays 2
        "buffer_format_version": (BUFFER_FORMAT_VERSION if any(isinstance(fs, RawStoreState)
                                                               for fs in state.stores.values()) else 2),
        "buffer_class": state.buffer_class,
        "arguments": state.arguments,
        "pos": state.pos,
        "full": state.full,
        "arrays": list(state.arrays),
        "chunked": list(state.chunked),
        "stores": stores,
        "extra": state.extra,
    }
    notes = [_rebuild_note(_prefix(key), fs) if isinstance(fs, FrameStoreState) else raw_note(_prefix(key), fs)
             for key, fs in state.stores.items()
             if not isinstance(fs, FrameStoreState) or fs.frames is not None]
    fmt.save(path, arrays, extras, attrs, progress=progress, reader_note="\n\n".join(notes) or None)


def _rebuild_note(p: str, fs: FrameStoreState) -> str:
    """How a plain HDF5 reader rebuilds the stacked observations of one key from its frames."""
    lay = fs.layout
    assert lay is not None  # frames exist only once the layout is known
    k, axis = lay.depth, lay.axis
    join = (f"concatenate the {k} frames along axis {axis} (each is {lay.width} wide there)"
            if axis is not None else "the stack is the single frame")
    nxt = (f" Next observation (kind 1): n = {p}/deltas[0, r, e]; if n < 255, g = g_obs + n; if n == 255, "
           f"the row [1, r, e, s] of {p}/far holds its slot s: g = h - ((h - s) mod 2**32)."
           if fs.stacks_per_row > 1 else "")
    return (f"Observations '{p}' ({fs.n_rows} rows x {fs.n_envs} envs, shape {list(fs.obs_shape)}, "
            f"{k} frames per stack): each distinct frame is stored once in {p}/frames, one region of "
            f"F = {fs.ring_frames} items per env. For row r and env e: h = {p}/heads[e], "
            f"s = {p}/slots[r, e], the newest frame's number g = h - ((h - s) mod 2**32).{nxt} "
            f"Frame j of the stack (j = 0..{k - 1}) is {p}/frames[e * F + (g - {k - 1} + j) mod F], "
            f"except that the first {p}/pads[kind, r, e] frames are zeros (kind 0: observation, "
            f"1: next observation; 255 = never written); {join}.")


def _prefix(key: Any) -> str:
    if key is None:
        return "observations"
    if not isinstance(key, str) or not key or "/" in key or key in (".", ".."):
        raise ValueError(f"observation key {key!r} cannot name an HDF5 group; use keys without '/'")
    return f"observations/{key}"


# -- loading ---------------------------------------------------------------------------
def read_replay(path: str | os.PathLike[str], buffer_class: str, *, lazy: bool = True,
                tier: Tier | None = None, verify: bool | str | None = None) -> tuple[ReplayState, fmt.Store]:
    """The state saved in ``path`` and the open HDF5 store (``h5``) its chunks come from.

    The caller closes ``h5`` if it does not keep the arrays.

    Raises
    ------
    FormatError
        Not a saved replay buffer, one of another class, an unknown layout
        version, or damaged buffer metadata.
    """
    path = os.fspath(path)
    h5 = fmt.load(path, lazy=lazy, tier=tier, cache=0, verify=verify)
    try:
        return read_state(h5, h5.attrs, buffer_class, path), h5
    except BaseException:
        h5.close()
        raise


def saved_state_problems(path: str | os.PathLike[str]) -> list[str]:
    """What :meth:`load` would refuse in the buffer state saved in ``path``, one message each.

    Reads no chunk: the sizes and ranges (:func:`check_saved_buffer`), then each frame
    store's state against the geometry it declares, consistency included
    (:func:`~sb3_integration.engine.frame_state.check_own_state`). ``chunkstore.hdf5.verify``
    calls it for every saved replay buffer.
    """
    path = os.fspath(path)
    with fmt.load(path, lazy=True, cache=0, verify=False) as h5:
        attrs = h5.attrs
        try:
            state = read_state(h5, attrs, str(attrs.get("buffer_class")), path)
            chunk_len = _int(state.arguments.get("chunk_len"), "chunk_len")
            for key, fs in state.stores.items():
                if isinstance(fs, FrameStoreState):  # (a raw state was checked when read)
                    check_own_state(fs, chunk_len=chunk_len,
                                    name="observations" if key is None else f"observations[{key}]")
            if "extra/priority_masses" in state.arrays:  # a prioritized buffer's index, as load() checks it
                saved_priorities({k[len("extra/"):]: v for k, v in state.arrays.items() if k.startswith("extra/")},
                                 rows=_int(state.arguments.get("buffer_size"), "buffer_size"),
                                 n_envs=_int(state.arguments.get("n_envs"), "n_envs"), pos=state.pos, full=state.full)
        except (FormatError, ValueError, TypeError, KeyError) as e:
            return [f"{path}: {e}" if path not in str(e) else str(e)]
    return []


def read_state(h5: fmt.Store, attrs: Mapping[str, Any], buffer_class: str, path: str) -> ReplayState:
    """The replay state in an open store, its sizes and ranges checked first (FormatError)."""
    version = _check_kind(attrs, buffer_class, path)
    check_saved_buffer(attrs, h5)  # sizes and state, before anything is allocated
    try:
        return _state(h5, attrs, version)
    except ChunkstoreError:
        raise
    except Exception as e:  # a crafted description that passed the checks above
        raise FormatError(f"{path}: damaged replay buffer description: {e!r}") from e


def _check_kind(attrs: Mapping[str, Any], buffer_class: str, path: str) -> int:
    kind = attrs.get("buffer_format")
    if kind != BUFFER_FORMAT:
        raise FormatError(f"{path} is a chunkstore file but not a saved replay buffer "
                          f"(buffer_format {kind!r}, expected {BUFFER_FORMAT!r})")
    version = attrs.get("buffer_format_version")
    if version not in (1, 2, BUFFER_FORMAT_VERSION):
        raise FormatError(f"{path} holds a replay buffer in layout version {version!r}; this "
                          f"sb3_integration reads versions 1..{BUFFER_FORMAT_VERSION} (upgrade chunkstore)")
    saved = attrs.get("buffer_class")
    if saved != buffer_class:
        raise FormatError(f"{path} holds a {saved}, not a {buffer_class}; load it with {saved}.load()")
    return int(version)


def _state(h5: fmt.Store, attrs: Mapping[str, Any], version: int) -> ReplayState:
    if version == 1:
        return _state_v1(h5, attrs)
    stores = {key: raw_state(_extra(h5, f"{_prefix(key)}/raw"), _prefix(key), meta) if meta.get("storage") == RAW
              else _store_state(h5, _prefix(key), meta) for key, meta in attrs["stores"]}
    return ReplayState(
        buffer_class=str(attrs["buffer_class"]), arguments=dict(attrs["arguments"]),
        pos=_int(attrs["pos"], "pos"), full=_bool(attrs["full"], "full"),
        arrays={name: _extra(h5, name) for name in attrs["arrays"]},
        stores=stores, extra=dict(attrs.get("extra") or {}),
        chunked={name: _chunked(h5, name) for name in attrs.get("chunked", [])},
    )


def _store_state(h5: fmt.Store, prefix: str, meta: Mapping[str, Any]) -> FrameStoreState:
    lay = meta["layout"]
    obs_shape = tuple(int(d) for d in meta["obs_shape"])
    layout = None if lay is None else StackLayout(obs_shape, lay["axis"], int(lay["width"]), int(lay["depth"]))
    n_pending = int(meta["pending"])
    pending = []
    if n_pending:
        which = _extra(h5, f"{prefix}/pending_which")
        rows = _extra(h5, f"{prefix}/pending_rows")
        obs = _extra(h5, f"{prefix}/pending_obs")
        if not len(which) == len(rows) == len(obs) == n_pending:
            raise FormatError(f"{h5.path}: {prefix} lists {n_pending} pending stacks, holds {len(obs)}")
        pending = [(int(w), int(r), x) for w, r, x in zip(which.tolist(), rows.tolist(), obs, strict=True)]
    return FrameStoreState(
        obs_shape=obs_shape, dtype=np.dtype(meta["dtype"]), n_rows=int(meta["n_rows"]),
        n_envs=int(meta["n_envs"]), stacks_per_row=int(meta["stacks_per_row"]), dedup=bool(meta["dedup"]),
        layout=layout, ring_frames=meta["ring_frames"],
        slots=_extra(h5, f"{prefix}/slots"), deltas=_extra(h5, f"{prefix}/deltas"),
        far=_extra(h5, f"{prefix}/far"), pads=_extra(h5, f"{prefix}/pads"),
        heads=_extra(h5, f"{prefix}/heads"), released=_extra(h5, f"{prefix}/released"),
        last_slot=_extra(h5, f"{prefix}/last_slot"), last_pad=_extra(h5, f"{prefix}/last_pad"),
        has_last=_extra(h5, f"{prefix}/has_last"),
        last=_extra(h5, f"{prefix}/last") if layout is not None else None,
        used=[bool(u) for u in meta["used"]], frames=h5.arrays.get(f"{prefix}/frames"),
        pending=pending,
    )


def _state_v1(h5: fmt.Store, attrs: Mapping[str, Any]) -> ReplayState:
    """A layout-1 file: arguments flat in the attrs, slots as positions in the ring, no deltas."""
    names = ("buffer_size", "n_envs", "optimize_memory_usage", "handle_timeout_termination",
             "observation_space", "action_space", "compression_method", "chunk_len", "cache_bytes",
             "frame_dedup")
    arguments = {name: attrs[name] for name in names}
    if attrs.get("nstep") is not None:
        arguments.update(attrs["nstep"])
    rows, n_envs = int(attrs["buffer_size"]), int(attrs["n_envs"])
    stores: dict[Any, FrameStoreState | RawStoreState] = {}
    for key, meta in attrs["stores"]:
        prefix = _prefix(key)
        spr = len(meta["used"])
        ring = _extra(h5, f"{prefix}/slots")  # (which, row, env): positions in the ring
        heads = _extra(h5, f"{prefix}/heads").astype(np.int64)
        F = int(meta["ring_frames"] or 1)
        newest = heads - 1 - ((heads - 1 - ring.astype(np.int64)) % F)  # global frame numbers
        pads = _extra(h5, f"{prefix}/pads")
        delta = newest[1:] - newest[:1]
        written = (pads[1:] != UNWRITTEN) & (pads[:1] != UNWRITTEN)
        far_mask = written & ((delta < 0) | (delta >= FAR))
        w, r, e = np.nonzero(far_mask)
        far = np.stack([w + 1, r, e, newest[1:][far_mask] % (1 << 32)], axis=1).astype(np.int64)
        extras = {**h5.extras, f"{prefix}/slots": (newest[0] % (1 << 32)).astype(np.uint32),
                  f"{prefix}/deltas": np.where(far_mask | ~written, FAR, delta.clip(0, FAR)).astype(np.uint8),
                  f"{prefix}/far": far.reshape(-1, 4)}
        view = fmt.Store(h5.arrays, extras, h5.attrs, h5.path)
        stores[key] = _store_state(view, prefix, {**meta, "n_rows": rows, "n_envs": n_envs,
                                                  "stacks_per_row": spr})
    return ReplayState(
        buffer_class=str(attrs["buffer_class"]), arguments=arguments,
        pos=_int(attrs["pos"], "pos"), full=_bool(attrs["full"], "full"),
        arrays={name: _extra(h5, name) for name in ("actions", "rewards", "dones", "timeouts")},
        stores=stores,
    )


def _extra(h5: fmt.Store, name: str) -> np.ndarray:
    value = h5.extras.get(name)
    if value is None:
        raise FormatError(f"{h5.path}: {name!r} is missing")
    return value


def _chunked(h5: fmt.Store, name: str) -> ChunkedArray:
    arr = h5.arrays.get(name)
    if arr is None:
        raise FormatError(f"{h5.path}: chunked array {name!r} is missing")
    return arr


def _int(v: Any, name: str) -> int:
    if not is_int(v):
        raise ValueError(f"{name} must be an integer, got {v!r}")
    return int(v)


def _bool(v: Any, name: str) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"{name} must be true or false, got {v!r}")
    return v


# -- the buffers' side: state in, state out, files ---------------------------------------
