"""Spill and segment files never outlive their owner (unless ``keep_files=True``).

They go at ``close()``, when the owning tier is garbage-collected, and at interpreter
exit, also when the program ends with an exception. Only a SIGKILL leaves them.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from chunkstore import ChunkedArray, DiskTier, HybridTier

REPO = Path(__file__).resolve().parents[2]

_PROGRAM = """
import sys, numpy as np
from chunkstore import ChunkedArray, DiskTier, HybridTier
where, ending = sys.argv[1], sys.argv[2]
disk = DiskTier(where, segment_bytes=1 << 16, keep_files=ending == "keep")
hybrid = HybridTier(1 << 16, where, segment_bytes=1 << 14)
arr = ChunkedArray(4096, (64,), np.uint8, chunk_len=16, codec="none", tier=hybrid)
arr[:] = np.arange(4096 * 64, dtype=np.uint64).astype(np.uint8).reshape(4096, 64)
for k in range(20):
    disk.put(bytes([k]) * 5000)
assert hybrid.info()["spills"] > 0 and any(hybrid.path.iterdir()) and any(disk.path.iterdir())
print(disk.path, hybrid.path, sep="\\n", flush=True)
if ending == "exception":
    raise RuntimeError("the training script crashed")
"""


def _run(tmp_path: Path, ending: str) -> tuple[subprocess.CompletedProcess[str], list[Path]]:
    proc = subprocess.run([sys.executable, "-c", _PROGRAM, str(tmp_path), ending], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    return proc, [Path(line) for line in proc.stdout.split()]


@pytest.mark.parametrize("ending", ["normal", "exception"])
def test_files_are_gone_after_the_process_exits(tmp_path, ending):
    proc, dirs = _run(tmp_path, ending)
    assert proc.returncode == (0 if ending == "normal" else 1), proc.stderr
    assert len(dirs) == 2 and all(d.parent == tmp_path for d in dirs)
    assert list(tmp_path.iterdir()) == []


def test_keep_files_survive_exit(tmp_path):
    proc, (disk_dir, hybrid_dir) = _run(tmp_path, "keep")
    assert proc.returncode == 0, proc.stderr
    assert disk_dir.is_dir() and len(list(disk_dir.iterdir())) > 0
    assert not hybrid_dir.exists()


def _fds_into(directory: Path) -> list[str]:
    """This process's open descriptors on files under ``directory`` (deleted ones too)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
        if target.startswith(str(directory)):
            out.append(target)
    return out


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("kind", ["disk", "hybrid"])
def test_files_and_descriptors_go_when_the_owner_is_collected(tmp_path, kind):
    gc.collect()
    tier = DiskTier(tmp_path, segment_bytes=1 << 14) if kind == "disk" else HybridTier(
        1 << 14, tmp_path, segment_bytes=1 << 14)
    arr = ChunkedArray(2048, (64,), np.uint8, chunk_len=16, codec="none", tier=tier)
    arr[:] = 7
    assert arr[100, 0] == 7  # read through the mapping
    path = tier.path
    assert any(Path(path).iterdir()) and _fds_into(tmp_path)
    del arr, tier
    gc.collect()
    assert not Path(path).exists()
    assert _fds_into(tmp_path) == []  # an unlinked file still open would keep its disk space


def test_keep_files_can_be_set_after_construction(tmp_path):
    tier = DiskTier(tmp_path, segment_bytes=1 << 12)
    tier.put(b"x" * 100)
    tier.keep_files = True
    path = tier.path
    del tier
    gc.collect()
    assert path.is_dir() and len(list(path.iterdir())) == 1


def test_close_still_removes_and_is_idempotent(tmp_path):
    for tier in (DiskTier(tmp_path), HybridTier(0, tmp_path, segment_bytes=1 << 12)):
        for k in range(3):
            tier.put(bytes([k]) * 5000)
        tier.close()
        tier.close()
        assert not Path(tier.path).exists()
    assert list(tmp_path.iterdir()) == []


def test_an_exception_inside_a_with_block_removes_the_files(tmp_path):
    script = textwrap.dedent(f"""
        from chunkstore import DiskTier
        try:
            with DiskTier({str(tmp_path)!r}) as tier:
                tier.put(b"data")
                raise KeyError("boom")
        except KeyError:
            pass
        import os
        print(len(os.listdir({str(tmp_path)!r})))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True)
    assert proc.stdout.strip() == "0", proc.stderr


# -- the SB3 buffers: close() and `with` ---------------------------------------------------------
def _fill_replay(buf, n: int = 60) -> None:
    rng = np.random.default_rng(0)
    for _ in range(n):
        obs = rng.integers(0, 255, (1, 4, 16, 16), dtype=np.uint8)
        buf.add(obs, obs, np.zeros((1, 1)), np.zeros(1, np.float32), np.zeros(1), [{}])


def test_replay_buffer_close_removes_its_spill_files(tmp_path):
    from gymnasium import spaces

    from sb3_integration import CompressedReplayBuffer

    space = spaces.Box(0, 255, (4, 16, 16), np.uint8)
    tiers: list[HybridTier] = []

    def make_tier() -> HybridTier:
        tiers.append(HybridTier(0, tmp_path, segment_bytes=1 << 12))
        return tiers[-1]

    with CompressedReplayBuffer(100, space, spaces.Discrete(2), device="cpu", tier=make_tier,
                                chunk_len=4, compression_method="none") as buf:
        _fill_replay(buf)
        assert tiers and tiers[0].info()["spills"] > 0 and any(tmp_path.iterdir())
    assert tiers[0].closed and list(tmp_path.iterdir()) == []
    buf.close()  # again: nothing left to do


def test_loaded_replay_buffer_close_releases_the_file(tmp_path):
    from gymnasium import spaces

    from sb3_integration import CompressedReplayBuffer

    space = spaces.Box(0, 255, (4, 16, 16), np.uint8)
    buf = CompressedReplayBuffer(100, space, spaces.Discrete(2), device="cpu", chunk_len=4)
    _fill_replay(buf)
    buf.save(tmp_path / "b.h5")
    loaded = CompressedReplayBuffer.load(tmp_path / "b.h5", device="cpu")
    tiers = {id(a.tier): a.tier for a in _arrays(loaded)}
    assert any(t.kind == "file" for t in tiers.values())
    loaded.close()
    assert all(getattr(t, "file", None) is None or t.file.closed for t in tiers.values())


def _arrays(buf):
    return [fs.frames for fs in buf.frame_stores.values() if fs.frames is not None]


def test_rollout_buffer_close_and_context_manager():
    import torch as th
    from gymnasium import spaces

    from sb3_integration import CompressedRolloutBuffer

    space = spaces.Box(0, 255, (4, 16, 16), np.uint8)
    with CompressedRolloutBuffer(32, space, spaces.Discrete(2), device="cpu", n_envs=1,
                                 compression_method="zstd1") as buf:
        rng = np.random.default_rng(1)
        for _ in range(32):
            buf.add(rng.integers(0, 255, (1, 4, 16, 16), dtype=np.uint8), np.zeros((1, 1)),
                    np.zeros(1), np.zeros(1, bool), th.zeros(1), th.zeros(1))
        arrays = _arrays(buf)
        assert arrays
    assert all(a.tier.closed for a in arrays)
