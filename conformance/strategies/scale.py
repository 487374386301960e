"""Cases at GPU scale and the sampled comparison that judges them (spec/numerics.md NU-13).

The `scale` profile (profiles.py) runs `conformance/scale_suite/` natively on a GPU: KV and recurrent-state
pools past 2**31 elements (an element offset computed in int32 wraps there), sequences of 128k tokens,
256-row decode batches, and more than 65535 rows or sequences (the grid limit of a CUDA grid's y and z
axes). `scale-smoke` runs the same tests at small sizes (`SIZES`), anywhere, to check this machinery.

A backend computes the whole call; the float64 reference cannot (a 2**31-element pool is 17 GB in
float64, a 128k-token prefill 10**16 operations), so each test judges a sample (NU-13):

* `Sampled` holds a small case that the reference computes in full and a `select` that takes the same
  fields out of the backend's result of the large call, so the op's own checks (CHECKS) compare them as
  they would any case. For attention the small case keeps whole sequences, or cuts a sequence into
  one-row sequences whose kv_len ends at the row's position (the row sees exactly the keys it saw:
  PA-6, PA-7, PA-15), over a pool holding only the pages they read. For writes it keeps whole pages (or
  pool rows) with every token that writes into them, so unwritten slots of the sample are unwritten in
  the large call too.
* What is sampled: rows or sequences that touch the pool past the 2**31-element boundary (the highest
  page or slot of the call always), the longest sequence, the first and last rows, tile boundaries of
  the long prefill, and random others (a fixed seed per test).
* Cheap known answers cover the rest in full: every pool page or row no token writes must come back bit
  for bit (PA-45, RS-4); one pass over the result finds those that changed, and the sample takes them in
  (as unwritten pages of the small case, compared exactly by the op's checks).

A failure's reproducer is the small case (it replays the sampled rows in a compacted pool, not the
offsets of the large one); the large case's params name the test that rebuilds it (`rebuild`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from kvconform.reference import dtypes

from kvconform.conformance.engine.case import Case
from kvconform.conformance.strategies.values import floats

#: 2**31: the first element offset an int32 cannot hold
INT32_LIMIT = 2 ** 31


@dataclass(frozen=True)
class Sizes:
    """The dimensions of one profile's scale cases."""
    pool_elements: int          # each KV / state pool holds more elements than this
    boundary: int               # element offset that sampled rows must cross (2**31 at full size)
    decode_rows: int            # decode batch (rows, and sequences)
    decode_keys: int            # keys of a decode row (at most)
    long_keys: int              # keys of the long decode rows and of the long prefill
    grid_rows: int              # sequences / rows past the grid's y-z limit
    heads: tuple[int, int, int]     # (Hq, Hkv, D) of the KV-pool attention cases
    prefill_heads: tuple[int, int, int]
    page_size: int
    write_tokens: int
    sampled_seqs: int
    sampled_rows: int
    ssu: tuple[int, int, int]   # (H, P, N) of the state pool
    mla: tuple[int, int, int, int]  # (H, d_c, d_r, page_size)
    mla_rows: int
    mla_keys: int


SIZES = {
    "scale": Sizes(pool_elements=INT32_LIMIT + 2 ** 24, boundary=INT32_LIMIT, decode_rows=256, decode_keys=4096,
                   long_keys=131072, grid_rows=70000, heads=(32, 8, 128), prefill_heads=(8, 2, 64), page_size=16,
                   write_tokens=70000, sampled_seqs=16, sampled_rows=24, ssu=(8, 64, 128),
                   mla=(128, 512, 64, 64), mla_rows=256, mla_keys=4096),
    "scale-smoke": Sizes(pool_elements=2 ** 15, boundary=2 ** 14, decode_rows=8, decode_keys=40, long_keys=600,
                         grid_rows=70, heads=(4, 2, 16), prefill_heads=(4, 2, 16), page_size=4, write_tokens=40,
                         sampled_seqs=3, sampled_rows=5, ssu=(2, 4, 16), mla=(4, 16, 8, 4), mla_rows=6, mla_keys=40),
}


def sizes_for(profile: str) -> Sizes:
    if profile not in SIZES:
        raise ValueError(f"profile {profile!r} has no scale sizes (scale profiles: {', '.join(SIZES)})")
    return SIZES[profile]


@dataclass(frozen=True)
class Sampled:
    """A small case the reference computes in full, and how to take its fields out of the backend's
    result of the large call (`select(actual)` -> a result shaped like the small case's)."""
    case: Case
    select: Callable[[Any], Any]
    what: str


# --- values ------------------------------------------------------------------------------------------

PERIOD = 127    # odd: a periodic pool never repeats at an offset of 2**32 elements (an int32 wrap); query rows
                # repeat every 1021 rows (rows that share a q still differ in position and keys)


def periodic(rng: np.random.Generator, shape, dtype: str, *, period: int = PERIOD, **bounds) -> np.ndarray:
    """An array of `shape` whose rows (first axis) repeat `period` random rows (`values.floats`): built at
    memory speed, yet no two rows an int32 wrap apart (2**32 elements, a multiple of no odd period's row
    count times a power of two) hold the same values by construction of the pattern."""
    shape = tuple(int(s) for s in shape)
    block = floats(rng, (min(period, shape[0]),) + shape[1:], dtype, **bounds)
    out = np.empty(shape, dtype=block.dtype)
    for start in range(0, shape[0], block.shape[0]):
        stop = min(shape[0], start + block.shape[0])
        out[start:stop] = block[:stop - start]
    return out


def pick_dtypes(claims, acts=("bfloat16", "float16", "float32"),
                kvs=("float8_e4m3fn", "float8_e5m2", "int8", "bfloat16", "float16", "float32")) -> tuple[str, str]:
    """(activation, storage) dtypes within the claims: 16-bit activations first, the narrowest storage
    first (a 2**31-element pool of 1-byte elements is 2 GB, of float32 8 GB). Quantized storage only with
    the `quantized_kv` feature."""
    from kvconform.conformance.strategies import constraints
    if "quantized_kv" not in (claims.features or ()):
        kvs = tuple(k for k in kvs if not dtypes.is_quantized_dtype(dtypes.resolve_dtype(k)))
    return constraints.dtype_pairs(claims, acts, kvs, "a scale case")[0]


def spread_pages(rng: np.random.Generator, num_pages: int, counts, boundary_page: int) -> list[np.ndarray]:
    """Distinct pages for sequences of `counts` pages each, drawn over the whole pool, every sequence with
    at least one page at or past `boundary_page` when the pool has enough of them (those pages hold
    elements past the boundary offset)."""
    total = int(sum(counts))
    high = np.arange(boundary_page, num_pages)
    enough = len(high) >= sum(1 for c in counts if c)
    takes_high = [1 if c and enough else 0 for c in counts]
    chosen_high = rng.choice(high, size=sum(takes_high), replace=False) if sum(takes_high) else np.zeros(0, int)
    rest = np.setdiff1d(np.arange(num_pages), chosen_high, assume_unique=True)
    chosen_rest = rng.choice(rest, size=total - len(chosen_high), replace=False)
    out, hi_at, rest_at = [], 0, 0
    for c, h in zip(counts, takes_high):
        pages = np.concatenate([chosen_high[hi_at:hi_at + h], chosen_rest[rest_at:rest_at + c - h]])
        hi_at, rest_at = hi_at + h, rest_at + c - h
        out.append(rng.permutation(pages).astype(np.int32))
    return out


def sample_indices(rng: np.random.Generator, population: int, must, k: int) -> np.ndarray:
    """Sorted distinct indices: every one of `must` (in range) and random others up to `k` in all."""
    must = sorted({int(m) for m in must if 0 <= int(m) < population})
    others = np.setdiff1d(np.arange(population), must)
    extra = rng.choice(others, size=min(len(others), max(0, k - len(must))), replace=False) if len(others) else []
    return np.array(sorted(set(must) | {int(e) for e in extra}), dtype=np.int64)


# --- attention (ragged_paged_attention, mla_paged_attention) -------------------------------------------

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


# --- writes (write_kv, selective_state_update) ------------------------------------------------------

def changed_rows(before: np.ndarray, after: np.ndarray, skip: np.ndarray, *, chunk: int = 4096) -> np.ndarray:
    """Indices of first-axis rows not in `skip` whose bits differ between `before` and `after` (a pool and
    the backend's pool), scanned in chunks so no pool-sized temporary is made."""
    if before.shape != after.shape or before.dtype.itemsize != np.asarray(after).dtype.itemsize:
        return np.arange(before.shape[0])          # a wrong shape or dtype: every row counts as changed
    skip_mask = np.zeros(before.shape[0], dtype=bool)
    skip_mask[np.asarray(skip, dtype=np.int64)] = True
    view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[before.dtype.itemsize]
    b = before.view(view).reshape(before.shape[0], -1)
    a = np.asarray(after).view(view).reshape(before.shape[0], -1)
    found = []
    for start in range(0, before.shape[0], chunk):
        stop = min(before.shape[0], start + chunk)
        diff = np.any(a[start:stop] != b[start:stop], axis=1) & ~skip_mask[start:stop]
        found.extend((np.flatnonzero(diff) + start).tolist())
    return np.asarray(found, dtype=np.int64)


def write_kv_case(rng, *, act: str, kv_dtype: str, heads, page_size: int, num_pages: int, tokens: int,
                  boundary_page: int, pools=None, rebuild: str = "") -> Case:
    """`tokens` new tokens written to distinct slots spread over the whole pool, every page past
    `boundary_page` that the call touches holding at least one of them (the highest page always)."""
    _, hkv, d = heads
    total, first_high = num_pages * page_size, boundary_page * page_size
    pick = {total - 1}
    pick.update(int(t) for t in first_high + rng.choice(total - first_high, size=min(tokens // 2, total - first_high),
                                                          replace=False))
    while len(pick) < tokens:
        pick.update(int(t) for t in rng.integers(0, total, size=tokens - len(pick)))
    slots = rng.permutation(np.fromiter(pick, dtype=np.int64))[:tokens].astype(np.int32)
    if pools is None:
        pools = tuple(periodic(rng, (num_pages, page_size, hkv, d), kv_dtype) for _ in range(2))
    k, v = (floats(rng, (tokens, hkv, d), act) for _ in range(2))
    inputs = dict(k_pages=pools[0], v_pages=pools[1], k=k, v=v, slot_mapping=slots)
    if dtypes.is_quantized_dtype(dtypes.resolve_dtype(kv_dtype)):
        inputs.update(k_scale=0.0390625, v_scale=0.5)
    params = dict(dtype=act, kv_dtype=kv_dtype, page_size=page_size, head_dim=d, hkv=hkv, num_pages=num_pages,
                  tokens=tokens, rebuild=rebuild)
    return Case("write_kv", inputs, params)


def write_kv_sample(case: Case, actual, rng, k_pages_sampled: int, boundary_page: int) -> Sampled:
    """Whole pages: the highest written page, written pages past the boundary and at random, every
    unwritten page whose bits changed (found by a full scan of both returned pools, PA-45), and the
    unwritten pages next to the highest written one; with every token that writes into them."""
    x = case.inputs
    page_size = x["k_pages"].shape[1]
    slots = np.asarray(x["slot_mapping"], dtype=np.int64)
    live = slots >= 0
    written = np.unique(slots[live] // page_size)
    high = written[written >= boundary_page]
    k_out, v_out = np.asarray(actual[0]), np.asarray(actual[1])
    stray = np.union1d(changed_rows(x["k_pages"], k_out, written), changed_rows(x["v_pages"], v_out, written))
    top = int(written.max()) if written.size else 0
    near = [p for p in (top - 1, top + 1) if 0 <= p < x["k_pages"].shape[0] and p not in set(written.tolist())]
    chosen_written = written[sample_indices(rng, written.size, [written.size - 1] + list(
        np.searchsorted(written, high[:2])), k_pages_sampled)] if written.size else written
    pages = np.unique(np.concatenate([chosen_written, stray[:64], np.asarray(near, dtype=np.int64)])).astype(np.int64)
    remap = {int(p): j for j, p in enumerate(pages)}
    keep = np.flatnonzero(live & np.isin(slots // page_size, pages))
    sub_slots = np.array([remap[int(s // page_size)] * page_size + int(s % page_size) for s in slots[keep]],
                         dtype=np.int32)
    inputs = dict(x, k_pages=x["k_pages"][pages], v_pages=x["v_pages"][pages], k=np.asarray(x["k"])[keep],
                  v=np.asarray(x["v"])[keep], slot_mapping=sub_slots)
    for name in ("k_scale", "v_scale"):
        s = x.get(name)
        if s is not None and np.ndim(s) == 3:
            inputs[name] = np.asarray(s)[pages]
    params = dict(case.params, sampled_from=case.params.get("rebuild", "write_kv"), num_pages=int(pages.size),
                  sampled_pages=[int(p) for p in pages],
                  tokens=int(keep.size), stray_pages=[int(p) for p in stray[:64]])

    def select(result):
        return type(result)(*(np.asarray(f)[pages] for f in result)) if isinstance(result, tuple) else result

    return Sampled(Case("write_kv", inputs, params, case.seed), select,
                   f"reference on {pages.size} sampled pages ({len(stray)} unwritten pages changed) (NU-13)")


def ssu_case(rng, *, act: str, pool_dtype: str, shape, rows: int, boundary_slot: int, rebuild: str = "") -> Case:
    """A Mamba2 selective_state_update of `rows` rows over a pool of shape (num_slots, H, P, N), slots
    spread over the whole pool with some past `boundary_slot` (the last slot always)."""
    num_slots, H, P, N = shape
    idx = spread_slots(rng, num_slots, rows, boundary_slot)
    G = 1
    state = periodic(rng, shape, pool_dtype)
    x = floats(rng, (rows, H, P), act)
    dt = np.abs(floats(rng, (rows, H), act, max_exp=0))
    A = -np.abs(floats(rng, (H,), act, max_exp=0))
    B, C = (floats(rng, (rows, G, N), act) for _ in range(2))
    inputs = dict(state=state, x=x, dt=dt, A=A, B=B, C=C, D=floats(rng, (H,), act), dt_softplus=True,
                  state_indices=idx)
    params = dict(dtype=act, kv_dtype=pool_dtype, num_seqs=rows, tokens=rows, mamba2=True, heads=H, groups=G,
                  p=P, n=N, num_slots=num_slots, rebuild=rebuild)
    return Case("selective_state_update", inputs, params)


def ssu_sample(case: Case, actual, rng, k_rows: int, boundary_slot: int) -> Sampled:
    """`rows_sample` of a selective_state_update call."""
    return rows_sample(case, actual, rng, k_rows, boundary_slot, pool="state", per_row=("x", "dt", "B", "C", "z"))


def rows_sample(case: Case, actual, rng, k_rows: int, boundary_slot: int, *, pool: str, per_row) -> Sampled:
    """A one-token-per-row recurrent call (selective_state_update, causal_conv1d_update,
    gated_delta_rule_update; result (out, pool)): rows with their slots, the row writing the highest slot,
    rows writing past the boundary and at random; plus every pool row no row writes whose bits changed
    (RS-4, full scan) and the rows next to the highest written slot, as unaddressed rows of the small pool
    (compared exactly)."""
    x = case.inputs
    idx = np.asarray(x["state_indices"], dtype=np.int64)
    live = np.flatnonzero(idx >= 0)
    order = live[np.argsort(idx[live])]
    high = [int(r) for r in order if idx[r] >= boundary_slot][-2:]
    rows = order[sample_indices(rng, order.size, [order.size - 1] + [int(np.searchsorted(idx[order], idx[r]))
                                                                      for r in high], k_rows)]
    stray = changed_rows(x[pool], np.asarray(actual[1]), idx[live])
    top = int(idx[live].max())
    near = [s for s in (top - 1, top + 1) if 0 <= s < x[pool].shape[0] and s not in set(idx[live].tolist())]
    extra = np.unique(np.concatenate([stray[:64], np.asarray(near, dtype=np.int64)])).astype(np.int64)
    slots = np.concatenate([idx[rows], extra])
    inputs = dict(x, state_indices=np.arange(rows.size, dtype=np.int32))
    inputs[pool] = np.asarray(x[pool])[slots]
    for name in per_row:
        if x.get(name) is not None:
            inputs[name] = np.asarray(x[name])[rows]
    params = dict(case.params, sampled_from=case.params.get("rebuild", case.op), num_seqs=int(rows.size),
                  tokens=int(rows.size), num_slots=int(slots.size), sampled_slots=[int(s) for s in idx[rows]],
                  stray_slots=[int(s) for s in stray[:64]])

    def select(result):
        return type(result)(np.asarray(result[0])[rows], np.asarray(result[1])[slots])

    return Sampled(Case(case.op, inputs, params, case.seed), select,
                   f"reference on {rows.size} sampled rows ({len(stray)} unaddressed pool rows changed) (NU-13)")


def spread_slots(rng, num_slots: int, rows: int, boundary_slot: int) -> np.ndarray:
    """`rows` distinct slots over the whole pool: the last slot, a quarter past `boundary_slot`, the rest
    anywhere."""
    pick = [num_slots - 1]
    pick += rng.permutation(np.arange(boundary_slot, num_slots - 1))[:max(0, min(rows // 4, rows - 1))].tolist()
    pick += rng.choice(np.setdiff1d(np.arange(num_slots), pick), size=rows - len(pick), replace=False).tolist()
    return rng.permutation(np.asarray(pick, dtype=np.int64)).astype(np.int32)


def conv_rows_case(rng, *, act: str, pool_dtype: str, rows: int, channels: int, width: int, rebuild: str = "") -> Case:
    """A one-token causal_conv1d_update of `rows` rows (RS-10 .. RS-12), slots spread over the pool."""
    num_slots = rows + 16
    inputs = dict(x=floats(rng, (rows, channels), act),
                  conv_state=periodic(rng, (num_slots, channels, width - 1), pool_dtype),
                  weight=floats(rng, (channels, width), act), bias=floats(rng, (channels,), act), activation="silu",
                  state_indices=spread_slots(rng, num_slots, rows, rows))
    params = dict(dtype=act, kv_dtype=pool_dtype, num_seqs=rows, tokens=rows, num_slots=num_slots, rebuild=rebuild)
    return Case("causal_conv1d_update", inputs, params)


def gdn_update_case(rng, *, act: str, pool_dtype: str, rows: int, heads, rebuild: str = "") -> Case:
    """A gated_delta_rule_update of `rows` rows (RS-28 .. RS-31), L2-normalised q/k, slots spread over the pool;
    heads = (Hk, Hv, K, V)."""
    hk, hv, K, V = heads
    num_slots = rows + 16
    inputs = dict(q=floats(rng, (rows, hk, K), act), k=floats(rng, (rows, hk, K), act), v=floats(rng, (rows, hv, V), act),
                  g=-np.abs(floats(rng, (rows, hv), act, max_exp=-1)),
                  beta=np.abs(floats(rng, (rows, hv), act, max_exp=-1)),
                  state=periodic(rng, (num_slots, hv, K, V), pool_dtype), use_qk_l2norm=True,
                  state_indices=spread_slots(rng, num_slots, rows, rows))
    params = dict(dtype=act, kv_dtype=pool_dtype, num_seqs=rows, tokens=rows, num_slots=num_slots, rebuild=rebuild)
    return Case("gated_delta_rule_update", inputs, params)


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
