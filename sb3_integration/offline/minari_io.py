"""Minari datasets in and out of compressed chunks: :func:`import_minari`, :class:`MinariStore`.

A :class:`MinariStore` holds every episode of a Minari dataset, each field of each space
leaf (a ``Dict`` / ``Tuple`` observation is split into its ``Box`` / ``Discrete`` / ...
leaves) in one :class:`~chunkstore.ChunkedArray`, episodes one after another:
observations (``T + 1`` rows per episode), actions, rewards, terminations, truncations
(``T`` rows), infos with array leaves (``T + 1`` rows, as Minari's ``DataCollector`` records
them). Image leaves (items of 1 KB or more) use chunks of 4 rows with ``zstd3+dict``,
other leaves chunks of 1024 rows with ``zstd3``. It saves to, and lazily loads from, one
chunkstore HDF5 file; :meth:`MinariStore.to_minari` writes a Minari dataset that
``minari.load_dataset`` / ``iterate_episodes`` read back identically (raw arrays, no JPEG);
:meth:`MinariStore.to_replay_buffer` fills an SB3 replay buffer of this project, stacking
image observations as asked; :func:`replay_buffer_to_minari` writes a replay buffer's finished
episodes as a Minari dataset. Needs the ``offline`` extra (``minari[create,hdf5]``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from gymnasium import spaces

from chunkstore import ChunkedArray
from chunkstore.array import DEFAULT_CHUNK_LEN, DEFAULT_CODEC
from chunkstore.hdf5 import load as load_store
from chunkstore.hdf5 import save as save_store
from sb3_integration.offline._minari_export import replay_buffer_episodes, replay_buffer_to_minari

__all__ = ["MinariStore", "import_minari", "replay_buffer_episodes", "replay_buffer_to_minari"]

FILE_KIND = "minari_episodes"
#: items of at least this many bytes are images: small chunks, a trained dictionary
IMAGE_BYTES = 1024
_SCALARS = ("rewards", "terminations", "truncations")


def _minari() -> Any:
    try:
        import minari
    except ImportError as e:  # pragma: no cover - the offline extra installs it
        raise ImportError('Minari is not installed: pip install "chunkstore-rl[offline]"') from e
    return minari


# -- space leaves ----------------------------------------------------------------------
def _leaves(space: spaces.Space, prefix: str) -> list[tuple[str, spaces.Space]]:
    if isinstance(space, spaces.Dict):
        return [leaf for k, sub in space.spaces.items() for leaf in _leaves(sub, f"{prefix}/{k}")]
    if isinstance(space, spaces.Tuple):
        return [leaf for i, sub in enumerate(space.spaces) for leaf in _leaves(sub, f"{prefix}/{i}")]
    if isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return [(prefix, space)]
    raise TypeError(f"space: {type(space).__name__} is not stored (Box, Discrete, MultiDiscrete, "
                    "MultiBinary, and Dict / Tuple of them are)")


def _split(value: Any, space: spaces.Space, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(space, spaces.Dict):
        for k, sub in space.spaces.items():
            _split(value[k], sub, f"{prefix}/{k}", out)
    elif isinstance(space, spaces.Tuple):
        for i, sub in enumerate(space.spaces):
            _split(value[i], sub, f"{prefix}/{i}", out)
    else:
        out[prefix] = np.asarray(value)


def _join(space: spaces.Space, prefix: str, leaves: dict[str, np.ndarray]) -> Any:
    if isinstance(space, spaces.Dict):
        return {k: _join(sub, f"{prefix}/{k}", leaves) for k, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_join(sub, f"{prefix}/{i}", leaves) for i, sub in enumerate(space.spaces))
    return leaves[prefix]


def _flat_infos(infos: Any, prefix: str, out: dict[str, np.ndarray]) -> None:
    if isinstance(infos, dict):
        for k, v in infos.items():
            _flat_infos(v, f"{prefix}/{k}", out)
    else:
        a = np.asarray(infos)
        if a.dtype.hasobject or a.dtype.kind in "USV":
            raise TypeError(f"infos: {prefix[len('infos/'):]} holds {a.dtype} values; only numeric "
                            "and bool arrays are stored")
        out[prefix] = a


def _nest_infos(flat: dict[str, np.ndarray]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for key, value in flat.items():
        node = root
        parts = key.split("/")[1:]
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return root


def _array(capacity: int, shape: tuple[int, ...], dtype: Any, name: str) -> ChunkedArray:
    item = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    image = item >= IMAGE_BYTES
    return ChunkedArray(max(1, capacity), shape, dtype, chunk_len=DEFAULT_CHUNK_LEN if image else 1024,
                        codec=DEFAULT_CODEC if image else "zstd3", name=name)


# -- the store -------------------------------------------------------------------------
class MinariStore:
    """Episodes of one Minari dataset in compressed chunks (see the module text).

    Build one with :func:`import_minari`, reopen a saved one with :meth:`load`.
    ``offsets[field]`` (``E + 1`` rows) says where each episode's rows begin.
    """

    def __init__(self, arrays: dict[str, ChunkedArray], offsets: dict[str, np.ndarray],
                 episode_ids: np.ndarray, observation_space: spaces.Space, action_space: spaces.Space,
                 meta: dict[str, Any], store: Any = None,
                 sources: tuple[list[str], list[str]] = ([], [])):
        self.arrays, self.offsets, self.episode_ids = arrays, offsets, episode_ids
        self.observation_space, self.action_space = observation_space, action_space
        self.meta = meta
        self._store = store
        #: the Minari dataset's files and data directory it was imported from (never saved over)
        self._sources = sources

    @property
    def total_episodes(self) -> int:
        return len(self.episode_ids)

    @property
    def total_steps(self) -> int:
        return int(self.offsets["rewards"][-1])

    def _rows(self, name: str, group: str, i: int) -> np.ndarray:
        lo, hi = self.offsets[group][i], self.offsets[group][i + 1]
        return self.arrays[name][int(lo):int(hi)]

    def episode(self, i: int) -> Any:
        """Episode ``i`` (0-based position) as Minari's own ``EpisodeData``."""
        from minari.dataset.episode_data import EpisodeData

        if not 0 <= i < self.total_episodes:
            raise IndexError(f"episode {i} outside 0..{self.total_episodes - 1}")
        obs = {n: self._rows(n, "observations", i) for n in self.arrays if n.startswith("observations")}
        act = {n: self._rows(n, "actions", i) for n in self.arrays if n.startswith("actions")}
        infos = {n: self._rows(n, "infos", i) for n in self.arrays if n.startswith("infos/")}
        return EpisodeData(
            id=int(self.episode_ids[i]),
            observations=_join(self.observation_space, "observations", obs),
            actions=_join(self.action_space, "actions", act),
            rewards=self._rows("rewards", "rewards", i),
            terminations=self._rows("terminations", "rewards", i),
            truncations=self._rows("truncations", "rewards", i),
            infos=_nest_infos(infos),
        )

    def iterate_episodes(self) -> Iterator[Any]:
        for i in range(self.total_episodes):
            yield self.episode(i)

    # -- files --------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """One chunkstore HDF5 file (atomic); :meth:`load` reads it lazily.

        ``path`` may be the file this store was lazily loaded from (the new file is renamed
        over it), not one of the Minari dataset's files it was imported from, nor a path in
        that dataset's data directory (ValueError before anything is written).
        """
        from minari.serialization import serialize_space

        from chunkstore.paths import refuse_inputs_as_output

        refuse_inputs_as_output(path, "path", *self._sources)
        extras = {f"offsets/{k}": v for k, v in self.offsets.items()}
        extras["episode_ids"] = self.episode_ids
        attrs = {"kind": FILE_KIND, "observation_space": serialize_space(self.observation_space),
                 "action_space": serialize_space(self.action_space), "meta": json.dumps(self.meta)}
        for a in self.arrays.values():
            a.flush()
        save_store(path, self.arrays, extras, attrs, progress=False)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, lazy: bool = True) -> MinariStore:
        from minari.serialization import deserialize_space

        store = load_store(path, lazy=lazy)
        if store.attrs.get("kind") != FILE_KIND:
            store.close()
            raise ValueError(f"path: {path} is not a saved MinariStore (kind {store.attrs.get('kind')!r})")
        offsets = {k[len("offsets/"):]: v for k, v in store.extras.items() if k.startswith("offsets/")}
        return cls(store.arrays, offsets, store.extras["episode_ids"],
                   deserialize_space(json.loads(store.attrs["observation_space"])),
                   deserialize_space(json.loads(store.attrs["action_space"])),
                   json.loads(store.attrs["meta"]), store)

    def close(self) -> None:
        for a in self.arrays.values():
            a.close()
        if self._store is not None:
            self._store.close()

    def __enter__(self) -> MinariStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- out ----------------------------------------------------------------------------
    def to_minari(self, dataset_id: str, **metadata: Any) -> Any:
        """Write a Minari dataset (under ``MINARI_DATASETS_PATH``) holding these episodes,
        raw (``jpeg_encoding=False``: identical arrays); ``metadata`` goes to Minari's
        ``create_dataset_from_buffers`` (``env``, ``algorithm_name``, ``author``, ...)."""
        minari = _minari()
        from minari.data_collector.episode_buffer import EpisodeBuffer

        def as_lists(x: Any) -> Any:
            if isinstance(x, dict):
                return {k: as_lists(v) for k, v in x.items()}
            if isinstance(x, tuple):
                return tuple(as_lists(v) for v in x)
            return list(x)

        buffers = []
        for ep in self.iterate_episodes():
            buffers.append(EpisodeBuffer(
                id=ep.id, observations=as_lists(ep.observations), actions=as_lists(ep.actions),
                rewards=list(ep.rewards), terminations=list(ep.terminations),
                truncations=list(ep.truncations), infos=as_lists(ep.infos)))
        metadata.setdefault("observation_space", self.observation_space)
        metadata.setdefault("action_space", self.action_space)
        return minari.create_dataset_from_buffers(dataset_id, buffers, jpeg_encoding=False, **metadata)

    def to_replay_buffer(self, buffer_size: int | None = None, *, n_stack: int = 1,
                         device: Any = "auto", **buffer_kwargs: Any) -> Any:
        """The transitions in a ``CompressedReplayBuffer`` (``CompressedDictReplayBuffer`` for a
        Dict observation space), episode after episode, as SB3's off-policy algorithms add them:
        ``done`` = termination, a truncation is ``TimeLimit.truncated``. ``n_stack > 1`` stacks
        each image leaf's last ``n_stack`` frames (zeros before an episode's first, as
        ``VecFrameStack``; on the last axis for channel-last images, else the first).
        ``buffer_size`` defaults to one more than the steps (the buffer does not wrap)."""
        from sb3_integration.offline._minari_buffer import fill_replay_buffer

        return fill_replay_buffer(self, buffer_size, n_stack, device, buffer_kwargs)


def _dataset_files(dataset: Any) -> tuple[list[str], list[str]]:
    """The files a Minari dataset's episodes are read from, and their directory (none known: empty)."""
    data_path = getattr(getattr(dataset, "_data", None), "data_path", None)
    if data_path is None or not os.path.isdir(data_path):
        return [], []
    files = [os.path.join(root, name) for root, _, names in os.walk(data_path) for name in names]
    return files, [os.fspath(data_path)]


def import_minari(dataset: Any, out: str | os.PathLike[str] | None = None) -> MinariStore:
    """Every episode of ``dataset`` (a ``MinariDataset`` or a dataset id for
    ``minari.load_dataset``) into a :class:`MinariStore`; with ``out``, also saved there.

    ``out`` may not be (nor resolve to, by symlink or hard link) one of the dataset's files,
    nor lie inside its data directory: ValueError before anything is read or written.
    """
    if isinstance(dataset, str):
        dataset = _minari().load_dataset(dataset)
    sources = _dataset_files(dataset)
    if out is not None:
        from chunkstore.paths import refuse_inputs_as_output

        refuse_inputs_as_output(out, "out", *sources)
    obs_space, act_space = dataset.observation_space, dataset.action_space
    n_ep, n_steps = int(dataset.total_episodes), int(dataset.total_steps)
    arrays: dict[str, ChunkedArray] = {}
    offsets = {g: np.zeros(n_ep + 1, np.int64) for g in ("observations", "actions", "rewards", "infos")}
    ids = np.zeros(n_ep, np.int64)
    caps = {"observations": n_steps + n_ep, "actions": n_steps, "rewards": n_steps, "infos": n_steps + n_ep}
    for i, ep in enumerate(dataset.iterate_episodes()):
        ids[i] = ep.id
        flat: dict[str, dict[str, np.ndarray]] = {"observations": {}, "actions": {}, "infos": {}}
        _split(ep.observations, obs_space, "observations", flat["observations"])
        _split(ep.actions, act_space, "actions", flat["actions"])
        _flat_infos(ep.infos or {}, "infos", flat["infos"])
        flat["rewards"] = {k: np.asarray(getattr(ep, k)) for k in _SCALARS}
        for group, leaves in flat.items():
            lengths = {len(v) for v in leaves.values()}
            if len(lengths) > 1:
                raise ValueError(f"dataset: episode {ep.id}'s {group} have lengths {sorted(lengths)}")
            n = lengths.pop() if lengths else 0
            start = int(offsets[group][i])
            offsets[group][i + 1] = start + n
            for name, v in leaves.items():
                if name not in arrays:
                    if i and group == "infos":
                        raise ValueError(f"dataset: info {name} appears only from episode {ep.id} on")
                    arrays[name] = _array(caps[group], v.shape[1:], v.dtype, name)
                if start + n > arrays[name].capacity:
                    raise ValueError(f"dataset: more {group} rows than its total_steps says")
                if n:
                    arrays[name].write(start, v)
    for name in arrays:
        group = "rewards" if name in _SCALARS else name.split("/")[0]
        if int(offsets[group][-1]) != arrays[name].capacity and group != "infos":
            raise ValueError(f"dataset: {name} holds {offsets[group][-1]} rows, total_steps says "
                             f"{arrays[name].capacity}")
        arrays[name].flush()
    meta = {"dataset_id": getattr(getattr(dataset, "spec", None), "dataset_id", None)}
    store = MinariStore(arrays, offsets, ids, obs_space, act_space, meta, sources=sources)
    if out is not None:
        store.save(out)
    return store
