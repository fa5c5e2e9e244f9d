"""Write a store (named ChunkedArrays, plain arrays, attributes) to one HDF5 file, atomically."""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import re
from collections.abc import Mapping
from typing import Any

import h5py
import hdf5plugin
import numpy as np

from chunkstore.array import ChunkedArray
from chunkstore.codecs import Codec, TrainableCodec
from chunkstore.hdf5 import _groups, _reserve, _tempfile
from chunkstore.hdf5._layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    GROUP_ATTR,
    META,
    PRIVATE_FILTER_ID,
    WRITABLE_VERSIONS,
    array_record,
    attr_value,
    check_name,
    dtype_to_json,
    dump_json,
    extra_record,
    h5_dtype,
    header_record,
    index_record,
    raw_bytes,
)
from chunkstore.hdf5._progress import ChunkBar
from chunkstore.hdf5.checksum import crc32, record_crc
from chunkstore.hdf5.source import ChunkSource, as_source

__all__ = ["save"]

#: longer codec configs (a trained zstd dictionary) go to a dataset: attributes over
#: 64 KB need HDF5's newest object-header format, which older readers lack
MAX_ATTR_CHARS = 16 << 10
#: extras at least this large are compressed inside the file
PACK_EXTRAS = 64 << 10
#: HDF5 file format: 1.10 (2017) gives every metadata block a checksum of its own, so a
#: damaged object header or chunk index is an HDF5 error instead of garbage parsed
LIBVER = ("v110", "v110")
#: the environment variable that picks the format version written by default
FORMAT_ENV = "CHUNKSTORE_SAVE_FORMAT"


def save(
    path: str | os.PathLike[str],
    arrays: Mapping[str, ChunkedArray | ChunkSource],
    extras: Mapping[str, Any] | None = None,
    attrs: Mapping[str, Any] | None = None,
    *,
    progress: bool = True,
    reader_note: str | None = None,
    format_version: int | None = None,
    plain_readable: bool = True,
) -> None:
    """Write a store to one HDF5 file, atomically.

    Parameters
    ----------
    path
        The file. An existing file is replaced only once the new one is complete
        and fsynced; it may be the very file the arrays were lazily loaded from.
        Temporaries of earlier saves to ``path`` that were killed are removed. A
        symbolic link is followed: the file it names is replaced and the link stays,
        as writing to the link would do (SB3's ``save_to_pkl`` does).
    arrays
        Named ChunkedArrays (each saved as one moment of it: its stored chunks copied
        verbatim, its open chunks encoded; the array is not changed and may keep being
        written meanwhile), their snapshots (``ChunkedArray.snapshot()``) or
        :class:`~chunkstore.hdf5.source.ChunkSource` objects. Unwritten chunks are not written.
    extras
        Named plain arrays (positions, flags, rewards, ...).
    attrs
        JSON-serializable attributes (numpy scalars and arrays are converted).
    progress
        Show a progress bar over chunks on stderr (tqdm; hidden when not a tty).
    reader_note
        Text appended to the root ``reader_note`` attribute (how a plain HDF5 reader
        makes sense of the datasets, e.g. how a buffer's observations are rebuilt).
    format_version
        3 (default; or the ``CHUNKSTORE_SAVE_FORMAT`` environment variable): several
        chunks per HDF5 chunk where plain HDF5 readers cannot decode them anyway.
        2: one HDF5 chunk per chunk, for chunkstore releases that read only formats 1-2.
    plain_readable
        True: arrays whose chunks HDF5 decodes itself (zstd, deflate, none) keep one
        chunk per HDF5 chunk, so plain ``h5py`` + ``hdf5plugin`` reads them. False:
        they are grouped too (fewer HDF5 calls: faster saves of many small chunks);
        HDF5's filters decode only the first of several streams, so such datasets
        declare the private filter and plain readers fail loudly.
    """
    path = os.fspath(path)
    if os.path.islink(path):  # the temporary goes next to the file the link names, and replaces that file
        path = os.path.realpath(path)
    version = _format_version(format_version)
    extras = dict(extras or {})
    for name in [*arrays, *extras]:
        check_name(name)
    if len({*arrays, *extras}) != len(arrays) + len(extras):
        raise ValueError(f"names are shared by arrays and extras: {sorted(set(arrays) & set(extras))}")
    attrs_json = dump_json(dict(attrs or {}), "attrs")
    _refuse_spill_directories(path, arrays)
    # live arrays are saved as one moment of them (open chunks encoded, not sealed: the
    # arrays are left as they are, and may keep changing while the file is written)
    snapshots = {name: arr.snapshot() for name, arr in arrays.items() if isinstance(arr, ChunkedArray)}
    try:
        _save(path, version, {**arrays, **snapshots}, extras, attrs_json, progress, reader_note, plain_readable)
    except OSError as e:
        if e.errno is None or path in str(e):  # ours, or already naming the file
            raise
        # a full disk, a file size limit, a read-only filesystem: HDF5's message names
        # /proc/self/fd/N, the temporary's creation the temporary, not the file
        detail = re.sub(r"^\[Errno \d+\] ", "", str(e).splitlines()[0])[:200]
        raise type(e)(e.errno, f"{os.strerror(e.errno)}: saving {path} failed; the file is unchanged and no "
                               f"temporary was left{_advice(e.errno)}. The write said: {detail}") from e
    finally:
        for snap in snapshots.values():
            snap.close()


def _advice(err: int) -> str:
    """What to do about a failed save, by its errno: only a full disk is cured by freeing space."""
    import errno

    if err in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return " (free space and save again)"
    if err == errno.EFBIG:
        return (" (the file would be larger than this filesystem or the process's file size limit, "
                "RLIMIT_FSIZE, allows: save to another filesystem or raise the limit)")
    if err == errno.EROFS:
        return " (the filesystem is mounted read-only: save to another path)"
    if err in (errno.EACCES, errno.EPERM):
        return " (no permission to write in that directory)"
    return ""


def _refuse_spill_directories(path: str, arrays: Mapping[str, Any]) -> None:
    """ValueError when ``path`` lies in the private directory of a tier the arrays are read from
    (a DiskTier's or HybridTier's segment files, removed with the directory when the tier
    closes: the saved file would go with them). The file a lazily loaded array reads may be
    ``path``: the new file is renamed over it, and the array keeps reading the old one."""
    from chunkstore.paths import refuse_inputs_as_output
    from chunkstore.tiers import DiskTier, HybridTier

    directories = []
    for arr in arrays.values():
        tier = getattr(arr, "tier", None)
        for _ in range(4):  # a FileTier's writable tier, which may spill
            if isinstance(tier, (DiskTier, HybridTier)):
                directories.append(os.fspath(tier.path))
            tier = getattr(tier, "writable", None)
            if tier is None:
                break
    refuse_inputs_as_output(path, "path", directories=directories,
                            why="a tier's spill directory, removed with its files when the tier closes")


def _save(path: str, version: int, arrays: Mapping[str, Any], extras: dict[str, Any], attrs_json: str,
          progress: bool, reader_note: str | None, plain_readable: bool) -> None:
    sources = {name: as_source(arr) for name, arr in arrays.items()}
    total = sum(len(src.chunks) for src in sources.values())
    _tempfile.remove_stale_temporaries(path)
    need = _reserve.estimate_nbytes(sources.values(), extras, PACK_EXTRAS)
    with _tempfile.temporary(path) as (tmp, fd):
        # HDF5 must never see a failed write (see _reserve): the space is allocated first, a
        # failure there is clean; creating the file truncates it, so once more after that
        _reserve.reserve(fd, need, path)
        name = _tempfile.writable_name(tmp, fd)
        h5py.File(name, "w", libver=LIBVER).close()
        _reserve.reserve(fd, need, path)
        with h5py.File(name, "r+", libver=LIBVER) as f, ChunkBar(total, "save", progress) as bar:
            checksums: dict[str, Any] = {"arrays": {}, "extras": {}}
            _write_header(f, version, list(sources), list(extras), attrs_json)
            for name, src in sources.items():
                checksums["arrays"][name] = _write_array(f, name, src, bar, version, plain_readable)
            for name, value in extras.items():
                checksums["extras"][name] = _write_extra(f, name, value)
            checksums["header"] = record_crc(header_record(f))
            f.attrs["checksums"] = json.dumps(checksums)
            note = _reader_note(f, sources, version)
            f.attrs["reader_note"] = note + (f"\n\n{reader_note}" if reader_note else "")
        os.fsync(fd)
        if not _tempfile.still_ours(tmp, fd):
            raise OSError(f"the temporary {tmp} was replaced while it was written; {path} is unchanged")
        os.replace(tmp, path)
        _fsync_dir(os.path.dirname(os.path.abspath(path)))


def _format_version(requested: int | None) -> int:
    if requested is None:
        text = os.environ.get(FORMAT_ENV, "").strip()
        if not text:
            return FORMAT_VERSION
        try:
            requested = int(text)
        except ValueError:
            raise ValueError(f"{FORMAT_ENV}={text!r} is not a format version; chunkstore writes "
                             f"versions {WRITABLE_VERSIONS}") from None
    if requested not in WRITABLE_VERSIONS or isinstance(requested, bool):
        raise ValueError(f"format_version {requested!r}: chunkstore writes versions {WRITABLE_VERSIONS}")
    return int(requested)


def _write_header(f: h5py.File, version: int, arrays: list[str], extras: list[str],
                  attrs_json: str) -> None:
    from chunkstore import __version__

    f.attrs["format"] = FORMAT_NAME
    f.attrs["format_version"] = version
    f.attrs["chunkstore_version"] = __version__
    f.attrs["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    f.attrs["attrs"] = attrs_json
    f.attrs["arrays"] = json.dumps(arrays)
    f.attrs["extras"] = json.dumps(extras)


def _filter_args(label: str, version: int) -> dict[str, Any]:
    """create_dataset arguments declaring the HDF5 filter that reads a codec's chunks."""
    if label == "zstd":
        return dict(hdf5plugin.Zstd())
    if label == "deflate":
        return {"compression": "gzip"}
    if label == "none":
        return {}
    opts = {"compression": PRIVATE_FILTER_ID, "compression_opts": (version,)}
    return {**opts, "allow_unknown_filter": True}


def _layout(src: ChunkSource, version: int, plain_readable: bool) -> tuple[str, int]:
    """The array's HDF5 filter label and chunks per HDF5 chunk.

    HDF5's own filters (zstd, deflate) decode one stream per HDF5 chunk: given several
    concatenated ones, hdf5plugin's Zstd filter and HDF5's deflate return the first
    chunk's rows and then unrelated bytes, without an error (tested with HDF5 2.0 and
    hdf5plugin 7.1). So grouped chunks are always declared under the private filter.
    """
    label = src.codec.hdf5_filter or "chunkstore"
    if version < 3 or (label != "chunkstore" and plain_readable):
        return label, 1
    group = _groups.choose_group(src.capacity, src.chunk_len, src.item_nbytes, src.nbytes,
                                 target=_groups.TARGET_GROUP_BYTES)
    return ("chunkstore" if group > 1 else label), group


def _write_array(f: h5py.File, name: str, src: ChunkSource, bar: ChunkBar, version: int,
                 plain_readable: bool) -> dict[str, int]:
    """One chunked array; returns the CRC32s of its description, codec config and chunk table."""
    L, item_shape = src.chunk_len, src.item_shape
    if 0 in item_shape:
        raise ValueError(f"{name}: items of shape {item_shape} hold no data; HDF5 cannot chunk them")
    label, group = _layout(src, version, plain_readable)
    # an unlimited first axis gives HDF5 an index of the chunks written (an extensible array);
    # a fixed shape made it allocate 16 B for every chunk of the capacity, written or not
    # (5 MB for a 1M-frame ring holding a few hundred frames)
    dset = f.create_dataset(
        name, shape=src.shape, maxshape=(None, *src.shape[1:]), dtype=h5_dtype(src.dtype),
        chunks=(group * L, *item_shape), track_times=False, **_filter_args(label, version),
    )
    meta = f.require_group(f"{META}/arrays/{name}")
    config = dump_json(src.codec.get_config(), f"{name} codec")
    dset.attrs.update({
        "kind": "chunked_array", "codec": src.codec.name,
        "chunk_len": L, "capacity": src.capacity, "item_shape": json.dumps(item_shape),
        "dtype": dtype_to_json(src.dtype), "hdf5_filter": label,
        "note": _array_note(name, src.codec, label, group),
    })
    if version >= 3:
        dset.attrs[GROUP_ATTR] = group
    if len(config) <= MAX_ATTR_CHARS:
        dset.attrs["codec_config"] = config
    else:  # a trained dictionary: too big for an attribute in the HDF5 1.8 file format
        meta.create_dataset("codec_config", data=np.frombuffer(config.encode(), np.uint8))
    if group == 1:
        crcs, nbytes, tail = _write_chunks(f, name, src, dset, pad_tail=label != "chunkstore", bar=bar)
    else:
        crcs, nbytes, tail = _write_groups(name, src, dset, group, bar), src.nbytes, None
    meta.create_dataset("chunks", data=src.chunks)
    meta.create_dataset("crc32", data=crcs)
    sizes = None
    if version >= 3:
        sizes = np.asarray(nbytes, np.uint32)
        meta.create_dataset("nbytes", data=sizes)
    return {"meta": record_crc(array_record(dset, version)), "codec": crc32(config.encode()),
            "index": record_crc(index_record(src.chunks, crcs, tail, sizes))}


def _write_chunks(f: h5py.File, name: str, src: ChunkSource, dset: h5py.Dataset, *, pad_tail: bool,
                  bar: ChunkBar) -> tuple[np.ndarray, np.ndarray, tuple[int, int] | None]:
    """Every stored chunk verbatim, one per HDF5 chunk; returns their CRC32s and sizes in
    the file, and the verbatim tail's (nbytes, CRC32).

    HDF5 decodes every chunk to full size, so a standard filter needs the partial last
    chunk zero-padded and re-encoded; its original bytes are kept in ``tail``.
    """
    L, last = src.chunk_len, src.nchunks_total - 1
    pad_tail = pad_tail and src.rows(last) < L
    crcs = np.empty(len(src.chunks), dtype=np.uint32)
    nbytes = src.nbytes.copy()
    write = dset.id.write_direct_chunk
    rest = (0,) * len(src.item_shape)
    tail = None
    # the hot loop: one CRC and one HDF5 call per chunk
    for k, (c, view) in enumerate(zip(src.chunks.tolist(), src.iter_bytes(name), strict=True)):
        data: Any = view
        if pad_tail and c == last:
            tail = _write_tail(f, name, data)
            data = _padded_chunk(src, data)
            nbytes[k] = len(data)
        crcs[k] = crc32(data)
        write((c * L, *rest), data)
        bar.step()
    return crcs, nbytes, tail


def _write_groups(name: str, src: ChunkSource, dset: h5py.Dataset, group: int, bar: ChunkBar) -> np.ndarray:
    """Stored chunks ``group`` slots at a time, concatenated verbatim into one HDF5 chunk each;
    returns each chunk's CRC32."""
    crcs = np.empty(len(src.chunks), dtype=np.uint32)
    bounds = _groups.group_bounds(src.chunks, group).tolist()
    write = dset.id.write_direct_chunk
    rows, rest = group * src.chunk_len, (0,) * len(src.item_shape)
    views = src.iter_bytes(name)
    for start, stop in itertools.pairwise(bounds):
        members = list(itertools.islice(views, stop - start))  # the source raises if it runs short
        for k, view in enumerate(members, start):
            crcs[k] = crc32(view)
        write((int(src.chunks[start]) // group * rows, *rest), b"".join(members))
        bar.step(stop - start)
    for _ in views:  # runs the source's own check that it held no more chunks than listed
        pass
    return crcs


def _padded_chunk(src: ChunkSource, data: memoryview) -> bytes:
    """The last chunk (encoded as ``data``) zero-padded to ``chunk_len`` rows and re-encoded
    (for HDF5 readers)."""
    padded = np.zeros((src.chunk_len, *src.item_shape), dtype=src.dtype)
    src.codec.decode(data, out=padded[: src.rows(src.nchunks_total - 1)])
    return bytes(src.codec.encode(padded))


def _write_tail(f: h5py.File, name: str, data: memoryview) -> tuple[int, int]:
    tail = f.create_dataset(f"{META}/arrays/{name}/tail", data=np.frombuffer(data, np.uint8))
    crc = crc32(data)
    tail.attrs["crc32"] = np.uint32(crc)
    return len(data), crc


def _write_extra(f: h5py.File, name: str, value: Any) -> int:
    """One extra; returns the CRC32 of its description."""
    a = np.asarray(value)
    a = a if a.flags.c_contiguous else a.copy(order="C")  # keeps 0-d arrays 0-d
    if a.dtype.hasobject:
        raise TypeError(f"extra {name!r} has dtype {a.dtype}; only plain numpy dtypes can be saved")
    h5dtype = h5_dtype(a.dtype)
    # large extras (a buffer's actions, rewards, dones: 20 B a transition) are zstd
    # compressed by HDF5 itself, so plain h5py + hdf5plugin still reads them
    packed = {"shuffle": True, **hdf5plugin.Zstd(clevel=1)} if a.ndim and a.nbytes >= PACK_EXTRAS else {}
    dset = f.create_dataset(name, data=a.view(h5dtype) if h5dtype != a.dtype else a,
                            track_times=False, **packed)
    dset.attrs.update({"kind": "extra", "dtype": dtype_to_json(a.dtype),
                       "crc32": np.uint32(crc32(raw_bytes(a)))})
    return record_crc(extra_record(dset))


# -- notes for plain HDF5 readers -----------------------------------------------------------
def _array_note(name: str, codec: Codec, label: str, group: int) -> str:
    if label == "zstd":
        return "Zstd chunks: plain h5py reads this dataset after `import hdf5plugin`."
    if label in ("deflate", "none"):
        return "Plain h5py reads this dataset."
    if codec.hdf5_filter is not None:
        why = (f"each HDF5 chunk holds {group} consecutive chunks, each its own {codec.name!r} "
               "stream, and HDF5's filters decode only the first stream of a chunk")
    elif isinstance(codec, TrainableCodec):
        why = ("it was trained on this data (its config, e.g. a zstd dictionary, is the "
               f"'codec_config' attribute or /{META}/arrays/{name}/codec_config)")
    else:
        why = "HDF5 has no filter for it"
    grouped = (f" Each HDF5 chunk holds {group} chunks of the array, verbatim and concatenated; "
               f"their sizes are /{META}/arrays/{name}/nbytes." if group > 1 else "")
    return (f"Chunks are encoded with chunkstore codec {codec.name!r}: {why}. HDF5 cannot "
            f"decode them (filter id {PRIVATE_FILTER_ID}): h5py fails to read them with an "
            "HDF5 filter or plugin-path error. Read this dataset with chunkstore: "
            f"chunkstore.hdf5.load(path).arrays[{name!r}].{grouped}")


def _reader_note(f: h5py.File, sources: Mapping[str, ChunkSource], version: int) -> str:
    private = [f"{n} ({s.codec.name})" for n, s in sources.items()
               if attr_value(f[n], "hdf5_filter") == "chunkstore"]
    text = (f"Written by chunkstore (file format {version}); read it with "
            "`chunkstore.hdf5.load(path)`. Every dataset's 'note' attribute says how to read it. "
            "Chunks of datasets with hdf5_filter 'zstd' (and large extras) are Zstd: "
            "`import hdf5plugin` before reading them with h5py.")
    if private:
        text += (" These datasets need chunkstore to decode (plain h5py fails with an HDF5 "
                 f"filter or plugin-path error, filter id {PRIVATE_FILTER_ID}): "
                 + ", ".join(private) + ".")
    return text


def _fsync_dir(path: str) -> None:
    """Make the rename durable where the filesystem can; the save already happened, so never raise."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems cannot fsync a directory
        pass
    finally:
        os.close(fd)
