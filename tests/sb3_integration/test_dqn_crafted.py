"""Crafted dopamine checkpoints: each is a CheckpointError naming the file, in bounded memory.

Every case is a small valid checkpoint with one file replaced by a crafted one (a header
that claims gigabytes, a gzip stream of zeros that decodes to 1.5 GiB, an add_count or an
episode end too large for int64). One fresh interpreter imports the library once, then
runs each case in a forked child whose address space may grow by at most ``HEADROOM``
(``RLIMIT_AS``) beyond what the imports took: ``import_dqn_replay`` must raise
:class:`CheckpointError` naming the crafted file, and ``tools/import_dqn_replay.py`` must
print one ``error:`` line naming it and exit 1. Before the bounds, these peaked at 3.4 GB,
or raised MemoryError / numpy's _ArrayMemoryError / OverflowError.
"""

from __future__ import annotations

import gzip
import io
import json
import pickle
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from dopamine_ckpt import DopamineWriter

REPO = Path(__file__).resolve().parents[2]
CAPACITY = 64
GIB = 1 << 30
#: address space a case may take beyond the imports (any crafted size below is at least 1.5 GiB)
HEADROOM = GIB
_MEMBER_BYTES = 16 << 20


def _zeros_member() -> bytes:
    """One gzip member of 16 MiB of zeros (16 KB): members concatenate into one stream."""
    return gzip.compress(bytes(_MEMBER_BYTES), 9)


def zero_stream(nbytes: int) -> bytes:
    """About ``nbytes`` (a multiple of 16 MiB) of zeros as a gzip stream about 1/1000 of that."""
    return _zeros_member() * (nbytes // _MEMBER_BYTES)


def npy_header(shape: tuple[int, ...], dtype: str) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape})
    return buf.getvalue()


def write_npy(path: Path, shape: tuple[int, ...], dtype: str, data: bytes = b"", zeros: int = 0) -> None:
    """A gzip'd ``.npy`` whose header says ``shape``, followed by ``data`` and ``zeros`` zero bytes."""
    path.write_bytes(gzip.compress(npy_header(shape, dtype) + data, 1) + zero_stream(zeros))


def base_checkpoint(directory: Path) -> None:
    """A full checkpoint of 8x8 frames (capacity 64, 100 additions), with episode ends."""
    rng = np.random.default_rng(0)
    w = DopamineWriter(CAPACITY, (8, 8), save_episode_ends=True)
    for t in range(100):
        w.add(rng.integers(0, 255, (8, 8), dtype=np.uint8), int(rng.integers(4)), float(rng.normal()),
              terminal=t % 37 == 36, episode_end=t % 23 == 22)
    w.save(directory, 0)


def _path(src: Path, name: str) -> Path:
    prefix = "$store$_" if name in ("observation", "action", "reward", "terminal") else ""
    return src / f"{prefix}{name}_ckpt.0.gz"


def _huge_capacity(src: Path, n: int) -> None:
    for name, dtype in (("action", "i4"), ("reward", "f4"), ("terminal", "u1")):
        write_npy(_path(src, name), (n,), dtype)


def craft(case: str, src: Path) -> Path:
    """Replace one file of the checkpoint in ``src`` as ``case`` says; return the file to blame."""
    big = 3 * GIB // 2
    if case == "add_count_claims_1.5GiB":  # a 1.5 MB gzip of zeros claiming 1.5 GiB
        victim = _path(src, "add_count")
        write_npy(victim, (big,), "u1", zeros=big)
    elif case == "invalid_range_claims_1.5GiB":
        victim = _path(src, "invalid_range")
        write_npy(victim, (big,), "u1", zeros=big)
    elif case == "action_bomb_add_count_1":  # the observations claim as many rows as the bomb
        write_npy(_path(src, "action"), (big,), "u1", zeros=big)
        for name, dtype in (("reward", "f4"), ("terminal", "u1")):
            write_npy(_path(src, name), (big,), dtype)
        victim = _path(src, "observation")
        write_npy(victim, (big, 8, 8), "u1", data=bytes(64))
        with gzip.open(_path(src, "add_count"), "wb") as f:
            np.save(f, np.array(1))
    elif case == "trailing_1.5GiB_after_a_column":  # a right header, then far more than it says
        victim = _path(src, "reward")
        write_npy(victim, (CAPACITY,), "f4", data=bytes(4 * CAPACITY), zeros=big)
    elif case == "1e11_elements":
        n = 10**11
        _huge_capacity(src, n)
        victim = _path(src, "observation")
        write_npy(victim, (n, 8, 8), "u1")
    elif case == "observation_row_64x1e6x1e6":
        victim = _path(src, "observation")
        write_npy(victim, (CAPACITY, 10**6, 10**6), "u1", data=bytes(4096))
    elif case == "add_count_uint64_max":
        victim = _path(src, "add_count")
        with gzip.open(victim, "wb") as f:
            np.save(f, np.array(2**64 - 1, np.uint64))
    elif case == "episode_end_2**80":
        victim = _path(src, "episode_end_indices")
        with gzip.open(victim, "wb") as f:
            pickle.dump({3, 2**80}, f)
    elif case == "npy_header_length_4GiB":  # numpy's own reader takes the header before checking it
        victim = _path(src, "terminal")
        victim.write_bytes(gzip.compress(b"\x93NUMPY\x02\x00" + struct.pack("<I", 2**32 - 1), 1)
                           + zero_stream(big))
    elif case == "episode_end_pickle_1.5GiB":  # a pickled bytes object of 1.5 GiB of zeros
        victim = _path(src, "episode_end_indices")
        head = b"\x80\x04\x8e" + struct.pack("<Q", big)  # PROTO 4, BINBYTES8
        victim.write_bytes(gzip.compress(head, 1) + zero_stream(big))
    else:
        raise ValueError(case)
    return victim


CASES = ["add_count_claims_1.5GiB", "invalid_range_claims_1.5GiB", "action_bomb_add_count_1",
         "trailing_1.5GiB_after_a_column", "1e11_elements", "observation_row_64x1e6x1e6",
         "add_count_uint64_max", "episode_end_2**80", "npy_header_length_4GiB", "episode_end_pickle_1.5GiB"]

_CHILD = textwrap.dedent(r"""
    import contextlib, io, json, os, resource, sys
    sys.path.insert(0, os.path.join(sys.argv[1], "tools"))
    import import_dqn_replay as tool
    from sb3_integration.offline import CheckpointError, import_dqn_replay

    def vm_bytes():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    def run(src, out):
        got = {}
        try:
            import_dqn_replay(src, out, progress=False)
            got["api"] = ["returned"]
        except CheckpointError as e:
            got["api"] = ["CheckpointError", e.path, str(e)]
        except BaseException as e:
            got["api"] = [type(e).__name__, str(e)[:300]]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                got["rc"] = tool.main([src, out])
        except BaseException as e:
            got["rc"] = f"raised {type(e).__name__}: {str(e)[:300]}"
        got["stderr"] = err.getvalue()
        got["out_exists"] = os.path.exists(out)
        got["parts_exists"] = os.path.exists(out + ".parts")
        return got

    results = {}
    for case, src, out in json.loads(sys.argv[2]):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 0
            try:
                limit = vm_bytes() + int(sys.argv[3])
                resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
                payload = json.dumps(run(src, out)).encode()
            except BaseException as e:
                payload = json.dumps({"api": ["child failed", repr(e)]}).encode()
            with os.fdopen(w, "wb") as f:
                f.write(payload)
            os._exit(code)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        results[case] = json.loads(data) if data else {"api": ["child died", status]}
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def crafted_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("crafted")
    jobs, victims = [], {}
    for i, case in enumerate(CASES):
        src = root / f"case{i}"
        base_checkpoint(src)
        victims[case] = str(craft(case, src))
        jobs.append([case, str(src), str(root / f"out{i}.h5")])
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(REPO), json.dumps(jobs), str(HEADROOM)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1]), victims


def test_the_base_checkpoint_imports(tmp_path):
    from sb3_integration.offline import DQNReplayBuffer, import_dqn_replay

    base_checkpoint(tmp_path / "src")
    out = import_dqn_replay(tmp_path / "src", tmp_path / "ok.h5", progress=False)
    with DQNReplayBuffer.load(out) as buf:
        assert buf.size() > 0


@pytest.mark.parametrize("case", CASES)
def test_crafted_file_is_a_checkpoint_error_in_bounded_memory(crafted_results, case):
    results, victims = crafted_results
    got, victim = results[case], victims[case]
    assert got["api"][0] == "CheckpointError", got["api"]
    assert got["api"][1] == victim
    assert got["api"][2].startswith(victim + ": ")
    assert got["rc"] == 1, got
    lines = got["stderr"].strip().splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and victim in errors[0], got["stderr"][-2000:]
    assert "Traceback" not in got["stderr"]
    assert not got["out_exists"]
    assert not got["parts_exists"]  # a refused import leaves no OUT.parts (nor its manifest)


def test_invalid_range_entries_outside_the_positions_match_nothing(tmp_path):
    """dopamine tests ``index in set(invalid_range)``: ±1e12, 1e300 or 2.5 never match a position
    (they used to be wrapped with np.mod: 1e12 + 5 made position 5 invalid)."""
    from sb3_integration.offline import DQNReplayBuffer, import_dqn_replay

    src = tmp_path / "src"
    base_checkpoint(src)
    a = import_dqn_replay(src, tmp_path / "a.h5", progress=False)
    path = _path(src, "invalid_range")
    with gzip.open(path, "rb") as f:
        inv = np.load(f)
    odd = [1e12, -1e12, 1e300, -1e300, 1e12 + 5, -1e12 + 7, 2.5, 64.0, -1.0]
    with gzip.open(path, "wb") as f:
        np.save(f, np.concatenate([inv.astype(np.float64), odd]))
    b = import_dqn_replay(src, tmp_path / "b.h5", progress=False)
    with DQNReplayBuffer.load(a) as x, DQNReplayBuffer.load(b) as y:
        assert x.valid[5] and x.valid[7]  # the positions a wrapped entry would hit are valid ones
        np.testing.assert_array_equal(x.valid, y.valid)


@pytest.mark.parametrize("index", [2**63, np.uint64(2**63), [2**63], 2**64, -1])
def test_an_index_out_of_range_is_named_as_given(tmp_path, index):
    """2**63 used to be reported as -9223372036854775808 (or raised OverflowError)."""
    from sb3_integration.offline import DQNReplayBuffer, import_dqn_replay

    base_checkpoint(tmp_path / "src")
    with DQNReplayBuffer.load(import_dqn_replay(tmp_path / "src", tmp_path / "a.h5", progress=False)) as buf:
        given = int(np.asarray(index).reshape(-1)[0])
        for call in (buf.locate, buf.transitions):
            with pytest.raises(IndexError, match=rf"got {given}$"):
                call(index)
