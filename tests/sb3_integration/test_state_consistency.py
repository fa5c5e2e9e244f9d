"""A buffer whose internal state is inconsistent is refused, never loaded into a buffer that cannot add.

Each kind of inconsistency is made on purpose in a live buffer's frame store (streams,
descriptors, last stacks) or its position, then the buffer goes through every way a
state comes back: ``save`` + ``load`` (FormatError), ``hdf5.verify`` and
``tools/verify.py`` (a "buffer state" problem), pickle (ValueError) and
``from_state_dict`` (ValueError). Consistent states, however they were written, pass
(a property test against random streams, resets and ring laps).
"""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkstore import FormatError, hdf5
from sb3_integration import CompressedDictReplayBuffer, CompressedReplayBuffer
from sb3_integration.engine.frame_state import (
    FAR,
    _unused_above_oldest,
    check_own_state,
    check_streams,
)
from sb3_integration.testing import stack_stream

REPO = Path(__file__).resolve().parents[2]
OBS = spaces.Box(0, 255, (4, 6, 5), np.uint8)
ROWS, CHUNK = 32, 4


def filled(steps: int = 3 * ROWS + 5, n_envs: int = 1, kind: str = "image", seed: int = 0):
    """A buffer fed ``steps`` frame-stacked transitions (episodes of 7+ steps): wrapped, released."""
    if kind == "dict":
        space = spaces.Dict({"img": OBS, "vec": spaces.Box(-1, 1, (3,), np.float32)})
        buf = CompressedDictReplayBuffer(ROWS * n_envs, space, spaces.Discrete(3), device="cpu",
                                         n_envs=n_envs, chunk_len=CHUNK)
    else:
        buf = CompressedReplayBuffer(ROWS * n_envs, OBS, spaces.Discrete(3), device="cpu", n_envs=n_envs,
                                     chunk_len=CHUNK)
    rng = np.random.default_rng(seed)
    for obs, nxt in stack_stream(steps, n_envs, seed=seed):
        if kind == "dict":
            vec, vnext = rng.uniform(-1, 1, (2, n_envs, 3)).astype(np.float32)
            obs, nxt = {"img": obs, "vec": vec}, {"img": nxt, "vec": vnext}
        buf.add(obs, nxt, rng.integers(0, 3, (n_envs, 1)), rng.normal(size=n_envs).astype(np.float32),
                np.zeros(n_envs, np.float32), [{} for _ in range(n_envs)])
    return buf


def store_of(buf):
    return buf._stores["vec" if "vec" in buf._stores else None]


def written_row(fs) -> int:
    return int(np.flatnonzero(fs.pads[1, :, 0] < fs.layout.depth)[0])


# -- the corruptions: (what they do to a buffer, the error they must give) -----------------------
def orphan_frames(buf) -> None:
    """Five interrupted adds whose retries appended their frames again (issue 27)."""
    fs = store_of(buf)
    for _ in range(5):
        fs.has_last[0] = False  # what an interrupted add leaves: the stream moved
        fs._append(0, np.ones((2, *fs.layout.frame_shape), fs.dtype))


def heads_behind_rows(buf) -> None:
    fs = store_of(buf)
    fs.has_last[0] = False
    fs.heads[0] -= 2


def last_stack_off_head(buf) -> None:
    store_of(buf).last_slot[0] -= 1


def released_past_rows(buf) -> None:
    fs = store_of(buf)
    fs.released[0] = (int(fs.heads[0]) - 1) // CHUNK * CHUNK


def more_live_than_ring(buf) -> None:
    fs = store_of(buf)
    assert fs.heads[0] > fs.ring_frames  # the buffer lapped its ring
    fs.released[0] = 0


def next_stack_past_the_head(buf) -> None:
    fs = store_of(buf)
    fs.deltas[0, (buf.pos - 1) % ROWS, 0] += 3  # the newest row's next observation: past the head


def far_delta_lost(buf) -> None:
    fs = store_of(buf)
    fs.deltas[0, written_row(fs), 0] = FAR


def pos_out_of_range(buf) -> None:
    buf.pos = buf.buffer_size


CORRUPTIONS = {
    "orphan frames": (orphan_frames, "holds 10 live frames that no stack uses, more than the 8"),
    "heads behind rows": (heads_behind_rows, "slots point at frames outside the stored stream"),
    "last stack off the head": (last_stack_off_head, "env 0's last stack ends at frame"),
    "released past rows": (released_past_rows, "slots point at frames outside the stored stream"),
    "next stack past the head": (next_stack_past_the_head,
                                 r"stack 1 of row \d+, env 0 uses frames .*, outside env 0's live frames"),
    "more live than the ring": (more_live_than_ring, r"live frames, more than its ring of \d+"),
    "far delta lost": (far_delta_lost, "has a far delta that is not kept"),
}


@pytest.mark.parametrize("kind", ["image", "dict"])
@pytest.mark.parametrize("what", list(CORRUPTIONS))
def test_an_inconsistent_state_is_refused_by_load_verify_pickle_and_from_state_dict(tmp_path, what, kind):
    corrupt, match = CORRUPTIONS[what]
    buf = filled(kind=kind)
    fs = store_of(buf)
    if kind == "dict":  # the vector key's stacks are single frames: one add appends up to 2
        match = match.replace("more than the 8", "more than the 2")
    corrupt(buf)
    name = r"observations\[vec\]" if kind == "dict" else "observations"
    buf.save(tmp_path / "bad.h5")
    with pytest.raises(FormatError, match=f"bad.h5: damaged replay buffer state: {name}: .*{match}"):
        type(buf).load(tmp_path / "bad.h5", device="cpu")
    problems = hdf5.verify(tmp_path / "bad.h5")
    assert [p.array for p in problems] == ["buffer state"], problems
    assert re.search(f"{name}: .*{match}", problems[0].message), problems[0].message
    with pytest.raises(ValueError, match=match):
        pickle.loads(pickle.dumps(buf))
    with buf.state_dict() as state, pytest.raises(ValueError, match=match):
        type(buf).from_state_dict(state, device="cpu")
    assert fs.layout is not None
    buf.close()


def test_a_buffer_whose_state_was_refused_loads_after_nothing_was_changed(tmp_path):
    """The same buffer, not corrupted: every path accepts it and samples the same."""
    buf = filled(kind="dict", n_envs=2)
    buf.save(tmp_path / "good.h5")
    assert hdf5.verify(tmp_path / "good.h5") == []
    for other in (type(buf).load(tmp_path / "good.h5", device="cpu"), pickle.loads(pickle.dumps(buf))):
        np.random.seed(1)  # noqa: NPY002 - SB3 samples with the global RNG
        a = buf.sample(16)
        np.random.seed(1)  # noqa: NPY002
        b = other.sample(16)
        assert all(np.array_equal(a.observations[k].numpy(), b.observations[k].numpy()) for k in ("img", "vec"))
        other.close()
    buf.close()


@pytest.mark.parametrize("changes, match", [
    ({"pos": ROWS}, f"pos is {ROWS}, outside 0..{ROWS - 1}"),
    ({"pos": -1}, "pos is -1"),
    ({"pos": 2.5}, "pos is 2.5"),
    ({"full": 1}, "full is 1, not True or False"),
    ({"buffer_size": 0}, "buffer_size is 0"),
])
def test_a_pickle_with_pos_or_full_out_of_range_is_refused(changes, match):
    buf = filled(steps=10)
    state = buf.__getstate__()
    state.update(changes)
    clone = CompressedReplayBuffer.__new__(CompressedReplayBuffer)
    with pytest.raises(ValueError, match=f"this pickled buffer is damaged: {match}"):
        clone.__setstate__(state)
    buf.close()


def test_pos_out_of_range_in_a_file_is_refused_and_verify_says_so(tmp_path):
    buf = filled()
    pos_out_of_range(buf)
    buf.save(tmp_path / "bad.h5")
    with pytest.raises(FormatError, match=f"'pos' is {ROWS}, outside 0..{ROWS - 1}"):
        CompressedReplayBuffer.load(tmp_path / "bad.h5", device="cpu")
    assert [p.array for p in hdf5.verify(tmp_path / "bad.h5")] == ["buffer state"]
    buf.close()


def test_tools_verify_reports_an_inconsistent_buffer_state(tmp_path):
    buf = filled()
    buf.save(tmp_path / "good.h5")
    orphan_frames(buf)
    buf.save(tmp_path / "bad.h5")
    buf.close()
    run = [sys.executable, str(REPO / "tools" / "verify.py"), "--no-progress"]
    good = subprocess.run([*run, str(tmp_path / "good.h5")], capture_output=True, text=True, timeout=120)
    assert good.returncode == 0 and "buffer state (sb3_integration.replay_buffer): in range and consistent" \
        in good.stdout, good
    bad = subprocess.run([*run, "-q", str(tmp_path / "bad.h5")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1, bad
    assert bad.stdout.startswith("CORRUPT buffer state: ") and "no stack uses" in bad.stdout, bad.stdout


# -- consistent states always pass ---------------------------------------------------------------
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.integers(1, 5 * ROWS), n_envs=st.integers(1, 3), kind=st.sampled_from(["image", "dict"]),
       seed=st.integers(0, 2**16))
def test_a_consistent_store_passes_and_uses_every_live_frame_above_its_oldest(steps, n_envs, kind, seed):
    buf = filled(steps, n_envs, kind, seed)
    for key, fs in buf._stores.items():
        with fs.state_dict() as state:
            check_own_state(state, chunk_len=CHUNK, name=str(key))
            assert check_streams(state, str(key)).tolist() == [0] * n_envs
    clone = pickle.loads(pickle.dumps(buf))  # installs through the same check
    assert (clone.pos, clone.full) == (buf.pos, buf.full)
    clone.close()
    buf.close()


def test_unused_frames_are_counted_above_the_oldest_used_frame_only():
    # env 0: 16 live frames, uses positions 4..7 and 10..15 (gaps: 8, 9; 0..3 below its oldest used
    # frame: waiting for a release); env 1 (positions from 16 on): 10 live, uses 2..9
    live = np.array([16, 10])
    starts, ends = np.array([4, 10, 16 + 2]), np.array([8, 16, 16 + 10])
    cover = np.bincount(starts, minlength=27) - np.bincount(ends, minlength=27)
    assert _unused_above_oldest(cover, np.array([4, 2]), live).tolist() == [2, 0]
    none = np.iinfo(np.int64).max  # no stack uses a frame: nothing counts
    assert _unused_above_oldest(np.zeros(27, np.int64), np.array([none, none]), live).tolist() == [0, 0]


def test_the_check_runs_in_blocks_of_rows_with_the_same_answers(monkeypatch):
    from sb3_integration.engine import frame_state

    buf = filled(3 * ROWS + 5, 2, "image", 3)
    fs = store_of(buf)
    with fs.state_dict() as state:
        whole = check_streams(state, "obs").tolist()
        monkeypatch.setattr(frame_state, "_CHECK_ROWS", 5)  # rows 0..4, 5..9, ...
        assert check_streams(state, "obs").tolist() == whole == [0, 0]
    row = (buf.pos - 1) % ROWS
    fs.deltas[0, row, 1] += 9  # env 1's newest next stack: past its head, found in its block
    with fs.state_dict() as state, pytest.raises(ValueError, match=f"stack 1 of row {row}, env 1 uses frames"):
        check_streams(state, "obs")
    buf.close()
