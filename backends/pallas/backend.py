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
    if name == "selective_state":
        from .recurrent.selective_state import selective_state_update_kernel
        return jax.jit(selective_state_update_kernel,
                       static_argnames=("heads_per_block", "softplus_dt", "gate", "interpret"))
    if name == "ssd_scan":
        from .recurrent.ssd_scan import ssd_scan_kernel
        return jax.jit(ssd_scan_kernel, static_argnames=("chunk", "num_chunks", "heads_per_block", "num_snapshots",
                                                         "softplus_dt", "gate", "interpret"))
    if name == "rwkv6":
        from .recurrent.rwkv6 import rwkv6_kernel
        return jax.jit(rwkv6_kernel, static_argnames=("window", "num_windows", "heads_per_block", "interpret"))
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
            "selective_state_update": OpClaims(
                dtypes=FLOAT_ACTIVATIONS, kv_dtypes=("float32",),
                layouts=("mamba1", "mamba2"),
                features=("state_indices", "padding_slots", "mamba2", "dt_bias", "dt_softplus", "skip_d",
                          "z_gate", "grouped_bc")),
            "ssd_chunked_scan": OpClaims(
                dtypes=FLOAT_ACTIVATIONS, kv_dtypes=("float32",),
                features=("state_indices", "padding_slots", "initial_states", "snapshots", "dt_bias",
                          "dt_softplus", "skip_d", "z_gate", "grouped_bc")),
            "rwkv6_wkv": OpClaims(
                dtypes=FLOAT_ACTIVATIONS, kv_dtypes=("float32",),
                features=("state_indices", "padding_slots", "initial_states")),
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

    # ------------------------------------------------------------------------------------------------
    def selective_state_update(self, state, x, dt, A, B, C, *, D=None, z=None, dt_bias=None, dt_softplus=False,
                               state_indices=None):
        """Same contract as reference.selective_state_update (RS-14 .. RS-16); out is float32.

        Mamba1 becomes one head of P = D channels with per-channel dt/A (see the kernel module); the batch
        is padded to a power of two with padding rows (-1), which the kernel leaves inert (RS-3)."""
        from ...reference.recurrent.args import bool_flag, optional_float
        from ...reference.recurrent.selective_state import SelectiveStateUpdate
        from ...reference.recurrent.slots import pool_input, slot_indices
        from ...reference.validation import check_shape, float_input, require
        pool = pool_input("state", state, np.ndim(state), "")
        require(pool.ndim in (3, 4), f"state must have rank 3 [num_slots, D, N] (Mamba1) or rank 4 "
                                     f"[num_slots, H, P, N] (Mamba2), got shape {pool.shape}")
        softplus_dt = bool_flag("dt_softplus", dt_softplus)
        if pool.ndim == 3:
            _, dim, n = pool.shape
            xa = float_input("x", x, 2, "[B, D]")
            batch = xa.shape[0]
            for name, arr, shape, lay in (("x", xa, (batch, dim), "[B, D]"), ("dt", dt, (batch, dim), "[B, D]"),
                                          ("A", A, (dim, n), "[D, N]"), ("B", B, (batch, n), "[B, N]"),
                                          ("C", C, (batch, n), "[B, N]")):
                check_shape(name, float_input(name, arr, len(shape), lay), shape, lay)
            Da = optional_float("D", D, (dim,), "[D]")
            za = optional_float("z", z, (batch, dim), "[B, D]")
            bias = optional_float("dt_bias", dt_bias, (dim,), "[D]")
            heads, p, groups = 1, dim, 1
            x3 = xa[:, None]                                             # [B, 1, D]
            dt3 = float_input("dt", dt)[:, None]                         # [B, 1, D]: per channel
            A3 = float_input("A", A)[None]                               # [1, D, N]
            B3, C3 = float_input("B", B)[:, None], float_input("C", C)[:, None]
            shape2 = (1, dim)
            z3 = None if za is None else za[:, None]
        else:
            _, heads, p, n = pool.shape
            xa = float_input("x", x, 3, "[B, H, P]")
            batch = xa.shape[0]
            check_shape("x", xa, (batch, heads, p), "[B, H, P]")
            dta = float_input("dt", dt, 2, "[B, H]")
            check_shape("dt", dta, (batch, heads), "[B, H]")
            Aa = float_input("A", A, 1, "[H]")
            check_shape("A", Aa, (heads,), "[H]")
            B3 = float_input("B", B, 3, "[B, G, N]")
            groups = B3.shape[1]
            check_shape("B", B3, (batch, groups, n), "[B, G, N]")
            require(groups >= 1 and heads % groups == 0,
                    f"B must have a group count G that divides H = {heads}, got G = {groups}")
            C3 = float_input("C", C, 3, "[B, G, N]")
            check_shape("C", C3, (batch, groups, n), "[B, G, N]")
            Da = optional_float("D", D, (heads,), "[H]")
            z3 = optional_float("z", z, (batch, heads, p), "[B, H, P]")
            bias = optional_float("dt_bias", dt_bias, (heads,), "[H]")
            x3, dt3, A3 = xa, dta[:, :, None], Aa[:, None, None]          # per head, broadcast in-kernel
            shape2 = (heads, 1)
        idx = slot_indices("state_indices", state_indices, batch, pool.shape[0])
        # Head block: the largest divisor of H // G whose state rows stay within a small VMEM budget.
        per_group = heads // groups
        hb = max(d for d in range(1, per_group + 1)
                 if per_group % d == 0 and (d == 1 or d * p * n * 4 <= 2 ** 20))
        b_pad = _pow2(batch)
        f32 = np.float32

        def rows(a, fill=0.0):  # pad the batch axis with inert rows
            out = np.full((b_pad,) + a.shape[1:], fill, f32)
            out[:batch] = a
            return out

        slots = np.full(b_pad, -1, np.int32)
        slots[:batch] = idx
        zeros2 = np.zeros(shape2, f32)
        pool_k = pool if pool.dtype == np.float32 else pool.astype(np.float32)  # float64: not claimed
        pool_k = pool_k.reshape(pool.shape[0], heads, p, n)  # Mamba1: one head [num_slots, 1, D, N]
        out, new_pool = _jitted("selective_state")(
            rows(x3), rows(dt3), zeros2 if bias is None else bias.reshape(shape2).astype(f32),
            A3.astype(f32), rows(B3), rows(C3), zeros2 if Da is None else Da.reshape(shape2).astype(f32),
            rows(x3 if z3 is None else z3), pool_k, slots,
            heads_per_block=hb, softplus_dt=softplus_dt, gate=z3 is not None, interpret=interpret_params())
        out = np.asarray(out)[:batch]
        new_pool = np.asarray(new_pool).reshape(pool.shape).astype(pool.dtype)
        return SelectiveStateUpdate(out[:, 0] if pool.ndim == 3 else out, new_pool)

    def ssd_chunked_scan(self, state, x, dt, A, B, C, cu_seqlens, *, chunk_size=64, state_indices=None,
                         has_initial_state=None, D=None, z=None, dt_bias=None, dt_softplus=False, num_snapshots=0):
        """Same contract as reference.ssd_chunked_scan (RS-17 .. RS-19); out is float32.

        chunk_size is a hint (RS-18): the kernel uses Q = its power-of-two ceiling clamped to [8, 64] (one
        sublane tile at least, VMEM-sized at most). Sequences are padded to a power of two with padding
        entries (length 0, slot -1); token arrays go head-major and get Q zero rows so every chunk window
        DMA is in bounds; the chunk-major output is unpacked here."""
        from ...reference.recurrent.args import bool_flag, optional_float
        from ...reference.recurrent.slots import initial_flags, pool_input, slot_indices
        from ...reference.recurrent.ssd_scan import SSDScan
        from ...reference.recurrent.varlen import cu_seqlens_input
        from ...reference.validation import check_shape, float_input, int_scalar, require
        pool = pool_input("state", state, 4, "[num_slots, H, P, N]")
        num_slots, heads, p, n = pool.shape
        xa = float_input("x", x, 3, "[T, H, P]")
        tokens = xa.shape[0]
        check_shape("x", xa, (tokens, heads, p), "[T, H, P]")
        dta = float_input("dt", dt, 2, "[T, H]")
        check_shape("dt", dta, (tokens, heads), "[T, H]")
        Aa = float_input("A", A, 1, "[H]")
        check_shape("A", Aa, (heads,), "[H]")
        Ba = float_input("B", B, 3, "[T, G, N]")
        groups = Ba.shape[1]
        check_shape("B", Ba, (tokens, groups, n), "[T, G, N]")
        require(groups >= 1 and heads % groups == 0,
                f"B must have a group count G that divides H = {heads}, got G = {groups}")
        Ca = float_input("C", C, 3, "[T, G, N]")
        check_shape("C", Ca, (tokens, groups, n), "[T, G, N]")
        cu = cu_seqlens_input(cu_seqlens, tokens)
        seqs = cu.shape[0] - 1
        chunk = int_scalar("chunk_size", chunk_size, minimum=1)
        k_snap = int_scalar("num_snapshots", num_snapshots, minimum=0)
        idx = slot_indices("state_indices", state_indices, seqs, num_slots)
        from_state = initial_flags("has_initial_state", has_initial_state, seqs)
        Da = optional_float("D", D, (heads,), "[H]")
        za = optional_float("z", z, (tokens, heads, p), "[T, H, P]")
        bias = optional_float("dt_bias", dt_bias, (heads,), "[H]")
        softplus_dt = bool_flag("dt_softplus", dt_softplus)

        Q = min(max(_pow2(chunk), 8), 64)
        lengths = np.diff(cu)
        nc = _pow2(-(-int(lengths.max(initial=0)) // Q))
        s_pad, t_pad = _pow2(max(seqs, 1)), _pow2(tokens + Q)
        per_group = heads // groups
        hb = max(d for d in range(1, per_group + 1)
                 if per_group % d == 0 and (d == 1 or d * (p * n + Q * Q + 2 * Q * p) * 4 <= 2 ** 20))
        f32 = np.float32

        def head_major(a):  # [T, H, ...] -> [H, Tp, ...] with zero rows past T
            out = np.zeros((a.shape[1], t_pad) + a.shape[2:], f32)
            out[:, :tokens] = np.swapaxes(a, 0, 1)
            return out

        cu_k = np.full(s_pad + 1, tokens, np.int32)
        cu_k[:seqs + 1] = cu
        slots = np.full(s_pad, -1, np.int32)
        slots[:seqs] = idx
        init = np.zeros(s_pad, np.int32)
        init[:seqs] = from_state
        col = lambda a: (np.zeros(heads) if a is None else a).astype(f32)[:, None]  # noqa: E731
        pool_k = pool if pool.dtype == np.float32 else pool.astype(np.float32)  # float64: not claimed
        x_k = head_major(xa)
        result = _jitted("ssd_scan")(
            x_k, head_major(dta), head_major(Ba), head_major(Ca), x_k if za is None else head_major(za),
            Aa.astype(f32)[:, None], col(bias), col(Da), pool_k, cu_k, slots, init,
            chunk=Q, num_chunks=nc, heads_per_block=hb, num_snapshots=k_snap, softplus_dt=softplus_dt,
            gate=za is not None, interpret=interpret_params())
        # chunk-major [S*nc, H, Q, P] -> per sequence [S, nc*Q, H, P] -> packed tokens
        per_seq = np.asarray(result[0]).reshape(s_pad, nc, heads, Q, p).transpose(0, 1, 3, 2, 4)
        per_seq = per_seq.reshape(s_pad, nc * Q, heads, p)
        seq_of = np.repeat(np.arange(seqs), lengths)
        out = per_seq[seq_of, np.arange(tokens) - cu[seq_of]]
        new_pool = np.asarray(result[1]).astype(pool.dtype)
        if k_snap:
            snaps = np.asarray(result[2])[:seqs].astype(pool.dtype)
        else:
            snaps = np.zeros((seqs, 0, heads, p, n), pool.dtype)
        return SSDScan(out, new_pool, snaps)

    def rwkv6_wkv(self, r, k, v, w, u, state, cu_seqlens, *, state_indices=None, has_initial_state=None):
        """Same contract as reference.rwkv6_wkv (RS-20); out is float32.

        Token windows of Q = the power-of-two ceiling of the longest sequence, clamped to [8, 64];
        sequences padded to a power of two with padding entries; token arrays get Q zero rows so every
        window DMA is in bounds; the window-major output is unpacked here."""
        from ...reference.recurrent.rwkv6 import WKV6
        from ...reference.recurrent.slots import initial_flags, pool_input, slot_indices
        from ...reference.recurrent.varlen import cu_seqlens_input
        from ...reference.validation import check_shape, float_input
        pool = pool_input("state", state, 4, "[num_slots, H, K, V]")
        num_slots, heads, dk, dv = pool.shape
        ra = float_input("r", r, 3, "[T, H, K]")
        tokens = ra.shape[0]
        check_shape("r", ra, (tokens, heads, dk), "[T, H, K]")
        ka = float_input("k", k, 3, "[T, H, K]")
        check_shape("k", ka, (tokens, heads, dk), "[T, H, K]")
        wa = float_input("w", w, 3, "[T, H, K]")
        check_shape("w", wa, (tokens, heads, dk), "[T, H, K]")
        va = float_input("v", v, 3, "[T, H, V]")
        check_shape("v", va, (tokens, heads, dv), "[T, H, V]")
        ua = float_input("u", u, 2, "[H, K]")
        check_shape("u", ua, (heads, dk), "[H, K]")
        cu = cu_seqlens_input(cu_seqlens, tokens)
        seqs = cu.shape[0] - 1
        idx = slot_indices("state_indices", state_indices, seqs, num_slots)
        from_state = initial_flags("has_initial_state", has_initial_state, seqs)

        lengths = np.diff(cu)
        max_len = int(lengths.max(initial=0))
        Q = min(_pow2(max_len, 8), 64)
        nc = _pow2(-(-max_len // Q))
        s_pad, t_pad = _pow2(max(seqs, 1)), _pow2(tokens + Q)
        hb = max(d for d in range(1, heads + 1) if heads % d == 0 and (d == 1 or d * dk * dv * 4 <= 2 ** 20))
        f32 = np.float32

        def padded(a):  # [T, H, ...] with zero rows past T
            out = np.zeros((t_pad,) + a.shape[1:], f32)
            out[:tokens] = a
            return out

        cu_k = np.full(s_pad + 1, tokens, np.int32)
        cu_k[:seqs + 1] = cu
        slots = np.full(s_pad, -1, np.int32)
        slots[:seqs] = idx
        init = np.zeros(s_pad, np.int32)
        init[:seqs] = from_state
        pool_k = pool if pool.dtype == np.float32 else pool.astype(np.float32)  # float64: not claimed
        out_k, new_pool = _jitted("rwkv6")(padded(ra), padded(ka), padded(va), padded(wa), ua.astype(f32), pool_k,
                                           cu_k, slots, init, window=Q, num_windows=nc, heads_per_block=hb,
                                           interpret=interpret_params())
        per_seq = np.asarray(out_k).reshape(s_pad, nc * Q, heads, dv)
        seq_of = np.repeat(np.arange(seqs), lengths)
        out = per_seq[seq_of, np.arange(tokens) - cu[seq_of]]
        return WKV6(out, np.asarray(new_pool).astype(pool.dtype))
