"""A full disk: a write that fails says which file, loses nothing stored, and the buffer goes on.

Real ENOSPC needs a small filesystem: a tmpfs mounted for the test (root with CAP_SYS_ADMIN);
where mounting is not permitted those tests skip, and the tests that always run get the same
failures from a ``pwrite`` that raises ENOSPC, or from a file size limit (RLIMIT_FSIZE: EFBIG)
in a subprocess, which HDF5's own writes hit. (Before a save reserved its space, that
subprocess raised the right error and then died with SIGSEGV: HDF5 crashes releasing the
handles of a file one of its writes failed on; its exit status is asserted.)
"""

from __future__ import annotations

import copy
import errno
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces
from signal_harness import rows_equal, samples_equal, transitions
from stable_baselines3.common.buffers import ReplayBuffer

from chunkstore import DiskTier, HybridTier
from sb3_integration import CompressedReplayBuffer

REPO = Path(__file__).resolve().parents[1]
IMG = spaces.Box(0, 255, (4, 84, 84), np.uint8)
ACT = spaces.Discrete(6)


@pytest.fixture(scope="module")
def steps():
    return list(transitions("replay", 1200))


@pytest.fixture
def small_fs(tmp_path):
    """A 24 MiB tmpfs (skips where this process may not mount one)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(path: Path) -> None:
    """Write zeros to ``path`` until the filesystem is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:  # the last partial block
        while True:
            os.write(fd, b"\0" * 512)
    except OSError:
        pass
    finally:
        os.close(fd)


def add_through_failures(ours, ref, steps, on_failure) -> list[OSError]:
    """Add every step to both buffers; an add that fails is checked, ``on_failure()`` runs, and it is retried."""
    failures: list[OSError] = []
    i = 0
    while i < len(steps):
        before = (ours.pos, ours.full)
        try:
            ours.add(*steps[i])
        except OSError as e:
            failures.append(e)
            assert len(failures) < 5, failures
            assert (ours.pos, ours.full) == before  # a failed add is not stored
            assert rows_equal(ref, ours, skip=ours.pos)  # every other row intact
            on_failure()
            continue
        ref.add(*steps[i])
        i += 1
    return failures


@pytest.mark.parametrize("kind", ["disk", "hybrid"])
def test_adds_on_a_full_disk_fail_clearly_and_resume_when_space_is_back(kind, small_fs, steps):
    tier = (DiskTier(small_fs, segment_bytes=1 << 16) if kind == "disk"
            else HybridTier(1 << 15, small_fs, segment_bytes=1 << 14))  # spills every few adds
    ours, ref = CompressedReplayBuffer(1000, IMG, ACT, "cpu", tier=tier), ReplayBuffer(1000, IMG, ACT, "cpu")
    filler = small_fs / "filler"
    add_through_failures(ours, ref, steps[:400], lambda: None)
    fill(filler)
    failures = add_through_failures(ours, ref, steps[400:], filler.unlink)
    assert failures, "the disk never filled"
    e = failures[0]
    assert e.errno == errno.ENOSPC and str(small_fs) in str(e), e  # names the segment file
    assert rows_equal(ref, ours) and samples_equal(ref, ours, 0)


def test_a_save_to_a_full_disk_keeps_the_old_file(small_fs, steps):
    ours, ref = CompressedReplayBuffer(1000, IMG, ACT, "cpu"), ReplayBuffer(1000, IMG, ACT, "cpu")
    path = small_fs / "buffer.h5"
    for st in steps[:300]:
        ours.add(*st)
        ref.add(*st)
    ours.save(path)
    old = copy.deepcopy(ref)
    for st in steps[300:]:
        ours.add(*st)
        ref.add(*st)
    fill(small_fs / "filler")
    with pytest.raises(OSError, match=f"saving {path} needs about .* MB; .* MB are free there") as info:
        ours.save(path)
    assert info.value.errno == errno.ENOSPC
    assert sorted(p.name for p in small_fs.iterdir()) == ["buffer.h5", "filler"]  # no temporary left
    assert rows_equal(old, CompressedReplayBuffer.load(path, device="cpu"))
    (small_fs / "filler").unlink()
    ours.save(path)  # space is back: the same buffer saves, whole
    assert rows_equal(ref, CompressedReplayBuffer.load(path, device="cpu"))
    assert rows_equal(ref, ours)


def test_a_segment_write_that_fails_names_the_file_and_loses_nothing(tmp_path, steps, monkeypatch):
    """Always runs: the tier's ``pwrite`` fails with ENOSPC for a while, as on a full disk."""
    ours = CompressedReplayBuffer(1000, IMG, ACT, "cpu", tier=DiskTier(tmp_path, segment_bytes=1 << 16))
    ref = ReplayBuffer(1000, IMG, ACT, "cpu")
    real = os.pwrite
    state = {"full": False}

    def pwrite(fd, data, offset):
        if state["full"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    add_through_failures(ours, ref, steps[:200], lambda: None)
    state["full"] = True
    failures = add_through_failures(ours, ref, steps[200:400], lambda: state.update(full=False))
    assert len(failures) == 1
    assert failures[0].errno == errno.ENOSPC and str(tmp_path) in str(failures[0]), failures[0]
    assert rows_equal(ref, ours) and samples_equal(ref, ours, 0)


SIZE_LIMIT = textwrap.dedent("""
    import resource, signal, sys, numpy as np
    sys.path.insert(0, {tests!r})
    from gymnasium import spaces
    from signal_harness import rows_equal, transitions
    from stable_baselines3.common.buffers import ReplayBuffer
    from sb3_integration import CompressedReplayBuffer

    img, act = spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6)
    ours, ref = CompressedReplayBuffer(1000, img, act, "cpu"), ReplayBuffer(1000, img, act, "cpu")
    steps = list(transitions("replay", 600))
    for st in steps[:100]:
        ours.add(*st); ref.add(*st)
    path = {path!r}
    ours.save(path)
    size = __import__("os").path.getsize(path)
    for st in steps[100:]:
        ours.add(*st)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a killed process
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 4096, resource.RLIM_INFINITY))
    try:
        ours.save(path)
        print("RESULT saved")
    except OSError as e:
        print("RESULT", e.errno, str(e).splitlines()[0])
    print("SAME", rows_equal(ref, CompressedReplayBuffer.load(path, device="cpu")))
""")


def test_a_save_past_a_file_size_limit_keeps_the_old_file(tmp_path):
    """Always runs: HDF5's own writes fail (EFBIG) in a subprocess with RLIMIT_FSIZE."""
    path = tmp_path / "buffer.h5"
    done = subprocess.run([sys.executable, "-c", SIZE_LIMIT.format(tests=str(REPO / "tests"), path=str(path))],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    out = dict(ln.split(" ", 1) for ln in done.stdout.splitlines() if ln.startswith(("RESULT", "SAME")))
    assert done.returncode == 0 and "RESULT" in out, done.stderr[-3000:]
    assert out["RESULT"].startswith(f"{errno.EFBIG} "), out
    assert f"saving {path} needs about" in out["RESULT"] and "is unchanged" in out["RESULT"], out
    # the limit, not free space: the disk is not full (this used to report "74,728.1 MB are free")
    assert "file size limit (RLIMIT_FSIZE" in out["RESULT"] and "are free" not in out["RESULT"], out
    assert out["SAME"] == "True"  # the old file, whole: the 100 transitions saved first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["buffer.h5"]


def _random_action_buffer(n: int = 20_000, action_dim: int = 256) -> CompressedReplayBuffer:
    """A SAC-like buffer: tiny observations, random float actions (extras that do not compress)."""
    rng = np.random.default_rng(0)
    box = spaces.Box(-1, 1, (2,), np.float32)
    buf = CompressedReplayBuffer(n, box, spaces.Box(-1, 1, (action_dim,), np.float32), "cpu")
    actions = rng.standard_normal((n, action_dim)).astype(np.float32)
    obs = np.zeros(2, np.float32)
    for i in range(n):
        buf.add(obs, obs, actions[i], rng.standard_normal(1).astype(np.float32), np.array([False]), [{}])
    return buf


def test_the_reservation_covers_a_file_of_extras_that_do_not_compress(tmp_path, monkeypatch):
    """The estimate a save reserves is at least the file it writes (it counted packed extras at half:
    1.62x short for random actions, and HDF5 then met the full disk itself)."""
    from chunkstore.hdf5 import _reserve

    reserved: list[int] = []
    estimate = _reserve.estimate_nbytes
    monkeypatch.setattr(_reserve, "estimate_nbytes", lambda *a, **k: reserved.append(estimate(*a, **k)) or reserved[-1])
    path = tmp_path / "sac.h5"
    _random_action_buffer().save(path)
    assert reserved and os.path.getsize(path) <= reserved[-1], (os.path.getsize(path), reserved)


def test_a_save_of_incompressible_extras_to_a_nearly_full_disk_fails_cleanly(small_fs):
    """With less room than the file needs (more than the old half-counting estimate), the save is a
    clean ENOSPC before HDF5 writes, in a process that then exits normally."""
    script = textwrap.dedent(f"""
        import errno, os, sys
        sys.path.insert(0, {str(REPO / "tests")!r})
        from test_full_disk import _random_action_buffer
        buf = _random_action_buffer()
        path = {str(small_fs / "sac.h5")!r}
        buf.save({str(small_fs.parent / "ok.h5")!r})
        size = os.path.getsize({str(small_fs.parent / "ok.h5")!r})
        st = os.statvfs({str(small_fs)!r})
        room = st.f_bavail * st.f_frsize
        with open({str(small_fs / "filler")!r}, "wb") as f:  # leave about 80% of the file's size free
            f.write(b"\\0" * (room - int(size * 0.8)))
        try:
            buf.save(path)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
            assert not os.path.exists(path)
            print("clean", size)
        else:
            raise AssertionError("the save fit in less room than its file")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "clean" in done.stdout


@pytest.mark.parametrize("err, says", [(errno.EROFS, "read-only"), (errno.EFBIG, "file size limit"),
                                       (errno.EACCES, "permission"), (errno.ENOSPC, "free space and save again")])
def test_a_failed_save_says_what_failed(tmp_path, monkeypatch, err, says):
    """Always runs: creating the temporary fails as on a read-only filesystem (EROFS), past a
    file size limit (EFBIG), without permission or on a full disk. Only the full disk is told to
    free space; the OSError keeps its errno, the old file is unchanged."""
    from chunkstore import ChunkedArray
    from chunkstore.hdf5 import _tempfile, save

    arr = ChunkedArray(8, (2,), np.uint8)
    arr.write(0, np.ones((8, 2), np.uint8))
    path = tmp_path / "a.h5"
    path.write_bytes(b"old")

    def refuse(name, flags):
        raise OSError(err, os.strerror(err), name)

    monkeypatch.setattr(_tempfile, "_excl_opener", refuse)
    with pytest.raises(OSError) as info:
        save(path, {"a": arr}, progress=False)
    assert info.value.errno == err and str(path) in str(info.value)
    assert says in str(info.value), str(info.value)
    if err != errno.ENOSPC:
        assert "free space" not in str(info.value)
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["a.h5"]
