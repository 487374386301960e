"""Absorbed MLA over a paged latent cache (spec/mla.md, ML-*): one kernel for decode rows and prefill chunks.

Work decomposition. One program per (valid query row, block of BLOCK_H heads, KV split): a host-side plan
lists the rows, their sequence and position (ML-5); MLA has one KV head (ML-2), so every latent token and
RoPE key a program loads serves its BLOCK_H heads, and the programs of one row's head blocks are adjacent
in the (flattened) first grid axis, so they read the same tiles at about the same time (from L2). Rows
and head blocks share the first axis (limit 2**31 - 1 programs); splits are the second.
The program walks its share of the keys its row sees, [lo, pos], in tiles of BLOCK_N tokens (each token's
page from the page table, so pages are read in place in any physical order, ML-1). Logits are
q_nope . c_kv^T + q_pe . k_pe^T with tl.dot on the dot dtype (the 16-bit activation dtype natively, float32
accumulation; float32 "ieee" under the interpreter and for float32 inputs), scaled (ML-3), soft-capped,
masked to -inf by selection, folded into an online softmax in float32; the output accumulates
P . c_kv (ML-4: the values are the latent tokens themselves), P rounded to the dot dtype as NU-PA1 allows.
Without a split the sink joins the denominator after the walk (ML-6); with NUM_SPLITS > 1 each split
writes a partial (normalised output, max, sum) and paged_attention's combine kernel merges them, adding
the sink once. Loads are masked to the visible range, so NaN in unused slots, pages, table entries or
padding rows never enters the arithmetic (ML-7).

tl.dot needs every dimension >= 16, so heads, d_c, d_r and the key tile are padded to at least 16
(masked lanes load 0). DeepSeek-V3 (H 128, d_c 512, d_r 64) runs natively in 64-head blocks
(`launch_defaults`).
"""
from ._runtime import configure

configure()

import numpy as np  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .attention_tiles import soft_cap  # noqa: E402  one soft-cap formula for both attention kernels
from .attention_launch import attention_dot_dtype  # noqa: E402
from .paged_attention import combine_kernel  # noqa: E402


@triton.jit
def _mla_kernel(qn_ptr, qp_ptr, c_ptr, r_ptr, out_ptr, part_ptr, part_ml_ptr, rows_ptr, seqs_ptr, pos_ptr,
                page_ptr, sinks_ptr, sm_scale, window, cap, page_size, H,
                s_qn_t, s_qn_h, s_qn_d, s_qp_t, s_qp_h, s_qp_d,
                s_c_p, s_c_s, s_c_d, s_r_p, s_r_s, s_r_d, s_pt_s, s_pt_p, s_o_t, s_o_h, s_o_d,
                s_pa_s, s_pa_t, s_pa_h, s_ml_s, s_ml_t,
                DC: tl.constexpr, DR: tl.constexpr, BLOCK_H: tl.constexpr, DC_PAD: tl.constexpr,
                DR_PAD: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
                HAS_WINDOW: tl.constexpr, HAS_CAP: tl.constexpr, HAS_SINKS: tl.constexpr,
                DOT_DTYPE: tl.constexpr):
    """Grid (plan rows x head blocks, NUM_SPLITS). Partials (NUM_SPLITS > 1): part float32[S, T, H, DC],
    part_ml float32[S, T, H, 2] (max, sum), merged by paged_attention.combine_kernel."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    n_hb = tl.cdiv(H, BLOCK_H)
    plan = pid // n_hb
    row = tl.load(rows_ptr + plan).to(tl.int64)
    seq = tl.load(seqs_ptr + plan).to(tl.int64)
    pos = tl.load(pos_ptr + plan)
    h = (pid % n_hb) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = h < H
    dc = tl.arange(0, DC_PAD)
    dr = tl.arange(0, DR_PAD)
    qn = tl.load(qn_ptr + row * s_qn_t + h[:, None] * s_qn_h + dc[None, :] * s_qn_d,
                 mask=h_ok[:, None] & (dc[None, :] < DC), other=0.0).to(DOT_DTYPE)
    qp = tl.load(qp_ptr + row * s_qp_t + h[:, None] * s_qp_h + dr[None, :] * s_qp_d,
                 mask=h_ok[:, None] & (dr[None, :] < DR), other=0.0).to(DOT_DTYPE)

    hi = pos + 1                       # ML-5: keys j <= pos
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(pos - window + 1, 0)
    start = (lo // BLOCK_N) * BLOCK_N
    per_split = tl.cdiv(tl.cdiv(hi - start, BLOCK_N), NUM_SPLITS)
    b0 = start + split * per_split * BLOCK_N
    b1 = tl.minimum(hi, b0 + per_split * BLOCK_N)

    m = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, DC_PAD], tl.float32)
    for n0 in range(b0, b1, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        ok = (n >= lo) & (n < hi)
        page = tl.load(page_ptr + seq * s_pt_s + (n // page_size) * s_pt_p, mask=ok, other=0).to(tl.int64)
        slot = (n % page_size).to(tl.int64)
        c = tl.load(c_ptr + page[:, None] * s_c_p + slot[:, None] * s_c_s + dc[None, :] * s_c_d,
                    mask=ok[:, None] & (dc[None, :] < DC), other=0.0).to(DOT_DTYPE)       # [BLOCK_N, DC_PAD]
        r = tl.load(r_ptr + page[:, None] * s_r_p + slot[:, None] * s_r_s + dr[None, :] * s_r_d,
                    mask=ok[:, None] & (dr[None, :] < DR), other=0.0).to(DOT_DTYPE)       # [BLOCK_N, DR_PAD]
        s = tl.dot(qn, tl.trans(c), input_precision="ieee")
        s = tl.dot(qp, tl.trans(r), acc=s, input_precision="ieee")
        s = s * sm_scale                                  # ML-3
        if HAS_CAP:
            s = soft_cap(s, cap)                          # PA-16 order: after scaling, before masking
        s = tl.where(ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)    # a split whose keys lie before the window
        alpha = tl.exp(m - m_use)
        p = tl.exp(s - m_use[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(DOT_DTYPE), c, acc=acc * alpha[:, None], input_precision="ieee")   # ML-4
        m = m_new
    if NUM_SPLITS == 1:
        if HAS_SINKS:                                     # PA-17: the sink joins the denominator only
            sink = tl.load(sinks_ptr + h, mask=h_ok, other=float("-inf"))
            m_new = tl.maximum(m, sink)
            alpha = tl.exp(m - m_new)
            l = l * alpha + tl.exp(sink - m_new)
            acc = acc * alpha[:, None]
        out = acc / l[:, None]
        tl.store(out_ptr + row * s_o_t + h[:, None] * s_o_h + dc[None, :] * s_o_d, out.to(out_ptr.dtype.element_ty),
                 mask=h_ok[:, None] & (dc[None, :] < DC))
    else:
        out = acc / tl.where(l > 0, l, 1.0)[:, None]
        tl.store(part_ptr + split * s_pa_s + row * s_pa_t + h[:, None] * s_pa_h + dc[None, :], out,
                 mask=h_ok[:, None] & (dc[None, :] < DC))
        ml = split * s_ml_s + row * s_ml_t + h * 2
        tl.store(part_ml_ptr + ml, m, mask=h_ok)
        tl.store(part_ml_ptr + ml + 1, l, mask=h_ok)


def row_plan(kv_lens: np.ndarray, cu_q_lens: np.ndarray, num_seqs: int) -> tuple[np.ndarray, ...]:
    """(rows, seqs, positions) int32 of every counted query row (ML-5): row cu_q_lens[i] + t of sequence i
    sits at kv_len_i - q_len_i + t. Padding rows past cu_q_lens[num_seqs] are not listed."""
    rows, seqs, pos = [], [], []
    for i in range(num_seqs):
        q0, q1, kv = int(cu_q_lens[i]), int(cu_q_lens[i + 1]), int(kv_lens[i])
        rows.extend(range(q0, q1))
        seqs.extend([i] * (q1 - q0))
        pos.extend(range(kv - (q1 - q0), kv))
    return tuple(np.asarray(a, np.int32) for a in (rows, seqs, pos))


#: Native launch for DeepSeek-V3's dims (d_c 512, d_r 64), not yet swept on a GPU (sweep_attention.py
#: --mla times the neighbours): 64 heads per program (wgmma's M), 32 keys per tile, 8 warps, 2 stages.
NATIVE_BLOCK_H = 64
NATIVE_BLOCK_N = 32


def launch_defaults(num_rows: int, H: int, d_c: int, max_kv: int, *, interpret: bool,
                    sm_count: int | None = None) -> dict:
    """block_h, block_n, num_splits, num_warps, num_stages of one call of `mla_paged_attention`.

    Split rule (as paged_attention.launch_defaults'): when rows x head blocks give fewer than
    SPLIT_PROGRAMS_PER_SM programs per SM and the longest row sees at least NATIVE_SPLIT_MIN_KEYS keys per
    split, split the keys into equal segments until they do (64 rows x 4096 keys at H 128: 128 programs,
    3 splits). Under the interpreter: 16 heads and keys per tile (tl.dot's minimum; programs run one after
    another there), 2..4 splits of 64 keys from 64 keys on, so the partial/combine path is reachable."""
    from . import paged_attention as pa
    if interpret:
        block_h, block_n = max(16, min(64, triton.next_power_of_2(H))), 16
        splits = min(4, -(-max_kv // 64)) if max_kv >= 64 else 1
        return dict(block_h=block_h, block_n=block_n, num_splits=max(1, splits), num_warps=None, num_stages=None)
    block_h = max(16, min(NATIVE_BLOCK_H, triton.next_power_of_2(H)))
    block_n = NATIVE_BLOCK_N if d_c >= 256 else 64
    programs = max(1, num_rows * -(-H // block_h))
    target = pa.SPLIT_PROGRAMS_PER_SM * (sm_count or pa.NATIVE_SM_COUNT)
    splits = min(-(-target // programs), max(1, max_kv // pa.NATIVE_SPLIT_MIN_KEYS))
    blocks = -(-max(max_kv, 1) // block_n)
    splits = -(-blocks // -(-blocks // max(1, splits)))
    return dict(block_h=block_h, block_n=block_n, num_splits=int(max(1, splits)),
                num_warps=8 if block_h * max(d_c, 16) >= 64 * 256 else 4, num_stages=2)


def mla_paged_attention(q_nope, q_pe, c_kv, k_pe, page_indices, plan, *, sm_scale: float, sliding_window=None,
                        soft_cap=None, sinks=None, interpret: bool = False, block_h=None, block_n=None,
                        num_splits=1, num_warps=None, num_stages=None, out_dtype=None):
    """Launch the kernel (and the combine when split). q_nope [T, H, d_c], q_pe [T, H, d_r],
    c_kv [P, page_size, d_c], k_pe [P, page_size, d_r] (torch tensors of float dtypes, on one device),
    page_indices int [S, *], plan = row_plan(...) as torch int32 tensors, sinks float32 [H] or None;
    launch keywords from `launch_defaults`. Returns out [T, H, d_c] (float32, or out_dtype); rows not in
    the plan are unspecified (ML-7)."""
    import torch
    T, H, DC = q_nope.shape
    DR = q_pe.shape[2]
    page_size = c_kv.shape[1]
    out = torch.empty((T, H, DC), dtype=out_dtype or torch.float32, device=q_nope.device)
    rows, seqs, pos = plan
    if rows.numel() == 0:
        return out
    block_h = block_h or max(16, triton.next_power_of_2(H))
    block_n = block_n or 16
    dc_pad, dr_pad = max(16, triton.next_power_of_2(DC)), max(16, triton.next_power_of_2(DR))
    same = q_pe.dtype == q_nope.dtype and k_pe.dtype == c_kv.dtype
    dot = attention_dot_dtype(q_nope.dtype, c_kv.dtype, interpret) if same else tl.float32
    if num_splits > 1:
        part = torch.empty((num_splits, T, H, DC), dtype=torch.float32, device=q_nope.device)
        part_ml = torch.empty((num_splits, T, H, 2), dtype=torch.float32, device=q_nope.device)
    else:
        part, part_ml = out, out                 # never written without a split
    sinks_t = sinks if sinks is not None else out          # never read without HAS_SINKS
    launch = {k: v for k, v in (("num_warps", num_warps), ("num_stages", num_stages)) if v is not None}
    _mla_kernel[(rows.numel() * triton.cdiv(H, block_h), num_splits)](
        q_nope, q_pe, c_kv, k_pe, out, part, part_ml, rows, seqs, pos, page_indices, sinks_t,
        float(sm_scale), int(sliding_window or 0), float(soft_cap or 1.0), page_size, H,
        *q_nope.stride(), *q_pe.stride(), *c_kv.stride(), *k_pe.stride(), *page_indices.stride(), *out.stride(),
        part.stride(0), part.stride(1), part.stride(2), part_ml.stride(0), part_ml.stride(1),
        DC=DC, DR=DR, BLOCK_H=block_h, DC_PAD=dc_pad, DR_PAD=dr_pad, BLOCK_N=block_n, NUM_SPLITS=num_splits,
        HAS_WINDOW=sliding_window is not None, HAS_CAP=soft_cap is not None, HAS_SINKS=sinks is not None,
        DOT_DTYPE=dot, **launch)
    if num_splits > 1:   # padding rows merge unspecified partials (ML-7)
        combine_kernel[(T, H)](
            part, part_ml, out, out, sinks_t, H,
            part.stride(0), part.stride(1), part.stride(2), part_ml.stride(0), part_ml.stride(1),
            *out.stride(), 0,
            D=DC, D_PAD=triton.next_power_of_2(DC), NUM_SPLITS=num_splits,
            SPLITS_PAD=triton.next_power_of_2(num_splits), HAS_SINKS=sinks is not None, WRITE_LSE=False)
    return out
