"""Exact array conversion between NumPy and torch, and from any array-like to NumPy.

Every dtype of the spec crosses bit for bit: float64/32/16, bfloat16 and float8_e4m3fn/e5m2 (ml_dtypes on
the NumPy side, torch.bfloat16 / float8_e4m3fn / float8_e5m2 on the torch side: neither library knows the
other's types, so they travel as their integer bit patterns and are re-viewed), int8/16/32/64, uint8 and
bool (and the unsigned words uint16/32/64 that storage kernels use). NaN payloads, -0.0, subnormals and
infinities come back as they went (tests/adapters/).

    to_torch(x, device="cpu", *, dtype=None, keep_strides=False)   NumPy -> torch, always a copy
    to_numpy(x)                                                     torch / jax / DLPack / NumPy -> NumPy
    host_view(x)                                                    the host memory of x as NumPy, no copy

`to_torch` copies, always: a kernel that writes into its input tensor (in-place ops, a cache updated in
place) can never modify the caller's array. (`np.ascontiguousarray(x)` is not a copy when `x` is already
contiguous; a wrapper built on it silently mutated the suite's inputs.)

Strides (issue 27, the suite's `strided` column hands kernels non-contiguous views, the way serving stacks
pass a column of a wider table or q/k/v split from one fused projection): by default the copy is
contiguous, which is what most kernels need and hides the strides from them. With `keep_strides=True`
the tensor is a view with the same shape and element strides as `x`, over a private copy of the memory
`x` spans, so a kernel that must be tested on strided input gets one:

    col = table[:, 2]                                # int32 view, stride 4 elements
    t = to_torch(col, keep_strides=True)             # t.stride() == (4,), t.is_contiguous() is False

torch is imported when a function needs it, never at `import kvconform.adapters`.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from kvconform.reference import dtypes

__all__ = ["ConversionError", "to_torch", "to_numpy", "host_view", "torch_dtype", "numpy_dtype",
           "describe_array", "is_torch_tensor"]

#: canonical dtype names -> torch dtype attribute names. bfloat16 and the float8 formats cross through the
#: unsigned/signed integer type of the same width (_BITS).
_TORCH_NAMES = {
    "float64": "float64", "float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8", "bool": "bool",
    "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",    # storage words (torch >= 2.3)
}
#: dtypes NumPy and torch do not share: the integer dtype of the same width their bits travel as
_BITS = {"bfloat16": ("int16", np.int16), "float8_e4m3fn": ("uint8", np.uint8), "float8_e5m2": ("uint8", np.uint8)}


class ConversionError(TypeError):
    """An array that cannot be converted exactly (an unknown dtype, memory that cannot be read); the
    message names the array as `describe_array` does."""


def _torch():
    import torch
    return torch


def is_torch_tensor(x: Any) -> bool:
    """Whether `x` is a torch.Tensor (without importing torch when nothing has)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def torch_dtype(dtype):
    """The torch dtype of a NumPy / ml_dtypes dtype or a canonical name ('bfloat16'); ConversionError for
    a dtype outside the spec's (complex, object, ...)."""
    if type(dtype).__module__ == "torch":
        return dtype   # already a torch dtype
    name = dtype if isinstance(dtype, str) else dtypes.dtype_name(dtype)
    if name not in _TORCH_NAMES:
        raise ConversionError(f"dtype {name} has no exact torch counterpart here (known: {', '.join(_TORCH_NAMES)})")
    return getattr(_torch(), _TORCH_NAMES[name])


def numpy_dtype(torch_dtype_) -> np.dtype:
    """The NumPy / ml_dtypes dtype of a torch dtype (torch.bfloat16 -> ml_dtypes bfloat16)."""
    name = str(torch_dtype_).removeprefix("torch.")
    if name in _TORCH_NAMES.values():
        return dtypes.DTYPES[name] if name in dtypes.DTYPES else np.dtype(name)
    raise ConversionError(f"torch dtype {name} has no exact NumPy counterpart here "
                          f"(known: {', '.join(_TORCH_NAMES.values())})")


def describe_array(x: Any) -> str:
    """'a torch.bfloat16 tensor on cuda:0', 'a numpy float32 array', 'a jax bfloat16 array on cpu:0': what an
    array is, in words (for protocol and conversion errors)."""
    if is_torch_tensor(x):
        return f"a {x.dtype} tensor on {x.device}"
    if isinstance(x, np.ndarray):
        return f"a numpy {dtypes.dtype_name(x.dtype)} array"
    module = type(x).__module__.split(".")[0]
    dtype = getattr(x, "dtype", None)
    where = ""
    devices = getattr(x, "devices", None)
    if callable(devices):
        try:
            where = " on " + ", ".join(sorted(str(d) for d in devices()))
        except Exception:   # a deleted or donated buffer: say what is known
            pass
    return f"a {module} {dtype if dtype is not None else type(x).__name__} array{where}"


# --- NumPy -> torch -----------------------------------------------------------------------------------

def to_torch(x, device="cpu", *, dtype=None, keep_strides: bool = False):
    """A torch tensor holding the values of `x` on `device`, always a copy (see the module docstring).

    x: a NumPy / ml_dtypes array of any dtype of the spec (or anything np.asarray takes); device: any torch
    device ("cpu", "cuda", "cuda:1", a torch.device); dtype: a torch dtype or canonical name to convert to
    after the exact transfer (e.g. torch.float32 to compute in float32 from bfloat16 pages: a widening is
    exact); keep_strides: the tensor has x's shape and element strides (a view into a private copy of the
    memory x spans) instead of being contiguous. Negative strides exist in NumPy only: with keep_strides
    they are a ConversionError (a contiguous copy is the only torch form)."""
    torch = _torch()
    device = _usable_device(torch, device)
    if is_torch_tensor(x):   # already a tensor: still a copy, on the device asked for
        t = x.detach().to(device).clone()
        return t if dtype is None else t.to(torch_dtype(dtype))
    x = np.asarray(x)
    name = dtypes.dtype_name(x.dtype)
    torch_dtype(name)   # ConversionError for a dtype outside the table, before any copy
    if keep_strides:
        t = _strided_copy(x, name, torch.device(device))
    else:
        host = np.array(x, order="C", copy=True)    # never the caller's memory, whatever x's layout
        t = _from_numpy_bits(host, name).to(device)
    return t if dtype is None else t.to(torch_dtype(dtype))


def _usable_device(torch, device):
    """`device` as a torch.device, or ConversionError in words: a name torch does not know, or CUDA asked
    for where torch has none (torch's own error is an AssertionError, "Torch not compiled with CUDA")."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ConversionError(f"to_torch: device {device!r} is not a torch device ({exc})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConversionError(f"to_torch: device {device!r}: CUDA is not available here (torch {torch.__version__}, "
                              f"built with CUDA {torch.version.cuda or 'none'}); use device='cpu'")
    return dev


def _from_numpy_bits(host: np.ndarray, name: str):
    """torch.from_numpy of `host` (shares its memory), bfloat16 / float8 through their bit patterns."""
    torch = _torch()
    if name in _BITS:
        return torch.from_numpy(host.view(_BITS[name][1])).view(getattr(torch, name))
    return torch.from_numpy(host)


def _strided_copy(x: np.ndarray, name: str, device):
    """A torch view with x's shape and element strides over a copy of the elements x spans (gaps included)."""
    torch = _torch()
    item = x.itemsize
    if any(s < 0 for s in x.strides):
        raise ConversionError(f"keep_strides: {describe_array(x)} with shape {x.shape} has negative strides "
                              f"{x.strides} (bytes), which no torch tensor can have; pass keep_strides=False")
    if any(s % item for s in x.strides):
        raise ConversionError(f"keep_strides: {describe_array(x)} has strides {x.strides} (bytes) that are not "
                              f"multiples of its item size {item}")
    steps = tuple(s // item for s in x.strides)
    span = 0 if x.size == 0 else 1 + sum((n - 1) * s for n, s in zip(x.shape, steps))
    # every element from x's first to its last, in memory order: x's own memory (its lowest address is
    # its first element, the strides being >= 0), read once and copied
    flat = np.lib.stride_tricks.as_strided(x, shape=(span,), strides=(item,), writeable=False).copy()
    base = _from_numpy_bits(flat, name).to(device)
    return torch.as_strided(base, x.shape, steps)


# --- anything -> NumPy ----------------------------------------------------------------------------------

def to_numpy(x) -> np.ndarray:
    """`x` as a NumPy / ml_dtypes array with the same dtype, shape and bits.

    x: a NumPy array (returned as is), a NumPy scalar, a torch tensor of any dtype on any device (moved to
    the host; bfloat16 and float8 through their bits; a tensor that requires grad is detached), a jax
    array (any device), or any object with `__array__`, `__array_interface__` or `__dlpack__`. A torch
    tensor on the CPU comes back as a view of its memory, not a copy. ConversionError, naming the array,
    when it cannot be converted (a meta tensor, an unknown dtype, a device buffer with no host path)."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, np.generic):
        return np.asarray(x)
    try:
        if is_torch_tensor(x):
            return _torch_to_numpy(x)
        if hasattr(x, "__array__") or hasattr(x, "__array_interface__") or hasattr(x, "__array_struct__"):
            return np.asarray(x)
        if hasattr(x, "__dlpack__"):
            return np.from_dlpack(x)
    except ConversionError:
        raise
    except Exception as exc:
        raise ConversionError(f"{describe_array(x)} could not be converted: {type(exc).__name__}: "
                              f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}") from exc
    raise ConversionError(f"{type(x).__name__} is not an array (no __array__, __array_interface__ or __dlpack__)")


def _torch_to_numpy(t) -> np.ndarray:
    torch = _torch()
    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.device.type != "cpu":
        t = t.cpu()
    name = str(t.dtype).removeprefix("torch.")
    if name in _BITS:
        return t.view(getattr(torch, _BITS[name][0])).numpy().view(dtypes.DTYPES[name])
    numpy_dtype(t.dtype)   # ConversionError for complex, the unsigned types torch barely has, ...
    return t.numpy()


def host_view(x) -> np.ndarray | None:
    """The memory of `x` as a NumPy array, without copying, when it lies in host memory; None when it
    does not (a device buffer, a scalar, an object that converts only by copying). For aliasing checks:
    `np.shares_memory(host_view(output), input)`. Bit views (bfloat16, float8) keep the same memory."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, np.generic) or x is None:
        return None
    try:
        if is_torch_tensor(x):
            torch = _torch()
            if x.device.type != "cpu" or x.layout != torch.strided:
                return None
            name = str(x.dtype).removeprefix("torch.")
            t = x.detach()
            return t.view(getattr(torch, _BITS[name][0])).numpy() if name in _BITS else t.numpy()
        if hasattr(x, "__array_interface__"):
            return np.asarray(x)
        if hasattr(x, "__dlpack__"):
            return np.from_dlpack(x)     # zero-copy for host memory; raises for a device buffer
    except Exception:   # nothing to view in host memory (a device buffer, an unsupported dtype)
        return None
    return None
