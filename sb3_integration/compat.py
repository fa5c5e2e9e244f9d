"""sb3-extra-buffers compatibility: its names, arguments, codec names and attributes.

Migrating is one import line::

    # from sb3_extra_buffers.compressed import CompressedReplayBuffer, find_buffer_dtypes
    from sb3_integration import CompressedReplayBuffer, find_buffer_dtypes

The four buffer classes here are the ones :mod:`sb3_integration` exports: the
drop-in buffers of :mod:`sb3_integration.replay` and :mod:`sb3_integration.rollout`,
plus sb3-extra-buffers 0.5's constructor arguments, in its positional order:

``dtypes``
    Kept as ``.dtypes`` (normalised as sb3-extra-buffers does) and otherwise
    unneeded: observations are stored losslessly in the observation space's
    dtype (sb3-extra-buffers clips and casts them to ``dtypes["elem_type"]``).
    An ``elem_type`` that differs from the space's dtype warns once.
``normalize_images``
    Honoured: sampled observations are divided by 255 (as float32 for integer
    observations), as sb3-extra-buffers does for every observation key.
``compression_method``
    Its codec names: ``rle``, ``rle-jit``, ``rle-old``, ``gzip<L>``, ``igzip<L>``,
    ``zstd<L>``, ``zstd-<L>`` (negative level), ``lz4-frame/<L>``, ``lz4-block/<L>``,
    ``none``, and chunkstore's own (default ``zstd3+dict``). ``igzip`` without
    python-isal falls back to ``gzip`` at the same level with one
    :class:`CodecFallbackWarning`, as sb3-extra-buffers does.
``compression_kwargs``
    ``compresslevel`` is honoured (the level of a codec named without one, as in
    sb3-extra-buffers); ``elem_type`` / ``runs_type`` are unneeded (lossless
    storage; chunkstore's RLE picks its own run width); ``threads`` (zstd) and
    ``block_size`` (lz4-frame) are unneeded (they change speed, never the
    bytes read back). Other keys raise TypeError.
``decompression_kwargs``
    ``elem_type`` / ``runs_type`` only, unneeded: samples come back in the
    space's dtype, as SB3's do.
``output_dtype`` (replay buffers)
    Honoured: ``"float"`` returns float32 observations, ``"raw"`` the space's dtype.

The attributes sb3-extra-buffers users print are set: ``dtypes``,
``normalize_images``, ``compression_kwargs``, ``decompression_kwargs``,
``output_dtype`` (replay), ``flatten_len`` and ``flatten_config`` (non-Dict
spaces), ``flatten_configs`` (Dict spaces), ``version``.

:class:`GpuReplayBuffer` and :class:`GpuRolloutBuffer` (sb3-extra-buffers'
experimental GPU buffers) map onto the same buffers; see their docstrings.
The helpers :func:`find_buffer_dtypes`, :func:`find_smallest_dtype`,
:func:`find_gpu_buffer_dtypes`, :func:`numpy_dtype_to_torch`, :func:`has_igzip`,
:func:`has_numba` and :class:`DummyCls` behave like theirs; :func:`init_jit` warms
chunkstore's native read path.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.preprocessing import get_obs_shape

import chunkstore
from chunkstore import Codec, DeviceTier, MissingBackendError, get_codec
from sb3_integration import replay as _replay
from sb3_integration import rollout as _rollout

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


class CodecFallbackWarning(UserWarning):
    """A codec's optional backend is missing and a compatible codec is used instead."""


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


# == codec names ==========================================================================
_LEVELLED = ("zstd", "gzip", "igzip", "lz4-frame", "lz4-block")
_COMPRESSION_KWARGS = {"elem_type", "runs_type", "compresslevel", "threads", "block_size"}
_DECOMPRESSION_KWARGS = {"elem_type", "runs_type"}


def _check_kwargs(kwargs: dict[str, Any] | None, allowed: set[str], name: str) -> dict[str, Any]:
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        raise TypeError(f"{name} must be a dict or None, got {type(kwargs).__name__}")
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise TypeError(f"{name}: unknown key(s) {unknown}; accepted: {sorted(allowed)}")
    return kwargs


def resolve_compression_method(method: str | Codec | None,
                               compression_kwargs: dict[str, Any] | None = None) -> str | Codec | None:
    """The codec name to build a buffer with, as sb3-extra-buffers would interpret it.

    ``compression_kwargs["compresslevel"]`` sets the level of a codec named
    without one (``"zstd"`` + 5 -> ``"zstd/5"``). ``igzip`` without python-isal
    becomes ``gzip`` at the same level, with one :class:`CodecFallbackWarning`.

    Raises
    ------
    chunkstore.CodecConfigError
        An unknown name or a level out of range.

    Examples
    --------
    >>> resolve_compression_method("zstd", {"compresslevel": 5})
    'zstd/5'
    >>> resolve_compression_method("lz4-block/16")
    'lz4-block/16'
    """
    kwargs = _check_kwargs(compression_kwargs, _COMPRESSION_KWARGS, "compression_kwargs")
    if method is None:  # the buffer's own default (a preset's codec)
        return None
    if isinstance(method, Codec):
        return method
    if not isinstance(method, str):
        raise TypeError(f"compression_method must be a codec name or Codec, got {type(method).__name__}")
    name = method.strip().lower()
    if kwargs.get("compresslevel") is not None and name in _LEVELLED:
        name = f"{name}/{int(kwargs['compresslevel'])}"
    try:
        get_codec(name)
    except MissingBackendError:
        if "igzip" not in name:
            raise
        fallback = name.replace("igzip", "gzip")
        get_codec(fallback)
        warnings.warn(f"compression_method {method!r}: python-isal is not installed, using {fallback!r} "
                      "(the same DEFLATE data; pip install 'chunkstore[isal]' for igzip)",
                      CodecFallbackWarning, stacklevel=4)
        return fallback
    return name


# == the options mixin ====================================================================
def _normalise_dtypes(dtypes: Any) -> dict[str, Any]:
    if dtypes is None:
        return {"elem_type": np.uint8, "runs_type": np.uint16}
    if isinstance(dtypes, dict):
        return dtypes
    return {"elem_type": dtypes, "runs_type": dtypes}


def _as_numpy_dtype(dtype: Any) -> np.dtype | None:
    if dtype is None:  # np.dtype(None) would be float64
        return None
    if isinstance(dtype, th.dtype):
        return th.empty(0, dtype=dtype).numpy().dtype
    try:
        return np.dtype(dtype)
    except TypeError:
        return None


def _plain(options: dict[str, Any]) -> dict[str, Any]:
    """``dtypes`` / ``*compression_kwargs`` as JSON for a saved file: numpy and torch dtypes by name."""
    out = {}
    for key, value in options.items():
        if value is None or isinstance(value, (bool, int, float, str)):
            out[key] = value
        elif isinstance(value, (np.integer, np.floating, np.bool_)):
            out[key] = value.item()
        else:
            dtype = _as_numpy_dtype(value)
            out[key] = dtype.name if dtype is not None else repr(value)
    return out


def _space_dtypes(space: spaces.Space) -> list[np.dtype]:
    subs = space.spaces.values() if isinstance(space, spaces.Dict) else [space]
    return [np.dtype(s.dtype) for s in subs]


class _ExtraBuffersOptions:
    """sb3-extra-buffers' constructor options on top of a compressed buffer (put first)."""

    normalize_images: bool
    output_dtype: th.dtype | None

    def _take_options(self, observation_space: spaces.Space, *, dtypes: Any, normalize_images: bool,
                      compression_method: str | Codec | None, compression_kwargs: dict[str, Any] | None,
                      decompression_kwargs: dict[str, Any] | None,
                      output_dtype: str = "raw") -> str | Codec | None:
        """Validate and record the options; return the codec name to build the store with."""
        if not isinstance(normalize_images, (bool, np.bool_)):
            raise TypeError(f"normalize_images must be a bool, got {normalize_images!r}")
        if output_dtype not in ("raw", "float"):
            raise ValueError(f"output_dtype must be 'raw' or 'float', got {output_dtype!r}")
        method = resolve_compression_method(compression_method, compression_kwargs)
        self.dtypes = _normalise_dtypes(dtypes)
        self.compression_kwargs = dict(compression_kwargs) if compression_kwargs else dict(self.dtypes)
        self.decompression_kwargs = dict(_check_kwargs(decompression_kwargs, _DECOMPRESSION_KWARGS,
                                                       "decompression_kwargs")) or dict(self.dtypes)
        self.normalize_images = bool(normalize_images)
        self.output_dtype = th.float32 if output_dtype == "float" else None
        self.version = chunkstore.__version__
        self._describe_shapes(observation_space)
        if dtypes is not None:
            self._warn_elem_type(observation_space)
        return method

    def _describe_shapes(self, space: spaces.Space) -> None:
        if isinstance(space, spaces.Dict):
            self.flatten_configs = {key: {"shape": math.prod(get_obs_shape(sub)), "dtype": sub.dtype}
                                    for key, sub in space.spaces.items()}
        else:
            self.flatten_len = math.prod(get_obs_shape(space))
            self.flatten_config = {"shape": self.flatten_len, "dtype": space.dtype}

    def _warn_elem_type(self, space: spaces.Space) -> None:
        elem = _as_numpy_dtype(self.dtypes.get("elem_type"))
        differ = sorted({str(d) for d in _space_dtypes(space) if elem is not None and d != elem})
        if differ:
            warnings.warn(f"dtypes elem_type {elem} is not the observation dtype ({', '.join(differ)}): "
                          "observations are stored losslessly in the space's dtype and sampled in it "
                          "(sb3-extra-buffers would clip and cast them to elem_type)", UserWarning,
                          stacklevel=4)

    def _convert_obs(self, obs: Any) -> Any:
        if self.output_dtype is None and not self.normalize_images:
            return obs
        if isinstance(obs, dict):
            return {key: self._convert_tensor(x) for key, x in obs.items()}
        return self._convert_tensor(obs)

    def _convert_tensor(self, x: th.Tensor) -> th.Tensor:
        if self.output_dtype is not None:
            x = x.to(self.output_dtype)
        if self.normalize_images:
            x = (x if x.is_floating_point() else x.to(th.float32)) / 255.0
        return x

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> Any:
        samples = super()._get_samples(batch_inds, env)  # type: ignore[misc]
        if self.output_dtype is None and not self.normalize_images:
            return samples
        fields = {"observations": self._convert_obs(samples.observations)}
        if hasattr(samples, "next_observations"):
            fields["next_observations"] = self._convert_obs(samples.next_observations)
        return samples._replace(**fields)


class _ReplayOptions(_ExtraBuffersOptions):
    """The replay side: the constructor (SB3's ``ReplayBuffer`` arguments in their order, then
    sb3-extra-buffers'), options saved with the buffer, and the sb3-extra-buffers converter."""

    def __init__(self, buffer_size: int, observation_space: spaces.Space, action_space: spaces.Space,
                 device: th.device | str = "auto", n_envs: int = 1, optimize_memory_usage: bool = False,
                 handle_timeout_termination: bool = True, dtypes: Any = None, normalize_images: bool = False,
                 compression_method: str | Codec | None = None,
                 compression_kwargs: dict[str, Any] | None = None,
                 decompression_kwargs: dict[str, Any] | None = None, output_dtype: str = "raw",
                 **store_options: Any) -> None:
        method = self._take_options(observation_space, dtypes=dtypes, normalize_images=normalize_images,
                                    compression_method=compression_method, compression_kwargs=compression_kwargs,
                                    decompression_kwargs=decompression_kwargs, output_dtype=output_dtype)
        super().__init__(buffer_size, observation_space, action_space, device, n_envs, optimize_memory_usage,
                         handle_timeout_termination, compression_method=method, dtypes=dtypes, **store_options)

    def _extra_file_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        kwargs, arrays = super()._extra_file_state()  # type: ignore[misc]
        # the informational options, by name; None where the constructor derives them again
        given = None if self.dtypes == _normalise_dtypes(None) else _plain(self.dtypes)
        return {**kwargs, "normalize_images": self.normalize_images,
                "output_dtype": "raw" if self.output_dtype is None else "float", "dtypes": given,
                "compression_kwargs": None if self.compression_kwargs == self.dtypes else _plain(self.compression_kwargs),
                "decompression_kwargs": None if self.decompression_kwargs == self.dtypes
                else _plain(self.decompression_kwargs)}, arrays

    @classmethod
    def from_sb3_extra_buffers(cls, source: Any, **kwargs: Any) -> Any:
        """This class, filled from an sb3-extra-buffers buffer or its pickle.

        See :func:`sb3_integration.convert.from_sb3_extra_buffers` (``buffer_class=cls``).
        """
        from sb3_integration.convert import from_sb3_extra_buffers

        return from_sb3_extra_buffers(source, buffer_class=cls, **kwargs)


class _RolloutOptions(_ExtraBuffersOptions):
    """The rollout side: the constructor (SB3's ``RolloutBuffer`` arguments in their order, then
    sb3-extra-buffers'; the default codec stores frames once, uncompressed)."""

    def __init__(self, buffer_size: int, observation_space: spaces.Space, action_space: spaces.Space,
                 device: th.device | str = "auto", gae_lambda: float = 1, gamma: float = 0.99, n_envs: int = 1,
                 dtypes: Any = None, normalize_images: bool = False, compression_method: str | Codec | None = None,
                 compression_kwargs: dict[str, Any] | None = None,
                 decompression_kwargs: dict[str, Any] | None = None, **store_options: Any) -> None:
        method = self._take_options(observation_space, dtypes=dtypes, normalize_images=normalize_images,
                                    compression_method=_rollout.DEFAULT_ROLLOUT_COMPRESSION
                                    if compression_method is None else compression_method,
                                    compression_kwargs=compression_kwargs, decompression_kwargs=decompression_kwargs)
        super().__init__(buffer_size, observation_space, action_space, device, gae_lambda, gamma, n_envs,
                         compression_method=method, dtypes=dtypes, **store_options)


# == the buffers ==========================================================================
class CompressedReplayBuffer(_ReplayOptions, _replay.CompressedReplayBuffer):
    """SB3's ``ReplayBuffer``, compressed, taking sb3-extra-buffers' arguments too.

    See :class:`sb3_integration.replay.CompressedReplayBuffer` for the store
    options (``preset``, ``chunk_len``, ``cache_bytes``, ``tier``, ``frame_dedup``,
    ``threads``, ``small_arrays``; keyword-only) and
    :mod:`sb3_integration.compat` for ``dtypes``, ``normalize_images``,
    ``compression_kwargs``, ``decompression_kwargs`` and ``output_dtype``.

    Examples
    --------
    >>> from gymnasium import spaces
    >>> buf = CompressedReplayBuffer(1000, spaces.Box(0, 255, (4, 84, 84), np.uint8),
    ...                              spaces.Discrete(6), "cpu", compression_method="zstd-3",
    ...                              dtypes=find_buffer_dtypes((4, 84, 84)))
    >>> buf.compression_method, int(buf.flatten_len), buf.normalize_images
    ('zstd/-3', 28224, False)
    """


class CompressedDictReplayBuffer(_ReplayOptions, _replay.CompressedDictReplayBuffer):
    """SB3's ``DictReplayBuffer``, compressed, taking sb3-extra-buffers' arguments too.

    Arguments as :class:`CompressedReplayBuffer`.

    Examples
    --------
    >>> from gymnasium import spaces
    >>> space = spaces.Dict({"image": spaces.Box(0, 255, (2, 2), np.uint8),
    ...                      "vector": spaces.Box(0, 255, (3,), np.uint8)})
    >>> buf = CompressedDictReplayBuffer(6, space, spaces.Discrete(2), "cpu", n_envs=2,
    ...                                  compression_method="rle")
    >>> int(buf.flatten_configs["image"]["shape"])
    4
    """


class CompressedRolloutBuffer(_RolloutOptions, _rollout.CompressedRolloutBuffer):
    """SB3's ``RolloutBuffer``, compressed, taking sb3-extra-buffers' arguments too.

    See :class:`sb3_integration.rollout.CompressedRolloutBuffer` (``chunk_len``,
    ``frame_dedup``, ``threads``; ``compression_method`` default ``"none"``: frames
    are stored once, uncompressed) and :mod:`sb3_integration.compat` for the rest.
    sb3-extra-buffers' rollout buffers take no ``output_dtype``; neither do these.

    Examples
    --------
    >>> from gymnasium import spaces
    >>> buf = CompressedRolloutBuffer(128, spaces.Box(0, 255, (4, 84, 84), np.uint8),
    ...                               spaces.Discrete(6), "cpu", n_envs=8, compression_method="rle-jit")
    >>> buf.compression_method, buf.dtypes["runs_type"]  # names come back canonical
    ('rle', <class 'numpy.uint16'>)
    """


class CompressedDictRolloutBuffer(_RolloutOptions, _rollout.CompressedDictRolloutBuffer):
    """SB3's ``DictRolloutBuffer``, compressed, taking sb3-extra-buffers' arguments too.

    Arguments as :class:`CompressedRolloutBuffer`.

    Examples
    --------
    >>> from gymnasium import spaces
    >>> space = spaces.Dict({"image": spaces.Box(0, 255, (2, 2), np.uint8)})
    >>> CompressedDictRolloutBuffer(4, space, spaces.Discrete(2), "cpu", normalize_images=True).normalize_images
    True
    """


# == sb3-extra-buffers' GPU buffer names ==================================================
def _gpu_options(self: Any, device: Any, buffer_device: Any, heap_bytes: int | None,
                 max_slot_bytes: int | None) -> th.device:
    for name, value in (("heap_bytes", heap_bytes), ("max_slot_bytes", max_slot_bytes)):
        if value is not None and (not isinstance(value, (int, np.integer)) or value <= 0):
            raise ValueError(f"{name} must be a positive int or None, got {value!r}")
    self.heap_bytes, self.max_slot_bytes = heap_bytes, max_slot_bytes
    from stable_baselines3.common.utils import get_device

    return th.device(buffer_device) if buffer_device is not None else get_device(device)


class GpuReplayBuffer(CompressedReplayBuffer):
    """sb3-extra-buffers' ``GpuReplayBuffer``: :class:`CompressedReplayBuffer` with chunks on a device.

    The compressed chunk bytes live in a :class:`chunkstore.DeviceTier` on
    ``buffer_device`` (default: the buffer's ``device``); decoding runs on the
    CPU (device-side decode is future work), so on CUDA each sampled chunk is
    copied to the host first. The tier grows segment by segment and recycles
    released ones, so there is no heap to size and none can fill up mid-training:
    ``heap_bytes`` and ``max_slot_bytes`` are accepted (positive ints), kept as
    attributes, and unneeded. A pickled or HDF5-loaded buffer holds its chunks in
    RAM (pass ``tier=DeviceTier(...)`` to ``load`` to keep new chunks on a device).
    The default ``compression_method`` is this package's (sb3-extra-buffers' is ``"none"``).

    Examples
    --------
    >>> from gymnasium import spaces
    >>> buf = GpuReplayBuffer(1000, spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6),
    ...                       "cpu", buffer_device="cpu", heap_bytes=1 << 30)
    >>> buf.buffer_device, buf.heap_bytes
    (device(type='cpu'), 1073741824)
    """

    def __init__(self, buffer_size: int, observation_space: spaces.Space, action_space: spaces.Space,
                 device: th.device | str = "auto", n_envs: int = 1, optimize_memory_usage: bool = False,
                 handle_timeout_termination: bool = True, dtypes: Any = None, normalize_images: bool = False,
                 compression_method: str | Codec | None = None,
                 compression_kwargs: dict[str, Any] | None = None,
                 decompression_kwargs: dict[str, Any] | None = None, output_dtype: str = "raw",
                 buffer_device: th.device | str | None = None, heap_bytes: int | None = None,
                 max_slot_bytes: int | None = None, *, tier: Any = None, **store_options: Any) -> None:
        self.buffer_device = _gpu_options(self, device, buffer_device, heap_bytes, max_slot_bytes)
        if tier is None:
            DeviceTier(self.buffer_device).close()  # fails now on an unavailable device
            tier = functools.partial(DeviceTier, self.buffer_device)
        super().__init__(buffer_size, observation_space, action_space, device, n_envs, optimize_memory_usage,
                         handle_timeout_termination, dtypes, normalize_images, compression_method,
                         compression_kwargs, decompression_kwargs, output_dtype, tier=tier, **store_options)

    def _extra_file_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        kwargs, arrays = super()._extra_file_state()
        return {**kwargs, "heap_bytes": self.heap_bytes, "max_slot_bytes": self.max_slot_bytes}, arrays


class GpuRolloutBuffer(CompressedRolloutBuffer):
    """sb3-extra-buffers' ``GpuRolloutBuffer``: :class:`CompressedRolloutBuffer` under its name.

    ``buffer_device``, ``heap_bytes`` and ``max_slot_bytes`` are accepted and kept
    as attributes. A rollout is rewritten every ``n_steps`` and read whole by
    ``get()``, so its frames stay in host memory and sampled batches go to
    ``device`` as in SB3 (keeping them on ``buffer_device`` is future work).

    Examples
    --------
    >>> from gymnasium import spaces
    >>> buf = GpuRolloutBuffer(128, spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6),
    ...                        "cpu", n_envs=8, buffer_device="cpu")
    >>> buf.buffer_device
    device(type='cpu')
    """

    def __init__(self, buffer_size: int, observation_space: spaces.Space, action_space: spaces.Space,
                 device: th.device | str = "auto", gae_lambda: float = 1, gamma: float = 0.99, n_envs: int = 1,
                 dtypes: Any = None, normalize_images: bool = False, compression_method: str | Codec | None = None,
                 compression_kwargs: dict[str, Any] | None = None,
                 decompression_kwargs: dict[str, Any] | None = None,
                 buffer_device: th.device | str | None = None, heap_bytes: int | None = None,
                 max_slot_bytes: int | None = None, **store_options: Any) -> None:
        self.buffer_device = _gpu_options(self, device, buffer_device, heap_bytes, max_slot_bytes)
        super().__init__(buffer_size, observation_space, action_space, device, gae_lambda, gamma, n_envs,
                         dtypes, normalize_images, compression_method, compression_kwargs,
                         decompression_kwargs, **store_options)
