"""Ragged paged attention kernels (spec/paged_attention.md, PA-*): prefill and decode in one launch.

Work decomposition. Query rows are cut into tiles of BLOCK_Q tokens per sequence; one program handles
one tile and one KV head, with all GROUP query heads of that KV head packed into the tile's rows
(row r = token r // GROUP_PAD, head kv_head * GROUP + r % GROUP_PAD), so each K/V element is loaded once
per tile. Tile ids are laid out like vLLM's unified kernel: sequence i owns ids starting at
cu_q_lens[i] // BLOCK_Q + i, which needs no host-side metadata and covers every tile; a program finds
its sequence by binary search over cu_q_lens.

The program walks the KV tokens its rows can see in blocks of BLOCK_N tokens (a token's page is looked
up through the page table, so any page size works; the page table is a block table or, with the
constexpr CSR, FlashInfer/TVM's CSR form read in place, spec/metadata.md MD-23), with an online
softmax in float32. Blocks before the first row's sliding window and after the last row's causal limit
are never visited (PA-15), and loads are masked to the visited range, so NaN/Inf in unused slots or
pages never enters the arithmetic (PA-24). Masked logits are selected to -inf, never multiplied by 0.

Split-KV: for long decode sequences a third grid axis cuts the KV range into NUM_SPLITS segments; each
writes a partial (normalised output, max, sum) and `_combine_kernel` merges them, adding the sink once.
Scores (PA-21): a second pass over the same ranges with the final log-sum-exp of every row adds the
probabilities, summed over rows and heads, into scores[seq, token] with atomic adds.
"""
from ._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _find_sequence(cu_q_ptr, stride_cu, num_seqs, pid, BLOCK_Q: tl.constexpr):
    """Largest i < num_seqs with cu_q_lens[i] // BLOCK_Q + i <= pid (binary search)."""
    lo = 0
    hi = num_seqs - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        start = tl.load(cu_q_ptr + mid * stride_cu) // BLOCK_Q + mid
        if start <= pid:
            lo = mid
        else:
            hi = mid - 1
    return lo


@triton.jit
def _soft_cap(s, cap):
    """cap * tanh(s / cap) without overflow: tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|) <= 1."""
    x = s / cap
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return cap * tl.where(x < 0, -t, t)


@triton.jit
def _tile_setup(cu_q_ptr, stride_cu, kv_lens_ptr, stride_kl, indptr_ptr, stride_ip, stride_ps, stride_pp,
                page_size, num_seqs, window, BLOCK_Q: tl.constexpr, HAS_WINDOW: tl.constexpr, CSR: tl.constexpr):
    """Sequence, row range, visible KV range [lo, hi) and page-table base of this program's query tile.

    The page table is read in one of two forms (spec/metadata.md MD-1), chosen by the constexpr CSR:
      block table: kv_lens_ptr = kv_lens i32[S], page_ptr = page_indices [S, pages_per_seq]; the
          sequence's pages start at element seq * stride_ps;
      CSR (MD-2, MD-3): kv_lens_ptr = kv_last_page_len i32[S], indptr_ptr = kv_indptr i32[S+1],
          page_ptr = kv_indices i32[nnz]; the pages start at element kv_indptr[seq] * stride_pp and
          kv_len = (n - 1) * page_size + kv_last_page_len with n = kv_indptr[seq+1] - kv_indptr[seq]
          pages (0 for an empty sequence, MD-4).
    Page j of the sequence is then page_ptr[page_base + j * stride_pp] in both forms.
    """
    pid = tl.program_id(0)
    seq = _find_sequence(cu_q_ptr, stride_cu, num_seqs, pid, BLOCK_Q)
    q_begin = tl.load(cu_q_ptr + seq * stride_cu)
    q_stop = tl.load(cu_q_ptr + (seq + 1) * stride_cu)
    tile = pid - (q_begin // BLOCK_Q + seq)
    q_start = q_begin + tile * BLOCK_Q
    q_end = tl.minimum(q_stop, q_start + BLOCK_Q)
    if CSR:
        first_page = tl.load(indptr_ptr + seq * stride_ip)
        n_pages = tl.load(indptr_ptr + (seq + 1) * stride_ip) - first_page
        last_len = tl.load(kv_lens_ptr + seq * stride_kl)
        kv_len = tl.where(n_pages > 0, (n_pages - 1) * page_size + last_len, 0)     # MD-3, MD-4
        page_base = first_page.to(tl.int64) * stride_pp
    else:
        kv_len = tl.load(kv_lens_ptr + seq * stride_kl)
        page_base = seq * stride_ps
    first_pos = kv_len - (q_stop - q_begin) + (q_start - q_begin)  # PA-6
    hi = tl.minimum(kv_len, first_pos + (q_end - q_start))          # last row sees keys <= its pos
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(first_pos - window + 1, 0)
    return seq, q_start, q_end, first_pos, lo, hi, page_base


@triton.jit
def _q_tile(q_ptr, q_start, q_end, first_pos, kvh, stride_qt, stride_qh, stride_qd,
            D: tl.constexpr, D_PAD: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
            BLOCK_Q: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """The query rows of this program's tile: one load, shared by the attention and the scores kernel.

    Row r of the tile is token r // GROUP_PAD and query head kvh * GROUP + r % GROUP_PAD (PA-12): the
    GROUP heads sharing KV head kvh sit in one tile, so each K/V element is loaded once per tile.
    With BLOCK_M = BLOCK_Q * GROUP_PAD, returns
        tok:    int[BLOCK_M]   token of each row within the tile
        head:   int[BLOCK_M]   query head of each row
        row_ok: bool[BLOCK_M]  a real token (< q_end) and a real head (< GROUP)
        pos:    int[BLOCK_M]   position of the row's token (PA-6)
        d_offs: int[D_PAD]     head-dim offsets
        q:      DOT_DTYPE[BLOCK_M, D_PAD], 0 in padding rows and columns (masked, never read)
    """
    BLOCK_M: tl.constexpr = BLOCK_Q * GROUP_PAD
    r = tl.arange(0, BLOCK_M)
    tok = r // GROUP_PAD
    g = r % GROUP_PAD
    row_ok = (q_start + tok < q_end) & (g < GROUP)
    head = kvh * GROUP + g
    pos = first_pos + tok
    d_offs = tl.arange(0, D_PAD)
    q_rows = (q_start + tok).to(tl.int64) * stride_qt + head * stride_qh
    q = tl.load(q_ptr + q_rows[:, None] + d_offs[None, :] * stride_qd,
                mask=row_ok[:, None] & (d_offs[None, :] < D), other=0.0).to(DOT_DTYPE)
    return tok, head, row_ok, pos, d_offs, q


@triton.jit
def _logits(q, page_base, n_offs, lo, hi, pos, row_ok, window, cap, qk_scale,
            k_ptr, page_ptr, stride_pp, stride_kp, stride_ks, stride_kd, kvh_off, page_size,
            d_offs, ks_ptr, sc_off, stride_sp, stride_ss, D: tl.constexpr, HAS_WINDOW: tl.constexpr,
            HAS_CAP: tl.constexpr, DOT_DTYPE: tl.constexpr, TOKEN_SCALES: tl.constexpr):
    """Masked, scaled (and capped) logits of one KV block: float32[BLOCK_M, BLOCK_N], -inf where hidden.
    Key j's page is page_ptr[page_base + (j // page_size) * stride_pp] (either page-table form, see
    _tile_setup). With TOKEN_SCALES each key's column is scaled by the k scale beside its slot (PA-48)."""
    in_range = (n_offs >= lo) & (n_offs < hi)
    page = tl.load(page_ptr + page_base + (n_offs // page_size) * stride_pp, mask=in_range, other=0)
    page = page.to(tl.int64)  # element offsets may pass 2**31 in large pools
    slot = (n_offs % page_size).to(tl.int64)
    k_off = page * stride_kp + slot * stride_ks + kvh_off
    k_t = tl.load(k_ptr + k_off[None, :] + d_offs[:, None] * stride_kd,
                  mask=in_range[None, :] & (d_offs[:, None] < D), other=0.0)
    s = tl.dot(q, k_t.to(DOT_DTYPE), input_precision="ieee") * qk_scale
    if TOKEN_SCALES:
        k_s = tl.load(ks_ptr + page * stride_sp + slot * stride_ss + sc_off, mask=in_range, other=0.0)
        s = s * k_s.to(tl.float32)[None, :]
    if HAS_CAP:
        s = _soft_cap(s, cap)
    visible = row_ok[:, None] & in_range[None, :] & (n_offs[None, :] <= pos[:, None])  # PA-7
    if HAS_WINDOW:
        visible = visible & (n_offs[None, :] > pos[:, None] - window)  # PA-15
    return tl.where(visible, s, float("-inf")), page, slot, in_range


@triton.jit
def _attention_kernel(
        q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, part_ptr, part_ml_ptr,
        kv_lens_ptr, indptr_ptr, page_ptr, cu_q_ptr, sinks_ptr, ks_ptr, vs_ptr,
        num_seqs, page_size, window, cap, qk_scale, v_scale, stride_sp, stride_ss, stride_sh,
        stride_qt, stride_qh, stride_qd, stride_kp, stride_ks, stride_kh, stride_kd,
        stride_vp, stride_vs, stride_vh, stride_vd, stride_ot, stride_oh, stride_od,
        stride_kl, stride_ip, stride_ps, stride_pp, stride_cu, stride_lt,
        stride_pst, stride_ptt, stride_pth, stride_mls, stride_mlt,
        D: tl.constexpr, D_PAD: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
        BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
        HAS_WINDOW: tl.constexpr, HAS_CAP: tl.constexpr, HAS_SINKS: tl.constexpr,
        WRITE_LSE: tl.constexpr, DOT_DTYPE: tl.constexpr, SCALE_MODE: tl.constexpr, CSR: tl.constexpr):
    """CSR selects the page-table form (see _tile_setup). SCALE_MODE (PA-18, PA-48): 0 one scale per pool (folded into qk_scale / v_scale), 1 per KV head
    (ks_ptr, vs_ptr: float32[Hkv]), 2 per token slot and KV head (float32[P, page_size, Hkv])."""
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    if SCALE_MODE == 1:
        qk_scale = qk_scale * tl.load(ks_ptr + kvh * stride_sh)
        v_scale = v_scale * tl.load(vs_ptr + kvh * stride_sh)
    seq, q_start, q_end, first_pos, lo, hi, page_base = _tile_setup(
        cu_q_ptr, stride_cu, kv_lens_ptr, stride_kl, indptr_ptr, stride_ip, stride_ps, stride_pp, page_size,
        num_seqs, window, BLOCK_Q, HAS_WINDOW, CSR)
    if q_start < q_end:
        BLOCK_M: tl.constexpr = BLOCK_Q * GROUP_PAD
        tok, head, row_ok, pos, d_offs, q = _q_tile(
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
                SCALE_MODE == 2)
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
            alpha = tl.exp(m_i - m_safe)
            p = tl.exp(s - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v_off = page * stride_vp + slot * stride_vs + kvh * stride_vh
            v = tl.load(v_ptr + v_off[:, None] + d_offs[None, :] * stride_vd,
                        mask=in_range[:, None] & (d_offs[None, :] < D), other=0.0).to(tl.float32)
            if SCALE_MODE == 2:   # PA-48: each value row times the v scale beside its slot
                v_s = tl.load(vs_ptr + page * stride_sp + slot * stride_ss + kvh * stride_sh, mask=in_range,
                              other=0.0)
                v = v * v_s.to(tl.float32)[:, None]
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
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
            tl.store(out_ptr + o_rows[:, None] + d_offs[None, :] * stride_od, out,
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
def _combine_kernel(part_ptr, part_ml_ptr, out_ptr, lse_ptr, sinks_ptr, Hq,
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
    tl.store(out_ptr + t.to(tl.int64) * stride_ot + h * stride_oh + d * stride_od, out, mask=d < D)
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
        CSR: tl.constexpr):
    """PA-21: scores[seq, j] += sum over this tile's rows and heads of exp(s - lse)."""
    kvh = tl.program_id(1)
    if SCALE_MODE == 1:
        qk_scale = qk_scale * tl.load(ks_ptr + kvh * scale_sh)
    seq, q_start, q_end, first_pos, lo, hi, page_base = _tile_setup(
        cu_q_ptr, stride_cu, kv_lens_ptr, stride_kl, indptr_ptr, stride_ip, stride_ps, stride_pp, page_size,
        num_seqs, window, BLOCK_Q, HAS_WINDOW, CSR)
    if q_start < q_end:
        tok, head, row_ok, pos, d_offs, q = _q_tile(
            q_ptr, q_start, q_end, first_pos, kvh, stride_qt, stride_qh, stride_qd,
            D, D_PAD, GROUP, GROUP_PAD, BLOCK_Q, DOT_DTYPE)
        lse = tl.load(lse_ptr + (q_start + tok) * stride_lt + head, mask=row_ok, other=0.0)
        for n0 in range((lo // BLOCK_N) * BLOCK_N, hi, BLOCK_N):
            n_offs = n0 + tl.arange(0, BLOCK_N)
            s, page, slot, in_range = _logits(
                q, page_base, n_offs, lo, hi, pos, row_ok, window, cap, qk_scale, k_ptr, page_ptr,
                stride_pp, stride_kp, stride_ks, stride_kd, kvh * stride_kh, page_size,
                d_offs, ks_ptr, kvh * scale_sh, scale_sp, scale_ss, D, HAS_WINDOW, HAS_CAP, DOT_DTYPE,
                SCALE_MODE == 2)
            p = tl.exp(s - lse[:, None])
            tl.atomic_add(scores_ptr + seq * stride_ss + n_offs, tl.sum(p, 0), mask=in_range)


def attention_dot_dtype(q_dtype, kv_dtype, interpret: bool):
    """Operand dtype of Q.K^T. Casting K to a 16-bit q dtype is exact for 16-bit, fp8 and int8 caches
    (their values are all representable), so on GPUs the tensor-core path loses nothing; the
    interpreter always computes in float32 (same exact products)."""
    import torch
    if interpret or q_dtype not in (torch.float16, torch.bfloat16):
        return tl.float32
    if kv_dtype in (q_dtype, torch.float8_e4m3fn, torch.float8_e5m2, torch.int8):
        return tl.bfloat16 if q_dtype == torch.bfloat16 else tl.float16
    return tl.float32


#: Native launch defaults, from the H100 sweep (benchmarks/triton/sweep_attention.py, results in
#: benchmarks/triton/results/h100_sweep_attention.json; bf16, Hq 32, Hkv 8, D 128, page 16):
#: prefill 4 x 2048 causal was fastest with 64 rows per tile (block_q 16 at group 4) and block_n 32;
#: decode 64 x 4096 with block_n 32 and no split (512 programs already fill the GPU); decode 1 x 32768
#: with 32 splits of block_n 64 (0.36 of copy bandwidth against 0.18 with 64 splits).
NATIVE_TILE_ROWS = 64
NATIVE_SPLIT_PROGRAMS = 256     # about two programs per SM of an H100 (132 SMs)
NATIVE_SPLIT_MIN_KEYS = 512     # keys per split below which the combine costs more than it saves
INTERPRET_SPLIT_KEYS = 128      # interpreter: small splits so the conformance cases reach the combine


def split_threshold(interpret: bool) -> int:
    """Keys from which a decode-like call splits the KV range (the backend's split_kv_min_keys claim):
    natively 2048, under the interpreter 256 so that small conformance cases reach split-KV."""
    return 256 if interpret else 2048


def launch_defaults(num_seqs: int, max_q: int, max_kv: int, num_kv_heads: int, group: int, *,
                    split_min_kv: int, interpret: bool) -> dict:
    """Launch parameters of `ragged_paged_attention` for one call: block_q, block_n, num_splits.

    Decode-like calls (every sequence's rows fit one minimal tile) whose longest sequence has at least
    `split_min_kv` keys split the KV range: natively into as many splits as bring the grid to about
    NATIVE_SPLIT_PROGRAMS programs (at least NATIVE_SPLIT_MIN_KEYS keys each), under the interpreter into
    2..16 splits of INTERPRET_SPLIT_KEYS keys, so that the split and combine code is what gets checked.
    """
    group_pad = triton.next_power_of_2(group)
    min_rows = max(1, 16 // group_pad)              # tl.dot needs >= 16 rows per tile
    decode_like = max_q <= min_rows
    if interpret:
        launch = {"block_q": min_rows, "block_n": 32}
    else:
        launch = {"block_q": min_rows if decode_like else max(min_rows, NATIVE_TILE_ROWS // group_pad),
                  "block_n": 32}
    if not decode_like or max_kv < split_min_kv:
        return {**launch, "num_splits": 1}
    if interpret:
        return {**launch, "num_splits": int(min(16, max(2, -(-max_kv // INTERPRET_SPLIT_KEYS))))}
    programs = max(1, num_seqs * num_kv_heads)
    splits = min(-(-NATIVE_SPLIT_PROGRAMS // programs), max(1, max_kv // NATIVE_SPLIT_MIN_KEYS))
    return {"block_q": min_rows, "block_n": 64 if splits > 1 else 32, "num_splits": int(max(1, splits))}


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
    """Launch the kernels on torch tensors (one device). Returns out float32[T, Hq, D] and, with
    return_scores, scores float32[S, pages_per_seq * page_size].

    q [T, Hq, D]; k_pages/v_pages [P, page_size, Hkv, D]; metadata int32/int64 tensors of any stride;
    num_seqs a Python int; sinks float32[Hq] or None; scales Python floats (float32 values) or None, or
    float32 tensors [Hkv] (per KV head) or [P, page_size, Hkv] (per token slot and head), PA-48.
    `launch`: num_splits, block_q, block_n, num_warps, num_stages (the attention kernel's launch; None:
    Triton's defaults) and interpret.
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
    kv_last_page_len (MD-3, MD-4); no block table is built. Returns out float32[T, Hq, D].

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
               num_splits=1, block_q=None, block_n=32, num_warps=None, num_stages=None, interpret=False):
    """Both page-table forms: launch the attention (split-KV combine, scores) kernels."""
    import torch
    T, Hq, D = q.shape
    page_size, Hkv = k_pages.shape[1], k_pages.shape[2]
    group = Hq // Hkv
    group_pad = triton.next_power_of_2(group)
    d_pad = max(16, triton.next_power_of_2(D))
    if block_q is None:
        block_q = max(1, 16 // group_pad)
    block_q = max(block_q, triton.cdiv(16, group_pad))  # tl.dot needs >= 16 rows
    out = torch.zeros((T, Hq, D), dtype=torch.float32, device=q.device)
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
    flags = dict(HAS_WINDOW=sliding_window is not None, HAS_CAP=soft_cap is not None)
    dot_dtype = attention_dot_dtype(q.dtype, k_pages.dtype, interpret)
    grid = (T // block_q + num_seqs, Hkv, num_splits)
    if num_splits > 1:
        part = torch.empty((num_splits, T, Hq, D), dtype=torch.float32, device=q.device)
        part_ml = torch.empty((num_splits, T, Hq, 2), dtype=torch.float32, device=q.device)
    else:
        part, part_ml = out, lse
    common = (num_seqs, page_size, window, cap, qk_scale)
    launch = {k: v for k, v in (("num_warps", num_warps), ("num_stages", num_stages)) if v is not None}
    _attention_kernel[grid](
        q, k_pages, v_pages, out, lse, part, part_ml, *table.args(), cu_q_lens, sinks_t, ks_t, vs_t,
        *common, v_scale_f, *scale_strides,
        *q.stride(), *k_pages.stride(), *v_pages.stride(), *out.stride(),
        *table.strides(), cu_q_lens.stride(0), lse.stride(0),
        part.stride(0), part.stride(1), part.stride(2), part_ml.stride(0), part_ml.stride(1),
        D=D, D_PAD=d_pad, GROUP=group, GROUP_PAD=group_pad, BLOCK_Q=block_q, BLOCK_N=block_n,
        NUM_SPLITS=num_splits, HAS_SINKS=sinks is not None, WRITE_LSE=return_scores,
        DOT_DTYPE=dot_dtype, SCALE_MODE=scale_mode, CSR=table.csr, **flags, **launch)
    if num_splits > 1:
        # Padding rows merge uninitialised partials: their output is unspecified (PA-25), and merging
        # all T rows avoids reading cu_q_lens on the host.
        _combine_kernel[(T, Hq)](
            part, part_ml, out, lse, sinks_t, Hq,
            part.stride(0), part.stride(1), part.stride(2), part_ml.stride(0), part_ml.stride(1),
            *out.stride(), lse.stride(0),
            D=D, D_PAD=d_pad, NUM_SPLITS=num_splits, SPLITS_PAD=triton.next_power_of_2(num_splits),
            HAS_SINKS=sinks is not None, WRITE_LSE=return_scores)
    if return_scores:
        _scores_kernel[grid[:2]](
            q, k_pages, lse, scores, *table.args(), cu_q_lens, ks_t, *common, *scale_strides,
            *q.stride(), *k_pages.stride(), *table.strides(),
            cu_q_lens.stride(0), lse.stride(0), scores.stride(0),
            D=D, D_PAD=d_pad, GROUP=group, GROUP_PAD=group_pad, BLOCK_Q=block_q, BLOCK_N=block_n,
            DOT_DTYPE=dot_dtype, SCALE_MODE=scale_mode, CSR=table.csr, **flags)
    return out, scores
