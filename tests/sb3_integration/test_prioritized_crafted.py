"""Prioritized buffer states whose priorities do not fit the buffer: refused, in a file, a state, a pickle.

A file written with valid checksums (the writer's own ``write_replay`` on an edited state: what
``reseal`` does for the other crafted files) can still give priority mass to slots that hold no
transition, or a ``max`` that new transitions would inherit (negative, 0, beyond float32). Before
these checks such a buffer loaded and sampled unwritten rows (all-zero observations) as if they
were data, or gave every new transition a mass of 0 or inf.
"""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
from gymnasium import spaces

from chunkstore import FormatError, hdf5
from chunkstore.priority import PriorityIndex
from sb3_integration import CompressedPrioritizedReplayBuffer
from sb3_integration.persistence.files import write_replay

OBS, ACT = spaces.Box(0, 255, (2, 3), np.uint8), spaces.Discrete(3)


def three_rows(n_envs: int = 1) -> CompressedPrioritizedReplayBuffer:
    """Capacity 8 rows, 3 written (each frame all ``t + 1``, so an unwritten row reads as 0)."""
    buf = CompressedPrioritizedReplayBuffer(8 * n_envs, OBS, ACT, device="cpu", n_envs=n_envs)
    for t in range(3):
        o = np.full((n_envs, 2, 3), t + 1, np.uint8)
        buf.add(o, o, np.zeros((n_envs, 1)), np.ones(n_envs, np.float32), np.zeros(n_envs), [{}] * n_envs)
    return buf


def masses(*values: float) -> np.ndarray:
    return np.array(values, np.float32)


CRAFTED = {  # name: (edited arrays, the error)
    "mass on an unwritten slot": ({"priority_masses": masses(1, 1, 1, 0, 0, 0, 0, 5), "priority_max": np.array([5.0])},
                                  "slot 7 has mass 5, but 3 slots are stored"),
    "mass on every slot": ({"priority_masses": np.ones(8, bool)}, "slot 4 has mass 1"),
    "max -1": ({"priority_max": np.array([-1.0])}, "max must be in"),
    "max 0": ({"priority_max": np.array([0.0])}, "max must be in"),
    "max beyond float32": ({"priority_max": np.array([1e300])}, "max must be in"),
    "max below the largest mass": ({"priority_masses": masses(1, 3, 1, 0, 0, 0, 0, 0)}, "largest mass"),
    "complex masses": ({"priority_masses": np.ones(8, complex)}, "masses must be real numbers"),
    "string masses": ({"priority_masses": np.array(["1"] * 8)}, "masses must be real numbers"),
}


def edited_state(buf: CompressedPrioritizedReplayBuffer, edits: dict[str, np.ndarray]):  # type: ignore[no-untyped-def]
    state = buf.state_dict()
    for name, value in edits.items():
        state.arrays[f"extra/{name}"] = value
    return state


@pytest.mark.parametrize("name", CRAFTED)
def test_a_crafted_file_is_refused_at_load(name, tmp_path) -> None:  # type: ignore[no-untyped-def]
    edits, match = CRAFTED[name]
    buf = three_rows()
    with edited_state(buf, edits) as state:
        write_replay(tmp_path / "crafted.h5", state)
    with pytest.raises(FormatError, match=f"damaged replay buffer state: .*{match}"):
        CompressedPrioritizedReplayBuffer.load(tmp_path / "crafted.h5", device="cpu")


@pytest.mark.parametrize("name", ["mass on an unwritten slot", "max 0"])
def test_verify_reports_what_load_refuses(name, tmp_path) -> None:  # type: ignore[no-untyped-def]
    edits, match = CRAFTED[name]
    with edited_state(three_rows(), edits) as state:
        write_replay(tmp_path / "crafted.h5", state)
    problems = hdf5.verify(tmp_path / "crafted.h5")
    assert [p.array for p in problems] == ["buffer state"], problems
    assert re.search(match, problems[0].message), problems


def test_verify_finds_nothing_in_a_good_prioritized_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    buf = three_rows()
    buf.update_priorities(np.array([1]), np.array([7.0]))
    buf.save(tmp_path / "good.h5")
    assert hdf5.verify(tmp_path / "good.h5") == []


@pytest.mark.parametrize("name", CRAFTED)
def test_a_crafted_state_is_refused(name) -> None:  # type: ignore[no-untyped-def]
    edits, match = CRAFTED[name]
    with edited_state(three_rows(), edits) as state, pytest.raises(ValueError, match=match):
        CompressedPrioritizedReplayBuffer.from_state_dict(state, device="cpu")


def test_a_pickle_with_mass_on_unwritten_slots_is_refused() -> None:
    buf = three_rows(n_envs=2)
    state = pickle.loads(pickle.dumps(buf.__getstate__()))
    state["_priorities"]["masses"][15] = 1.0  # row 7, env 1: never written
    other = CompressedPrioritizedReplayBuffer.__new__(CompressedPrioritizedReplayBuffer)
    with pytest.raises(ValueError, match="slot 15 has mass 1, but 6 slots are stored"):
        other.__setstate__(state)
    assert pickle.loads(pickle.dumps(buf)).sample(8).indices.max() < 6  # the buffer's own pickle loads


def test_the_row_an_interrupted_add_leaves_with_mass_still_loads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Row ``pos`` with mass is what an add interrupted before ``pos`` moved leaves: sample()
    takes its mass away before drawing, so such a file loads and samples only stored rows."""
    buf = three_rows()
    with edited_state(buf, {"priority_masses": masses(1, 1, 1, 1, 0, 0, 0, 0)}) as state:
        write_replay(tmp_path / "interrupted.h5", state)
    other = CompressedPrioritizedReplayBuffer.load(tmp_path / "interrupted.h5", device="cpu")
    s = other.sample(64)
    assert set(s.indices.tolist()) == {0, 1, 2}
    assert set(s.observations[:, 0, 0].tolist()) == {1, 2, 3}


def test_a_good_round_trip_still_loads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    buf = three_rows()
    buf.update_priorities(np.array([0, 2]), np.array([4.0, 0.5]))
    buf.save(tmp_path / "good.h5")
    other = CompressedPrioritizedReplayBuffer.load(tmp_path / "good.h5", device="cpu")
    np.testing.assert_array_equal(other.priorities(), buf.priorities())
    assert other.priority_index.max == buf.priority_index.max


@pytest.mark.parametrize(("change", "match"), [
    ({"max": 0.5}, "max must be in"),
    ({"max": float("inf")}, "finite"),
    ({"max": 2.0 ** 129}, "max must be in"),
    ({"masses": np.full(4, 1e39)}, "finite"),
    ({"masses": np.full(4, 1 + 1j)}, "real numbers"),
])
def test_a_priority_index_state_out_of_range_is_refused(change, match) -> None:  # type: ignore[no-untyped-def]
    ix = PriorityIndex(4, fanout=2)
    ix.set(np.arange(4), [1.0, 2.0, 0.0, 3.0])
    before = ix.state_dict()
    with pytest.raises(ValueError, match=match):
        ix.load_state_dict({**before, **change})
    np.testing.assert_array_equal(ix.state_dict()["masses"], before["masses"])
    assert ix.max == 3.0
