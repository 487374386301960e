"""Pallas TPU interpret mode's canaries: tiny kernels whose exact answers are known (canaries.py runs them in
a subprocess; imports jax, so nothing else imports this module). Checked 2026-11 with jax 0.10.2 on CPU,
every one passes; they stay so that a jax upgrade that breaks one is told apart from a kernel bug.
Kernels a Pallas author meets in interpret mode that the interpreter cannot run at all (a reshaped ref,
masked multi-axis stores: backends/pallas/interpreter_patches.py) raise, and say so in their traceback.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .canary_values import DOT_SIZE, dot_operands, dot_problem, store_problem, store_values

_LANES = 128   # a TPU vreg's lanes: interpret mode accepts smaller blocks, Mosaic does not


def _call(kernel, out_shape, *args):
    return pl.pallas_call(kernel, out_shape=out_shape, interpret=pltpu.InterpretParams())(*args)


def _dot_kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)


def _store_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...].astype(o_ref.dtype)


def dot(dtype: str) -> tuple[bool, str]:
    """jnp.dot of exact `dtype` operands with float32 accumulation, in a Pallas kernel (operands padded to
    [8, 128] x [128, 128] with zeros, which add nothing)."""
    a, b = dot_operands(dtype)
    narrow = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    pa = np.zeros((8 if DOT_SIZE <= 8 else DOT_SIZE, _LANES)); pa[:DOT_SIZE, :DOT_SIZE] = a
    pb = np.zeros((_LANES, _LANES)); pb[:DOT_SIZE, :DOT_SIZE] = b
    out = _call(_dot_kernel, jax.ShapeDtypeStruct((pa.shape[0], _LANES), jnp.float32),
                jnp.asarray(pa.astype(narrow)), jnp.asarray(pb.astype(narrow)))
    return dot_problem(np.asarray(out)[:DOT_SIZE, :DOT_SIZE], a, b)


def store(dtype: str) -> tuple[bool, str]:
    """float32 values converted to `dtype` inside a kernel."""
    x = store_values(dtype, past_finite=False)
    tile = np.tile(np.resize(x, _LANES), (8, 1)).astype(np.float32)
    narrow = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    out = _call(_store_kernel, jax.ShapeDtypeStruct(tile.shape, narrow), jnp.asarray(tile))
    return store_problem(np.asarray(out).astype(np.float64)[0, :x.shape[0]], x, dtype)


#: canary name -> probe
PROBES = {
    "bf16_dot": lambda: dot("bfloat16"),
    "fp8_e4m3_dot": lambda: dot("float8_e4m3fn"),
    "bf16_store": lambda: store("bfloat16"),
    "fp8_e4m3_store": lambda: store("float8_e4m3fn"),
    "fp8_e5m2_store": lambda: store("float8_e5m2"),
}
