"""Paged prefill kernel in the FlashAttention-2 style (spec/paged_attention.md, PA-*).

`ragged_paged_attention` runs this kernel for the sequences of a call with at least `min_q` query rows
(the dispatch rule is `paged_attention.launch_defaults`); the decode kernel takes the others.

Work decomposition. One program per (query tile, KV head): BLOCK_M = BLOCK_Q * GROUP_PAD rows, the
GROUP query heads of the KV head packed with each token (attention_tiles.q_tile), so a K/V tile loaded
once serves the whole group; natively the tiles are large (128 rows) and a sequence's tiles run last
(most keys) first. The program walks its keys in BLOCK_N tiles, each key's page looked up through the
page table (block table or CSR, attention_tiles.tile_setup), in three loops:

    [start, full_lo)    masked tiles: the first rows' sliding window boundary
    [full_lo, full_hi)  full tiles: every key visible to every row (key <= first row's position and, with a
                        window, > last row's position - window), so no mask, no bounds check: the
                        software-pipelined main loop (tl.range num_stages)
    [full_hi, hi)       masked tiles: the causal diagonal (and the window of later rows)

Tiles past the last row's position and before the first row's window are never visited (PA-15), and
loads of the masked tiles are masked to the visited range, so NaN/Inf in unused slots never enters the
arithmetic (PA-24). Logits: q.k^T with tl.dot on the q dtype (bf16/fp16 natively, float32 accumulation;
float32 under the interpreter and for float32 q, input_precision "ieee"), scaled by sm_scale * log2(e) so
the online softmax runs on exp2; P is cast to the dot dtype for P.V (NU-PA1 allows the probabilities
rounded to the compute dtype). The sink joins the denominator once at the end (PA-17); the optional
log-sum-exp (natural units) feeds the scores kernel (PA-21).
"""
from ._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .attention_tiles import q_tile, soft_cap, tile_setup  # noqa: E402

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _kv_tile(acc, m_i, l_i, q, n0, lo, hi, pos, row_ok, window, cap, qk_scale, page_base, kvh,
             k_ptr, v_ptr, page_ptr, ks_ptr, vs_ptr, d_offs,
             stride_pp, stride_kp, stride_ks, stride_kh, stride_kd, stride_vp, stride_vs, stride_vh, stride_vd,
             stride_sp, stride_ss, stride_sh,
             PAGE: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
             MASKED: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_CAP: tl.constexpr, DOT_DTYPE: tl.constexpr,
             SCALE_MODE: tl.constexpr, OFFSET: tl.constexpr):
    """One key tile [n0, n0 + BLOCK_N) folded into the online softmax (log2 domain): (acc, m, l).
    MASKED: bounds-checked loads and the causal / window mask; else every key is visible to every row."""
    n = n0 + tl.arange(0, BLOCK_N)
    d_ok = d_offs < D
    if MASKED:
        in_range = (n >= lo) & (n < hi)
        page = tl.load(page_ptr + page_base + (n // PAGE) * stride_pp, mask=in_range, other=0)
    else:
        in_range = n >= 0
        page = tl.load(page_ptr + page_base + (n // PAGE) * stride_pp)
    page = page.to(OFFSET)          # int64: element offsets pass 2**31 in large pools
    slot = (n % PAGE).to(OFFSET)
    k_rows = page * stride_kp + slot * stride_ks + kvh * stride_kh
    v_rows = page * stride_vp + slot * stride_vs + kvh * stride_vh
    if MASKED:
        k_t = tl.load(k_ptr + k_rows[None, :] + d_offs[:, None] * stride_kd,
                      mask=in_range[None, :] & d_ok[:, None], other=0.0)
        v = tl.load(v_ptr + v_rows[:, None] + d_offs[None, :] * stride_vd,
                    mask=in_range[:, None] & d_ok[None, :], other=0.0)
    elif D == D_PAD:
        k_t = tl.load(k_ptr + k_rows[None, :] + d_offs[:, None] * stride_kd)
        v = tl.load(v_ptr + v_rows[:, None] + d_offs[None, :] * stride_vd)
    else:
        k_t = tl.load(k_ptr + k_rows[None, :] + d_offs[:, None] * stride_kd, mask=d_ok[:, None], other=0.0)
        v = tl.load(v_ptr + v_rows[:, None] + d_offs[None, :] * stride_vd, mask=d_ok[None, :], other=0.0)
    s = tl.dot(q, k_t.to(DOT_DTYPE), input_precision="ieee")
    if SCALE_MODE == 2:         # PA-48: each key's column times the k scale beside its slot
        s = s * tl.load(ks_ptr + page * stride_sp + slot * stride_ss + kvh * stride_sh, mask=in_range,
                        other=0.0).to(tl.float32)[None, :]
        v = v.to(tl.float32) * tl.load(vs_ptr + page * stride_sp + slot * stride_ss + kvh * stride_sh,
                                       mask=in_range, other=0.0).to(tl.float32)[:, None]
    if HAS_CAP:                 # PA-16: the cap acts on the natural-unit logit
        s = soft_cap(s * qk_scale, cap) * LOG2E
    else:
        s = s * (qk_scale * LOG2E)
    if MASKED:
        visible = row_ok[:, None] & in_range[None, :] & (n[None, :] <= pos[:, None])      # PA-7
        if HAS_WINDOW:
            visible = visible & (n[None, :] > pos[:, None] - window)                          # PA-15
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)     # rows with nothing visible yet
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = m_new
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(DOT_DTYPE), v.to(DOT_DTYPE), acc=acc, input_precision="ieee")
    return acc, m_new, l_i


@triton.jit
def prefill_kernel(
        q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, kv_lens_ptr, indptr_ptr, page_ptr, cu_q_ptr, sinks_ptr,
        ks_ptr, vs_ptr, num_seqs, min_q, window, cap, qk_scale, v_scale, stride_sp, stride_ss, stride_sh,
        stride_qt, stride_qh, stride_qd, stride_kp, stride_ks, stride_kh, stride_kd,
        stride_vp, stride_vs, stride_vh, stride_vd, stride_ot, stride_oh, stride_od,
        stride_kl, stride_ip, stride_ps, stride_pp, stride_cu, stride_lt,
        PAGE: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
        BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr,
        HAS_WINDOW: tl.constexpr, HAS_CAP: tl.constexpr, HAS_SINKS: tl.constexpr, WRITE_LSE: tl.constexpr,
        DOT_DTYPE: tl.constexpr, SCALE_MODE: tl.constexpr, CSR: tl.constexpr, OFFSET: tl.constexpr):
    """Sequences with q_len >= min_q only (the decode kernel takes the rest). Grid (tile ids, Hkv).
    SCALE_MODE (PA-18, PA-48): 0 one scale per pool (folded into qk_scale / v_scale), 1 per KV head
    (ks_ptr, vs_ptr: float32[Hkv]), 2 per token slot and KV head (float32[P, page_size, Hkv]).
    OFFSET: the integer type of element offsets (tl.int64; tl.int32 only in the offset mutant,
    backends/triton/offset_mutant.py)."""
    kvh = tl.program_id(1)
    if SCALE_MODE == 1:
        qk_scale = qk_scale * tl.load(ks_ptr + kvh * stride_sh)
        v_scale = v_scale * tl.load(vs_ptr + kvh * stride_sh)
    seq, q_start, q_end, first_pos, lo, hi, page_base, q_len = tile_setup(
        cu_q_ptr, stride_cu, kv_lens_ptr, stride_kl, indptr_ptr, stride_ip, stride_ps, stride_pp, PAGE,
        num_seqs, window, BLOCK_Q, HAS_WINDOW, CSR, LAST_TILE_FIRST=True)
    if (q_start < q_end) & (q_len >= min_q):
        BLOCK_M: tl.constexpr = BLOCK_Q * GROUP_PAD
        tok, head, row_ok, pos, d_offs, q = q_tile(
            q_ptr, q_start, q_end, first_pos, kvh, stride_qt, stride_qh, stride_qd,
            D, D_PAD, GROUP, GROUP_PAD, BLOCK_Q, DOT_DTYPE)
        last_pos = first_pos + (q_end - q_start) - 1
        start = (lo // BLOCK_N) * BLOCK_N
        full_lo = start
        if HAS_WINDOW:   # keys > last_pos - window are inside every row's window
            full_lo = tl.maximum(start, tl.cdiv(tl.maximum(last_pos - window + 1, 0), BLOCK_N) * BLOCK_N)
        full_hi = tl.maximum(((first_pos + 1) // BLOCK_N) * BLOCK_N, full_lo)   # keys <= first_pos: causal for all
        head_hi = tl.minimum(full_lo, hi)

        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D_PAD], tl.float32)
        for n0 in tl.range(start, head_hi, BLOCK_N):
            acc, m_i, l_i = _kv_tile(
                acc, m_i, l_i, q, n0, lo, hi, pos, row_ok, window, cap, qk_scale, page_base, kvh,
                k_ptr, v_ptr, page_ptr, ks_ptr, vs_ptr, d_offs, stride_pp, stride_kp, stride_ks, stride_kh,
                stride_kd, stride_vp, stride_vs, stride_vh, stride_vd, stride_sp, stride_ss, stride_sh,
                PAGE, D, D_PAD, BLOCK_N, True, HAS_WINDOW, HAS_CAP, DOT_DTYPE, SCALE_MODE, OFFSET)
        for n0 in tl.range(full_lo, full_hi, BLOCK_N, num_stages=NUM_STAGES):
            acc, m_i, l_i = _kv_tile(
                acc, m_i, l_i, q, n0, lo, hi, pos, row_ok, window, cap, qk_scale, page_base, kvh,
                k_ptr, v_ptr, page_ptr, ks_ptr, vs_ptr, d_offs, stride_pp, stride_kp, stride_ks, stride_kh,
                stride_kd, stride_vp, stride_vs, stride_vh, stride_vd, stride_sp, stride_ss, stride_sh,
                PAGE, D, D_PAD, BLOCK_N, False, HAS_WINDOW, HAS_CAP, DOT_DTYPE, SCALE_MODE, OFFSET)
        for n0 in tl.range(full_hi, hi, BLOCK_N):
            acc, m_i, l_i = _kv_tile(
                acc, m_i, l_i, q, n0, lo, hi, pos, row_ok, window, cap, qk_scale, page_base, kvh,
                k_ptr, v_ptr, page_ptr, ks_ptr, vs_ptr, d_offs, stride_pp, stride_kp, stride_ks, stride_kh,
                stride_kd, stride_vp, stride_vs, stride_vh, stride_vd, stride_sp, stride_ss, stride_sh,
                PAGE, D, D_PAD, BLOCK_N, True, HAS_WINDOW, HAS_CAP, DOT_DTYPE, SCALE_MODE, OFFSET)

        acc = acc * v_scale
        if HAS_SINKS:   # PA-17: exp(sink) joins the denominator only
            sink = tl.load(sinks_ptr + head, mask=row_ok, other=float("-inf")).to(tl.float32) * LOG2E
            m_fin = tl.maximum(m_i, sink)
            m_fin = tl.where(m_fin == float("-inf"), 0.0, m_fin)
            corr = tl.exp2(m_i - m_fin)
            l_i = l_i * corr + tl.exp2(sink - m_fin)
            acc = acc * corr[:, None]
            m_i = m_fin
        l_safe = tl.where(l_i > 0, l_i, 1.0)          # rows with no key (kv_len 0): output 0
        out = acc / l_safe[:, None]
        o_rows = (q_start + tok).to(tl.int64) * stride_ot + head * stride_oh
        tl.store(out_ptr + o_rows[:, None] + d_offs[None, :] * stride_od, out.to(out_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & (d_offs[None, :] < D))
        if WRITE_LSE:   # natural units, as the scores kernel reads it
            tl.store(lse_ptr + (q_start + tok) * stride_lt + head, (m_i + tl.log2(l_safe)) * LN2, mask=row_ok)
