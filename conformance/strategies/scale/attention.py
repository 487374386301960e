"""Scale cases and sampled comparisons of the attention ops (ragged_paged_attention, mla_paged_attention)."""
from __future__ import annotations

import numpy as np

from kvconform.conformance.engine.case import Case
from kvconform.conformance.strategies.values import floats
from kvconform.reference import dtypes

from .sampling import Sampled, periodic, spread_pages


def _pages_of(page_indices: np.ndarray, i: int, kv_len: int, page_size: int) -> np.ndarray:
    return np.asarray(page_indices[i, :-(-kv_len // page_size)] if kv_len else page_indices[i, :0])


def attention_sample(case: Case, seqs, rows_of: dict | None = None, *, pools=("k_pages", "v_pages"),
                     q_names=("q",), scale_names=("k_scale", "v_scale"), what="") -> Sampled:
    """The sampled part of a ragged attention call (`ragged_paged_attention` or `mla_paged_attention`,
    whose pools and query parts are named by `pools` / `q_names`): sequences `seqs` whole, except those in
    `rows_of` ({seq: row offsets}), each sampled row of which becomes a one-row sequence whose kv_len ends
    at the row's position (PA-6), so it sees the same keys. The pool holds only the pages these rows read
    (in order of first use); per-token scales (PA-48) travel with their pages."""
    x = case.inputs
    kv_lens, cu = np.asarray(x["kv_lens"]), np.asarray(x["cu_q_lens"])
    page_size = x[pools[0]].shape[1]
    rows_of = rows_of or {}
    sub_rows, sub_kv, sub_q = [], [], []          # one entry per sub-sequence
    for i in sorted(int(s) for s in seqs):
        q_len, kv = int(cu[i + 1] - cu[i]), int(kv_lens[i])
        if i in rows_of:
            for r in sorted(int(r) for r in rows_of[i]):
                sub_rows.append((i, [int(cu[i]) + r]))
                sub_kv.append(kv - q_len + r + 1)
                sub_q.append(1)
        else:
            sub_rows.append((i, list(range(int(cu[i]), int(cu[i + 1])))))
            sub_kv.append(kv)
            sub_q.append(q_len)
    used: dict[int, int] = {}
    tables = []
    for (i, _), kv in zip(sub_rows, sub_kv):
        pages = _pages_of(x["page_indices"], i, kv, page_size)
        tables.append([used.setdefault(int(p), len(used)) for p in pages])
    width = max([len(t) for t in tables] + [1])
    table = np.zeros((len(tables), width), dtype=np.int32)
    for j, t in enumerate(tables):
        table[j, :len(t)] = t
    order = np.fromiter(used, dtype=np.int64, count=len(used))
    global_rows = np.array([r for _, rs in sub_rows for r in rs], dtype=np.int64)
    inputs = dict(x)
    for name in q_names:
        inputs[name] = np.asarray(x[name])[global_rows]
    for name in pools:
        inputs[name] = np.asarray(x[name])[order]
    for name in scale_names:   # per-token scales sit beside the slots (PA-48); per-head / pool scales stay
        s = x.get(name)
        if s is not None and np.ndim(s) == 3:
            inputs[name] = np.asarray(s)[order]
    inputs.update(kv_lens=np.array(sub_kv, dtype=np.int32), page_indices=table,
                  cu_q_lens=np.concatenate([[0], np.cumsum(sub_q)]).astype(np.int32), num_seqs=len(sub_kv))
    params = dict(case.params, sampled_from=case.params.get("rebuild", case.op), num_seqs=len(sub_kv),
                  sampled_sequences=sorted({i for i, _ in sub_rows}),
                  q_lens=[int(q) for q in sub_q], kv_lens=[int(k) for k in sub_kv])

    def select(actual):
        if isinstance(actual, tuple):        # AttentionOutput: rows of out; scores are not sampled
            return np.asarray(actual[0])[global_rows]
        return np.asarray(actual)[global_rows]

    return Sampled(Case(case.op, inputs, params, case.seed), select,
                   what or f"reference on {len(global_rows)} sampled rows of {len(sub_kv)} (sub-)sequences (NU-13)")


def attention_case(rng, *, q_dtype: str, kv_dtype: str, heads, page_size: int, num_pages: int,
                   q_lens, kv_lens, boundary_page: int, pools=None, op="ragged_paged_attention",
                   rebuild: str = "", **options) -> Case:
    """A ragged paged-attention call over a pool of `num_pages` pages (`pools`: (k_pages, v_pages) to
    share between cases, else periodic random pools), sequences spread over the whole pool with a page
    past `boundary_page` each (`spread_pages`)."""
    hq, hkv, d = heads
    pages = spread_pages(rng, num_pages, [-(-int(k) // page_size) for k in kv_lens], boundary_page)
    width = max([len(p) for p in pages] + [1])
    table = np.zeros((len(kv_lens), width), dtype=np.int32)
    for i, p in enumerate(pages):
        table[i, :len(p)] = p
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    if pools is None:
        pools = tuple(periodic(rng, (num_pages, page_size, hkv, d), kv_dtype) for _ in range(2))
    q = periodic(rng, (int(cu[-1]), hq, d), q_dtype, period=1021)    # 10**5 rows at memory speed
    if dtypes.is_quantized_dtype(dtypes.resolve_dtype(kv_dtype)):
        options = dict(options, k_scale=0.0390625, v_scale=0.5)
    inputs = dict(q=q, k_pages=pools[0], v_pages=pools[1], kv_lens=np.asarray(kv_lens, np.int32),
                  page_indices=table, cu_q_lens=cu, num_seqs=len(kv_lens), **options)
    params = dict(dtype=q_dtype, kv_dtype=kv_dtype, page_size=page_size, head_dim=d, hq=hq, hkv=hkv,
                  num_seqs=len(kv_lens), num_pages=num_pages, q_lens=[int(x) for x in q_lens],
                  kv_lens=[int(x) for x in kv_lens], rebuild=rebuild)
    return Case(op, inputs, params)


def touching(case: Case, boundary_page: int, page_size: int) -> list[int]:
    """Sequences with a page at or past `boundary_page`, the one holding the highest page first."""
    x = case.inputs
    found = []
    for i in range(int(x["num_seqs"])):
        pages = _pages_of(x["page_indices"], i, int(x["kv_lens"][i]), page_size)
        if pages.size and pages.max() >= boundary_page:
            found.append((int(pages.max()), i))
    return [i for _, i in sorted(found, reverse=True)]


def page_table(rng, kv_lens, page_size: int) -> tuple[np.ndarray, int]:
    """(page_indices: i32[S, max pages], pool pages): each sequence's pages distinct and spread over a pool
    with 8 pages to spare."""
    counts = [-(-int(k) // page_size) for k in kv_lens]
    num_pages = sum(counts) + 8
    table = np.zeros((len(kv_lens), max(counts + [1])), dtype=np.int32)
    for i, p in enumerate(spread_pages(rng, num_pages, counts, num_pages)):
        table[i, :len(p)] = p
    return table, num_pages


def mla_case(rng, *, dtype: str, dims, kv_lens, rebuild: str = "") -> Case:
    """An absorbed-MLA decode batch (one row per sequence) over a periodic latent pool (ML-1)."""
    H, d_c, d_r, page_size = dims
    table, num_pages = page_table(rng, kv_lens, page_size)
    rows = len(kv_lens)
    inputs = dict(q_nope=floats(rng, (rows, H, d_c), dtype), q_pe=floats(rng, (rows, H, d_r), dtype),
                  c_kv_pages=periodic(rng, (num_pages, page_size, d_c), dtype),
                  k_pe_pages=periodic(rng, (num_pages, page_size, d_r), dtype),
                  kv_lens=np.asarray(kv_lens, np.int32), page_indices=table,
                  cu_q_lens=np.arange(rows + 1, dtype=np.int32), num_seqs=rows)
    params = dict(dtype=dtype, kv_dtype=dtype, page_size=page_size, head_dim=d_c, hq=H, hkv=1, num_seqs=rows,
                  num_pages=num_pages, q_lens=[1] * rows, kv_lens=[int(k) for k in kv_lens], rebuild=rebuild)
    return Case("mla_paged_attention", inputs, params)
