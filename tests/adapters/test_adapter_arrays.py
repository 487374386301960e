"""kvconform.adapters.arrays: NumPy <-> torch is exact for every dtype of the spec (bit patterns and values),
always copies, keeps strides when asked, and importing the package does not import torch."""
from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from kvconform.adapters import ConversionError, host_view, numpy_dtype, to_numpy, to_torch, torch_dtype
from kvconform.reference import dtypes

torch = pytest.importorskip("torch")

#: every dtype of the spec: the float formats and int8 (reference/dtypes.py) and the metadata dtypes
SPEC_DTYPES = [*dtypes.DTYPES.values(), np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint8), np.dtype(bool)]
TORCH_OF = {"float64": "float64", "float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
            "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2", "int8": "int8", "int32": "int32",
            "int64": "int64", "uint8": "uint8", "bool": "bool"}


def _special_bits(dtype: np.dtype) -> np.ndarray:
    """Every bit pattern of a dtype up to 16 bits; for wider floats -0.0, the smallest subnormal, the largest
    finite value, +-inf, quiet and signalling NaNs with payloads, and random patterns."""
    if dtype == np.dtype(bool):
        return np.array([True, False, True])
    if dtype.itemsize <= 2:
        return np.arange(2 ** (8 * dtype.itemsize), dtype=f"u{dtype.itemsize}").view(dtype)
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    uint = np.dtype(f"u{dtype.itemsize}")
    rng = np.random.default_rng(0)
    random = rng.integers(0, np.iinfo(uint).max, size=64, dtype=uint, endpoint=True)
    if dtype.kind != "f":
        return np.concatenate([np.array([info.min, info.max, 0, -1], dtype), random.view(dtype)])
    mant = info.nmant
    exp_all = ((1 << (8 * dtype.itemsize - 1 - mant)) - 1) << mant
    sign = 1 << (8 * dtype.itemsize - 1)
    special = np.array([sign, 1, sign | 1, exp_all, sign | exp_all, exp_all | 1, exp_all | (1 << (mant - 1)) | 5,
                        sign | exp_all | 3, exp_all - 1], dtype=uint)
    return np.concatenate([special, random]).view(dtype)


@pytest.mark.parametrize("dtype", SPEC_DTYPES, ids=dtypes.dtype_name)
def test_round_trip_is_bit_exact_and_torch_holds_the_same_values(dtype):
    a = _special_bits(dtype).reshape(-1, 1)
    t = to_torch(a)
    assert t.dtype == getattr(torch, TORCH_OF[dtypes.dtype_name(dtype)])
    assert torch_dtype(dtype) == t.dtype and numpy_dtype(t.dtype) == dtype
    back = to_numpy(t)
    assert back.dtype == dtype and back.shape == a.shape and back.tobytes() == a.tobytes()
    # the torch tensor holds the values, not only the bits: torch's own float64 conversion of it agrees
    # with ml_dtypes' (a bfloat16 array re-viewed as float16 would round trip and still be wrong)
    if dtype.kind == "f" or dtype in (dtypes.BFLOAT16, dtypes.FLOAT8_E4M3, dtypes.FLOAT8_E5M2):
        with np.errstate(invalid="ignore"):
            ours, theirs = t.to(torch.float64).numpy(), a.astype(np.float64)
        assert np.array_equal(ours, theirs, equal_nan=True)
        assert np.array_equal(np.signbit(ours), np.signbit(theirs))
    else:
        assert np.array_equal(t.to(torch.int64).numpy(), a.astype(np.int64))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float16"])
def test_tensors_made_by_torch_convert_to_the_same_values(name):
    values = torch.tensor([1.0, -0.0, 0.5, -448.0, float("inf"), float("nan")])
    if name == "float8_e4m3fn":
        values = values[:4]     # no infinity in e4m3fn
    t = values.to(getattr(torch, name))
    a = to_numpy(t)
    assert a.dtype == dtypes.DTYPES[name]
    assert np.array_equal(a.astype(np.float64), t.to(torch.float64).numpy(), equal_nan=True)


def test_inputs_are_copied_even_when_already_contiguous():
    """A kernel writing into its input tensor must not write the caller's array (np.ascontiguousarray
    returns the caller's own array when it is contiguous: a wrapper built on it mutated the suite's input)."""
    for a in (np.arange(12, dtype=np.float32).reshape(3, 4), np.zeros(5, ml_dtypes.bfloat16),
              np.arange(24, dtype=np.int32).reshape(4, 6)[:, 1]):
        before = a.copy()
        for keep in (False, True):
            t = to_torch(a, keep_strides=keep)
            assert not np.shares_memory(host_view(t), a)
            t.add_(1) if t.dtype != torch.bfloat16 else t.fill_(3.0)
            assert a.tobytes() == before.tobytes()
    t = torch.arange(3)
    assert to_torch(t).data_ptr() != t.data_ptr()        # a tensor is copied as well


def test_keep_strides_gives_a_view_with_the_same_strides():
    """issue 27: a column of a wider table (speculative decoding's slot indices), q/k/v split from one fused
    projection, a transposed cache: the tensor has the view's strides over a private copy."""
    table = np.arange(40, dtype=np.int32).reshape(8, 5)
    qkv = np.random.default_rng(1).standard_normal((6, 3 * 4, 8)).astype(ml_dtypes.bfloat16)
    conv = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4).transpose(0, 2, 1)   # vLLM's SD pool seen as DS
    for view in (table[:, 2], table[1:7:2, 1:], qkv[:, 4:8], conv, np.broadcast_to(table[0], (3, 5)),
                 table[:0, 1]):
        t = to_torch(view, keep_strides=True)
        assert t.shape == view.shape
        assert t.stride() == tuple(s // view.itemsize for s in view.strides)
        assert t.is_contiguous() == view.flags.c_contiguous
        assert to_numpy(t).tobytes() == view.tobytes()        # the values, read through the strides
        dense = to_torch(view)
        assert dense.is_contiguous() and to_numpy(dense).tobytes() == view.tobytes()


def test_keep_strides_refuses_what_torch_cannot_express():
    a = np.arange(6, dtype=np.float32)
    with pytest.raises(ConversionError, match="negative strides"):
        to_torch(a[::-1], keep_strides=True)
    assert to_torch(a[::-1]).tolist() == a[::-1].tolist()       # contiguous copy: always possible
    with pytest.raises(ConversionError, match="no exact torch counterpart"):
        to_torch(np.zeros(2, np.complex64))


def test_device_argument_and_tensors_off_the_host():
    """CPU here (this machine has no GPU); a tensor that is not in host memory goes through .cpu() (the meta
    device stands for one: it is not host memory, and it cannot be read, which must be said)."""
    a = np.arange(4, dtype=np.float16)
    assert to_torch(a, device=torch.device("cpu")).device.type == "cpu"
    assert to_torch(a, "cpu", dtype=torch.float32).dtype == torch.float32
    assert to_torch(a.astype(ml_dtypes.bfloat16), dtype="float32").tolist() == [0.0, 1.0, 2.0, 3.0]
    assert host_view(torch.empty(2, device="meta")) is None
    with pytest.raises(ConversionError, match="a torch.float32 tensor on meta could not be converted"):
        to_numpy(torch.empty(2, device="meta"))


def test_array_likes_without_torch():
    a = np.arange(6, dtype=np.int32)

    class Exported:
        def __init__(self, arr):
            self.__array_interface__ = arr.__array_interface__

    assert np.shares_memory(to_numpy(Exported(a)), a) and np.shares_memory(host_view(Exported(a)), a)
    assert to_numpy(np.int32(3)).shape == ()
    with pytest.raises(ConversionError, match="is not an array"):
        to_numpy([1, 2])


def test_importing_the_adapters_does_not_import_torch():
    code = "import sys, kvconform, kvconform.adapters; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr
