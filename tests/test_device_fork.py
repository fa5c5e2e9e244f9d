"""Forked children of a process that filled and sampled a device buffer (``buffer_device="cpu"``).

Such a child hung in its first large torch operator: GNU OpenMP's threads, which torch
runs its CPU operators on, were started by the store's uploads and decodes and do not
survive ``fork()`` (see :mod:`chunkstore.device._fork`). Here the parent keeps torch on
two threads and runs a large decode; each child (``os.fork``, a fork ``Process``, a fork
``Pool``) samples, adds, samples again, and its results must equal what SB3's buffer gives
for the same seeds and adds. Every wait is bounded: a hang shows as ``CHILD_HANG``.

On CUDA (where a GPU is present) such a child cannot use the device at all: it must get a
``RuntimeError`` naming the buffer and the cure, and exit normally, where it used to abort
(see :mod:`chunkstore._cuda_fork`); the guard's logic is also checked on the cpu.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent("""
    import multiprocessing as mp, os, sys, time, numpy as np, torch
    sys.path.insert(0, {tests!r})
    from gymnasium import spaces
    from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer
    from sb3_integration import CompressedDictReplayBuffer, CompressedReplayBuffer
    torch.set_num_threads(2)  # torch's intra-op threads in use in the parent
    kind, how = sys.argv[1], sys.argv[2]
    img = spaces.Box(0, 255, (4, 24, 24), np.uint8)
    space = spaces.Dict({{"img": img, "vec": spaces.Box(-1, 1, (3,), np.float32)}}) if kind == "dict" else img
    ref_cls, our_cls = (DictReplayBuffer, CompressedDictReplayBuffer) if kind == "dict" else (
        ReplayBuffer, CompressedReplayBuffer)
    act = spaces.Discrete(3)
    ref = ref_cls(500, space, act, "cpu", n_envs=2)
    ours = our_cls(500, space, act, "cpu", n_envs=2, chunk_len=16, buffer_device="cpu")
    rng = np.random.default_rng(0)

    def step():
        o = rng.integers(0, 255, (2, 4, 24, 24), np.uint8)
        n = rng.integers(0, 255, (2, 4, 24, 24), np.uint8)
        if kind == "dict":
            o = {{"img": o, "vec": rng.uniform(-1, 1, (2, 3)).astype(np.float32)}}
            n = {{"img": n, "vec": rng.uniform(-1, 1, (2, 3)).astype(np.float32)}}
        return o, n, rng.integers(0, 3, (2, 1)), rng.standard_normal(2).astype(np.float32), np.zeros(2), [{{}}, {{}}]

    for _ in range(400):
        tr = step()
        ref.add(*tr); ours.add(*tr)
    ours.sample(2048)  # a large decode in the parent: OpenMP's threads start here
    more = [step() for _ in range(3)]

    def same(a, b):
        def eq(x, y):
            if x is None or y is None:
                return x is None and y is None
            if isinstance(x, dict):
                return all(torch.equal(x[k], y[k]) for k in x)
            return torch.equal(x, y)
        return all(eq(getattr(a, f), getattr(b, f)) for f in a._fields)

    def child(q=None):
        np.random.seed(5); a = ours.sample(1024)
        np.random.seed(5); b = ref.sample(1024)
        ok = same(a, b)
        for tr in more:
            ours.add(*tr); ref.add(*tr)
        np.random.seed(6); a = ours.sample(1024)
        np.random.seed(6); b = ref.sample(1024)
        ok = ok and same(a, b) and (ours.pos, ours.full) == (ref.pos, ref.full)
        if q is not None:
            q.put(ok)
        return ok

    if how == "os.fork":
        pid = os.fork()
        if pid == 0:
            os._exit(0 if child() else 3)
        deadline = time.monotonic() + 60
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                print("CHILD_OK" if os.waitstatus_to_exitcode(status) == 0 else "CHILD_WRONG"); break
            if time.monotonic() > deadline:
                os.kill(pid, 9); print("CHILD_HANG"); break
            time.sleep(0.05)
    elif how == "process":
        ctx = mp.get_context("fork"); q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,)); p.start()
        try:
            print("CHILD_OK" if q.get(timeout=60) else "CHILD_WRONG")
        except Exception:
            print("CHILD_HANG")
        p.kill() if p.is_alive() else p.join()
    else:
        ctx = mp.get_context("fork")
        pool = ctx.Pool(2)
        try:
            res = pool.map_async(child, [None, None], chunksize=1).get(timeout=60)
            print("CHILD_OK" if all(res) else "CHILD_WRONG")
        except mp.TimeoutError:
            print("CHILD_HANG")
        pool.terminate()
    sys.stdout.flush()
    os._exit(0)
""")


@pytest.mark.parametrize("kind, how", [
    ("replay", "os.fork"), ("replay", "process"), ("replay", "pool"), ("dict", "os.fork"),
    pytest.param("dict", "process", marks=pytest.mark.slow), pytest.param("dict", "pool", marks=pytest.mark.slow)])
def test_a_forked_child_of_a_device_buffer_samples_and_adds(kind, how):
    script = SCRIPT.format(tests=str(REPO / "tests"))
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", script, kind, how], cwd=REPO, capture_output=True, text=True,
                          timeout=180, env=env)
    assert "CHILD_OK" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]


# -- CUDA: a forked child gets a clear error, and exits without aborting -----------------------------------

CUDA_SCRIPT = textwrap.dedent("""
    import multiprocessing as mp, os, sys, numpy as np, torch
    from gymnasium import spaces
    from chunkstore import DeviceTier
    from sb3_integration import CompressedReplayBuffer
    how = sys.argv[1]
    space = spaces.Box(0, 255, (4, 24, 24), np.uint8)
    buf = CompressedReplayBuffer(200, space, spaces.Discrete(3), "cuda", buffer_device="cuda")
    rng = np.random.default_rng(0)
    for t in range(150):
        o = rng.integers(0, 255, (1, 4, 24, 24), dtype=np.uint8)
        buf.add(o, o, np.array([t % 3]), np.array([1.0]), np.array([0.0]), [{}])
    buf.sample(32)  # events recorded, pinned buffers used
    tier = DeviceTier("cuda")
    ref = tier.put(b"abc")
    tier.get(ref)

    def child(_=None):
        said = []
        new = rng.integers(0, 255, (1, 4, 24, 24), dtype=np.uint8)  # a new frame: the add writes one
        for name, call in (("sample", lambda: buf.sample(8)), ("add", lambda: buf.add(new, new, np.array([0]),
                           np.array([0.0]), np.array([0.0]), [{}])), ("tier", lambda: tier.get(ref))):
            try:
                call()
                said.append(name + ":no error")
            except RuntimeError as e:
                said.append(name + (":named" if "CUDA does not survive fork()" in str(e) else ":other " + str(e)))
        buf.close()
        tier.close()
        return " ".join(said)

    if how == "os.fork":
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, child().encode())
            sys.exit(0)  # a normal exit: finalizers run
        os.close(w)
        _, status = os.waitpid(pid, 0)
        print("CHILD", os.read(r, 4096).decode(), "STATUS", status)
    else:
        with mp.get_context("fork").Pool(1) as pool:
            print("CHILD", pool.apply_async(child).get(timeout=120), "STATUS", 0)
    print("PARENT", bool(buf.sample(8).observations.is_cuda))  # the parent goes on
""")


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("how", ["os.fork", "pool"])
def test_a_forked_child_of_a_cuda_buffer_gets_a_named_error_and_exits_cleanly(how):
    """A child of a process holding a buffer_device="cuda" buffer aborted (SIGABRT) on its first
    sample(), and at a normal exit, in CUDA calls from destructors (events, pinned and device memory)."""
    done = subprocess.run([sys.executable, "-c", CUDA_SCRIPT, how], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert "CHILD sample:named add:named tier:named STATUS 0" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]
    assert "PARENT True" in done.stdout


def test_a_store_inherited_by_a_forked_child_refuses_its_operations_and_keeps_its_memory():
    """The guard behind the CUDA test, on the cpu: a DeviceArray or DeviceTier that another process
    made (as a fork child sees one made on CUDA) refuses reads and writes by name, and closing it
    releases nothing (the release would call into CUDA there)."""
    import numpy as np

    from chunkstore import DeviceTier
    from chunkstore.device import DeviceArray

    arr = DeviceArray(16, (3,), np.uint8, device="cpu")
    arr[0] = np.ones(3, np.uint8)
    arr._pid = os.getpid() + 1  # what a forked child of the maker sees
    for call in (lambda: arr.take(np.array([0])), lambda: arr.__setitem__(1, np.ones(3, np.uint8)), arr.flush):
        with pytest.raises(RuntimeError, match=r"CUDA does not survive fork\(\).*'spawn' or 'forkserver'"):
            call()
    heap = arr._heap
    arr.close()
    assert heap.arena is not None, "close() in a child releases nothing"
    arr._pid = None
    with pytest.raises(ValueError, match="the array is closed"):
        arr.take(np.array([0]))

    tier = DeviceTier("cpu")
    ref = tier.put(b"abc")
    tier._pid = os.getpid() + 1
    for call in (lambda: tier.get(ref), lambda: tier.peek(ref), lambda: tier.get_tensor(ref),
                 lambda: tier.put(b"d"), lambda: tier.put_many(np.zeros(2, np.uint8), np.array([1, 1]))):
        with pytest.raises(RuntimeError, match=r"DeviceTier\('cpu'\): .*CUDA does not survive fork\(\)"):
            call()
    tier.close()
    tier._pid = None
    assert tier.closed and tier._segments, "the child's close keeps the segments"
