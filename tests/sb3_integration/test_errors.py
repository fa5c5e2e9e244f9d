"""The error classes, and add()'s conversions against SB3's numpy assignment as the model.

SB3 stores every ``add()`` argument with ``row[...] = np.array(value)``. The property
tests draw arrays of random shapes, dtypes and values and hold ours to that model:
where numpy's assignment raises, ours raises an instance of the same type containing
its message; where it succeeds, ours stores the same bytes (``sb3_row``: always;
``coerce_obs``: unless the values would change, then ``DataLossError``).
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sb3_integration.buffers.observations import coerce_obs
from sb3_integration.buffers.sb3_checks import sb3_row
from sb3_integration.errors import (
    ArgumentError,
    ArgumentKeyError,
    ArgumentTypeError,
    BufferUsageError,
    DataLossError,
    SpaceMismatchError,
    UsageValueError,
    usage_error,
)

DTYPES = [np.dtype(t) for t in (np.bool_, np.uint8, np.int8, np.uint16, np.int32, np.int64, np.uint64,
                                np.float16, np.float32, np.float64)]


def test_usage_error_keeps_sb3_type_and_message():
    err = usage_error(ValueError("could not broadcast"), "obs: expected (1, 4)")
    assert type(err) is UsageValueError and str(err) == "could not broadcast [obs: expected (1, 4)]"
    err = usage_error(KeyError("img"), "obs lacks 'img'", argument=True)
    assert isinstance(err, KeyError) and isinstance(err, ValueError) and type(err) is ArgumentKeyError
    assert str(KeyError("img")) in str(err)  # SB3's str() of a KeyError is the quoted key
    err = usage_error(TypeError("float() argument"), "reward", argument=True)
    assert isinstance(err, TypeError) and isinstance(err, ValueError) and isinstance(err, BufferUsageError)
    axis = np.exceptions.AxisError(3, 2)  # a numpy subclass keeps its exact type and message
    message = str(axis)
    assert usage_error(axis, "hint") is axis and type(axis) is np.exceptions.AxisError and message in str(axis)
    zero = ZeroDivisionError("integer division or modulo by zero")
    assert usage_error(zero, "n_envs must be >= 1") is zero and str(zero).endswith("[n_envs must be >= 1]")
    assert str(SpaceMismatchError("", "only ours")) == "only ours"


@pytest.mark.parametrize("err", [UsageValueError("sb3", "ours"), ArgumentKeyError("'k'", "ours"),
                                 SpaceMismatchError("sb3", "ours"), ArgumentTypeError("sb3", "")])
def test_errors_pickle(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err) and back.hint == err.hint


def numpy_model(value, shape, dtype):
    """SB3's ``self.x[self.pos] = np.array(value)``: the stored row, or the exception."""
    row = np.zeros((1, *shape), dtype)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            row[0] = np.array(value)
    except Exception as e:
        return None, e
    return row[0], None


def values(draw, target_shape):
    """An array whose shape is the target's, a broadcastable one, or an unrelated one."""
    kind = draw(st.sampled_from(["same", "broadcast", "lead1", "other"]))
    if kind == "same":
        shape = target_shape
    elif kind == "broadcast":
        shape = tuple(draw(st.sampled_from([1, d])) for d in target_shape)[draw(st.integers(0, len(target_shape))):]
    elif kind == "lead1":
        shape = (1, *target_shape)
    else:
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, max_side=4))
    dtype = draw(st.sampled_from(DTYPES))
    return draw(hnp.arrays(dtype, shape, elements=hnp.from_dtype(dtype, allow_nan=True, allow_infinity=True)))


@st.composite
def cases(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=4))
    return values(draw, shape), shape, draw(st.sampled_from(DTYPES))


@settings(max_examples=400, deadline=None)
@given(cases())
def test_sb3_row_is_numpys_assignment(case):
    value, shape, dtype = case
    want, error = numpy_model(value, shape, dtype)
    if error is not None:
        with pytest.raises(type(error)) as got:
            sb3_row(value, shape, dtype, "reward")
        assert str(error) in str(got.value) and isinstance(got.value, ArgumentError)
    else:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = sb3_row(value, shape, dtype, "reward")
        assert out.dtype == want.dtype and out.shape == want.shape and out.tobytes() == want.tobytes()


@settings(max_examples=400, deadline=None)
@given(cases())
def test_coerce_obs_is_numpys_assignment_or_refuses_a_change(case):
    value, shape, dtype = case
    want, error = numpy_model(value, shape, dtype)
    if error is not None:
        with pytest.raises(type(error)) as got:
            coerce_obs(value, shape, dtype, "obs")
        assert str(error) in str(got.value)
        return
    try:
        out = coerce_obs(value, shape, dtype, "obs")
    except DataLossError:  # refused: SB3 would repeat values (broadcast) or change them (cast)
        same_size = value.size == want.size
        with np.errstate(all="ignore"):
            exact = same_size and np.array_equal(want.reshape(-1).astype(value.dtype), value.reshape(-1),
                                                 equal_nan=value.dtype.kind == "f")
        float_rounding = same_size and value.dtype.kind == dtype.kind == "f"
        assert not exact and not float_rounding, f"refused a lossless {value.dtype} -> {dtype} of {value!r}"
        return
    assert out.dtype == want.dtype and out.shape == want.shape and out.tobytes() == want.tobytes()
    assert value.size == want.size  # never a broadcast
