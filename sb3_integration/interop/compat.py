"""sb3-extra-buffers compatibility: its helper names, its GPU buffer names, and re-exports.

Migrating is one import line::

    # from sb3_extra_buffers.compressed import CompressedReplayBuffer, find_buffer_dtypes
    from sb3_integration import CompressedReplayBuffer, find_buffer_dtypes

Every buffer takes sb3-extra-buffers' constructor arguments, translated by one
function (:mod:`sb3_integration.buffers.extra_buffers`); the buffer classes themselves are
defined once, in :mod:`sb3_integration.buffers.replay` and :mod:`sb3_integration.buffers.rollout`
(they are re-exported here, so imports and pickles that name
``sb3_integration.interop.compat.CompressedReplayBuffer`` keep working).

:class:`GpuReplayBuffer` and :class:`GpuRolloutBuffer` (sb3-extra-buffers'
experimental GPU buffers) are the same buffers with ``buffer_device`` defaulting to
``device``: frames stored, decoded and stacked on it; see their docstrings.
The helpers :func:`find_buffer_dtypes`, :func:`find_smallest_dtype`,
:func:`find_gpu_buffer_dtypes`, :func:`numpy_dtype_to_torch`, :func:`has_igzip`,
:func:`has_numba` and :class:`DummyCls` behave like theirs; :func:`init_jit` warms
chunkstore's native read path.
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any

import numpy as np
import torch as th

from sb3_integration.buffers.extra_buffers import CodecFallbackWarning, resolve_compression_method
from sb3_integration.buffers.options import check_positive_or_none
from sb3_integration.buffers.replay import CompressedDictReplayBuffer, CompressedReplayBuffer
from sb3_integration.buffers.rollout import CompressedDictRolloutBuffer, CompressedRolloutBuffer

__all__ = [
    "CodecFallbackWarning",
    "CompressedArray",
    "CompressedDictReplayBuffer",
    "CompressedDictRolloutBuffer",
    "CompressedReplayBuffer",
    "CompressedRolloutBuffer",
    "DummyCls",
    "GpuReplayBuffer",
    "GpuRolloutBuffer",
    "find_buffer_dtypes",
    "find_gpu_buffer_dtypes",
    "find_smallest_dtype",
    "has_igzip",
    "has_numba",
    "init_jit",
    "numpy_dtype_to_torch",
    "resolve_compression_method",
]


# == helpers with sb3-extra-buffers' names ===============================================
_UNSIGNED = (np.uint8, np.uint16, np.uint32, np.uint64)
_SIGNED = (np.int8, np.int16, np.int32, np.int64)
_FLOATS = (np.float32, np.float64)


def _max_value(dtype: Any) -> float:
    return float(np.iinfo(dtype).max) if np.issubdtype(dtype, np.integer) else float(np.finfo(dtype).max)


def find_smallest_dtype(max_val: int, signed: bool = False, fallback: Any = np.float32) -> Any:
    """The smallest integer (then float) numpy type that holds ``max_val``, as sb3-extra-buffers.

    Examples
    --------
    >>> find_smallest_dtype(84 * 84 * 4), find_smallest_dtype(100, signed=True)
    (<class 'numpy.uint16'>, <class 'numpy.int8'>)
    """
    for dtype in (_SIGNED if signed else _UNSIGNED) + _FLOATS:
        if max_val <= _max_value(dtype):
            return dtype
    return fallback


def find_buffer_dtypes(obs_shape: int | tuple[int, ...], elem_dtype: Any = np.uint8,
                       compression_method: str = "rle") -> dict[str, Any]:
    """``{"elem_type", "runs_type"}`` as sb3-extra-buffers computes them.

    Here the result is only informational (pass it as ``dtypes=``, it is kept
    as ``.dtypes``): observations are stored losslessly in the space's dtype,
    and no JIT needs warming up for ``-jit`` names.

    Examples
    --------
    >>> find_buffer_dtypes((4, 84, 84), np.uint8)
    {'elem_type': <class 'numpy.uint8'>, 'runs_type': <class 'numpy.uint16'>}
    """
    n = math.prod(obs_shape) if isinstance(obs_shape, tuple) else int(obs_shape)
    return {"elem_type": elem_dtype, "runs_type": find_smallest_dtype(n)}


def find_gpu_buffer_dtypes(obs_shape: int | tuple[int, ...], elem_dtype: th.dtype = th.uint8,
                           compression_method: str = "rle") -> dict[str, Any]:
    """The torch-dtype variant of :func:`find_buffer_dtypes` (sb3-extra-buffers' GPU buffers).

    Examples
    --------
    >>> find_gpu_buffer_dtypes((4, 84, 84))
    {'elem_type': torch.uint8, 'runs_type': torch.uint16}
    """
    n = math.prod(obs_shape) if isinstance(obs_shape, tuple) else int(obs_shape)
    runs = numpy_dtype_to_torch(find_smallest_dtype(n))
    return {"elem_type": elem_dtype, "runs_type": th.uint16 if runs in (th.uint8, th.int8) else runs}


def numpy_dtype_to_torch(dtype: Any) -> th.dtype:
    """The torch dtype of a numpy dtype (``np.uint8`` -> ``torch.uint8``)."""
    return th.from_numpy(np.zeros(0, np.dtype(dtype))).dtype


def has_igzip() -> bool:
    """Whether the ``igzip`` codecs run on python-isal (without it they fall back to ``gzip``)."""
    try:
        from isal import isal_zlib  # noqa: F401
    except ImportError:
        return False
    return True


def has_numba() -> bool:
    """Whether numba imports (a chunkstore dependency: the native read path is built on it).

    ``rle-jit`` works either way: chunkstore's RLE needs no numba.
    """
    import importlib.util

    return importlib.util.find_spec("numba") is not None


def init_jit(*args: Any, **kwargs: Any) -> None:
    """Load chunkstore's native read path now rather than at the first sample.

    Its arguments (sb3-extra-buffers' ``elem_type``/``runs_type``) are accepted and
    unneeded. The kernels compile once per machine (numba's cache) and load in well
    under a second after that; if the layer cannot load, one ``RuntimeWarning`` says why
    and reads use the Python path.
    """
    from chunkstore import native

    native.available()


class DummyCls:
    """A placeholder accepting any arguments, e.g. ``custom_objects={"replay_buffer_class": DummyCls}``."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        pass


class CompressedArray:
    """Not provided: use :class:`chunkstore.ChunkedArray` (sb3-extra-buffers' experimental array).

    Raises
    ------
    TypeError
        Always, naming the replacement.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("sb3-extra-buffers' experimental CompressedArray has no counterpart here; "
                        "use chunkstore.ChunkedArray(n, obs_shape, dtype, codec=...) for a compressed "
                        "array of observations")


# == sb3-extra-buffers' GPU buffer names ==================================================
#: what the GPU buffers take after their base's named arguments, in sb3-extra-buffers' order
_GPU_ARGUMENTS = ("buffer_device", "heap_bytes", "max_slot_bytes")


@functools.cache
def _gpu_signature(base: type) -> inspect.Signature:
    """``base.__init__``'s signature with :data:`_GPU_ARGUMENTS` after its named arguments.

    Derived, not written out: a GPU buffer takes exactly what its base takes (the store
    options through the base's ``**kwargs``, checked there) plus ``max_slot_bytes``, and
    ``buffer_device``/``heap_bytes`` also by position.
    """
    sig = inspect.signature(base.__init__)  # type: ignore[misc]
    params = list(sig.parameters.values())
    rest = [p for p in params if p.kind is p.VAR_KEYWORD]
    named = [p for p in params if p.kind is not p.VAR_KEYWORD]
    gpu = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None) for n in _GPU_ARGUMENTS]
    return sig.replace(parameters=[*named, *gpu, *rest])


def _gpu_init(self: Any, base: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Run ``base.__init__`` with the frames on ``buffer_device`` (default: the buffer's ``device``)."""
    bound = _gpu_signature(base).bind(self, *args, **kwargs)
    given = dict(bound.arguments)
    given.pop("self")
    store = given.pop(next(iter(p for p in bound.signature.parameters.values() if p.kind is p.VAR_KEYWORD)).name, {})
    buffer_device, heap_bytes, max_slot_bytes = (given.pop(n, None) for n in _GPU_ARGUMENTS)
    check_positive_or_none("heap_bytes", heap_bytes)
    check_positive_or_none("max_slot_bytes", max_slot_bytes)
    self.heap_bytes, self.max_slot_bytes = heap_bytes, max_slot_bytes
    from stable_baselines3.common.utils import get_device

    where = th.device(buffer_device) if buffer_device is not None else get_device(given.get("device", "auto"))
    base.__init__(self, **given, buffer_device=where, heap_bytes=heap_bytes, **store)  # type: ignore[misc]


class GpuReplayBuffer(CompressedReplayBuffer):
    """sb3-extra-buffers' ``GpuReplayBuffer``: :class:`CompressedReplayBuffer` sampling on a device.

    The observation frames are stored, decoded and stacked on ``buffer_device``
    (default: the buffer's ``device``): this is ``CompressedReplayBuffer(...,
    buffer_device=..., heap_bytes=...)``. Each frame is kept as runs of bytes that
    differ from a reference frame (:mod:`chunkstore.device`; device bytes per transition
    measured by ``tools/bench_device.py``: results/bench_device.md); a
    sample uploads one small index block and decodes and stacks its frames there, so
    observations never pass through the host.
    ``heap_bytes`` is the device budget for those frames (all keys together;
    default half the free memory of a CUDA device, no limit elsewhere): past it
    the oldest segments move to host RAM and are still read, so the buffer never
    overflows. ``max_slot_bytes`` is accepted (a positive int) and kept: records
    are small and fixed-size segments need no slot limit. SB3's actions, rewards
    and dones stay on the host. ``load(path)`` puts the frames on ``buffer_device``
    again (it defaults to ``device``); a pickle restores them where they were (host
    memory, with a warning, if that device is missing). A ``tier`` cannot be given
    (it places host chunks). The default ``compression_method`` is this package's
    (sb3-extra-buffers' is ``"none"``); here it only encodes saved files and pickles.

    Examples
    --------
    >>> from gymnasium import spaces
    >>> buf = GpuReplayBuffer(1000, spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6),
    ...                       "cpu", buffer_device="cpu", heap_bytes=1 << 30)
    >>> buf.buffer_device, buf.heap_bytes
    (device(type='cpu'), 1073741824)
    """

    heap_bytes: int | None
    max_slot_bytes: int | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _gpu_init(self, CompressedReplayBuffer, args, kwargs)

    def _extra_file_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        kwargs, arrays = super()._extra_file_state()
        return {**kwargs, "heap_bytes": self.heap_bytes, "max_slot_bytes": self.max_slot_bytes}, arrays


class GpuRolloutBuffer(CompressedRolloutBuffer):
    """sb3-extra-buffers' ``GpuRolloutBuffer``: :class:`CompressedRolloutBuffer` sampling on a device.

    The observation frames are stored, decoded and stacked on ``buffer_device``
    (default: the buffer's ``device``): ``CompressedRolloutBuffer(...,
    buffer_device=..., heap_bytes=...)``; each ``get()`` batch of observations is
    assembled there. ``heap_bytes`` is the device budget for the frames (past it
    the oldest segments move to host RAM); ``max_slot_bytes`` is accepted (a
    positive int) and kept. Actions, values, returns and advantages stay SB3's
    host arrays.

    Examples
    --------
    >>> from gymnasium import spaces
    >>> buf = GpuRolloutBuffer(128, spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6),
    ...                        "cpu", n_envs=8, buffer_device="cpu")
    >>> buf.buffer_device
    device(type='cpu')
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _gpu_init(self, CompressedRolloutBuffer, args, kwargs)


for _gpu, _base in ((GpuReplayBuffer, CompressedReplayBuffer), (GpuRolloutBuffer, CompressedRolloutBuffer)):
    setattr(_gpu.__init__, "__signature__", _gpu_signature(_base))  # what inspect.signature shows  # noqa: B010
