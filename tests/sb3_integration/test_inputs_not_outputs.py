"""Inputs are never outputs: an import refuses to write over what it reads (ValueError, nothing written).

Before the check, ``import_dqn_replay(src, "<src>/$store$_observation_ckpt.0.gz")`` returned
normally and replaced the dataset's observation file with its HDF5 output.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
from dopamine_ckpt import DopamineWriter

from sb3_integration.offline import import_dqn_replay

OBS = "$store$_observation_ckpt.0.gz"


@pytest.fixture
def src(tmp_path):
    d = tmp_path / "logs"
    rng = np.random.default_rng(0)
    w = DopamineWriter(64, (8, 8))
    for t in range(100):
        w.add(rng.integers(0, 255, (8, 8), dtype=np.uint8), int(rng.integers(4)), 1.0, terminal=t % 37 == 36)
    w.save(d, 0)
    return d


def _digests(d):
    return {p: hashlib.sha256((d / p).read_bytes()).hexdigest() for p in sorted(os.listdir(d))}


def _refused(src, out, match):
    before = _digests(src)
    with pytest.raises(ValueError, match=match):
        import_dqn_replay(src, out, progress=False)
    assert _digests(src) == before  # every input unchanged, nothing added to src
    assert not os.path.lexists(str(out) + ".parts") or os.path.islink(str(out) + ".parts")


def test_out_is_an_input(src):
    _refused(src, src / OBS, r"is .*observation_ckpt\.0\.gz, which is read from")


def test_out_is_a_symlink_to_an_input(src, tmp_path):
    link = tmp_path / "link.h5"
    link.symlink_to(src / OBS)
    _refused(src, link, "resolves to")
    assert link.is_symlink()


def test_out_is_a_hard_link_of_an_input(src, tmp_path):
    link = tmp_path / "hard.h5"
    os.link(src / "add_count_ckpt.0.gz", link)
    _refused(src, link, r"resolves to .*add_count_ckpt\.0\.gz")


def test_out_named_as_a_checkpoint_file_inside_the_source_directory(src):
    """A new ``*_ckpt.N.gz`` among the checkpoints: a later import would read it as one."""
    _refused(src, src / "$store$_observation_ckpt.1.gz", "lies inside")


def test_out_in_a_symlinked_source_directory(src, tmp_path):
    alias = tmp_path / "alias"
    alias.symlink_to(src, target_is_directory=True)
    _refused(src, alias / "$store$_reward_ckpt.5.gz", "lies inside")
    _refused(src, alias / OBS, "resolves to")


def test_other_names_beside_the_checkpoints_are_written(src):
    out = import_dqn_replay(src, src / "run.h5", progress=False)
    assert os.path.exists(out) and not os.path.exists(str(out) + ".parts")


def test_parts_directory_a_symlink_is_refused(src, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "o.h5.parts").symlink_to(target, target_is_directory=True)
    _refused(src, tmp_path / "o.h5", "symlink")
    assert os.listdir(target) == []  # no parts, no manifest went into the target


def test_source_inside_the_parts_directory_refused(tmp_path):
    d = tmp_path / "o.h5.parts" / "logs"
    rng = np.random.default_rng(1)
    w = DopamineWriter(64, (8, 8))
    for _ in range(80):
        w.add(rng.integers(0, 255, (8, 8), dtype=np.uint8), 0, 0.0, terminal=False)
    w.save(d, 0)
    with pytest.raises(ValueError, match="holds the source"):
        import_dqn_replay(d, tmp_path / "o.h5", progress=False)
    assert (d / OBS).exists()  # the parts directory (and the source in it) was not removed


def test_other_output_still_written(src, tmp_path):
    out = import_dqn_replay(src, tmp_path / "fine.h5", progress=False)
    assert os.path.exists(out) and not os.path.exists(str(out) + ".parts")
