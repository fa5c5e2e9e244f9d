"""Save and load a store -- named ChunkedArrays, plain arrays, attributes -- as one HDF5 file.

* :mod:`~chunkstore.hdf5.writer` -- :func:`save`, atomic (temporary + rename).
* :mod:`~chunkstore.hdf5.reader` -- :func:`load` and :class:`Store`; lazily loaded
  arrays read their chunks through :mod:`~chunkstore.hdf5.filetier`.
* :mod:`~chunkstore.hdf5.verify` -- :func:`verify` / :func:`verify_report`.
* :mod:`~chunkstore.hdf5.checksum` -- the one CRC32 helper.

Layout (format version 2)::

    /                        attrs: format="chunkstore", format_version=2, chunkstore_version,
                                    created (UTC, ISO 8601), attrs (user attrs as JSON),
                                    arrays, extras (JSON lists of names), checksums (JSON,
                                    below), reader_note (how to read the file without us)
    /<array>                 one chunked dataset per ChunkedArray: shape (capacity, *item_shape),
                             HDF5 chunk (chunk_len, *item_shape) == our chunk, written verbatim
                             with write_direct_chunk. attrs: kind="chunked_array", codec,
                             codec_config (JSON incl. "id"; see below when large), chunk_len,
                             capacity, item_shape, dtype, hdf5_filter, note
    /<extra>                 a plain dataset (Zstd-compressed by HDF5 from 64 KB).
                             attrs: kind="extra", dtype, crc32 (of its bytes)
    /_chunkstore/arrays/<array>/chunks   int64: indices of the stored chunks
    /_chunkstore/arrays/<array>/crc32    uint32: CRC32 of each stored chunk's bytes in the file
    /_chunkstore/arrays/<array>/tail     uint8: the partial last chunk, verbatim (see below)
    /_chunkstore/arrays/<array>/codec_config  uint8 JSON, instead of the attribute when it
                                         is over 16 KB (a trained zstd dictionary)

Checksums. Chunk bytes and extras carry CRC32s (format 1 already). Format 2 adds the
root attribute ``checksums``: ``{"header": crc, "arrays": {name: {"meta": crc, "codec":
crc, "index": crc}}, "extras": {name: crc}}``, CRC32s of the root attributes above (but
``checksums`` and ``reader_note``), of each array's dataset description (attributes,
shape, HDF5 chunk shape and dtype), of its codec config text (which holds a trained
dictionary), of its chunk table (indices, CRC32s, tail length and CRC32), and of each
extra's description (shape, dtypes, data CRC32). So everything that affects decoded
data or buffer state is covered: one changed character of a dictionary or of ``pos`` is
a :class:`~chunkstore.errors.CorruptFileError`, never silently different data. Format 1
files (no ``checksums``) still load, with the chunk and extra CRC32s only.

Codecs and HDF5 filters. Chunks are never recompressed; what plain HDF5 readers see
depends on the codec's :attr:`~chunkstore.codecs.Codec.hdf5_filter`:

* ``zstd`` chunks are Zstd frames with the content size: the dataset declares
  hdf5plugin's Zstd filter (32015), and ``h5py`` + ``hdf5plugin`` read it. So does
  ``zstd3+dict`` before it is trained; once trained, its frames need the dictionary.
* ``gzip`` / ``igzip`` chunks are zlib streams: HDF5's built-in deflate filter.
* ``none`` chunks are the raw bytes: no filter at all.
* Every other codec (a trained dictionary, lz4, rle, blosc2, ``xor+...``) declares the
  private filter :data:`PRIVATE_FILTER_ID` with ``allow_unknown_filter``. Nothing
  provides it, so plain ``dset[a:b]`` over a stored chunk fails (HDF5 reports a missing
  filter or plugin directory) instead of returning encoded bytes as data; unwritten
  chunks read as zeros. The dataset keeps its true shape and dtype; its ``note``
  attribute and the root ``reader_note`` say that chunkstore is needed, and why.

The partial last chunk. HDF5 stores every chunk at full size, so a filter must decode
the last chunk to ``chunk_len`` rows. For datasets with a standard filter (or none), it
is re-encoded zero-padded into the dataset, so plain readers see the exact shape and
data, and its original bytes are kept verbatim in ``tail``, which chunkstore loads.

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
from chunkstore.hdf5.reader import Store, load
from chunkstore.hdf5.verify import Problem, VerifyReport, verify, verify_report
from chunkstore.hdf5.writer import save

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "PRIVATE_FILTER_ID",
    "Problem",
    "Store",
    "VerifyReport",
    "load",
    "save",
    "verify",
    "verify_report",
]
