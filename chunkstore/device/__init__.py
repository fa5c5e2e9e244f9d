"""Device-resident item storage: items encoded in torch device memory, read as device tensors.

Knows nothing about RL. One idea per module:

* :mod:`~chunkstore.device.runs`: the encoding (an item = a reference item + runs
  of differing bytes) and its host-side encoder (numba, or numpy);
* :mod:`~chunkstore.device.decode`: the device-side decoder, a fixed number of
  torch ops per batch, no device-to-host reads;
* :mod:`~chunkstore.device.policy`: which reference each item uses, when a new one pays;
* :mod:`~chunkstore.device.refs`: the reference rows on the device;
* :mod:`~chunkstore.device.heap`: record segments in one device tensor, under a byte
  budget (:class:`~chunkstore.device.heap.DeviceBudget`, shareable by several arrays);
  past it the oldest segments move to host RAM and are still read;
* :mod:`~chunkstore.device.staging`: host (pinned) buffers for uploads;
* :mod:`~chunkstore.device.batch`: the host half of a read (one upload per batch);
* :mod:`~chunkstore.device.persist`: to and from host ChunkedArrays and their snapshots;
* :mod:`~chunkstore.device.indices`: ChunkedArray's indexing rules for the write side,
  and the table of a DeviceArray's items;
* :mod:`~chunkstore.device.array`: :class:`DeviceArray`, ChunkedArray's write side
  with device-tensor reads;
* :mod:`~chunkstore.device._fork`: forked children of a process with a CPU store keep
  off OpenMP's threads, which do not survive ``fork()``;
* :mod:`~chunkstore.device.checks`: dispatch modes that count a call's torch ops and
  fail on any op that reads device data on the host.
"""

from __future__ import annotations

from chunkstore.device.array import DeviceArray
from chunkstore.device.dtypes import torch_dtype
from chunkstore.device.heap import DeviceBudget
from chunkstore.device.runs import RunFormat

__all__ = ["DeviceArray", "DeviceBudget", "RunFormat", "torch_dtype"]
