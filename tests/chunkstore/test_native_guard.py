"""Kernels compile and load with Ctrl-C held off, and the held Ctrl-C arrives right after.

A KeyboardInterrupt inside numba's compiler or cache loader broke numba's state for
the rest of the process (or aborted it): see :mod:`chunkstore.native.guard`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from chunkstore.native.guard import guard, interrupts_deferred

REPO = Path(__file__).resolve().parents[2]


def _raise(signum, frame):
    raise KeyboardInterrupt("timer")


@pytest.fixture
def alarm():
    old = signal.signal(signal.SIGALRM, _raise)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)


def test_a_signal_in_the_block_is_delivered_after_it(alarm):
    done = []
    with pytest.raises(KeyboardInterrupt, match="timer"), interrupts_deferred():
        signal.setitimer(signal.ITIMER_REAL, 0.005)
        time.sleep(0.05)  # the alarm fires here: held
        done.append(1)
    assert done == [1]
    assert signal.getsignal(signal.SIGALRM) is _raise  # handlers restored
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_no_signal_no_change(alarm):
    with interrupts_deferred():
        pass
    assert signal.getsignal(signal.SIGALRM) is _raise


def test_off_the_main_thread_the_block_just_runs():
    out = []

    def work():
        with interrupts_deferred():
            out.append(signal.getsignal(signal.SIGINT))

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert out == [signal.default_int_handler]


def test_a_compile_is_never_interrupted(alarm):
    from numba import njit

    @njit
    def f(x):
        s = 0.0
        for i in range(x.size):
            s += x[i] * 2
        return s

    real = f._compile_for_args
    seen = []

    def ctrl_c_then_compile(*args, **kws):
        signal.raise_signal(signal.SIGALRM)  # a Ctrl-C as numba starts compiling
        seen.append(len(f.overloads))
        return real(*args, **kws)

    f._compile_for_args = ctrl_c_then_compile
    guard(f)  # on top: the load runs with signals held off
    with pytest.raises(KeyboardInterrupt, match="timer"):
        f(np.arange(4.0))
    assert seen == [0] and len(f.overloads) == 1  # compiled whole, then interrupted
    assert f(np.arange(4.0)) == 12.0


def test_every_kernel_of_the_package_is_guarded():
    from numba.core.dispatcher import Dispatcher

    from chunkstore.device import _run_kernels
    from chunkstore.native import _kernels
    from chunkstore.priority import _kernels as _priority_kernels
    from sb3_integration.engine import _native_frames, _native_put

    # every module of both packages that defines kernels (a new one must join this list)
    root = Path(__file__).resolve().parents[2]
    defining = {str(p.relative_to(root).with_suffix("")).replace("/", ".")
                for pkg in ("chunkstore", "sb3_integration") for p in (root / pkg).rglob("*.py")
                if re.search(r"^\s*@(nb\.|numba\.)?njit", p.read_text(), re.M)}
    checked = (_kernels, _run_kernels, _native_put, _native_frames, _priority_kernels)
    assert defining == {m.__name__ for m in checked}
    for mod in checked:
        kernels = [v for v in vars(mod).values() if isinstance(v, Dispatcher)]
        assert kernels and all(getattr(k, "_chunkstore_guarded", False) for k in kernels), mod.__name__


FIRST_ADDS = textwrap.dedent("""
    import signal, sys, numpy as np
    sys.path.insert(0, {tests!r})
    from gymnasium import spaces
    from stable_baselines3.common.buffers import DictReplayBuffer
    from sb3_integration import CompressedDictReplayBuffer

    def ctrl_c(signum, frame):
        # only where the library runs: a repeating timer can also fire in this script's own
        # except block before it disarms the timer, which would end the script, not test the buffer
        if frame is not None and frame.f_code.co_filename == "<string>":
            return
        raise KeyboardInterrupt
    signal.signal(signal.SIGALRM, ctrl_c)
    space = spaces.Dict({{"img": spaces.Box(0, 255, (4, 6, 5), np.uint8),
                         "vec": spaces.Box(-1, 1, (3,), np.float32)}})
    act = spaces.Discrete(3)
    ref = DictReplayBuffer(32, space, act, "cpu", n_envs=2)
    ours = CompressedDictReplayBuffer(32, space, act, "cpu", n_envs=2, chunk_len=4)
    rng = np.random.default_rng(0)
    interrupts = 0
    t = 0
    while t < 40 or (interrupts < 20 and t < 4000):  # bounded: more adds if few interrupts landed
        t += 1
        obs = {{"img": rng.integers(0, 255, (2, 4, 6, 5), np.uint8),
               "vec": rng.uniform(-1, 1, (2, 3)).astype(np.float32)}}
        nxt = {{"img": rng.integers(0, 255, (2, 4, 6, 5), np.uint8),
               "vec": rng.uniform(-1, 1, (2, 3)).astype(np.float32)}}
        tr = (obs, nxt, rng.integers(0, 3, (2, 1)), np.zeros(2, np.float32), np.zeros(2), [{{}}, {{}}])
        while True:  # Ctrl-C until the add goes through
            before = ours.pos
            # the first adds compile (held signals land right after each kernel): every 3 ms; later
            # ones take ~0.1 ms: one Ctrl-C at a random moment of each try, on fast and slow boxes
            first = t <= 40
            delay = 0.003 if first else 10 ** rng.uniform(-5, -3.5)
            try:
                signal.setitimer(signal.ITIMER_REAL, delay, delay if first else 0)
                ours.add(*tr)
                signal.setitimer(signal.ITIMER_REAL, 0)
            except KeyboardInterrupt:
                signal.setitimer(signal.ITIMER_REAL, 0)
                interrupts += 1
            if ours.pos != before:
                break
        ref.add(*tr)
    signal.setitimer(signal.ITIMER_REAL, 0)
    np.random.seed(0); a = ref.sample(16)
    np.random.seed(0); b = ours.sample(16)
    same = all((a.observations[k] == b.observations[k]).all() for k in a.observations)
    print("RESULT", interrupts, same)
""")


@pytest.mark.slow
def test_first_adds_under_ctrl_c_in_a_process_that_compiles(tmp_path):
    """A fresh numba cache: the first adds compile every kernel while a Ctrl-C lands every 3 ms, then
    adds go on under faster timers until 20 interrupts landed (how many land while compiling
    depends on the machine's speed: 5 on one CI box)."""
    script = FIRST_ADDS.format(tests=str(REPO / "tests"))
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=400,
                          env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "OMP_NUM_THREADS": "1"})
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT")]
    assert done.returncode == 0 and lines, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    print(lines[-1])
    _, interrupts, same = lines[-1].split()
    assert int(interrupts) > 10 and same == "True", lines[-1]
