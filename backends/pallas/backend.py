"""The Pallas backend adapter: claims, NumPy <-> jax conversion, shape bucketing, interpret-mode choice.

Each op takes the reference's arguments (NumPy, canonical layout), checks them with the same rules as the
reference plus what the TPU kernels need, converts to the kernel layout (combined K/V heads, head dim
padded to 128 lanes, token count padded to the block), runs the kernel and converts back. Shapes are
rounded up to powers of two before the call so that Hypothesis' many small shapes share a few compiled
kernels (padding rows, sequences, pages and slots are inert by construction).
"""
from __future__ import annotations

import functools

import numpy as np

from ..base import Availability, Backend, OpClaims

FLOAT_ACTIVATIONS = ("float32", "bfloat16", "float16")
FLOAT_KV = ("float32", "bfloat16", "float16")
QUANT_KV = ("float8_e4m3fn", "float8_e5m2", "int8")
MAX_HEAD_DIM = 256


def _pow2(n: int, minimum: int = 1) -> int:
    n = max(int(n), minimum)
    return 1 << (n - 1).bit_length()


@functools.lru_cache(maxsize=None)
def _jax_status() -> tuple[bool, str, str]:
    try:
        import jax
        from jax.experimental.pallas import tpu  # noqa: F401
    except Exception as exc:  # pragma: no cover - depends on the environment
        return False, f"jax with Pallas TPU is not importable ({type(exc).__name__}: {exc})", ""
    platform = jax.default_backend()
    if platform == "tpu":
        return True, "", f"TPU ({jax.devices()[0].device_kind})"
    return True, "", f"{platform} (Pallas TPU interpret mode)"


def interpret_params():
    """None on a TPU (compile with Mosaic), TPU interpret mode everywhere else."""
    import jax
    from jax.experimental.pallas import tpu as pltpu
    return None if jax.default_backend() == "tpu" else pltpu.InterpretParams()


@functools.lru_cache(maxsize=None)
def _jitted(name: str):
    import jax
    if name == "attention":
        from .paged_attention import ragged_paged_attention_kernel
        return jax.jit(ragged_paged_attention_kernel, static_argnames=("pages_per_seq", "cfg", "interpret"))
    if name == "write_kv":
        from .kv_write import write_kv_kernel
        return jax.jit(write_kv_kernel, static_argnames=("quantized", "interpret", "block_tokens"))
    if name == "rotate_keys":
        from .rotation import rotate_keys_kernel
        return jax.jit(rotate_keys_kernel, static_argnames=("per_block", "layout", "rotary_dim", "interpret"))
    if name == "conv1d":
        from .recurrent.conv1d import conv1d_update_kernel
        return jax.jit(conv1d_update_kernel, static_argnames=("silu", "interpret"))
    raise KeyError(name)


class PallasBackend(Backend):
    name = "pallas"
    version = "0.1"

    def availability(self) -> Availability:
        ok, reason, device = _jax_status()
        return Availability(ok=ok, reason=reason, device=device)

    def capabilities(self) -> dict[str, OpClaims]:
        return {
            "ragged_paged_attention": OpClaims(
                dtypes=FLOAT_ACTIVATIONS, kv_dtypes=FLOAT_KV + QUANT_KV, page_sizes=None, head_dims=None,
                layouts=("separate", "combined"),
                features=("sliding_window", "soft_cap", "sinks", "quantized_kv", "return_scores", "gqa",
                          "mixed_prefill_decode", "empty_sequences"),
                limits={"max_head_dim": MAX_HEAD_DIM}),
            "write_kv": OpClaims(
                dtypes=FLOAT_ACTIVATIONS, kv_dtypes=FLOAT_KV + QUANT_KV, page_sizes=None, head_dims=None,
                layouts=("separate",), features=("quantized_kv", "skip_negative_slots")),
            "rotate_keys": OpClaims(
                dtypes=FLOAT_KV, kv_dtypes=FLOAT_KV, page_sizes=None, head_dims=None,
                layouts=("half", "interleaved"),
                features=("per_token_deltas", "per_block_deltas", "partial_rotary")),
            "shift_keys": OpClaims(
                dtypes=FLOAT_KV, kv_dtypes=FLOAT_KV, page_sizes=None, head_dims=None,
                layouts=("half", "interleaved"),
                features=("per_token_deltas", "per_block_deltas", "partial_rotary", "negative_deltas")),
            "causal_conv1d_update": OpClaims(
                dtypes=FLOAT_ACTIVATIONS, kv_dtypes=("float32",), features=("state_indices", "padding_slots",
                                                                            "silu", "bias", "multi_token"),
                limits={"min_width": 2}),
        }

    # ------------------------------------------------------------------------------------------------
    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *,
                               sm_scale=None, sliding_window=None, soft_cap=None, sinks=None,
                               k_scale=None, v_scale=None, return_scores=False):
        """Same contract as reference.ragged_paged_attention; out is float32."""
        from ...reference.paged_attention import AttentionOutput, _validate
        call = _validate(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale,
                         sliding_window, soft_cap, sinks, k_scale, v_scale, return_scores)
        from . import layout
        from .paged_attention import AttentionConfig
        q_arr = np.asarray(q)
        T, Hq, D = q_arr.shape
        P, page_size, Hkv, _ = call.k_pages.shape
        S, pps = call.page_indices.shape
        if D > MAX_HEAD_DIM:
            raise ValueError(f"q head dim D={D} exceeds the Pallas kernel's max_head_dim={MAX_HEAD_DIM} "
                             f"(one KV page of every head must fit the VMEM page buffer)")
        n = call.num_seqs
        q_k, kv_k = layout.attention_inputs(q_arr, np.asarray(k_pages), np.asarray(v_pages),
                                            t_pad=_pow2(T, 8), p_pad=_pow2(P))
        s_pad, pps_pad = _pow2(S), _pow2(pps)
        lens = np.zeros(s_pad, np.int32)
        lens[:n] = call.kv_lens[:n]
        table = np.zeros((s_pad, pps_pad), np.int32)
        for i in range(n):  # unused entries may hold anything (PA-24): only the used pages travel
            used = -(-int(call.kv_lens[i]) // page_size)
            table[i, :used] = call.page_indices[i, :used]
        cu = np.full(s_pad + 1, int(call.cu_q_lens[n]), np.int32)
        cu[:n + 1] = call.cu_q_lens[:n + 1]
        meta = np.array([n, call.sliding_window or 0], np.int32)
        fparams = np.zeros(4 + Hq, np.float32)
        fparams[:4] = (call.sm_scale, call.soft_cap or 1.0, call.k_scale or 1.0, call.v_scale or 1.0)
        if call.sinks is not None:
            fparams[4:] = call.sinks
        cfg = AttentionConfig(block_q=8, kv_heads_per_block=Hkv, soft_cap=call.soft_cap is not None,
                              sinks=call.sinks is not None, quantized=call.k_scale is not None,
                              sliding_window=call.sliding_window is not None, return_scores=return_scores)
        result = _jitted("attention")(q_k, kv_k, lens, table.reshape(-1), cu, meta, fparams,
                                      pages_per_seq=pps_pad, cfg=cfg, interpret=interpret_params())
        out = np.asarray(result[0])[:T, :, :D]
        if not return_scores:
            return out
        scores = np.asarray(result[1])[:S, :pps].reshape(S, pps * page_size).astype(np.float32)
        return AttentionOutput(out, scores)

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None):
        """Same contract as reference.write_kv; returns KVPages in the storage dtype."""
        from ...reference.kv_write import KVPages
        from .validation import validate_write_kv
        k_pages, v_pages, k32, v32, slots, ks, vs = validate_write_kv(k_pages, v_pages, k, v, slot_mapping,
                                                                      k_scale, v_scale)
        n = slots.shape[0]
        n_pad = _pow2(n, 8)
        slots_pad = np.full(n_pad, -1, np.int32)
        slots_pad[:n] = slots
        kp = np.zeros((n_pad,) + k32.shape[1:], np.float32)
        vp = np.zeros_like(kp)
        kp[:n], vp[:n] = k32, v32
        scales = np.array([ks or 1.0, vs or 1.0], np.float32)
        new_k, new_v = _jitted("write_kv")(k_pages, v_pages, kp, vp, slots_pad, scales,
                                           quantized=ks is not None, interpret=interpret_params())
        return KVPages(np.asarray(new_k), np.asarray(new_v))

    def rotate_keys(self, k_pages, rotated_block_indices, rotation_deltas, trig_lut, *, layout="half",
                    rotary_dim=None):
        """Same contract as reference.rotate_keys; returns the pool in its storage dtype (RO-1 .. RO-9)."""
        from ...reference import rotation as ref
        from ...reference.validation import check_index_range, float_input, require
        layout, _, rotary_dim, idx, rows = ref._check_blocks(k_pages, rotated_block_indices, rotation_deltas,
                                                             "rotation_deltas", layout, rotary_dim)
        lut = float_input("trig_lut", trig_lut, 2, "[rows, rotary_dim]")
        require(lut.shape[0] >= 1, f"trig_lut must have at least one row, got shape {tuple(lut.shape)}")
        require(lut.shape[1] == rotary_dim,
                f"trig_lut must have width rotary_dim = {rotary_dim} ([cos | sin] halves), got {lut.shape[1]}")
        check_index_range("rotation_deltas", rows, 0, lut.shape[0], f" (trig_lut has {lut.shape[0]} rows)")
        return self._rotate(k_pages, idx, rows, lut, layout, rotary_dim)

    def shift_keys(self, k_pages, rotated_block_indices, position_deltas, *, theta, layout="half",
                   rotary_dim=None):
        """Same contract as reference.shift_keys (RO-10): one LUT row per distinct delta, with the pinned
        angle fl64(delta * w_j) (RO-3), then the LUT kernel."""
        from ...reference import rotation as ref
        layout, _, rotary_dim, idx, deltas = ref._check_blocks(k_pages, rotated_block_indices, position_deltas,
                                                               "position_deltas", layout, rotary_dim)
        ref._int32_values("position_deltas", deltas)
        inv_freq = ref.inverse_frequencies(rotary_dim, theta=theta)
        distinct, rows = np.unique(deltas, return_inverse=True)
        angle = distinct.astype(np.float64)[:, None] * inv_freq
        lut = np.concatenate([np.cos(angle), np.sin(angle)], axis=1)
        return self._rotate(k_pages, idx, rows.reshape(deltas.shape), lut, layout, rotary_dim)

    def _rotate(self, k_pages, idx, rows, lut, layout, rotary_dim):
        pages = np.asarray(k_pages)
        if pages.dtype == np.float64:  # not claimed: TPU kernels store 32-bit or narrower
            pages = pages.astype(np.float32)
        if idx.shape[0] == 0:
            return pages.copy()
        # Bucket the block count (repeating the last block with delta row 0 would rotate it twice, so
        # padding entries point at an extra scratch page that is dropped afterwards).
        n = idx.shape[0]
        n_pad = _pow2(n)
        P = pages.shape[0]
        if n_pad > n:
            pages = np.concatenate([pages, np.zeros((1,) + pages.shape[1:], pages.dtype)])
        ids = np.full(n_pad, P, np.int32)
        ids[:n] = idx
        w = rows.shape[1]
        d = np.zeros((n_pad, w), np.int32)
        d[:n] = rows
        out = _jitted("rotate_keys")(pages, ids, d.reshape(-1), np.asarray(lut, np.float32),
                                     per_block=w == 1, layout=layout, rotary_dim=int(rotary_dim),
                                     interpret=interpret_params())
        return np.asarray(out)[:P]

    def causal_conv1d_update(self, x, conv_state, weight, bias=None, *, activation=None, state_indices=None):
        """Same contract as reference.causal_conv1d_update (RS-10 .. RS-12); out is float32."""
        from ...reference.recurrent.conv1d import ACTIVATIONS, ConvUpdate
        from ...reference.recurrent.slots import pool_input, slot_indices
        from ...reference.validation import check_shape, float_input, require
        xa = float_input("x", x)
        require(xa.ndim in (2, 3), f"x must have rank 2 [B, C] or rank 3 [B, T, C], got shape {xa.shape}")
        single = xa.ndim == 2
        x3 = xa[:, None, :] if single else xa
        B, T, C = x3.shape
        w = float_input("weight", weight, 2, "[C, W]")
        check_shape("weight", w, (C, None), "[C, W]")
        width = w.shape[1]
        require(width >= 2, f"weight must have W >= 2 taps for the Pallas kernel (a [C, W-1] state row "
                            f"is DMA'd per slot), got shape {w.shape}")
        pool = pool_input("conv_state", conv_state, 3, "[num_slots, C, W-1]")
        check_shape("conv_state", pool, (None, C, width - 1), "[num_slots, C, W-1]")
        b = np.zeros(C)
        if bias is not None:
            b = float_input("bias", bias, 1, "[C]")
            check_shape("bias", b, (C,), "[C]")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be None or 'silu', got {activation!r}")
        idx = slot_indices("state_indices", state_indices, B, pool.shape[0])
        pool_k = pool if pool.dtype == np.float32 else pool.astype(np.float32)  # float64: not claimed
        out, new_pool = _jitted("conv1d")(x3.astype(np.float32), pool_k, w.astype(np.float32),
                                          b.astype(np.float32)[None], idx.astype(np.int32),
                                          silu=activation == "silu", interpret=interpret_params())
        out = np.asarray(out)
        new_pool = np.asarray(new_pool).astype(pool.dtype)
        return ConvUpdate(out[:, 0] if single else out, new_pool)
