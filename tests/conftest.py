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
