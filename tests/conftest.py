"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest
import torch as th


@pytest.fixture
def one_torch_thread():
    """Small nets train faster on one thread on a busy 2-core box; compared runs share the setting."""
    before = th.get_num_threads()
    th.set_num_threads(1)
    yield
    th.set_num_threads(before)


@pytest.fixture(params=["native", "python"])
def read_path(request):
    """Run a test on the native read path and again with it forced off (the Python fallback)."""
    from chunkstore import native

    if request.param == "python":
        with native.disabled():
            yield request.param
    else:
        yield request.param


def reseal_checksums(path) -> None:
    """Recompute a chunkstore file's metadata checksums after a test edited it.

    Whoever crafts a file also writes its checksums: tests of what lies beneath the
    checksums (sizes, ranges, chunk tables) edit a file, then reseal it.
    """
    import json

    import h5py

    from chunkstore.hdf5._layout import (
        META,
        array_record,
        extra_record,
        header_record,
        index_record,
    )
    from chunkstore.hdf5.checksum import crc32, record_crc

    with h5py.File(path, "r+") as f:
        sums = {"arrays": {}, "extras": {}}
        for name in json.loads(f.attrs["arrays"]):
            dset, group = f[name], f[f"{META}/arrays/{name}"]
            config = dset.attrs["codec_config"] if "codec_config" in dset.attrs else (
                group["codec_config"][()].tobytes().decode())
            tail = (int(group["tail"].shape[0]), int(group["tail"].attrs["crc32"])) if "tail" in group else None
            sums["arrays"][name] = {
                "meta": record_crc(array_record(dset)), "codec": crc32(config.encode()),
                "index": record_crc(index_record(group["chunks"][()], group["crc32"][()], tail))}
        for name in json.loads(f.attrs["extras"]):
            sums["extras"][name] = record_crc(extra_record(f[name]))
        sums["header"] = record_crc(header_record(f))
        f.attrs["checksums"] = json.dumps(sums)


@pytest.fixture
def reseal():
    """:func:`reseal_checksums`, for tests that craft files."""
    return reseal_checksums
