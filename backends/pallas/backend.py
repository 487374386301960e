"""The Pallas backend adapter: claims, NumPy <-> jax conversion, shape bucketing.

Each op validates its arguments with the reference's own `validate_<op>` (one rule, one message), adds
what only the TPU kernels need, converts to the kernel layout (combined K/V heads, head dim padded to 128
lanes, counts padded to their buckets, see `bucketing`), runs the kernel and converts back. The recurrent
ops live in `recurrent/adapter.py`; how kernels are compiled and run (interpret mode, the compiled-kernel
cache) in `runtime.py`.
"""
from __future__ import annotations

import numpy as np

from ...reference import eviction as ref_eviction
from ...reference import kv_write as ref_kv_write
from ...reference import metadata as ref_metadata
from ...reference import mla as ref_mla
from ...reference import paged_attention as ref_attention
from ...reference import rotation as ref_rotation
from ...reference.recurrent import conv1d as ref_conv1d
from ...reference.recurrent import gated_delta as ref_gated_delta
from ...reference.recurrent import rwkv6 as ref_rwkv6
from ...reference.recurrent import selective_state as ref_selective_state
from ...reference.recurrent import ssd_scan as ref_ssd_scan
from ..base import Availability, Backend, OpClaims, Unsupported
from .bucketing import pow2
from .claims import claims
from .operands import MIN_PAGES, MIN_SEQS, _arena_slots, _attention_operands, _token_scales, _used_pages
from .ragged_rows import NO_WINDOW
from .runtime import interpret_params, jax_status, kernel, release_if_needed, shard_counts


class PallasBackend(Backend):
    name = "pallas"
    version = "0.2"

    def availability(self) -> Availability:
        ok, reason, device = jax_status()
        return Availability(ok=ok, reason=reason, device=device)

    def capabilities(self) -> dict[str, OpClaims]:
        return claims(shard_counts())

    # ------------------------------------------------------------------------------------------------
    def ragged_paged_attention(self, q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *,
                               sm_scale=None, sliding_window=None, soft_cap=None, sinks=None,
                               k_scale=None, v_scale=None, return_scores=False, kv_layout="separate",
                               num_shards=1):
        """Same contract as reference.ragged_paged_attention; out is float32. A combined cache
        (kv_layout="combined", PA-36) is the kernel's own layout: its pages go to the kernel as given.
        num_shards > 1 runs the kernel under shard_map with the heads split over that many devices
        (PA-49, sharding.py)."""
        call = ref_attention.validate_ragged_paged_attention(
            q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=sm_scale,
            sliding_window=sliding_window, soft_cap=soft_cap, sinks=sinks, k_scale=k_scale, v_scale=v_scale,
            return_scores=return_scores, kv_layout=kv_layout, num_shards=num_shards)
        if call.num_shards > 1 and call.num_shards not in shard_counts():
            raise Unsupported(f"num_shards={call.num_shards}: this process has devices for shard counts "
                              f"{list(shard_counts())} only (CPU devices are set before jax is imported)")
        T, D = np.shape(q)[0], np.shape(q)[2]
        q_k, kv_k, scales, cu, meta, fparams, cfg = _attention_operands(call, q, k_pages, kv_layout, return_scores,
                                                                        min_seqs=MIN_SEQS)
        page_size = call.k_pages.shape[1]
        S, pps = call.page_indices.shape
        s_pad, pps_pad = cu.shape[0] - 1, pow2(pps, MIN_PAGES)
        lens, table = _used_pages(call, s_pad, pps_pad, page_size)
        args = (q_k, kv_k, lens, table.reshape(-1), cu, meta, fparams)
        if call.num_shards > 1:
            from .sharding import sharded_attention
            release_if_needed()
            result = sharded_attention(*args, scales, num_shards=call.num_shards, pages_per_seq=pps_pad, cfg=cfg,
                                       interpret=interpret_params())
        else:
            result = kernel("attention")(*args, scales, pages_per_seq=pps_pad, cfg=cfg, interpret=interpret_params())
        out = np.asarray(result[0])[:T, :, :D]
        if not return_scores:
            return out
        scores = np.asarray(result[1])[:S, :pps].reshape(S, pps * page_size).astype(np.float32)
        return ref_attention.AttentionOutput(out, scores)

    def mla_paged_attention(self, q_nope, q_pe, c_kv_pages, k_pe_pages, kv_lens, page_indices, cu_q_lens, num_seqs,
                            *, sm_scale=None, sliding_window=None, soft_cap=None, sinks=None):
        """Same contract as reference.mla_paged_attention, decode rows and prefill chunks alike; out is
        float32. The kernel takes every query row as [q_nope | q_pe] and one pool of [c_kv | k_pe] pages,
        lanes padded (mla.py)."""
        call = ref_mla.validate_mla_paged_attention(q_nope, q_pe, c_kv_pages, k_pe_pages, kv_lens, page_indices,
                                                    cu_q_lens, num_seqs, sm_scale=sm_scale,
                                                    sliding_window=sliding_window, soft_cap=soft_cap, sinks=sinks)
        from .mla import LANES, MLA_BLOCK_Q
        a, n = call.attention, call.attention.num_seqs
        T, H, d_c = np.shape(q_nope)
        D = d_c + np.shape(q_pe)[2]
        Dp, h_pad, t_pad = -(-D // LANES) * LANES, pow2(H, 8), pow2(T, MLA_BLOCK_Q)
        P, page_size, _ = np.shape(c_kv_pages)
        S, pps = a.page_indices.shape
        s_pad, pps_pad = pow2(S, MIN_SEQS), pow2(pps, MIN_PAGES)
        c, r = np.asarray(c_kv_pages), np.asarray(k_pe_pages)
        pool_dtype = c.dtype if c.dtype == r.dtype else np.float32     # one pool holds both parts
        pages = np.zeros((pow2(P, 32), page_size, Dp), pool_dtype)
        pages[:P, :, :d_c], pages[:P, :, d_c:D] = c, r
        rows = np.zeros((t_pad, h_pad, Dp), np.float32)                # exact upcast of both query parts
        rows[:T, :H, :D] = a.q
        lens, table = _used_pages(a, s_pad, pps_pad, page_size)     # ML-7 is PA-24's rule
        cu = np.full(s_pad + 1, int(a.cu_q_lens[n]), np.int32)        # padding sequences own no row
        cu[:n + 1] = a.cu_q_lens[:n + 1]
        fparams = np.full(2 + h_pad, -np.inf, np.float32)   # no sink: -inf (exactly no sink, PA-17)
        fparams[:2] = (a.sm_scale, a.soft_cap or 0.0)
        if a.sinks is not None:
            fparams[2:2 + H] = a.sinks
        meta = np.array([n, a.sliding_window or NO_WINDOW], np.int32)
        res = kernel("mla")(rows, pages, lens, table.reshape(-1), cu, meta, fparams, pages_per_seq=pps_pad,
                            block_q=MLA_BLOCK_Q, interpret=interpret_params())
        return np.asarray(res)[:T, :H, :d_c]

    def ragged_paged_attention_csr(self, q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
                                   *, sm_scale=None, sliding_window=None, soft_cap=None, sinks=None,
                                   k_scale=None, v_scale=None):
        """Same contract as reference.ragged_paged_attention_csr (spec/metadata.md MD-23); out is float32.

        The CSR arrays go to the kernel as they are (padded to their buckets), scalar-prefetched: the kernel
        reads each page id and kv_len from them, never from a block table built here. Padding sequences own
        no page (kv_indptr repeats its last value, last-page length 0, MD-4) and no query row."""
        call = ref_metadata.validate_ragged_paged_attention_csr(
            q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale=sm_scale,
            sliding_window=sliding_window, soft_cap=soft_cap, sinks=sinks, k_scale=k_scale, v_scale=v_scale)
        T, D = np.shape(q)[0], np.shape(q)[2]
        q_k, kv_k, scales, cu, meta, fparams, cfg = _attention_operands(call, q, k_pages, "separate", False,
                                                                        min_seqs=MIN_SEQS)
        S = call.num_seqs
        s_pad = cu.shape[0] - 1
        indices = np.asarray(kv_indices, np.int64)
        nnz = indices.shape[0]
        indptr_k = np.full(s_pad + 1, nnz, np.int32)
        indptr_k[:S + 1] = np.asarray(kv_indptr, np.int64)
        last_k = np.zeros(s_pad, np.int32)
        last_k[:S] = np.asarray(kv_last_page_len, np.int64)
        indices_k = np.zeros(pow2(nnz, MIN_PAGES), np.int32)        # entries past nnz are never read
        indices_k[:nnz] = indices
        out = kernel("attention_csr")(q_k, kv_k, indptr_k, indices_k, last_k, cu, meta, fparams, scales, cfg=cfg,
                                      interpret=interpret_params())
        return np.asarray(out[0])[:T, :, :D]

    def slot_mapping_from_arena(self, arena, offsets, num_seqs, page_size):
        """Same contract as reference.slot_mapping_from_arena (spec/metadata.md MD-7, MD-10): the arena goes
        to the kernel as int32 words with the four word offsets, and the kernel reads every array at its
        offset. The reference's validators run first (same rules, same messages)."""
        views = ref_metadata.validate_slot_mapping_from_arena(arena, offsets, num_seqs, page_size)
        qo, *_ = ref_metadata.validate_append_slot_mapping(*views, page_size)
        return _arena_slots(np.asarray(arena), offsets, int(num_seqs), int(page_size), int(qo[-1]))

    def append_slot_mapping(self, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, page_size):
        """Same contract as reference.append_slot_mapping (MD-7): the four arrays packed back to back (4-byte
        alignment, MD-8) into one word operand, then the arena kernel of `slot_mapping_from_arena`."""
        qo, indptr, indices, last, P = ref_metadata.validate_append_slot_mapping(
            qo_indptr, kv_indptr, kv_indices, kv_last_page_len, page_size)
        arena, offsets = ref_metadata.pack_arena([a.astype(np.int32) for a in (qo, indptr, indices, last)], 4)
        return _arena_slots(arena, offsets, indptr.shape[0] - 1, P, int(qo[-1]))

    def write_kv(self, k_pages, v_pages, k, v, slot_mapping, *, k_scale=None, v_scale=None):
        """Same contract as reference.write_kv; returns KVPages in the storage dtype. Tokens pad to
        pow2(N, 8) skipped rows (slot -1)."""
        call = ref_kv_write.validate_write_kv(k_pages, v_pages, k, v, slot_mapping, k_scale=k_scale,
                                              v_scale=v_scale)
        if call.k_pages.dtype == np.float64:
            raise TypeError("k_pages must not be float64: TPU kernels store 8-, 16- or 32-bit values")
        n = call.slot_mapping.shape[0]
        n_pad = pow2(n, 8)
        slots = np.full(n_pad, -1, np.int32)
        slots[:n] = np.where(call.slot_mapping >= 0, call.slot_mapping, -1)
        # Pinned rounding (PA-43, PA-44): through float32 first (exact for 16-bit activations, fl32(x) for float64).
        kp = np.zeros((n_pad,) + call.k.shape[1:], np.float32)
        vp = np.zeros_like(kp)
        kp[:n], vp[:n] = call.k, call.v
        quantized = call.k_scale is not None
        page_size, hkv = call.k_pages.shape[1], call.k_pages.shape[2]
        k_scales = _token_scales(call.k_scale, slots, n_pad, page_size, hkv)
        v_scales = _token_scales(call.v_scale, slots, n_pad, page_size, hkv)
        new_k, new_v = kernel("write_kv")(call.k_pages, call.v_pages, kp, vp, slots, k_scales, v_scales,
                                          quantized=quantized, interpret=interpret_params())
        return ref_kv_write.KVPages(np.asarray(new_k), np.asarray(new_v))

    def accumulate_scores(self, acc, counts, step_scores):
        """Same contract as reference.accumulate_scores (EV-3 .. EV-5): ScoreState(acc' float64[L_new],
        counts' int32[L_new]). Tokens pad to rows of 128 lanes, pow2(rows, 8) rows (padding: +0, count 1)."""
        call = ref_eviction.validate_accumulate_scores(acc, counts, step_scores)
        n_old, n_new = call.acc.shape[0], call.step_scores.shape[0]
        if n_new == 0:
            return ref_eviction.ScoreState(np.zeros(0, np.float64), np.zeros(0, np.int32))
        from .float64_words import join, split
        from .tiling import LANES
        rows = pow2(-(-n_new // LANES), 8)
        words = [np.zeros(rows * LANES, np.int32) for _ in range(5)]
        words[0][:n_old], words[1][:n_old] = split(call.acc)
        words[2][:n_old] = call.counts
        words[3][:n_new], words[4][:n_new] = split(call.step_scores)
        meta = np.array([n_old, n_new], np.int32)
        hi, lo, cnt = kernel("accumulate_scores")(*(w.reshape(rows, LANES) for w in words), meta,
                                                  interpret=interpret_params())
        acc_out = join(np.asarray(hi).reshape(-1)[:n_new], np.asarray(lo).reshape(-1)[:n_new])
        return ref_eviction.ScoreState(acc_out, np.asarray(cnt).reshape(-1)[:n_new].astype(np.int32))

    def plan_eviction(self, block_table, acc, counts, config):
        """Same contract as reference.plan_eviction (EV-8 .. EV-16). The evictable range and k are config
        arithmetic (EV-8, EV-9) done here; with k = 0 nothing moves and no kernel runs (EV-9). Blocks pad to
        pow2(num_blocks, 16) rows of pow2(B, 8) lanes (padding: acc +0, count 1)."""
        call = ref_eviction.validate_plan_eviction(block_table, acc, counts, config)
        B, L = call.config.block_size, call.acc.shape[0]
        nb, n_full = call.block_table.shape[0], L // B
        k = max(0, n_full - call.config.max_cache_size // B)                       # EV-9
        first, last = call.config.start_size // B, n_full - call.config.recent_size // B   # EV-8
        if k == 0:
            return ref_eviction.EvictionPlan(
                np.zeros(0, np.int32), call.block_table.astype(np.int32), np.zeros(0, np.int32),
                np.zeros((0, 1), np.int32), call.acc.copy(), call.counts.astype(np.int32))
        from .float64_words import join, split
        nb_pad, b_pad = pow2(nb, 16), pow2(B, 8)
        planes = [np.zeros(nb_pad * B, np.int32), np.zeros(nb_pad * B, np.int32), np.ones(nb_pad * B, np.int32)]
        planes[0][:L], planes[1][:L] = split(call.acc)
        planes[2][:L] = call.counts
        state = []
        for plane, fill in zip(planes, (0, 0, 1)):
            block = np.full((nb_pad, b_pad), fill, np.int32)
            block[:, :B] = plane.reshape(nb_pad, B)
            state.append(block)
        table = np.zeros(nb_pad, np.int32)
        table[:nb] = call.block_table
        meta = np.array([nb, B, first, last, k, call.config.aggregation == "norm_sum"], np.int32)
        evicted, table_out, rot_idx, rot_delta, moved, hi, lo, cnt = (
            np.asarray(a) for a in kernel("plan_eviction")(table, *state, meta, interpret=interpret_params()))
        m, kept = int(moved[0]), L - k * B
        hi, lo, cnt = (a[:, :B].reshape(-1)[:kept] for a in (hi, lo, cnt))
        return ref_eviction.EvictionPlan(evicted[:k].copy(), table_out[:nb - k].copy(), rot_idx[:m].copy(),
                                         rot_delta[:m].reshape(m, 1).copy(), join(hi, lo), cnt.astype(np.int32))

    def rotate_keys(self, k_pages, rotated_block_indices, rotation_deltas, trig_lut, *, layout="half",
                    rotary_dim=None):
        """Same contract as reference.rotate_keys; returns the pool in its storage dtype (RO-1 .. RO-9)."""
        call = ref_rotation.validate_rotate_keys(k_pages, rotated_block_indices, rotation_deltas, trig_lut,
                                                 layout=layout, rotary_dim=rotary_dim)
        return self._rotate(k_pages, call.rotated_block_indices, call.rotation_deltas, call.trig_lut,
                            call.layout, call.rotary_dim)

    def shift_keys(self, k_pages, rotated_block_indices, position_deltas, *, theta, layout="half",
                   rotary_dim=None):
        """Same contract as reference.shift_keys (RO-10): one LUT row per distinct delta, with the pinned
        angle fl64(delta * w_j) (RO-3), then the LUT kernel."""
        call = ref_rotation.validate_shift_keys(k_pages, rotated_block_indices, position_deltas, theta=theta,
                                                layout=layout, rotary_dim=rotary_dim)
        distinct, rows = np.unique(call.position_deltas, return_inverse=True)
        angle = distinct.astype(np.float64)[:, None] * call.inv_freq
        lut = np.concatenate([np.cos(angle), np.sin(angle)], axis=1)
        return self._rotate(k_pages, call.rotated_block_indices, rows.reshape(call.position_deltas.shape), lut,
                            call.layout, call.rotary_dim)

    def _rotate(self, k_pages, idx, rows, lut, layout, rotary_dim):
        pages = np.asarray(k_pages)
        if pages.dtype == np.float64:  # not claimed: TPU kernels store 32-bit or narrower
            pages = pages.astype(np.float32)
        if idx.shape[0] == 0:
            return pages.copy()
        # Bucket the block count (repeating the last block with delta row 0 would rotate it twice, so
        # padding entries point at an extra scratch page that is dropped afterwards).
        n = idx.shape[0]
        n_pad = pow2(n)
        P = pages.shape[0]
        if n_pad > n:
            pages = np.concatenate([pages, np.zeros((1,) + pages.shape[1:], pages.dtype)])
        ids = np.full(n_pad, P, np.int32)
        ids[:n] = idx
        w = rows.shape[1]
        d = np.zeros((n_pad, w), np.int32)
        d[:n] = rows
        out = kernel("rotate_keys")(pages, ids, d.reshape(-1), np.asarray(lut, np.float32),
                                    per_block=w == 1, layout=layout, rotary_dim=int(rotary_dim),
                                    interpret=interpret_params())
        return np.asarray(out)[:P]

    # --- recurrent (recurrent/adapter.py) -------------------------------------------------------------
    def causal_conv1d_update(self, x, conv_state, weight, bias=None, *, activation=None, state_indices=None):
        """Same contract as reference.causal_conv1d_update (RS-10 .. RS-12); out is float32."""
        from .recurrent import adapter
        return adapter.causal_conv1d_update(ref_conv1d.validate_causal_conv1d_update(
            x, conv_state, weight, bias, activation=activation, state_indices=state_indices))

    def selective_state_update(self, state, x, dt, A, B, C, *, D=None, z=None, dt_bias=None, dt_softplus=False,
                               state_indices=None):
        """Same contract as reference.selective_state_update (RS-14 .. RS-16); out is float32."""
        from .recurrent import adapter
        return adapter.selective_state_update(ref_selective_state.validate_selective_state_update(
            state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
            state_indices=state_indices))

    def ssd_chunked_scan(self, state, x, dt, A, B, C, cu_seqlens, *, chunk_size=64, state_indices=None,
                         has_initial_state=None, D=None, z=None, dt_bias=None, dt_softplus=False, num_snapshots=0):
        """Same contract as reference.ssd_chunked_scan (RS-17 .. RS-19); out is float32."""
        from .recurrent import adapter
        return adapter.ssd_chunked_scan(ref_ssd_scan.validate_ssd_chunked_scan(
            state, x, dt, A, B, C, cu_seqlens, chunk_size=chunk_size, state_indices=state_indices,
            has_initial_state=has_initial_state, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
            num_snapshots=num_snapshots))

    def rwkv6_wkv(self, r, k, v, w, u, state, cu_seqlens, *, state_indices=None, has_initial_state=None):
        """Same contract as reference.rwkv6_wkv (RS-20); out is float32."""
        from .recurrent import adapter
        return adapter.rwkv6_wkv(ref_rwkv6.validate_rwkv6_wkv(
            r, k, v, w, u, state, cu_seqlens, state_indices=state_indices, has_initial_state=has_initial_state))

    def gated_delta_rule_update(self, q, k, v, g, beta, state, *, scale=None, use_qk_l2norm=False,
                                state_indices=None):
        """Same contract as reference.gated_delta_rule_update (RS-28 .. RS-31); out is float32."""
        from .recurrent import adapter
        return adapter.gated_delta_rule_update(ref_gated_delta.validate_gated_delta_rule_update(
            q, k, v, g, beta, state, scale=scale, use_qk_l2norm=use_qk_l2norm, state_indices=state_indices))

    def gated_delta_rule_chunked(self, q, k, v, g, beta, state, cu_seqlens, *, chunk_size=64, scale=None,
                                 use_qk_l2norm=False, state_indices=None, has_initial_state=None):
        """Same contract as reference.gated_delta_rule_chunked (RS-32, RS-33); out is float32."""
        from .recurrent import adapter
        return adapter.gated_delta_rule_chunked(ref_gated_delta.validate_gated_delta_rule_chunked(
            q, k, v, g, beta, state, cu_seqlens, chunk_size=chunk_size, scale=scale, use_qk_l2norm=use_qk_l2norm,
            state_indices=state_indices, has_initial_state=has_initial_state))

    def recurrent_store_step(self, seq_slot, seq_pos, conv_pool, ssm_pool, command, *, seq=0, seq_ids=None,
                             num_tokens=0, src=0, dst=0, saved_pos=0, saved_conv=None, saved_ssm=None,
                             snapshots_conv=None, snapshots_ssm=None):
        """Same contract as reference.recurrent_store_step (RS-21 .. RS-27): host-side plan, rows moved
        by DMA on the device."""
        from .recurrent import adapter
        return adapter.recurrent_store_step(seq_slot, seq_pos, conv_pool, ssm_pool, command, seq=seq,
                                            seq_ids=seq_ids, num_tokens=num_tokens, src=src, dst=dst,
                                            saved_pos=saved_pos, saved_conv=saved_conv, saved_ssm=saved_ssm,
                                            snapshots_conv=snapshots_conv, snapshots_ssm=snapshots_ssm)
