"""The buffers' ``save`` / ``load`` / ``state_dict`` / ``from_state_dict``: :class:`ReplayFiles`.

A mixin of the replay buffers. It says what a buffer is as a
:class:`~sb3_integration.persistence.files.ReplayState` and builds a buffer from one; the file
format, which only writes and reads such states, is :mod:`sb3_integration.persistence.files`,
a layer below the buffers (``tests/test_layers.py``).
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

import numpy as np

from chunkstore import ChunkedArray, ChunkstoreError, FormatError, Tier
from chunkstore.array import ArraySnapshot
from sb3_integration.buffers.columns import SMALL_ARRAYS, Columns
from sb3_integration.buffers.extra_buffers import extra_buffers_args_of
from sb3_integration.buffers.observations import subspaces
from sb3_integration.buffers.options import check_load_options
from sb3_integration.engine.raw import COMPRESSED, RAW, RawStoreState
from sb3_integration.persistence.files import ReplayState, read_replay, write_replay
from sb3_integration.persistence.spaces import space_from_dict, space_to_dict

__all__ = ["ReplayFiles"]

B = TypeVar("B", bound="ReplayFiles")


class ReplayFiles:
    """A compressed replay buffer's state in and out, and its files (a mixin of the replay buffers).

    :meth:`state_dict` captures one moment of the buffer (the writer is held out
    for the capture only: small arrays are copied, chunks are snapshots);
    :meth:`from_state_dict` builds a buffer from a state; :meth:`save` and
    :meth:`load` write and read one HDF5 file through them.
    """

    _lock: Any
    _columns: Columns | None
    _stores: dict[Any, Any]
    buffer_size: int
    n_envs: int
    pos: int
    full: bool

    def state_dict(self) -> ReplayState:
        """This buffer at this moment, as data; close it (or use ``with``) when done.

        The buffer may keep being written meanwhile: the state does not change.
        """
        with self._lock:
            arguments = self._arguments()
            kwargs, extra_arrays = self._extra_file_state()
            arguments.update(kwargs)
            arrays = ({} if self._columns is not None
                      else {name: np.array(getattr(self, name)) for name in SMALL_ARRAYS})
            arrays.update({f"extra/{name}": np.array(value) for name, value in extra_arrays.items()})
            chunked = {} if self._columns is None else {"transitions": self._columns.records.snapshot()}
            return ReplayState(
                buffer_class=type(self).__name__, arguments=arguments, pos=self.pos, full=self.full,
                arrays=arrays, chunked=chunked,
                stores={key: fs.state_dict() for key, fs in self._stores.items()},
            )

    def _arguments(self) -> dict[str, Any]:
        """The constructor arguments, as JSON values (spaces as dicts)."""
        b: Any = self
        arguments: dict[str, Any] = {
            "buffer_size": b.buffer_size,  # rows per env (SB3's argument is rows * n_envs)
            "n_envs": b.n_envs,
            "optimize_memory_usage": b.optimize_memory_usage,
            "handle_timeout_termination": b.handle_timeout_termination,
            "observation_space": space_to_dict(b.observation_space),
            "action_space": space_to_dict(b.action_space),
            "compression_method": b.compression_method,
            "chunk_len": b.chunk_len,
            "cache_bytes": b._cache_bytes,
            "frame_dedup": b.frame_dedup,
            "small_arrays": b.small_arrays,
            "observation_storage": b.observation_storage,
        }
        if hasattr(b, "n_steps"):
            arguments.update(n_steps=b.n_steps, gamma=b.gamma)
        arguments.update(extra_buffers_args_of(b).saved())
        return arguments

    @classmethod
    def from_state_dict(cls: type[B], state: ReplayState, *, device: Any = "auto", tier: Tier | None = None,
                        buffer_device: Any = None, heap_bytes: int | None = None) -> B:
        """A buffer that is ``state``; ValueError/TypeError when the state does not fit.

        ``buffer_device`` (and ``heap_bytes``) put its frames on a device, as the
        constructor's options do; the state itself is the same either way.
        """
        if not isinstance(state, ReplayState):
            raise TypeError(f"state must be a ReplayState (from state_dict()), got {type(state).__name__}")
        if state.buffer_class != cls.__name__:
            raise ValueError(f"this state is of a {state.buffer_class}, not a {cls.__name__}; rebuild it with "
                             f"{state.buffer_class}.from_state_dict()")
        a = dict(state.arguments)
        rows, n_envs = int(a.pop("buffer_size")), int(a["n_envs"])
        obs_space = space_from_dict(a.pop("observation_space"))
        act_space = space_from_dict(a.pop("action_space"))
        a.update({k: v for k, v in (("buffer_device", buffer_device), ("heap_bytes", heap_bytes)) if v is not None})
        # each key's storage is the state's (a file from before raw keys holds frame stores only)
        kinds = {key: RAW if isinstance(fs, RawStoreState) else COMPRESSED for key, fs in state.stores.items()}
        keys = list(subspaces(obs_space))
        if set(kinds) == set(keys):  # (else the key check below says why)
            a["observation_storage"] = kinds.get(None, kinds)
        else:
            a.pop("observation_storage", None)
        buf = cls(rows * n_envs, obs_space, act_space, device=device, tier=tier, **a)  # type: ignore[call-arg]
        if not 0 <= state.pos < buf.buffer_size:
            raise ValueError(f"pos {state.pos} is outside 0..{buf.buffer_size - 1}")
        if set(state.stores) != set(buf._stores):
            raise ValueError(f"observation keys {list(state.stores)} do not match the space's {list(buf._stores)}")
        buf._load_small_arrays(state)
        for key, fs in buf._stores.items():
            fs.load_state_dict(state.stores[key])
            fs.share_cache(fs.cache)
        buf.pos, buf.full = state.pos, state.full
        buf._restore_extra_file_state({name[len("extra/"):]: value for name, value in state.arrays.items()
                                       if name.startswith("extra/")})
        return buf

    # -- what a subclass (HER) adds to its state ----------------------------------------
    def _extra_file_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(constructor kwargs, arrays)`` a subclass saves besides the replay buffer.

        The kwargs (JSON values) join the saved constructor arguments; the arrays
        (numeric numpy arrays, saved as extras ``extra/<name>``) are handed to
        :meth:`_restore_extra_file_state` on the rebuilt buffer.
        """
        return {}, {}

    def _restore_extra_file_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Put back the arrays of :meth:`_extra_file_state` (the default saves none)."""

    def _load_small_arrays(self, state: ReplayState) -> None:
        b: Any = self
        records = state.chunked.get("transitions")
        if isinstance(records, ArraySnapshot):
            records = ChunkedArray.from_state(records)
        if records is not None:  # saved compressed
            cols = Columns(b.buffer_size, b.n_envs, b._small_fields(), records=records)
            arrays = {} if self._columns is not None else {n: np.asarray(v) for n, v in cols.views().items()}
        else:
            cols, arrays = None, dict(state.arrays)
            for name, (dtype, shape) in b._small_fields().items():
                value, want = arrays.get(name), ((b.buffer_size, b.n_envs, *shape), np.dtype(dtype))
                if not isinstance(value, np.ndarray) or (value.shape, value.dtype) != want:
                    got = None if value is None else (value.shape, value.dtype)
                    raise ValueError(f"{name} is {got}; this buffer needs {want}")
        if self._columns is None:
            for name in SMALL_ARRAYS:
                setattr(self, name, arrays[name])
        elif cols is not None:
            self._columns.close()
            b._init_small_arrays(records)
        else:  # saved raw, kept compressed: one bulk write
            recs = np.zeros(b.buffer_size, self._columns.dtype)
            for name in SMALL_ARRAYS:
                recs[name] = arrays[name]
            self._columns.records.write(0, recs)

    def save(self, path: str | os.PathLike[str], *, progress: bool = False) -> None:
        """Write this buffer to one HDF5 file, atomically.

        One moment of the buffer is saved: another thread may keep adding while
        the file is written (it waits only while the moment is captured). The
        buffer itself is not changed (open chunks are encoded into the file, not sealed).
        """
        with self.state_dict() as state:
            write_replay(path, state, progress=progress)

    @classmethod
    def load(cls: type[B], path: str | os.PathLike[str], device: Any = "auto", *, lazy: bool = True,
             tier: Tier | None = None, verify: bool | str | None = None, buffer_device: Any = None,
             heap_bytes: int | None = None) -> B:
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
            Replace a lazily loaded file only by renaming a new one over it.
        tier
            Where chunks written after the load (lazy) or all chunks (eager) live.
        verify
            None: check each chunk's CRC32 when loaded (eager), or (lazy) on its first
            read and again after the file's ctime moved (a chunk rewritten in place with
            the file's size and mtime put back is caught); True: also check all of them up
            front when lazy; ``"always"``: (lazy) on every read; False: no checks.
        buffer_device, heap_bytes
            Put the observation frames on a torch device (``"cuda"``), as the constructor's
            options of these names do: every frame chunk is decoded once and stored there,
            and its part of the file is released (``lazy`` applies to the other arrays only;
            ``tier`` cannot be combined with them). The file does not record where the buffer
            that saved it kept its frames: without ``buffer_device`` they load into host memory
            (a ``GpuReplayBuffer`` puts them on its ``device`` by default).

        Raises
        ------
        FormatError
            Not a saved buffer, a buffer of another class, an unknown version, or
            damaged buffer state.
        CorruptChunkError
            A damaged chunk (names the array and chunk).
        """
        check_load_options(tier=tier, buffer_device=buffer_device, heap_bytes=heap_bytes)  # before the file
        state, h5 = read_replay(path, cls.__name__, lazy=lazy, tier=tier, verify=verify)
        try:
            return cls.from_state_dict(state, device=device, tier=tier, buffer_device=buffer_device,
                                       heap_bytes=heap_bytes)
        except ChunkstoreError:
            h5.close()
            raise
        except (KeyError, TypeError, ValueError) as e:
            h5.close()
            raise FormatError(f"{os.fspath(path)}: damaged replay buffer state: {e}") from e
        except BaseException:
            h5.close()
            raise
