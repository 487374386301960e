"""The Triton backend adapter: capability claims, validation, NumPy <-> torch, kernel selection.

Kernels live in one module per family (paged_attention, kv_write, ...); this module only converts
arguments, checks them with the reference's public `validate_*` functions (so a malformed call fails with
the oracle's own message, from the one place that states the rule), adds the backend's dtype claims,
picks launch parameters and converts results back. Ops are pure: in-place kernels run on copies.
"""
from __future__ import annotations

import numpy as np

from kvconform.backends.base import Availability, Backend, OpClaims
from kvconform.reference import dtypes
from kvconform.reference.eviction import (EvictionPlan, ScoreState, validate_accumulate_scores,
                                          validate_plan_eviction)
from kvconform.reference.kv_write import KVPages, validate_write_kv
from kvconform.reference.metadata import (validate_append_slot_mapping, validate_ragged_paged_attention_csr,
                                          validate_slot_mapping_from_arena)
from kvconform.reference.mla import validate_mla_paged_attention
from kvconform.reference.paged_attention import AttentionOutput, validate_ragged_paged_attention
from kvconform.reference.rotation import validate_rotate_keys, validate_shift_keys

from . import _runtime
from .claims import ACT_DTYPES, KV_DTYPES, claims
from .convert import metadata, to_numpy, to_torch

class TritonBackend(Backend):
    name = "triton"
    version = "0.1.0"

    #: Split-KV is used by the decode kernel when its longest sequence has at least this many keys;
    #: None = the device default. Tests set it to force a path.
    split_min_kv: int | None = None
    #: Width of the element offsets the attention and KV-write kernels compute: 64 (pools past 2**31
    #: elements). 32 exists only for the offset mutant (offset_mutant.py), which the scale profile must fail.
    offset_bits: int = 64

    def availability(self) -> Availability:
        rt = _runtime.configure()
        return Availability(ok=rt.ok, reason=rt.reason, device=rt.description, native=rt.ok and not rt.interpret)

    def capabilities(self) -> dict[str, OpClaims]:
        return claims(self._split_threshold(_runtime.configure().interpret))

    # ---------------------------------------------------------------------------------------------
    def _rt(self):
        rt = _runtime.configure()
        if not rt.ok:
            raise RuntimeError(f"triton backend unavailable: {rt.reason}")
        return rt

    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *,
                               sm_scale=None, sliding_window=None, soft_cap=None, sinks=None,
                               k_scale=None, v_scale=None, return_scores=False):
        call = validate_ragged_paged_attention(
            q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=sm_scale,
            sliding_window=sliding_window, soft_cap=soft_cap, sinks=sinks, k_scale=k_scale, v_scale=v_scale,
            return_scores=return_scores)
        rt = self._rt()
        from . import paged_attention as kern
        dev = rt.device
        out, scores = kern.ragged_paged_attention(
            to_torch(q, dev), to_torch(k_pages, dev), to_torch(v_pages, dev),
            metadata(kv_lens, dev), metadata(page_indices, dev), metadata(cu_q_lens, dev),
            call.num_seqs, return_scores=return_scores, **self._attention_options(call, rt, q, k_pages))
        out = to_numpy(out)
        if not return_scores:
            return out
        return AttentionOutput(out, to_numpy(scores))

    def ragged_paged_attention_csr(self, q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
                                   *, sm_scale=None, sliding_window=None, soft_cap=None, sinks=None,
                                   k_scale=None, v_scale=None):
        """MD-23: the attention kernels read kv_indptr/kv_indices/kv_last_page_len in place (CSR flag).
        The reference's validator also builds the equivalent block-table call; only its host-side lengths
        are used here, to pick the launch (as for the block-table op)."""
        call = validate_ragged_paged_attention_csr(
            q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale=sm_scale,
            sliding_window=sliding_window, soft_cap=soft_cap, sinks=sinks, k_scale=k_scale, v_scale=v_scale)
        rt = self._rt()
        from . import paged_attention as kern
        dev = rt.device
        out = kern.ragged_paged_attention_csr(
            to_torch(q, dev), to_torch(k_pages, dev), to_torch(v_pages, dev), metadata(qo_indptr, dev),
            metadata(kv_indptr, dev), metadata(kv_indices, dev), metadata(kv_last_page_len, dev),
            **self._attention_options(call, rt, q, k_pages))
        return to_numpy(out)

    def _attention_options(self, call, rt, q, k_pages) -> dict:
        """Kernel keywords shared by both page-table forms: options of the validated block-table `call`
        (torch scalars/tensors on the device) and the launch parameters for its lengths (the dispatch
        between the decode and prefill kernels and the split rule: paged_attention.launch_defaults)."""
        _check_dtypes(q, k_pages)
        from . import paged_attention as kern
        import torch
        dev = rt.device
        n = call.num_seqs
        q_lens = np.diff(np.asarray(call.cu_q_lens[:n + 1], dtype=np.int64))
        launch = kern.launch_defaults(q_lens, call.kv_lens[:n], k_pages.shape[2], q.shape[1] // k_pages.shape[2],
                                      q.shape[2], split_min_kv=self._split_threshold(rt.interpret),
                                      interpret=rt.interpret, sm_count=_sm_count(rt))
        sinks_t = None if call.sinks is None else torch.tensor(call.sinks, dtype=torch.float32, device=dev)
        return dict(sm_scale=call.sm_scale, sliding_window=call.sliding_window, soft_cap=call.soft_cap,
                    sinks=sinks_t, k_scale=_scale_arg(call.k_scale, dev), v_scale=_scale_arg(call.v_scale, dev),
                    out_dtype=_out_dtype(q, rt), offset_bits=self.offset_bits, interpret=rt.interpret, **launch)

    # --- paged-KV metadata (spec/metadata.md) ----------------------------------------------------
    def append_slot_mapping(self, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, page_size):
        """MD-7 on device: the four CSR arrays (any stride) -> slots int32[qo_indptr[S]]."""
        qo, _, _, _, P = validate_append_slot_mapping(qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
                                                      page_size)
        dev = self._rt().device
        from . import metadata as kern
        out = kern.append_slot_mapping(*(metadata(a, dev) for a in (qo_indptr, kv_indptr, kv_indices,
                                                                      kv_last_page_len)), P, int(qo[-1]))
        return to_numpy(out)

    def slot_mapping_from_arena(self, arena, offsets, num_seqs, page_size):
        """MD-10 on device: arena uint8[N] copied whole to the device (the packed transport's one copy)
        and viewed as int32; the kernel reads the four arrays at offsets[k] / 4 -> slots int32[T].
        Validation is the reference's (the arena checks, then MD-7's on the views it returns)."""
        views = validate_slot_mapping_from_arena(arena, offsets, num_seqs, page_size)
        qo, _, _, _, P = validate_append_slot_mapping(*views, page_size)
        import torch
        dev = self._rt().device
        from . import metadata as kern
        buf = np.asarray(arena)
        words = torch.zeros(-(-buf.shape[0] // 4) * 4, dtype=torch.uint8, device=dev)   # int32-aligned
        words[:buf.shape[0]] = to_torch(buf, dev)
        offs = torch.as_tensor(np.asarray(offsets, dtype=np.int64), device=dev)
        out = kern.slot_mapping_from_arena(words.view(torch.int32), offs, int(num_seqs), P, int(qo[-1]))
        return to_numpy(out)

    def mla_paged_attention(self, q_nope, q_pe, c_kv_pages, k_pe_pages, kv_lens, page_indices, cu_q_lens, num_seqs,
                            *, sm_scale=None, sliding_window=None, soft_cap=None, sinks=None):
        call = validate_mla_paged_attention(q_nope, q_pe, c_kv_pages, k_pe_pages, kv_lens, page_indices, cu_q_lens,
                                            num_seqs, sm_scale=sm_scale, sliding_window=sliding_window,
                                            soft_cap=soft_cap, sinks=sinks)
        rt = self._rt()
        for name, arr in (("q_nope", q_nope), ("q_pe", q_pe), ("c_kv_pages", c_kv_pages), ("k_pe_pages", k_pe_pages)):
            dn = dtypes.dtype_name(np.asarray(arr).dtype)
            if dn not in ACT_DTYPES:
                raise TypeError(f"{name} dtype {dn} is not supported by the triton backend (supported: {', '.join(ACT_DTYPES)})")
        from . import mla as kern
        import torch
        dev, a = rt.device, call.attention
        plan_np = kern.row_plan(a.kv_lens, a.cu_q_lens, a.num_seqs)
        plan = tuple(torch.from_numpy(p).to(dev) for p in plan_np)
        sinks_t = None if a.sinks is None else torch.tensor(a.sinks, dtype=torch.float32, device=dev)
        H, d_c = np.shape(q_nope)[1], np.shape(q_nope)[2]
        launch = kern.launch_defaults(plan_np[0].size, H, d_c, int(plan_np[2].max(initial=-1)) + 1,
                                      interpret=rt.interpret, sm_count=_sm_count(rt))
        out = kern.mla_paged_attention(to_torch(q_nope, dev), to_torch(q_pe, dev), to_torch(c_kv_pages, dev),
                                       to_torch(k_pe_pages, dev), metadata(page_indices, dev), plan,
                                       sm_scale=a.sm_scale, sliding_window=a.sliding_window, soft_cap=a.soft_cap,
                                       sinks=sinks_t, interpret=rt.interpret, out_dtype=_out_dtype(q_nope, rt),
                                       **launch)
        return to_numpy(out)

    def _split_threshold(self, interpret: bool) -> int:
        """Keys from which decode batches use split-KV (claimed as the limit split_kv_min_keys)."""
        if self.split_min_kv is not None:
            return self.split_min_kv
        from .attention_launch import split_threshold
        return split_threshold(interpret)

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None):
        call = validate_write_kv(k_pages, v_pages, k, v, slot_mapping, k_scale=k_scale, v_scale=v_scale)
        kn = dtypes.dtype_name(call.k_pages.dtype)
        if kn not in KV_DTYPES:
            raise TypeError(f"k_pages dtype {kn} is not supported by the triton backend")
        rt = self._rt()
        from . import kv_write as kern
        dev = rt.device
        kp, vp = to_torch(k_pages, dev, copy=True), to_torch(v_pages, dev, copy=True)
        kt, vt = to_torch(_as_f32(k), dev), to_torch(_as_f32(v), dev)
        kern.write_kv_(kp, vp, kt, vt, metadata(slot_mapping, dev), _scale_arg(call.k_scale, dev),
                       _scale_arg(call.v_scale, dev), offset_bits=self.offset_bits)
        return KVPages(to_numpy(kp), to_numpy(vp))

    def rotate_keys(self, k_pages, rotated_block_indices, rotation_deltas, trig_lut, *, layout="half",
                    rotary_dim=None):
        call = validate_rotate_keys(k_pages, rotated_block_indices, rotation_deltas, trig_lut, layout=layout,
                                    rotary_dim=rotary_dim)
        # The caller's LUT, not the validator's float64 copy: the kernel reads float16/32/64 LUTs as given.
        return self._rotate(k_pages, rotated_block_indices, rotation_deltas, call.rotary_dim, call.layout,
                            trig_lut=np.asarray(trig_lut))

    def shift_keys(self, k_pages, rotated_block_indices, position_deltas, *, theta, layout="half",
                   rotary_dim=None):
        call = validate_shift_keys(k_pages, rotated_block_indices, position_deltas, theta=theta,
                                   layout=layout, rotary_dim=rotary_dim)
        return self._rotate(k_pages, rotated_block_indices, position_deltas, call.rotary_dim, call.layout,
                            inv_freq=call.inv_freq)  # RO-3: the pinned float64 w_j

    def _rotate(self, k_pages, indices, deltas, rotary_dim, layout, *, trig_lut=None, inv_freq=None):
        name = dtypes.dtype_name(np.asarray(k_pages).dtype)
        if name not in ACT_DTYPES:
            raise TypeError(f"k_pages dtype {name} is not supported by the triton backend rotation "
                            f"(supported: {', '.join(ACT_DTYPES)})")
        rt = self._rt()
        from . import rotation as kern
        dev = rt.device
        if trig_lut is not None and dtypes.dtype_name(trig_lut.dtype) not in ("float64", "float32", "float16"):
            trig_lut = trig_lut.astype(np.float32)  # exact: bf16/fp8 values are float32 values
        kp = to_torch(k_pages, dev, copy=True)
        kern.rotate_(kp, metadata(indices, dev), metadata(deltas, dev), rotary_dim=rotary_dim, layout=layout,
                     trig_lut=None if trig_lut is None else to_torch(trig_lut, dev),
                     inv_freq=None if inv_freq is None else to_torch(inv_freq, dev))
        return to_numpy(kp)

    # --- eviction (spec/eviction.md) -------------------------------------------------------------
    def accumulate_scores(self, acc, counts, step_scores):
        """EV-4/EV-5 on device: acc float[L], counts int[L], step_scores float[L_new] -> ScoreState."""
        call = validate_accumulate_scores(acc, counts, step_scores)
        rt = self._rt()
        from . import eviction as kern
        dev = rt.device
        new_acc, new_counts = kern.accumulate_scores(_f64(acc, call.acc, dev), metadata(counts, dev),
                                                     _f64(step_scores, call.step_scores, dev))
        return ScoreState(to_numpy(new_acc), to_numpy(new_counts))

    def plan_eviction(self, block_table, acc, counts, config):
        """EV-8 .. EV-16 on device: block_table int[cdiv(L, B)], acc float[L], counts int[L] -> EvictionPlan."""
        call = validate_plan_eviction(block_table, acc, counts, config)
        config, acc64 = call.config, call.acc
        rt = self._rt()
        from . import eviction as kern
        dev = rt.device
        B = config.block_size
        full = acc64.shape[0] // B
        n_evict = max(0, full - config.max_cache_size // B)                                   # EV-9
        out = kern.plan_eviction(metadata(block_table, dev), _f64(acc, acc64, dev), metadata(counts, dev),
                                 block_size=B, first=config.start_size // B,                 # EV-8
                                 last=full - config.recent_size // B, n_evict=n_evict,
                                 norm=config.aggregation == "norm_sum")
        return EvictionPlan(*(to_numpy(t) for t in out))

    # --- recurrent states (spec/recurrent.md); validation and launches in recurrent/adapter.py ---
    def causal_conv1d_update(self, x, conv_state, weight, bias=None, *, activation=None, state_indices=None):
        """RS-10 .. RS-12: x [B, C] | [B, T, C], conv_state [num_slots, C, W-1] -> ConvUpdate (out float32)."""
        from .recurrent import adapter
        return adapter.causal_conv1d_update(self._rt().device, x, conv_state, weight, bias,
                                            activation=activation, state_indices=state_indices)

    def selective_state_update(self, state, x, dt, A, B, C, *, D=None, z=None, dt_bias=None, dt_softplus=False,
                               state_indices=None):
        """RS-14 .. RS-16 (Mamba1 rank-3 / Mamba2 rank-4 state) -> SelectiveStateUpdate (out float32)."""
        from .recurrent import adapter
        return adapter.selective_state_update(self._rt().device, state, x, dt, A, B, C, D=D, z=z,
                                              dt_bias=dt_bias, dt_softplus=dt_softplus,
                                              state_indices=state_indices)

    def ssd_chunked_scan(self, state, x, dt, A, B, C, cu_seqlens, *, chunk_size=64, state_indices=None,
                         has_initial_state=None, D=None, z=None, dt_bias=None, dt_softplus=False,
                         num_snapshots=0):
        """RS-17 .. RS-19: packed varlen Mamba2 prefill -> SSDScan (out float32, pool, snapshots)."""
        from .recurrent import adapter
        return adapter.ssd_chunked_scan(self._rt().device, state, x, dt, A, B, C, cu_seqlens,
                                        chunk_size=chunk_size, state_indices=state_indices,
                                        has_initial_state=has_initial_state, D=D, z=z, dt_bias=dt_bias,
                                        dt_softplus=dt_softplus, num_snapshots=num_snapshots)

    def rwkv6_wkv(self, r, k, v, w, u, state, cu_seqlens, *, state_indices=None, has_initial_state=None):
        """RS-20: packed varlen RWKV6 wkv, state [num_slots, H, K, V] -> WKV6 (out float32 [T, H, V], pool)."""
        from .recurrent import adapter
        return adapter.rwkv6_wkv(self._rt().device, r, k, v, w, u, state, cu_seqlens,
                                 state_indices=state_indices, has_initial_state=has_initial_state)

    def gated_delta_rule_update(self, q, k, v, g, beta, state, *, scale=None, use_qk_l2norm=False,
                                state_indices=None):
        """RS-28 .. RS-31: one token per row, state [num_slots, H, K, V] -> GatedDeltaUpdate (out float32)."""
        from .recurrent import adapter
        return adapter.gated_delta_rule_update(self._rt().device, q, k, v, g, beta, state, scale=scale,
                                               use_qk_l2norm=use_qk_l2norm, state_indices=state_indices)

    def gated_delta_rule_chunked(self, q, k, v, g, beta, state, cu_seqlens, *, chunk_size=64, scale=None,
                                 use_qk_l2norm=False, state_indices=None, has_initial_state=None):
        """RS-32, RS-33: packed varlen GDN prefill (WY chunk form) -> GatedDeltaScan (out float32, pool)."""
        from .recurrent import adapter
        return adapter.gated_delta_rule_chunked(self._rt().device, q, k, v, g, beta, state, cu_seqlens,
                                                chunk_size=chunk_size, scale=scale, use_qk_l2norm=use_qk_l2norm,
                                                state_indices=state_indices, has_initial_state=has_initial_state)


    # --- recurrent-state store (RS-21 .. RS-27): host-side plan, device-side row moves ---
    def recurrent_store_step(self, seq_slot, seq_pos, conv_pool, ssm_pool, command, *, seq=0, seq_ids=None,
                             num_tokens=0, src=0, dst=0, saved_pos=0, saved_conv=None, saved_ssm=None,
                             snapshots_conv=None, snapshots_ssm=None):
        """One store command (assign, copy, remove, keep, checkpoint, restore, rollback) -> StoreStep;
        pools float32/float64 [num_slots, ...], moved as bits on the device."""
        from .recurrent import adapter
        return adapter.recurrent_store_step(self._rt().device, seq_slot, seq_pos, conv_pool, ssm_pool, command,
                                            seq=seq, seq_ids=seq_ids, num_tokens=num_tokens, src=src, dst=dst,
                                            saved_pos=saved_pos, saved_conv=saved_conv, saved_ssm=saved_ssm,
                                            snapshots_conv=snapshots_conv, snapshots_ssm=snapshots_ssm)


def _f64(original, upcast: np.ndarray, dev):
    """A float64 tensor of the values: the caller's array itself (offset/strides kept) when it already is
    float64, else the exact float64 upcast made by validation."""
    original = np.asarray(original)
    return to_torch(original if original.dtype == np.float64 else upcast, dev)


def _check_dtypes(q, k_pages) -> None:
    qn, kn = dtypes.dtype_name(np.asarray(q).dtype), dtypes.dtype_name(np.asarray(k_pages).dtype)
    if qn not in ACT_DTYPES:
        raise TypeError(f"q dtype {qn} is not supported by the triton backend (supported: {', '.join(ACT_DTYPES)})")
    if kn not in KV_DTYPES:
        raise TypeError(f"k_pages dtype {kn} is not supported by the triton backend "
                        f"(supported: {', '.join(KV_DTYPES)})")


def _sm_count(rt) -> int | None:
    """Streaming multiprocessors of the GPU (the split rule's program target); None under the interpreter."""
    if rt.interpret:
        return None
    import torch
    return torch.cuda.get_device_properties(0).multi_processor_count


def _out_dtype(q, rt):
    """The attention output's torch dtype: q's own 16-bit dtype natively (NU-3: q's dtype is the required
    precision, and it halves the bytes written), float32 otherwise and under the interpreter (whose
    float32 -> bfloat16 conversion truncates, toolchain notes)."""
    import torch
    name = dtypes.dtype_name(np.asarray(q).dtype)
    if rt.interpret or name not in ("float16", "bfloat16"):
        return torch.float32
    return torch.float16 if name == "float16" else torch.bfloat16


def _as_f32(x: np.ndarray) -> np.ndarray:
    """PA-43: new tokens are rounded to float32 first (exact for 16-bit inputs), as the reference does."""
    x = np.asarray(x)
    name = dtypes.dtype_name(x.dtype)
    return x if name in ("float32", "float16", "bfloat16") else x.astype(np.float32)


def _scale_arg(scale, dev):
    """A pool-wide scale as a Python float; per-head / per-token scales (PA-48) as float32 tensors."""
    import torch
    if scale is None:
        return None
    if np.ndim(scale) == 0:
        return float(scale)
    return torch.as_tensor(np.ascontiguousarray(scale, dtype=np.float32), device=dev)
