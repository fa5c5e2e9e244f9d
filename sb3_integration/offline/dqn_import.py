"""Import dopamine checkpoints (the DQN Replay Dataset) into one file: :func:`import_dqn_replay`.

Checkpoints are read one at a time, each observation file in blocks of rows (never a
whole 7 GB array; the next block is read by a helper thread meanwhile), frames written
straight into compressed chunks (``ChunkedArray.write`` takes its bulk path: a block's whole
chunks encoded in one GIL-free call and put into the tier in one step). Each finished checkpoint is
saved atomically as a part file under ``<out>.parts/``; an interrupted import run again
with the same arguments keeps the parts it finds and continues at the next checkpoint.
The parts are then joined into ``out`` with their chunks copied verbatim, read straight
from the part files (every part uses one codec, trained once on the first checkpoint's
first frames; a part left by an earlier run is verified once, every chunk's CRC32 and
decoding, before it is used), and removed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from chunkstore import ChunkedArray
from chunkstore.array import DEFAULT_CHUNK_LEN, DEFAULT_CODEC
from chunkstore.codecs import Codec, TrainableCodec, get_codec
from chunkstore.hdf5 import chunk_spans, verify
from chunkstore.hdf5 import load as load_store
from chunkstore.hdf5 import save as save_store
from chunkstore.hdf5.source import ChunkSource
from chunkstore.validate import is_int
from sb3_integration.offline.dopamine import (
    STORE_NAMES,
    Checkpoint,
    CheckpointError,
    find_checkpoints,
    valid_positions,
)
from sb3_integration.offline.dqn_replay import CKPT_COLUMNS, FILE_KIND, FILE_VERSION

__all__ = ["import_dqn_replay"]

#: rows of observations read per block: 4096 Atari frames are 29 MB
BLOCK_ROWS = 4096
_MANIFEST = "manifest.json"
#: the name of a dopamine checkpoint file (``{name}_ckpt.{N}.gz``)
_CKPT_NAME = re.compile(r".+_ckpt\.\d+\.gz")


def import_dqn_replay(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    suffixes: Sequence[int] | None = None,
    stack_size: int = 4,
    update_horizon: int = 1,
    gamma: float = 0.99,
    chunk_len: int = DEFAULT_CHUNK_LEN,
    codec: str | Codec = DEFAULT_CODEC,
    progress: bool = True,
    keep_parts: bool = False,
) -> str:
    """Import dopamine replay checkpoints from ``src`` into the chunkstore file ``out``.

    Parameters
    ----------
    src
        A directory of ``$store$_observation_ckpt.N.gz`` ... files (or its parent holding
        ``replay_logs/``, the DQN Replay Dataset's ``<game>/<run>`` layout).
    out
        The file to write (replaced atomically at the end). Neither it nor ``<out>.parts``
        may be (or resolve to, by symlink or hard link) a checkpoint file read, nor ``out`` a
        checkpoint file's name (``*_ckpt.N.gz``) inside ``src``; ``<out>.parts`` may not be a
        symlink nor hold ``src`` (ValueError before anything is written).
    suffixes
        Which checkpoints (default: every one in ``src``, ascending).
    stack_size, update_horizon, gamma
        dopamine's sampling parameters: which positions are valid depends on the first
        two; ``gamma`` is the default of :class:`DQNReplayBuffer` (changeable at load).
    chunk_len, codec
        The frames' chunks (defaults of the replay buffers). A trainable codec
        (``zstd3+dict``) is trained once, on the first checkpoint's first frames.
    progress
        tqdm bars over checkpoints and frames (stderr).
    keep_parts
        Keep ``<out>.parts/`` (one file per checkpoint) after joining them.

    Returns the path written. Raises :class:`CheckpointError` (a ``ValueError`` naming
    the file) for a missing, damaged, truncated or crafted checkpoint file (a header
    declaring more than the file holds, a size beyond dopamine's types, data past the
    declared shape). An import that fails before any checkpoint is finished removes the
    ``<out>.parts`` directory it created; finished parts are kept for a rerun.
    """
    for name, v in (("stack_size", stack_size), ("update_horizon", update_horizon),
                    ("chunk_len", chunk_len)):
        if not is_int(v, minimum=1):
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    if not 0.0 <= float(gamma) <= 1.0:
        raise ValueError(f"gamma must be within [0, 1], got {gamma}")
    out = os.fspath(out)
    suffixes = list(find_checkpoints(src) if suffixes is None else suffixes)
    if not suffixes or len(set(suffixes)) != len(suffixes):
        raise ValueError(f"suffixes must be distinct checkpoint numbers, got {suffixes}")
    ckpts = [Checkpoint.open(src, s) for s in suffixes]
    first = ckpts[0]
    for c in ckpts[1:]:
        if c.observation_shape != first.observation_shape or c.dtypes != first.dtypes:
            raise CheckpointError(c.path("observation"), f"observations {c.observation_shape} "
                                  f"{c.dtypes} differ from checkpoint {first.suffix}'s")
    parts = out + ".parts"
    _refuse_overwriting(src, out, parts, ckpts)
    options = {"src": os.path.abspath(os.fspath(src)), "suffixes": suffixes, "stack_size": stack_size,
               "update_horizon": update_horizon, "chunk_len": chunk_len,
               "codec": codec if isinstance(codec, str) else codec.name}
    created = not os.path.lexists(parts)
    _check_manifest(parts, options)
    shared: Codec | None = None
    try:
        with tqdm(total=len(ckpts), desc="checkpoints", unit="ckpt", disable=not progress) as bar:
            for c in ckpts:
                part = _part_path(parts, c.suffix)
                if os.path.exists(part):
                    shared = _existing_codec(part, shared)
                else:
                    shared = _import_one(c, part, shared, codec, int(chunk_len), int(stack_size),
                                         int(update_horizon), progress)
                bar.update(1)
    except BaseException:
        # a parts directory this call made and no checkpoint finished in: nothing to resume
        if created and not any(os.path.exists(_part_path(parts, c.suffix)) for c in ckpts):
            shutil.rmtree(parts, ignore_errors=True)
        raise
    assert shared is not None
    _join(parts, ckpts, out, shared, stack_size=int(stack_size), update_horizon=int(update_horizon),
          gamma=float(gamma), chunk_len=int(chunk_len), progress=progress)
    if not keep_parts:
        shutil.rmtree(parts, ignore_errors=True)
    return out


# -- parts -------------------------------------------------------------------------
def _refuse_overwriting(src: str | os.PathLike[str], out: str, parts: str, ckpts: list[Checkpoint]) -> None:
    """ValueError before anything is written: ``out`` or ``out.parts`` is (or resolves to, by
    symlink or hard link) a checkpoint file read; ``out`` lies inside the source directory with
    the name of a checkpoint file (``*_ckpt.N.gz``: a later import would read it as one); the
    source lies inside ``out.parts`` (removed at the end); ``out.parts`` is a symlink (its
    target would receive the parts, and keep them). Other new files beside the checkpoints
    are allowed: they are never read, and nothing of ``src`` is replaced."""
    from chunkstore.paths import refuse_inputs_as_output, within

    inputs = [c.path(n) for c in ckpts for n in (*STORE_NAMES, "add_count", "invalid_range",
                                                 "episode_end_indices")]
    inputs = [p for p in inputs if os.path.exists(p)]
    dirs = sorted({os.fspath(src), *(c.directory for c in ckpts)})
    refuse_inputs_as_output(out, "out", inputs)
    if _CKPT_NAME.fullmatch(os.path.basename(out)):
        refuse_inputs_as_output(out, "out (a checkpoint file's name)", directories=dirs,
                                why="the checkpoints' directory, where an import would read it as a checkpoint file")
    if os.path.islink(parts):
        raise ValueError(f"out: {parts} (where the parts go) is a symlink; remove it or choose another out")
    refuse_inputs_as_output(parts, "out (its .parts directory)", inputs)
    for d in dirs:
        if within(d, parts):
            raise ValueError(f"out: the parts directory {parts} holds the source {d}, and is removed at the "
                             "end; choose another out")


def _part_path(parts: str, suffix: int) -> str:
    return os.path.join(parts, f"ckpt_{suffix}.h5")


def _check_manifest(parts: str, options: dict[str, Any]) -> None:
    path = os.path.join(parts, _MANIFEST)
    if os.path.exists(path):
        with open(path) as f:
            before = json.load(f)
        if before != options:
            raise ValueError(f"out: {parts} holds parts of an import with other arguments "
                             f"({before}); remove it or import with the same arguments")
        return
    os.makedirs(parts, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(options, f)
    os.replace(tmp, path)


def _existing_codec(part: str, shared: Codec | None) -> Codec:
    """A part left by an earlier run: every chunk checked once (the join copies bytes raw)."""
    problems = verify(part)
    if problems:
        raise ValueError(f"out: part {part} is damaged ({problems[0]}); remove it and import again")
    with load_store(part, lazy=True) as store:
        found = store.arrays["frames"].codec
    if shared is not None and found != shared:
        raise ValueError(f"out: part {part} uses another codec than the parts before it; "
                         "remove the parts directory and import again")
    return found


def _choose_codec(codec: str | Codec, sample: np.ndarray, chunk_len: int) -> Codec:
    """``codec``, trained on ``sample`` if it learns; kept only if it beats the plain codec
    on the held-out (odd) chunks, as a ChunkedArray's own training does."""
    base = get_codec(codec)
    if not (isinstance(base, TrainableCodec) and base.wants_training):
        return base
    n = len(sample) // chunk_len
    blocks = [sample[i * chunk_len:(i + 1) * chunk_len] for i in range(n)]
    train, held = blocks[0::2], blocks[1::2] or blocks
    trained = base.trained([item for b in train for item in b][:4096]) if train else base
    plain = base.untrained_equivalent()
    if trained.wants_training if isinstance(trained, TrainableCodec) else False:
        return plain
    if sum(len(trained.encode(b)) for b in held) >= sum(len(plain.encode(b)) for b in held):
        return plain
    return trained


def _import_one(c: Checkpoint, part: str, shared: Codec | None, codec: str | Codec, chunk_len: int,
                stack_size: int, update_horizon: int, progress: bool) -> Codec:
    """Stream checkpoint ``c`` into a part file; returns the codec its frames use."""
    from sb3_integration.offline._npy_stream import NpyStream

    rows = c.rows
    padded = -(-rows // chunk_len) * chunk_len
    block = -(-BLOCK_ROWS // chunk_len) * chunk_len
    frames: ChunkedArray | None = None
    with NpyStream(c.path("observation")) as s, tqdm(
            total=rows, desc=f"frames of checkpoint {c.suffix}", unit="frame", leave=False,
            disable=not progress) as bar:
        for start, part_rows in s.prefetched_blocks(block, stop=rows):
            if frames is None:
                shared = shared if shared is not None else _choose_codec(codec, part_rows, chunk_len)
                frames = ChunkedArray(padded, c.observation_shape, c.observation_dtype,
                                      chunk_len=chunk_len, codec=shared, name="frames")
            frames.write(start, part_rows)
            bar.update(len(part_rows))
        s.finish()  # the rest of the file and its gzip CRC
    assert frames is not None and shared is not None
    if padded > rows:
        frames.write(rows, np.zeros((padded - rows, *c.observation_shape), c.observation_dtype))
    frames.flush()
    cols = {n: _read_column(c, n) for n in STORE_NAMES[1:]}
    valid = np.zeros(padded, bool)
    valid[:rows] = valid_positions(cols["terminal"], c, stack_size, update_horizon)
    extras = {n: _pad(cols[n][:rows], padded) for n in cols}
    extras["valid"] = valid
    attrs = {"kind": "dqn_replay_part", "suffix": c.suffix, "rows": rows, "capacity": c.capacity,
             "add_count": c.add_count}
    save_store(part, {"frames": frames}, extras, attrs, progress=False)
    frames.close()
    return shared


def _read_column(c: Checkpoint, name: str) -> np.ndarray:
    """Column ``name``'s first ``rows`` entries: its header must be ``(capacity,)``, the rest of
    the stream is read in pieces and dropped (a column is never held at its declared size)."""
    from sb3_integration.offline._npy_stream import read_small_npy

    return read_small_npy(c.path(name), name, ndim=1, max_items=c.capacity, rows=c.rows)


def _pad(a: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, a.dtype)
    out[: len(a)] = a
    return out


# -- joining -----------------------------------------------------------------------
def _part_blobs(path: str, spans: np.ndarray) -> Iterator[bytes]:
    """The stored chunks' bytes of a part, read straight from the file (``chunk_spans``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        for off, n in spans[:, 1:].tolist():
            blob = os.pread(fd, n, off)
            if len(blob) != n:
                raise ValueError(f"out: part {path} is shorter than its chunk table says; remove it "
                                 "and import again")
            yield blob
    finally:
        os.close(fd)


def _join(parts: str, ckpts: list[Checkpoint], out: str, codec: Codec, *, stack_size: int,
          update_horizon: int, gamma: float, chunk_len: int, progress: bool) -> None:
    """Every part's chunks into ``out`` verbatim (read with one ``pread`` each, not through a
    lazily loaded array), their columns concatenated.

    Each column and the chunk table are allocated once at their joined size and filled part
    by part (no per-part copies held until one concatenation), and a part's chunk spans are
    read again when its bytes are copied rather than kept: what the join holds grows by about
    12 bytes per transition, not by every checkpoint's tables twice.
    """
    table: list[list[int]] = []
    padded = [-(-c.rows // chunk_len) * chunk_len for c in ckpts]
    total, total_chunks = sum(padded), sum(padded) // chunk_len
    cols: dict[str, np.ndarray] = {}
    chunks = np.empty(total_chunks, np.int64)
    nbytes = np.empty(total_chunks, np.int64)
    paths: list[str] = []
    item_shape: tuple[int, ...] = ()
    dtype = np.dtype(np.uint8)
    base = k = 0
    for c, rows in zip(ckpts, padded, strict=True):
        path = _part_path(parts, c.suffix)
        with load_store(path, lazy=True) as st:
            fr = st.arrays["frames"]
            if fr.codec != codec:
                raise ValueError(f"out: part {path} uses another codec; remove {parts} and import again")
            capacity, item_shape, dtype = fr.capacity, fr.item_shape, fr.dtype
            if capacity != rows:
                raise ValueError(f"out: part {path} holds {capacity} frames, its checkpoint {rows}; remove it "
                                 "and import again")
            for key, name in (("actions", "action"), ("rewards", "reward"), ("terminals", "terminal"),
                              ("valid", "valid")):
                part = st.extras[name]
                if key not in cols:
                    cols[key] = np.empty(total, part.dtype)
                elif part.dtype != cols[key].dtype:  # what a concatenation would give (never narrower)
                    cols[key] = cols[key].astype(np.result_type(cols[key].dtype, part.dtype))
                cols[key][base:base + capacity] = part
        spans = chunk_spans(path, "frames")
        if np.any(spans[:, 1] < 0) or len(spans) > capacity // chunk_len:
            raise ValueError(f"out: part {path} lacks chunks; remove it and import again")
        chunks[k:k + len(spans)] = spans[:, 0] + base // chunk_len
        nbytes[k:k + len(spans)] = spans[:, 2]
        k += len(spans)
        paths.append(path)
        table.append([c.suffix, base, c.rows, c.capacity, c.add_count, capacity])
        base += capacity

    def blobs() -> Iterator[Any]:
        for path in paths:
            yield from _part_blobs(path, chunk_spans(path, "frames"))

    source = ChunkSource(base, item_shape, dtype, chunk_len, codec, chunks[:k], nbytes[:k], blobs)
    actions = cols["actions"]
    extras = {"actions": actions, "rewards": cols["rewards"], "terminals": cols["terminals"],
              "valid": np.packbits(cols.pop("valid")),
              "checkpoints": np.array(table, np.int64).reshape(-1, len(CKPT_COLUMNS))}
    attrs = {"kind": FILE_KIND, "version": FILE_VERSION, "stack_size": stack_size,
             "update_horizon": update_horizon, "gamma": gamma,
             "n_actions": int(actions.max()) + 1 if len(actions) else 1,
             "source": "dopamine OutOfGraphReplayBuffer checkpoints",
             "suffixes": [c.suffix for c in ckpts]}
    note = ("frames: single observations in dopamine's position order, checkpoint after "
            "checkpoint (table 'checkpoints': suffix, base, rows, capacity, add_count, "
            "padded_rows); the stack at position p of a checkpoint is frames base + "
            "(p - stack_size + 1 .. p) modulo its capacity.")
    save_store(out, {"frames": source}, extras, attrs, progress=progress, reader_note=note)
