"""The public seams: ``chunkstore.abc`` and ``sb3_integration.abc`` name the classes an implementer
subclasses, each with the contract tests it runs."""

from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import pytest

import chunkstore.abc
import sb3_integration.abc
from chunkstore.array.protocol import ItemArray
from chunkstore.codecs import Codec, get_codec
from chunkstore.tiers import MemoryTier, Tier
from sb3_integration.engine.api import FrameStoreAPI

#: seam -> (its home, the contract class that ships for it)
SEAMS = {
    "Codec": (Codec, "chunkstore.testing.codecs:CodecTests"),
    "Tier": (Tier, "chunkstore.testing.tiers:TierTests"),
    "ItemArray": (ItemArray, "chunkstore.testing.arrays:ArrayTests"),
    "FrameStoreAPI": (FrameStoreAPI, "sb3_integration.testing:FrameStoreTests"),
}


@pytest.mark.parametrize("name", sorted(SEAMS))
def test_each_seam_is_its_home_class_and_ships_a_contract(name):
    home, contract = SEAMS[name]
    module = sb3_integration.abc if name == "FrameStoreAPI" else chunkstore.abc
    assert getattr(module, name) is home and name in module.__all__
    path, _, cls = contract.partition(":")
    assert isinstance(getattr(importlib.import_module(path), cls), type)
    assert f"{path}.{cls}" in module.__doc__  # the seam's doc says which contract to run


def test_the_built_ins_are_instances_of_the_seams():
    from chunkstore import ChunkedArray

    assert isinstance(get_codec("zstd/3"), chunkstore.abc.Codec)
    tier = MemoryTier()
    assert isinstance(tier, chunkstore.abc.Tier)
    arr = ChunkedArray(8, (2,), np.uint8, chunk_len=4, codec="none", tier=tier)
    assert isinstance(arr, chunkstore.abc.ItemArray)
    arr.close()


def test_chunkstore_abc_imports_nothing_of_rl():
    code = "import sys, chunkstore.abc; print(sorted(m for m in sys.modules if m.startswith(('sb3', 'stable'))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
