"""Ragged paged attention (spec/paged_attention.md, PA-*): the decode kernel, split-KV combine, scores, launch.

One call runs up to four launches on one stream, in this order:
  1. `_attention_kernel` (decode): sequences with at most `decode_max_q` query rows;
  2. `combine_kernel`: merges the split-KV partials of step 1 (only when it split);
  3. `paged_prefill.prefill_kernel` (FlashAttention-2 style): sequences with more rows;
  4. `_scores_kernel` (PA-21), over every sequence, with the log-sum-exp written by 1-3.
Each kernel skips the sequences of the other (it reads q_len from cu_q_lens), so no host-side metadata
is built; the host skips a launch whose sequences the call does not have (`launch_defaults`). The combine
runs before the prefill kernel because it merges every row: the prefill rows it overwrites with
unspecified values are written again by step 3.

Decode work decomposition. Query rows are cut into tiles of BLOCK_Q tokens per sequence; one program
handles one tile and one KV head, with the GROUP query heads of that KV head packed into the tile's rows
(attention_tiles.q_tile), so each K/V element is loaded once per tile (tile ids: attention_tiles).
The program walks the KV tokens its rows can see in blocks of BLOCK_N tokens (a token's page is looked
up through the page table, so any page size works; the page table is a block table or, with the
constexpr CSR, FlashInfer/TVM's CSR form read in place, spec/metadata.md MD-23), with an online
softmax in float32. Blocks before the first row's sliding window and after the last row's causal limit
are never visited (PA-15), and loads are masked to the visited range, so NaN/Inf in unused slots or
pages never enters the arithmetic (PA-24). Masked logits are selected to -inf, never multiplied by 0.
Both products run on the dot dtype (`attention_dot_dtype`: the 16-bit q dtype natively, float32
accumulation; P rounded to it as NU-PA1 allows).

Split-KV: for long decode sequences a third grid axis cuts the KV range into NUM_SPLITS segments of
equal block counts; each writes a partial (normalised output, max, sum) and `combine_kernel` merges
them with weights exp(m_s - M) l_s, adding the sink once. The split count is `launch_defaults`' rule (attention_launch.py: the launch policy).
Scores (PA-21): a second pass over the same ranges with the final log-sum-exp of every row adds the
probabilities, summed over rows and heads, into scores[seq, token] with atomic adds.
"""
from ._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .attention_launch import attention_dot_dtype, launch_defaults, split_threshold  # noqa: E402,F401
from .attention_tiles import q_tile, soft_cap, tile_setup  # noqa: E402
from .paged_prefill import prefill_kernel  # noqa: E402


@triton.jit
def _logits(q, page_base, n_offs, lo, hi, pos, row_ok, window, cap, qk_scale,
            k_ptr, page_ptr, stride_pp, stride_kp, stride_ks, stride_kd, kvh_off, page_size,
            d_offs, ks_ptr, sc_off, stride_sp, stride_ss, D: tl.constexpr, HAS_WINDOW: tl.constexpr,
            HAS_CAP: tl.constexpr, DOT_DTYPE: tl.constexpr, TOKEN_SCALES: tl.constexpr, OFFSET: tl.constexpr):
    """Masked, scaled (and capped) logits of one KV block: float32[BLOCK_M, BLOCK_N], -inf where hidden.
    Key j's page is page_ptr[page_base + (j // page_size) * stride_pp] (either page-table form, see
    attention_tiles.tile_setup). With TOKEN_SCALES each key's column is scaled by the k scale beside its
    slot (PA-48). OFFSET: the integer type of element offsets (see paged_prefill.prefill_kernel)."""
    in_range = (n_offs >= lo) & (n_offs < hi)
    page = tl.load(page_ptr + page_base + (n_offs // page_size) * stride_pp, mask=in_range, other=0)
    page = page.to(OFFSET)  # int64: element offsets may pass 2**31 in large pools
    slot = (n_offs % page_size).to(OFFSET)
    k_off = page * stride_kp + slot * stride_ks + kvh_off
    k_t = tl.load(k_ptr + k_off[None, :] + d_offs[:, None] * stride_kd,
                  mask=in_range[None, :] & (d_offs[:, None] < D), other=0.0)
    s = tl.dot(q, k_t.to(DOT_DTYPE), input_precision="ieee") * qk_scale
    if TOKEN_SCALES:
        k_s = tl.load(ks_ptr + page * stride_sp + slot * stride_ss + sc_off, mask=in_range, other=0.0)
        s = s * k_s.to(tl.float32)[None, :]
    if HAS_CAP:
        s = soft_cap(s, cap)
    visible = row_ok[:, None] & in_range[None, :] & (n_offs[None, :] <= pos[:, None])  # PA-7
    if HAS_WINDOW:
        visible = visible & (n_offs[None, :] > pos[:, None] - window)  # PA-15
    return tl.where(visible, s, float("-inf")), page, slot, in_range


@triton.jit
def _attention_kernel(
        q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, part_ptr, part_ml_ptr,
        kv_lens_ptr, indptr_ptr, page_ptr, cu_q_ptr, sinks_ptr, ks_ptr, vs_ptr,
        num_seqs, max_q, page_size, window, cap, qk_scale, v_scale, stride_sp, stride_ss, stride_sh,
        stride_qt, stride_qh, stride_qd, stride_kp, stride_ks, stride_kh, stride_kd,
        stride_vp, stride_vs, stride_vh, stride_vd, stride_ot, stride_oh, stride_od,
        stride_kl, stride_ip, stride_ps, stride_pp, stride_cu, stride_lt,
        stride_pst, stride_ptt, stride_pth, stride_mls, stride_mlt,
        D: tl.constexpr, D_PAD: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
        BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
        HAS_WINDOW: tl.constexpr, HAS_CAP: tl.constexpr, HAS_SINKS: tl.constexpr,
        WRITE_LSE: tl.constexpr, DOT_DTYPE: tl.constexpr, SCALE_MODE: tl.constexpr, CSR: tl.constexpr,
        OFFSET: tl.constexpr):
    """Sequences with q_len <= max_q only (the prefill kernel takes the rest). Grid (tile ids, Hkv, splits).
    CSR selects the page-table form (attention_tiles.tile_setup). SCALE_MODE (PA-18, PA-48): 0 one scale
    per pool (folded into qk_scale / v_scale), 1 per KV head (ks_ptr, vs_ptr: float32[Hkv]), 2 per token
    slot and KV head (float32[P, page_size, Hkv]). OFFSET: see paged_prefill.prefill_kernel."""
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    if SCALE_MODE == 1:
        qk_scale = qk_scale * tl.load(ks_ptr + kvh * stride_sh)
        v_scale = v_scale * tl.load(vs_ptr + kvh * stride_sh)
    seq, q_start, q_end, first_pos, lo, hi, page_base, q_len = tile_setup(
        cu_q_ptr, stride_cu, kv_lens_ptr, stride_kl, indptr_ptr, stride_ip, stride_ps, stride_pp, page_size,
        num_seqs, window, BLOCK_Q, HAS_WINDOW, CSR)
    if (q_start < q_end) & (q_len <= max_q):
        BLOCK_M: tl.constexpr = BLOCK_Q * GROUP_PAD
        tok, head, row_ok, pos, d_offs, q = q_tile(
            q_ptr, q_start, q_end, first_pos, kvh, stride_qt, stride_qh, stride_qd,
            D, D_PAD, GROUP, GROUP_PAD, BLOCK_Q, DOT_DTYPE)

        # This split's share of the visited blocks (all of them when NUM_SPLITS == 1).
        start = (lo // BLOCK_N) * BLOCK_N
        n_blocks = tl.cdiv(hi - start, BLOCK_N)
        per_split = tl.cdiv(n_blocks, NUM_SPLITS)
        b0 = start + split * per_split * BLOCK_N
        b1 = tl.minimum(hi, b0 + per_split * BLOCK_N)

        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D_PAD], tl.float32)
        for n0 in range(b0, b1, BLOCK_N):
            n_offs = n0 + tl.arange(0, BLOCK_N)
            s, page, slot, in_range = _logits(
                q, page_base, n_offs, lo, hi, pos, row_ok, window, cap, qk_scale, k_ptr, page_ptr,
                stride_pp, stride_kp, stride_ks, stride_kd, kvh * stride_kh, page_size,
                d_offs, ks_ptr, kvh * stride_sh, stride_sp, stride_ss, D, HAS_WINDOW, HAS_CAP, DOT_DTYPE,
                SCALE_MODE == 2, OFFSET)
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
            alpha = tl.exp(m_i - m_safe)
            p = tl.exp(s - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v_off = page * stride_vp + slot * stride_vs + kvh * stride_vh
            v = tl.load(v_ptr + v_off[:, None] + d_offs[None, :] * stride_vd,
                        mask=in_range[:, None] & (d_offs[None, :] < D), other=0.0)
            if SCALE_MODE == 2:   # PA-48: each value row times the v scale beside its slot
                v_s = tl.load(vs_ptr + page * stride_sp + slot * stride_ss + kvh * stride_sh, mask=in_range,
                              other=0.0)
                v = v.to(tl.float32) * v_s.to(tl.float32)[:, None]
            acc = tl.dot(p.to(DOT_DTYPE), v.to(DOT_DTYPE), acc=acc * alpha[:, None], input_precision="ieee")
            m_i = m_new

        acc = acc * v_scale
        if NUM_SPLITS == 1:
            if HAS_SINKS:  # PA-17: exp(sink) joins the denominator only
                sink = tl.load(sinks_ptr + head, mask=row_ok, other=float("-inf")).to(tl.float32)
                m_fin = tl.maximum(m_i, sink)
                m_fin = tl.where(m_fin == float("-inf"), 0.0, m_fin)
                corr = tl.exp(m_i - m_fin)
                l_i = l_i * corr + tl.exp(sink - m_fin)
                acc = acc * corr[:, None]
                m_i = m_fin
            out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
            o_rows = (q_start + tok).to(tl.int64) * stride_ot + head * stride_oh
            tl.store(out_ptr + o_rows[:, None] + d_offs[None, :] * stride_od, out.to(out_ptr.dtype.element_ty),
                     mask=row_ok[:, None] & (d_offs[None, :] < D))
            if WRITE_LSE:
                lse = m_i + tl.log(tl.where(l_i > 0, l_i, 1.0))  # padding rows: no keys
                tl.store(lse_ptr + (q_start + tok) * stride_lt + head, lse, mask=row_ok)
        else:
            out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
            p_rows = split * stride_pst + (q_start + tok).to(tl.int64) * stride_ptt + head * stride_pth
            tl.store(part_ptr + p_rows[:, None] + d_offs[None, :], out,
                     mask=row_ok[:, None] & (d_offs[None, :] < D))
            ml = split * stride_mls + (q_start + tok) * stride_mlt + head * 2
            tl.store(part_ml_ptr + ml, m_i, mask=row_ok)
            tl.store(part_ml_ptr + ml + 1, l_i, mask=row_ok)


@triton.jit
def combine_kernel(part_ptr, part_ml_ptr, out_ptr, lse_ptr, sinks_ptr, Hq,
                    stride_pst, stride_ptt, stride_pth, stride_mls, stride_mlt,
                    stride_ot, stride_oh, stride_od, stride_lt,
                    D: tl.constexpr, D_PAD: tl.constexpr, NUM_SPLITS: tl.constexpr,
                    SPLITS_PAD: tl.constexpr, HAS_SINKS: tl.constexpr, WRITE_LSE: tl.constexpr):
    """Merge the split partials of one (row, head): weights exp(m_s - M) * l_s, sink added once."""
    t = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, D_PAD)
    ok = s < NUM_SPLITS
    ml = s * stride_mls + t * stride_mlt + h * 2
    m = tl.load(part_ml_ptr + ml, mask=ok, other=float("-inf"))
    l = tl.load(part_ml_ptr + ml + 1, mask=ok, other=0.0)
    m_all = tl.max(m, 0)
    if HAS_SINKS:
        sink = tl.load(sinks_ptr + h).to(tl.float32)
        m_all = tl.maximum(m_all, sink)
    m_all = tl.where(m_all == float("-inf"), 0.0, m_all)
    w = tl.exp(m - m_all) * l
    denom = tl.sum(w, 0)
    if HAS_SINKS:
        denom = denom + tl.exp(sink - m_all)
    o = tl.load(part_ptr + s[:, None] * stride_pst + t.to(tl.int64) * stride_ptt + h * stride_pth + d[None, :],
                mask=ok[:, None] & (d[None, :] < D), other=0.0)
    out = tl.sum(o * w[:, None], 0) / tl.where(denom > 0, denom, 1.0)
    tl.store(out_ptr + t.to(tl.int64) * stride_ot + h * stride_oh + d * stride_od, out.to(out_ptr.dtype.element_ty),
             mask=d < D)
    if WRITE_LSE:
        tl.store(lse_ptr + t * stride_lt + h, m_all + tl.log(tl.where(denom > 0, denom, 1.0)))


@triton.jit
def _scores_kernel(
        q_ptr, k_ptr, lse_ptr, scores_ptr, kv_lens_ptr, indptr_ptr, page_ptr, cu_q_ptr, ks_ptr,
        num_seqs, page_size, window, cap, qk_scale, scale_sp, scale_ss, scale_sh,
        stride_qt, stride_qh, stride_qd, stride_kp, stride_ks, stride_kh, stride_kd,
        stride_kl, stride_ip, stride_ps, stride_pp, stride_cu, stride_lt, stride_ss,
        D: tl.constexpr, D_PAD: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
        BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr,
        HAS_WINDOW: tl.constexpr, HAS_CAP: tl.constexpr, DOT_DTYPE: tl.constexpr, SCALE_MODE: tl.constexpr,
        CSR: tl.constexpr, OFFSET: tl.constexpr):
    """PA-21: scores[seq, j] += sum over this tile's rows and heads of exp(s - lse), for every sequence."""
    kvh = tl.program_id(1)
    if SCALE_MODE == 1:
        qk_scale = qk_scale * tl.load(ks_ptr + kvh * scale_sh)
    seq, q_start, q_end, first_pos, lo, hi, page_base, q_len = tile_setup(
        cu_q_ptr, stride_cu, kv_lens_ptr, stride_kl, indptr_ptr, stride_ip, stride_ps, stride_pp, page_size,
        num_seqs, window, BLOCK_Q, HAS_WINDOW, CSR)
    if q_start < q_end:
        tok, head, row_ok, pos, d_offs, q = q_tile(
            q_ptr, q_start, q_end, first_pos, kvh, stride_qt, stride_qh, stride_qd,
            D, D_PAD, GROUP, GROUP_PAD, BLOCK_Q, DOT_DTYPE)
        lse = tl.load(lse_ptr + (q_start + tok) * stride_lt + head, mask=row_ok, other=0.0)
        for n0 in range((lo // BLOCK_N) * BLOCK_N, hi, BLOCK_N):
            n_offs = n0 + tl.arange(0, BLOCK_N)
            s, page, slot, in_range = _logits(
                q, page_base, n_offs, lo, hi, pos, row_ok, window, cap, qk_scale, k_ptr, page_ptr,
                stride_pp, stride_kp, stride_ks, stride_kd, kvh * stride_kh, page_size,
                d_offs, ks_ptr, kvh * scale_sh, scale_sp, scale_ss, D, HAS_WINDOW, HAS_CAP, DOT_DTYPE,
                SCALE_MODE == 2, OFFSET)
            p = tl.exp(s - lse[:, None])
            tl.atomic_add(scores_ptr + seq * stride_ss + n_offs, tl.sum(p, 0), mask=in_range)


class _PageTable:
    """The page-table arguments of the kernels in either form (see _tile_setup): `lens` (kv_lens or
    kv_last_page_len), `indptr` (kv_indptr, CSR only), `pages` (page_indices or kv_indices), their strides,
    and the CSR flag."""

    def __init__(self, lens, indptr, pages, csr: bool):
        self.lens, self.pages, self.csr = lens, pages, csr
        self.indptr = indptr if csr else lens               # block table: never read
        self.stride_kl = lens.stride(0)
        self.stride_ip = indptr.stride(0) if csr else 0
        self.stride_ps, self.stride_pp = (0, pages.stride(0)) if csr else pages.stride()

    def args(self):
        """kv_lens_ptr, indptr_ptr, page_ptr: in the kernels' argument order."""
        return self.lens, self.indptr, self.pages

    def strides(self):
        """stride_kl, stride_ip, stride_ps, stride_pp: in the kernels' argument order."""
        return self.stride_kl, self.stride_ip, self.stride_ps, self.stride_pp


def ragged_paged_attention(q, k_pages, v_pages, kv_lens, page_indices, cu_q_lens, num_seqs, *,
                           sm_scale, sliding_window=None, soft_cap=None, sinks=None,
                           k_scale=None, v_scale=None, return_scores=False, **launch):
    """Launch the kernels on torch tensors (one device). Returns out [T, Hq, D] (float32, or out_dtype)
    and, with return_scores, scores float32[S, pages_per_seq * page_size].

    q [T, Hq, D]; k_pages/v_pages [P, page_size, Hkv, D]; metadata int32/int64 tensors of any stride;
    num_seqs a Python int; sinks float32[Hq] or None; scales Python floats (float32 values) or None, or
    float32 tensors [Hkv] (per KV head) or [P, page_size, Hkv] (per token slot and head), PA-48.
    `launch` (`launch_defaults` gives them for a call): decode_max_q, run_decode, run_prefill (dispatch);
    num_splits, block_q, block_n, num_warps, num_stages (decode kernel); prefill_block_q, prefill_block_n,
    prefill_warps, prefill_stages (prefill kernel; None: Triton's defaults); out_dtype, offset_bits,
    interpret.
    """
    table = _PageTable(kv_lens, None, page_indices, csr=False)
    return _attention(q, k_pages, v_pages, table, cu_q_lens, num_seqs, page_indices.shape[1],
                      sm_scale=sm_scale, sliding_window=sliding_window, soft_cap=soft_cap, sinks=sinks,
                      k_scale=k_scale, v_scale=v_scale, return_scores=return_scores, **launch)


def ragged_paged_attention_csr(q, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, *,
                               sm_scale, sliding_window=None, soft_cap=None, sinks=None,
                               k_scale=None, v_scale=None, **launch):
    """The same kernels reading a CSR page table (spec/metadata.md MD-23) directly: each program's
    sequence finds its pages at kv_indices[kv_indptr[seq]:] and its kv_len from the page count and
    kv_last_page_len (MD-3, MD-4); no block table is built. Returns out [T, Hq, D] (float32, or out_dtype).

    qo_indptr i32[S+1] (= cu_q_lens), kv_indptr i32[S+1], kv_indices i32[nnz], kv_last_page_len i32[S]:
    int32/int64 tensors of any stride; every sequence counts (num_seqs = S). Options and `launch` as
    `ragged_paged_attention` (no per-token scores).
    """
    table = _PageTable(kv_last_page_len, kv_indptr, kv_indices, csr=True)
    num_seqs = kv_last_page_len.shape[0]
    if kv_indices.shape[0] == 0:        # every sequence is empty (MD-4): no query row to compute
        num_seqs = 0
    out, _ = _attention(q, k_pages, v_pages, table, qo_indptr, num_seqs, 0, sm_scale=sm_scale,
                        sliding_window=sliding_window, soft_cap=soft_cap, sinks=sinks, k_scale=k_scale,
                        v_scale=v_scale, return_scores=False, **launch)
    return out


def _attention(q, k_pages, v_pages, table: _PageTable, cu_q_lens, num_seqs, pages_per_seq, *,
               sm_scale, sliding_window=None, soft_cap=None, sinks=None,
               k_scale=None, v_scale=None, return_scores=False,
               decode_max_q=2**31 - 1, run_decode=True, run_prefill=False,
               num_splits=1, block_q=None, block_n=32, num_warps=None, num_stages=None,
               prefill_block_q=None, prefill_block_n=64, prefill_warps=None, prefill_stages=None,
               out_dtype=None, offset_bits=64, interpret=False):
    """Both page-table forms: launch the decode (split-KV combine), prefill and scores kernels (see the
    module docstring for their order). Without launch keywords every sequence runs on the decode kernel.
    out_dtype: the output's torch dtype (default float32); offset_bits: 64, or 32 for the offset mutant."""
    import torch
    T, Hq, D = q.shape
    page_size, Hkv = k_pages.shape[1], k_pages.shape[2]
    group = Hq // Hkv
    group_pad = triton.next_power_of_2(group)
    d_pad = max(16, triton.next_power_of_2(D))
    min_rows = triton.cdiv(16, group_pad)                  # tl.dot needs >= 16 rows
    block_q = max(block_q or min_rows, min_rows)
    prefill_block_q = max(prefill_block_q or min_rows, min_rows)
    # Every counted row is written by one of the kernels; padding rows stay unspecified (PA-25).
    out = torch.empty((T, Hq, D), dtype=out_dtype or torch.float32, device=q.device)
    S = table.lens.shape[0]
    scores = (torch.zeros((S, pages_per_seq * page_size), dtype=torch.float32, device=q.device)
              if return_scores else None)
    if num_seqs == 0 or T == 0:
        return out, scores
    lse = torch.empty((T, Hq), dtype=torch.float32, device=q.device) if return_scores else out
    scale_mode = 0 if k_scale is None or isinstance(k_scale, float) else (1 if k_scale.dim() == 1 else 2)
    if scale_mode:
        ks_t, vs_t = k_scale, v_scale
        scale_strides = (ks_t.stride(0), ks_t.stride(1), ks_t.stride(2)) if scale_mode == 2 else (0, 0, ks_t.stride(0))
        qk_scale, v_scale_f = float(sm_scale), 1.0
    else:
        ks_t = vs_t = out                       # never read
        scale_strides = (0, 0, 0)
        qk_scale = float(sm_scale) * (1.0 if k_scale is None else float(k_scale))
        v_scale_f = 1.0 if v_scale is None else float(v_scale)
    window = 0 if sliding_window is None else int(sliding_window)
    cap = 1.0 if soft_cap is None else float(soft_cap)
    sinks_t = sinks if sinks is not None else out
    flags = dict(HAS_WINDOW=sliding_window is not None, HAS_CAP=soft_cap is not None, DOT_DTYPE=attention_dot_dtype(
        q.dtype, k_pages.dtype, interpret), SCALE_MODE=scale_mode, CSR=table.csr,
        OFFSET=tl.int64 if offset_bits == 64 else tl.int32)
    shapes = dict(D=D, D_PAD=d_pad, GROUP=group, GROUP_PAD=group_pad)
    grid = (T // block_q + num_seqs, Hkv, num_splits)
    if run_decode:
        if num_splits > 1:
            part = torch.empty((num_splits, T, Hq, D), dtype=torch.float32, device=q.device)
            part_ml = torch.empty((num_splits, T, Hq, 2), dtype=torch.float32, device=q.device)
        else:
            part, part_ml = out, lse
        launch = {k: v for k, v in (("num_warps", num_warps), ("num_stages", num_stages)) if v is not None}
        _attention_kernel[grid](
            q, k_pages, v_pages, out, lse, part, part_ml, *table.args(), cu_q_lens, sinks_t, ks_t, vs_t,
            num_seqs, int(decode_max_q), page_size, window, cap, qk_scale, v_scale_f, *scale_strides,
            *q.stride(), *k_pages.stride(), *v_pages.stride(), *out.stride(),
            *table.strides(), cu_q_lens.stride(0), lse.stride(0),
            part.stride(0), part.stride(1), part.stride(2), part_ml.stride(0), part_ml.stride(1),
            **shapes, BLOCK_Q=block_q, BLOCK_N=block_n, NUM_SPLITS=num_splits, HAS_SINKS=sinks is not None,
            WRITE_LSE=return_scores, **flags, **launch)
        if num_splits > 1:
            # Merges every row: padding rows (PA-25) and the prefill kernel's rows, which step 3 then
            # writes again, get unspecified values; merging all T rows needs no cu_q_lens on the host.
            combine_kernel[(T, Hq)](
                part, part_ml, out, lse, sinks_t, Hq,
                part.stride(0), part.stride(1), part.stride(2), part_ml.stride(0), part_ml.stride(1),
                *out.stride(), lse.stride(0),
                D=D, D_PAD=d_pad, NUM_SPLITS=num_splits, SPLITS_PAD=triton.next_power_of_2(num_splits),
                HAS_SINKS=sinks is not None, WRITE_LSE=return_scores)
    if run_prefill:
        launch = {k: v for k, v in (("num_warps", prefill_warps), ("num_stages", prefill_stages)) if v is not None}
        prefill_kernel[(T // prefill_block_q + num_seqs, Hkv)](
            q, k_pages, v_pages, out, lse, *table.args(), cu_q_lens, sinks_t, ks_t, vs_t,
            num_seqs, int(decode_max_q) + 1, window, cap, qk_scale, v_scale_f, *scale_strides,
            *q.stride(), *k_pages.stride(), *v_pages.stride(), *out.stride(),
            *table.strides(), cu_q_lens.stride(0), lse.stride(0),
            PAGE=page_size, **shapes, BLOCK_Q=prefill_block_q, BLOCK_N=prefill_block_n,
            NUM_STAGES=prefill_stages or 1, HAS_SINKS=sinks is not None, WRITE_LSE=return_scores, **flags,
            **launch)
    if return_scores:
        _scores_kernel[grid[:2]](
            q, k_pages, lse, scores, *table.args(), cu_q_lens, ks_t, num_seqs, page_size, window, cap, qk_scale,
            *scale_strides, *q.stride(), *k_pages.stride(), *table.strides(),
            cu_q_lens.stride(0), lse.stride(0), scores.stride(0),
            **shapes, BLOCK_Q=block_q, BLOCK_N=block_n, **flags)
    return out, scores
