"""The subpackage layout keeps old import paths and old pickles working, and new pickles name new paths.

The old paths are served by ``sb3_integration._legacy``'s table: source that names one is warned
(``DeprecationWarning``, the new path, the removal version); unpickling is not.

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
import warnings
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
    "extra_buffers": "buffers.extra_buffers", "compat": "interop.compat", "convert": "interop.convert",
    "zoo": "interop.zoo", "per_dqn": "algorithms.per_dqn", "per_qrdqn": "algorithms.per_qrdqn",
    # 0.3: below the buffer classes, which read them (tests/test_layers.py)
    "interop.extra_buffers": "buffers.extra_buffers", "interop.sources": "buffers.sources",
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
    """The old path's names are the new module's (getattr in a call: not a line to warn)."""
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


def test_the_interop_paths_of_0_2_warn_and_name_the_new_home():
    new_home = "import CodecFallbackWarning from sb3_integration.buffers.extra_buffers"
    with pytest.warns(DeprecationWarning, match=new_home):
        from sb3_integration.interop.extra_buffers import CodecFallbackWarning
    assert CodecFallbackWarning is sb3_integration.CodecFallbackWarning
    with pytest.warns(DeprecationWarning, match="import convert_into from sb3_integration.buffers.sources"):
        from sb3_integration.interop.sources import convert_into
    from sb3_integration.buffers import sources
    assert convert_into is sources.convert_into


def test_the_old_common_module_keeps_its_names():
    from sb3_integration import _common  # the import alone does not warn: the names it serves do
    from sb3_integration.buffers import observations, options, views
    from sb3_integration.engine import packing

    homes = {**{n: options for n in options.__all__}, **{n: views for n in views.__all__ if n in _common.__all__},
             **{n: observations for n in observations.__all__}, **{n: packing for n in packing.__all__}}
    assert set(_common.__all__) <= set(homes)
    for name in _common.__all__:
        assert getattr(_common, name) is getattr(homes[name], name), name
    assert "StoreOptions" in _common.__all__ and "StoreOptions" in dir(_common)
    with pytest.warns(DeprecationWarning, match="import StoreOptions from sb3_integration.buffers.options"):
        assert _common.StoreOptions is options.StoreOptions


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


# -- who is warned: source that names an old path, not a pickle --------------------------------------

def test_from_an_old_path_import_warns_with_the_new_path_and_the_removal():
    with pytest.warns(DeprecationWarning, match=r"sb3_integration\.replay is deprecated and goes in 0\.4\.0: "
                      r"import CompressedReplayBuffer from sb3_integration\.buffers\.replay") as seen:
        from sb3_integration.replay import CompressedReplayBuffer
    assert CompressedReplayBuffer is sb3_integration.CompressedReplayBuffer
    assert [Path(w.filename).name for w in seen] == [Path(__file__).name]  # the line to edit


def test_import_of_an_old_path_then_an_attribute_warns_at_the_attribute():
    import sb3_integration.frames

    with pytest.warns(DeprecationWarning, match=r"import FrameStore from sb3_integration\.engine\.frames"):
        store = sb3_integration.frames.FrameStore
    assert store is sb3_integration.FrameStore


def test_an_unknown_name_of_an_old_path_is_an_attribute_error():
    import sb3_integration.her

    with pytest.raises(AttributeError, match=r"sb3_integration\.her.*no_such_name"):
        sb3_integration.her.no_such_name  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sb3_integration.no_such_module")


def test_a_pickle_from_before_the_layout_loads_without_a_warning():
    """Its class paths (``sb3_integration.replay``, ``._common``, ...) are data the reader cannot edit."""
    for name in [m for m in sys.modules if m.split(".")[:2] in (["sb3_integration", old] for old in OLD_PATHS)
                 and m.count(".") == 1 and not m.endswith(".persistence")]:
        del sys.modules[name]  # the old paths imported afresh, by the unpickler
    for unpickler in (pickle.Unpickler, pickle._Unpickler):  # the C one and the Python one
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            data = unpickler(io.BytesIO(FIXTURE.read_bytes())).load()
        assert type(data["buffers"]["CompressedReplayBuffer"]) is sb3_integration.CompressedReplayBuffer


def test_the_short_zoo_path_is_the_plugin_module_itself_without_a_warning():
    if importlib.util.find_spec("rl_zoo3") is None:
        pytest.skip("rl_zoo3 is not installed")
    done = subprocess.run([sys.executable, "-W", "error", "-c", "import sb3_integration.zoo as z, "
                           "sb3_integration.interop.zoo as real; assert z is real; print(z.NAMES)"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
