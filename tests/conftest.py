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
