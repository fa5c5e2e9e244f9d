"""Save and load a store -- named ChunkedArrays, plain arrays, attributes -- as one HDF5 file.

* :mod:`~chunkstore.hdf5.writer` -- :func:`save`, atomic (temporary + rename), reading
  arrays through :mod:`~chunkstore.hdf5.source` (:class:`ChunkSource`).
* :mod:`~chunkstore.hdf5.reader` -- :func:`load` and :class:`Store`; lazily loaded
  arrays read their chunks through :mod:`~chunkstore.hdf5.filetier`; :func:`chunk_spans`
  says where each chunk's bytes are in a file.
* :mod:`~chunkstore.hdf5._groups` -- how format 3 packs chunks into HDF5 chunks.
* :mod:`~chunkstore.hdf5.verify` -- :func:`verify` / :func:`verify_report`.
* :mod:`~chunkstore.hdf5.checksum` -- the one CRC32 helper.
* :mod:`~chunkstore.hdf5.observations` -- :func:`read_observations` (one array's stored items, for tools).

Layout (format version 3)::

    /                        attrs: format="chunkstore", format_version=3, chunkstore_version,
                                    created (UTC, ISO 8601), attrs (user attrs as JSON),
                                    arrays, extras (JSON lists of names), checksums (JSON,
                                    below), reader_note (how to read the file without us)
    /<array>                 one chunked dataset per ChunkedArray: shape (capacity, *item_shape),
                             HDF5 chunk (G * chunk_len, *item_shape): HDF5 chunk g holds our
                             chunks g*G .. g*G+G-1 that are stored, verbatim, concatenated in
                             index order, written with one write_direct_chunk call. attrs:
                             kind="chunked_array", codec, codec_config (JSON incl. "id"; see
                             below when large), chunk_len, capacity, item_shape, dtype,
                             hdf5_filter, chunks_per_hdf5_chunk (G), note
    /<extra>                 a plain dataset (Zstd-compressed by HDF5 from 64 KB).
                             attrs: kind="extra", dtype, crc32 (of its bytes)
    /_chunkstore/arrays/<array>/chunks   int64: indices of the stored chunks
    /_chunkstore/arrays/<array>/crc32    uint32: CRC32 of each stored chunk's bytes in the file
    /_chunkstore/arrays/<array>/nbytes   uint32: size of each stored chunk's bytes in the file
    /_chunkstore/arrays/<array>/tail     uint8: the partial last chunk, verbatim (see below)
    /_chunkstore/arrays/<array>/codec_config  uint8 JSON, instead of the attribute when it
                                         is over 16 KB (a trained zstd dictionary)

Where a chunk's bytes are. Chunk c lies in HDF5 chunk ``c // G``, after the stored
chunks of its group with smaller indices: its file offset is the HDF5 chunk's file
offset (HDF5's chunk index) plus their ``nbytes``. A lazily loaded array reads exactly
those bytes (``pread`` on the native path), never a whole HDF5 chunk, and checks their
CRC32 on the first read, and again after any change of the file's ctime. The reader
refuses a file whose HDF5 chunk sizes differ from
the sums of their chunks' ``nbytes``. ``G`` is chosen per array at save time so that
an HDF5 chunk holds about 256 KB (see :mod:`~chunkstore.hdf5._groups`): a save makes
one HDF5 call per group instead of one per chunk. Measured (``tools/bench_persistence.py``,
``results/bench_persistence_v3.md``; a buffer of 1M MsPacman transitions, default
codec, G = 366): save 0.94 s against format 2's 1.73 s in the same run, lazy load
0.09 s against 0.43 s, file 0.97x the compressed bytes in RAM. ``G`` is 1 where plain
HDF5 readers decode the chunks (below), unless ``save(..., plain_readable=False)``.

Format 2 (still read, and written by ``save(..., format_version=2)``) is format 3 with
G = 1 everywhere, without ``chunks_per_hdf5_chunk`` and ``nbytes`` (sizes come from
HDF5's chunk index). Format 1 files have no metadata checksums.

Checksums. Chunk bytes and extras carry CRC32s (format 1 already). Format 2 adds the
root attribute ``checksums``: ``{"header": crc, "arrays": {name: {"meta": crc, "codec":
crc, "index": crc}}, "extras": {name: crc}}``, CRC32s of the root attributes above (but
``checksums`` and ``reader_note``), of each array's dataset description (attributes,
shape, HDF5 chunk shape and dtype; format 3: with ``chunks_per_hdf5_chunk``), of its
codec config text (which holds a trained dictionary), of its chunk table (indices,
CRC32s, tail length and CRC32; format 3: and ``nbytes``), and of each extra's
description (shape, dtypes, data CRC32). So everything that affects decoded data or
buffer state is covered: one changed character of a dictionary or of ``pos`` is a
:class:`~chunkstore.errors.CorruptFileError`, never silently different data. Format 1
files (no ``checksums``) still load, with the chunk and extra CRC32s only.

Codecs, HDF5 filters, and what plain h5py + hdf5plugin reads. Chunks are never
recompressed; what plain HDF5 readers see depends on the codec's
:attr:`~chunkstore.codecs.Codec.hdf5_filter` and on G:

* ``zstd`` chunks are Zstd frames with the content size: with G = 1 the dataset
  declares hdf5plugin's Zstd filter (32015), and ``h5py`` + ``hdf5plugin`` read it. So
  does ``zstd3+dict`` before it is trained; once trained, its frames need the dictionary.
* ``gzip`` / ``igzip`` chunks are zlib streams: HDF5's built-in deflate filter (G = 1).
* ``none`` chunks are the raw bytes: no filter at all (G = 1).
* Several chunks in one HDF5 chunk (G > 1) cannot be declared under those filters:
  HDF5's filters decode one stream per HDF5 chunk. hdf5plugin's Zstd filter sizes its
  output by the first frame's content size and does not check ``ZSTD_decompress``'s
  error, HDF5's deflate stops at the end of the first stream; given G concatenated
  streams both return the first chunk's rows followed by unrelated bytes, *without an
  error* (tested with HDF5 2.0, hdf5plugin 7.1). So grouped datasets always declare the
  private filter below, whatever the codec, and plain readers fail loudly on them.
* Every other codec (a trained dictionary, lz4, rle, blosc2, ``xor+...``) declares the
  private filter :data:`PRIVATE_FILTER_ID` with ``allow_unknown_filter``. Nothing
  provides it, so plain ``dset[a:b]`` over a stored chunk fails (HDF5 reports a missing
  filter or plugin directory) instead of returning encoded bytes as data; HDF5 chunks
  holding no stored chunk read as zeros (with G > 1, an unwritten chunk beside written
  ones fails like them). The dataset keeps its true shape and dtype; its ``note``
  attribute and the root ``reader_note`` say that chunkstore is needed, and why.

Measured cost of keeping plain zstd readable (G = 1), same run as above, store level:
1M frames at chunk_len 4 with plain ``zstd3`` (250k chunks) save in 2.05 s (format 2:
2.10 s), grouped with ``plain_readable=False`` in 0.98 s (0.46x). The default keeps them
readable, as the documentation of the ``zstd3`` codec promises; the default codec (a
trained dictionary) is grouped either way.

The partial last chunk. HDF5 stores every chunk at full size, so a filter must decode
the last chunk to ``chunk_len`` rows. For datasets with a standard filter (or none), it
is re-encoded zero-padded into the dataset, so plain readers see the exact shape and
data, and its original bytes are kept verbatim in ``tail``, which chunkstore loads.
Grouped datasets hold it verbatim in its group (no plain reader decodes them).

Snapshots. The writer reads arrays only through
:class:`~chunkstore.hdf5.source.ChunkSource` (geometry, codec, stored chunk indices and
sizes, then each chunk's bytes once, in order); a ChunkedArray adapts to it, and so
does a frozen list of ``(chunk index, bytes)``: a file saved from such a snapshot holds
exactly it, whatever the array does meanwhile. A chunk whose bytes do not have the
size listed stops the save with an error (nothing is written).

Crash safety: see :mod:`~chunkstore.hdf5._tempfile` (exclusive, unpredictable temporary
next to the file, fsync, rename, fsync of the directory; stale temporaries of killed
saves are removed by the next save). Readers never trust sizes a file declares before
checking them against what it holds (see :mod:`~chunkstore.hdf5._meta`).

Replace saved files by rename (``save`` does, ``mv`` does), never by writing into them
(``cp new.h5 buf.h5``, truncation): a lazily loaded store maps the file it opened, keeps
reading it after a rename, and raises :class:`~chunkstore.errors.FileChangedError` at
its next read when the file was changed in place (see :mod:`~chunkstore.hdf5.filetier`).

Examples
--------
>>> import os, tempfile, numpy as np
>>> from chunkstore import ChunkedArray
>>> obs = ChunkedArray(100, (4, 4), np.uint8, chunk_len=16, codec="zstd3", name="obs")
>>> obs[:50] = np.arange(50, dtype=np.uint8)[:, None, None]
>>> path = os.path.join(tempfile.mkdtemp(), "store.h5")
>>> save(path, {"obs": obs}, {"pos": np.array(50)}, {"note": "demo"}, progress=False)
>>> with load(path) as store:
...     int(store.arrays["obs"][49, 0, 0]), int(store.extras["pos"]), store.attrs["note"]
(49, 50, 'demo')
>>> verify(path)
[]
"""

from __future__ import annotations

from chunkstore.hdf5._layout import FORMAT_NAME, FORMAT_VERSION, PRIVATE_FILTER_ID
from chunkstore.hdf5.observations import read_observations
from chunkstore.hdf5.reader import Store, chunk_spans, load
from chunkstore.hdf5.source import ChunkSource
from chunkstore.hdf5.verify import Problem, VerifyReport, verify, verify_report
from chunkstore.hdf5.writer import save

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "PRIVATE_FILTER_ID",
    "ChunkSource",
    "Problem",
    "Store",
    "VerifyReport",
    "chunk_spans",
    "load",
    "read_observations",
    "save",
    "verify",
    "verify_report",
]
