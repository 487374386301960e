"""Scale cases and sampled comparisons of the ops that write pools (write_kv, selective_state_update, conv1d, gated delta)."""
from __future__ import annotations

import numpy as np

from kvconform.conformance.engine.case import Case
from kvconform.conformance.strategies.values import floats
from kvconform.reference import dtypes

from .sampling import Sampled, periodic, sample_indices


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
