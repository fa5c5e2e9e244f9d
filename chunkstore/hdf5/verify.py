"""Check a saved file completely: metadata checksums, every chunk's CRC32 and decoding.

A file whose attributes name a ``buffer_format`` listed in :data:`STATE_CHECKS` (a saved
replay buffer) has its state checked too, by the package that wrote it, where that
package is installed: a state that is damaged or not consistent in itself is a problem
(``array`` ``"buffer state"``), as ``load`` would refuse it.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import h5py
import numpy as np

from chunkstore.codecs import codec_from_config
from chunkstore.errors import (
    CodecConfigError,
    CorruptChunkError,
    CorruptFileError,
    FormatError,
)
from chunkstore.hdf5._meta import (
    ArrayMeta,
    Header,
    open_file,
    read_array_meta,
    read_extra,
    read_header,
)
from chunkstore.hdf5._progress import ChunkBar
from chunkstore.hdf5.checksum import check_crc
from chunkstore.hdf5.filetier import MappedFile

__all__ = ["Problem", "VerifyReport", "verify", "verify_report"]

#: ``buffer_format`` -> ``"module:function"``: ``function(path)`` returns one message per problem
#: of the state saved there (imported on demand; not installed: the state is not checked)
STATE_CHECKS = {"sb3_integration.replay_buffer": "sb3_integration.persistence:saved_state_problems"}


@dataclass(frozen=True)
class Problem:
    """One thing :func:`verify` found wrong; ``chunk`` is None for whole-array problems.

    ``array`` is an array's or extra's name, or ``"header"``.
    """

    array: str
    chunk: int | None
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass
class VerifyReport:
    """Everything :func:`verify_report` checked, and what it found wrong."""

    path: str
    format_version: int = 0
    problems: list[Problem] = field(default_factory=list)
    #: arrays and extras whose metadata could be read
    arrays: list[str] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)
    #: chunk byte strings checked (CRC32 and decode), the verbatim tail copies included
    chunks: int = 0
    #: the metadata checksums checked (empty for format 1 files, which have none)
    checksums: list[str] = field(default_factory=list)
    #: the ``buffer_format`` whose state was checked (None: no state, or not checked)
    state: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(path: str | os.PathLike[str], *, progress: bool = False) -> list[Problem]:
    """The problems :func:`verify_report` finds (an empty list: the file is sound)."""
    return verify_report(path, progress=progress).problems


def verify_report(path: str | os.PathLike[str], *, progress: bool = False) -> VerifyReport:
    """Check every part of a file: metadata checksums, every chunk's presence, CRC32 and decoding.

    Damage is reported, never raised: a failing header checksum, an array or
    extra whose metadata is damaged (its chunks are then not checked), a missing
    or corrupt chunk, a chunk that does not decode to its size (bounded: a
    crafted chunk cannot expand beyond it).

    Raises
    ------
    FormatError
        The file cannot be read as a chunkstore file at all (not a regular file,
        not HDF5, not chunkstore, a newer format version).
    """
    path = os.fspath(path)
    start = time.perf_counter()
    report = VerifyReport(path)
    with open_file(path) as (f, fd):
        try:
            header = read_header(f, path)
        except CorruptFileError as e:
            report.problems.append(Problem("header", None, str(e)))
            report.seconds = time.perf_counter() - start
            return report
        report.format_version = header.format_version
        metas = _check_metadata(f, header, report)
        mapped = MappedFile(path, fd)
    try:
        with ChunkBar(sum(len(m.chunks) for m in metas), "verify", progress) as bar:
            for meta in metas:
                report.problems += _chunk_problems(meta, mapped, bar, report)
    finally:
        mapped.close()
    if not report.problems:  # a damaged file is reported already: its state is not read
        _check_state(path, header.attrs, report)
    report.seconds = time.perf_counter() - start
    return report


def _check_state(path: str, attrs: dict, report: VerifyReport) -> None:
    kind = attrs.get("buffer_format")
    target = STATE_CHECKS.get(kind) if isinstance(kind, str) else None
    if target is None:
        return
    module, _, name = target.partition(":")
    try:
        check = getattr(importlib.import_module(module), name)
    except ImportError:
        return
    report.problems += [Problem("buffer state", None, m) for m in check(path)]
    report.state = kind


def _check_metadata(f: h5py.File, header: Header, report: VerifyReport) -> list[ArrayMeta]:
    summed = header.checksums is not None
    if summed:
        report.checksums.append("header")
    metas = []
    for name in header.arrays:
        try:
            meta = read_array_meta(f, name, header)
        except (FormatError, CorruptChunkError) as e:
            report.problems.append(Problem(name, None, str(e)))
            continue
        metas.append(meta)
        report.arrays.append(name)
        report.problems += _index_problems(meta)
        if summed:
            dictionary = " and trained dictionary" if "dictionary" in meta.codec_config else ""
            report.checksums += [f"{name}: description", f"{name}: codec config{dictionary}",
                                 f"{name}: chunk table"]
    for name in header.extras:
        try:
            read_extra(f, name, header, check=True)
        except (FormatError, CorruptChunkError) as e:
            report.problems.append(Problem(name, None, str(e)))
            continue
        report.extras.append(name)
        if summed:
            report.checksums.append(f"extra {name}: description")
    return metas


def _index_problems(meta: ArrayMeta) -> list[Problem]:
    located, G = meta.located, meta.group
    out = [Problem(meta.name, c, f"{meta.name}: chunk {c} is listed as stored but missing "
                   "from the file") for c in meta.chunks[meta.offsets < 0].tolist()]
    for g in np.setdiff1d(located[:, 0], meta.chunks // G).tolist():
        what = f"chunk {g}" if G == 1 else f"HDF5 chunk {g} (chunks {g * G}..{g * G + G - 1})"
        out.append(Problem(meta.name, g * G, f"{meta.name}: {what} is in the file but not in "
                           "the chunk table"))
    for g in located[located[:, 3] != 0, 0].tolist():
        what = f"chunk {g}" if G == 1 else f"HDF5 chunk {g} (chunks {g * G}..{g * G + G - 1})"
        out.append(Problem(meta.name, g * G, f"{meta.name}: {what} has a nonzero filter mask"))
    return out


def _chunk_problems(meta: ArrayMeta, mapped: MappedFile, bar: ChunkBar,
                    report: VerifyReport) -> list[Problem]:
    try:
        codec = codec_from_config(meta.codec_config)
    except CodecConfigError as e:
        return [Problem(meta.name, None, f"{meta.name}: unknown codec: {e}")]
    last = meta.nchunks - 1
    checks = [(c, off, n, crc, False) for c, off, n, crc in zip(
        meta.chunks.tolist(), meta.offsets.tolist(), meta.nbytes.tolist(), meta.crc32.tolist(),
        strict=True) if off >= 0]  # missing chunks are reported by _index_problems
    if meta.tail is not None and len(meta.chunks):
        checks.append((int(meta.chunks[-1]), *meta.tail, True))
    report.chunks += len(checks)
    local = threading.local()

    def scratch(shape: tuple[int, ...]) -> np.ndarray:
        # one reused buffer per thread: fresh pages cost more than the decode
        buf = getattr(local, "buf", None)
        if buf is None or buf.shape != shape:
            buf = local.buf = np.empty(shape, meta.dtype)
        return buf

    def check(job: tuple[int, int, int, int, bool]) -> Problem | None:
        c, off, n, crc, verbatim = job
        what = f"{meta.name}: chunk {c}" + (" (verbatim tail copy)" if verbatim else "")
        try:
            data = mapped.view(off, n)
            if data.size != n:
                return Problem(meta.name, c, f"{what} lies beyond the end of the file")
            check_crc(data, crc, what, array=meta.name, chunk=c)
        except CorruptChunkError as e:
            return Problem(meta.name, c, str(e))
        padded = meta.tail is not None and c == last and not verbatim
        out = scratch((meta.chunk_len if padded else meta.rows(c), *meta.item_shape))
        try:
            codec.decode(data, out=out)
        except Exception as e:  # the codec's own error for garbage that passed the CRC
            return Problem(meta.name, c, f"{what} does not decode to {out.nbytes} bytes "
                           f"with {codec.name}: {e}")
        return None

    # zstd, lz4 and blosc2 release the GIL: decode on every core
    problems = []
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for problem in pool.map(check, checks):
            if problem is not None:
                problems.append(problem)
            bar.step()
    return problems
