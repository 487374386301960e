"""Absorbed MLA over a paged latent cache (spec/mla.md, ML-*): one kernel for decode rows and prefill chunks.

Work decomposition. One program per valid query row (a host-side plan lists the rows, their sequence
and position, ML-5), with all H query heads of that row in the program: MLA has one KV head (ML-2), so
every latent token and RoPE key is loaded once per row and shared by all heads. The program walks the
keys its row sees, [lo, pos], in tiles of BLOCK_N tokens (a power of two covering at least one page);
each token's page comes from the page table, so pages are read in place in any physical order (ML-1).
Logits are q_nope . c_kv + q_pe . k_pe, scaled (ML-3), soft-capped, masked to -inf by selection, and
folded into an online softmax in float32; the output accumulates the latent tokens themselves (ML-4).
The sink joins the denominator once after the walk (ML-6). Loads are masked to the visible range, so
NaN in unused slots, pages, table entries or padding rows never enters the arithmetic (ML-7).

Products are formed by broadcasting ([H, BLOCK_N, d] then a sum), not tl.dot: the suite's dims are
tiny (d_c 4..8), below tl.dot's 16-element minimum, and the interpreter runs this form fastest.
"""
from ._runtime import configure

configure()

import numpy as np  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from .attention_tiles import soft_cap  # noqa: E402  one soft-cap formula for both attention kernels


@triton.jit
def _mla_row_kernel(qn_ptr, qp_ptr, c_ptr, r_ptr, out_ptr, rows_ptr, seqs_ptr, pos_ptr, page_ptr, sinks_ptr,
                    sm_scale, window, cap, page_size, H,
                    s_qn_t, s_qn_h, s_qn_d, s_qp_t, s_qp_h, s_qp_d,
                    s_c_p, s_c_s, s_c_d, s_r_p, s_r_s, s_r_d, s_pt_s, s_pt_p, s_o_t, s_o_h, s_o_d,
                    DC: tl.constexpr, DR: tl.constexpr, BLOCK_H: tl.constexpr, DC_PAD: tl.constexpr,
                    DR_PAD: tl.constexpr, BLOCK_N: tl.constexpr, HAS_WINDOW: tl.constexpr,
                    HAS_CAP: tl.constexpr, HAS_SINKS: tl.constexpr):
    pid = tl.program_id(0)
    row = tl.load(rows_ptr + pid).to(tl.int64)
    seq = tl.load(seqs_ptr + pid).to(tl.int64)
    pos = tl.load(pos_ptr + pid)
    h = tl.arange(0, BLOCK_H)
    h_ok = h < H
    dc = tl.arange(0, DC_PAD)
    dr = tl.arange(0, DR_PAD)
    qn = tl.load(qn_ptr + row * s_qn_t + h[:, None] * s_qn_h + dc[None, :] * s_qn_d,
                 mask=h_ok[:, None] & (dc[None, :] < DC), other=0.0).to(tl.float32)
    qp = tl.load(qp_ptr + row * s_qp_t + h[:, None] * s_qp_h + dr[None, :] * s_qp_d,
                 mask=h_ok[:, None] & (dr[None, :] < DR), other=0.0).to(tl.float32)

    hi = pos + 1                       # ML-5: keys j <= pos
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(pos - window + 1, 0)
    start = (lo // page_size) * page_size   # tiles start on a page boundary; the first holds key lo

    m = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, DC_PAD], tl.float32)
    for n0 in range(start, hi, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        ok = (n >= lo) & (n < hi)      # every tile holds a visible key: BLOCK_N >= page_size > lo - start
        page = tl.load(page_ptr + seq * s_pt_s + (n // page_size) * s_pt_p, mask=ok, other=0).to(tl.int64)
        slot = (n % page_size).to(tl.int64)
        c = tl.load(c_ptr + page[:, None] * s_c_p + slot[:, None] * s_c_s + dc[None, :] * s_c_d,
                    mask=ok[:, None] & (dc[None, :] < DC), other=0.0).to(tl.float32)      # [BLOCK_N, DC_PAD]
        r = tl.load(r_ptr + page[:, None] * s_r_p + slot[:, None] * s_r_s + dr[None, :] * s_r_d,
                    mask=ok[:, None] & (dr[None, :] < DR), other=0.0).to(tl.float32)      # [BLOCK_N, DR_PAD]
        s = tl.sum(qn[:, None, :] * c[None, :, :], axis=2) + tl.sum(qp[:, None, :] * r[None, :, :], axis=2)
        s = s * sm_scale                                  # ML-3
        if HAS_CAP:
            s = soft_cap(s, cap)                         # PA-16 order: after scaling, before masking
        s = tl.where(ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * c[None, :, :], axis=1)   # ML-4: values = latents
        m = m_new
    if HAS_SINKS:                                         # PA-17: the sink joins the denominator only
        sink = tl.load(sinks_ptr + h, mask=h_ok, other=float("-inf"))
        m_new = tl.maximum(m, sink)
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.exp(sink - m_new)
        acc = acc * alpha[:, None]
    out = acc / l[:, None]
    tl.store(out_ptr + row * s_o_t + h[:, None] * s_o_h + dc[None, :] * s_o_d, out,
             mask=h_ok[:, None] & (dc[None, :] < DC))


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


def mla_paged_attention(q_nope, q_pe, c_kv, k_pe, page_indices, plan, *, sm_scale: float, sliding_window=None,
                        soft_cap=None, sinks=None, interpret: bool = False):
    """Launch the kernel. q_nope [T, H, d_c], q_pe [T, H, d_r], c_kv [P, page_size, d_c],
    k_pe [P, page_size, d_r] (torch tensors of any float dtype, on one device), page_indices int [S, *],
    plan = row_plan(...) as torch int32 tensors, sinks float32 [H] or None.
    Returns out: float32 [T, H, d_c] (rows not in the plan are 0, unspecified by ML-7)."""
    import torch
    T, H, DC = q_nope.shape
    DR = q_pe.shape[2]
    page_size = c_kv.shape[1]
    out = torch.zeros((T, H, DC), dtype=torch.float32, device=q_nope.device)
    rows, seqs, pos = plan
    if rows.numel() == 0:
        return out
    BLOCK_N = max(triton.next_power_of_2(page_size), 2 if interpret else 16)
    _mla_row_kernel[(rows.numel(),)](
        q_nope, q_pe, c_kv, k_pe, out, rows, seqs, pos, page_indices,
        sinks if sinks is not None else out,        # never read without HAS_SINKS
        float(sm_scale), int(sliding_window or 0), float(soft_cap or 1.0), page_size, H,
        *q_nope.stride(), *q_pe.stride(), *c_kv.stride(), *k_pe.stride(), *page_indices.stride(), *out.stride(),
        DC=DC, DR=DR, BLOCK_H=triton.next_power_of_2(H), DC_PAD=triton.next_power_of_2(DC),
        DR_PAD=triton.next_power_of_2(DR), BLOCK_N=BLOCK_N, HAS_WINDOW=sliding_window is not None,
        HAS_CAP=soft_cap is not None, HAS_SINKS=sinks is not None)
    return out
