"""sb3-extra-buffers' constructor arguments, translated once for every buffer.

Every compressed buffer takes sb3-extra-buffers 0.5's arguments (the replay and
rollout buffers in its positional order, n-step and HER as keywords), so that
migrating is one import line. :func:`parse_extra_buffers_args` checks and
normalises them; :func:`describe` sets the attributes sb3-extra-buffers users
print; :func:`convert_samples` applies what changes samples.

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
    ``none``, and chunkstore's own. ``igzip`` without python-isal falls back to
    ``gzip`` at the same level with one :class:`CodecFallbackWarning`, as
    sb3-extra-buffers does.
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
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.preprocessing import get_obs_shape

import chunkstore
from chunkstore import Codec, MissingBackendError, get_codec

__all__ = [
    "EXTRA_BUFFERS_ARGS",
    "CodecFallbackWarning",
    "ExtraBuffersArgs",
    "convert_samples",
    "describe",
    "parse_extra_buffers_args",
    "resolve_compression_method",
]

#: sb3-extra-buffers' constructor arguments (every buffer takes them)
EXTRA_BUFFERS_ARGS = ("dtypes", "normalize_images", "compression_method", "compression_kwargs",
                      "decompression_kwargs", "output_dtype")


class CodecFallbackWarning(UserWarning):
    """A codec's optional backend is missing and a compatible codec is used instead."""


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
                      "(the same DEFLATE data; pip install 'chunkstore-rl[isal]' for igzip)",
                      CodecFallbackWarning, stacklevel=5)
        return fallback
    return name


def _normalise_dtypes(dtypes: Any) -> dict[str, Any]:
    if dtypes is None:
        return {"elem_type": np.uint8, "runs_type": np.uint16}
    if isinstance(dtypes, dict):
        return dtypes
    if _as_numpy_dtype(dtypes) is None:  # sb3-extra-buffers fails on it too (np.dtype of it)
        raise TypeError(f"dtypes must be a dtype or a dict of them (elem_type, runs_type), got {dtypes!r}"
                        + (" (compression_method comes after dtypes and normalize_images)"
                           if isinstance(dtypes, str) else ""))
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


@dataclass(frozen=True)
class ExtraBuffersArgs:
    """sb3-extra-buffers' arguments, checked and normalised (see the module docstring)."""

    dtypes: dict[str, Any]
    normalize_images: bool
    compression_method: str | Codec | None  # the codec to build with; None: the buffer's default
    compression_kwargs: dict[str, Any]
    decompression_kwargs: dict[str, Any]
    output_dtype: th.dtype | None
    dtypes_given: bool

    def saved(self) -> dict[str, Any]:
        """The informational options as constructor keywords for a saved file (JSON values)."""
        defaults = _normalise_dtypes(None)
        return {
            "normalize_images": self.normalize_images,
            "output_dtype": "raw" if self.output_dtype is None else "float",
            "dtypes": None if self.dtypes == defaults else _plain(self.dtypes),
            "compression_kwargs": None if self.compression_kwargs == self.dtypes else _plain(self.compression_kwargs),
            "decompression_kwargs": None if self.decompression_kwargs == self.dtypes
            else _plain(self.decompression_kwargs),
        }


def parse_extra_buffers_args(observation_space: spaces.Space, *, dtypes: Any = None,
                             normalize_images: bool = False, compression_method: str | Codec | None = None,
                             compression_kwargs: dict[str, Any] | None = None,
                             decompression_kwargs: dict[str, Any] | None = None,
                             output_dtype: str = "raw") -> ExtraBuffersArgs:
    """Check sb3-extra-buffers' arguments; the one translation every buffer's constructor calls.

    Raises
    ------
    TypeError
        ``normalize_images`` not a bool, ``dtypes`` not a dtype or a dict, unknown
        ``*compression_kwargs`` keys.
    ValueError
        ``output_dtype`` not ``"raw"`` or ``"float"``; an unknown codec name
        (:class:`chunkstore.CodecConfigError`).
    """
    if not isinstance(normalize_images, (bool, np.bool_)):
        raise TypeError(f"normalize_images must be a bool, got {normalize_images!r}")
    if output_dtype not in ("raw", "float"):
        raise ValueError(f"output_dtype must be 'raw' or 'float', got {output_dtype!r}")
    method = resolve_compression_method(compression_method, compression_kwargs)
    norm = _normalise_dtypes(dtypes)
    decompression = _check_kwargs(decompression_kwargs, _DECOMPRESSION_KWARGS, "decompression_kwargs")
    args = ExtraBuffersArgs(
        dtypes=norm, normalize_images=bool(normalize_images), compression_method=method,
        compression_kwargs=dict(compression_kwargs) if compression_kwargs else dict(norm),
        decompression_kwargs=dict(decompression) or dict(norm),
        output_dtype=th.float32 if output_dtype == "float" else None, dtypes_given=dtypes is not None,
    )
    if args.dtypes_given:
        _warn_elem_type(args, observation_space)
    return args


def _warn_elem_type(args: ExtraBuffersArgs, space: spaces.Space) -> None:
    elem = _as_numpy_dtype(args.dtypes.get("elem_type"))
    subs = space.spaces.values() if isinstance(space, spaces.Dict) else [space]
    differ = sorted({str(np.dtype(s.dtype)) for s in subs if elem is not None and np.dtype(s.dtype) != elem})
    if differ:
        warnings.warn(f"dtypes elem_type {elem} is not the observation dtype ({', '.join(differ)}): "
                      "observations are stored losslessly in the space's dtype and sampled in it "
                      "(sb3-extra-buffers would clip and cast them to elem_type)", UserWarning, stacklevel=5)


def describe(buf: Any, args: ExtraBuffersArgs, space: spaces.Space) -> None:
    """Set the attributes sb3-extra-buffers users print on ``buf``.

    ``dtypes``, ``normalize_images``, ``compression_kwargs``, ``decompression_kwargs``,
    ``output_dtype``, ``version``, and ``flatten_len`` / ``flatten_config`` (non-Dict
    spaces) or ``flatten_configs`` (Dict spaces).
    """
    buf.dtypes = args.dtypes
    buf.compression_kwargs = args.compression_kwargs
    buf.decompression_kwargs = args.decompression_kwargs
    buf.normalize_images = args.normalize_images
    buf.output_dtype = args.output_dtype
    buf.version = chunkstore.__version__
    if isinstance(space, spaces.Dict):
        buf.flatten_configs = {key: {"shape": math.prod(get_obs_shape(sub)), "dtype": sub.dtype}
                               for key, sub in space.spaces.items()}
    else:
        buf.flatten_len = math.prod(get_obs_shape(space))
        buf.flatten_config = {"shape": buf.flatten_len, "dtype": space.dtype}


def extra_buffers_args_of(buf: Any) -> ExtraBuffersArgs:
    """The arguments a buffer was built with (from its attributes; defaults where it has none)."""
    dtypes = getattr(buf, "dtypes", None) or _normalise_dtypes(None)
    return ExtraBuffersArgs(
        dtypes=dtypes, normalize_images=bool(getattr(buf, "normalize_images", False)),
        compression_method=getattr(buf, "compression_method", None),
        compression_kwargs=getattr(buf, "compression_kwargs", None) or dict(dtypes),
        decompression_kwargs=getattr(buf, "decompression_kwargs", None) or dict(dtypes),
        output_dtype=getattr(buf, "output_dtype", None), dtypes_given=True,
    )


def _convert_tensor(x: th.Tensor, output_dtype: th.dtype | None, normalize: bool) -> th.Tensor:
    if output_dtype is not None:
        x = x.to(output_dtype)
    if normalize:
        x = (x if x.is_floating_point() else x.to(th.float32)) / 255.0
    return x


def convert_samples(samples: Any, *, output_dtype: th.dtype | None, normalize_images: bool) -> Any:
    """``samples`` (an SB3 named tuple) with its observations as sb3-extra-buffers returns them."""
    if output_dtype is None and not normalize_images:
        return samples

    def convert(obs: Any) -> Any:
        if isinstance(obs, dict):
            return {key: _convert_tensor(x, output_dtype, normalize_images) for key, x in obs.items()}
        return _convert_tensor(obs, output_dtype, normalize_images)

    fields = {"observations": convert(samples.observations)}
    if hasattr(samples, "next_observations"):
        fields["next_observations"] = convert(samples.next_observations)
    return samples._replace(**fields)
