"""Dispatch modes that check the device read path: op counts, and no reads of device data on the host.

A :class:`torch.utils._python_dispatch.TorchDispatchMode` sees every aten op a block
of code dispatches (after autograd and composite ops are decomposed), with its
arguments and results. :class:`OpCounter` counts them; :class:`NoHostReads` raises
on any op that would make the host wait for device data:

* ``aten._local_scalar_dense`` (``.item()``, ``int(t)``, ``bool(t)``, ``.tolist()``),
* ops whose output size depends on the data (``nonzero``, ``masked_select``,
  ``unique``, boolean indexing, ``repeat_interleave`` without ``output_size``),
* copies from the checked device to the host (``.cpu()``, ``.numpy()`` of a copy,
  ``.to("cpu")``).

Used by the tests and ``tools/bench_device.py``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["HostReadError", "NoHostReads", "OpCounter"]

#: aten ops that read device data on the host or size their output by it
_FORBIDDEN = (
    "aten._local_scalar_dense", "aten.item", "aten.nonzero", "aten.masked_select",
    "aten._unique", "aten.unique", "aten._unique2", "aten.unique_consecutive", "aten.unique_dim",
    "aten.is_nonzero", "aten.equal", "aten.allclose", "aten.masked_scatter",
)


class HostReadError(AssertionError):
    """An op in a checked block reads device data on the host."""


class OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched inside the ``with`` block.

    Examples
    --------
    >>> import torch
    >>> with OpCounter() as c:
    ...     _ = torch.ones(3) + 1
    >>> c.total >= 2
    True
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


class NoHostReads(TorchDispatchMode):
    """Raises :class:`HostReadError` on an op that reads device data on the host.

    Parameters
    ----------
    device
        The device the checked code keeps its data on. A copy from it to the cpu
        is a host read; on ``"cpu"`` itself copies cannot be told apart, so run the
        check on ``"meta"`` (no data at all) as well.
    """

    def __init__(self, device: Any = "cpu") -> None:
        super().__init__()
        import torch

        self.device = torch.device(device)
        self.seen: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        import torch

        kwargs = kwargs or {}
        name = str(func.overloadpacket)
        self.seen[name] += 1
        if name in _FORBIDDEN or name.startswith("aten.nonzero"):
            raise HostReadError(f"{func} reads device data on the host")
        if name == "aten.repeat_interleave" and kwargs.get("output_size") is None:
            raise HostReadError(f"{func} without output_size sizes its output by device data")
        if name == "aten.index" and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                                        for i in (args[1] if len(args) > 1 else []) if i is not None):
            raise HostReadError(f"{func} with a boolean mask sizes its output by device data")
        if self.device.type != "cpu" and self._to_host(name, args, kwargs):
            raise HostReadError(f"{func} copies {self.device} data to the host")
        return func(*args, **kwargs)

    def _to_host(self, name: str, args: Any, kwargs: dict[str, Any]) -> bool:
        """Whether a copy op moves data from the checked device to the cpu (decided before it runs)."""
        import torch

        def here(t: Any) -> bool:
            return isinstance(t, torch.Tensor) and t.device == self.device

        if name == "aten._to_copy":
            target = kwargs.get("device")
            return here(args[0]) and target is not None and torch.device(target).type == "cpu"
        if name == "aten.copy_":
            dst, src = args[0], args[1]
            return isinstance(dst, torch.Tensor) and dst.device.type == "cpu" and here(src)
        return False
