"""Saving and loading safely: temporaries, files changed under a lazy load, non-regular files.

* ``save`` creates its temporary exclusively, under an unpredictable name, never through
  a symlink, and removes the temporaries of earlier killed saves (only its own, dead ones).
* A lazily loaded file overwritten in place or truncated raises FileChangedError at the
  next read instead of returning other data or dying of SIGBUS (run in a subprocess).
* A chunk rewritten in place after it was read, with the file's size and mtime restored,
  raises CorruptChunkError naming the chunk and the file at its next read (native and
  Python read paths, the save of a lazily loaded store).
* FIFOs, directories and devices are refused at once, without blocking.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from chunkstore import ChunkedArray, CorruptChunkError, FileChangedError, FormatError, hdf5
from chunkstore.hdf5 import _tempfile

REPO = Path(__file__).resolve().parents[2]


def small_store(path: Path, fill: int = 1, n: int = 64) -> np.ndarray:
    arr = ChunkedArray(n, (8, 8), np.uint8, chunk_len=8, codec="zstd3", name="obs")
    data = (np.arange(n * 64, dtype=np.uint64).reshape(n, 8, 8) * fill % 251).astype(np.uint8)
    arr[:] = data
    hdf5.save(path, {"obs": arr}, {"pos": np.array(n - 1)}, {"fill": fill}, progress=False)
    return data


def temporaries(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(_tempfile.SUFFIX))


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


# -- the temporary -------------------------------------------------------------------------------
def test_temporary_names_are_unpredictable_and_exclusive(tmp_path):
    target = str(tmp_path / "buf.h5")
    a, fa = _tempfile.create_temporary(target)
    b, fb = _tempfile.create_temporary(target)
    try:
        assert a != b and Path(a).parent == tmp_path
        assert Path(a).name.startswith(f".buf.h5.{os.getpid()}.") and a.endswith(_tempfile.SUFFIX)
        assert stat.S_ISREG(os.lstat(a).st_mode) and os.path.getsize(a) == 0
    finally:
        for name, fd in ((a, fa), (b, fb)):
            os.close(fd)
            os.unlink(name)


def test_save_never_follows_a_symlink_planted_at_the_temporary(tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    names = iter(["0" * 16, "1" * 16])
    monkeypatch.setattr(_tempfile.secrets, "token_hex", lambda n: next(names))
    planted = tmp_path / f".buf.h5.{os.getpid()}.{'0' * 16}{_tempfile.SUFFIX}"
    planted.symlink_to(victim)  # an attacker guessed the first name
    want = small_store(tmp_path / "buf.h5")
    assert victim.read_text() == "precious" and planted.is_symlink()
    with hdf5.load(tmp_path / "buf.h5") as store:
        assert np.array_equal(np.asarray(store.arrays["obs"]), want)
    assert temporaries(tmp_path) == [planted]  # the symlink is not ours: left alone


def test_a_stale_temporary_of_a_killed_save_is_removed_by_the_next_save(tmp_path):
    small_store(tmp_path / "buf.h5")
    stale = tmp_path / f".buf.h5.{dead_pid()}.{'a' * 16}{_tempfile.SUFFIX}"
    stale.write_bytes((tmp_path / "buf.h5").read_bytes()[:5000])  # a killed save's partial file
    legacy = tmp_path / f"buf.h5.tmp-{dead_pid()}"  # format 1's temporary name
    legacy.write_bytes(b"")
    for p in (stale, legacy):
        age(p, 120)
    small_store(tmp_path / "buf.h5", fill=2)
    assert temporaries(tmp_path) == [] and not legacy.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["buf.h5"]


def test_temporaries_that_are_not_clearly_ours_and_dead_are_kept(tmp_path):
    small_store(tmp_path / "buf.h5")
    dead, mark = dead_pid(), _tempfile.SUFFIX
    keep = {
        "recent": tmp_path / f".buf.h5.{dead}.{'b' * 16}{mark}",  # its writer may just have died
        "alive": tmp_path / f".buf.h5.{os.getppid()}.{'c' * 16}{mark}",  # a live process writes it
        "not hdf5": tmp_path / f".buf.h5.{dead}.{'d' * 16}{mark}",
        "other file": tmp_path / f".other.h5.{dead}.{'e' * 16}{mark}",
        "directory": tmp_path / f".buf.h5.{dead}.{'f' * 16}{mark}",
        "symlink": tmp_path / f".buf.h5.{dead}.{'9' * 16}{mark}",
    }
    for what, p in keep.items():
        if what == "directory":
            p.mkdir()
        elif what == "symlink":
            p.symlink_to(tmp_path / "buf.h5")
        else:
            p.write_bytes(b"not an HDF5 file" if what == "not hdf5" else b"")
        if what != "recent":
            age(p, 120)
    small_store(tmp_path / "buf.h5", fill=3)
    assert all(os.path.lexists(p) for p in keep.values())
    assert _tempfile.remove_stale_temporaries(str(tmp_path / "buf.h5")) == []


def test_a_failed_save_leaves_no_temporary_and_the_old_file(tmp_path):
    want = small_store(tmp_path / "buf.h5")
    before = (tmp_path / "buf.h5").read_bytes()
    with pytest.raises(TypeError):
        hdf5.save(tmp_path / "buf.h5", {}, {"bad": np.array([object()])}, progress=False)
    assert (tmp_path / "buf.h5").read_bytes() == before and temporaries(tmp_path) == []
    with hdf5.load(tmp_path / "buf.h5") as store:
        assert np.array_equal(np.asarray(store.arrays["obs"]), want)


# -- a lazily loaded file changed under the reader ------------------------------------------------
_CHANGED_UNDER_READER = """
import os, shutil, sys, numpy as np
from chunkstore import hdf5, FileChangedError, CorruptChunkError
path, other, how = sys.argv[1], sys.argv[2], sys.argv[3]
store = hdf5.load(path, cache=0)
arr = store.arrays["obs"]
first = arr[0].copy()  # mapped and read before the change
if how == "truncate":
    os.truncate(path, 2048)
elif how == "cp":  # cp new.h5 buf.h5: same inode, new bytes
    shutil.copyfile(other, path)
elif how == "rename":  # the right way: the reader keeps its file
    os.replace(other, path)
try:
    again = np.asarray(arr)
except CorruptChunkError as e:  # ChunkedArray names the chunk; the cause is the change
    print(type(e.__cause__ if isinstance(e.__cause__, FileChangedError) else e).__name__, e)
else:
    print("read", bool(np.array_equal(again[0], first)))
"""


@pytest.mark.parametrize("how", ["truncate", "cp"])
def test_file_changed_in_place_under_a_lazy_load_is_a_clear_error(tmp_path, how):
    small_store(tmp_path / "buf.h5", fill=1, n=4096)
    small_store(tmp_path / "new.h5", fill=2, n=4096)
    proc = subprocess.run([sys.executable, "-c", _CHANGED_UNDER_READER, str(tmp_path / "buf.h5"),
                           str(tmp_path / "new.h5"), how], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != -signal.SIGBUS, "killed by SIGBUS"
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("FileChangedError"), proc.stdout
    assert "changed in place" in proc.stdout and "rename" in proc.stdout


def test_file_replaced_by_rename_keeps_reading_the_old_file(tmp_path):
    small_store(tmp_path / "buf.h5", fill=1, n=4096)
    small_store(tmp_path / "new.h5", fill=2, n=4096)
    proc = subprocess.run([sys.executable, "-c", _CHANGED_UNDER_READER, str(tmp_path / "buf.h5"),
                           str(tmp_path / "new.h5"), "rename"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "read True", proc.stderr


def test_changed_file_error_is_sticky_and_names_the_file(tmp_path):
    small_store(tmp_path / "buf.h5")
    with hdf5.load(tmp_path / "buf.h5", cache=0) as store:
        arr = store.arrays["obs"]
        arr[0]
        with open(tmp_path / "buf.h5", "r+b") as fh:  # same size, new mtime
            fh.seek(100)
            fh.write(b"\0")
            os.utime(fh.fileno(), ns=(0, 0))
        for _ in range(2):
            with pytest.raises(CorruptChunkError, match=r"buf.h5 was changed in place after it "
                               r"was loaded \(rewritten, same size\)") as e:
                arr[5]
            assert isinstance(e.value, FileChangedError)  # raised as it is: it names the file
        with pytest.raises(FileChangedError):  # straight from the mapped file
            store._file.check_unchanged()


def rewrite_in_place(path: Path, offset: int, data: bytes) -> None:
    """Write ``data`` into ``path`` at ``offset`` and put its mtime back: size and mtime unchanged."""
    st = os.stat(path)
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


@pytest.mark.parametrize("verify", [None, "always"])
@pytest.mark.parametrize("path_kind", ["native", "python"])
def test_a_chunk_rewritten_in_place_with_mtime_restored_is_caught_at_its_next_read(
        tmp_path, monkeypatch, path_kind, verify):
    from chunkstore import native

    if path_kind == "python":
        monkeypatch.setattr(native, "available", lambda: False)
    elif not native.available():
        pytest.skip("the native layer is not available here")
    want = small_store(tmp_path / "buf.h5")
    spans = hdf5.chunk_spans(tmp_path / "buf.h5", "obs")
    c, off, n = (int(v) for v in spans[3])
    with hdf5.load(tmp_path / "buf.h5", cache=0, verify=verify) as store:
        arr = store.arrays["obs"]
        for _ in range(2):  # read (and verified) already, twice
            assert np.array_equal(arr[[24, 30, 0]], want[[24, 30, 0]])
        assert np.array_equal(np.asarray(arr), want)  # every chunk checked: batches skip the lookup
        assert arr.tier.info()["verified_chunks"] == 8
        original = (tmp_path / "buf.h5").read_bytes()[off:off + n]
        rewrite_in_place(tmp_path / "buf.h5", off + n // 2, bytes([original[n // 2] ^ 0x40]))
        store._file.check_unchanged()  # size and mtime say nothing happened
        for _ in range(2):
            with pytest.raises(CorruptChunkError, match=rf"obs: chunk {c} in .*buf.h5 is corrupt") as e:
                arr[[24, 0]]
            assert (e.value.array, e.value.chunk) == ("obs", c)
        assert np.array_equal(arr[[0, 63]], want[[0, 63]])  # the other chunks still read
        rewrite_in_place(tmp_path / "buf.h5", off, original)  # put back: reads again
        assert np.array_equal(arr[[24, 30]], want[[24, 30]])


def test_verify_always_does_not_rely_on_the_ctime(tmp_path, monkeypatch):
    """A filesystem whose ctime does not move: the default misses the rewrite, "always" does not."""
    from chunkstore.hdf5.filetier import MappedFile

    monkeypatch.setattr(MappedFile, "_ctime_moved", lambda self, st: None)
    want = small_store(tmp_path / "buf.h5")
    c, off, _n = (int(v) for v in hdf5.chunk_spans(tmp_path / "buf.h5", "obs")[1])
    with hdf5.load(tmp_path / "buf.h5", cache=0) as default, \
            hdf5.load(tmp_path / "buf.h5", cache=0, verify="always") as always:
        for store in (default, always):
            assert np.array_equal(store.arrays["obs"][[8, 9]], want[[8, 9]])
        byte = (tmp_path / "buf.h5").read_bytes()[off]
        rewrite_in_place(tmp_path / "buf.h5", off, bytes([byte ^ 0xFF]))
        with pytest.raises(CorruptChunkError, match=rf"obs: chunk {c} in "):
            always.arrays["obs"][[8, 9]]
        try:  # what the default gives without a ctime: wrong bytes or a decode error
            got = default.arrays["obs"][[8, 9]]
        except CorruptChunkError:
            pass
        else:
            assert not np.array_equal(got, want[[8, 9]])


def test_a_ctime_change_without_a_rewrite_only_checks_the_chunks_again(tmp_path):
    want = small_store(tmp_path / "buf.h5")
    with hdf5.load(tmp_path / "buf.h5", cache=0) as store:
        arr = store.arrays["obs"]
        assert np.array_equal(np.asarray(arr), want)
        assert arr.tier.info()["verified_chunks"] == 8
        os.chmod(tmp_path / "buf.h5", 0o600)  # moves the ctime, not the bytes
        small_store(tmp_path / "new.h5", fill=2)
        os.replace(tmp_path / "new.h5", tmp_path / "buf.h5")  # unlinks the loaded inode: ctime again
        assert np.array_equal(arr[[0, 20]], want[[0, 20]])
        assert arr.tier.info()["verified_chunks"] == 2  # forgotten, and checked again as read
        assert np.array_equal(np.asarray(arr), want)


def test_saving_a_lazy_store_never_launders_a_chunk_rewritten_in_place(tmp_path):
    small_store(tmp_path / "buf.h5")
    c, off, _n = (int(v) for v in hdf5.chunk_spans(tmp_path / "buf.h5", "obs")[5])
    with hdf5.load(tmp_path / "buf.h5", cache=0) as store:
        np.asarray(store.arrays["obs"])  # every chunk read once
        byte = (tmp_path / "buf.h5").read_bytes()[off]
        rewrite_in_place(tmp_path / "buf.h5", off, bytes([byte ^ 1]))
        with pytest.raises(CorruptChunkError, match=rf"obs: chunk {c} in "):
            hdf5.save(tmp_path / "copy.h5", store.arrays, progress=False)
        with pytest.raises(CorruptChunkError, match=rf"obs: chunk {c} in "):
            hdf5.save(tmp_path / "copy.h5", {"obs": store.arrays["obs"].snapshot()}, progress=False)
    assert not (tmp_path / "copy.h5").exists()


# -- files that are not regular files ------------------------------------------------------------
_LOAD_FIFO = """
import sys
from chunkstore import hdf5, FormatError
for fn in (hdf5.load, hdf5.verify):
    try:
        fn(sys.argv[1])
    except FormatError as e:
        print(type(e).__name__, e)
"""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "buf.h5"
    os.mkfifo(fifo)
    # a FIFO with no writer blocks an open() forever: the timeout guards the test run
    proc = subprocess.run([sys.executable, "-c", _LOAD_FIFO, str(fifo)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and all("is a FIFO, not a regular file" in line for line in lines), proc


def test_a_directory_is_refused(tmp_path):
    (tmp_path / "buf.h5").mkdir()
    with pytest.raises(FormatError, match="is a directory, not a regular file"):
        hdf5.load(tmp_path / "buf.h5")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_device_is_refused():
    with pytest.raises(FormatError, match="character device"):
        hdf5.verify("/dev/zero")
