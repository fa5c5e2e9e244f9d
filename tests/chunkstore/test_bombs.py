"""Decompression bombs: a chunk decodes into at most its expected size, for every codec.

A crafted chunk (whoever crafts a file also writes its CRC) may expand to gigabytes.
Every codec must refuse it with a DecodeError (a CorruptChunkError) without producing
more than ``out`` holds: the bombs run in a fresh interpreter whose peak RSS must stay
far below what any one bomb expands to.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from chunkstore.codecs import DecodeError, get_codec
from chunkstore.errors import CorruptChunkError

REPO = Path(__file__).resolve().parents[2]
BOMB_BYTES = 256 << 20  # what each bomb expands to
EXPECTED = 4096  # what the chunk should hold


def zstd_rle_bomb(total: int, *, content_size: int | None = None) -> bytes:
    """A zstd frame of RLE blocks (4 bytes per 128 KiB): 4 GiB fit in 128 KiB.

    Without ``content_size`` the frame does not declare its size (as frames from
    other writers may not); with it, the header lies.
    """
    block = 128 << 10
    if content_size is None:
        header = bytes([0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x38])  # no size, 128 KiB window
    else:  # 8-byte content size field, window descriptor present
        header = bytes([0x28, 0xB5, 0x2F, 0xFD, 0xC0, 0x38]) + struct.pack("<Q", content_size)
    n = total // block
    blocks = [((block << 3) | (1 << 1) | (k == n - 1)).to_bytes(3, "little") + b"\x07"
              for k in range(n)]
    return header + b"".join(blocks)


def rle_chunk(lengths: list[int], width: int = 1) -> bytes:
    """An ``rle`` chunk of byte-wide items with 8-byte run lengths (version 1 layout)."""
    header = struct.pack("<BBBxIQ", 1, width, 8, 1, len(lengths))
    return header + bytes(len(lengths) * width) + np.array(lengths, "<i8").tobytes()


_BOMBS = r"""
import json, resource, struct, sys, zlib
import numpy as np, lz4.frame, lz4.block, blosc2
from chunkstore.codecs import DecodeError, get_codec
sys.path.insert(0, sys.argv[1])
from test_bombs import BOMB_BYTES, EXPECTED, rle_chunk, zstd_rle_bomb

zeros = np.zeros(1 << 24, np.uint8)
def deflate(level):
    z = zlib.compressobj(level)
    return b"".join(z.compress(zeros) for _ in range(BOMB_BYTES // zeros.size)) + z.flush()

zstd = zstd_rle_bomb(BOMB_BYTES)
bombs = {
    "zstd without content size": ("zstd/3", zstd),
    "zstd with a lying content size": ("zstd/3", zstd_rle_bomb(BOMB_BYTES, content_size=EXPECTED)),
    "zstd+dict without content size": ("zstd/3+dict", zstd),
    "gzip": ("gzip/6", deflate(1)),
    "lz4-frame without content size": ("lz4-frame/0", lz4.frame.compress(
        np.zeros(BOMB_BYTES, np.uint8), store_size=False)),
    "lz4-frame declaring its size": ("lz4-frame/0", lz4.frame.compress(
        np.zeros(BOMB_BYTES, np.uint8), store_size=True)),
    "lz4-block": ("lz4-block/0", struct.pack("<I", 2**31 - 1) + b"\x00" * 64),
    "blosc2": ("blosc2-zstd-5", blosc2.compress(np.zeros(BOMB_BYTES, np.uint8), typesize=1)),
    "rle one long run": ("rle", rle_chunk([2**40])),
    "rle runs wrapping around 2**64": ("rle", rle_chunk([2**63 - 1, 2**63 - 1, 2 + EXPECTED])),
    "xor+zstd": ("xor+zstd/1", struct.pack("<Q", 4) + zstd),
    "none": ("none", bytes(EXPECTED + 1)),
}
try:
    get_codec("igzip")
    bombs["igzip"] = ("igzip/2", deflate(1))
except ImportError:
    pass
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
results = {}
for what, (codec, data) in bombs.items():
    out = np.empty(EXPECTED, np.uint8)
    try:
        get_codec(codec).decode(data, out=out)
        results[what] = "decoded"
    except DecodeError as e:
        results[what] = "DecodeError"
    except BaseException as e:
        results[what] = f"{type(e).__name__}: {e}"
grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"results": results, "grown_mb": grown_kb / 1024}))
"""


def test_every_codec_refuses_a_bomb_without_expanding_it():
    proc = subprocess.run([sys.executable, "-c", _BOMBS, str(Path(__file__).parent)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report["results"].values()) == {"DecodeError"}, report["results"]
    # each bomb expands to 256 MiB: decoding any of them would have taken that much
    assert report["grown_mb"] < 64, report


def test_bomb_helpers_make_valid_bombs():
    """The crafted frames really expand (checked small): the test above tests bounds, not garbage."""
    import zstandard

    small = zstd_rle_bomb(1 << 20)
    assert zstandard.frame_content_size(small) == -1
    assert zstandard.ZstdDecompressor().decompressobj().decompress(small) == b"\x07" * (1 << 20)
    assert len(get_codec("rle").decode(rle_chunk([5, 7]))) == 12


@pytest.mark.parametrize("codec", ["zstd/3", "gzip/6", "lz4-frame/0", "lz4-block/0", "rle",
                                   "xor+zstd/1", "blosc2-lz4-5", "none"])
@pytest.mark.parametrize("delta", [-1, 1])
def test_a_chunk_one_byte_off_is_refused(codec, delta):
    c = get_codec(codec)
    data = np.arange(4000, dtype=np.uint8)
    enc = c.encode(data)
    with pytest.raises(DecodeError):
        c.decode(enc, out=np.empty(data.size + delta, np.uint8))
    assert issubclass(DecodeError, CorruptChunkError)
    assert np.array_equal(c.decode(enc, out=np.empty_like(data)), data)


def test_unsized_zstd_frames_from_other_writers_still_decode():
    raw = np.arange(100_000, dtype=np.uint32)
    import zstandard

    frame = zstandard.ZstdCompressor(write_content_size=False).compress(raw.tobytes())
    assert np.array_equal(get_codec("zstd3").decode(frame, out=np.empty_like(raw)), raw)
    with pytest.raises(DecodeError, match="more"):
        get_codec("zstd3").decode(frame, out=np.empty(raw.size - 1, np.uint32))
    with pytest.raises(DecodeError):
        get_codec("zstd3").decode(frame, out=np.empty(raw.size + 1, np.uint32))


def test_truncated_streams_are_refused():
    data = np.random.default_rng(0).integers(0, 4, 5000).astype(np.uint8)
    for name in ("gzip/6", "lz4-frame/0", "zstd/3"):
        enc = bytes(get_codec(name).encode(data))
        with pytest.raises(DecodeError):
            get_codec(name).decode(enc[:-4], out=np.empty_like(data))


def test_empty_chunks_decode_and_bombs_of_empty_chunks_do_not():
    for name in ("gzip/6", "lz4-frame/0", "zstd/3", "rle"):
        c = get_codec(name)
        out = np.empty(0, np.uint8)
        assert c.decode(c.encode(out), out=out).size == 0
    with pytest.raises(DecodeError):  # wraps to 0 in uint64 arithmetic
        get_codec("rle").decode(rle_chunk([2**63 - 1, 2**63 - 1, 2]), out=np.empty(0, np.uint8))
    script = textwrap.dedent("""
        import zlib, numpy as np
        from chunkstore.codecs import get_codec, DecodeError
        bomb = zlib.compress(bytes(64 << 20), 1)
        try:
            get_codec("gzip").decode(bomb, out=np.empty(0, np.uint8))
        except DecodeError:
            print("refused")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True)
    assert proc.stdout.strip() == "refused", proc.stderr
