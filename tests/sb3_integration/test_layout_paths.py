"""The subpackage layout keeps old import paths and old pickles working, and new pickles name new paths.

``tests/fixtures/pre_layout/buffers.pkl`` was pickled by the tree before the modules moved into
subpackages (see ``make_fixture.py`` there): it names ``sb3_integration.replay``, ``.rollout``,
``.prioritized``, ``.frames``, ``.stacking`` and ``._common``.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import pickle
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import sb3_integration

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "pre_layout" / "buffers.pkl"

#: every module path of sb3_integration before the layout, and where its code lives now
OLD_PATHS = {
    "frames": "engine.frames", "frame_state": "engine.frame_state", "stacking": "engine.stacking",
    "device_stacks": "engine.device_stacks", "replay": "buffers.replay", "rollout": "buffers.rollout",
    "her": "buffers.her", "prioritized": "buffers.prioritized", "columns": "buffers.columns",
    "sb3_ops": "buffers.sb3_checks", "spaces": "persistence.spaces", "persistence": "persistence.files",
    "extra_buffers": "interop.extra_buffers", "compat": "interop.compat", "convert": "interop.convert",
    "zoo": "interop.zoo", "per_dqn": "algorithms.per_dqn", "per_qrdqn": "algorithms.per_qrdqn",
}


class _Recorder(pickle.Unpickler):
    """Unpickles, recording the ``(module, name)`` of every class or function the pickle names."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.names: set[tuple[str, str]] = set()

    def find_class(self, module: str, name: str) -> object:
        self.names.add((module, name))
        return super().find_class(module, name)


def test_the_fixture_names_the_old_paths():
    rec = _Recorder(FIXTURE.read_bytes())
    rec.load()
    modules = {m for m, _ in rec.names if m.startswith("sb3_integration")}
    assert {"sb3_integration.replay", "sb3_integration.rollout", "sb3_integration.prioritized",
            "sb3_integration.frames", "sb3_integration._common"} <= modules


def test_a_pickle_from_before_the_layout_loads_with_its_contents():
    data = pickle.loads(FIXTURE.read_bytes())
    buffers, expected = data["buffers"], data["expected"]
    assert sorted(buffers) == ["CompressedNStepReplayBuffer", "CompressedPrioritizedReplayBuffer",
                               "CompressedReplayBuffer", "CompressedRolloutBuffer"]
    for name, buf in buffers.items():
        assert type(buf) is getattr(sb3_integration, name)
        want = expected[name]
        assert (buf.pos, buf.full) == (want["pos"], want["full"])
        np.testing.assert_array_equal(np.asarray(buf.observations), want["observations"])
        np.testing.assert_array_equal(np.array(buf.actions), want["actions"])
    replay = buffers["CompressedReplayBuffer"]
    replay.add(np.zeros((1, 4, 8, 8), np.uint8), np.ones((1, 4, 8, 8), np.uint8), np.array([[1]]),
               np.array([0.5]), np.array([False]), [{}])  # and it goes on working
    assert replay.pos == expected["CompressedReplayBuffer"]["pos"] + 1
    assert len(replay.sample(4).observations) == 4


def test_new_pickles_name_the_new_paths():
    space = gym.spaces.Box(0, 255, (4, 8, 8), np.uint8)
    buf = sb3_integration.CompressedReplayBuffer(16, space, gym.spaces.Discrete(3), device="cpu")
    buf.add(np.zeros((1, 4, 8, 8), np.uint8), np.ones((1, 4, 8, 8), np.uint8), np.array([[1]]),
            np.array([0.5]), np.array([False]), [{}])
    rec = _Recorder(pickle.dumps(buf))
    rec.load()
    modules = {m for m, _ in rec.names if m.startswith("sb3_integration")}
    assert "sb3_integration.buffers.replay" in modules
    assert modules <= {f"sb3_integration.{new}" for new in
                       ("buffers.replay", "buffers.options", "engine.frames", "engine.options", "engine.stacking")},\
        modules


def _same_objects(old: str) -> None:
    shim, real = importlib.import_module(f"sb3_integration.{old}"), importlib.import_module(
        f"sb3_integration.{OLD_PATHS[old]}")
    assert shim.__all__ == real.__all__ and shim.__all__
    for name in real.__all__:
        assert getattr(shim, name) is getattr(real, name), name
    private = sorted(n for n in vars(real) if n.startswith("_") and not n.startswith("__"))
    for name in private:  # names outside __all__ too, as the module had them
        assert getattr(shim, name) is getattr(real, name), name


@pytest.mark.parametrize("old", sorted(set(OLD_PATHS) - {"zoo"}))
def test_every_old_module_path_gives_the_same_objects(old):
    _same_objects(old)


def test_the_old_zoo_path_gives_the_same_objects():
    """In a child process: importing rl-zoo3 changes gymnasium for the rest of a process (Minari's
    collection of a TimeLimit env then fails), so the tests that run later must not see it."""
    if importlib.util.find_spec("rl_zoo3") is None:  # not imported here: see the test above
        pytest.skip("rl_zoo3 is not installed")
    done = subprocess.run([sys.executable, "-c", "import test_layout_paths as t; t._same_objects('zoo')"],
                          cwd=Path(__file__).parent, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_old_common_module_keeps_its_names():
    from sb3_integration import _common
    from sb3_integration.buffers import observations, options, views
    from sb3_integration.engine import packing

    homes = {**{n: options for n in options.__all__}, **{n: views for n in views.__all__ if n in _common.__all__},
             **{n: observations for n in observations.__all__}, **{n: packing for n in packing.__all__}}
    assert set(_common.__all__) <= set(homes)
    for name in _common.__all__:
        assert getattr(_common, name) is getattr(homes[name], name), name


def test_every_public_name_of_the_package_resolves():
    for name in sb3_integration.__all__:
        assert getattr(sb3_integration, name) is not None


def test_python_m_zoo_still_runs_its_usage():
    """``python -m sb3_integration.zoo`` runs the plugin's entry point (usage on no command)."""
    if importlib.util.find_spec("rl_zoo3") is None:  # not imported here: see the test above
        pytest.skip("rl_zoo3 is not installed")
    done = subprocess.run([sys.executable, "-m", "sb3_integration.zoo"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0
    assert "usage: python -m sb3_integration.zoo {train,enjoy}" in done.stderr
