"""Query-tile helpers shared by the paged-attention kernels (decode, prefill, scores) and MLA.

Tile ids are laid out like vLLM's unified kernel: sequence i owns the ids starting at
cu_q_lens[i] // BLOCK_Q + i, which needs no host-side metadata and covers every tile of every sequence
(one id per sequence may be left empty); a program finds its sequence by binary search over cu_q_lens.
Within a query tile, row r is token r // GROUP_PAD and query head kv_head * GROUP + r % GROUP_PAD
(PA-12): the GROUP heads sharing one KV head sit in one tile, so each K/V element is loaded once per tile.
"""
from ._runtime import configure

configure()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def find_sequence(cu_q_ptr, stride_cu, num_seqs, pid, BLOCK_Q: tl.constexpr):
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
def soft_cap(s, cap):
    """cap * tanh(s / cap) without overflow: tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|) <= 1."""
    x = s / cap
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return cap * tl.where(x < 0, -t, t)


@triton.jit
def tile_setup(cu_q_ptr, stride_cu, kv_lens_ptr, stride_kl, indptr_ptr, stride_ip, stride_ps, stride_pp,
               page_size, num_seqs, window, BLOCK_Q: tl.constexpr, HAS_WINDOW: tl.constexpr, CSR: tl.constexpr,
               LAST_TILE_FIRST: tl.constexpr = False):
    """Sequence, row range, visible KV range [lo, hi), page-table base and query length of this program's
    query tile: (seq, q_start, q_end, first_pos, lo, hi, page_base, q_len); q_start == q_end for an empty id.

    LAST_TILE_FIRST numbers a sequence's tiles from its last (the one with the most keys under a causal
    mask) to its first, so that a GPU starts the longest programs of a prefill first.

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
    seq = find_sequence(cu_q_ptr, stride_cu, num_seqs, pid, BLOCK_Q)
    q_begin = tl.load(cu_q_ptr + seq * stride_cu)
    q_stop = tl.load(cu_q_ptr + (seq + 1) * stride_cu)
    tile = pid - (q_begin // BLOCK_Q + seq)
    if LAST_TILE_FIRST:
        tile = tl.cdiv(q_stop - q_begin, BLOCK_Q) - 1 - tile     # < 0 for the sequence's empty id
        tile = tl.where(tile < 0, tl.cdiv(q_stop - q_begin, BLOCK_Q), tile)
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
    return seq, q_start, q_end, first_pos, lo, hi, page_base, q_stop - q_begin


@triton.jit
def q_tile(q_ptr, q_start, q_end, first_pos, kvh, stride_qt, stride_qh, stride_qd,
           D: tl.constexpr, D_PAD: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
           BLOCK_Q: tl.constexpr, DOT_DTYPE: tl.constexpr):
    """The query rows of this program's tile: one load, shared by the attention and the scores kernels.

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
