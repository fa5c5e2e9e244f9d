"""Save a compressed replay buffer to one HDF5 file and load it back, bit-exactly.

``buffer.save(path)`` and ``CompressedReplayBuffer.load(path, device=...)`` (the
same on :class:`~sb3_integration.CompressedDictReplayBuffer` and
:class:`~sb3_integration.CompressedNStepReplayBuffer`) come from
:class:`ReplayBufferFileMixin`. The file is a :mod:`chunkstore.format` file;
nothing in it is pickled:

``observations/frames``
    The frame ChunkedArray, chunks copied verbatim (Dict spaces: ``observations/<key>/frames``).
``observations/slots``, ``pads``
    Stack descriptors ``[which, row, env]``.
``observations/last``, ``has_last``
    Each env's last stack (what dedup compares the next one with).
``observations/heads``, ``released``, ``last_slot``, ``last_pad``
    Each env's frame stream (int64).
``observations/pending_which``, ``pending_rows``, ``pending_obs``
    Stacks still waiting for layout detection.
``observations/codec_config``
    Only for a buffer built with a Codec object (JSON bytes).
``actions``, ``rewards``, ``dones``, ``timeouts``
    SB3's own arrays, as they are.
``extra/<name>``
    A subclass's own arrays (HER: ``ep_start``, ``ep_length``, ...; see
    :meth:`ReplayBufferFileMixin._extra_file_state`), listed in attrs ``extra``
    with the constructor arguments it needs.
attrs (JSON)
    ``buffer_format`` and its version, the class name, SB3's arguments, ``pos``,
    ``full``, the spaces (``space_to_dict``), codec, chunk_len, cache bytes, and
    each frame store's scalars (layout, ring size, frames written).

With plain zstd chunks (``zstd3``; also the default ``zstd3+dict`` until it has
trained its dictionary, after 8 MiB of frames) plain ``h5py`` + ``hdf5plugin``
read ``f["observations/frames"][a:b]``: the distinct frames, each env's ring in
turn (see :mod:`sb3_integration.frames`). Chunks that need chunkstore (a trained
dictionary, lz4, rle, blosc2) make plain h5py raise an error, never return garbage.

Saving flushes the open chunks (the partial chunk each env is writing is
sealed; the next ``add()`` reopens it, reads are unchanged). Loading with
``lazy=True`` maps the file and decodes chunks from it on demand, checking
each chunk's CRC32 on its first read; chunks written afterwards go to RAM (or
``tier``). ``lazy=False`` copies every chunk into RAM, checking it. Saving to
the file a buffer was lazily loaded from is safe (temporary file + rename).

Resuming training bit-identically
---------------------------------
The buffer file restores the buffer exactly: the same samples for the same
``np.random`` state, before and after further ``add()`` calls. SB3's
``model.save`` restores the parameters, optimizer states, ``num_timesteps``,
``_last_obs`` and counters, but not the random-number generators nor the
environment, and ``DQN.load`` even reseeds the global generators and the
action space from the model's seed. For a resumed run to equal an
uninterrupted one, save and restore them yourself:

>>> # when stopping
>>> model.save("dqn")                                               # doctest: +SKIP
>>> model.replay_buffer.save("buffer.h5")                           # doctest: +SKIP
>>> rng = {"numpy": np.random.get_state(), "torch": th.get_rng_state(),
...        "random": random.getstate(),
...        "action_space": model.action_space.np_random.bit_generator.state}  # doctest: +SKIP
>>> env_state = pickle.dumps(model.get_env())   # the env: episode, RNG, frame stack  # doctest: +SKIP
>>> # when resuming (force_reset=False keeps _last_obs: no env.reset())
>>> env = pickle.loads(env_state)                                   # doctest: +SKIP
>>> model = DQN.load("dqn", env=env, device="cpu", force_reset=False)  # doctest: +SKIP
>>> np.random.set_state(rng["numpy"]); th.set_rng_state(rng["torch"])  # doctest: +SKIP
>>> random.setstate(rng["random"])                                  # doctest: +SKIP
>>> model.action_space.np_random.bit_generator.state = rng["action_space"]  # doctest: +SKIP
>>> model.replay_buffer = CompressedReplayBuffer.load("buffer.h5", device=model.device)  # doctest: +SKIP
>>> model.learn(more_steps, reset_num_timesteps=False)              # doctest: +SKIP

(on CUDA also ``th.cuda.get_rng_state_all()``). Independently of saving,
``learn(N)`` followed by ``learn(M, reset_num_timesteps=False)`` equals one
``learn(N + M)`` only when no schedule depends on the total (DQN's default
exploration schedule does: it is computed from the progress of each call).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np

from chunkstore import ChunkedArray, ChunkstoreError, FormatError, LRUChunkCache, Tier
from chunkstore import format as fmt
from chunkstore.codecs import codec_from_config
from sb3_integration.frames import FrameStore, StackLayout
from sb3_integration.spaces import space_from_dict, space_to_dict

__all__ = ["BUFFER_FORMAT", "BUFFER_FORMAT_VERSION", "ReplayBufferFileMixin", "load_buffer", "save_buffer"]

#: the ``buffer_format`` attribute of a saved replay buffer
BUFFER_FORMAT = "sb3_integration.replay_buffer"
#: version of the layout above (the chunkstore file format has its own)
BUFFER_FORMAT_VERSION = 1
#: SB3's small arrays, saved as they are (``replay._SMALL_ARRAYS``; a test keeps them equal)
_SB3_ARRAYS = ("actions", "rewards", "dones", "timeouts")
#: per-env stream state of a FrameStore, saved as int64 extras
_STREAMS = ("heads", "released", "last_slot", "last_pad")

B = TypeVar("B", bound="ReplayBufferFileMixin")


class ReplayBufferFileMixin:
    """``save(path)`` and the ``load(path, ...)`` classmethod of the compressed replay buffers."""

    def save(self, path: str | os.PathLike[str], *, progress: bool = False) -> None:
        """Write this buffer to one HDF5 file, atomically (see :mod:`sb3_integration.persistence`).

        Open chunks are sealed first; the buffer keeps working unchanged.
        """
        save_buffer(self, path, progress=progress)

    @classmethod
    def load(cls: type[B], path: str | os.PathLike[str], device: Any = "auto", *, lazy: bool = True,
             tier: Tier | None = None, verify: bool | None = None) -> B:
        """The buffer saved in ``path``, ready to sample and to keep adding to.

        Parameters
        ----------
        path
            A file written by :meth:`save` from a buffer of this class.
        device
            Where sampled tensors go, as in SB3 (``model.device`` when resuming a model).
        lazy
            True: chunks stay in the (memory-mapped) file until read; new chunks go
            to RAM or ``tier``. False: every chunk is copied into RAM or ``tier``.
        tier
            Where chunks written after the load (lazy) or all chunks (eager) live.
        verify
            None: check each chunk's CRC32 when loaded (eager) or first read (lazy);
            True: also check all of them up front when lazy; False: no checks.

        Raises
        ------
        FormatError
            Not a saved buffer, a buffer of another class, or an unknown version.
        CorruptChunkError
            A damaged chunk (names the array and chunk).
        """
        return load_buffer(cls, path, device=device, lazy=lazy, tier=tier, verify=verify)

    # -- HOOK (issue 10, for HER): state beyond the replay buffer's; to fold into the refactor --
    def _extra_file_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(constructor kwargs, arrays)`` a subclass saves besides the replay buffer.

        The kwargs (JSON values) go back to the constructor at load; the arrays
        (numeric numpy arrays, saved as extras ``extra/<name>``) are handed to
        :meth:`_restore_extra_file_state` on the rebuilt buffer.
        """
        return {}, {}

    def _restore_extra_file_state(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Put back the arrays of :meth:`_extra_file_state` (the default saves none)."""


# -- saving ----------------------------------------------------------------------------
def save_buffer(buf: Any, path: str | os.PathLike[str], *, progress: bool = False) -> None:
    """Write ``buf`` (a compressed replay buffer) to ``path``; see the module docstring."""
    arrays: dict[str, ChunkedArray] = {}
    extras: dict[str, np.ndarray] = {name: getattr(buf, name) for name in _SB3_ARRAYS}
    stores = []
    for key, fs in buf._stores.items():
        prefix = _prefix(key)
        store_arrays, store_extras, meta = _frame_store_parts(fs, prefix)
        arrays.update(store_arrays)
        extras.update(store_extras)
        stores.append([key, meta])
    attrs = {
        "buffer_format": BUFFER_FORMAT,
        "buffer_format_version": BUFFER_FORMAT_VERSION,
        "buffer_class": type(buf).__name__,
        "buffer_size": buf.buffer_size,
        "n_envs": buf.n_envs,
        "pos": buf.pos,
        "full": buf.full,
        "optimize_memory_usage": buf.optimize_memory_usage,
        "handle_timeout_termination": buf.handle_timeout_termination,
        "nstep": {"n_steps": buf.n_steps, "gamma": buf.gamma} if hasattr(buf, "n_steps") else None,
        "observation_space": space_to_dict(buf.observation_space),
        "action_space": space_to_dict(buf.action_space),
        "compression_method": buf.compression_method,
        "chunk_len": buf.chunk_len,
        "cache_bytes": buf._cache_bytes,
        "frame_dedup": buf.frame_dedup,
        "stores": stores,
    }
    init_kwargs, extra_arrays = buf._extra_file_state()  # HOOK (issue 10)
    extras.update({f"extra/{name}": a for name, a in extra_arrays.items()})
    attrs["extra"] = {"init_kwargs": init_kwargs, "arrays": sorted(extra_arrays)}
    fmt.save(path, arrays, extras, attrs, progress=progress)


def _prefix(key: Any) -> str:
    if key is None:
        return "observations"
    if not isinstance(key, str) or not key or "/" in key or key in (".", ".."):
        raise ValueError(f"observation key {key!r} cannot name an HDF5 group; use keys without '/'")
    return f"observations/{key}"


def _frame_store_parts(fs: FrameStore, prefix: str) -> tuple[dict[str, ChunkedArray], dict[str, np.ndarray], dict[str, Any]]:
    """The arrays, extras and JSON attributes that describe ``fs`` completely."""
    arrays: dict[str, ChunkedArray] = {}
    extras: dict[str, np.ndarray] = {
        f"{prefix}/slots": fs.slots, f"{prefix}/pads": fs.pads, f"{prefix}/has_last": fs.has_last}
    for name in _STREAMS:
        extras[f"{prefix}/{name}"] = np.asarray(getattr(fs, name), np.int64)
    lay = fs.layout
    if lay is not None:
        assert fs.last is not None
        arrays[f"{prefix}/frames"] = fs.array
        extras[f"{prefix}/last"] = fs.last
    if fs._pending:
        extras[f"{prefix}/pending_which"] = np.array([w for w, _, _ in fs._pending], np.int64)
        extras[f"{prefix}/pending_rows"] = np.array([r for _, r, _ in fs._pending], np.int64)
        extras[f"{prefix}/pending_obs"] = np.stack([x for _, _, x in fs._pending])
    if not isinstance(fs.codec, str):  # a Codec object (perhaps with a trained dictionary)
        config = json.dumps({"id": fs.codec.codec_id, **fs.codec.get_config()})
        extras[f"{prefix}/codec_config"] = np.frombuffer(config.encode(), np.uint8)
    meta = {
        "name": fs.name,
        "obs_shape": list(fs.obs_shape),
        "dtype": fs.dtype.str,
        "dedup": fs.dedup,
        "used": list(fs.used),
        "frames_written": fs.frames_written,
        "pending": len(fs._pending),
        "layout": None if lay is None else {"axis": lay.axis, "width": lay.width, "depth": lay.depth},
        "ring_frames": fs.F if lay is not None else None,
        "max_open": fs.array.max_open if lay is not None else None,
    }
    return arrays, extras, meta


# -- loading ---------------------------------------------------------------------------
def load_buffer(cls: type[B], path: str | os.PathLike[str], *, device: Any = "auto", lazy: bool = True,
                tier: Tier | None = None, verify: bool | None = None) -> B:
    """A ``cls`` buffer rebuilt from ``path``; see :meth:`ReplayBufferFileMixin.load`."""
    path = os.fspath(path)
    store = fmt.load(path, lazy=lazy, tier=tier, cache=0, verify=verify)
    try:
        attrs = store.attrs
        _check_kind(attrs, cls, path)
        try:
            return _rebuild(cls, store, attrs, device, tier)
        except ChunkstoreError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise FormatError(f"{path}: damaged replay buffer description: {e!r}") from e
    except BaseException:
        store.close()
        raise


def _check_kind(attrs: Mapping[str, Any], cls: type, path: str) -> None:
    kind = attrs.get("buffer_format")
    if kind != BUFFER_FORMAT:
        raise FormatError(f"{path} is a chunkstore file but not a saved replay buffer "
                          f"(buffer_format {kind!r}, expected {BUFFER_FORMAT!r})")
    version = attrs.get("buffer_format_version")
    if version != BUFFER_FORMAT_VERSION:
        raise FormatError(f"{path} holds a replay buffer in layout version {version!r}; this "
                          f"sb3_integration reads version {BUFFER_FORMAT_VERSION} (upgrade chunkstore)")
    saved = attrs.get("buffer_class")
    if saved != cls.__name__:
        raise FormatError(f"{path} holds a {saved}, not a {cls.__name__}; load it with {saved}.load()")


def _rebuild(cls: type[B], store: fmt.Store, attrs: Mapping[str, Any], device: Any, tier: Tier | None) -> B:
    path = store.path
    kwargs: dict[str, Any] = {
        "device": device,
        "n_envs": int(attrs["n_envs"]),
        "optimize_memory_usage": bool(attrs["optimize_memory_usage"]),
        "handle_timeout_termination": bool(attrs["handle_timeout_termination"]),
        "compression_method": attrs["compression_method"],
        "chunk_len": int(attrs["chunk_len"]),
        "cache_bytes": int(attrs["cache_bytes"]),
        "frame_dedup": bool(attrs["frame_dedup"]),
        "tier": tier,
    }
    if attrs["nstep"] is not None:
        kwargs.update(attrs["nstep"])
    extra = attrs.get("extra") or {"init_kwargs": {}, "arrays": []}  # HOOK (issue 10)
    kwargs.update(extra["init_kwargs"])
    stores = {key: meta for key, meta in attrs["stores"]}
    codecs = [_saved_codec(store, _prefix(key)) for key in stores]
    if codecs and codecs[0] is not None:  # the buffer was built with this Codec object
        kwargs["compression_method"] = codecs[0]
    n_envs = kwargs["n_envs"]
    buf = cls(int(attrs["buffer_size"]) * n_envs, space_from_dict(attrs["observation_space"]),  # type: ignore[call-arg]
              space_from_dict(attrs["action_space"]), **kwargs)
    if list(stores) != list(buf._stores):  # type: ignore[attr-defined]
        raise FormatError(f"{path}: observation keys {list(stores)} do not match the saved "
                          f"observation space's {list(buf._stores)}")  # type: ignore[attr-defined]
    for key, fs in buf._stores.items():  # type: ignore[attr-defined]
        _restore_frame_store(fs, _prefix(key), stores[key], store)
    for name in _SB3_ARRAYS:
        like = getattr(buf, name)
        setattr(buf, name, _extra(store, name, like.shape, like.dtype))
    buf.pos, buf.full = int(attrs["pos"]), bool(attrs["full"])  # type: ignore[attr-defined]
    buf._restore_extra_file_state({name: store.extras[f"extra/{name}"] for name in extra["arrays"]})
    return buf


def _saved_codec(store: fmt.Store, prefix: str) -> Any:
    raw = store.extras.get(f"{prefix}/codec_config")
    return None if raw is None else codec_from_config(json.loads(raw.tobytes().decode()))


def _extra(store: fmt.Store, name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Extra ``name``, which must have this shape and dtype."""
    value = store.extras.get(name)
    if value is None:
        raise FormatError(f"{store.path}: {name!r} is missing")
    if value.shape != tuple(shape) or value.dtype != np.dtype(dtype):
        raise FormatError(f"{store.path}: {name!r} has shape {value.shape} and dtype {value.dtype}; "
                          f"this buffer needs {tuple(shape)} and {np.dtype(dtype)}")
    return value


def _restore_frame_store(fs: FrameStore, prefix: str, meta: Mapping[str, Any], store: fmt.Store) -> None:
    """Put the saved state into ``fs``, freshly built with the saved arguments."""
    if (tuple(meta["obs_shape"]), np.dtype(meta["dtype"]), meta["dedup"]) != (fs.obs_shape, fs.dtype, fs.dedup):
        raise FormatError(f"{store.path}: {prefix} was saved as {meta['obs_shape']} {meta['dtype']} "
                          f"(dedup={meta['dedup']}), its space gives {fs.obs_shape} {fs.dtype} (dedup={fs.dedup})")
    n = fs.n_envs
    for name in ("slots", "pads", "has_last"):
        like = getattr(fs, name)
        setattr(fs, name, _extra(store, f"{prefix}/{name}", like.shape, like.dtype))
    for name in _STREAMS:
        setattr(fs, name, _extra(store, f"{prefix}/{name}", (n,), np.int64).tolist())
    fs.used = [bool(u) for u in meta["used"]]
    fs.frames_written = int(meta["frames_written"])
    fs._pending = _pending(fs, prefix, int(meta["pending"]), store)
    for name in ("array", "F", "env_base"):  # whatever the constructor decided is replaced
        fs.__dict__.pop(name, None)
    lay = meta["layout"]
    if lay is None:
        fs.layout, fs.last = None, None
        return
    fs.layout = StackLayout(fs.obs_shape, lay["axis"], int(lay["width"]), int(lay["depth"]))
    fs.F = int(meta["ring_frames"])
    fs.env_base = np.arange(n) * fs.F
    arr = store.arrays.get(f"{prefix}/frames")
    want = ((fs.F * n, *fs.layout.frame_shape), fs.dtype)
    if arr is None or (arr.shape, arr.dtype) != want:
        got = None if arr is None else (arr.shape, arr.dtype)
        raise FormatError(f"{store.path}: {prefix}/frames is {got}; its layout needs {want}")
    arr.max_open = int(meta["max_open"])
    arr.cache = fs.cache if isinstance(fs.cache, LRUChunkCache) else None  # type: ignore[assignment]  # the buffer's shared cache
    fs.array = arr
    fs.last = _extra(store, f"{prefix}/last", (n, *fs.obs_shape), fs.dtype)


def _pending(fs: FrameStore, prefix: str, count: int, store: fmt.Store) -> list[tuple[int, int, np.ndarray]]:
    if not count:
        return []
    which = _extra(store, f"{prefix}/pending_which", (count,), np.int64)
    rows = _extra(store, f"{prefix}/pending_rows", (count,), np.int64)
    obs = _extra(store, f"{prefix}/pending_obs", (count, fs.n_envs, *fs.obs_shape), fs.dtype)
    return [(int(w), int(r), x) for w, r, x in zip(which.tolist(), rows.tolist(), obs, strict=True)]
