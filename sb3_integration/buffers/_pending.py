"""The generations a prioritized buffer's samples drew, found again from the indices they returned.

A sample's late ``update_priorities(indices, priorities)`` must drop the entries whose slot
was overwritten since *that sample* drew it. Two samples can return the same index values
(concentrated priorities, small batches) with different generations, so the values alone
cannot say which sample an update belongs to. :class:`PendingSamples` keeps one record per
sample and finds it two ways:

- by the object: the ``indices`` array or tensor a sample returned, passed back as it is
  (SB3-style learners pass ``samples.indices``), finds that sample's own record, whatever
  other samples drew. The record lives as long as that object does (a weak reference), so a
  learner that updates long after sampling is still checked exactly, as often as it updates;
- by value, for anything else (a copy, a list, a tensor made from them, a pickle): the
  records of the last ``window`` samples with the same values in the same order. Which of
  them a copy comes from cannot be known, so an entry applies only where the slot's generation
  is what *every* one of them drew: a late update is never applied to a newer transition, at
  the price of dropping a copy's update while an earlier sample with the same values drew
  another generation (pass the sample's own ``indices`` to have it applied). Values that match
  no record update what is stored now.
"""

from __future__ import annotations

import collections
import contextlib
import weakref
from typing import Any

import numpy as np

__all__ = ["PendingSamples"]


class PendingSamples:
    """One record (values, generations) per sample: by the indices object, and by value.

    Parameters
    ----------
    window
        How many recent samples the by-value lookup considers.
    """

    def __init__(self, window: int) -> None:
        self.window = int(window)
        # id(indices object) -> (weak reference to it, its values then, generations); the weak
        # reference's callback removes the record when the object goes, before its id can be reused
        self._by_object: dict[int, tuple[weakref.ref[Any], bytes, np.ndarray]] = {}
        # index values -> the generations each of the last `window` samples with them drew
        self._by_value: dict[bytes, collections.deque[np.ndarray]] = {}
        self._order: collections.deque[bytes] = collections.deque()

    def __len__(self) -> int:
        """Samples the by-value lookup holds."""
        return len(self._order)

    def record(self, indices: Any, slots: np.ndarray, generations: np.ndarray) -> None:
        """A sample returned ``indices`` (an array or tensor) for ``slots`` of ``generations``."""
        value, key = slots.tobytes(), id(indices)
        records = self._by_object

        def forget(ref: weakref.ref[Any], key: int = key) -> None:  # runs while the object is freed
            if records.get(key, (None,))[0] is ref:
                records.pop(key, None)

        with contextlib.suppress(TypeError):  # an object without weak references: found by value only
            records[key] = (weakref.ref(indices, forget), value, generations)
        self._by_value.setdefault(value, collections.deque()).append(generations)
        self._order.append(value)
        while len(self._order) > self.window:
            old = self._order.popleft()
            same = self._by_value[old]
            same.popleft()
            if not same:
                del self._by_value[old]

    def expected(self, indices: Any, slots: np.ndarray, current: np.ndarray) -> np.ndarray | None:
        """The generations ``update_priorities(indices, ...)`` must find, given the slots' ``current``
        ones (the same length as ``slots``), or None where no sample returned these indices.

        By the object: that sample's generations. By value: ``current`` where every record with
        these values drew it, elsewhere the generation a record drew instead (so it is dropped).
        """
        value = slots.tobytes()
        rec = self._by_object.get(id(indices))
        if rec is not None and rec[0]() is indices and rec[1] == value:  # values unchanged since
            return rec[2]
        same = self._by_value.get(value)
        if not same:
            return None
        expect = current.copy()
        for gens in same:  # an entry some record drew at another generation: that one, which fails
            differ = gens != current
            expect[differ] = gens[differ]
        return expect
